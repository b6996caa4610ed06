"""The report's statistics against textbook values, hand computations and scipy (when installed)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragen_torchrl.reporting.run_metrics import (
    drop_duplicates,
    early_mean,
    final_point,
    late_mean,
    peak_success,
    run_totals,
)
from ragen_torchrl.reporting.runs import Run
from ragen_torchrl.reporting.statistics import (
    bootstrap_interval,
    correlation_test,
    incomplete_beta,
    min_detectable_effect,
    paired_comparison,
    sign_flip_min_p,
    sign_flip_pvalue,
    t_cdf,
    t_interval,
    t_quantile,
    t_test_power,
)


# --------------------------------------------------------------------------- t distribution
@pytest.mark.parametrize(
    ("p", "df", "expected"),  # a printed t table (4 decimals)
    [
        (0.975, 1, 12.7062),
        (0.975, 2, 4.3027),
        (0.975, 4, 2.7764),
        (0.975, 9, 2.2622),
        (0.8, 4, 0.9410),
        (0.8, 9, 0.8834),
        (0.995, 30, 2.7500),
    ],
)
def test_t_quantile_matches_the_textbook_table(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, abs=1e-4)


def test_t_cdf_closed_forms_and_scipy():
    assert t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-12)  # Cauchy: 1/2 + atan(1)/pi
    assert t_cdf(1.0, 2) == pytest.approx(0.5 + 1 / (2 * math.sqrt(3)), abs=1e-12)  # df 2: 1/2 + t / (2 sqrt(2 + t^2))
    assert incomplete_beta(1.0, 1.0, 0.3) == pytest.approx(0.3, abs=1e-12)  # uniform
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 17, 120):
        for t in (-3.1, -0.4, 0.0, 0.7, 2.2, 8.0):
            assert t_cdf(t, df) == pytest.approx(float(stats.t.cdf(t, df)), abs=1e-10)
        for p in (0.6, 0.8, 0.975, 0.999):
            assert t_quantile(p, df) == pytest.approx(float(stats.t.ppf(p, df)), abs=1e-8)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="p=1.0"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="df=0"):
        t_cdf(1.0, 0)


# --------------------------------------------------------------------------- intervals
def test_t_interval_by_hand_and_scipy():
    lo, hi = t_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, n 3: 2 ± 4.3027 / sqrt(3)
    assert (lo, hi) == pytest.approx((2 - 4.302653 / math.sqrt(3), 2 + 4.302653 / math.sqrt(3)), abs=1e-5)
    assert all(math.isnan(v) for v in t_interval([1.0]))
    stats = pytest.importorskip("scipy.stats")
    xs = [0.05, 0.0, 0.1, 0.05, -0.05]
    mean, sem = sum(xs) / 5, float(stats.sem(xs))
    assert t_interval(xs) == pytest.approx(tuple(stats.t.interval(0.95, 4, loc=mean, scale=sem)), abs=1e-10)


def test_bootstrap_interval_two_values_by_hand_and_deterministic():
    # resampled means of (0, 1): 0 w.p. 1/4, 0.5 w.p. 1/2, 1 w.p. 1/4 -> the 2.5% / 97.5% percentiles are 0 and 1
    assert bootstrap_interval([0.0, 1.0]) == (0.0, 1.0)
    xs = [0.1, 0.4, 0.2, 0.3, 0.35]
    assert bootstrap_interval(xs) == bootstrap_interval(xs)  # fixed seed
    ys = [math.sqrt(k) for k in range(2, 14)]
    assert bootstrap_interval(ys, resamples=200) != bootstrap_interval(ys, resamples=200, seed=1)  # the seed is used
    lo, hi = bootstrap_interval(xs)
    assert min(xs) <= lo < sum(xs) / 5 < hi <= max(xs)
    assert bootstrap_interval([0.3, 0.3, 0.3]) == (0.3, 0.3)


# --------------------------------------------------------------------------- tests
def test_sign_flip_pvalue_by_hand_and_scipy():
    # (1, 2, 3): |sum| = 6 only for all + or all -: 2 of 8
    assert sign_flip_pvalue([1.0, 2.0, 3.0]) == 0.25
    # (1, -1): every pattern has |sum| >= 0
    assert sign_flip_pvalue([1.0, -1.0]) == 1.0
    # (2, 1, 1): |sum| >= 4 for (+,+,+), (-,-,-): 2 of 8; (+,+,-) gives 2
    assert sign_flip_pvalue([2.0, 1.0, 1.0]) == 0.25
    assert math.isnan(sign_flip_pvalue([]))
    stats = pytest.importorskip("scipy.stats")
    d = [0.05, 0.0, 0.1, 0.05, -0.05, 0.12, 0.03]
    ref = stats.permutation_test(
        (d,), lambda x: abs(sum(x)), permutation_type="samples", n_resamples=math.inf, alternative="greater"
    )
    assert sign_flip_pvalue(d) == pytest.approx(float(ref.pvalue), abs=1e-12)


def test_sign_flip_beyond_the_exact_limit_is_sampled_and_deterministic():
    d = [0.1 * ((-1) ** i) + 0.05 for i in range(20)]  # 2^20 patterns: Monte Carlo
    p = sign_flip_pvalue(d, resamples=2000)
    assert p == sign_flip_pvalue(d, resamples=2000)
    assert 0 < p <= 1


def test_paired_comparison_uses_only_seeds_both_arms_ran():
    a = {0: 0.5, 1: 0.6, 2: 0.55, 3: 0.7, 4: 0.65, 7: 0.1}
    b = {0: 0.55, 1: 0.6, 2: 0.65, 3: 0.75, 4: 0.6, 8: 0.9}
    c = paired_comparison(a, b)
    assert c.seeds == (0, 1, 2, 3, 4) and c.n == 5
    assert list(c.diffs) == pytest.approx([0.05, 0.0, 0.1, 0.05, -0.05])
    assert c.mean == pytest.approx(0.03)
    assert c.sd == pytest.approx(math.sqrt(sum((x - 0.03) ** 2 for x in c.diffs) / 4))
    assert (c.b_greater, c.b_less) == (3, 1)
    # sign flips of (0.05, 0, 0.1, 0.05, -0.05), |sum| >= 0.15: the zero's sign is free (x2); of the other
    # 16 patterns: (+,+,+,-) 0.15, (+,+,+,+) 0.25, (+,+,-,-)? 0.05+0.1-0.05+0.05 -> enumerate by hand below
    others = [0.05, 0.1, 0.05, -0.05]
    hits = sum(abs(sum(x if m >> i & 1 else -x for i, x in enumerate(others))) >= 0.15 - 1e-12 for m in range(16))
    assert c.p == pytest.approx(hits / 16)
    assert c.mde == pytest.approx(1.6819970 * c.sd, rel=1e-6)  # the exact noncentral-t MDE at n = 5


def test_min_detectable_effect_is_the_exact_noncentral_t():
    # at n = 3 the paired t-test reaches 80% power at 3.264 sd (the shifted central t said 3.097)
    assert math.isnan(min_detectable_effect(1.0, 1))
    assert min_detectable_effect(1.0, 3) == pytest.approx(3.264, abs=5e-4)
    assert min_detectable_effect(2.0, 3) == pytest.approx(2 * min_detectable_effect(1.0, 3))
    assert t_test_power(0.0, 4) == pytest.approx(0.05, abs=1e-9)  # no effect: the test's size
    stats = pytest.importorskip("scipy.stats")
    for n in (3, 5, 10, 30):
        mde = min_detectable_effect(1.0, n)
        crit = stats.t.ppf(0.975, n - 1)
        power = stats.nct.sf(crit, n - 1, mde * math.sqrt(n)) + stats.nct.cdf(-crit, n - 1, mde * math.sqrt(n))
        assert power == pytest.approx(0.8, abs=1e-6), (n, power)


def test_t_test_power_without_scipy_integrates_the_same_noncentral_t(monkeypatch):
    import sys

    with_scipy = [t_test_power(d, n) for n in (2, 3, 5, 12) for d in (0.3, 1.0, 2.5)]
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # the import fails: the numeric integration runs
    without = [t_test_power(d, n) for n in (2, 3, 5, 12) for d in (0.3, 1.0, 2.5)]
    assert without == pytest.approx(with_scipy, abs=1e-7)
    assert min_detectable_effect(1.0, 3) == pytest.approx(3.264, abs=5e-4)


def test_sign_flip_minimum_p_and_the_report_note():
    # exact two-sided sign-flip: the all-same-sign patterns alone reach the observed |sum|: p >= 2 / 2^n
    assert [sign_flip_min_p(n) for n in (1, 4, 5, 6)] == [1.0, 0.125, 0.0625, 0.03125]
    assert sign_flip_pvalue([0.1, 0.2, 0.3, 0.4, 0.5]) == sign_flip_min_p(5)
    from ragen_torchrl.reporting.run_metrics import Group
    from ragen_torchrl.reporting.table import paired_table

    def arm(name, finals):
        return Group(
            {"arm": name},
            [Run(Path(f"{name}{s}"), {"seed": s}, [], [(5, {"success": f})]) for s, f in enumerate(finals)],
        )

    five = paired_table([arm("a", [0.1] * 5), arm("b", [0.2, 0.3, 0.4, 0.5, 0.6])], ["final"])
    assert "| 0.062 |" in five[2]  # every seed up: p = 0.0625, the smallest 5 pairs can give
    assert (
        five[-1].startswith("- n too small for the sign-flip test to reach p < 0.05") and "0.0625 at n = 5" in five[-1]
    )
    six = paired_table([arm("a", [0.1] * 6), arm("b", [0.2, 0.3, 0.4, 0.5, 0.6, 0.7])], ["final"])
    assert not any("n too small" in line for line in six)


def test_correlation_refuses_below_five_and_matches_scipy():
    t = correlation_test([1, 2, 3, 4], [1, 3, 2, 4])
    assert t.refused == "n too small" and math.isnan(t.rho) and math.isnan(t.p)
    assert correlation_test([1, 1, 1, 1, 1], [1, 2, 3, 4, 5]).refused == "constant input"
    with pytest.raises(ValueError, match="differ in length"):
        correlation_test([1, 2], [1])
    x = [2.0, 2.5, 1.5, 3.0, 2.2, 2.1]
    y = [0.5, 0.6, 0.55, 0.7, 0.65, 0.55]  # with ties; 720 permutations keep scipy's exact test fast
    t = correlation_test(x, y)
    assert t.ci == correlation_test(x, y).ci  # fixed bootstrap seed
    assert t.ci[0] <= t.rho <= t.ci[1]
    stats = pytest.importorskip("scipy.stats")
    assert t.rho == pytest.approx(float(stats.spearmanr(x, y)[0]), abs=1e-12)
    ref = stats.permutation_test(
        (y,),
        lambda v: abs(stats.spearmanr(x, v)[0]),
        permutation_type="pairings",
        n_resamples=math.inf,
        alternative="greater",
    )
    assert t.p == pytest.approx(float(ref.pvalue), abs=1e-12)


def test_correlation_hand_computed_permutation_p():
    # rho >= 0.8 iff sum d^2 <= 4: identity, 4 adjacent swaps, 3 pairs of disjoint adjacent swaps; as many <= -0.8
    t = correlation_test([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
    assert t.rho == pytest.approx(0.8) and t.p == pytest.approx(16 / 120)


# --------------------------------------------------------------------------- runs
def test_duplicates_are_dropped_listed_and_paths_do_not_count():
    def run(path, seed, lr, cache):
        return Run(Path(path), {"seed": seed, "algo": {"lr": lr}, "model": {"cache_dir": cache}})

    runs = [run("z", 0, 1e-5, "/a"), run("a", 0, 1e-5, "/b"), run("b", 1, 1e-5, "/a"), run("c", 0, 2e-5, "/a")]
    kept, dropped = drop_duplicates(runs)
    assert [str(r.path) for r in kept] == ["a", "b", "c"]
    assert [(str(d.path), str(k.path)) for d, k in dropped] == [("z", "a")]
    no_config = [Run(Path("x"), {}), Run(Path("y"), {})]
    assert drop_duplicates(no_config) == (no_config, [])


def test_peak_and_final_validation_with_iterations():
    run = Run(
        Path("r"),
        {},
        [],
        [
            (0, {"success": 0.9}),
            (10, {"success": 0.6}),
            (20, {"success": 0.8}),
            (30, {"success": 0.8}),
            (40, {"success": 0.7}),
        ],
    )
    assert peak_success(run) == (20, 0.8)  # iteration 0 is before training; ties: the earliest
    assert final_point(run) == (40, 0.7)
    assert peak_success(Run(Path("r"), {}, [], [(0, {"success": 0.5})])) is None
    assert final_point(Run(Path("r"), {})) is None


def test_the_peak_is_over_full_set_validations_after_training_started():
    # the start (0.60 on 512) is before training; the periodic 128-level validations (0.55, 0.70) play
    # fewer levels than the final one: only the final validation (0.58 on 512) can set the peak
    def point(success, levels):
        return {"success": success, "num_trajectories": float(levels)}

    run = Run(
        Path("r"),
        {},
        [],
        [(0, point(0.60, 512)), (10, point(0.55, 128)), (20, point(0.70, 128)), (60, point(0.58, 512))],
    )
    assert peak_success(run) == (60, 0.58)
    # every validation on the full set (trainer=paper): the best after the start, the earliest on ties
    paper = Run(
        Path("p"),
        {},
        [],
        [
            (0, point(0.9, 512)),
            (10, point(0.6, 512)),
            (20, point(0.7, 512)),
            (30, point(0.7, 512)),
            (40, point(0.65, 512)),
        ],
    )
    assert peak_success(paper) == (20, 0.7)
    # the trainer's running peak follows the same rule
    from ragen_torchrl.trainer.run_log import ValidationPeak

    peak = ValidationPeak(levels=512)
    for it, st in run.val:
        peak.update(it, {"success": st["success"], "success_stderr": 0.02}, levels=int(st["num_trajectories"]))
    assert (peak.iteration, peak.success, peak.levels) == (60, 0.58, 512)


def test_totals_from_the_summary_else_summed_else_unknown():
    h = [{"iteration": i, "train/optimizer_steps": 2.0, "train/assistant_tokens": 100.0} for i in (1, 2, 3)]
    run = Run(Path("r"), {}, h, summary={"optimizer_steps": 5, "seconds": 3.0})
    assert run_totals(run) == {"optimizer steps": 5.0, "trained samples": None, "trained tokens": 300.0}


def test_early_and_late_windows_cover_the_iterations_that_ran_not_the_planned_ones():
    # planned 240, early-stopped at 150: the last 20% is iterations 121..150 (30 points), the
    # first 20% 1..30; with the planned length "late" would be > 192 (nothing: the last point alone)
    # and "early" <= 48
    h = [{"iteration": i, "mi": float(i)} for i in range(1, 151)]
    run = Run(Path("r"), {}, h, iterations=240)
    assert late_mean(run, "mi") == pytest.approx(sum(range(121, 151)) / 30)  # 135.5, not 150
    assert early_mean(run, "mi") == pytest.approx(sum(range(1, 31)) / 30)  # 15.5, not 24.5
