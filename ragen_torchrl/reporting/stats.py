"""Grouping runs by their swept config keys, and the statistics of a report.

* :func:`swept_keys` / :func:`group_runs`: runs that differ only in ``seed`` (and paths) form one group;
* :func:`mean_se`: mean ± standard error over seeds (sample std / sqrt(n); 0 for one run);
* :func:`early_mean`: a diagnostic measured early in training (mean over the first 20% of iterations);
* :func:`rank_correlation` / :func:`spearman`: Spearman's rank correlation (scipy's when installed);
* :data:`DIAGNOSTICS`: the diagnostics related to final success (MI z-score, retrieval accuracy, entropy).

Example:
    >>> mean_se([0.25, 0.5, 0.75])   # std 0.25, SE 0.25 / sqrt(3)
    (0.5, 0.14433756729740643)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .runs import Run, flatten_config

__all__ = [
    "DIAGNOSTICS",
    "Diagnostic",
    "DiagnosticPoints",
    "Group",
    "diagnostic_points",
    "early_mean",
    "format_value",
    "group_runs",
    "mean_se",
    "rank_correlation",
    "spearman",
    "swept_keys",
    "update_times",
]


@dataclass(frozen=True)
class Diagnostic:
    """A per-iteration diagnostic: its file-name ``slug``, axis ``label`` and candidate scalar ``keys``.

    The first key a run logged is used (``collapse/trajectory/...`` is the trajectory-uniform MI scheme).
    """

    slug: str
    label: str
    keys: tuple[str, ...]

    def key_for(self, run: Run) -> str | None:
        """The first of :attr:`keys` that ``run`` logged, else ``None``."""
        return next((k for k in self.keys if run.has(k)), None)


#: the diagnostics related to final success (RAGEN-2: MI z-score predicts it, entropy does not)
DIAGNOSTICS = (
    Diagnostic("mi_zscore", "trajectory MI z-score (z, dimensionless)", ("collapse/trajectory/mi_zscore",)),
    Diagnostic(
        "retrieval_accuracy",
        "retrieval accuracy (fraction of reasoning matched to its input)",
        ("collapse/trajectory/retrieval_accuracy",),
    ),
    Diagnostic(
        "reasoning_entropy",
        "reasoning token entropy (nats/token)",
        ("collapse/trajectory/reasoning_token_entropy_mean", "collapse/trajectory/reasoning_entropy"),
    ),
)

# config keys that name files or folders: never a swept key
_PATH_KEY = re.compile(r"(^|[._])(dir|dirs|path|paths|file|resume)$|name_or_path$|^hydra\.")


def _hashable(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def swept_keys(runs: Sequence[Run]) -> list[str]:
    """The config keys whose values differ between runs, without ``seed`` and path/dir keys.

    A key whose values split the runs exactly as an earlier key does (``filter.strategy`` next to
    ``filter.name``) adds nothing and is left out; ``*.name`` keys come first.

    Example:
        >>> from pathlib import Path
        >>> cfgs = [{"seed": s, "filter": {"name": f, "value": v}, "model": {"cache_dir": f"/c{s}"}}
        ...         for s in (0, 1) for f, v in (("none", 1.0), ("snr_top_p", 0.9))]
        >>> swept_keys([Run(Path(str(i)), c) for i, c in enumerate(cfgs)])
        ['filter.name']
    """
    flat = [flatten_config(r.config) for r in runs]
    keys = sorted({k for f in flat for k in f}, key=lambda k: (not k.endswith(".name"), k.count("."), k))
    out: list[str] = []
    partitions: set[tuple[int, ...]] = set()
    for k in keys:
        if k == "seed" or _PATH_KEY.search(k):
            continue
        values = [_hashable(f.get(k, None)) for f in flat]
        if len(set(values)) < 2:
            continue
        first: dict[str, int] = {}
        partition = tuple(first.setdefault(v, len(first)) for v in values)
        if partition in partitions:
            continue
        partitions.add(partition)
        out.append(k)
    return out


@dataclass
class Group:
    """Runs sharing the values of the swept keys.

    Example:
        >>> Group({"filter.name": "none", "env.name": "sokoban"}).label
        'filter.name=none, env.name=sokoban'
        >>> Group({}).label
        'all runs'
    """

    values: dict[str, Any]
    runs: list[Run] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``key=value, ...`` (``all runs`` when nothing is swept)."""
        return ", ".join(f"{k}={format_value(v)}" for k, v in self.values.items()) or "all runs"


def format_value(v: Any) -> str:
    """A config value as the report shows it (``—`` when the key is absent).

    Example:
        >>> format_value("none"), format_value(0.9), format_value(None), format_value([1, 2])
        ('none', '0.9', '—', '[1, 2]')
    """
    return "—" if v is None else (v if isinstance(v, str) else json.dumps(v))


