"""The gradient-SNR probes of a set of runs (RAGEN-2 §3.1): per reward-variance bucket, the gradient norm of
each loss term, per run and then over the runs of a group.

Every ``diagnostics.grad_snr.every`` iterations the trainer's probe
(:class:`~ragen_torchrl.diagnostics.grad_snr.GradSNRProbe`) puts the prompt groups of the unfiltered batch
into reward-variance (RV) quantile buckets (:func:`~ragen_torchrl.diagnostics.grad_snr.rv_buckets`: tied
values share a bucket, so bucket 0 holds every zero-variance group and some buckets are empty at a probe)
and logs, per filled bucket ``b``, ``grad_snr/bucket{b}/reward_variance`` (the bucket's mean group RV) and
``grad_snr/bucket{b}/{task,kl,entropy}_grad_norm``: the L2 norm of the gradient of that loss term computed
on the bucket's rows alone (the loss's own mean over them; KL and entropy with their coefficients). A term
that is not in the loss (coefficient 0) is not logged.

* :func:`probe_points`: a run's probe values, one :class:`ProbePoint` per filled bucket and probe; a bucket
  whose RV or task norm is missing or NaN is skipped and counted, never an error;
* :func:`run_probes`: one run's bucket means over its probes (:class:`RunProbes`) and its trend statistics
  (:data:`TRENDS`, over its probe points with RV > 0); ``None`` for a run without probes;
* :func:`group_probes`: a group's runs, each bucket's and trend's mean over runs with its 95% Student-t
  interval (:class:`GroupProbes`);
* :func:`probe_section`: the report's markdown section (``[]`` when no run has probes);
* :func:`plot_grad_snr`: ``grad_snr.png``, per group the norms against the bucket's mean RV with the t band.

``ragen-report`` (:func:`~ragen_torchrl.reporting.cli.write_report`) adds the section and the plot only when
some run logged a probe: the report of runs without probes is unchanged.

The paper's claim, in these terms: the task norm grows with RV (bounded by about sqrt(RV), so
task / sqrt(RV) stays below a constant), the regularisers' norms stay flat across RV.

Example:
    >>> from pathlib import Path
    >>> from ragen_torchrl.reporting.runs import Run
    >>> h = [{"iteration": 1, "grad_snr/bucket0/reward_variance": 0.0, "grad_snr/bucket0/task_grad_norm": 0.0,
    ...       "grad_snr/bucket1/reward_variance": 0.25, "grad_snr/bucket1/task_grad_norm": 0.5}]
    >>> probes = run_probes(Run(Path("r"), {}, h))
    >>> probes.buckets[1].values["task_per_sqrt_rv"], probes.empty
    (1.0, {0: 0, 1: 0})
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from .run_metrics import Group
from .runs import Run
from .statistics import spearman, t_interval
from .table import md_code, md_escape

__all__ = [
    "QUANTITIES",
    "TRENDS",
    "BucketMeans",
    "Estimate",
    "GroupProbes",
    "ProbePoint",
    "RunProbes",
    "group_probes",
    "has_probes",
    "least_squares_slope",
    "plot_grad_snr",
    "probe_points",
    "probe_section",
    "run_probes",
]

#: the regularisers a probe may log, in the order the report shows them
REGULARISERS = ("kl", "entropy")
_LABELS = {"task": "task", "kl": "KL", "entropy": "entropy"}
_KEY = re.compile(r"^grad_snr/bucket(\d+)/(reward_variance|task_grad_norm|kl_grad_norm|entropy_grad_norm)$")
#: a bucket's per-run means: name -> what it is (``task_over_reg`` divides the run's means)
QUANTITIES = {
    "reward_variance": "the bucket's mean within-group reward variance",
    "task": "task-gradient norm",
    "kl": "KL-gradient norm",
    "entropy": "entropy-gradient norm",
    "task_per_sqrt_rv": "task norm / sqrt(RV), at probes where the bucket's RV > 0",
    "task_over_reg": "task norm / (sum of the regulariser norms), of the run's bucket means",
}
#: a run's trend statistics over its probe points with RV > 0: name -> (label, term, scaled by 1 / sqrt(RV), kind)
TRENDS = {
    "task_rho": ("Spearman rho, task norm vs RV", "task", False, "rho"),
    "task_slope": ("least-squares slope, task norm per unit RV", "task", False, "slope"),
    "scaled_rho": ("Spearman rho, task / sqrt(RV) vs RV", "task", True, "rho"),
    "scaled_slope": ("least-squares slope, task / sqrt(RV) per unit RV", "task", True, "slope"),
    "kl_rho": ("Spearman rho, KL norm vs RV", "kl", False, "rho"),
    "kl_slope": ("least-squares slope, KL norm per unit RV", "kl", False, "slope"),
    "entropy_rho": ("Spearman rho, entropy norm vs RV", "entropy", False, "rho"),
    "entropy_slope": ("least-squares slope, entropy norm per unit RV", "entropy", False, "slope"),
}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def has_probes(groups: Sequence[Group]) -> bool:
    """Whether some run of ``groups`` logged a gradient-SNR probe column.

    Example:
        >>> has_probes([Group({}, [Run(Path("r"), {}, [{"iteration": 1, "rollout/success": 0.5}])])])
        False
    """
    return any(any(_KEY.match(k) for k in h) for g in groups for r in g.runs for h in r.history)


@dataclass(frozen=True)
class ProbePoint:
    """One filled bucket at one probe: its mean RV and the norms logged (``None``: not logged or NaN there).

    Example:
        >>> ProbePoint(10, 2, 0.25, 0.5).entropy is None
        True
    """

    iteration: int
    bucket: int
    reward_variance: float
    task: float
    kl: float | None = None
    entropy: float | None = None


def probe_points(run: Run) -> tuple[list[ProbePoint], list[int], int]:
    """``(points, probe iterations, skipped)``: one :class:`ProbePoint` per bucket filled at a probe.

    A probe iteration is one that logged any ``grad_snr/bucket*`` column; a bucket with any column there
    but a missing or non-finite RV or task norm is skipped (counted in ``skipped``); a regulariser norm
    that is missing or NaN is ``None`` at its point.

    Example:
        >>> nan = float("nan")
        >>> h = [{"iteration": 10, "grad_snr/bucket0/reward_variance": 0.0, "grad_snr/bucket0/task_grad_norm": 0.0,
        ...       "grad_snr/bucket0/entropy_grad_norm": nan, "grad_snr/bucket2/reward_variance": 0.3,
        ...       "grad_snr/bucket2/task_grad_norm": nan}, {"iteration": 11, "rollout/success": 1.0}]
        >>> probe_points(Run(Path("r"), {}, h))
        ([ProbePoint(iteration=10, bucket=0, reward_variance=0.0, task=0.0, kl=None, entropy=None)], [10], 1)
    """
    points, iterations, skipped = [], [], 0
    for h in sorted(run.history, key=lambda h: int(h["iteration"])):
        buckets: dict[int, dict[str, float]] = {}
        for key, value in h.items():
            m = _KEY.match(key)
            if m:
                buckets.setdefault(int(m.group(1)), {})[m.group(2)] = value
        if not buckets:
            continue
        iterations.append(int(h["iteration"]))
        for b in sorted(buckets):
            v = buckets[b]
            rv, task = v.get("reward_variance"), v.get("task_grad_norm")
            if not (_finite(rv) and _finite(task)):
                skipped += 1
                continue
            regs = {t: float(v[f"{t}_grad_norm"]) if _finite(v.get(f"{t}_grad_norm")) else None for t in REGULARISERS}
            points.append(ProbePoint(int(h["iteration"]), b, float(rv), float(task), **regs))
    return points, iterations, skipped


def least_squares_slope(x: Sequence[float], y: Sequence[float]) -> float | None:
    """The ordinary least-squares slope of ``y`` on ``x``; ``None`` for fewer than 2 points or a constant ``x``.

    Example:
        >>> least_squares_slope([0.0, 1.0, 2.0], [1.0, 3.0, 5.0]), least_squares_slope([1.0, 1.0], [0.0, 2.0])
        (2.0, None)
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    if sxx == 0:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class BucketMeans:
    """One run's bucket over the probes that filled it: ``values`` (names of :data:`QUANTITIES`; ``None``
    where undefined) and ``probes``, the number of those probes.

    Example:
        >>> BucketMeans(1, 3, {"task": 0.5}).values["task"]
        0.5
    """

    bucket: int
    probes: int
    values: dict[str, float | None]


