"""DAPO's dynamic sampling with refill and its soft overlong punishment.

The fake ``collect_more`` plays G trajectories per group where most groups are all-success
or all-failure (no learning signal), like an easy or hopeless task: the sampler must fill
the batch with informative groups, or report how many it could not find; never raise.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict, lazy_stack

from ragen_torchrl.objectives import build_objective
from ragen_torchrl.objectives.dapo import DynamicSampler, informative_groups
from ragen_torchrl.transforms.overlong import OverlongPenalty, overlong_penalty

G = 4


def records(returns: list[list[float]], first_group: int = 0, num_tokens: list[list[int]] | None = None):
    """Trajectory records like ``collect_rollouts``'s: one row per trajectory, ragged tokens, lazily stacked."""
    rows = []
    for g, rets in enumerate(returns):
        for i, r in enumerate(rets):
            n = 10 if num_tokens is None else num_tokens[g][i]
            rows.append(TensorDict(group_id=torch.tensor(first_group + g), episode_return=torch.tensor(float(r)),
                                   num_tokens=torch.tensor(n), tokens=torch.arange(n)))
    return lazy_stack(rows)


class FakeCollector:
    """``collect_more``: each group is informative with probability ``p`` (else all-success/all-failure)."""

    def __init__(self, p: float, seed: int = 0, extra: int = 0) -> None:
        self.p, self.extra = p, extra
        self.gen = torch.Generator().manual_seed(seed)
        self.requests: list[int] = []

    def __call__(self, num_groups: int):
        self.requests.append(num_groups)
        groups = []
        for _ in range(num_groups + self.extra):
            if torch.rand((), generator=self.gen) < self.p:
                groups.append([1.0, 0.0, 0.0, 1.0])
            else:
                groups.append([float(torch.rand((), generator=self.gen) < 0.5)] * G)
        return records(groups)  # group ids restart at 0, as a fresh collect_rollouts call would


def group_ids(td) -> list[int]:
    return sorted(set(td.get("group_id").tolist()))


def all_informative(td) -> bool:
    _, keep = informative_groups(td.get("episode_return"), td.get("group_id"))
    return bool(keep.all())


# 8 groups: 3 informative, 5 degenerate (all 1 or all 0)
FIRST = [[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1],
         [0.5, 0, 0, 0]]


def test_informative_groups():
    ids, keep = informative_groups(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.3, 0.3 + 1e-9]), torch.tensor([5, 5, 2, 2, 9, 9]))
    assert ids.tolist() == [2, 5, 9] and keep.tolist() == [True, False, False]


def test_refill_fills_the_batch_with_informative_groups():
    collect = FakeCollector(p=0.3, seed=1)
    out, stats = DynamicSampler(max_extra_rollouts=20)(records(FIRST), collect)
    assert stats["dynamic_sampling/shortfall"] == 0
    assert stats["dynamic_sampling/kept_groups"] == stats["dynamic_sampling/target_groups"] == 8
    assert out.batch_size[0] == 8 * G
    assert len(group_ids(out)) == 8  # refills were renumbered: no two groups share an id
    assert all_informative(out)
    assert collect.requests[0] == 5  # asks for exactly the missing groups
    assert stats["dynamic_sampling/extra_rollouts"] == len(collect.requests) <= 20
    # the kept rows keep their data (ragged per-row tensors included)
    assert all(row["tokens"].shape == (10,) for row in out.unbind(0))


def test_oversampling_and_surplus_groups_are_cut_to_the_target():
    collect = FakeCollector(p=1.0, extra=3)  # returns 3 more groups than asked
    out, stats = DynamicSampler(max_extra_rollouts=2, oversample=2.0)(records(FIRST), collect)
    assert collect.requests == [10]  # ceil(5 missing x 2)
    assert stats["dynamic_sampling/kept_groups"] == 8 and out.batch_size[0] == 8 * G
    assert stats["dynamic_sampling/discarded_groups"] == 13 - 5
    # the original informative groups come first, in arrival order
    assert out.get("group_id")[: 3 * G].unique().tolist() == [0, 3, 7]


def test_shortfall_is_reported_not_raised(caplog):
    collect = FakeCollector(p=0.0)  # never any signal
    with caplog.at_level(logging.WARNING, logger="ragen_torchrl.objectives.dapo"):
        out, stats = DynamicSampler(max_extra_rollouts=3)(records(FIRST), collect)
    assert len(collect.requests) == 3  # bounded
    assert stats["dynamic_sampling/shortfall"] == 5
    assert stats["dynamic_sampling/kept_groups"] == 3 and out.batch_size[0] == 3 * G
    assert stats["dynamic_sampling/dropped_groups"] == 5 + 3 * 5
    assert "shortfall 5" in caplog.text


