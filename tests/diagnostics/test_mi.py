"""Tests of the MI-proxy family, the pair samplers and the entropy metrics.

Every expected value is known in closed form from the synthetic matrix.
"""

from __future__ import annotations

import doctest
import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_torchrl.diagnostics import entropy as entropy_mod
from ragen_torchrl.diagnostics import mi as mi_mod
from ragen_torchrl.diagnostics.entropy import entropy_metrics, token_entropy
from ragen_torchrl.diagnostics.mi import MIProxyTracker, mi_proxies
from ragen_torchrl.diagnostics.mi_sampling import (
    DEFAULT_MI_NUM_PAIRS,
    equivalence_from_keys,
    sample_first_turn_pairs,
    sample_trajectory_uniform_pairs,
)

FAMILY = [
    "mi_estimate",
    "mi_upper_bound",
    "conditional_entropy",
    "reasoning_entropy",
    "mi_zscore",
    "marginal_std",
    "retrieval_accuracy",
    "retrieval_accuracy@2",
    "retrieval_accuracy@4",
    "retrieval_accuracy@8",
    "retrieval_chance",
    "retrieval_chance@2",
    "retrieval_chance@4",
    "retrieval_chance@8",
    "retrieval_above_chance",
    "retrieval_above_chance@2",
    "retrieval_above_chance@4",
    "retrieval_above_chance@8",
]
KS = {"": 1, "@2": 2, "@4": 4, "@8": 8}
approx = lambda v: pytest.approx(v, abs=1e-9)  # noqa: E731


# ------------------------------------------------------------------ (a) z identifies x exactly


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_identifying_reasoning_reaches_log_n(n):
    l = torch.full((n, n), -1e4)
    l.fill_diagonal_(0.0)
    out = mi_proxies(l, torch.arange(n))
    for tag in KS:
        assert out[f"retrieval_accuracy{tag}"] == 1.0
    # matched = 0, marginal = logsumexp(0, -1e4, ...) - log N = -log N (+ e^-1e4 = 0 in fp64)
    assert out["mi_estimate"] == pytest.approx(math.log(n), abs=1e-9)
    assert out["mi_upper_bound"] == pytest.approx(math.log(n))
    assert out["conditional_entropy"] == approx(0.0)
    assert out["reasoning_entropy"] == pytest.approx(math.log(n))
    assert out["marginal_std"] == approx(0.0)
    # every gap is log N and the spread of the marginal is 0: z = log N / 1e-3
    assert out["mi_zscore"] == pytest.approx(math.log(n) / 1e-3)
    assert out["retrieval_chance"] == pytest.approx(1.0 / n)
    assert out["retrieval_above_chance"] == pytest.approx(1.0 - 1.0 / n)


def test_identifying_reasoning_with_more_pairs_than_columns():
    # 12 pairs over 4 columns, each row peaked on its own column.
    cols = torch.arange(12) % 4
    l = torch.full((12, 4), -1e4)
    l[torch.arange(12), cols] = -2.0
    out = mi_proxies(l, cols)
    assert out["retrieval_accuracy"] == 1.0
    assert out["mi_estimate"] == pytest.approx(math.log(4))
    assert out["conditional_entropy"] == pytest.approx(2.0)
    assert out["num_pairs"] == 12 and out["num_columns"] == 4


# ------------------------------------------------------------------ (b) z independent of x


@pytest.mark.parametrize("n", [1, 3, 8, 64])
def test_input_independent_reasoning_is_at_chance(n):
    m = 16
    row_level = -torch.linspace(0.5, 4.0, m)  # rows differ, columns do not
    l = row_level.unsqueeze(1).expand(m, n).clone()
    cols = torch.arange(m) % n
    out = mi_proxies(l, cols)
    # marginal_i = a_i + log N - log N = a_i = matched_i
    assert out["mi_estimate"] == approx(0.0)
    assert out["mi_zscore"] == approx(0.0)
    assert out["conditional_entropy"] == pytest.approx(out["reasoning_entropy"])
    for tag, k in KS.items():
        # tie rule: all N columns tied, expected hit of a random tie-break = min(k, N) / N
        assert out[f"retrieval_accuracy{tag}"] == pytest.approx(min(k, n) / n)
        assert out[f"retrieval_chance{tag}"] == pytest.approx(min(k, n) / n)
        assert out[f"retrieval_above_chance{tag}"] == approx(0.0)