@dataclass(frozen=True)
class RunProbes:
    """One run's probes: per bucket its means (:class:`BucketMeans`), per bucket the probes it was empty at
    (``empty``), the bucket-probes skipped for a missing or NaN RV or task norm, the regularisers the run logged,
    its trend statistics (names of :data:`TRENDS`, ``None`` where undefined), and its zero-variance points
    (``zero_points``, ``zero_task_max``: their largest task norm); ``groups``: the mean number of
    zero-variance groups and of groups at its probes (``filter/zero_variance_groups``, ``filter/num_groups``;
    ``None`` when not logged).

    Example: see the module docstring and :func:`run_probes`.
    """

    path: Path
    iterations: list[int]
    num_buckets: int
    buckets: dict[int, BucketMeans]
    empty: dict[int, int]
    skipped: int
    terms: tuple[str, ...]
    trends: dict[str, float | None]
    zero_points: int = 0
    zero_task_max: float | None = None
    groups: tuple[float, float] | None = None


def _num_buckets(run: Run, raw_buckets: set[int]) -> int:
    cfg = run.config.get("diagnostics")
    logged = (cfg or {}).get("grad_snr") if isinstance(cfg, dict) else None
    configured = logged.get("buckets") if isinstance(logged, dict) else None
    seen = max(raw_buckets, default=-1) + 1
    return max(int(configured), seen) if isinstance(configured, int) and not isinstance(configured, bool) else seen


