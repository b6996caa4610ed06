"""The statistics of a report: pure functions of numbers, no runs.

* :func:`mean_se`: mean ± standard error over seeds (sample std / sqrt(n); 0 for one run);
* :func:`t_interval`, :func:`t_cdf`, :func:`t_quantile`: Student's t (no scipy needed; checked against it);
* :func:`bootstrap_interval`, :func:`sign_flip_pvalue`, :func:`sign_flip_min_p`: resampling, seeded;
* :func:`t_test_power`, :func:`min_detectable_effect`: power of a paired t-test (exact noncentral t);
* :func:`paired_comparison`, :func:`correlation_test`: what a report prints for two arms / a diagnostic;
* :func:`rank_correlation` / :func:`spearman`: Spearman's rank correlation (scipy's when installed).

Example:
    >>> mean_se([0.25, 0.5, 0.75])   # std 0.25, SE 0.25 / sqrt(3)
    (0.5, 0.14433756729740643)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CorrelationTest",
    "EXACT_LIMIT",
    "MIN_CORRELATION_N",
    "PairedComparison",
    "RESAMPLES",
    "STAT_SEED",
    "bootstrap_interval",
    "correlation_test",
    "incomplete_beta",
    "mean_se",
    "min_detectable_effect",
    "paired_comparison",
    "rank_correlation",
    "sign_flip_min_p",
    "sign_flip_pvalue",
    "spearman",
    "t_cdf",
    "t_interval",
    "t_quantile",
    "t_test_power",
]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample std / sqrt(n), 0 for one value); ``(nan, nan)`` for none.

    Example:
        >>> mean_se([0.25]), mean_se([])
        ((0.25, 0.0), (nan, nan))
    """
    xs = [float(x) for x in values]
    n = len(xs)
    if n == 0:
        return math.nan, math.nan
    mean = sum(xs) / n
    if n == 1:
        return mean, 0.0
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return mean, math.sqrt(var / n)


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):  # ties share the mean of their ranks (1-based)
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def rank_correlation(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: the Pearson correlation of the ranks (ties get mean ranks); NaN if undefined.

    Example:
        >>> rank_correlation([1, 2, 3, 4], [10, 30, 20, 40])   # ranks 1 2 3 4 vs 1 3 2 4
        0.8
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    n = len(x)
    if n < 2:
        return math.nan
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho with ``scipy.stats.spearmanr`` when scipy is installed, else :func:`rank_correlation`.

    NaN for fewer than 3 points or a constant input.

    Example:
        >>> round(spearman([1, 2, 3, 4], [10, 30, 20, 40]), 6)
        0.8
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return math.nan
    try:
        from scipy.stats import spearmanr
    except ImportError:
        return rank_correlation(x, y)
    return float(spearmanr(x, y)[0])


# --------------------------------------------------------------------------- inference
#: the seed of every resampling in a report: the same runs give the same intervals and p-values
STAT_SEED = 0
#: resamples of a bootstrap interval and of a Monte Carlo permutation test
RESAMPLES = 5_000
#: below this many pairs a rank correlation is not reported ("n too small")
MIN_CORRELATION_N = 5
#: exact tests enumerate at most this many sign flips / permutations, else sample :data:`RESAMPLES`
EXACT_LIMIT = 1 << 16


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (continued fraction, Numerical Recipes 6.4).

    Example:
        >>> round(incomplete_beta(2.0, 3.0, 0.4), 12)   # 1 - sum_{j<2} C(4,j) 0.4^j 0.6^(4-j) = 0.5248
        0.5248
    """
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"incomplete_beta: x={x} is outside [0, 1]")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function P(T <= t) with ``df`` degrees of freedom.

    Example:
        >>> round(t_cdf(2.0, 1), 10)   # Cauchy: 1/2 + atan(2) / pi = 0.85241638235
        0.8524163823
    """
    if df <= 0:
        raise ValueError(f"t_cdf: df={df} must be positive")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`).

    Example:
        >>> round(t_quantile(0.975, 4), 4), round(t_quantile(0.8, 4), 4)   # textbook table: 2.7764, 0.9410
        (2.7764, 0.941)
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p={p} is outside (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _sd(xs: Sequence[float]) -> float:
    n = len(xs)
    mean = sum(xs) / n
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The ``level`` confidence interval of the mean by Student's t: mean ± t_{(1+level)/2, n-1} · sd / sqrt(n).

    ``(nan, nan)`` for fewer than 2 values.

    Example:
        >>> lo, hi = t_interval([1.0, 2.0, 3.0])   # mean 2, sd 1, t_{0.975, 2} = 4.3027
        >>> round(lo, 4), round(hi, 4)
        (-0.4841, 4.4841)
    """
    xs = [float(v) for v in values]
    n = len(xs)
    if n < 2:
        return math.nan, math.nan
    mean = sum(xs) / n
    half = t_quantile((1.0 + level) / 2.0, n - 1) * _sd(xs) / math.sqrt(n)
    return mean - half, mean + half


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default ``linear`` method)."""
    pos = q * (len(sorted_xs) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(sorted_xs) - 1)
    return sorted_xs[i] + (pos - i) * (sorted_xs[j] - sorted_xs[i])


def bootstrap_interval(
    values: Sequence[float], level: float = 0.95, resamples: int = RESAMPLES, seed: int = STAT_SEED
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean: ``resamples`` resamples with replacement, ``random.Random(seed)``.

    ``(nan, nan)`` for fewer than 2 values. The same values and seed give the same interval.

    Example:
        >>> bootstrap_interval([0.5, 0.5, 0.5])
        (0.5, 0.5)
        >>> bootstrap_interval([0.1, 0.4, 0.2, 0.3]) == bootstrap_interval([0.1, 0.4, 0.2, 0.3])
        True
    """
    import random

    xs = [float(v) for v in values]
    n = len(xs)
    if n < 2:
        return math.nan, math.nan
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(xs, k=n)) / n for _ in range(resamples))
    alpha = (1.0 - level) / 2.0
    return _quantile(means, alpha), _quantile(means, 1.0 - alpha)


def sign_flip_pvalue(diffs: Sequence[float], resamples: int = RESAMPLES, seed: int = STAT_SEED) -> float:
    """Two-sided paired permutation p-value of mean(diffs) = 0: each difference's sign flipped at random.

    Exact (all 2^n sign patterns, the observed one included) when 2^n <= :data:`EXACT_LIMIT`, else
    ``resamples`` random patterns plus the observed one. NaN for no difference.

    Example:
        >>> sign_flip_pvalue([1.0, 2.0, 3.0])   # only the all-positive and all-negative patterns reach |mean| = 2
        0.25
    """
    import random

    xs = [float(d) for d in diffs]
    n = len(xs)
    if n == 0:
        return math.nan
    observed = abs(sum(xs))
    tol = 1e-12 * max(1.0, observed)
    if 2**n <= EXACT_LIMIT:
        hits = 0
        for mask in range(2**n):
            s = sum(-x if mask >> i & 1 else x for i, x in enumerate(xs))
            hits += abs(s) >= observed - tol
        return hits / 2**n
    rng = random.Random(seed)
    hits = 1
    for _ in range(resamples):
        s = sum(x if rng.random() < 0.5 else -x for x in xs)
        hits += abs(s) >= observed - tol
    return hits / (resamples + 1)


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _t_test_power_integrated(crit: float, df: int, nc: float, steps: int = 2000) -> float:
    """P(|T| > crit), T noncentral t(df, nc), by Simpson's rule over the chi variable U = sqrt(V), V ~ chi2(df).

    T = (Z + nc) / (U / sqrt(df)), so P(|T| > crit) = E_U[Phi(nc - crit U / sqrt(df)) + Phi(-crit U / sqrt(df) - nc)];
    U's density u^(df-1) exp(-u^2 / 2) / (2^(df/2-1) Gamma(df/2)) is smooth for df >= 1 and negligible past
    sqrt(df) + 12.
    """
    top = math.sqrt(df) + 12.0
    h = top / steps
    log_norm = (df / 2.0 - 1.0) * math.log(2.0) + math.lgamma(df / 2.0)
    total = 0.0
    for i in range(steps + 1):
        u = i * h
        if u == 0.0 and df > 1:
            continue  # the density is 0 there
        density = math.exp((df - 1) * math.log(u) - u * u / 2.0 - log_norm) if u > 0 else math.exp(-log_norm)
        s = crit * u / math.sqrt(df)
        w = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total += w * density * (_normal_cdf(nc - s) + _normal_cdf(-s - nc))
    return total * h / 3.0


def t_test_power(effect: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test of ``n`` pairs at a true mean difference of ``effect`` sd.

    The exact power from the noncentral t: P(|T| > t_{1-alpha/2, n-1}) with T ~ t(n - 1, effect · sqrt(n));
    ``scipy.stats.nct`` when scipy is installed (and finite), else a numeric integration.

    Example:
        >>> round(t_test_power(0.0, 5), 6)   # no effect: the test's size
        0.05
        >>> round(t_test_power(3.264, 3), 3)
        0.8
    """
    if n < 2:
        raise ValueError(f"t_test_power: n={n} pairs; the paired t-test needs at least 2")
    df = n - 1
    crit = t_quantile(1.0 - alpha / 2.0, df)
    nc = float(effect) * math.sqrt(n)
    try:
        from scipy.stats import nct
    except ImportError:
        nct = None
    if nct is not None:
        power = float(nct.sf(crit, df, nc) + nct.cdf(-crit, df, nc))
        if math.isfinite(power):
            return power
    return _t_test_power_integrated(crit, df, nc)


def min_detectable_effect(sd_diff: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference a paired t-test of ``n`` pairs detects with ``power`` at two-sided ``alpha``.

    The effect, in units of ``sd_diff``, at which :func:`t_test_power` (the exact noncentral t) reaches ``power``,
    found by bisection; times ``sd_diff``. NaN for fewer than 2 pairs.

    Example:
        >>> round(min_detectable_effect(1.0, 3), 3), round(min_detectable_effect(1.0, 5), 3)
        (3.264, 1.682)
    """
    if n < 2 or not math.isfinite(sd_diff):
        return math.nan
    # the shifted central t, (t_{1-alpha/2} + t_{power}) / sqrt(n), is slightly below the exact effect
    guess = (t_quantile(1.0 - alpha / 2.0, n - 1) + t_quantile(power, n - 1)) / math.sqrt(n)
    lo, hi = 0.0, guess
    while t_test_power(hi, n, alpha) < power:
        lo, hi = hi, hi * 1.5
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if t_test_power(mid, n, alpha) < power:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-10 * hi:
            break
    return (lo + hi) / 2.0 * sd_diff


def sign_flip_min_p(n: int) -> float:
    """The smallest p-value the exact two-sided sign-flip test of ``n`` pairs can give: 2 / 2^n (1 for one pair).

    Below 0.05 only from 6 pairs on: with 5 or fewer no result is significant at 0.05, whatever the data.

    Example:
        >>> sign_flip_min_p(5), sign_flip_min_p(6)
        (0.0625, 0.03125)
    """
    if n < 1:
        return math.nan
    return min(1.0, 2.0 / 2**n)


@dataclass(frozen=True)
class PairedComparison:
    """Arm B − arm A on the seeds both ran: the differences and their statistics.

    Attributes:
        seeds: the paired seeds, sorted; ``diffs`` are B − A on each.
        mean: mean difference; ``sd`` its sample std (NaN below 2 pairs).
        t_ci / boot_ci: 95% intervals of the mean difference by Student's t and by the percentile bootstrap.
        p: two-sided paired sign-flip permutation p-value.
        mde: minimum detectable effect at this n (paired t, alpha 0.05, power 0.8).
        b_greater / b_less: pairs in which B is above / below A.
    """

    seeds: tuple[Any, ...]
    diffs: tuple[float, ...]
    mean: float
    sd: float
    t_ci: tuple[float, float]
    boot_ci: tuple[float, float]
    p: float
    mde: float
    b_greater: int
    b_less: int

    @property
    def n(self) -> int:
        """The number of pairs."""
        return len(self.diffs)


def paired_comparison(a: dict[Any, float], b: dict[Any, float]) -> PairedComparison:
    """Compare arm B with arm A seed by seed (``{seed: value}`` each); seeds only one arm ran are not used.

    Example:
        >>> c = paired_comparison({0: 0.5, 1: 0.6, 2: 0.7, 9: 1.0}, {0: 0.6, 1: 0.6, 2: 0.9})
        >>> c.seeds, [round(d, 3) for d in c.diffs], round(c.mean, 4), c.p, (c.b_greater, c.b_less)
        ((0, 1, 2), [0.1, 0.0, 0.2], 0.1, 0.5, (2, 0))
    """
    seeds = tuple(sorted(set(a) & set(b), key=lambda s: (str(type(s)), s)))
    diffs = tuple(float(b[s]) - float(a[s]) for s in seeds)
    n = len(diffs)
    mean = sum(diffs) / n if n else math.nan
    sd = _sd(diffs) if n >= 2 else math.nan
    return PairedComparison(
        seeds=seeds,
        diffs=diffs,
        mean=mean,
        sd=sd,
        t_ci=t_interval(diffs),
        boot_ci=bootstrap_interval(diffs),
        p=sign_flip_pvalue(diffs),
        mde=min_detectable_effect(sd, n),
        b_greater=sum(d > 0 for d in diffs),
        b_less=sum(d < 0 for d in diffs),
    )


@dataclass(frozen=True)
class CorrelationTest:
    """Spearman's rho with a bootstrap interval and a permutation p-value, or why it was not computed.

    Attributes:
        n: the number of pairs.
        rho: Spearman's rho (NaN when refused or undefined).
        ci: 95% percentile bootstrap interval (pairs resampled; resamples with a constant side skipped).
        p: two-sided permutation p-value (exact below 9 pairs, else :data:`RESAMPLES` shuffles + the observed).
        refused: ``""``, or the reason nothing was computed (``"n too small"``, ``"constant input"``).
    """

    n: int
    rho: float
    ci: tuple[float, float]
    p: float
    refused: str = ""


def correlation_test(
    x: Sequence[float], y: Sequence[float], resamples: int = RESAMPLES, seed: int = STAT_SEED
) -> CorrelationTest:
    """Spearman's rho of ``x`` and ``y`` with its bootstrap interval and permutation p-value.

    Refused ("n too small") below :data:`MIN_CORRELATION_N` pairs and for a constant input.

    Example:
        >>> correlation_test([1, 2, 3], [1, 2, 3]).refused
        'n too small'
        >>> t = correlation_test([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
        >>> t.rho, t.p   # rho >= 0.8 iff sum d^2 <= 4: 1 + 4 + 3 permutations; as many <= -0.8: 16 of 120
        (0.8, 0.13333333333333333)
    """
    import itertools
    import random

    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    n = len(x)
    nan2 = (math.nan, math.nan)
    if n < MIN_CORRELATION_N:
        return CorrelationTest(n, math.nan, nan2, math.nan, "n too small")
    rho = rank_correlation(x, y)
    if not math.isfinite(rho):
        return CorrelationTest(n, math.nan, nan2, math.nan, "constant input")
    # a permutation keeps the ranks' mean and spread: rho is proportional to sum(cx_i * cy_perm(i))
    rx, ry = _ranks(x), _ranks(y)
    cx = [v - sum(rx) / n for v in rx]
    cy = [v - sum(ry) / n for v in ry]
    scale = math.sqrt(sum(v * v for v in cx) * sum(v * v for v in cy))
    observed = abs(rho)
    tol = 1e-12

    def r(ys: Sequence[float]) -> float:
        return sum(a * b for a, b in zip(cx, ys)) / scale

    if math.factorial(n) <= EXACT_LIMIT:
        p = sum(abs(r(perm)) >= observed - tol for perm in itertools.permutations(cy)) / math.factorial(n)
    else:
        rng = random.Random(seed)
        hits = 1
        ys = list(cy)
        for _ in range(resamples):
            rng.shuffle(ys)
            hits += abs(r(ys)) >= observed - tol
        p = hits / (resamples + 1)
    rng = random.Random(seed)
    rhos = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        v = rank_correlation([x[i] for i in idx], [y[i] for i in idx])
        if math.isfinite(v):
            rhos.append(v)
    rhos.sort()
    ci = (_quantile(rhos, 0.025), _quantile(rhos, 0.975)) if rhos else nan2
    return CorrelationTest(n, rho, ci, p)