def test_template_collapse_chance_matches_paper():
    # P = 64 first-turn columns: chance is 1.5625% (RAGEN-2 §2.3)
    out = mi_proxies(torch.zeros(64, 64), torch.arange(64))
    assert out["retrieval_chance"] == pytest.approx(0.015625)
    assert out["retrieval_accuracy"] == pytest.approx(0.015625)


# ------------------------------------------------------------------ (c) duplicated prompts


def test_duplicated_prompts_raise_chance():
    # columns 0 and 1 hold the same prompt; columns 2 and 3 are distinct
    equiv = torch.tensor([0, 0, 1, 2])
    cols = torch.tensor([0, 1, 2, 3])
    l = torch.full((4, 4), -3.0)  # constant rows: accuracy must equal chance exactly
    out = mi_proxies(l, cols, col_equivalence=equiv)
    # n_i (# columns equivalent to the truth) = [2, 2, 1, 1]
    # chance@1 = mean(n_i) / N = (2 + 2 + 1 + 1) / 4 / 4 = 0.375
    assert out["retrieval_chance"] == pytest.approx(0.375)
    # chance@2 = mean_i 1 - C(4 - n_i, 2) / C(4, 2):
    #   n=2: 1 - C(2,2)/6 = 5/6;  n=1: 1 - C(3,2)/6 = 1/2;  mean = (5/6 + 5/6 + 1/2 + 1/2) / 4 = 2/3
    #   (min(1, 2 * n_i / N) would give (1 + 1 + 1/2 + 1/2) / 4 = 3/4, overstating it)
    assert out["retrieval_chance@2"] == pytest.approx(2 / 3)
    assert out["retrieval_chance@4"] == pytest.approx(1.0)
    for tag in KS:
        assert out[f"retrieval_accuracy{tag}"] == pytest.approx(out[f"retrieval_chance{tag}"])
        assert out[f"retrieval_above_chance{tag}"] == approx(0.0)


def test_retrieving_a_duplicate_of_the_true_prompt_is_a_hit():
    equiv = torch.tensor([0, 0, 1])
    # row 0 (true col 0) peaks on col 1, an identical prompt; row 1 (true col 2) peaks on col 0
    l = torch.tensor([[-5.0, -1.0, -9.0], [-1.0, -5.0, -9.0]])
    cols = torch.tensor([0, 2])
    out = mi_proxies(l, cols, col_equivalence=equiv)
    assert out["retrieval_accuracy"] == 1.0 / 2  # row 0 hit via col 1, row 1 miss
    # row 1: true col 2 is third of 3 -> hit only at k >= 3 (k capped at N = 3)
    assert out["retrieval_accuracy@2"] == 0.5
    assert out["retrieval_accuracy@4"] == 1.0
    # chance@1 = (2/3 + 1/3) / 2
    assert out["retrieval_chance"] == pytest.approx(0.5)
    # without the equivalence, row 0 misses at k = 1
    assert mi_proxies(l, cols)["retrieval_accuracy"] == 0.0


def test_equivalence_from_keys():
    keys = [(1, 2, 3), (4,), (1, 2, 3), (4,), (5, 6)]
    assert equivalence_from_keys(keys).tolist() == [0, 1, 0, 1, 2]
    assert equivalence_from_keys([]).tolist() == []
    assert equivalence_from_keys(["a"]).dtype == torch.long


# ------------------------------------------------------------------ (d) hand-computed 3x3 case