def run_probes(run: Run, num_buckets: int | None = None) -> RunProbes | None:
    """A run's bucket means and trend statistics (``None`` when it logged no probe).

    ``num_buckets``: the buckets counted as empty when missing at a probe (default: the run's
    ``diagnostics.grad_snr.buckets``, else the highest bucket logged + 1). The trend statistics use every
    probe point with RV > 0 (a zero-variance bucket's advantages are all 0, so its task norm is 0 by
    construction): Spearman's rho and the least-squares slope of the task norm, of task / sqrt(RV) and of each
    regulariser's norm against the bucket's RV.

    Example:
        >>> def probe(it, rv, task, ent):
        ...     return {"iteration": it, **{f"grad_snr/bucket{b}/{k}": v for b, (r, t, e) in enumerate(zip(rv, task, ent))
        ...             for k, v in (("reward_variance", r), ("task_grad_norm", t), ("entropy_grad_norm", e))}}
        >>> run = Run(Path("r"), {}, [probe(1, [0.0, 0.25, 1.0], [0.0, 0.5, 1.0], [0.1, 0.1, 0.3]),
        ...                           probe(11, [0.0, 0.25, 1.0], [0.0, 0.7, 0.6], [0.1, 0.3, 0.1])])
        >>> p = run_probes(run)
        >>> p.buckets[1].values["task"], p.buckets[2].values["task_over_reg"], round(p.trends["task_slope"], 4)
        (0.6, 4.0, 0.2667)
        >>> run_probes(Run(Path("r"), {}, [{"iteration": 1, "rollout/success": 0.5}])) is None
        True
    """
    points, iterations, skipped = probe_points(run)
    if not iterations:
        return None
    raw = {int(m.group(1)) for h in run.history for k in h if (m := _KEY.match(k))}
    n_buckets = num_buckets if num_buckets is not None else _num_buckets(run, raw)
    terms = tuple(t for t in REGULARISERS if any(getattr(p, t) is not None for p in points))
    buckets: dict[int, BucketMeans] = {}
    for b in sorted({p.bucket for p in points}):
        mine = [p for p in points if p.bucket == b]
        values: dict[str, float | None] = {
            "reward_variance": _mean([p.reward_variance for p in mine]),
            "task": _mean([p.task for p in mine]),
        }
        for t in REGULARISERS:
            values[t] = _mean([v for p in mine if (v := getattr(p, t)) is not None]) if t in terms else None
        values["task_per_sqrt_rv"] = _mean(
            [p.task / math.sqrt(p.reward_variance) for p in mine if p.reward_variance > 0]
        )
        reg = sum(values[t] or 0.0 for t in terms)
        values["task_over_reg"] = values["task"] / reg if terms and reg > 0 else None
        buckets[b] = BucketMeans(b, len(mine), values)
    filled: dict[int, set[int]] = {}
    for h in run.history:  # a bucket with a column at a probe was filled there, even if its values were skipped
        for k in h:
            if m := _KEY.match(k):
                filled.setdefault(int(m.group(1)), set()).add(int(h["iteration"]))
    empty = {b: len(iterations) - len(filled.get(b, ())) for b in range(n_buckets)}
    signal = [p for p in points if p.reward_variance > 0]
    trends: dict[str, float | None] = {}
    for name, (_, term, scaled, kind) in TRENDS.items():
        pairs = [
            (p.reward_variance, v / math.sqrt(p.reward_variance) if scaled else v)
            for p in signal
            if (v := getattr(p, term)) is not None
        ]
        x, y = [a for a, _ in pairs], [b for _, b in pairs]
        if kind == "rho":
            rho = spearman(x, y) if len(pairs) >= 3 else math.nan
            trends[name] = rho if math.isfinite(rho) else None
        else:
            trends[name] = least_squares_slope(x, y)
    zero = [p.task for p in points if p.reward_variance == 0]
    probed = set(iterations)
    counts = [
        (float(h["filter/zero_variance_groups"]), float(h["filter/num_groups"]))
        for h in run.history
        if int(h["iteration"]) in probed
        and _finite(h.get("filter/zero_variance_groups"))
        and _finite(h.get("filter/num_groups"))
    ]
    groups = (_mean([z for z, _ in counts]), _mean([n for _, n in counts])) if counts else None
    return RunProbes(
        run.path,
        iterations,
        n_buckets,
        buckets,
        empty,
        skipped,
        terms,
        trends,
        len(zero),
        max(zero, default=None),
        groups,
    )


