"""The SNR filter, group selection, advantages, DAPO's dynamic sampling, the overlong penalty, the
prompt groups and T3 truncation never look at the observation type.

The same trajectory records (group ids, returns, lengths, success) with no ``image`` entry, with
all-black images and with random images of different sizes per row (a lazy stack, as image rows
of different boards give) produce identical selections, statistics, advantages and mini-batches;
the kept rows carry their own images along. T3 on an active-reasoning env plays the same episode
with and without an env transform that writes an ``image`` every step. And none of these modules
names the image key.
"""

from __future__ import annotations

import tensordict

tensordict.set_list_to_stack(True).set()

import inspect  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict, lazy_stack  # noqa: E402
from torchrl.data import LazyStackStorage, ReplayBuffer, Unbounded  # noqa: E402
from torchrl.data.llm import History  # noqa: E402
from torchrl.envs import Transform  # noqa: E402

from ragen_torchrl import keys  # noqa: E402
from ragen_torchrl.data import groups as groups_module  # noqa: E402
from ragen_torchrl.data import minibatch as minibatch_module  # noqa: E402
from ragen_torchrl.data.groups import Groups  # noqa: E402
from ragen_torchrl.data.minibatch import group_minibatches  # noqa: E402
from ragen_torchrl.envs import make_env  # noqa: E402
from ragen_torchrl.objectives import dapo as dapo_module  # noqa: E402
from ragen_torchrl.objectives.dapo import DynamicSampler  # noqa: E402
from ragen_torchrl.transforms import advantage as advantage_module  # noqa: E402
from ragen_torchrl.transforms import group_sampler as sampler_module  # noqa: E402
from ragen_torchrl.transforms import group_selection as selection_module  # noqa: E402
from ragen_torchrl.transforms import overlong as overlong_module  # noqa: E402
from ragen_torchrl.transforms import records as records_module  # noqa: E402
from ragen_torchrl.transforms import snr as snr_module  # noqa: E402
from ragen_torchrl.transforms import t3 as t3_module  # noqa: E402
from ragen_torchrl.transforms import t3_rules as t3_rules_module  # noqa: E402
from ragen_torchrl.transforms.advantage import GroupAdvantage  # noqa: E402
from ragen_torchrl.transforms.group_sampler import TopVarianceGroupSampler  # noqa: E402
from ragen_torchrl.transforms.overlong import OverlongPenalty  # noqa: E402
from ragen_torchrl.transforms.snr import SNRFilter  # noqa: E402
from ragen_torchrl.transforms.t3 import T3Truncation  # noqa: E402

# five groups of three; variances 1/3, 0, 4/3, 1/3 (a permuted copy of group 0), 0.0833
GROUPS = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
RETURNS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 2.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.0, 0.0]
SUCCESS = [r >= 1.0 for r in RETURNS]
IMAGES = ("none", "black", "random")


def image_of(kind: str, row: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    # board images of different sizes (rows of a lazy stack need not agree)
    h, w = 28 * (1 + row % 3), 28 * (1 + row % 2)
    if kind == "black":
        return torch.zeros(3, h, w, dtype=torch.uint8)
    return torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(row))


def records(kind: str, group_ids=GROUPS, returns=RETURNS) -> TensorDict:
    """Trajectory records as a rollout gives them: a lazy stack with ragged tokens, text and (maybe) images."""
    rows = []
    for i, (g, r) in enumerate(zip(group_ids, returns)):
        row = TensorDict(
            group_id=torch.tensor(g),
            episode_return=torch.tensor(r),
            success=torch.tensor(r >= 1.0),
            num_tokens=torch.tensor(10 + 7 * i),
            tokens=torch.arange(i + 1),
            row=torch.tensor(i),
            text=f"trajectory {i}",
        )
        image = image_of(kind, i)
        if image is not None:
            row.set(keys.IMAGE, image)
        rows.append(row)
    return lazy_stack(rows)


def plain(td: TensorDict | None) -> dict:
    """Everything but the image, as Python values (comparable across the variants)."""
    if td is None:
        return {}
    return {
        k: td.get(k).tolist() if isinstance(td.get(k), torch.Tensor) else list(td.get(k))
        for k in ("group_id", "episode_return", "row", "text", "advantage", "overlong_penalty")
        if k in td.keys()
    }