def test_hand_computed_3x3_every_key():
    # l[i, j] = log p[i, j] with
    #   p = [[1/2, 1/4, 1/4],     true col 0
    #        [1/8, 1/8, 1/4],     true col 1
    #        [1/4, 1/4, 1/4]]     true col 2
    ln = math.log
    p = torch.tensor([[1 / 2, 1 / 4, 1 / 4], [1 / 8, 1 / 8, 1 / 4], [1 / 4, 1 / 4, 1 / 4]], dtype=torch.float64)
    l = p.log()
    cols = torch.tensor([0, 1, 2])
    # seq variant: every reasoning has 2 tokens, so the sum is 2 * mean -> p_seq = p ** 2
    out = mi_proxies(l, cols, seq_log_probs=2 * l)

    # matched = [ln 1/2, ln 1/8, ln 1/4]
    # row sums of p = [1, 1/2, 3/4] -> marginal = ln(sum) - ln 3 = [-ln 3, -ln 6, -ln 4]
    # gaps = [ln 3 - ln 2, ln 6 - ln 8, ln 4 - ln 4] = [ln 1.5, ln 0.75, 0]
    mi = (ln(1.5) + ln(0.75) + 0.0) / 3  # = ln(1.125) / 3 = 0.0392610
    assert out["mi_estimate"] == pytest.approx(mi)
    assert out["mi_estimate"] == pytest.approx(ln(1.125) / 3)
    assert out["mi_upper_bound"] == pytest.approx(ln(3))
    # H(Z|X) = -mean(matched) = (ln 2 + 3 ln 2 + 2 ln 2) / 3 = 2 ln 2
    assert out["conditional_entropy"] == pytest.approx(2 * ln(2))
    # H(Z) = -mean(marginal) = (ln 3 + ln 6 + ln 4) / 3 = ln 72 / 3
    assert out["reasoning_entropy"] == pytest.approx(ln(72) / 3)
    # population std of [-ln 3, -ln 6, -ln 4]: mean -ln72/3 = -1.425555
    #   deviations [0.326943, -0.366204, 0.039261], squares [0.106892, 0.134105, 0.001541]
    #   mean of squares 0.080846 -> std 0.284335
    marg = [-ln(3), -ln(6), -ln(4)]
    mu = sum(marg) / 3
    std = math.sqrt(sum((v - mu) ** 2 for v in marg) / 3)
    assert std == pytest.approx(0.284335, abs=1e-6)
    assert out["marginal_std"] == pytest.approx(std)
    # z-score = mean(gaps) / (std + 1e-3) = 0.0392610 / 0.285335 = 0.137596
    assert out["mi_zscore"] == pytest.approx(mi / (std + 1e-3))
    assert out["mi_zscore"] == pytest.approx(0.137596, abs=1e-6)

    # Retrieval (ties broken uniformly at random, expected hit):
    #   row 0: true col 0 is the unique max                   -> @1 = @2 = @3 = 1
    #   row 1: col 2 (1/4) above; true col 1 ties col 0 (1/8)  -> @1 = 0, @2 = 1/2, @3 = 1
    #   row 2: constant row, 3-way tie                         -> @1 = 1/3, @2 = 2/3, @3 = 1
    # k = 4 and 8 are capped at N = 3.
    assert out["retrieval_accuracy"] == pytest.approx((1 + 0 + 1 / 3) / 3)  # 4/9
    assert out["retrieval_accuracy@2"] == pytest.approx((1 + 1 / 2 + 2 / 3) / 3)  # 13/18
    assert out["retrieval_accuracy@4"] == pytest.approx(1.0)
    assert out["retrieval_accuracy@8"] == pytest.approx(1.0)
    # chance with 3 distinct columns: min(k, 3) / 3
    assert out["retrieval_chance"] == pytest.approx(1 / 3)
    assert out["retrieval_chance@2"] == pytest.approx(2 / 3)
    assert out["retrieval_chance@4"] == pytest.approx(1.0)
    assert out["retrieval_chance@8"] == pytest.approx(1.0)
    assert out["retrieval_above_chance"] == pytest.approx(4 / 9 - 1 / 3)  # 1/9
    assert out["retrieval_above_chance@2"] == pytest.approx(13 / 18 - 2 / 3)  # 1/18
    assert out["retrieval_above_chance@4"] == approx(0.0)
    assert out["retrieval_above_chance@8"] == approx(0.0)
    assert out["num_pairs"] == 3
    assert out["num_columns"] == 3

    # _seq family from p_seq = p ** 2 = [[1/4, 1/16, 1/16], [1/64, 1/64, 1/16], [1/16] * 3]
    # matched_seq = [ln 1/4, ln 1/64, ln 1/16] = -[2, 6, 4] ln 2
    # row sums = [3/8, 3/32, 3/16] -> marginal_seq = [ln 1/8, ln 1/32, ln 1/16] = -[3, 5, 4] ln 2
    # gaps_seq = [ln 2, -ln 2, 0] -> mean 0
    l2 = ln(2)
    assert out["mi_estimate_seq"] == approx(0.0)
    assert out["mi_upper_bound_seq"] == pytest.approx(ln(3))
    assert out["conditional_entropy_seq"] == pytest.approx(4 * l2)  # (2 + 6 + 4) ln2 / 3
    assert out["reasoning_entropy_seq"] == pytest.approx(4 * l2)  # (3 + 5 + 4) ln2 / 3
    # std of -[3, 5, 4] ln 2 = ln 2 * sqrt(((-1)^2 + 1^2 + 0) / 3) = ln 2 * sqrt(2/3)
    assert out["marginal_std_seq"] == pytest.approx(l2 * math.sqrt(2 / 3))
    assert out["mi_zscore_seq"] == approx(0.0)
    # squaring keeps every ranking and every tie, so retrieval is unchanged
    for tag in KS:
        for stem in ("retrieval_accuracy", "retrieval_chance", "retrieval_above_chance"):
            assert out[f"{stem}{tag}_seq"] == pytest.approx(out[f"{stem}{tag}"])
    assert "num_pairs_seq" not in out and "num_columns_seq" not in out

    # exactly the documented keys, nothing else
    expected = set(FAMILY) | {f"{k}_seq" for k in FAMILY} | {"num_pairs", "num_columns"}
    assert set(out) == expected
    assert all(isinstance(v, (int, float)) for v in out.values())
    # without seq_log_probs: no _seq keys; float32 input gives the same numbers
    out32 = mi_proxies(l.float(), cols)
    assert set(out32) == set(FAMILY) | {"num_pairs", "num_columns"}
    assert out32["mi_estimate"] == pytest.approx(mi, abs=1e-6)