@dataclass(frozen=True)
class Estimate:
    """The mean over ``n`` runs with its 95% Student-t interval (``nan`` bounds below 2 runs); ``above`` /
    ``below``: runs whose value is > 0 / < 0.

    Example:
        >>> e = _estimate([1.0, 2.0, 3.0])   # mean 2, t_{0.975, 2} * 1 / sqrt(3) = 2.4841
        >>> round(e.lo, 4), round(e.hi, 4), e.n, e.above
        (-0.4841, 4.4841, 3, 3)
    """

    mean: float
    lo: float
    hi: float
    n: int
    above: int = 0
    below: int = 0


def _estimate(values: Sequence[float]) -> Estimate | None:
    if not values:
        return None
    lo, hi = t_interval(values)
    return Estimate(
        sum(values) / len(values), lo, hi, len(values), sum(v > 0 for v in values), sum(v < 0 for v in values)
    )


@dataclass(frozen=True)
class GroupProbes:
    """A group's probes: its runs' :class:`RunProbes`, the runs without probes, and per bucket and quantity
    (:data:`QUANTITIES`) and per trend (:data:`TRENDS`) the :class:`Estimate` over the runs that have it.

    Example: see :func:`group_probes`.
    """

    label: str
    runs: list[RunProbes]
    without: list[Path]
    buckets: dict[int, dict[str, Estimate | None]] = field(default_factory=dict)
    trends: dict[str, Estimate | None] = field(default_factory=dict)

    @property
    def terms(self) -> tuple[str, ...]:
        """The regularisers some run of the group logged."""
        return tuple(t for t in REGULARISERS if any(t in r.terms for r in self.runs))