def assert_images_follow_rows(td: TensorDict | None, kind: str) -> None:
    if td is None or kind == "none":
        return
    for r, image in zip(td["row"].tolist(), td.unbind(0)):
        assert torch.equal(image.get(keys.IMAGE), image_of(kind, r))


def same_for_every_image_kind(fn):
    """``fn(records)`` for each image variant; assert the outputs agree and return them."""
    outs = {kind: fn(records(kind)) for kind in IMAGES}
    first = outs["none"]
    for kind in IMAGES[1:]:
        assert outs[kind] == first, kind
    return first


FILTERS = [
    {},  # the paper's rule: variance, top_p 0.9 linear, zero-variance groups excluded
    {"strategy": "top_k_abs", "value": 2},
    {"strategy": "min_p", "value": 0.5},
    {"metric": "reward_std", "mode": "softmax", "include_zero": True},
    {"metric": "length", "strategy": "top_k", "value": 0.4},
]


@pytest.mark.parametrize("kwargs", FILTERS, ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()) or "default")
def test_snr_filter_selects_the_same_groups_with_or_without_images(kwargs):
    def run(td):
        kept, stats = SNRFilter(**kwargs).filter(td)
        mask, _ = SNRFilter(**kwargs).row_mask(td)
        return plain(kept), stats, mask.tolist()

    kept, _, mask = same_for_every_image_kind(run)
    assert sum(mask) > 0
    for kind in IMAGES:
        out, _ = SNRFilter(**kwargs).filter(records(kind))
        assert_images_follow_rows(out, kind)


def test_replay_buffer_filter_and_top_variance_sampler_ignore_images():
    def run(td):
        rb = ReplayBuffer(storage=LazyStackStorage(64), transform=SNRFilter(), batch_size=4)
        rb.extend(td)
        stored = rb[: len(rb)]
        sampler_rb = ReplayBuffer(storage=LazyStackStorage(64), sampler=TopVarianceGroupSampler(), batch_size=4)
        sampler_rb.extend(td)
        rows, stats = sampler_rb.sampler.selection(sampler_rb.storage)
        return plain(stored), rows.tolist(), stats

    stored, rows, _ = same_for_every_image_kind(run)
    assert sorted(set(stored["group_id"])) == [0, 2, 3]  # 4/3 + 1/3 + 1/3 >= 0.9 * (2 + 1/12)
    assert rows == [i for i, g in enumerate(GROUPS) if g in (0, 2, 3)]


@pytest.mark.parametrize("scale", ["std", "none"])
def test_group_advantage_and_groups_ignore_images(scale):
    def run(td):
        adv = GroupAdvantage(scale=scale)(td.clone())["advantage"].reshape(-1).tolist()
        g = Groups.from_values(td["group_id"], td["episode_return"])
        from_groups = GroupAdvantage(scale=scale).write(td.clone(), g)["advantage"].reshape(-1).tolist()
        batches = group_minibatches(g, 5, generator=torch.Generator().manual_seed(0))
        return adv, from_groups, g.mean.tolist(), g.var.tolist(), [b.tolist() for b in batches]

    adv, from_groups, mean, _, batches = same_for_every_image_kind(run)
    assert adv == pytest.approx(from_groups)
    # group 2 (returns 0, 2, 0): mean 2/3; centred -2/3, 4/3, -2/3
    assert mean[2] == pytest.approx(2 / 3)
    if scale == "none":
        assert adv[6:9] == pytest.approx([-2 / 3, 4 / 3, -2 / 3], abs=1e-6)
    assert sorted(r for b in batches for r in b) == list(range(len(GROUPS)))