# ------------------------------------------------------------------ tie rule vs brute force


def _brute_force_hits(row, true_col, equiv, k):
    """Average over every tie-breaking order (all permutations as priorities)."""
    n = len(row)
    hits = 0
    perms = list(itertools.permutations(range(n)))
    for prio in perms:
        order = sorted(range(n), key=lambda j: (-row[j], prio[j]))
        hits += any(equiv[j] == equiv[true_col] for j in order[: min(k, n)])
    return hits / len(perms)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.integers(-2, 0), min_size=n, max_size=n), min_size=1, max_size=3),
            st.lists(st.integers(0, 2), min_size=n, max_size=n),
            st.data(),
        )
    )
)
def test_tie_rule_equals_expected_hit_of_random_tie_breaking(args):
    rows, equiv, data = args
    n = len(equiv)
    cols = [data.draw(st.integers(0, n - 1)) for _ in rows]
    out = mi_proxies(torch.tensor(rows, dtype=torch.float64), torch.tensor(cols), col_equivalence=torch.tensor(equiv))
    for tag, k in KS.items():
        want = sum(_brute_force_hits(r, c, equiv, k) for r, c in zip(rows, cols)) / len(rows)
        assert out[f"retrieval_accuracy{tag}"] == pytest.approx(want)
        # chance = the same expectation for a row with no information (constant)
        want_chance = sum(_brute_force_hits([0] * n, c, equiv, k) for c in cols) / len(rows)
        assert out[f"retrieval_chance{tag}"] == pytest.approx(want_chance)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_invariants_on_random_matrices(m, n, seed):
    g = torch.Generator().manual_seed(seed)
    l = -5 * torch.rand(m, n, generator=g, dtype=torch.float64)
    cols = torch.randint(n, (m,), generator=g)
    out = mi_proxies(l, cols)
    # matched_i <= logsumexp_i, so gap_i <= log N
    assert out["mi_estimate"] <= math.log(n) + 1e-12
    # I = H(Z) - H(Z|X) holds exactly for the proxies
    assert out["mi_estimate"] == pytest.approx(out["reasoning_entropy"] - out["conditional_entropy"])
    accs = [out[f"retrieval_accuracy{t}"] for t in KS]
    assert all(0.0 <= a <= 1.0 for a in accs)
    assert accs == sorted(accs)  # monotone in k
    # permuting columns (and relabelling the truth) changes nothing
    perm = torch.randperm(n, generator=g)
    inv = torch.argsort(perm)
    out_p = mi_proxies(l[:, perm], inv[cols])
    for key, value in out.items():
        assert out_p[key] == pytest.approx(value)


