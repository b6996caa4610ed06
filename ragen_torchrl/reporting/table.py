"""The report's markdown: one row per group, the runs, and the diagnostics' correlations with success.

Example:
    >>> from pathlib import Path
    >>> from ragen_torchrl.reporting.runs import Run
    >>> from ragen_torchrl.reporting.stats import group_runs
    >>> runs = [Run(Path(f"r{s}"), {"seed": s, "filter": {"name": "none"}},
    ...             [{"iteration": 1, "timing/update": 2.0 + s}], [(0, {"success": 0.5}), (1, {"success": 0.6 + s / 10})])
    ...         for s in (0, 1)]
    >>> print(summary_table(*group_runs(runs, by=["filter.name"])))
    | filter.name | runs | final success | start success | update time / iteration (s) |
    |---|---|---|---|---|
    | none | 2 | 0.650 ± 0.050 | 0.500 ± 0.000 | 2.50 ± 0.50 |
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .stats import DiagnosticPoints, Group, format_value, mean_se, update_times

__all__ = ["GroupRow", "group_row", "markdown_report", "summary_table"]

#: optional per-iteration columns: (header, scalar key), shown when some run logged the key
OPTIONAL_COLUMNS = (
    ("kept ratio", "filter/kept_ratio"),
    ("heterogeneity Std(RV)/Mean(RV)", "filter/heterogeneity"),
    ("T3 truncation rate", "t3/truncation_rate"),
)


class GroupRow(dict):
    """A group's numbers: ``runs`` and ``(mean, se, n)`` for ``final``, ``start``, ``update`` and each optional key."""


def _run_mean(run, key: str) -> float | None:
    vals = [v for _, v in run.series(key)]
    return sum(vals) / len(vals) if vals else None


def _stat(values: Sequence[float | None]) -> tuple[float, float, int]:
    xs = [v for v in values if v is not None]
    return (*mean_se(xs), len(xs))


def group_row(group: Group) -> GroupRow:
    """The numbers of one row: final/start validation success, mean update time, optional columns.

    Each is ``(mean, standard error, number of runs with a value)`` over the group's runs; per run,
    a per-iteration scalar is first averaged over its iterations.

    Example:
        >>> from pathlib import Path
        >>> from ragen_torchrl.reporting.runs import Run
        >>> g = Group({}, [Run(Path("a"), {}, [], [(2, {"success": 0.5})]),
        ...                Run(Path("b"), {}, [], [(2, {"success": 1.0})])])
        >>> group_row(g)["final"]
        (0.75, 0.25, 2)
    """
    row = GroupRow(runs=len(group.runs))
    row["final"] = _stat([r.final_success for r in group.runs])
    row["start"] = _stat([r.start_success for r in group.runs])
    times = [[v for _, v in update_times(r)] for r in group.runs]
    row["update"] = _stat([sum(t) / len(t) if t else None for t in times])
    for _, key in OPTIONAL_COLUMNS:
        row[key] = _stat([_run_mean(r, key) for r in group.runs])
    return row


def _cell(stat: tuple[float, float, int], runs: int, digits: int = 3) -> str:
    mean, se, n = stat
    if n == 0 or not math.isfinite(mean):
        return "—"
    text = f"{mean:.{digits}f} ± {se:.{digits}f}"
    return text if n == runs else f"{text} ({n} runs)"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def summary_table(keys: Sequence[str], groups: Sequence[Group]) -> str:
    """The markdown table, one row per group: swept keys, runs, success (mean ± SE over seeds), timing.

    The kept-ratio, heterogeneity and T3-truncation-rate columns appear when some run logged them. See the
    module example.
    """
    rows = [group_row(g) for g in groups]
    optional = [(h, k) for h, k in OPTIONAL_COLUMNS if any(r[k][2] for r in rows)]
    first = list(keys) or ["group"]
    header = [
        *first,
        "runs",
        "final success",
        "start success",
        "update time / iteration (s)",
        *(h for h, _ in optional),
    ]
    lines = ["| " + " | ".join(_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    for g, r in zip(groups, rows):
        cells = [_escape(format_value(g.values[k])) for k in keys] or [_escape(g.label)]
        cells += [str(r["runs"]), _cell(r["final"], r["runs"]), _cell(r["start"], r["runs"])]
        cells += [_cell(r["update"], r["runs"], 2), *(_cell(r[k], r["runs"]) for _, k in optional)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_report(
    keys: Sequence[str],
    groups: Sequence[Group],
    diagnostics: Sequence[DiagnosticPoints],
    plots: Sequence[str] = (),
    fraction: float = 0.2,
) -> str:
    """The whole ``report.md``: the table, Spearman correlations of the diagnostics, runs, plots.

    Example:
        >>> from pathlib import Path
        >>> from ragen_torchrl.reporting.runs import Run
        >>> text = markdown_report([], [Group({}, [Run(Path("r0"), {}, [], [(1, {"success": 1.0})])])], [])
        >>> text.splitlines()[0], "| all runs | 1 | 1.000 ± 0.000 |" in text
        ('# Run report', True)
    """
    by = ", ".join(f"`{k}`" for k in keys) if keys else "nothing (all runs differ only in seed and paths)"
    n_runs = sum(len(g.runs) for g in groups)
    out = [
        "# Run report",
        "",
        f"{n_runs} runs in {len(groups)} groups, grouped by {by}. Mean ± standard error over the runs of a group "
        "(sample std / sqrt(n); 0 for one run). Success: the validation success rate (fraction of the fixed "
        "validation levels solved) before training (start) and at the end (final). Update time, kept ratio and "
        "T3 truncation rate: each run's mean over its iterations, then mean ± SE over runs (an iteration whose "
        "update was skipped, e.g. the filter kept no group, counts as 0 s of update time).",
        "",
    ]
    out += [summary_table(keys, groups), ""]
    if diagnostics:
        pct = f"{fraction:.0%}"
        out += [
            "## Diagnostics measured early vs final success",
            "",
            f"Each diagnostic is averaged over the first {pct} of a run's iterations (at least its first logged "
            "value) and related to the run's final validation success across all runs (Spearman's rho).",
            "",
            "| diagnostic | logged as | runs | Spearman rho |",
            "|---|---|---|---|",
        ]
        for d in diagnostics:
            rho = f"{d.rho:+.3f}" if math.isfinite(d.rho) else "n/a (fewer than 3 runs or constant)"
            keys_text = ", ".join(f"`{k}`" for k in d.keys)
            out.append(f"| {d.diagnostic.label} | {keys_text} | {len(d.points)} | {rho} |")
        out.append("")
    out += [
        "## Runs",
        "",
        "| group | run dir | source | iterations | start success | final success |",
        "|---|---|---|---|---|---|",
    ]
    for g in groups:
        for r in g.runs:
            start, final = r.start_success, r.final_success
            out.append(
                f"| {_escape(g.label)} | `{r.path}` | {r.source} | {r.last_iteration} | "
                f"{'—' if start is None else f'{start:.3f}'} | {'—' if final is None else f'{final:.3f}'} |"
            )
    out.append("")
    if plots:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(out)