def test_overlong_penalty_and_dynamic_sampling_ignore_images():
    def run(td):
        shaped = OverlongPenalty(max_length=100, cache_length=40)(td.clone())

        def more(n):  # one informative refill group, with or without images like the batch
            return records(kind_of(td), group_ids=[0] * 3, returns=[1.0, 0.0, 1.0])[:3]

        out, stats = DynamicSampler(max_extra_rollouts=1)(td, more)
        return plain(shaped), plain(out), stats

    def kind_of(td):
        if keys.IMAGE not in td[0].keys():
            return "none"
        return "black" if int(td[0][keys.IMAGE].max()) == 0 else "random"

    shaped, out, stats = same_for_every_image_kind(run)
    assert shaped["overlong_penalty"][:3] == pytest.approx([0.0, 0.0, 0.0])  # 10..24 tokens: below 60
    assert shaped["overlong_penalty"][-1] < 0.0  # 108 tokens: past the 100-token limit
    # success: groups 1 (all succeed) and 4 (all fail) carry no signal; one refill group replaces one
    assert sorted(set(out["group_id"])) == [0, 2, 3, 5]
    assert stats["dynamic_sampling/shortfall"] == 1.0


# --------------------------------------------------------------------------- T3
class WriteImage(Transform):
    """An env transform writing a random uint8 ``image`` at every reset and step (as a visual env does)."""

    def __init__(self):
        super().__init__()
        self.generator = torch.Generator().manual_seed(0)

    def _image(self, n: int) -> torch.Tensor:
        return torch.randint(0, 256, (n, 3, 28, 28), dtype=torch.uint8, generator=self.generator)

    def _reset(self, tensordict, tensordict_reset):
        tensordict_reset.set(keys.IMAGE, self._image(tensordict_reset.batch_size[0]))
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        next_tensordict.set(keys.IMAGE, self._image(next_tensordict.batch_size[0]))
        return next_tensordict

    def transform_observation_spec(self, observation_spec):
        observation_spec[keys.IMAGE] = Unbounded(shape=(*observation_spec.shape, 3, 28, 28), dtype=torch.uint8)
        return observation_spec


def play_circuit_decoding(with_images: bool) -> list[dict]:
    env = make_env("circuit_decoding", num_envs=2)
    if with_images:
        env = env.append_transform(WriteImage())
    env = env.append_transform(T3Truncation("circuit_decoding"))
    n = 2
    td = env.reset(TensorDict(level_seed=torch.tensor([4, 4]), group_id=torch.tensor([0, 0]), batch_size=[n]))
    # row 0 repeats a query that stops shrinking the hypotheses (T3 fires on the 4th), row 1 varies it
    script = [["A(1,0,1)", "A(1,0,1)"], ["A(1,0,1)", "A(0,1,1)"], ["A(1,0,1)", "A(1,1,0)"], ["A(1,0,1)", "A(0,0,1)"]]
    script.append(["A(1,1,1)", "A(1,1,1)"])  # the forced-answer turn of row 0: a query ends it
    outs = []
    for replies in script:
        msg = History(
            role=["assistant"] * n,
            content=[f"<think>t</think><interact>{q}</interact>" for q in replies],
            batch_size=(n,),
        )
        td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
        out = env.step(td)["next"]
        assert (keys.IMAGE in out.keys()) == with_images
        outs.append(
            {
                k: out.get(k).reshape(-1).tolist()
                for k in ("t3_rule_fired", "truncated_by_t3", "done", "truncated", "reward", "progress")
            }
            | {"prompt": [out["history", "prompt"][r].content[-1] for r in range(n)]}
        )
        if all(out["done"].reshape(-1).tolist()):
            break
        td = out
    return outs


def test_t3_truncation_plays_the_same_episode_with_or_without_images():
    plain_run, visual_run = play_circuit_decoding(False), play_circuit_decoding(True)
    assert visual_run == plain_run
    fired = [o["t3_rule_fired"] for o in plain_run]
    assert [f[0] for f in fired] == [False, False, False, True, False]  # row 0 fires on its 4th query
    assert plain_run[-1]["truncated_by_t3"][0] and plain_run[-1]["done"][0]


# --------------------------------------------------------------------------- the source
MODALITY_FREE = [
    snr_module,
    selection_module,
    sampler_module,
    advantage_module,
    overlong_module,
    records_module,
    t3_module,
    t3_rules_module,
    groups_module,
    minibatch_module,
    dapo_module,
]


@pytest.mark.parametrize("module", MODALITY_FREE, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_selection_advantage_and_t3_code_never_names_the_image_key(module):
    source = inspect.getsource(module)
    for name in ("IMAGE", f'"{keys.IMAGE}"', f"'{keys.IMAGE}'", "pixel"):
        assert name not in source, f"{module.__name__} mentions {name}"
