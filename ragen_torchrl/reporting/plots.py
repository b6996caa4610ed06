"""The report's PNG plots (matplotlib, Agg backend; the ``plot`` extra).

* ``val_success.png``: validation success per group: each seed's curve (thin) and the mean over seeds
  with its 95% Student-t band;
* ``update_time.png``: update time per iteration, per group (seconds), mean and 95% t band;
* ``train_success.png``: training-rollout success (trailing mean over 5 iterations), mean and 95% t band;
* ``success_vs_<diagnostic>.png``: final success against a diagnostic measured early, one point per
  run coloured by group, Spearman's rho with its interval and p-value on the plot (or "n too small");
* ``diagnostics.png``: the MI z-score and reasoning entropy (and retrieval accuracy) over training.

**The band** (:func:`mean_band`) is the 95% Student-t confidence interval of the mean over a group's
seeds at each point: mean ± t_{0.975, n-1} · sd / sqrt(n) (a group of one run has no band); every
band plot says so in its title and gives each group's n in its legend.

**Alignment.** On the default x axis, training iterations, runs are aligned by iteration: the mean and
its band are drawn only at the iterations where every run of the group has a value, so the mean
curve ends where the group's shortest run ends (every point of it averages the same n runs). When
the runs end at different points the legend says where (``runs end at 148–175, mean to 140``) and
the longer runs' points past the mean's end are drawn thin and dotted (on the validation plot
each seed's curve is drawn in full anyway); nothing past the shortest run is averaged.

**The x axis** (:data:`X_AXES`, ``ragen-report --x``): ``iterations`` (default), ``steps`` (the
optimizer steps taken so far: ``train/optimizer_steps`` summed over the iterations, a skipped update
counting 0) or ``seconds`` (training wall-clock seconds so far: each iteration's ``timing/total`` less its
measurement-only diagnostics :data:`DIAGNOSTIC_SECONDS`, summed; validation, checkpoints and setup are
not counted), see :func:`x_positions`. On steps and seconds the runs share no grid: each run's series
is interpolated linearly between its own points onto the union of the runs' x values inside the
range every run covers (from the latest first point to the earliest last point, never extrapolated),
and the mean and band are taken there; a run that did not log the axis's scalar is left out (the
title says how many). Per-seed curves and the dotted tails keep each run's own points.

What the plots promise: a series of at most two points is drawn as markers with error bars, never
joined by a line; every legend entry names every config key that differs between the runs (seed and
paths aside) and its n; every panel's title gives its n.
Legends sit outside the axes (they never cover data) and figures are saved with a tight bounding box.
A band plot's y axis is fitted to what it draws (success rates kept within 0–1; update times from 0).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from ragen_torchrl.reporting.runs import Run
    >>> from ragen_torchrl.reporting.run_metrics import group_runs
    >>> runs = [Run(Path(f"r{s}"), {"seed": s}, [{"iteration": 1, "timing/update": 1.0 + s}],
    ...             [(0, {"success": 0.2}), (1, {"success": 0.4 + s / 10})]) for s in (0, 1)]
    >>> _, groups = group_runs(runs)
    >>> out = Path(tempfile.mkdtemp())
    >>> plot_val_success(groups, out / "val_success.png").stat().st_size > 0
    True
    >>> band = mean_band([r.val_series("success") for r in runs])   # 2 seeds: t_{0.975, 1} = 12.706
    >>> band.x, [round(m, 2) for m in band.mean], [round(h, 3) for h in band.half], band.n
    ([0, 1], [0.2, 0.45], [0.0, 0.635], 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..flat_config import flatten_config
from ..safe_io import write_bytes_atomic
from .run_metrics import DIAGNOSTICS, Diagnostic, DiagnosticPoints, Group, format_value, update_times
from .runs import Run
from .statistics import MIN_CORRELATION_N, t_interval

__all__ = [
    "BAND_CAPTION",
    "DIAGNOSTIC_SECONDS",
    "X_AXES",
    "Band",
    "PlotDependencyError",
    "legend_labels",
    "mean_band",
    "plot_names",
    "plot_diagnostics",
    "plot_success_vs_diagnostic",
    "plot_train_success",
    "plot_update_time",
    "plot_val_success",
    "pyplot",
    "write_plots",
    "x_positions",
]

#: the curves' x axes (``ragen-report --x``): name -> axis label (see :func:`x_positions`)
X_AXES = {
    "iterations": "training iteration",
    "steps": "optimizer steps so far",
    "seconds": "wall-clock training seconds so far (validation and diagnostics excluded)",
}
#: the per-iteration scalar each accumulated x axis sums
_AXIS_SCALAR = {"steps": "train/optimizer_steps", "seconds": "timing/total"}
#: seconds inside ``timing/total`` that only measure (the MI proxies, the gradient-SNR probe): not training time
DIAGNOSTIC_SECONDS = ("timing/mi_seconds", "timing/grad_snr")
#: what every band plot's title says its band is
BAND_CAPTION = "mean over seeds, band: 95% Student-t interval of the mean (none for n = 1)"


class PlotDependencyError(ImportError):
    """matplotlib is not installed (install the ``plot`` extra)."""


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, imported on first use.

    Raises :class:`PlotDependencyError` naming the ``plot`` extra when matplotlib is missing.

    Example:
        >>> pyplot().get_backend().lower()
        'agg'
    """
    try:
        import matplotlib
    except ImportError as e:
        raise PlotDependencyError(
            "the plots need matplotlib: pip install 'ragen-torchrl[plot]' (or pip install 'matplotlib>=3.7')"
        ) from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _colours(n: int) -> list:
    plt = pyplot()
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# --------------------------------------------------------------------------- x axes and bands
def x_positions(run: Run, x: str = "iterations") -> dict[int, float] | None:
    """Each iteration's place on the ``x`` axis (:data:`X_AXES`), iteration 0 (before training) at 0.

    ``iterations``: the iteration itself. ``steps``: the optimizer steps taken up to the end of that
    iteration (``train/optimizer_steps`` summed; an iteration that logged none, a skipped update, took 0).
    ``seconds``: the training seconds up to its end: each iteration's ``timing/total`` (rollout,
    diagnostics, filter and update; validation, checkpoints and setup are outside it) less the
    measurement-only :data:`DIAGNOSTIC_SECONDS` it logged, summed. ``None`` when the run never logged
    the scalar the axis sums (``train/optimizer_steps`` or ``timing/total``).

    Example:
        >>> h = [{"iteration": 1, "train/optimizer_steps": 4.0, "timing/total": 10.0, "timing/mi_seconds": 2.0},
        ...      {"iteration": 2, "filter/skipped_update": 1.0, "timing/total": 3.0},
        ...      {"iteration": 3, "train/optimizer_steps": 4.0, "timing/total": 9.0, "timing/grad_snr": 1.5}]
        >>> run = Run(Path("r"), {}, h, [(0, {"success": 0.1}), (3, {"success": 0.3})])
        >>> x_positions(run, "steps"), x_positions(run, "seconds")
        ({0: 0.0, 1: 4.0, 2: 4.0, 3: 8.0}, {0: 0.0, 1: 8.0, 2: 11.0, 3: 18.5})
        >>> x_positions(Run(Path("r"), {}, [{"iteration": 1}]), "steps") is None
        True
    """
    if x not in X_AXES:
        raise ValueError(f"x axis {x!r}: not one of {', '.join(X_AXES)}")
    if x == "iterations":
        its = {0, *(int(h["iteration"]) for h in run.history), *(it for it, _ in run.val)}
        return {it: float(it) for it in sorted(its)}
    key = _AXIS_SCALAR[x]
    if not run.has(key):
        return None
    out, total = {0: 0.0}, 0.0
    for h in sorted(run.history, key=lambda h: int(h["iteration"])):
        amount = float(h[key]) if _finite(h.get(key)) else 0.0
        if x == "seconds":
            amount = max(0.0, amount - sum(float(h[k]) for k in DIAGNOSTIC_SECONDS if _finite(h.get(k))))
        total += amount
        out[int(h["iteration"])] = total
    return out