def group_probes(group: Group) -> GroupProbes:
    """Each bucket's means and each trend statistic over the group's runs with probes: mean and 95% t interval.

    Example:
        >>> def run(i, task):
        ...     h = [{"iteration": 1, "grad_snr/bucket0/reward_variance": 0.5, "grad_snr/bucket0/task_grad_norm": task}]
        ...     return Run(Path(f"r{i}"), {}, h)
        >>> g = group_probes(Group({}, [run(0, 1.0), run(1, 2.0), run(2, 3.0), Run(Path("r3"), {})]))
        >>> e = g.buckets[0]["task"]
        >>> round(e.mean, 4), round(e.lo, 4), round(e.hi, 4), e.n, [p.name for p in g.without]
        (2.0, -0.4841, 4.4841, 3, ['r3'])
    """
    probes, without = [], []
    for r in group.runs:
        p = run_probes(r)
        (probes.append(p) if p is not None else without.append(r.path))
    buckets: dict[int, dict[str, Estimate | None]] = {}
    for b in sorted({b for p in probes for b in p.buckets}):
        means = [p.buckets[b].values for p in probes if b in p.buckets]
        buckets[b] = {q: _estimate([v for m in means if (v := m[q]) is not None]) for q in QUANTITIES}
    trends = {t: _estimate([v for p in probes if (v := p.trends[t]) is not None]) for t in TRENDS}
    return GroupProbes(group.label, probes, without, buckets, trends)


def _g(x: float | None, sign: bool = False) -> str:
    """A norm or ratio with 3 significant digits (norms span 1e-9 to 1); ``—`` for none/NaN.

    Example:
        >>> _g(0.28777), _g(0.000416858), _g(-1.5e-09, sign=True), _g(None), _g(-0.0)
        ('0.288', '0.000417', '-1.5e-09', '—', '0')
    """
    if x is None or not math.isfinite(x):
        return "—"
    text = f"{x:+.3g}" if sign else f"{x:.3g}"
    return "0" if text in ("-0", "+0") and not sign else text


def _interval_cell(e: Estimate | None, sign: bool = False) -> str:
    if e is None:
        return "—"
    if e.n == 1:
        return f"{_g(e.mean, sign)} (1 run)"
    return f"{_g(e.mean, sign)} [{_g(e.lo, sign)}, {_g(e.hi, sign)}]"