# ------------------------------------------------------------------ tracker


def test_tracker_ema_of_marginal_std():
    tracker = MIProxyTracker()
    # call 1: rows [0, -1e4] / [-1e4, 0] -> gaps log 2, marginal std 0
    l1 = torch.tensor([[0.0, -1e4], [-1e4, -2.0]])
    o1 = tracker(l1, torch.tensor([0, 1]))
    # first call initialises the EMA to the current std -> same as mi_zscore
    assert tracker.ema_std == pytest.approx(o1["marginal_std"])
    assert o1["mi_zscore_ema"] == pytest.approx(o1["mi_zscore"])
    # marginals: [-ln2, -2 - ln2] -> std 1
    assert o1["marginal_std"] == pytest.approx(1.0)
    # call 2: constant rows at -1 and -4 -> marginals [-1, -4], std 1.5, gaps 0
    l2 = torch.tensor([[-1.0, -1.0], [-4.0, -4.0]])
    o2 = tracker(l2, torch.tensor([1, 0]), seq_log_probs=3 * l2)
    assert o2["marginal_std"] == pytest.approx(1.5)
    assert tracker.ema_std == pytest.approx(0.9 * 1.0 + 0.1 * 1.5)
    assert o2["mi_zscore_ema"] == pytest.approx(0.0)
    # seq EMA starts at its first observation (std of [-3, -12] = 4.5)
    assert tracker.ema_std_seq == pytest.approx(4.5)
    # call 3: identity-like matrix, gaps log 2, std 0 -> ema = 0.9 * 1.05 + 0 = 0.945
    o3 = tracker(torch.tensor([[0.0, -1e4], [-1e4, 0.0]]), torch.tensor([0, 1]))
    assert tracker.ema_std == pytest.approx(0.945)
    assert o3["mi_zscore_ema"] == pytest.approx(math.log(2) / (0.945 + 1e-3))
    assert o3["mi_zscore"] == pytest.approx(math.log(2) / 1e-3)
    assert "mi_zscore_ema_seq" not in o3
    # checkpoint round trip
    state = tracker.state_dict()
    other = MIProxyTracker()
    other.load_state_dict(state)
    assert other.state_dict() == state and other.num_updates == 3
    with pytest.raises(ValueError):
        MIProxyTracker(decay=1.0)


# ------------------------------------------------------------------ (e) bad input


