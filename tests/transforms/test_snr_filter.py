"""SNRFilter as a TorchRL replay-buffer write-time transform, and the filter config group."""

import math
from pathlib import Path

import pytest
import tensordict
import torch
import yaml
from omegaconf import OmegaConf
from tensordict import TensorDict, lazy_stack
from torchrl.data import LazyStackStorage, LazyTensorStorage, ReplayBuffer
from torchrl.envs.transforms import Compose, Transform

from ragen_torchrl.options import FILTER_CONFIG_DEFAULTS
from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR
from ragen_torchrl.transforms.snr import SNRFilter, build_filter, validate_filter_config

tensordict.set_list_to_stack(True).set()

CONFIG_DIR = Path(PACKAGE_CONFIG_DIR) / "filter"

# Three groups of two: variance (the default metric) {1, 0} = .5, {1, 1} = 0, {0, 2} = 2.
# top_p .9 linear: thr .9 * 2.5 - .01 = 2.24 -> group 2 (2.0), then group 0 (2.5).
# (std .7071, 0, 1.4142: thr .9 * 2.1213 - .01 = 1.8992 -> the same groups 2, 0.)
GROUPS = [0, 0, 1, 1, 2, 2]
RETURNS = [1.0, 0.0, 1.0, 1.0, 0.0, 2.0]
KEPT_ROWS = [0, 1, 4, 5]


def records(group_ids=GROUPS, returns=RETURNS):
    """Lazy stack of trajectory records with ragged token tensors and text, as a rollout gives."""
    rows = [
        TensorDict(
            group_id=torch.tensor(g),
            episode_return=torch.tensor(r),
            num_tokens=torch.tensor(i + 1),
            tokens=torch.arange(i + 1),  # ragged across rows
            text=f"trajectory {i}",
        )
        for i, (g, r) in enumerate(zip(group_ids, returns))
    ]
    return lazy_stack(rows)


def dense(group_ids=GROUPS, returns=RETURNS):
    return TensorDict(
        group_id=torch.tensor(group_ids),
        episode_return=torch.tensor(returns),
        row=torch.arange(len(group_ids)),
        batch_size=[len(group_ids)],
    )


