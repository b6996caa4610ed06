"""Pure parts of SNR-aware filtering: select_groups, group_scores, loss_scale, FilterGuard.

Every expected index list is worked out by hand in the comment next to it.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_torchrl.trainer.early_stop import FilterGuard, loss_scale
from ragen_torchrl.transforms.group_selection import group_scores, select_groups


def sel(scores, **kw):
    return select_groups(torch.tensor(scores, dtype=torch.float64), **kw).tolist()


# Shared example: group 1 has zero score.
S = [0.5, 0.0, 2.0, 1.0]


# ---------------------------------------------------------------------- top_p linear
@pytest.mark.parametrize(
    "p, expected",
    [
        # candidates {0: .5, 2: 2, 3: 1}, sum 3.5, ranking 2, 3, 0
        (0.9, [2, 3, 0]),  # thr 3.15: 2 -> 3 -> 3.5 >= 3.15
        (0.8, [2, 3]),  # thr 2.8: 2 -> 3 >= 2.8
        (0.5, [2]),  # thr 1.75: 2 >= 1.75
        (0.0, []),  # thr 0: reached before adding anything -> empty prefix
    ],
)
def test_top_p_linear(p, expected):
    assert sel(S, value=p) == expected


def test_top_p_linear_eps():
    # the reference code's absolute slack (a switch): scores [3, 1], sum 4, p .9 -> 3.6 - eps
    assert sel([3.0, 1.0], value=0.9, eps=0.5) == [0, 1]  # thr 3.1: 3 < 3.1 -> 4
    assert sel([3.0, 1.0], value=0.9, eps=1.0) == [0]  # thr 2.6: 3 >= 2.6


def test_top_p_linear_ties_lower_index_first():
    # [1, 1, 1, 1], p .5: thr 2 (less 1e-9 x 4 of rounding slack) -> two groups, ties in index order
    assert sel([1.0, 1.0, 1.0, 1.0], value=0.5) == [0, 1]


def test_top_p_linear_include_zero_and_negative_scores():
    # include_zero: candidates all 4, sum 3.5, thr 3.15 reached by 2, 3, 0 before the zero
    assert sel(S, include_zero=True) == [2, 3, 0]
    # reward_mean can be negative: [2, 0, -1], sum 1, thr .9: 2 >= .9
    assert sel([2.0, 0.0, -1.0], include_zero=True) == [0]
    # [1, 0, -1]: sum 0, thr 0 is met by the empty prefix -> keep nothing
    assert sel([1.0, 0.0, -1.0], include_zero=True) == []


def test_top_p_linear_smallest():
    # ascending candidates 0 (.5), 3 (1), 2 (2); sum 3.5
    assert sel(S, value=0.5, largest=False) == [0, 3, 2]  # thr 1.75: .5 -> 1.5 -> 3.5
    assert sel(S, value=0.4, largest=False) == [0, 3]  # thr 1.4: .5 -> 1.5 >= 1.4
    # include_zero puts the zero first in ascending order: it stops the prefix at 0 < thr
    assert sel([0.0, 1.0, 2.0], include_zero=True, largest=False) == []  # thr 2.7


def test_top_p_value_at_least_one_keeps_all_candidates():
    assert sel(S, value=1.0) == [2, 3, 0]  # ranking order, zero excluded
    assert sel(S, value=1.5, include_zero=True) == [2, 3, 0, 1]
    assert sel(S, value=1.0, mode="softmax", largest=False) == [0, 3, 2]


# ---------------------------------------------------------------------- top_p softmax
# scores log([1, 2, 3, 4]) -> probs [.1, .2, .3, .4]; ranking 3, 2, 1, 0; cumsum .4, .7, .9, 1
LOG = [math.log(v) for v in (1.0, 2.0, 3.0, 4.0)]


@pytest.mark.parametrize(
    "p, expected",
    [
        (0.3, [3]),  # first cumsum >= .3 is at 0 -> k = 1
        (0.5, [3, 2]),  # .7 at position 1 -> k = 2
        (0.8, [3, 2, 1]),  # .9 at position 2 -> k = 3
        (0.95, [3, 2, 1, 0]),  # 1.0 at position 3 -> k = 4
    ],
)
def test_top_p_softmax(p, expected):
    # include_zero: log(1) = 0 would otherwise remove group 0
    assert sel(LOG, value=p, mode="softmax", include_zero=True) == expected


def test_top_p_softmax_zero_excluded_and_smallest():
    # without group 0: probs [2, 3, 4] / 9 = .222, .333, .444; cumsum .444, .778, 1
    assert sel(LOG, value=0.5, mode="softmax") == [3, 2]
    assert sel(LOG, value=0.8, mode="softmax") == [3, 2, 1]
    # smallest: softmax(-log s) = [1, 1/2, 1/3, 1/4] / (25/12) = .48, .24, .16, .12
    # ranking 0, 1, 2, 3; cumsum .48, .72, .88, 1
    assert sel(LOG, value=0.8, mode="softmax", include_zero=True, largest=False) == [0, 1, 2]
    assert sel(LOG, value=0.5, mode="softmax", include_zero=True, largest=False) == [0, 1]


def test_top_p_softmax_all_zero_keeps_all_when_included():
    # uniform probs 1/3: cumsum .33, .67, 1 -> p .9 at position 2 -> k = 3
    assert sel([0.0, 0.0, 0.0], mode="softmax", include_zero=True) == [0, 1, 2]
    assert sel([0.0, 0.0, 0.0], mode="softmax") == []  # no candidate at all


# ---------------------------------------------------------------------- top_k / top_k_abs
@pytest.mark.parametrize(
    "value, expected",
    [
        (0.25, [2]),  # int(.25 * 4 groups) = 1
        (0.5, [2, 3]),  # int(2.0) = 2
        (0.75, [2, 3, 0]),  # 3
        (1.0, [2, 3, 0]),  # 4, clamped to the 3 candidates
        (0.1, [2]),  # int(.4) = 0 -> at least 1
    ],
)
def test_top_k(value, expected):
    assert sel(S, strategy="top_k", value=value) == expected


def test_top_k_counts_all_groups_and_floor_tolerance():
    # include_zero=False still counts all 4 groups for k: int(.5 * 4) = 2
    assert sel([0.0, 0.0, 3.0, 1.0], strategy="top_k", value=0.5) == [2, 3]
    # 0.29 * 100 = 28.999999999999996 in floating point; we keep 29
    kept = sel(list(range(1, 101)), strategy="top_k", value=0.29)
    assert kept == list(range(99, 70, -1))


def test_top_k_ties_and_smallest():
    # [1, 2, 2, 1] descending stable: 1, 2, 0, 3; ascending stable: 0, 3, 1, 2
    assert sel([1.0, 2.0, 2.0, 1.0], strategy="top_k", value=0.5) == [1, 2]
    assert sel([1.0, 2.0, 2.0, 1.0], strategy="top_k_abs", value=3) == [1, 2, 0]
    assert sel([1.0, 2.0, 2.0, 1.0], strategy="top_k_abs", value=3, largest=False) == [0, 3, 1]


@pytest.mark.parametrize(
    "value, expected",
    [(2, [2, 3]), (2.9, [2, 3]), (0, [2]), (10, [2, 3, 0])],  # int(v), >= 1, <= 3 candidates
)
def test_top_k_abs(value, expected):
    assert sel(S, strategy="top_k_abs", value=value) == expected


def test_top_k_all_zero_include_zero():
    # include_zero: 3 candidates, int(.25 * 3) = 0 -> 1 group, the lowest index among ties
    assert sel([0.0, 0.0, 0.0], strategy="top_k", value=0.25, include_zero=True) == [0]


# ---------------------------------------------------------------------- min_p
@pytest.mark.parametrize(
    "value, kw, expected",
    [
        (0.5, {}, [2, 3]),  # max 2 -> keep >= 1.0
        (0.2, {}, [2, 3, 0]),  # keep >= .4
        (1.0, {}, [2]),  # keep >= 2
        (0.0, {"include_zero": True}, [2, 3, 0, 1]),  # keep >= 0
        (0.5, {"largest": False}, [0, 3]),  # min .5 -> keep <= .5 / .5 = 1.0, ascending
        (1.0, {"largest": False}, [0]),  # keep <= .5
        (0.0, {"largest": False}, [0, 3, 2]),  # bound min / 0 = inf
    ],
)
def test_min_p(value, kw, expected):
    assert sel(S, strategy="min_p", value=value, **kw) == expected


# ---------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("strategy", ["top_p", "top_k", "top_k_abs", "min_p"])
@pytest.mark.parametrize("mode", ["linear", "softmax"])
def test_all_zero_empty_and_single(strategy, mode):
    kw = dict(strategy=strategy, mode=mode, value=0.5)
    assert sel([0.0, 0.0, 0.0], **kw) == []  # zero groups are not candidates
    assert sel([], **kw) == []
    assert sel([0.7], **kw) == [0]
    assert sel([0.0], **kw) == []
    out = select_groups(torch.tensor([]), **kw)
    assert out.dtype == torch.long and out.numel() == 0


def test_returns_long_on_list_input():
    out = select_groups([0.5, 1.0])
    assert out.dtype == torch.long and out.tolist() == [1, 0]  # thr 1.34: 1 -> 1.5


def test_nan_and_inf_raise():
    with pytest.raises(ValueError, match="NaN scores at group indices \\[1\\]"):
        select_groups(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="infinite"):
        select_groups(torch.tensor([1.0, float("inf")]))


def test_bad_arguments_list_valid_options():
    with pytest.raises(ValueError, match="top_p, top_k, top_k_abs, min_p"):
        select_groups(torch.ones(2), strategy="nucleus")
    with pytest.raises(ValueError, match="linear, softmax"):
        select_groups(torch.ones(2), mode="exp")
    with pytest.raises(ValueError, match="value must be >= 0"):
        select_groups(torch.ones(2), value=-0.1)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        select_groups(torch.ones(2), eps=-1)
    with pytest.raises(ValueError, match="min_p needs a value in \\[0, 1\\]"):
        select_groups(torch.ones(2), strategy="min_p", value=2.0)
    with pytest.raises(ValueError, match="1-D"):
        select_groups(torch.ones(2, 2))
    with pytest.raises(ValueError, match="must be a number"):
        select_groups(torch.ones(2), value=True)


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.floats(0, 10, allow_nan=False), max_size=12),
    p=st.floats(0, 1),
    strategy=st.sampled_from(["top_p", "top_k", "top_k_abs", "min_p"]),
    mode=st.sampled_from(["linear", "softmax"]),
    include_zero=st.booleans(),
    largest=st.booleans(),
)
def test_selection_is_a_ranked_subset(scores, p, strategy, mode, include_zero, largest):
    kept = sel(scores, strategy=strategy, value=p, mode=mode, include_zero=include_zero, largest=largest)
    assert len(set(kept)) == len(kept)
    assert all(0 <= i < len(scores) for i in kept)
    if not include_zero:
        assert all(scores[i] != 0 for i in kept)  # zero means exactly 0: no scale-dependent tolerance
    ranked = [scores[i] for i in kept]
    assert ranked == sorted(ranked, reverse=largest)
    if strategy == "top_p" and mode == "linear" and largest and kept:
        total = sum(s for s in scores if include_zero or s != 0)
        assert sum(ranked) >= p * total * (1 - 1e-9) - 1e-300


# ---------------------------------------------------------------------- group_scores
R = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 2.0])
G = torch.tensor([0, 0, 1, 1, 2, 2])


def test_group_scores_reward_metrics():
    # group 0 {1, 0}: mean .5, var (.25 + .25) / 1 = .5; group 1 {1, 1}: var 0
    # group 2 {0, 2}: mean 1, var (1 + 1) / 1 = 2
    ids, std = group_scores(R, G, "reward_std")
    assert ids.tolist() == [0, 1, 2]
    assert std.tolist() == pytest.approx([math.sqrt(0.5), 0.0, math.sqrt(2.0)])
    assert group_scores(R, G, "reward_variance")[1].tolist() == pytest.approx([0.5, 0.0, 2.0])
    # RAGEN-2 §3.3 (paper text): "ranks prompts by variance" -- the default metric
    assert group_scores(R, G)[1].tolist() == pytest.approx([0.5, 0.0, 2.0])
    assert group_scores(R, G, "reward_mean")[1].tolist() == pytest.approx([0.5, 1.0, 1.0])


def test_group_scores_single_member_and_unsorted_ids():
    # group 4 has one trajectory -> 0; group 9 {1, 2}: var .5
    ids, var = group_scores(torch.tensor([3.0, 1.0, 2.0]), torch.tensor([9, 4, 9]), "reward_variance")
    assert ids.tolist() == [4, 9] and var.tolist() == pytest.approx([0.0, 0.5])
    # the LLM reward shape (N, 1, 1) is accepted
    ids, std = group_scores(R.reshape(6, 1, 1), G, "reward_std")
    assert std.tolist() == pytest.approx([math.sqrt(0.5), 0.0, math.sqrt(2.0)])


def test_group_scores_entropy_and_length():
    ent = torch.tensor([1.0, 3.0, 2.0, 2.0, 0.0, 4.0])
    # means: (1 + 3) / 2 = 2, 2, 2; stds: sqrt(2), 0, sqrt(8)
    assert group_scores(R, G, "entropy", entropy=ent)[1].tolist() == pytest.approx([2.0, 2.0, 2.0])
    assert group_scores(R, G, "entropy_std", entropy=ent)[1].tolist() == pytest.approx(
        [math.sqrt(2.0), 0.0, math.sqrt(8.0)]
    )
    # the entropy-variance ablation: unbiased variance across the group of per-trajectory
    # entropies: {1, 3} -> 2, {2, 2} -> 0, {0, 4} -> 8
    assert group_scores(R, G, "entropy_variance", entropy=ent)[1].tolist() == pytest.approx([2.0, 0.0, 8.0])
    lengths = torch.tensor([10, 20, 30, 50, 5, 5])
    assert group_scores(R, G, "length", lengths=lengths)[1].tolist() == pytest.approx([15.0, 40.0, 5.0])


def test_group_scores_errors():
    with pytest.raises(ValueError, match="needs per-trajectory entropy"):
        group_scores(R, G, "entropy")
    with pytest.raises(ValueError, match="needs per-trajectory lengths"):
        group_scores(R, G, "length")
    with pytest.raises(ValueError, match="reward_std, reward_variance"):
        group_scores(R, G, "variance")
    with pytest.raises(ValueError, match="one value per trajectory"):
        group_scores(R[:4], G)
    with pytest.raises(ValueError, match="integers"):
        group_scores(R, G.float())
    with pytest.raises(ValueError, match="NaN"):
        group_scores(torch.tensor([float("nan"), 1.0]), torch.tensor([0, 0]))


def test_constant_group_is_exactly_zero():
    # two-pass variance: a constant float group gives exactly 0, so include_zero=False drops it
    ids, std = group_scores(
        torch.full((16,), 0.1, dtype=torch.float32), torch.zeros(16, dtype=torch.long), "reward_std"
    )
    assert std.tolist() == [0.0]


# ---------------------------------------------------------------------- loss_scale
def test_loss_scale():
    assert loss_scale(0.25, "none") == 1.0
    assert loss_scale(0.25, "linear") == 0.25
    assert loss_scale(0.25, "sqrt") == 0.5
    assert loss_scale(0.0, "sqrt") == 0.0
    with pytest.raises(ValueError, match="none, linear, sqrt"):
        loss_scale(0.5, "quadratic")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        loss_scale(1.5, "linear")


# ---------------------------------------------------------------------- FilterGuard
def stats(std, empty=False):
    return {"in_group_std_mean": std, "empty_after_filter": 1.0 if empty else 0.0}


def test_guard_consecutive_empty():
    guard = FilterGuard(max_consecutive_empty=5, collapse_stop=False)
    for _ in range(4):
        assert guard.update(stats(0.0, empty=True)) is None
    assert guard.update(stats(1.0)) is None  # a kept iteration resets the count
    assert guard.consecutive_empty == 0
    for _ in range(4):
        assert guard.update(stats(0.0, empty=True)) is None
    reason = guard.update(stats(0.0, empty=True))  # 5th in a row
    assert reason.startswith("empty_selection") and guard.stop_reason == reason
    assert FilterGuard(max_consecutive_empty=0, collapse_stop=False).update(stats(0, True)) is None


def test_guard_collapse_small():
    guard = FilterGuard(max_consecutive_empty=0, warmup=3, patience=2, ratio=0.1)
    # warmup over non-empty iterations only: 1, (empty 0.0 skipped), 2, 3 -> base 2
    for s, e in [(1.0, False), (0.0, True), (2.0, False)]:
        assert guard.update(stats(s, e)) is None
    assert guard.base_std is None
    assert guard.update(stats(3.0)) is None
    assert guard.base_std == pytest.approx(2.0)
    assert guard.update(stats(0.1)) is None  # window [3.0, 0.1]: 3.0 >= 0.2
    assert guard.update(stats(0.3)) is None  # window [0.1, 0.3]: 0.3 >= 0.2
    assert guard.update(stats(0.19)) is None  # window [0.3, 0.19]
    # RAGEN-2 §3.3 / reference: "the last 10 non-empty iterations" -- an empty one is not in it
    assert guard.update(stats(0.0, empty=True)) is None  # window still [0.3, 0.19]
    assert guard.update(stats(0.0, empty=True)) is None
    reason = guard.update(stats(0.05))  # window [0.19, 0.05]: both < 0.2
    assert reason.startswith("reward_variance_collapse")


def test_guard_collapse_window_ignores_empty_iterations():
    # RAGEN-2 §3.3 / reference: "stop when the last 10 non-empty iterations are all below 0.1 x base"
    guard = FilterGuard(max_consecutive_empty=0, warmup=2, patience=3, ratio=0.1)
    guard.update(stats(1.0))
    guard.update(stats(3.0))  # base (1 + 3) / 2 = 2 -> limit 0.2
    assert guard.update(stats(0.1)) is None  # window [1.0, 3.0, 0.1]
    # old code: empty iterations (std 0) entered the window -> [0.1, 0, 0] all < 0.2 -> stop
    assert guard.update(stats(0.0, empty=True)) is None
    assert guard.update(stats(0.0, empty=True)) is None
    assert guard.metrics() == {"consecutive_empty": 2.0, "collapse_base_std": 2.0, "collapse_window_below": 1.0}
    assert guard.update(stats(0.15)) is None  # window [3.0, 0.1, 0.15]
    assert guard.update(stats(0.19)).startswith("reward_variance_collapse")  # [0.1, 0.15, 0.19]


def test_guard_collapse_defaults_and_zero_base():
    guard = FilterGuard()  # warmup 10, patience 10, ratio .1
    for _ in range(10):
        assert guard.update(stats(1.0)) is None
    for _ in range(9):
        assert guard.update(stats(0.05)) is None
    assert guard.update(stats(0.05)) is not None  # 10th below 0.1 x 1.0
    flat = FilterGuard(max_consecutive_empty=0)
    for _ in range(30):  # base 0 disables the collapse rule
        assert flat.update(stats(0.0)) is None


def test_guard_state_dict_and_errors():
    guard = FilterGuard(warmup=2, patience=2)
    guard.update(stats(1.0))
    guard.update(stats(0.0, empty=True))
    other = FilterGuard(warmup=2, patience=2)
    other.load_state_dict(guard.state_dict())
    assert other.state_dict() == guard.state_dict()
    with pytest.raises(KeyError, match="in_group_std_mean"):
        guard.update({"empty_after_filter": 0.0})
    with pytest.raises(ValueError, match="warmup"):
        FilterGuard(warmup=0)