@pytest.mark.parametrize(
    "matrix, cols, kwargs, match",
    [
        (torch.zeros(3), torch.zeros(3, dtype=torch.long), {}, "2-D"),
        (torch.zeros(2, 2, 2), torch.zeros(2, dtype=torch.long), {}, "2-D"),
        (torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), {}, "at least one"),
        (torch.zeros(2, 3), torch.tensor([0, 3]), {}, r"\[0, 3\)"),
        (torch.zeros(2, 3), torch.tensor([-1, 0]), {}, r"\[0, 3\)"),
        (torch.zeros(2, 3), torch.tensor([0, 1, 2]), {}, "length 3, expected 2"),
        (torch.zeros(2, 3), torch.tensor([[0], [1]]), {}, "1-D"),
        (torch.zeros(2, 3), torch.tensor([0.0, 1.0]), {}, "integer"),
        (torch.tensor([[0.0, float("nan")], [0.0, 0.0]]), torch.tensor([0, 1]), {}, "NaN"),
        (torch.tensor([[0.0, float("-inf")], [0.0, 0.0]]), torch.tensor([0, 1]), {}, "NaN or infinite"),
        (torch.zeros(2, 2, dtype=torch.long), torch.tensor([0, 1]), {}, "floating"),
        (torch.zeros(2, 3), torch.tensor([0, 1]), {"seq_log_probs": torch.zeros(2, 2)}, "seq_log_probs has shape"),
        (
            torch.zeros(2, 3),
            torch.tensor([0, 1]),
            {"seq_log_probs": torch.full((2, 3), float("nan"))},
            "seq_log_probs contains NaN",
        ),
        (
            torch.zeros(2, 3),
            torch.tensor([0, 1]),
            {"col_equivalence": torch.tensor([0, 1])},
            "col_equivalence has length 2",
        ),
        (torch.zeros(2, 3), torch.tensor([0, 1]), {"col_equivalence": torch.tensor([0.0, 1.0, 2.0])}, "integer"),
    ],
)
def test_bad_input_raises(matrix, cols, kwargs, match):
    with pytest.raises(ValueError, match=match):
        mi_proxies(matrix, cols, **kwargs)


# ------------------------------------------------------------------ pair samplers


def test_first_turn_sampler():
    groups = torch.tensor([5, 5, 5, 2, 2, 2, 9, 9, 9, 9])
    s = sample_first_turn_pairs(groups, 6, torch.Generator().manual_seed(0))
    # columns = distinct groups in order of first appearance, represented by their first trajectory
    assert s.col_traj_idx.tolist() == [0, 3, 6]
    assert s.col_turn_idx.tolist() == [0, 0, 0]
    assert len(s.traj_idx) == 6 and len(set(s.traj_idx.tolist())) == 6  # without replacement
    assert (s.turn_idx == 0).all()
    assert (groups[s.col_traj_idx[s.true_cols]] == groups[s.traj_idx]).all()
    # more pairs than trajectories: every trajectory once
    s_all = sample_first_turn_pairs(groups, 64)
    assert sorted(s_all.traj_idx.tolist()) == list(range(10))
    # reproducible with a seeded generator
    s2 = sample_first_turn_pairs(groups, 6, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(s, s2))
    with pytest.raises(ValueError):
        sample_first_turn_pairs(torch.tensor([]), 3)
    with pytest.raises(ValueError):
        sample_first_turn_pairs(groups, 0)


def test_trajectory_uniform_sampler():
    turns = torch.tensor([1, 4, 0, 2])
    s = sample_trajectory_uniform_pairs(turns, 64, torch.Generator().manual_seed(1))
    assert len(s.traj_idx) == 64
    assert (s.traj_idx != 2).all()  # no turns -> never drawn
    assert (s.turn_idx >= 0).all() and (s.turn_idx < turns[s.traj_idx]).all()
    # one column per draw (N = 64), holding that draw's (trajectory, turn); repeats are equivalent columns
    assert s.true_cols.tolist() == list(range(64))
    assert (s.col_traj_idx[s.true_cols] == s.traj_idx).all()
    assert (s.col_turn_idx[s.true_cols] == s.turn_idx).all()
    col_keys = list(zip(s.col_traj_idx.tolist(), s.col_turn_idx.tolist()))
    assert len(col_keys) == 64 and len(set(col_keys)) <= 1 + 4 + 2
    # 400 draws over the 7 (trajectory, turn) pairs (rarest 1/12): all seen, 400 columns of 7 prompts
    s = sample_trajectory_uniform_pairs(turns, 400, torch.Generator().manual_seed(1))
    assert s.col_traj_idx.numel() == 400
    assert len(set(zip(s.col_traj_idx.tolist(), s.col_turn_idx.tolist()))) == 7
    assert (s.col_traj_idx[s.true_cols] == s.traj_idx).all()