@dataclass(frozen=True)
class Band:
    """A group's mean curve: at each ``x`` the mean over its ``n`` runs and the half-width of the 95%
    Student-t interval of that mean (``nan`` for one run); ``ends``: the earliest and latest last x of the runs."""

    x: list[float]
    mean: list[float]
    half: list[float]
    n: int
    ends: tuple[float, float]


def _interp(points: Sequence[tuple[float, float]], x: float) -> float:
    """The run's value at ``x`` by linear interpolation between its neighbouring points (``x`` inside them)."""
    import bisect

    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return points[i][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def mean_band(series_per_run: Sequence[Sequence[tuple[float, float]]], interpolate: bool = False) -> Band:
    """The mean over runs with its 95% Student-t band, where every run has a value (empty series left out).

    Without ``interpolate`` (runs aligned by iteration) the points are the x values every run has: the
    curve ends where the shortest run ends. With it (steps, seconds: no shared grid) each run is
    interpolated linearly between its own points onto the union of the runs' x values inside the range
    every run covers (the latest first x to the earliest last x; nothing extrapolated); when every run
    has at most two points nothing is interpolated (the shared x values only). Of points at the same x
    within a run, the last counts.

    Example:
        >>> a, b = [(0, 0.0), (10, 1.0), (20, 1.0)], [(0, 0.0), (5, 0.5), (30, 0.5)]
        >>> band = mean_band([a, b], interpolate=True)   # b at 10 and 20: 0.5; a at 5: 0.5
        >>> band.x, band.mean, band.n, band.ends
        ([0, 5, 10, 20], [0.0, 0.5, 0.75, 0.75], 2, (20, 30))
        >>> mean_band([a, b]).x   # aligned, not interpolated: the shared points
        [0]
    """
    runs = [sorted(dict(s).items()) for s in series_per_run if s]
    if not runs:
        return Band([], [], [], 0, (math.nan, math.nan))
    ends = (min(r[-1][0] for r in runs), max(r[-1][0] for r in runs))
    if interpolate and any(len(r) > 2 for r in runs):
        start = max(r[0][0] for r in runs)
        grid = sorted({x for r in runs for x, _ in r if start <= x <= ends[0]})
        values = [[_interp(r, x) for r in runs] for x in grid]
    else:
        lookups = [dict(r) for r in runs]
        grid = sorted(set.intersection(*(set(d) for d in lookups)))
        values = [[d[x] for d in lookups] for x in grid]
    mean = [sum(v) / len(v) for v in values]
    half = [(hi - lo) / 2.0 for lo, hi in map(t_interval, values)]
    return Band(grid, mean, half, len(runs), ends)


def _placed(series: Sequence[tuple[int, float]], positions: dict[int, float]) -> list[tuple[float, float]]:
    """An ``(iteration, value)`` series at its x positions (an iteration without one is dropped)."""
    return [(positions[it], v) for it, v in series if it in positions]


_UNITS = {"iterations": "", "steps": " steps", "seconds": " s"}


def _fmt_x(v: float, x: str) -> str:
    return f"{v:.0f}" if x == "seconds" else f"{v:g}"


def _ends_note(band: Band, x: str) -> str:
    """The legend's note on a group whose runs end at different x: where they end, where the mean ends.

    Example:
        >>> _ends_note(Band([0, 10, 140], [0.1, 0.2, 0.3], [0.0, 0.1, 0.1], 5, (148, 175)), "iterations")
        '; runs end at 148–175, mean to 140'
    """
    lo, hi = band.ends
    if lo == hi:
        return ""
    unit = _UNITS[x]
    mean_end = f"mean to {_fmt_x(band.x[-1], x)}{unit}" if band.x else "no point shared by all"
    return f"; runs end at {_fmt_x(lo, x)}–{_fmt_x(hi, x)}{unit}, {mean_end}"


def _legend(ax, title: str | None = None) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title=title, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small")


def _save(fig, path: Path) -> Path:
    import io

    buf = io.BytesIO()  # rendered here, then written without following a link planted in the out dir
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})
    pyplot().close(fig)
    return write_bytes_atomic(path, buf.getvalue())


