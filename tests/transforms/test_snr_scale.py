"""SNR-aware filtering does not depend on the reward scale (RAGEN-2, arXiv 2604.06268, §3.3).

The paper's rule keeps the smallest prefix reaching ``p`` of the variance mass: multiplying every
reward by ``c > 0`` multiplies every variance by ``c**2`` and leaves the selection unchanged. The
exceptions, kept on purpose for fidelity to the reference code, are ``top_p`` softmax on a reward
metric (``softmax(std)``: the rule of the ``snr_reference`` preset) and an absolute ``eps > 0``
(the reference's linear slack); both are pinned below as scale-dependent.

Every expected number is worked out by hand in the comment next to it.
"""

from fractions import Fraction

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from ragen_torchrl.transforms.group_selection import METRICS, group_scores, select_groups
from ragen_torchrl.transforms.snr import SNRFilter

REWARD_METRICS = ("reward_std", "reward_variance", "reward_mean")


def variance_groups(groups: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    returns = torch.tensor([r for g in groups for r in g], dtype=torch.float64)
    ids = torch.tensor([i for i, g in enumerate(groups) for _ in g])
    return returns, ids


def kept(groups, scale=1.0, **kw):
    returns, ids = variance_groups(groups)
    _, scores = group_scores(returns * scale, ids, kw.pop("metric", "reward_variance"))
    return sorted(select_groups(scores, **kw).tolist())


# ---------------------------------------------------------------------- hand-computed regressions
def test_three_small_variance_groups_among_constant_ones_are_kept():
    # {0.1, 0, 0, 0}: mean .025, squared deviations .005625 + 3 x .000625 = .0075, / 3 = .0025.
    # 3 such groups + 13 constant ones: sum .0075, threshold .9 x .0075 = .00675 -> all 3 groups
    # (.0025, .005 < .00675, .0075). The reference's absolute slack (.00675 - .01 < 0) keeps none:
    # the update would be skipped and counted toward the 5-empty stop.
    groups = [[0.1, 0.0, 0.0, 0.0]] * 3 + [[0.5] * 4] * 13
    assert kept(groups) == [0, 1, 2]
    assert kept(groups, eps=0.01) == []  # the reference code's rule (switch)


def test_eight_equal_small_variance_groups_are_all_kept():
    # {-0.1, 0, 0, 0}: variance .0025 each, sum .02, threshold .9 x .02 = .018: 7 groups give .0175,
    # 8 reach .02 -> all 8 (the paper's rule); the reference's .018 - .01 = .008 stops at 4 (.01).
    groups = [[-0.1, 0.0, 0.0, 0.0]] * 8
    assert kept(groups) == list(range(8))
    assert kept(groups, eps=0.01) == [0, 1, 2, 3]


def test_snr_filter_default_keeps_the_small_variance_groups():
    # the transform with its defaults (the snr_top_p preset): the 3 groups above, 12 rows
    groups = [[0.1, 0.0, 0.0, 0.0]] * 3 + [[0.5] * 4] * 13
    returns, ids = variance_groups(groups)
    td = TensorDict(group_id=ids, episode_return=returns.float(), batch_size=[returns.numel()])
    out = SNRFilter()(td)
    assert out is not None and out["group_id"].unique().tolist() == [0, 1, 2]
    assert SNRFilter().filter(td)[0].batch_size[0] == 12


def test_any_variance_keeps_a_group_at_every_scale():
    # one group with a tiny spread among constant ones: variance (1e-6)^2 / 2 = 5e-13 per unit scale
    groups = [[1e-6, 0.0]] + [[3.0, 3.0]] * 7
    for scale in (1e-3, 1.0, 1e3):
        assert kept(groups, scale) == [0]


def test_permuted_groups_tie_exactly():
    # the same values in another order give bit-identical scores, so ties survive any scale
    returns = torch.tensor([0.3, 0.1, 0.7, 0.7, 0.3, 0.1, 0.1, 0.7, 0.3], dtype=torch.float64)
    ids = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    for metric in REWARD_METRICS:
        for scale in (1e-3, 0.37, 1e3):
            s = group_scores(returns * scale, ids, metric)[1].tolist()
            assert s[0] == s[1] == s[2]


# ---------------------------------------------------------------------- the property
def exact_scores(groups: list[list[int]], metric: str) -> list[Fraction]:
    """Scores in exact rational arithmetic (std compared through its square)."""
    out = []
    for g in groups:
        mean = Fraction(sum(g), len(g))
        var = sum((Fraction(x) - mean) ** 2 for x in g) / (len(g) - 1)
        out.append(mean if metric == "reward_mean" else var)
    return out


RULES = st.one_of(
    st.builds(
        dict,
        strategy=st.just("top_p"),
        value=st.sampled_from([0.1, 0.25, 0.5, 0.75, 0.9, 1.0]),
        mode=st.sampled_from(["linear", "softmax"]),
    ),
    st.builds(dict, strategy=st.just("top_k"), value=st.sampled_from([0.1, 0.25, 0.5, 1.0])),
    st.builds(dict, strategy=st.just("top_k_abs"), value=st.sampled_from([1.0, 2.0, 5.0])),
    st.builds(dict, strategy=st.just("min_p"), value=st.sampled_from([0.0, 0.1, 0.5, 1.0])),
)


@settings(max_examples=150, deadline=None)
@given(
    groups=st.lists(st.lists(st.integers(-3, 3), min_size=2, max_size=5), min_size=1, max_size=8),
    unit=st.sampled_from([0.1, 1.0, 0.25]),
    scale=st.floats(1e-3, 1e3),
    metric=st.sampled_from(METRICS),
    rule=RULES,
    include_zero=st.booleans(),
    largest=st.booleans(),
)
def test_selection_is_invariant_to_the_reward_scale(groups, unit, scale, metric, rule, include_zero, largest):
    # softmax top-p on a reward metric is the one scale-dependent rule (pinned below); the entropy
    # and length metrics do not read the rewards, so every rule is invariant for them.
    assume(not (rule.get("mode") == "softmax" and metric in REWARD_METRICS))
    # Groups whose scores tie exactly in rational arithmetic but hold different values may be
    # ordered either way after float rounding at another scale (e.g. variance of {0, 1} and {1, 2}):
    # that is rounding, not the rule, so such draws are left out.
    if metric in REWARD_METRICS:
        exact = exact_scores(groups, metric)
        for i in range(len(groups)):
            for j in range(i):
                assume(exact[i] != exact[j] or sorted(groups[i]) == sorted(groups[j]))
        # Likewise a group mean (or a sum of scores) that is 0 only in exact arithmetic: rounding
        # makes it +-1e-17 at one scale and 0 at another, which decides "zero score" / "empty".
        assume(sum(exact) != 0 or all(e == 0 for e in exact))
        assume(all(e != 0 or not any(g) for e, g in zip(exact, groups)))
    returns, ids = variance_groups([[unit * x for x in g] for g in groups])
    n = returns.numel()
    entropy = torch.linspace(0.5, 2.0, n, dtype=torch.float64)
    lengths = torch.arange(n, dtype=torch.float64) % 3
    kw = dict(rule, include_zero=include_zero, largest=largest)

    def selection(rewards):
        _, scores = group_scores(rewards, ids, metric, entropy=entropy, lengths=lengths)
        return select_groups(scores, **kw).tolist()

    assert selection(returns * scale) == selection(returns)


def test_softmax_on_std_depends_on_the_reward_scale():
    # the reference code's rule, kept as it computes it: {1, -1} has std sqrt 2, {0, 0} std 0.
    # softmax([1.4142, 0]) = [.8044, .1956]: p .9 needs both groups; x 10 -> softmax([14.142, 0])
    # = [1 - 7.2e-7, 7.2e-7] reaches .9 with the first group alone.
    groups = [[1.0, -1.0], [0.0, 0.0]]
    rule = dict(metric="reward_std", mode="softmax", include_zero=True)
    assert kept(groups, 1.0, **rule) == [0, 1]
    assert kept(groups, 10.0, **rule) == [0]


def test_reference_slack_depends_on_the_reward_scale():
    # eps = .01 (the reference's linear slack): the 8 groups of .0025 keep 4 at scale 1 (above);
    # x 10 -> variance .25 each, sum 2, threshold 1.8 - .01 = 1.79: 8 groups (7 give 1.75)
    groups = [[-0.1, 0.0, 0.0, 0.0]] * 8
    assert kept(groups, 1.0, eps=0.01) == [0, 1, 2, 3]
    assert kept(groups, 10.0, eps=0.01) == list(range(8))


@pytest.mark.parametrize("metric", ["reward_std", "reward_variance"])
def test_default_rule_is_invariant_on_the_hand_examples(metric):
    # the two regression batches at the ends of the asked range, every reward metric
    for groups in ([[0.1, 0.0, 0.0, 0.0]] * 3 + [[0.5] * 4] * 13, [[-0.1, 0.0, 0.0, 0.0]] * 8):
        base = kept(groups, metric=metric)
        assert base and all(kept(groups, s, metric=metric) == base for s in (1e-3, 1e3))