class Recorder(Transform):
    """Write-time transform that records the number of rows it sees (None when dropped)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def _inv_call(self, td):
        self.seen.append(None if td is None else td.batch_size[0])
        return td

    def forward(self, td):
        return td


class DropAll(Transform):
    def _inv_call(self, td):
        return None

    def forward(self, td):
        return td


def test_direct_call_keeps_whole_groups_and_stats():
    filt = SNRFilter()
    out = filt(records())
    assert out.batch_size == torch.Size([4])
    assert out.get("group_id").tolist() == [0, 0, 2, 2]
    assert out.get("text").tolist() == [f"trajectory {i}" for i in KEPT_ROWS]
    assert [row["tokens"].tolist() for row in out.unbind(0)] == [list(range(i + 1)) for i in KEPT_ROWS]
    mask, s = filt.row_mask(records())
    assert mask.tolist() == [True, True, False, False, True, True]
    kept, stats = filt.filter(records())
    assert kept.get("group_id").tolist() == [0, 0, 2, 2] and stats == s
    assert all(isinstance(v, float) for v in s.values())
    assert s["num_groups"] == 3 and s["kept_groups"] == 2
    assert s["kept_ratio"] == pytest.approx(2 / 3)
    assert s["num_trajectories"] == 6 and s["kept_trajectories"] == 4
    assert s["zero_variance_groups"] == 1
    assert s["in_group_std_mean"] == pytest.approx((math.sqrt(0.5) + 0 + math.sqrt(2)) / 3)  # .7071
    assert s["in_group_std_max"] == pytest.approx(math.sqrt(2))
    assert s["kept_in_group_std_mean"] == pytest.approx((math.sqrt(0.5) + math.sqrt(2)) / 2)  # 1.0607
    assert s["kept_in_group_std_max"] == pytest.approx(math.sqrt(2))
    assert s["empty_after_filter"] == 0.0
    # RV = [.5, 0, 2]: mean .8333; population std sqrt(((-1/3)^2 + (-5/6)^2 + (7/6)^2) / 3) = .8498
    assert s["heterogeneity"] == pytest.approx(0.8498365856 / 0.8333333333)  # 1.0198


def test_all_kept_returns_input_and_nothing_kept_returns_none():
    filt = SNRFilter(value=1.0, include_zero=True)
    td = dense()
    assert filt(td) is td
    assert filt.filter(td)[1]["kept_ratio"] == 1.0
    const = dense([0, 0, 1, 1], [1.0, 1.0, 0.0, 0.0])
    assert filt.filter(const)[0] is not None  # include_zero + p >= 1 keeps zero groups too
    filt = SNRFilter()
    assert filt(const) is None
    kept, stats = filt.filter(const)
    assert kept is None and stats["empty_after_filter"] == 1.0
    assert stats["kept_ratio"] == 0.0 and stats["heterogeneity"] == 0.0
    assert filt(None) is None and filt._inv_call(None) is None and filt.filter(None) == (None, {})


def test_empty_batch():
    filt = SNRFilter()
    empty = TensorDict(group_id=torch.zeros(0, dtype=torch.long), episode_return=torch.zeros(0), batch_size=[0])
    assert filt(empty) is None
    kept, stats = filt.filter(empty)
    assert kept is None and stats["num_groups"] == 0.0 and stats["empty_after_filter"] == 1.0


def test_string_group_ids_and_metric_columns():
    rows = [TensorDict(group_id=f"level-{g}", episode_return=torch.tensor(r)) for g, r in zip(GROUPS, RETURNS)]
    out = SNRFilter()(lazy_stack(rows))
    assert out.get("group_id").tolist() == ["level-0", "level-0", "level-2", "level-2"]
    # length metric: group means (1+2)/2 = 1.5, (3+4)/2 = 3.5, (5+6)/2 = 5.5; top_k .34 -> int(1.02) = 1
    out = SNRFilter(metric="length", strategy="top_k", value=0.34)(records())
    assert out.get("group_id").tolist() == [2, 2]
    with pytest.raises(KeyError, match="'entropy' not found"):
        SNRFilter(metric="entropy")(records())


def test_per_step_returns_rejected():
    td = TensorDict(group_id=torch.tensor([0, 0]), episode_return=torch.ones(2, 3), batch_size=[2])
    with pytest.raises(ValueError, match="one value per trajectory"):
        SNRFilter()(td)


def test_in_replay_buffer_write_time():
    filt = SNRFilter()
    rb = ReplayBuffer(storage=LazyStackStorage(100), transform=Compose(filt), batch_size=4)
    index = rb.extend(records())
    assert len(rb) == 4 and index.numel() == 4
    stored = rb.storage.get(torch.arange(len(rb)))
    assert stored.get("group_id").tolist() == [0, 0, 2, 2]
    assert stored.get("text").tolist() == [f"trajectory {i}" for i in KEPT_ROWS]
    # rb.sample() calls forward on the mini-batch; after write-time use the filter passes it through
    sample = rb.sample()
    assert sample.batch_size == torch.Size([4])
    # a batch of constant groups is dropped entirely at write time
    rb.extend(records([5, 5], [1.0, 1.0]))
    assert len(rb) == 4


def test_filter_on_forward_switch():
    # forced on: filters on every call, including rb.sample()'s call on mini-batches (rarely wanted)
    filt = SNRFilter(filter_on_forward=True)
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=filt, batch_size=2)
    rb.extend(dense())
    assert filt(dense()).batch_size == torch.Size([4])  # still filters when called
    off = SNRFilter(filter_on_forward=False)
    td = dense()
    assert off(td) is td and off.inv(td).batch_size == torch.Size([4])
    auto = SNRFilter()
    assert auto(dense()).batch_size == torch.Size([4])  # not used at write time yet: filters
    auto.inv(dense())
    assert auto(dense()).batch_size == torch.Size([6])  # now forward = sampling hook: pass through


def test_compose_order():
    # Compose runs write-time transforms in reverse order: the filter listed LAST runs FIRST.
    after = Recorder()
    rb = ReplayBuffer(storage=LazyStackStorage(100), transform=Compose(after, SNRFilter()))
    rb.extend(records())
    assert after.seen == [4]  # the recorder (e.g. an advantage transform) sees only kept groups
    before = Recorder()
    rb = ReplayBuffer(storage=LazyStackStorage(100), transform=Compose(SNRFilter(), before))
    rb.extend(records())
    assert before.seen == [6] and len(rb) == 4


def test_none_passes_through_compose():
    # DropAll runs first (listed last) and hands None to the filter, which passes it on.
    filt = SNRFilter()
    rec = Recorder()
    rb = ReplayBuffer(storage=LazyStackStorage(100), transform=Compose(rec, filt, DropAll()))
    index = rb.extend(records())
    assert len(rb) == 0 and index.numel() == 0
    assert rec.seen == [None]
    # and the filter's own None reaches the next transform
    rec = Recorder()
    rb = ReplayBuffer(storage=LazyStackStorage(100), transform=Compose(rec, SNRFilter()))
    rb.extend(records([1, 1], [0.0, 0.0]))
    assert rec.seen == [None] and len(rb) == 0


def test_constructor_validation():
    with pytest.raises(ValueError, match="reward_std"):
        SNRFilter(metric="std")
    with pytest.raises(ValueError, match="top_p, top_k"):
        SNRFilter(strategy="best")
    with pytest.raises(ValueError, match="include_zero must be true or false"):
        SNRFilter(include_zero="no")
    with pytest.raises(ValueError, match="batch of trajectories"):
        SNRFilter()(TensorDict(group_id=torch.tensor(0), episode_return=torch.tensor(1.0)))


# ---------------------------------------------------------------------- config group
CONFIG_FILES = sorted(CONFIG_DIR.glob("*.yaml"))


def test_config_files_exist():
    names = {p.stem for p in CONFIG_FILES}
    presets = {
        "none",
        "snr_top_p",
        "snr_reference",
        "snr_top_k",
        "snr_smallest",
        "snr_entropy",
        "snr_entropy_variance",
        "snr_length",
    }
    assert presets <= names
    assert "snr_paper" not in names  # renamed to snr_reference (it is the reference code's rule)


def _composed(name: str) -> dict:
    """The ``filter`` node Hydra composes for ``filter=name`` (presets inherit from snr_top_p)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR.parent), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=[f"filter={name}"]).filter)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