def test_no_signal_at_all_gives_none():
    first = [[1, 1, 1, 1], [0, 0, 0, 0]]
    out, stats = DynamicSampler(max_extra_rollouts=2)(records(first), FakeCollector(p=0.0))
    assert out is None
    assert stats["dynamic_sampling/shortfall"] == 2 and stats["dynamic_sampling/kept_groups"] == 0


def test_collect_more_may_return_nothing():
    out, stats = DynamicSampler(max_extra_rollouts=2)(records(FIRST), lambda n: None)
    assert stats["dynamic_sampling/extra_rollouts"] == 2 and stats["dynamic_sampling/shortfall"] == 5
    assert out.batch_size[0] == 3 * G


def test_drop_only_and_untouched_batches():
    out, stats = DynamicSampler(max_extra_rollouts=0)(records(FIRST), FakeCollector(p=1.0))
    assert stats["dynamic_sampling/extra_rollouts"] == 0 and group_ids(out) == [0, 3, 7]
    full = records([[1, 0, 0, 0], [0, 1, 1, 1]])
    out, stats = DynamicSampler()(full, FakeCollector(p=1.0))
    assert out is full and stats["dynamic_sampling/dropped_groups"] == 0


def test_refills_are_reward_shaped_before_they_are_judged():
    # equal raw returns, but one trajectory of the refill ran into the overlong zone: after
    # shaping the group is informative and must be kept
    shaping = OverlongPenalty(max_length=20, cache_length=4)

    def collect(n):
        return records([[1.0] * G] * n, num_tokens=[[5, 5, 5, 18]] * n)

    first = shaping(records([[1, 0, 1, 1], [1, 1, 1, 1]]))
    out, stats = DynamicSampler(max_extra_rollouts=1, reward_transform=shaping)(first, collect)
    assert stats["dynamic_sampling/shortfall"] == 0
    assert out.get("episode_return")[-1].item() == pytest.approx(0.5)  # 1 + (16 - 18) / 4


def test_dapo_objective_wires_sampler_and_overlong_shaping():
    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "configs" / "algo" / "dapo.yaml")
    obj = build_objective(cfg, None, None)
    assert obj.dynamic_sampling.max_extra_rollouts == 3
    assert obj.dynamic_sampling.reward_transform is obj.reward_transform
    shaped = obj.shape_rewards(records([[1, 1]], num_tokens=[[100, 216]]))
    assert shaped.get("episode_return").tolist() == pytest.approx([1.0, 0.5])  # (192 - 216) / 48 = -.5


@pytest.mark.parametrize("bad", [dict(max_extra_rollouts=-1), dict(oversample=0.5)])
def test_sampler_rejects_bad_settings(bad):
    with pytest.raises(ValueError):
        DynamicSampler(**bad)


# --------------------------------------------------------------------------- overlong punishment
def test_overlong_penalty_at_the_boundaries():
    # L_max = 20, L_cache = 4: free up to 16, linear to -1 at 20, -1 beyond
    lengths = torch.tensor([0, 15, 16, 17, 18, 19, 20, 21, 500])
    assert overlong_penalty(lengths, 20, 4).tolist() == pytest.approx([0, 0, 0, -0.25, -0.5, -0.75, -1, -1, -1])
    # L_cache = 0: a hard cut at L_max
    assert overlong_penalty(torch.tensor([20, 21]), 20, 0).tolist() == [0.0, -1.0]
    # L_cache = L_max: the ramp starts at 0 tokens
    assert overlong_penalty(torch.tensor([0, 5, 10]), 10, 10).tolist() == pytest.approx([0, -0.5, -1])


@pytest.mark.parametrize("max_length, cache_length", [(0, 0), (10, 11), (10, -1), (10.5, 2)])
def test_overlong_penalty_rejects_bad_lengths(max_length, cache_length):
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1]), max_length, cache_length)


def test_overlong_transform_shapes_returns_once():
    t = OverlongPenalty(max_length=20, cache_length=4)
    td = TensorDict(episode_return=torch.tensor([1.0, 0.0, 1.0]), num_tokens=torch.tensor([16, 18, 25]), batch_size=[3])
    out = t(td)
    assert out["episode_return"].tolist() == pytest.approx([1.0, -0.5, 0.0])
    assert out["overlong_penalty"].tolist() == pytest.approx([0.0, -0.5, -1.0])
    assert t(out)["episode_return"].tolist() == pytest.approx([1.0, -0.5, 0.0])  # idempotent
    assert t(None) is None and t._inv_call(None) is None  # replay buffers call _inv_call
    again = t.inv(TensorDict(episode_return=torch.tensor([2.0]), num_tokens=torch.tensor([19]), batch_size=[1]))
    assert again["episode_return"].item() == pytest.approx(1.25)  # write-time use
