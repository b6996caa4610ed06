"""Compare runs: ``ragen-report`` reads a set of run dirs and writes a markdown table and PNG plots.

* :mod:`.runs`: loading a run (``summary.json``, else its TensorBoard events);
* :mod:`.stats`: grouping by the swept config keys, mean ± SE, early diagnostics, Spearman's rho;
* :mod:`.table`: the markdown report;
* :mod:`.plots`: the plots (matplotlib, the ``plot`` extra, imported only when plotting);
* :mod:`.cli`: the ``ragen-report`` command.

Example:
    >>> from ragen_torchrl.reporting import mean_se
    >>> mean_se([0.5, 1.0])
    (0.75, 0.25)
"""

from __future__ import annotations

from .cli import main, write_report
from .runs import Run, RunError, find_runs, load_run, load_runs
from .stats import (
    DIAGNOSTICS,
    Group,
    diagnostic_points,
    early_mean,
    group_runs,
    mean_se,
    rank_correlation,
    spearman,
    swept_keys,
    update_times,
)
from .table import markdown_report, summary_table

__all__ = [
    "DIAGNOSTICS",
    "Group",
    "Run",
    "RunError",
    "diagnostic_points",
    "early_mean",
    "find_runs",
    "group_runs",
    "load_run",
    "load_runs",
    "main",
    "markdown_report",
    "mean_se",
    "rank_correlation",
    "spearman",
    "summary_table",
    "swept_keys",
    "update_times",
    "write_report",
]
