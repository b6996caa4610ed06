"""The report's PNG plots (matplotlib, Agg backend; the ``plot`` extra).

* ``val_success.png``: validation success against iteration, per group: each seed's curve (thin) and
  the mean over seeds with a ±1 SE band;
* ``update_time.png``: update time per iteration, per group (seconds), mean and ±1 SE band;
* ``train_success.png``: training-rollout success (trailing mean over 5 iterations), mean and ±1 SE band;
* ``success_vs_<diagnostic>.png``: final success against a diagnostic measured early, one point per
  run coloured by group, Spearman's rho with its interval and p-value on the plot (or "n too small");
* ``diagnostics.png``: the MI z-score and reasoning entropy (and retrieval accuracy) against iteration.

What the plots promise: a series of at most two points is drawn as markers with error bars, never
joined by a line; runs of different lengths are never averaged together (a group whose runs differ
in length is drawn as one series per length, named with it); every legend entry names every config key
that differs between the runs (seed and paths aside) and its n; every panel's title gives its n.
Legends sit outside the axes (they never cover data) and figures are saved with a tight bounding box.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..flat_config import flatten_config
from ..safe_io import write_bytes_atomic
from .run_metrics import DIAGNOSTICS, Diagnostic, DiagnosticPoints, Group, format_value, update_times
from .runs import Run
from .statistics import MIN_CORRELATION_N, mean_se

__all__ = [
    "PlotDependencyError",
    "legend_labels",
    "plot_names",
    "plot_diagnostics",
    "plot_success_vs_diagnostic",
    "plot_update_time",
    "plot_val_success",
    "pyplot",
    "write_plots",
]


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


def _band(series_per_run: Sequence[Sequence[tuple[int, float]]]) -> tuple[list[int], list[float], list[float]]:
    """Iterations and mean/SE across runs at each iteration any run logged."""
    by_it: dict[int, list[float]] = {}
    for series in series_per_run:
        for it, v in series:
            by_it.setdefault(it, []).append(v)
    its = sorted(by_it)
    stats = [mean_se(by_it[it]) for it in its]
    return its, [m for m, _ in stats], [s for _, s in stats]


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


def _by_length(runs: Sequence[Run]) -> list[tuple[int, list[Run]]]:
    """Runs split by their length (last iteration), shortest first: only runs of one length are averaged."""
    out: dict[int, list[Run]] = {}
    for r in runs:
        out.setdefault(r.last_iteration, []).append(r)
    return sorted(out.items())


def _line_with_band(ax, groups: Sequence[Group], series_of, colours, labels=None, per_seed: bool = False) -> int:
    """Draw each group (each length of it apart) as its mean over seeds with a ±1 SE band; returns the runs drawn.

    A series of at most two points gets markers and error bars and no joining line; ``per_seed`` adds
    each run's own curve, thin and unlabelled (markers only when it has at most two points).
    """
    labels = labels or [g.label for g in groups]
    drawn = 0
    for group, label, colour in zip(groups, labels, colours):
        parts = _by_length(group.runs)
        for length, runs in parts:
            series = [series_of(r) for r in runs]
            its, mean, se = _band(series)
            if not its:
                continue
            drawn += sum(bool(s) for s in series)
            n = sum(bool(s) for s in series)
            name = f"{label} ({length} iterations, n={n})" if len(parts) > 1 else f"{label} (n={n})"
            style = ":" if len(parts) > 1 and length != parts[-1][0] else "-"
            if per_seed:
                for s in series:
                    ls = "-" if len(s) > 2 else "none"
                    ax.plot([i for i, _ in s], [v for _, v in s], color=colour, alpha=0.3, lw=0.8, ls=ls, marker=".")
            if len(its) <= 2:
                ax.errorbar(its, mean, yerr=se, color=colour, ls="none", marker="o", ms=5, capsize=4, label=name)
                continue
            ax.plot(its, mean, marker="o", ms=3, ls=style, color=colour, label=name)
            lo = [m - s for m, s in zip(mean, se)]
            hi = [m + s for m, s in zip(mean, se)]
            ax.fill_between(its, lo, hi, color=colour, alpha=0.2, linewidth=0)
    return drawn


def _band_plot(
    groups: Sequence[Group], series_of, path, title: str, xlabel: str, ylabel: str, ylim, keys=(), per_seed=False
) -> Path:
    """One series per group and length (mean over seeds) with a ±1 SE band: the scaffolding every band plot shares."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    n = _line_with_band(ax, groups, series_of, _colours(len(groups)), legend_labels(groups, keys), per_seed)
    ax.set_title(f"{title}\nn = {n} runs")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    _legend(ax, "group")
    return _save(fig, path)