def test_every_config_has_exactly_the_schema(path):
    raw = _composed(path.stem)
    assert set(raw) == set(FILTER_CONFIG_DEFAULTS)
    assert raw["name"] == path.stem
    cfg = validate_filter_config(OmegaConf.create(raw))  # DictConfig works too
    filt = build_filter(raw)
    assert (filt is None) == (not cfg["enabled"])


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.stem)
def test_presets_inherit_from_the_paper_rule_and_state_only_what_differs(path):
    raw = yaml.safe_load(path.read_text())
    if path.stem == "snr_top_p":
        assert list(raw) == list(FILTER_CONFIG_DEFAULTS)  # the one complete preset: the base
        return
    assert raw["defaults"] == ["snr_top_p", "_self_"]
    base = yaml.safe_load((CONFIG_DIR / "snr_top_p.yaml").read_text())
    own = {k: v for k, v in raw.items() if k not in ("defaults", "name")}
    assert own and all(base[k] != v for k, v in own.items()), own


def test_filter_grad_snr_moved_to_diagnostics():
    with pytest.raises(ValueError, match="filter.grad_snr moved to diagnostics.grad_snr"):
        validate_filter_config({"grad_snr": {"every": 10}})


def test_config_presets():
    load = _composed
    assert build_filter(load("none")) is None
    top_p = build_filter(load("snr_top_p"))
    # RAGEN-2 §3.3 (paper text): "ranks prompts by variance", top-p linear, zeros excluded
    assert (top_p.metric, top_p.strategy, top_p.value, top_p.mode, top_p.include_zero) == (
        "reward_variance",
        "top_p",
        0.9,
        "linear",
        False,
    )
    # reference code: softmax over the unbiased std, zero-std groups included
    ref = build_filter(load("snr_reference"))
    assert (ref.metric, ref.mode, ref.include_zero, ref.value) == ("reward_std", "softmax", True, 0.9)
    top_k = build_filter(load("snr_top_k"))
    # RAGEN: top-k includes zero-variance groups
    assert (top_k.strategy, top_k.value, top_k.include_zero) == ("top_k", 0.25, True)
    smallest = build_filter(load("snr_smallest"))
    assert (smallest.largest, smallest.metric, smallest.mode) == (False, "reward_variance", "linear")
    assert build_filter(load("snr_entropy")).metric == "entropy"
    assert build_filter(load("snr_entropy_variance")).metric == "entropy_variance"
    assert build_filter(load("snr_length")).metric == "length"
    assert SNRFilter.from_config(load("snr_top_p"), group_key="gid").group_key == "gid"


@pytest.mark.parametrize(
    "override, message",
    [
        ({"metric": "variance"}, "unknown filter.metric"),
        ({"enabled": "yes"}, "filter.enabled must be true or false"),
        ({"value": -1}, r"filter.value must be in \(0, 1\] for strategy top_p, got -1"),
        ({"loss_scale": "quadratic"}, "none, linear, sqrt"),
        ({"collapse_stop": {"patience": 3}}, "filter.collapse_stop moved to trainer.early_stop.collapse_stop"),
        (
            {"max_consecutive_empty": 2},
            "filter.max_consecutive_empty moved to trainer.early_stop.max_consecutive_empty",
        ),
        ({"typo": 1}, "unknown key\\(s\\) \\['typo'\\]"),
    ],
)
def test_config_validation(override, message):
    with pytest.raises(ValueError, match=message):
        build_filter({**FILTER_CONFIG_DEFAULTS, **override})