def legend_labels(groups: Sequence[Group], keys: Sequence[str] = ()) -> list[str]:
    """Each group's legend name: its swept values and every other key of ``keys`` (the config keys that
    differ between the runs) with its value in the group, or all its values when they vary inside it.

    Example:
        >>> runs = [Run(Path(f"{f}{s}"), {"seed": s, "filter": {"name": f, "value": v}})
        ...         for s in (0, 1) for f, v in (("none", 1.0), ("snr", 0.9))]
        >>> from ragen_torchrl.reporting.run_metrics import group_runs
        >>> legend_labels(group_runs(runs)[1], ["filter.name", "filter.value"])
        ['filter.name=none, filter.value=1.0', 'filter.name=snr, filter.value=0.9']
    """
    out = []
    for g in groups:
        parts = [f"{k}={format_value(v)}" for k, v in g.values.items()]
        flats = [flatten_config(r.config) for r in g.runs]
        for k in keys:
            if k in g.values:
                continue
            values = sorted({format_value(f.get(k)) for f in flats})
            parts.append(f"{k}={values[0]}" if len(values) == 1 else f"{k} in {{{', '.join(values)}}}")
        out.append(", ".join(parts) or "all runs")
    return out


Series = Callable[[Run], Sequence[tuple[int, float]]]