def plot_val_success(groups: Sequence[Group], path: str | Path, keys: Sequence[str] = ()) -> Path:
    """Validation success against iteration per group: each seed thin, the mean over seeds with a ±1 SE band.

    See the module example.
    """
    return _band_plot(
        groups,
        lambda r: r.val_series("success"),
        path,
        "Validation success over training (thin: each seed; mean ± 1 SE across seeds)",
        "training iteration (0 = before training)",
        "validation success rate (fraction of levels solved)",
        (-0.03, 1.03),
        keys,
        per_seed=True,
    )


def _moving_average(series: Sequence[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """Trailing mean over the last ``window`` points (fewer at the start)."""
    out = []
    for i, (it, _) in enumerate(series):
        vals = [v for _, v in series[max(0, i - window + 1) : i + 1]]
        out.append((it, sum(vals) / len(vals)))
    return out


def plot_train_success(groups: Sequence[Group], path: str | Path, window: int = 5, keys: Sequence[str] = ()) -> Path:
    """Training-rollout success (``rollout/success``, temperature-1 samples) against iteration.

    Each run's curve is a trailing mean over ``window`` iterations, then mean ± 1 SE across seeds.
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
        f"Training-rollout success (trailing mean over {window} iterations; ± 1 SE across seeds)",
        "training iteration",
        "training success rate (fraction of rollouts)",
        (-0.03, 1.03),
        keys,
    )


def plot_update_time(groups: Sequence[Group], path: str | Path, keys: Sequence[str] = ()) -> Path:
    """Update time per iteration per group (:func:`~.run_metrics.update_times`), mean over seeds with a ±1 SE band.

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
        "Policy update time per iteration (mean ± 1 SE across seeds; skipped update = 0 s)",
        "training iteration",
        "update time (s)",
        (0, None),
        keys,
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
            label = f"{labels[gi]} (n={len(xs)})"
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
    groups: Sequence[Group], diagnostics: Sequence[Diagnostic], path: str | Path, keys: Sequence[str] = ()
) -> Path:
    """Each diagnostic against iteration per group (one panel each), mean over seeds with a ±1 SE band.

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

        n = _line_with_band(ax, groups, series, colours, labels)
        ax.set_title(f"{diag.label.split(' (')[0]}: n = {n} runs", fontsize="medium")
        ax.set_ylabel(diag.label.replace(" (", "\n("), fontsize="small")
        ax.grid(alpha=0.3)
    fig.suptitle("Collapse diagnostics over training (mean ± 1 SE across seeds)")
    axes[-1, 0].set_xlabel("training iteration")
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
) -> list[Path]:
    """Write every plot the runs allow into ``out_dir`` (:func:`plot_names`); returns their paths.

    ``success_vs_<diagnostic>.png`` only for diagnostics at least :data:`~.statistics.MIN_CORRELATION_N` runs
    logged, ``diagnostics.png`` when some run logged one; ``keys``:
    the config keys the legends name (:func:`~.run_metrics.differing_keys` of the runs).

    Example:
        >>> import tempfile
        >>> g = Group({}, [Run(Path("r"), {}, [{"iteration": 1, "timing/update": 1.5}], [(0, {"success": 0.5})])])
        >>> [p.name for p in write_plots([g], [], tempfile.mkdtemp())]
        ['val_success.png', 'update_time.png']
    """
    out = Path(out_dir)
    paths = [
        plot_val_success(groups, out / "val_success.png", keys),
        plot_update_time(groups, out / "update_time.png", keys),
    ]
    if any(r.has("rollout/success") for g in groups for r in g.runs):
        paths.append(plot_train_success(groups, out / "train_success.png", keys=keys))
    for d in _scatterable(diagnostics):
        path = out / f"success_vs_{d.diagnostic.slug}.png"
        paths.append(plot_success_vs_diagnostic(groups, d, path, f"{fraction:.0%}", keys))
    logged = [d.diagnostic for d in diagnostics]
    panels = [d for d in DIAGNOSTICS if d in logged]
    if panels:
        paths.append(plot_diagnostics(groups, panels, out / "diagnostics.png", keys))
    return paths
