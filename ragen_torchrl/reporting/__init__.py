"""Compare runs: ``ragen-report`` reads a set of run dirs and writes a markdown table and PNG plots.

* :mod:`.runs`: loading a run (``summary.json`` + ``scalars.csv``, else its TensorBoard events) and result sets;
* :mod:`.run_metrics`: grouping by the swept config keys, duplicate runs, peak/final validation,
  early/late diagnostics, per-run totals;
* :mod:`.statistics`: mean ± SE, paired differences (t and bootstrap intervals, sign-flip p-value,
  minimum detectable effect), Spearman's rho with a bootstrap interval and a permutation p-value;
* :mod:`.table`: the markdown report;
* :mod:`.plots`: the plots (matplotlib, the ``plot`` extra, imported only when plotting);
* :mod:`.cli`: the ``ragen-report`` command (``--check``: does a committed ``report.md`` regenerate byte for byte).

Example:
    >>> from ragen_torchrl.reporting import mean_se
    >>> mean_se([0.5, 1.0])
    (0.75, 0.25)
"""

from __future__ import annotations

from .cli import check_result_set, main, write_report
from .run_metrics import (
    DIAGNOSTICS,
    TRAINING_DIAGNOSTICS,
    Group,
    diagnostic_points,
    drop_duplicates,
    early_mean,
    group_runs,
    peak_success,
    swept_keys,
    update_times,
)
from .runs import Run, RunError, find_runs, load_run, load_runs, read_scalars_csv, result_set_runs
from .statistics import (
    bootstrap_interval,
    correlation_test,
    mean_se,
    min_detectable_effect,
    paired_comparison,
    rank_correlation,
    sign_flip_pvalue,
    spearman,
    t_interval,
)
from .table import markdown_report, summary_table

__all__ = [
    "DIAGNOSTICS",
    "TRAINING_DIAGNOSTICS",
    "Group",
    "Run",
    "RunError",
    "bootstrap_interval",
    "check_result_set",
    "correlation_test",
    "diagnostic_points",
    "drop_duplicates",
    "early_mean",
    "find_runs",
    "group_runs",
    "load_run",
    "load_runs",
    "main",
    "markdown_report",
    "mean_se",
    "min_detectable_effect",
    "paired_comparison",
    "peak_success",
    "rank_correlation",
    "read_scalars_csv",
    "result_set_runs",
    "sign_flip_pvalue",
    "spearman",
    "summary_table",
    "swept_keys",
    "t_interval",
    "update_times",
    "write_report",
]