def _wrap(label: str, suffix: str = "", width: int = 60) -> str:
    """A legend entry broken into lines of about ``width`` characters after its commas (no part is
    cut), then ``suffix`` (the n) on the last line or a line of its own.

    Example:
        >>> print(_wrap("filter.name=snr_top_p, filter.value=0.9, trainer.total_iterations=240", "(n=5)", 40))
        filter.name=snr_top_p, filter.value=0.9,
        trainer.total_iterations=240 (n=5)
    """
    lines = [""]
    for part in label.split(", "):
        if lines[-1] and len(lines[-1]) + 2 + len(part) > width:
            lines[-1] += ","
            lines.append(part)
        else:
            lines[-1] = f"{lines[-1]}, {part}" if lines[-1] else part
    if suffix:
        if len(lines[-1]) + 1 + len(suffix) > width:
            lines.append(suffix)
        else:
            lines[-1] = f"{lines[-1]} {suffix}"
    return "\n".join(lines)


def _line_with_band(
    ax, groups: Sequence[Group], series_of: Series, colours, labels=None, per_seed: bool = False, x: str = "iterations"
) -> tuple[int, int]:
    """Draw each group's mean over seeds with its 95% t band (:func:`mean_band`) on the ``x`` axis;
    returns ``(runs drawn, runs left out)``: left out, a run that did not log the axis's scalar.

    A mean of at most two points gets markers and error bars (the t interval) and no joining line;
    ``per_seed`` adds each run's own curve, thin and unlabelled; without it a run that goes on past the
    mean's end (a longer run than the group's shortest) has that part drawn thin and dotted. A run's
    own line of at most two points is markers only.
    """
    labels = labels or [g.label for g in groups]
    alpha = 0.2 if len(groups) <= 3 else 0.1  # many overlapping bands stay see-through
    drawn = left_out = 0
    for group, label, colour in zip(groups, labels, colours):
        series = []
        for run in group.runs:
            own = series_of(run)
            if not own:
                continue
            positions = x_positions(run, x)
            if positions is None:
                left_out += 1
                continue
            if placed := _placed(own, positions):
                series.append(placed)
        if not series:
            continue
        band = mean_band(series, interpolate=x != "iterations")
        drawn += band.n
        name = _wrap(label, f"(n={band.n}{_ends_note(band, x)})")
        end = band.x[-1] if band.x else -math.inf
        carry = None if band.x else name  # no mean drawn: the runs' own lines carry the legend entry
        for s in series:
            part = s if per_seed else [p for p in s if p[0] >= end]
            if not per_seed and not any(p[0] > end for p in part):
                continue
            ax.plot(
                [p[0] for p in part],
                [p[1] for p in part],
                color=colour,
                alpha=0.35,
                lw=0.8,
                ls=("-" if per_seed else ":") if len(part) > 2 else "none",
                marker="." if per_seed or len(part) <= 2 else None,
                label=carry,
            )
            carry = None
        if not band.x:
            continue
        if len(band.x) <= 2:
            yerr = band.half if band.n > 1 else None
            ax.errorbar(band.x, band.mean, yerr=yerr, color=colour, ls="none", marker="o", ms=5, capsize=4, label=name)
            continue
        # markers on measured points only (not on interpolated ones) and while they stay apart
        marker = "o" if x == "iterations" and len(band.x) <= 40 else None
        ax.plot(band.x, band.mean, marker=marker, ms=3, color=colour, label=name)
        if band.n > 1:
            lo = [m - h for m, h in zip(band.mean, band.half)]
            hi = [m + h for m, h in zip(band.mean, band.half)]
            ax.fill_between(band.x, lo, hi, color=colour, alpha=alpha, linewidth=0)
    return drawn, left_out


