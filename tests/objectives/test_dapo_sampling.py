"""DAPO's dynamic sampling with refill and its soft overlong punishment.

The fake ``collect_more`` plays G trajectories per group where most groups are all-success
or all-failure (no learning signal), like an easy or hopeless task: the sampler must fill
the batch with informative groups, or report how many it could not find; never raise.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from helpers import algo_preset
from omegaconf import OmegaConf
from tensordict import TensorDict, lazy_stack

from ragen_torchrl.objectives import build_algorithm
from ragen_torchrl.objectives.dapo import DynamicSampler, informative_groups
from ragen_torchrl.transforms.overlong import OverlongPenalty, overlong_penalty

G = 4


def records(
    returns: list[list[float]],
    first_group: int = 0,
    num_tokens: list[list[int]] | None = None,
    success: list[list[bool]] | None = None,
):
    """Trajectory records like ``collect_rollouts``'s: one row per trajectory, ragged tokens, lazily stacked.

    ``success`` defaults to ``return > 0`` (a win pays 1, a loss 0, penalties are negative).
    """
    rows = []
    for g, rets in enumerate(returns):
        for i, r in enumerate(rets):
            n = 10 if num_tokens is None else num_tokens[g][i]
            ok = float(r) > 0 if success is None else success[g][i]
            rows.append(
                TensorDict(
                    group_id=torch.tensor(first_group + g),
                    episode_return=torch.tensor(float(r)),
                    success=torch.tensor(bool(ok)),
                    num_tokens=torch.tensor(n),
                    tokens=torch.arange(n),
                )
            )
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
FIRST = [
    [1, 0, 1, 1],
    [1, 1, 1, 1],
    [0, 0, 0, 0],
    [0, 1, 0, 0],
    [1, 1, 1, 1],
    [0, 0, 0, 0],
    [1, 1, 1, 1],
    [0.5, 0, 0, 0],
]


def test_informative_groups():
    ids, keep = informative_groups(
        torch.tensor([1.0, 1.0, 0.0, 1.0, 0.3, 0.3 + 1e-9]), torch.tensor([5, 5, 2, 2, 9, 9])
    )
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
    sampler = DynamicSampler(max_extra_rollouts=1, reward_transform=shaping, criterion="return")
    out, stats = sampler(first, collect)
    assert stats["dynamic_sampling/shortfall"] == 0
    assert out.get("episode_return")[-1].item() == pytest.approx(0.5)  # 1 + (16 - 18) / 4


def test_dapo_objective_wires_sampler_and_overlong_shaping():
    obj = build_algorithm(algo_preset("dapo"), None, None)
    assert obj.dynamic_sampling.max_extra_rollouts == 3
    assert obj.dynamic_sampling.criterion == "success"  # the DAPO paper's accuracy rule is the default
    assert obj.dynamic_sampling.reward_transform is obj.reward_transform
    shaped = obj.shape_rewards(records([[1, 1]], num_tokens=[[100, 216]]))
    assert shaped.get("episode_return").tolist() == pytest.approx([1.0, 0.5])  # (192 - 216) / 48 = -.5


@pytest.mark.parametrize("bad", [dict(max_extra_rollouts=-1), dict(oversample=0.5), dict(criterion="accuracy")])
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


# --------------------------------------------------------------------------- which groups carry signal
def test_success_criterion_drops_by_task_outcome_not_by_shaped_return():
    # DAPO (arXiv 2503.14476) Eq. 11: "0 < |{o_i | is_equivalent(a, o_i)}| < G": by accuracy, not shaped reward
    first = records(
        [
            [1, 1, 1, 0.5],  # all succeed, one overlong-penalised: no signal by outcome (return: kept)
            [0, -0.1, 0, 0],  # all fail, one invalid turn: no signal by outcome (return: kept)
            [1, 0, 0, 0],  # mixed outcomes: kept by both
            [-0.1, -0.1, -0.1, -0.1],
        ],  # all fail, equal returns: dropped by both
        success=[[True] * 4, [False] * 4, [True, False, False, False], [False] * 4],
    )
    out, stats = DynamicSampler(max_extra_rollouts=0)(first, FakeCollector(p=1.0))
    assert group_ids(out) == [2] and stats["dynamic_sampling/dropped_groups"] == 3
    out, stats = DynamicSampler(max_extra_rollouts=0, criterion="return")(first, FakeCollector(p=1.0))
    assert group_ids(out) == [0, 1, 2] and stats["dynamic_sampling/dropped_groups"] == 1


def test_missing_success_column_is_a_clear_error():
    td = TensorDict(episode_return=torch.tensor([1.0, 0.0]), group_id=torch.tensor([0, 0]), batch_size=[2])
    with pytest.raises(ValueError, match="'success'"):
        DynamicSampler()(td, FakeCollector(p=1.0))
    out, _ = DynamicSampler(criterion="return")(td, FakeCollector(p=1.0))
    assert out is td


def test_build_objective_reads_the_criterion():
    cfg = OmegaConf.create({"name": "dapo", "dynamic_sampling": {"criterion": "return"}})
    assert build_algorithm(cfg, None, None).dynamic_sampling.criterion == "return"
    with pytest.raises(ValueError, match="algo.dynamic_sampling.criterion.*'accuracy'"):
        build_algorithm(OmegaConf.create({"name": "dapo", "dynamic_sampling": {"criterion": "accuracy"}}), None, None)


# --------------------------------------------------------------------------- refill at the default shapes
P, G_DEFAULT = 16, 4  # configs/trainer/default.yaml: prompts_per_iter 16, group_size 4


class MessyCollector:
    """``collect_more`` at P = 16, G = 4 that returns what it likes: fewer or more groups than asked,
    ``None``, an empty batch, a partial group; ids restart at 0 like a fresh ``collect_rollouts``."""

    def __init__(self, plan):
        self.plan, self.requests = list(plan), []

    def __call__(self, num_groups: int):
        self.requests.append(num_groups)
        kind = self.plan.pop(0) if self.plan else "exact"
        if kind == "none":
            return None
        if kind == "empty":
            return TensorDict(batch_size=[0])
        n = {"exact": num_groups, "fewer": max(1, num_groups // 3), "more": num_groups + 20}[kind]
        groups = [[1, 0, 0, 1] if g % 2 == 0 else [0, 0, 0, 0] for g in range(n)]  # half informative
        td = records(groups)
        if kind == "fewer":
            td = td[: td.batch_size[0] - 2]  # the last group arrives with 2 of its 4 rows
        return td


def degenerate_first_batch(n_informative: int):
    return records([[1, 0, 1, 0]] * n_informative + [[0] * G_DEFAULT] * (P - n_informative))


@pytest.mark.parametrize("n_informative", [0, 1, 4, 12, 15, 16])
@pytest.mark.parametrize("plan", [["exact"] * 5, ["none", "fewer", "more"], ["empty", "fewer", "fewer", "none"]])
def test_refill_at_the_default_shapes_with_a_messy_collect_more(n_informative, plan):
    # reference notes: "keep sampling until the batch is full (bounded, never crash)"
    collect = MessyCollector(plan)
    sampler = DynamicSampler(max_extra_rollouts=3, oversample=1.5)
    out, stats = sampler(degenerate_first_batch(n_informative), collect)
    assert stats["dynamic_sampling/target_groups"] == P  # refill towards a full batch of P groups
    assert len(collect.requests) <= 3  # bounded by max_extra_rollouts
    missing = P - n_informative
    if missing == 0:
        assert collect.requests == [] and out is not None and out.batch_size[0] == P * G_DEFAULT
        return
    # asks for ceil(missing x 1.5) groups (more than P when 12+ are missing), never more than ceil(P x 1.5) = 24
    assert collect.requests[0] == min(math.ceil(missing * 1.5), 24)
    assert all(1 <= r <= 24 for r in collect.requests)
    assert out is not None  # every plan brings some informative groups
    ids = out.get("group_id").reshape(-1)
    kept = stats["dynamic_sampling/kept_groups"]
    assert len(set(ids.tolist())) == kept and kept + stats["dynamic_sampling/shortfall"] == P
    assert all_informative(out)
    if plan[0] == "exact":  # half of each refill is informative: 3 calls always fill the batch
        assert kept == P and out.batch_size[0] == P * G_DEFAULT
    assert out.get("success").shape == out.get("episode_return").shape == (out.batch_size[0],)


def test_refill_larger_than_one_rollout_batch_and_none_throughout():
    # 15 of 16 groups degenerate, oversample 2: one call asks for 30 groups (> P); the trainer must accept it
    collect = MessyCollector(["exact"])
    out, stats = DynamicSampler(max_extra_rollouts=1, oversample=2.0)(degenerate_first_batch(1), collect)
    assert collect.requests == [30] and stats["dynamic_sampling/kept_groups"] == 16
    assert stats["dynamic_sampling/extra_groups"] == 30 and stats["dynamic_sampling/discarded_groups"] == 0
    # collect_more that never delivers: bounded, short, no crash
    out, stats = DynamicSampler(max_extra_rollouts=4)(degenerate_first_batch(4), lambda n: None)
    assert stats["dynamic_sampling/extra_rollouts"] == 4 and stats["dynamic_sampling/shortfall"] == 12
    assert out.batch_size[0] == 4 * G_DEFAULT
    # no records at all
    out, stats = DynamicSampler()(None, lambda n: None)
    assert out is None and stats["dynamic_sampling/target_groups"] == 0


def test_repeated_group_ids_within_one_refill_are_flagged(caplog):
    # two rollout chunks of one refill that both number their groups from 0 merge into 8-row groups:
    # not fatal (nothing raises), but logged, since collect_more must keep ids distinct within one return
    def collect(n):
        return lazy_stack(list(records([[1, 0, 0, 1]] * n).unbind(0)) + list(records([[0, 1, 1, 0]] * n).unbind(0)))

    with caplog.at_level(logging.WARNING, logger="ragen_torchrl.objectives.dapo"):
        out, stats = DynamicSampler(max_extra_rollouts=1)(degenerate_first_batch(14), collect)
    assert "group of 8 rows" in caplog.text
    assert stats["dynamic_sampling/kept_groups"] == P and out is not None