def group_runs(runs: Sequence[Run], by: Sequence[str] | None = None) -> tuple[list[str], list[Group]]:
    """``(keys, groups)``: runs grouped by ``by`` (default :func:`swept_keys`), groups in first-seen order.

    Example:
        >>> from pathlib import Path
        >>> runs = [Run(Path(str(i)), {"seed": i, "filter": {"name": f}}) for i, f in enumerate("abab")]
        >>> keys, groups = group_runs(runs)
        >>> keys, [(g.label, len(g.runs)) for g in groups]
        (['filter.name'], [('filter.name=a', 2), ('filter.name=b', 2)])
    """
    keys = list(by) if by else swept_keys(runs)
    groups: dict[str, Group] = {}
    for run in runs:
        flat = flatten_config(run.config)
        values = {k: flat.get(k) for k in keys}
        groups.setdefault(_hashable(list(values.values())), Group(values)).runs.append(run)
    return keys, list(groups.values())


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


#: per-iteration flags of an iteration that took no optimizer step (its update time is 0 s)
SKIPPED_UPDATE_KEYS = ("filter/skipped_update", "dapo/skipped_update")


def update_times(run: Run) -> list[tuple[int, float]]:
    """``(iteration, seconds)`` of the policy update (``timing/update``); a skipped update counts as 0 s.

    An iteration whose filter kept no group (or DAPO found no signal) logs no ``timing/update``:
    it spent no time updating, which is part of what a filter saves. Iterations that ran the
    gradient-SNR probe (``timing/grad_snr`` logged) are left out: before the probe moved to
    ``diagnostics.grad_snr`` its extra passes were counted inside ``timing/update`` of the filtered
    arm only, which would bias a filter-vs-none comparison against the filter.

    Example:
        >>> from pathlib import Path
        >>> h = [{"iteration": 1, "timing/update": 2.0}, {"iteration": 2, "filter/skipped_update": 1.0},
        ...      {"iteration": 3, "timing/update": 9.0, "timing/grad_snr": 4.0}]
        >>> update_times(Run(Path("r"), {}, h))
        [(1, 2.0), (2, 0.0)]
    """
    out = []
    for h in run.history:
        if "timing/grad_snr" in h:
            continue
        v = h.get("timing/update")
        if isinstance(v, (int, float)) and math.isfinite(v):
            out.append((int(h["iteration"]), float(v)))
        elif any(h.get(k) for k in SKIPPED_UPDATE_KEYS):
            out.append((int(h["iteration"]), 0.0))
    return out


def early_mean(run: Run, key: str, fraction: float = 0.2) -> float | None:
    """Mean of ``key`` over the iterations in the first ``fraction`` of the run (at least its first value).

    Example:
        >>> from pathlib import Path
        >>> h = [{"iteration": i, "mi": float(i)} for i in (1, 6, 11, 16, 21)]
        >>> early_mean(Run(Path("r"), {}, h, iterations=50), "mi")   # iterations <= 10: 1 and 6
        3.5
    """
    pts = run.series(key)
    if not pts:
        return None
    cut = max(1, math.ceil(fraction * run.total_iterations))
    early = [v for it, v in pts if it <= cut] or [pts[0][1]]
    return sum(early) / len(early)


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


@dataclass
class DiagnosticPoints:
    """Final validation success against a diagnostic measured early: one point per run.

    Attributes:
        diagnostic: the :class:`Diagnostic`.
        keys: the scalar key(s) the runs logged it under.
        points: ``(group index, run, early value, final success)`` for each run with both.
        rho: Spearman's rho over the points (NaN when fewer than 3 or constant).
    """

    diagnostic: Diagnostic
    keys: list[str]
    points: list[tuple[int, Run, float, float]]
    rho: float


def diagnostic_points(groups: Sequence[Group], fraction: float = 0.2) -> list[DiagnosticPoints]:
    """For each of :data:`DIAGNOSTICS` that some run logged: its :class:`DiagnosticPoints`.

    Example:
        >>> from pathlib import Path
        >>> def run(mi, success):
        ...     return Run(Path("r"), {}, [{"iteration": 1, "collapse/trajectory/mi_zscore": mi}],
        ...                [(1, {"success": success})])
        >>> [d] = diagnostic_points([Group({}, [run(0.1, 0.2), run(0.3, 0.4), run(0.2, 0.9)])])
        >>> d.diagnostic.slug, d.keys, d.rho
        ('mi_zscore', ['collapse/trajectory/mi_zscore'], 0.5)
    """
    out = []
    for diag in DIAGNOSTICS:
        keys: list[str] = []
        points = []
        for gi, group in enumerate(groups):
            for run in group.runs:
                key = diag.key_for(run)
                if key is None:
                    continue
                if key not in keys:
                    keys.append(key)
                value, final = early_mean(run, key, fraction), run.final_success
                if value is not None and final is not None:
                    points.append((gi, run, value, final))
        if keys:
            rho = spearman([p[2] for p in points], [p[3] for p in points])
            out.append(DiagnosticPoints(diag, keys, points, rho))
    return out