def _count(drawn: int, left_out: int, x: str) -> str:
    """``n = 12 runs``, with the runs left out for lacking the x axis's scalar."""
    note = f" ({left_out} without {_AXIS_SCALAR[x]} left out)" if left_out else ""
    return f"n = {drawn} runs{note}"


def _xlabel(x: str, before: bool = False) -> str:
    return X_AXES[x] + (" (0 = before training)" if before and x == "iterations" else "")


def _x_axis(ax, x: str, before: bool = False) -> None:
    """The axis label; iterations and steps are counts: whole-number ticks."""
    ax.set_xlabel(_xlabel(x, before))
    if x != "seconds":
        from matplotlib.ticker import MaxNLocator

        lo, hi = ax.get_xlim()
        if hi - lo < 2:  # one or two neighbouring points: room for a whole-number tick either side
            ax.set_xlim((lo + hi) / 2 - 1, (lo + hi) / 2 + 1)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))


def _band_plot(
    groups: Sequence[Group],
    series_of: Series,
    path,
    title: str,
    ylabel: str,
    ylim,
    keys=(),
    per_seed=False,
    x: str = "iterations",
    before: bool = False,
    from_zero: bool = False,
) -> Path:
    """One mean curve per group with its 95% t band: the scaffolding every band plot shares."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    counts = _line_with_band(ax, groups, series_of, _colours(len(groups)), legend_labels(groups, keys), per_seed, x)
    ax.set_title(f"{title}\n{BAND_CAPTION}\n{_count(*counts, x)}", fontsize="medium")
    _x_axis(ax, x, before)
    ax.set_ylabel(ylabel)
    _clamp_ylim(ax, ylim, from_zero)
    ax.grid(alpha=0.3)
    _legend(ax, "group")
    return _save(fig, path)


def _clamp_ylim(ax, bounds: tuple[float | None, float | None], from_zero: bool = False) -> None:
    """The y range fitted to what is drawn (means, bands, seeds), kept inside ``bounds`` (``None``: open);
    ``from_zero``: it starts at 0."""
    lo, hi = ax.get_ylim()
    lo = 0.0 if from_zero else lo if bounds[0] is None else max(bounds[0], lo)
    hi = hi if bounds[1] is None else min(bounds[1], hi)
    ax.set_ylim(lo, hi)


def plot_val_success(
    groups: Sequence[Group], path: str | Path, keys: Sequence[str] = (), x: str = "iterations"
) -> Path:
    """Validation success per group on the ``x`` axis: each seed thin, the mean over seeds with its 95% t band.

    See the module example.
    """
    return _band_plot(
        groups,
        lambda r: r.val_series("success"),
        path,
        "Validation success over training (thin: each seed)",
        "validation success rate (fraction of levels solved)",
        (-0.03, 1.03),
        keys,
        per_seed=True,
        x=x,
        before=True,
    )


def _moving_average(series: Sequence[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """Trailing mean over the last ``window`` points (fewer at the start)."""
    out = []
    for i, (it, _) in enumerate(series):
        vals = [v for _, v in series[max(0, i - window + 1) : i + 1]]
        out.append((it, sum(vals) / len(vals)))
    return out


def plot_train_success(
    groups: Sequence[Group], path: str | Path, window: int = 5, keys: Sequence[str] = (), x: str = "iterations"
) -> Path:
    """Training-rollout success (``rollout/success``, temperature-1 samples) over training.

    Each run's curve is a trailing mean over ``window`` iterations, then the mean over seeds with its 95% t band.
    Useful when validation ran only at the start and the end.

    Example:
        >>> import tempfile
        >>> g = Group({}, [Run(Path("r"), {}, [{"iteration": i, "rollout/success": 0.5} for i in (1, 2)], [])])
        >>> plot_train_success([g], Path(tempfile.mkdtemp()) / "train_success.png").name
        'train_success.png'
    """
    return _band_plot(
        groups,
        lambda r: _moving_average(r.series("rollout/success"), window),
        path,
        f"Training-rollout success (each run's trailing mean over {window} iterations)",
        "training success rate (fraction of rollouts)",
        (-0.03, 1.03),
        keys,
        x=x,
    )


def plot_update_time(
    groups: Sequence[Group], path: str | Path, keys: Sequence[str] = (), x: str = "iterations"
) -> Path:
    """Update time per iteration per group (:func:`~.run_metrics.update_times`), the mean over seeds with its 95% t band.

    Example:
        >>> import tempfile
        >>> g = Group({}, [Run(Path("r"), {}, [{"iteration": 1, "timing/update": 1.5}], [])])
        >>> plot_update_time([g], Path(tempfile.mkdtemp()) / "update_time.png").name
        'update_time.png'
    """
    return _band_plot(
        groups,
        update_times,
        path,
        "Policy update time per iteration (skipped update = 0 s)",
        "update time (s)",
        (0, None),
        keys,
        x=x,
        from_zero=True,
    )


def plot_success_vs_diagnostic(
    groups: Sequence[Group], points: DiagnosticPoints, path: str | Path, pct: str, keys: Sequence[str] = ()
) -> Path:
    """Final validation success against a diagnostic measured early; one point per run, Spearman's rho shown.

    Example:
        >>> import tempfile
        >>> from ragen_torchrl.reporting.run_metrics import diagnostic_points
        >>> def run(mi, success):
        ...     return Run(Path("r"), {}, [{"iteration": 1, "collapse/trajectory/mi_zscore": mi}],
        ...                [(1, {"success": success})])
        >>> g = Group({}, [run(0.1, 0.2), run(0.3, 0.4), run(0.2, 0.9)])
        >>> [d] = diagnostic_points([g])
        >>> plot_success_vs_diagnostic([g], d, Path(tempfile.mkdtemp()) / "s.png", "20%").name
        's.png'
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colours = _colours(len(groups))
    labels = legend_labels(groups, keys)
    for gi, group in enumerate(groups):
        xs = [p[2] for p in points.points if p[0] == gi]
        ys = [p[3] for p in points.points if p[0] == gi]
        if xs:
            label = _wrap(labels[gi], f"(n={len(xs)})")
            ax.scatter(xs, ys, s=40, color=colours[gi], edgecolor="black", linewidth=0.5, label=label, zorder=3)
    test = points.pools(groups)[0][1]
    if test.refused:
        rho_text = f"Spearman ρ: {test.refused}"
    else:
        rho_text = (
            f"Spearman ρ = {test.rho:+.2f}, 95% CI [{test.ci[0]:+.2f}, {test.ci[1]:+.2f}], permutation p = {test.p:.3f}"
        )
    ax.text(
        0.02,
        0.97,
        rho_text,
        transform=ax.transAxes,
        va="top",
        ha="left",
        fontsize="medium",
        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "0.6"},
        zorder=4,
    )
    name = points.diagnostic.label.split(" (")[0]
    ax.set_title(f"Final validation success vs early {name}\nn = {len(points.points)} runs")
    ax.set_xlabel(f"{points.diagnostic.label}, mean over the first {pct} of iterations")
    ax.set_ylabel("final validation success rate (fraction)")
    ax.set_ylim(-0.03, 1.15)  # headroom above 1.0 for the rho box
    ax.grid(alpha=0.3)
    _legend(ax, "group")
    return _save(fig, path)


