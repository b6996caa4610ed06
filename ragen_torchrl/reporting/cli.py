"""``ragen-report RUN_DIR... [--out DIR] [--by KEY ...] [--paired METRIC ...] [--within KEY ...] [--x AXIS]``: a table and plots from a set of runs.

Reads each run (:mod:`~ragen_torchrl.reporting.runs`), drops duplicate runs (same config and seed),
groups the rest by their swept config keys (:mod:`~ragen_torchrl.reporting.run_metrics`; ``--by`` picks the
keys), writes ``report.md`` (:mod:`~ragen_torchrl.reporting.table`) and the PNG plots
(:mod:`~ragen_torchrl.reporting.plots`) into ``--out`` (default ``report/``) and prints where it wrote them::

    ragen-report outputs/*/* --out report/
    ragen-report multirun/2026-11-30/20-00-00 --by filter.name --by env.name
    ragen-report runs/* --by t3.enabled --paired final --paired tokens    # compare tokens per episode too
    ragen-report runs/* --by env.name --by t3.enabled --within env.name   # each task's arms, not across tasks
    ragen-report runs/* --x seconds --out report_seconds/                 # curves against training seconds
    ragen-report docs/results/snr_filter --out docs/results/snr_filter     # a result set: its runs/*
    ragen-report --check docs/results/snr_filter                           # is report.md up to date?

A **result set** is ``docs/results/<name>/`` with ``report.md``, the plots and the raw data
``runs/<run>/{summary.json,scalars.csv}`` (a folder that is itself a run dir, with its ``summary.json``
next to ``report.md``, is a result set of one run). ``--x`` picks the curves' x axis
(:data:`~ragen_torchrl.reporting.plots.X_AXES`): training iterations (default), optimizer steps or
training wall-clock seconds; it changes the plots only. ``report.md`` depends only on the runs: the same
runs give the same bytes, so ``--check DIR...`` regenerates each result set's report (grouped by the keys,
comparing the metrics and pairing within the keys it names) into a temporary folder and compares it with the committed one (exit 1 and a diff when
they differ). The PNG plots are not compared: ``--check`` checks ``report.md`` only.

Exit status: 0 on success, 2 for bad input (no run dirs, a path that is not a run, an unknown
``--by`` key), 1 when matplotlib is missing (``report.md`` is still written) or a ``--check`` found a
difference, each with one ``ragen-report: error: ...`` line.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..flat_config import flatten_config
from ..safe_io import write_text_atomic
from .grad_snr import plot_grad_snr, probe_section
from .run_metrics import diagnostic_points, differing_keys, drop_duplicates, group_runs
from .runs import RunError, load_runs, result_set_runs
from .table import DEFAULT_PAIRED, PAIRED_METRICS, markdown_report

__all__ = ["check_result_set", "grouping_keys", "main", "write_report"]

#: a diagnostic is measured early as its mean over this fraction of the iterations
EARLY_FRACTION = 0.2


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path = "report",
    by: Sequence[str] = (),
    base: str | Path | None = None,
    plots: bool = True,
    paired: Sequence[str] = DEFAULT_PAIRED,
    within: Sequence[str] = (),
    x: str = "iterations",
) -> list[Path]:
    """Load the runs, write ``report.md`` and (``plots``) the plots into ``out``; returns the written paths.

    Run dirs are shown in the report relative to ``base`` (default ``out``). ``paired``: the metrics
    the paired differences compare (:data:`~ragen_torchrl.reporting.table.PAIRED_METRICS`); ``within``:
    grouping keys whose values compared groups share (each task's arms against each other, not across tasks);
    ``x``: the plots' x axis (:data:`~ragen_torchrl.reporting.plots.X_AXES`).

    Raises :class:`~ragen_torchrl.reporting.runs.RunError` for bad input and
    :class:`~ragen_torchrl.reporting.plots.PlotDependencyError` (after ``report.md``) without matplotlib.

    Example:
        >>> import json, tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> for i, f in enumerate(["none", "snr_top_p"]):
        ...     (root / f).mkdir()
        ...     _ = (root / f / "summary.json").write_text(json.dumps({"config": {"seed": 0, "filter": {"name": f}},
        ...         "val_start": {"success": 0.5}, "val_end": {"success": 0.5 + i / 4},
        ...         "history": [{"iteration": 1, "timing/update": 1.0}], "iterations": 1}))
        >>> [p.name for p in write_report([root / "none", root / "snr_top_p"], root / "report")]
        ['report.md', 'val_success.png', 'update_time.png']
    """
    runs, dropped = drop_duplicates(load_runs(list(run_dirs)))
    if by:
        known = set().union(*(flatten_config(r.config) for r in runs))
        unknown = [k for k in by if k not in known]
        if unknown:
            raise RunError(f"--by {', '.join(unknown)}: not a config key of any run")
    keys, groups = group_runs(runs, by=list(by) or None)
    outside = [k for k in within if k not in keys]
    if outside:
        raise RunError(f"--within {', '.join(outside)}: not a grouping key (grouped by {', '.join(keys) or 'nothing'})")
    diagnostics = diagnostic_points(groups, EARLY_FRACTION)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir if base is None else Path(base)
    report = out_dir / "report.md"
    probes = probe_section(groups)  # [] unless some run logged the gradient-SNR probe

    def write(names: Sequence[str]) -> None:
        text = markdown_report(keys, groups, diagnostics, names, EARLY_FRACTION, dropped, base, paired, within, probes)
        write_text_atomic(report, text)  # the out dir may be a result set from elsewhere: no link followed

    from .plots import plot_names, write_plots

    names = plot_names(groups, diagnostics) + (["grad_snr.png"] if probes else [])
    write(names)  # the table stands even when matplotlib is missing
    if not plots:
        return [report]
    written = write_plots(groups, diagnostics, out_dir, EARLY_FRACTION, differing_keys(runs), x=x)
    if probes:
        written.append(plot_grad_snr(groups, out_dir / "grad_snr.png", differing_keys(runs)))
    return [report, *written]


def grouping_keys(report: str) -> list[str]:
    """The config keys a ``report.md`` text says its runs were grouped by (``--by`` or the swept keys);
    ``[]`` when it names none, so regenerating with them gives the grouping the report was written with.

    Example:
        >>> grouping_keys("10 runs in 2 groups, grouped by `filter.name`, `trainer.max_optimizer_steps`. Mean ...")
        ['filter.name', 'trainer.max_optimizer_steps']
        >>> grouping_keys("3 runs in 1 groups, grouped by nothing (all runs differ only in seed and paths). Mean")
        []
    """
    match = re.search(r"runs in \d+ groups?, grouped by ((?:`[^`]+`(?:, )?)+)\.", report)
    return re.findall(r"`([^`]+)`", match.group(1)) if match else []


def paired_metric_names(report: str) -> list[str]:
    """The metrics a ``report.md`` text says its paired differences compare; the default when it names none.

    Example:
        >>> paired_metric_names("Metrics compared: `final` (final validation success), `tokens` (generated ...")
        ['final', 'tokens']
        >>> paired_metric_names("## Paired differences ...")
        ['final', 'peak']
    """
    match = re.search(r"^Metrics compared: (.+)$", report, flags=re.M)
    return re.findall(r"`([^`]+)` \(", match.group(1)) if match else list(DEFAULT_PAIRED)


def paired_within_keys(report: str) -> list[str]:
    """The grouping keys a ``report.md`` text says its paired differences hold fixed (``[]``: every pair).

    Example:
        >>> paired_within_keys("For every pair of groups with the same `env.name`, each metric's difference ...")
        ['env.name']
        >>> paired_within_keys("For every pair of groups, each metric's difference ...")
        []
    """
    match = re.search(r"^For every pair of groups with the same ((?:`[^`]+`(?:, )?)+),", report, flags=re.M)
    return re.findall(r"`([^`]+)`", match.group(1)) if match else []


def check_result_set(folder: str | Path) -> str:
    """Regenerate ``folder``'s ``report.md`` from its runs into a temporary folder; ``""`` when it is
    byte-identical to the committed one, else a unified diff (committed -> regenerated).

    Raises :class:`RunError` when ``folder`` is not a result set or has no ``report.md``.

    Example:
        >>> import json
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "runs" / "a").mkdir(parents=True)
        >>> _ = (root / "runs" / "a" / "summary.json").write_text(json.dumps({"config": {"seed": 0},
        ...     "val_start": {"success": 0.5}, "val_end": {"success": 0.75}, "history": [], "iterations": 4}))
        >>> _ = write_report([root], root, plots=False)
        >>> check_result_set(root)
        ''
        >>> _ = (root / "report.md").write_text("# edited by hand\\n")
        >>> [line.endswith(("report.md (committed)", "report.md (regenerated)")) for line in
        ...  check_result_set(root).splitlines()[:2]]
        [True, True]
    """
    folder = Path(folder)
    committed = folder / "report.md"
    if not committed.is_file():
        raise RunError(f"{folder}: no report.md to check")
    runs = result_set_runs(folder)
    old = committed.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        text = old.decode("utf-8", "replace")
        write_report(
            runs,
            tmp,
            by=grouping_keys(text),
            base=folder,
            plots=False,
            paired=paired_metric_names(text),
            within=paired_within_keys(text),
        )
        fresh = (Path(tmp) / "report.md").read_bytes()
    if fresh == old:
        return ""
    diff = difflib.unified_diff(
        old.decode("utf-8", "replace").splitlines(),
        fresh.decode("utf-8", "replace").splitlines(),
        f"{committed} (committed)",
        f"{committed} (regenerated)",
        lineterm="",
    )
    return "\n".join(diff) or f"{committed}: differs in bytes (line endings or encoding)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ragen-report",
        description="A markdown table and PNG plots from a set of ragen-train runs, grouped by their swept config keys.",
    )
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run dirs (summary.json or TensorBoard events)")
    p.add_argument("--out", default="report", help="output folder (default: report/)")
    p.add_argument(
        "--check",
        action="store_true",
        help="regenerate each RUN_DIR (a result set) report.md in a temporary folder; exit 1 if it differs "
        "(the table only: the PNG plots are not compared)",
    )
    p.add_argument(
        "--by",
        action="append",
        default=[],
        metavar="KEY",
        help="group by this dotted config key (repeatable); default: the keys whose values differ, except seed/paths",
    )
    p.add_argument(
        "--paired",
        action="append",
        choices=sorted(PAIRED_METRICS),
        metavar="METRIC",
        help="a metric the paired differences compare (repeatable): "
        # argparse %-formats help strings: a literal % must be doubled
        + ", ".join(f"{k} ({v[0]})" for k, v in PAIRED_METRICS.items()).replace("%", "%%")
        + f"; default: {' '.join(DEFAULT_PAIRED)}",
    )
    p.add_argument(
        "--within",
        action="append",
        default=[],
        metavar="KEY",
        help="compare only groups with the same value of this grouping key (repeatable), e.g. --within env.name "
        "pairs each task's arms and never one task against another",
    )
    p.add_argument(
        "--x",
        choices=("iterations", "steps", "seconds"),
        default="iterations",
        metavar="AXIS",
        help="the curves' x axis: iterations (default; runs aligned by iteration), steps (optimizer steps so far, "
        "train/optimizer_steps summed) or seconds (training wall-clock seconds so far: timing/total less the MI and "
        "gradient-SNR diagnostics, summed; validation not counted); on steps and seconds each run is interpolated "
        "linearly onto the points inside the range every run of its group covers; either way a group's mean "
        "(with its 95%% Student-t band over seeds) ends where its shortest run ends; report.md is the same",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The ``ragen-report`` console script; returns the exit status (see the module docstring).

    Example:
        >>> main([])
        2
    """
    from .plots import PlotDependencyError

    args = _parser().parse_args(argv)
    if args.check:
        if not args.run_dirs:
            print("ragen-report: error: --check needs result set folders", file=sys.stderr)
            return 2
        failed = []
        for folder in args.run_dirs:
            try:
                diff = check_result_set(folder)
            except RunError as e:
                print(f"ragen-report: error: {e}", file=sys.stderr)
                return 2
            if diff:
                print(diff)
                failed.append(folder)
            else:
                print(f"{Path(folder) / 'report.md'}: up to date")
        if failed:
            print(f"ragen-report: error: report.md differs from its runs in {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    try:
        paths = write_report(
            args.run_dirs, args.out, args.by, paired=args.paired or DEFAULT_PAIRED, within=args.within, x=args.x
        )
    except RunError as e:
        print(f"ragen-report: error: {e}", file=sys.stderr)
        return 2
    except PlotDependencyError as e:
        print(f"ragen-report: error: {e} (the table is in {Path(args.out) / 'report.md'})", file=sys.stderr)
        return 1
    print(f"wrote {len(paths)} files to {Path(args.out)}/:")
    for p in paths:
        print(f"  {p}")
    return 0


def console_main() -> None:
    """Entry point of the ``ragen-report`` script (exits with :func:`main`'s status)."""
    sys.exit(main())