def test_trajectory_uniform_sampler_is_uniform_over_trajectories():
    # trajectory-uniform, not turn-uniform: the 1-turn trajectory gets half the pairs
    turns = torch.tensor([1, 9])
    s = sample_trajectory_uniform_pairs(turns, 4000, torch.Generator().manual_seed(2))
    frac0 = (s.traj_idx == 0).float().mean().item()
    assert abs(frac0 - 0.5) < 0.04
    turns1 = s.turn_idx[s.traj_idx == 1]
    counts = torch.bincount(turns1, minlength=9).float() / turns1.numel()
    assert (counts - 1 / 9).abs().max() < 0.04
    with pytest.raises(ValueError):
        sample_trajectory_uniform_pairs(torch.tensor([0, 0]), 3)
    with pytest.raises(ValueError):
        sample_trajectory_uniform_pairs(torch.tensor([-1, 2]), 3)


def test_defaults_documented():
    assert mi_mod.DEFAULT_MI_EVERY == 5
    assert DEFAULT_MI_NUM_PAIRS == 64


# ------------------------------------------------------------------ entropy (by hand)


def test_token_entropy_by_hand():
    big = -1e9
    logits = torch.tensor(
        [
            # uniform over 4 -> ln 4; point mass -> 0; masked-out position (ignored)
            [[0.0, 0.0, 0.0, 0.0], [0.0, big, big, big], [5.0, 1.0, 2.0, 3.0]],
            # p = [3/4, 1/4, 0, 0] -> -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.562335
            [[math.log(3.0), 0.0, float("-inf"), float("-inf")], [0.0] * 4, [0.0] * 4],
            # nothing masked -> NaN
            [[0.0] * 4] * 3,
        ]
    )
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    h = token_entropy(logits, mask)
    assert h[0].item() == pytest.approx(math.log(4) / 2)  # (ln 4 + 0) / 2
    assert h[1].item() == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), abs=1e-6)
    assert h[1].item() == pytest.approx(0.562335, abs=1e-6)
    assert math.isnan(h[2].item())
    # bf16 logits are computed in float32
    h16 = token_entropy(logits[:1].bfloat16(), mask[:1])
    assert h16.dtype == torch.float32 and h16[0].item() == pytest.approx(math.log(4) / 2, abs=1e-6)
    with pytest.raises(ValueError):
        token_entropy(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError):
        token_entropy(torch.zeros(2, 3, 4), torch.ones(2, 2, dtype=torch.bool))


def test_entropy_metrics_by_hand():
    h = torch.tensor([1.0, 3.0, 2.0, 2.0, 8.0, float("nan")])
    g = torch.tensor([0, 0, 1, 1, 2, 2])
    out = entropy_metrics(h, g)
    # mean over the 5 finite sequences: (1 + 3 + 2 + 2 + 8) / 5 = 3.2
    assert out["reasoning_token_entropy_mean"] == pytest.approx(3.2)
    # group means [2, 2, 8] (NaN skipped), mean 4, population std sqrt((4 + 4 + 16) / 3) = sqrt 8
    assert out["reasoning_token_entropy_group_std"] == pytest.approx(math.sqrt(8))
    single = entropy_metrics(torch.tensor([1.0, 2.0]), torch.tensor([4, 4]))
    assert single == {"reasoning_token_entropy_mean": 1.5, "reasoning_token_entropy_group_std": 0.0}
    empty = entropy_metrics(torch.tensor([float("nan")]), torch.tensor([0]))
    assert all(math.isnan(v) for v in empty.values())
    with pytest.raises(ValueError):
        entropy_metrics(torch.ones(3), torch.zeros(2, dtype=torch.long))


# ------------------------------------------------------------------ docstring examples run


@pytest.mark.parametrize("module", [mi_mod, entropy_mod])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