def plot_diagnostics(
    groups: Sequence[Group],
    diagnostics: Sequence[Diagnostic],
    path: str | Path,
    keys: Sequence[str] = (),
    x: str = "iterations",
) -> Path:
    """Each diagnostic over training per group (one panel each), the mean over seeds with its 95% t band.

    Example:
        >>> import tempfile
        >>> from ragen_torchrl.reporting.run_metrics import DIAGNOSTICS
        >>> g = Group({}, [Run(Path("r"), {}, [{"iteration": 1, "collapse/trajectory/mi_zscore": 0.5}], [])])
        >>> plot_diagnostics([g], DIAGNOSTICS[:1], Path(tempfile.mkdtemp()) / "diagnostics.png").name
        'diagnostics.png'
    """
    plt = pyplot()
    fig, axes = plt.subplots(len(diagnostics), 1, figsize=(7.5, 3.2 * len(diagnostics)), sharex=True, squeeze=False)
    colours = _colours(len(groups))
    labels = legend_labels(groups, keys)
    for ax, diag in zip(axes[:, 0], diagnostics):

        def series(run: Run, diag=diag) -> list[tuple[int, float]]:
            key = diag.key_for(run)
            return run.series(key) if key else []

        counts = _line_with_band(ax, groups, series, colours, labels, x=x)
        ax.set_title(f"{diag.label.split(' (')[0]}: {_count(*counts, x)}", fontsize="medium")
        ax.set_ylabel(diag.label.replace(" (", "\n("), fontsize="small")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Collapse diagnostics over training\n{BAND_CAPTION}")
    _x_axis(axes[-1, 0], x)
    _legend(axes[0, 0], "group")
    fig.align_ylabels(axes[:, 0])
    return _save(fig, path)


