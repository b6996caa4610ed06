"""``ragen-report RUN_DIR... [--out DIR] [--by KEY ...]``: a table and plots from a set of runs.

Reads each run (:mod:`~ragen_torchrl.reporting.runs`), groups the runs by their swept config keys
(:mod:`~ragen_torchrl.reporting.stats`; ``--by`` picks the keys), writes ``report.md``
(:mod:`~ragen_torchrl.reporting.table`) and the PNG plots (:mod:`~ragen_torchrl.reporting.plots`)
into ``--out`` (default ``report/``) and prints where it wrote them::

    ragen-report outputs/*/* --out report/
    ragen-report multirun/2026-11-30/20-00-00 --by filter.name --by env.name

Exit status: 0 on success, 2 for bad input (no run dirs, a path that is not a run, an unknown
``--by`` key), 1 when matplotlib is missing (``report.md`` is still written), each with one
``ragen-report: error: ...`` line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .runs import RunError, flatten_config, load_runs
from .stats import diagnostic_points, group_runs
from .table import markdown_report

__all__ = ["main", "write_report"]

#: a diagnostic is measured early as its mean over this fraction of the iterations
EARLY_FRACTION = 0.2


def write_report(run_dirs: Sequence[str | Path], out: str | Path = "report", by: Sequence[str] = ()) -> list[Path]:
    """Load the runs, write ``report.md`` and the plots into ``out``; returns the written paths.

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
    runs = load_runs(list(run_dirs))
    if by:
        known = set().union(*(flatten_config(r.config) for r in runs))
        unknown = [k for k in by if k not in known]
        if unknown:
            raise RunError(f"--by {', '.join(unknown)}: not a config key of any run")
    keys, groups = group_runs(runs, by=list(by) or None)
    diagnostics = diagnostic_points(groups, EARLY_FRACTION)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.md"
    report.write_text(markdown_report(keys, groups, diagnostics, fraction=EARLY_FRACTION))
    from .plots import write_plots

    plots = write_plots(groups, diagnostics, out_dir, EARLY_FRACTION)
    report.write_text(markdown_report(keys, groups, diagnostics, [p.name for p in plots], fraction=EARLY_FRACTION))
    return [report, *plots]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ragen-report",
        description="A markdown table and PNG plots from a set of ragen-train runs, grouped by their swept config keys.",
    )
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run dirs (summary.json or TensorBoard events)")
    p.add_argument("--out", default="report", help="output folder (default: report/)")
    p.add_argument(
        "--by",
        action="append",
        default=[],
        metavar="KEY",
        help="group by this dotted config key (repeatable); default: the keys whose values differ, except seed/paths",
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
    try:
        paths = write_report(args.run_dirs, args.out, args.by)
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