def probe_section(groups: Sequence[Group]) -> list[str]:
    """The report's "Gradient SNR probes" section as markdown lines; ``[]`` when no run logged a probe.

    Example:
        >>> h = [{"iteration": 1, "grad_snr/bucket0/reward_variance": 0.0, "grad_snr/bucket0/task_grad_norm": 0.0,
        ...       "grad_snr/bucket0/entropy_grad_norm": 0.01}]
        >>> lines = probe_section([Group({"arm": "a"}, [Run(Path("r"), {}, h)])])
        >>> lines[0], lines[6]
        ('## Gradient SNR probes (RAGEN-2 §3.1)', '| arm=a | 0 | 1 | 1 / 0 | 0 (1 run) | 0 (1 run) | 0.01 (1 run) | — | 0 (1 run) |')
        >>> probe_section([Group({}, [Run(Path("r"), {}, [{"iteration": 1}])])])
        []
    """
    if not has_probes(groups):
        return []
    summaries = [group_probes(g) for g in groups]
    terms = tuple(t for t in REGULARISERS if any(t in s.terms for s in summaries))
    names = " + ".join(_LABELS[t] for t in terms)
    ratio = f"task / ({names})" if len(terms) > 1 else f"task / {names}" if terms else "task / regularisers"
    header = ["group", "bucket", "runs", "filled / empty probes", "reward variance", "task norm"]
    header += [f"{_LABELS[t]} norm" for t in terms] + ["task / sqrt(RV)", ratio]
    absent = [t for t in REGULARISERS if t not in terms]
    out = [
        "## Gradient SNR probes (RAGEN-2 §3.1)",
        "",
        "At each probe the prompt groups of the unfiltered batch go into reward-variance (RV) quantile buckets "
        "(tied values share a bucket, so bucket 0 holds every zero-variance group and a bucket can be empty); "
        "per bucket, the L2 norm of the gradient of each loss term computed on that bucket's rows alone (the "
        "loss's mean over them; the regularisers with their coefficients). Per run, each bucket's values are "
        "averaged over the probes that filled it (task / sqrt(RV): over those with RV > 0; task / "
        "regularisers: the ratio of the run's means); then mean over the group's runs with its 95% Student-t "
        "interval [lo, hi] (runs: those that filled the bucket at least once). Norms to 3 significant digits."
        + (f" Not logged by any run: {', '.join(_LABELS[t] for t in absent)} (not in the loss)." if absent else ""),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    notes = []
    for g, s in zip(groups, summaries):
        label = md_escape(g.label)
        if not s.runs:
            out.append("| " + " | ".join([label, "no probes", *["—"] * (len(header) - 2)]) + " |")
            continue
        for b in range(max(p.num_buckets for p in s.runs)):
            est = s.buckets.get(b)
            filled = sum(p.buckets[b].probes for p in s.runs if b in p.buckets)
            empty = sum(p.empty.get(b, 0) for p in s.runs)
            if est is None:
                cells = ["—"] * (len(header) - 4)
                runs = 0
            else:
                runs = max((e.n for e in est.values() if e is not None), default=0)
                cells = [_interval_cell(est[q]) for q in ("reward_variance", "task", *terms)]
                cells += [_interval_cell(est["task_per_sqrt_rv"]), _interval_cell(est["task_over_reg"])]
            out.append(f"| {label} | {b} | {runs} | {filled} / {empty} | " + " | ".join(cells) + " |")
        skipped = sum(p.skipped for p in s.runs)
        zero = sum(p.zero_points for p in s.runs)
        zmax = max((p.zero_task_max for p in s.runs if p.zero_task_max is not None), default=None)
        probes = sum(len(p.iterations) for p in s.runs)
        note = f"- {label}: {probes} probes in {len(s.runs)} runs"
        counted = [p.groups for p in s.runs if p.groups is not None]
        if counted:
            zero_groups, all_groups = (_mean([c[i] for c in counted]) for i in (0, 1))
            note += f", on average {_g(zero_groups)} zero-variance groups of {_g(all_groups)} at a probe"
        note += f"; {zero} bucket-probes with RV = 0, largest task norm there {_g(zmax)}" if zero else ""
        note += f"; {skipped} bucket-probes skipped (RV or task norm missing or NaN)" if skipped else ""
        if s.without:
            note += "; no probes in " + ", ".join(md_code(p.name) for p in s.without)
        notes.append(note + ".")
    out += [
        "",
        "Trend per run over its probe points with RV > 0 (every probe and bucket; the zero-variance buckets "
        "left out: their advantages are all 0, so their task norm is 0 by construction): Spearman's rho and "
        "the least-squares slope against the bucket's RV; then mean over the group's runs with its 95% "
        "Student-t interval (runs: those where it is defined, rho from 3 points). RAGEN-2 §3.1: the task "
        "norm grows with RV, bounded by about sqrt(RV) (task / sqrt(RV) at most a constant); the "
        "regularisers' norms stay flat (slope about 0).",
        "",
        "| group | statistic | runs | mean | 95% CI (t) | runs > 0 / < 0 |",
        "|---|---|---|---|---|---|",
    ]
    shown = [t for t, (_, term, _, _) in TRENDS.items() if term == "task" or term in terms]
    for g, s in zip(groups, summaries):
        for t in shown:
            e = s.trends.get(t)
            if e is None:
                continue
            fmt = _rho if TRENDS[t][3] == "rho" else partial(_g, sign=True)
            ci = f"[{fmt(e.lo)}, {fmt(e.hi)}]" if e.n > 1 else "—"
            out.append(
                f"| {md_escape(g.label)} | {TRENDS[t][0]} | {e.n} | {fmt(e.mean)} | {ci} | {e.above} / {e.below} |"
            )
    return out + ["", *notes, ""]


def _rho(x: float) -> str:
    if not math.isfinite(x):
        return "—"
    text = f"{x:+.3f}"
    return "+0.000" if text == "-0.000" else text


def plot_grad_snr(groups: Sequence[Group], path: str | Path, keys: Sequence[str] = ()) -> Path:
    """``grad_snr.png``: one panel per loss term logged (task, KL, entropy), per group the mean norm over its
    runs against the bucket's mean RV (both means of the runs' bucket means), with the 95% t band.

    Example:
        >>> import tempfile
        >>> h = [{"iteration": 1, "grad_snr/bucket0/reward_variance": 0.0, "grad_snr/bucket0/task_grad_norm": 0.0,
        ...       "grad_snr/bucket1/reward_variance": 0.3, "grad_snr/bucket1/task_grad_norm": 0.4}]
        >>> plot_grad_snr([Group({}, [Run(Path("r"), {}, h)])], Path(tempfile.mkdtemp()) / "grad_snr.png").name
        'grad_snr.png'
    """
    from .plots import BAND_CAPTION, _colours, _legend, _save, _wrap, legend_labels, pyplot

    summaries = [group_probes(g) for g in groups]
    terms = ("task", *(t for t in REGULARISERS if any(t in s.terms for s in summaries)))
    plt = pyplot()
    fig, axes = plt.subplots(len(terms), 1, figsize=(7.5, 3.2 * len(terms)), sharex=True, squeeze=False)
    runs = sum(len(s.runs) for s in summaries)
    colours = _colours(len(groups))
    labels = legend_labels(groups, keys)
    for ax, term in zip(axes[:, 0], terms):
        top = 0.0  # the largest mean drawn
        for s, label, colour in zip(summaries, labels, colours):
            pts = [
                (est["reward_variance"].mean, est[term])
                for est in s.buckets.values()
                if est["reward_variance"] is not None and est[term] is not None
            ]
            if not pts:
                continue
            pts.sort(key=lambda p: p[0])
            xs, ys = [p[0] for p in pts], [p[1].mean for p in pts]
            top = max(top, *ys)
            name = _wrap(label, f"(n={len(s.runs)})")
            ax.plot(xs, ys, marker="o", ms=4, color=colour, label=name)
            band = [(x, e.lo, e.hi) for x, (_, e) in zip(xs, pts) if e.n > 1]
            if band:
                ax.fill_between(
                    [b[0] for b in band], [b[1] for b in band], [b[2] for b in band], color=colour, alpha=0.2, lw=0
                )
        # norms are >= 0; a band of 2 runs (t_{0.975, 1} = 12.7) would flatten every mean, so it is cut
        cut = top > 0 and ax.get_ylim()[1] > 2 * top
        ax.set_ylim(0.0, 2 * top if cut else None)
        note = ", y axis cut at twice the largest mean" if cut else ""
        ax.set_title(
            f"{_LABELS[term]}-gradient norm per RV bucket: n = {runs} runs with probes{note}", fontsize="medium"
        )
        ax.set_ylabel(f"{_LABELS[term]} gradient L2 norm", fontsize="small")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Gradient SNR probes (RAGEN-2 §3.1)\n{BAND_CAPTION}")
    axes[-1, 0].set_xlabel("bucket's mean within-group reward variance (mean over runs)")
    _legend(axes[0, 0], "group")
    fig.align_ylabels(axes[:, 0])
    return _save(fig, path)