def _scatterable(diagnostics: Sequence[DiagnosticPoints]) -> list[DiagnosticPoints]:
    """The diagnostics with enough runs for a correlation (below that the report says "n too small")."""
    return [d for d in diagnostics if len(d.points) >= MIN_CORRELATION_N]


def plot_names(groups: Sequence[Group], diagnostics: Sequence[DiagnosticPoints]) -> list[str]:
    """The file names :func:`write_plots` writes for these groups, in its order (no matplotlib needed).

    Example:
        >>> plot_names([Group({}, [Run(Path("r"), {}, [{"iteration": 1, "rollout/success": 0.5}])])], [])
        ['val_success.png', 'update_time.png', 'train_success.png']
    """
    names = ["val_success.png", "update_time.png"]
    if any(r.has("rollout/success") for g in groups for r in g.runs):
        names.append("train_success.png")
    names += [f"success_vs_{d.diagnostic.slug}.png" for d in _scatterable(diagnostics)]
    if diagnostics:
        names.append("diagnostics.png")
    return names


def write_plots(
    groups: Sequence[Group],
    diagnostics: Sequence[DiagnosticPoints],
    out_dir: str | Path,
    fraction: float = 0.2,
    keys: Sequence[str] = (),
    x: str = "iterations",
) -> list[Path]:
    """Write every plot the runs allow into ``out_dir`` (:func:`plot_names`); returns their paths.

    ``success_vs_<diagnostic>.png`` only for diagnostics at least :data:`~.statistics.MIN_CORRELATION_N` runs
    logged, ``diagnostics.png`` when some run logged one; ``keys``:
    the config keys the legends name (:func:`~.run_metrics.differing_keys` of the runs); ``x``: the curves'
    x axis (:data:`X_AXES`; the scatter plots have none).

    Example:
        >>> import tempfile
        >>> g = Group({}, [Run(Path("r"), {}, [{"iteration": 1, "timing/update": 1.5}], [(0, {"success": 0.5})])])
        >>> [p.name for p in write_plots([g], [], tempfile.mkdtemp())]
        ['val_success.png', 'update_time.png']
    """
    out = Path(out_dir)
    paths = [
        plot_val_success(groups, out / "val_success.png", keys, x=x),
        plot_update_time(groups, out / "update_time.png", keys, x=x),
    ]
    if any(r.has("rollout/success") for g in groups for r in g.runs):
        paths.append(plot_train_success(groups, out / "train_success.png", keys=keys, x=x))
    for d in _scatterable(diagnostics):
        path = out / f"success_vs_{d.diagnostic.slug}.png"
        paths.append(plot_success_vs_diagnostic(groups, d, path, f"{fraction:.0%}", keys))
    logged = [d.diagnostic for d in diagnostics]
    panels = [d for d in DIAGNOSTICS if d in logged]
    if panels:
        paths.append(plot_diagnostics(groups, panels, out / "diagnostics.png", keys, x=x))
    return paths
