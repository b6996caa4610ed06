"""The report's markdown: one row per group, paired differences, correlations with success, the runs.

Every number is formatted with fixed digits and every list is in a fixed order, so the same runs give a
byte-identical ``report.md`` (``ragen-report --check`` relies on it).

Example:
    >>> from pathlib import Path
    >>> from ragen_torchrl.reporting.runs import Run
    >>> from ragen_torchrl.reporting.run_metrics import group_runs
    >>> runs = [Run(Path(f"r{s}"), {"seed": s, "filter": {"name": "none"}},
    ...             [{"iteration": 1, "timing/update": 2.0 + s}], [(0, {"success": 0.5}), (1, {"success": 0.6 + s / 10})])
    ...         for s in (0, 1)]
    >>> print(summary_table(*group_runs(runs, by=["filter.name"])))
    | filter.name | runs | iterations | final success | peak success | start success | update time / iteration (s) |
    |---|---|---|---|---|---|---|
    | none | 2 | 1 | 0.650 ± 0.050 | 0.650 ± 0.050 | 0.500 ± 0.000 | 2.50 ± 0.50 |
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .run_metrics import (
    FINAL_EVAL_MEASURES,
    TRAINING_DIAGNOSTICS,
    DiagnosticPoints,
    Group,
    early_mean,
    final_point,
    format_value,
    late_mean,
    peak_candidates,
    peak_success,
    run_totals,
    update_times,
)
from .runs import Run
from .statistics import (
    EXACT_LIMIT,
    MIN_CORRELATION_N,
    RESAMPLES,
    STAT_SEED,
    mean_se,
    paired_comparison,
    sign_flip_min_p,
)

#: the most pairs the sign-flip test enumerates exactly (2^n sign patterns <= EXACT_LIMIT)
MAX_EXACT_PAIRS = EXACT_LIMIT.bit_length() - 1

__all__ = [
    "GroupRow",
    "change_table",
    "group_row",
    "markdown_report",
    "md_code",
    "md_escape",
    "paired_table",
    "provenance_lines",
    "summary_table",
]

#: optional per-iteration columns: (header, scalar key), shown when some run logged the key
OPTIONAL_COLUMNS = (
    ("kept ratio", "filter/kept_ratio"),
    ("heterogeneity Std(RV)/Mean(RV)", "filter/heterogeneity"),
    ("T3 truncation rate", "t3/truncation_rate"),
)


def _diagnostic_change(slug: str, late_only: bool = False):
    """A run's change late − early (or its late mean) of the diagnostic ``slug``, over the first / last 20%."""
    diagnostic = next(d for d in TRAINING_DIAGNOSTICS if d.slug == slug)

    def value(run: Run) -> float | None:
        key = diagnostic.key_for(run)
        if key is None:
            return None
        late, early = late_mean(run, key), early_mean(run, key)
        return late if late_only else late - early

    return value


#: the per-run metrics arms can be compared on (``ragen-report --paired NAME``): name -> (label, function
#: of a run, digits); the episode metrics average the training rollouts' per-iteration means over the run
#: (``val_turns``, ``val_tokens``: the final validation's episodes instead); the diagnostic changes are a
#: run's mean over its last 20% of iterations minus its first 20%
PAIRED_METRICS = {
    "final": ("final validation success", lambda r: (final_point(r) or (0, None))[1], 3),
    "peak": ("peak validation success", lambda r: (peak_success(r) or (0, None))[1], 3),
    "turns": ("turns / episode", lambda r: _run_mean(r, "rollout/turns"), 2),
    "tokens": ("generated tokens / episode", lambda r: _run_mean(r, "rollout/tokens"), 1),
    "val_turns": ("final validation turns / episode", lambda r: (final_point(r, "turns") or (0, None))[1], 2),
    "val_tokens": (
        "final validation generated tokens / episode",
        lambda r: (final_point(r, "tokens") or (0, None))[1],
        1,
    ),
    "mi_late": ("MI z-score, last 20% of iterations", _diagnostic_change("mi_zscore", late_only=True), 3),
    "mi_change": ("MI z-score change, late − early", _diagnostic_change("mi_zscore"), 3),
    "mi_nats_change": ("MI (nats) change, late − early", _diagnostic_change("mi_nats"), 3),
    "spread_change": ("score spread (nats) change, late − early", _diagnostic_change("score_spread"), 3),
    "retrieval_change": ("retrieval accuracy change, late − early", _diagnostic_change("retrieval_accuracy"), 3),
    "entropy_change": ("reasoning entropy change, late − early", _diagnostic_change("reasoning_entropy"), 3),
    "length_change": ("reasoning length change, late − early", _diagnostic_change("reasoning_length"), 1),
    # the final evaluation's success (trainer.final_eval / ragen-eval --final-eval), where the runs have one
    **FINAL_EVAL_MEASURES,
}
#: what the paired table compares unless asked otherwise
DEFAULT_PAIRED = ("final", "peak")
#: the group table's columns for the episode metrics, shown when they are compared
EPISODE_COLUMNS = {"turns": ("turns / episode", "rollout/turns"), "tokens": ("tokens / episode", "rollout/tokens")}


class GroupRow(dict):
    """A group's numbers: ``runs`` and ``(mean, se, n)`` for ``final``, ``peak``, ``start``, ``update``,
    each optional key and each per-run total."""


def _run_mean(run, key: str) -> float | None:
    vals = [v for _, v in run.series(key)]
    return sum(vals) / len(vals) if vals else None


def _stat(values: Sequence[float | None]) -> tuple[float, float, int]:
    xs = [v for v in values if v is not None]
    return (*mean_se(xs), len(xs))


def group_row(group: Group) -> GroupRow:
    """The numbers of one row: final/peak/start validation success, mean update time, optional columns, totals.

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
    row["peak"] = _stat([p[1] if (p := peak_success(r)) else None for r in group.runs])
    row["start"] = _stat([r.start_success for r in group.runs])
    times = [[v for _, v in update_times(r)] for r in group.runs]
    row["update"] = _stat([sum(t) / len(t) if t else None for t in times])
    for _, key in OPTIONAL_COLUMNS:
        row[key] = _stat([_run_mean(r, key) for r in group.runs])
    totals = [run_totals(r) for r in group.runs]
    for name in totals[0] if totals else ():
        row[name] = _stat([t[name] for t in totals])
    row["lengths"] = sorted({r.last_iteration for r in group.runs})
    return row


def num(x: float | None, digits: int = 3, sign: bool = False) -> str:
    """A number as the report prints it: fixed digits, ``—`` for none/NaN, never ``-0.000``.

    Example:
        >>> num(0.12345), num(-0.0001), num(None), num(0.5, 2, sign=True)
        ('0.123', '0.000', '—', '+0.50')
    """
    if x is None or not math.isfinite(x):
        return "—"
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-0." + "0" * digits, "0." + "0" * digits).replace("+-", "-")


def _cell(stat: tuple[float, float, int], runs: int, digits: int = 3) -> str:
    mean, se, n = stat
    if n == 0 or not math.isfinite(mean):
        return "—"
    if n == 1:
        text = num(mean, digits)  # one run has no standard error
    else:
        text = f"{num(mean, digits)} ± {num(se, digits)}"
    return text if n == runs else f"{text} ({n} runs)"


# line breaks (a fake heading on the next line), other control characters and Unicode line separators
_BREAKS = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")
# Markdown's inline syntax: code, emphasis, links and images, table cells, backslash itself
_MARKDOWN = re.compile(r"([\\`*\[\]|])")
# an underscore that can open or close emphasis (not one inside a word such as snr_top_p)
_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def md_escape(text: Any) -> str:
    r"""A value from a run (a config value, a label, a path) as inert Markdown text for one table cell or line.

    Line breaks and control characters become spaces, ``&``, ``<`` and ``>`` HTML entities (no raw
    HTML, so no ``<script>`` or ``<img onerror>`` reaches a rendered page), and Markdown's inline
    syntax is backslash-escaped (an underscore inside a word is left as it is).

    Example:
        >>> md_escape("none"), md_escape("snr_top_p"), md_escape("a|b")
        ('none', 'snr_top_p', 'a\\|b')
        >>> md_escape("x\n# Fake heading <script>alert(1)</script> [click](javascript:x) *b* _i_")
        'x # Fake heading &lt;script&gt;alert(1)&lt;/script&gt; \\[click\\](javascript:x) \\*b\\* \\_i\\_'
    """
    text = _BREAKS.sub(" ", str(text))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _UNDERSCORE.sub(r"\\_", _MARKDOWN.sub(r"\\\1", text))


def md_code(text: Any) -> str:
    r"""A value as a Markdown code span (`` `text` ``) when it can be one safely, else :func:`md_escape`'d text.

    A code span shows its text literally (HTML included), but a backtick, a line break or a table's ``|``
    inside would end it, so such text is escaped instead.

    Example:
        >>> md_code("runs/seed0"), md_code("a`b|c")
        ('`runs/seed0`', 'a\\`b\\|c')
    """
    text = str(text)
    if _BREAKS.search(text) or any(c in text for c in "`|\\"):
        return md_escape(text)
    return f"`{text}`"


_escape = md_escape


def summary_table(keys: Sequence[str], groups: Sequence[Group], paired: Sequence[str] = DEFAULT_PAIRED) -> str:
    """The markdown table, one row per group: swept keys, runs, their lengths, success (mean ± SE over seeds),
    timing, the optional columns and per-run totals some run logged, and the episode metrics that
    ``paired`` compares. See the module example."""
    rows = [group_row(g) for g in groups]
    episode = [EPISODE_COLUMNS[m] for m in paired if m in EPISODE_COLUMNS]
    for g, r in zip(groups, rows):
        for _, key in episode:
            r[key] = _stat([_run_mean(run, key) for run in g.runs])
    optional = [(h, k) for h, k in (*OPTIONAL_COLUMNS, *episode) if any(r[k][2] for r in rows)]
    totals = [name for name in (rows[0] if rows else {}) if name.startswith(("optimizer", "trained"))]
    totals = [name for name in totals if any(r[name][2] for r in rows)]
    first = list(keys) or ["group"]
    header = [
        *first,
        "runs",
        "iterations",
        "final success",
        "peak success",
        "start success",
        "update time / iteration (s)",
        *(h for h, _ in optional),
        *(f"{name} / run" for name in totals),
    ]
    lines = ["| " + " | ".join(_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    for g, r in zip(groups, rows):
        cells = [_escape(format_value(g.values[k])) for k in keys] or [_escape(g.label)]
        cells += [str(r["runs"]), ", ".join(map(str, r["lengths"]))]
        cells += [_cell(r["final"], r["runs"]), _cell(r["peak"], r["runs"]), _cell(r["start"], r["runs"])]
        cells += [_cell(r["update"], r["runs"], 2), *(_cell(r[k], r["runs"]) for _, k in optional)]
        cells += [_cell(r[name], r["runs"], 1) for name in totals]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _seed(run: Run):
    return run.config.get("seed")


def paired_table(
    groups: Sequence[Group], metrics: Sequence[str] = DEFAULT_PAIRED, within: Sequence[str] = ()
) -> list[str]:
    """Markdown lines: for every pair of groups (A before B) and metric (names of :data:`PAIRED_METRICS`),
    B − A over the seeds both ran.

    ``within``: grouping keys whose values a pair must share (``env.name`` compares the arms of each task,
    never one task's arm against another task's). A group in which a seed appears twice is not paired
    (the pairing would be ambiguous); it says so.

    Example:
        >>> from pathlib import Path
        >>> def g(name, finals):
        ...     return Group({"arm": name}, [Run(Path(f"{name}{s}"), {"seed": s}, [], [(5, {"success": f})])
        ...                                  for s, f in enumerate(finals)])
        >>> lines = paired_table([g("a", [0.5, 0.6]), g("b", [0.6, 0.8])])
        >>> lines[2].split(" | ")[:5]
        ['| arm=a', 'arm=b', 'final validation success', '2', '+0.150']
        >>> def h(task, arm, finals):
        ...     return Group({"task": task, "arm": arm}, g(arm, finals).runs)
        >>> four = [h("x", "a", [0.5]), h("x", "b", [0.6]), h("y", "a", [0.1]), h("y", "b", [0.3])]
        >>> [line.split(" | ")[:2] for line in paired_table(four, ["final"], within=["task"])[2:4]]
        [['| task=x, arm=a', 'task=x, arm=b'], ['| task=y, arm=a', 'task=y, arm=b']]
    """
    lines = [
        "| A | B | metric | pairs | mean B − A | 95% CI (t) | 95% CI (bootstrap) | p (sign-flip) | B > A / B < A "
        "| sd of B − A | MDE (80% power) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    small = set()  # pair counts at which the exact sign-flip test cannot reach p < 0.05
    for i, a in enumerate(groups):
        for b in groups[i + 1 :]:
            if any(a.values.get(k) != b.values.get(k) for k in within):
                continue
            seeds_a, seeds_b = [_seed(r) for r in a.runs], [_seed(r) for r in b.runs]
            twice = [g.label for g, seeds in ((a, seeds_a), (b, seeds_b)) if len(set(map(str, seeds))) < len(seeds)]
            if twice:
                notes.append(
                    f"- {_escape(b.label)} vs {_escape(a.label)}: not paired, a seed appears twice in "
                    + ", ".join(_escape(t) for t in twice)
                    + "."
                )
                continue
            for name, metric, digits in (PAIRED_METRICS[m] for m in metrics):
                va = {s: v for s, r in zip(seeds_a, a.runs) if s is not None and (v := metric(r)) is not None}
                vb = {s: v for s, r in zip(seeds_b, b.runs) if s is not None and (v := metric(r)) is not None}
                c = paired_comparison(va, vb)
                if c.n == 0:
                    continue
                if c.n <= MAX_EXACT_PAIRS and sign_flip_min_p(c.n) >= 0.05:
                    small.add(c.n)
                ci = [f"[{num(lo, digits, True)}, {num(hi, digits, True)}]" for lo, hi in (c.t_ci, c.boot_ci)]
                lines.append(
                    f"| {_escape(a.label)} | {_escape(b.label)} | {name} | {c.n} | {num(c.mean, digits, True)} | "
                    f"{ci[0]} | {ci[1]} | {num(c.p, 3)} | {c.b_greater} / {c.b_less} | {num(c.sd, digits)} | "
                    f"{num(c.mde, digits)} |"
                )
    if "peak" in metrics:
        counts = sorted({len(peak_candidates(r)) for g in groups for r in g.runs})
        if counts == [1]:
            notes.append(
                "- peak: in every run only the final validation played the full validation set, so the peak "
                "is the final validation."
            )
        elif len(counts) > 1:
            notes.append(
                f"- peak: not on equal footing: the runs had {counts[0]} to {counts[-1]} validations that could "
                "set it (a maximum over more validations is biased up); the final validation is the primary metric."
            )
    if small:
        lowest = ", ".join(f"{num(sign_flip_min_p(n), 4)} at n = {n}" for n in sorted(small))
        notes.append(
            f"- n too small for the sign-flip test to reach p < 0.05: its smallest p with n pairs is 2 / 2^n "
            f"({lowest}); read the intervals and the MDE there."
        )
    if len(lines) == 2:
        return notes
    return lines + ([""] + notes if notes else [])


def change_table(groups: Sequence[Group], fraction: float = 0.2) -> list[str]:
    """Markdown lines: per group and diagnostic, its mean over the first and over the last ``fraction`` of
    each run's iterations and the change late − early, paired within runs (``[]`` when no run logged one).

    This is RAGEN-2's collapse signature measured over training: MI falling while entropy stays flat.

    Example:
        >>> from pathlib import Path
        >>> def run(i, mi):
        ...     h = [{"iteration": it, "collapse/trajectory/mi_zscore": m} for it, m in zip((1, 5, 10), mi)]
        ...     return Run(Path(f"r{i}"), {"seed": i}, h, iterations=10)
        >>> lines = change_table([Group({"arm": "a"}, [run(0, [3.0, 2.0, 1.0]), run(1, [2.0, 2.0, 1.5])])])
        >>> lines[2].split(" | ")[2:6]
        ['2', '2.500 ± 0.500', '1.250 ± 0.250', '-1.250']
    """
    lines = [
        "| diagnostic | group | runs | early | late | mean late − early | 95% CI (t) | p (sign-flip) "
        "| late > early / late < early |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in TRAINING_DIAGNOSTICS:
        for g in groups:
            early, late = {}, {}
            for r in g.runs:
                key = d.key_for(r)
                if key is None:
                    continue
                early[str(r.path)], late[str(r.path)] = early_mean(r, key, fraction), late_mean(r, key, fraction)
            if not early:
                continue
            c = paired_comparison(early, late)
            e, le = mean_se(list(early.values())), mean_se(list(late.values()))
            lines.append(
                f"| {d.label} | {_escape(g.label)} | {c.n} | {num(e[0])} ± {num(e[1])} | {num(le[0])} ± {num(le[1])} | "
                f"{num(c.mean, 3, True)} | [{num(c.t_ci[0], 3, True)}, {num(c.t_ci[1], 3, True)}] | {num(c.p)} | "
                f"{c.b_greater} / {c.b_less} |"
            )
    return lines if len(lines) > 2 else []


def _count_phrase(counts: dict[str, int], total: int) -> str:
    return "; ".join(
        f"{k} ({n} of {total} runs)" if len(counts) > 1 else f"{k} (all {total} runs)" for k, n in counts.items()
    )


def _cpu_seconds(phases: dict) -> float:
    """A run's CPU seconds from its ``phases``: the ``total`` phase when recorded (it spans the others),
    else the sum of the phases.

    Example:
        >>> _cpu_seconds({"rollout": {"cpu": 3.0}, "update": {"cpu": 2.0}, "total": {"cpu": 5.5}})
        5.5
        >>> _cpu_seconds({"rollout": {"cpu": 3.0}, "update": {"cpu": 2.0}})
        5.0
    """
    if "total" in phases:
        return float(phases["total"].get("cpu", 0.0))
    return sum(float(ph.get("cpu", 0.0)) for ph in phases.values())


def provenance_lines(groups: Sequence[Group]) -> list[str]:
    """Markdown lines: the code, package versions, threads and machine load the runs recorded, and their cost
    (``[]`` when no run recorded provenance).

    Example:
        >>> from pathlib import Path
        >>> prov = {"git": {"commit": "0123456789abcdef", "dirty": False}, "versions": {"torch": "2.13.0"},
        ...         "machine": {"torch_threads": 1, "cpu_count": 2}, "load_start": [0.1], "load_end": [2.0]}
        >>> run = Run(Path("r"), {}, summary={"provenance": prov, "seconds": 60.0,
        ...           "phases": {"rollout": {"wall": 50.0, "cpu": 150.0}, "update": {"wall": 10.0, "cpu": 30.0}}})
        >>> lines = provenance_lines([Group({}, [run])])
        >>> lines[0], lines[-1]
        ('- Code: commit `0123456789ab`, clean (all 1 runs).', '- Cost: 0.05 CPU-hours in all (process CPU time of the runs, a warm start counted in the run that built it); wall time per run (training and validation): all runs 60 s.')
    """
    runs = [r for g in groups for r in g.runs]
    provs = [r.summary.get("provenance") or {} for r in runs]
    if not any(provs):
        return []
    n = len(runs)

    def tally(values: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in values:
            out[v] = out.get(v, 0) + 1
        return out

    def code(p: dict) -> str:
        git = p.get("git") or {}
        if not git.get("commit"):
            return "not recorded"
        return (
            f"commit {md_code(str(git['commit'])[:12])}, {'with uncommitted changes' if git.get('dirty') else 'clean'}"
        )

    def versions(p: dict) -> str:
        v = p.get("versions") or {}
        return ", ".join(f"{md_escape(k)} {md_escape(v[k])}" for k in sorted(v, key=str)) or "not recorded"

    def machine(p: dict) -> str:
        m = p.get("machine") or {}
        if not m:
            return "not recorded"
        return f"{md_escape(m.get('torch_threads', '?'))} torch thread(s) on {md_escape(m.get('cpu_count', '?'))} CPUs"

    lines = [
        f"- Code: {_count_phrase(tally([code(p) for p in provs]), n)}.",
        f"- Versions: {_count_phrase(tally([versions(p) for p in provs]), n)}.",
        f"- Machine: {_count_phrase(tally([machine(p) for p in provs]), n)}.",
    ]
    loads = [(p["load_start"][0], p["load_end"][0]) for p in provs if p.get("load_start") and p.get("load_end")]
    if loads:
        lines.append(
            "- 1-minute load average at the start of a run: "
            f"{min(a for a, _ in loads):.2f} to {max(a for a, _ in loads):.2f}; at its end: "
            f"{min(b for _, b in loads):.2f} to {max(b for _, b in loads):.2f}."
        )
    cpu = sum(_cpu_seconds(r.summary.get("phases") or {}) for r in runs)
    walls = []
    for g in groups:
        secs = [float(r.summary["seconds"]) for r in g.runs if r.summary.get("seconds") is not None]
        if secs:
            mean, se = mean_se(secs)
            cell = f"{mean:.0f} s" if len(secs) == 1 else f"{mean:.0f} ± {se:.0f} s"
            walls.append(f"{_escape(g.label)} {cell}")
    lines.append(
        f"- Cost: {cpu / 3600:.2f} CPU-hours in all (process CPU time of the runs, a warm start counted in the run "
        f"that built it); wall time per run (training and validation): {'; '.join(walls) or '—'}."
    )
    return lines


def _display(path: Path, base: Path | None) -> str:
    if base is None:
        return str(path)
    return Path(os.path.relpath(path, base)).as_posix()


def markdown_report(
    keys: Sequence[str],
    groups: Sequence[Group],
    diagnostics: Sequence[DiagnosticPoints],
    plots: Sequence[str] = (),
    fraction: float = 0.2,
    dropped: Sequence[tuple[Run, Run]] = (),
    base: str | Path | None = None,
    paired: Sequence[str] = DEFAULT_PAIRED,
    within: Sequence[str] = (),
    sections: Sequence[str] = (),
) -> str:
    """The whole ``report.md``: the table, paired differences, Spearman correlations, dropped duplicates, runs, plots.

    ``paired``: the metrics the paired differences compare (names of :data:`PAIRED_METRICS`); other
    than the default, the report names them, so ``ragen-report --check`` compares the same ones.
    ``within``: grouping keys whose values the compared groups share (see :func:`paired_table`); the
    report names them too. ``sections``: markdown lines placed after the diagnostics, before the provenance
    (the gradient-SNR probes, :func:`~ragen_torchrl.reporting.grad_snr.probe_section`).

    Run dirs are shown relative to ``base`` (the result set's folder) when given, so the report does
    not depend on where it was regenerated.

    Example:
        >>> from pathlib import Path
        >>> from ragen_torchrl.reporting.runs import Run
        >>> text = markdown_report([], [Group({}, [Run(Path("r0"), {}, [], [(1, {"success": 1.0})])])], [])
        >>> text.splitlines()[0], "| all runs | 1 | 1 | 1.000 | 1.000 | — |" in text
        ('# Run report', True)
    """
    base = Path(base) if base is not None else None
    by = ", ".join(md_code(k) for k in keys) if keys else "nothing (all runs differ only in seed and paths)"
    n_runs = sum(len(g.runs) for g in groups)
    out = [
        "# Run report",
        "",
        "Generated by `ragen-report` from the run dirs listed under Runs; `ragen-report --check <folder>` "
        "regenerates it from them and compares it byte for byte.",
        "",
        f"{n_runs} runs in {len(groups)} groups, grouped by {by}. Mean ± standard error over the runs of a group "
        "(sample std / sqrt(n); a single run shows its value alone). Success: the validation success rate (fraction of the fixed "
        "validation levels solved) before training (start), at the last validation (final, the primary metric) and "
        "the best validation after training started among those that played the full validation set (peak: "
        "as many levels as the final one; iteration 0 and periodic validations on fewer levels do not count). "
        "Iterations: the lengths of the group's runs. Update time, kept ratio and "
        "T3 truncation rate: each run's mean over its iterations, then mean ± SE over runs (an iteration whose "
        "update was skipped, e.g. the filter kept no group, counts as 0 s of update time). Optimizer steps, "
        "trained samples (trajectories the updates trained on) and tokens: each run's total.",
        "",
    ]
    if dropped:
        out += [
            "Duplicate runs (same config and seed) dropped, each listed with the run it repeats: "
            + "; ".join(
                f"{md_code(_display(d.path, base))} (repeats {md_code(_display(k.path, base))})" for d, k in dropped
            )
            + ".",
            "",
        ]
    unknown = [m for m in paired if m not in PAIRED_METRICS]
    if unknown or not paired:
        raise ValueError(f"paired metrics must be some of {sorted(PAIRED_METRICS)}, got {list(paired)}")
    outside = [k for k in within if k not in keys]
    if outside:
        raise ValueError(f"within keys must be grouping keys {list(keys)}, got {outside}")
    out += [summary_table(keys, groups, paired), ""]
    named = (
        []
        if tuple(paired) == DEFAULT_PAIRED
        else [
            "Metrics compared: "
            + ", ".join(f"`{m}` ({PAIRED_METRICS[m][0]})" for m in paired)
            + "; turns and tokens per episode are the training rollouts' per-iteration means averaged over "
            "the run; a diagnostic's early and late values are its means over the first and last 20% of the "
            "run's iterations.",
            "",
        ]
    )
    paired_lines = paired_table(groups, paired, within)
    if paired_lines:
        # named in the text, so ragen-report --check pairs the same groups (cli.paired_within_keys)
        pairs = "For every pair of groups" + (
            " with the same " + ", ".join(md_code(k) for k in within) if within else ""
        )
        out += [
            "## Paired differences (B − A on the same seed)",
            "",
            pairs + ", each metric's difference B − A on each seed both ran. 95% intervals of "
            f"the mean difference by Student's t and by the percentile bootstrap ({RESAMPLES} resamples, "
            f"seed {STAT_SEED}); p: two-sided paired sign-flip permutation test (exact up to "
            f"{EXACT_LIMIT.bit_length() - 1} pairs); B > A / B < A: seeds where B is above / below A. "
            "MDE: the smallest true mean difference a paired t-test at this number of pairs detects with "
            "80% power at alpha 0.05, from the exact noncentral t distribution, with sd the sample std "
            "of the differences; a difference below it is not evidence of no effect.",
            "",
            *named,
            *paired_lines,
            "",
        ]
    if diagnostics:
        pct = f"{fraction:.0%}"
        out += [
            "## Diagnostics measured early vs final success",
            "",
            f"Each diagnostic is averaged over the first {pct} of a run's iterations (at least its first logged "
            "value) and related to the run's final validation success by Spearman's rho, in every pool: all "
            "runs, then each group. 95% interval: percentile bootstrap over runs "
            f"({RESAMPLES} resamples, seed {STAT_SEED}); p: two-sided permutation test (exact up to 8 runs). "
            f"Not computed below {MIN_CORRELATION_N} runs (n too small).",
            "",
            "| diagnostic | logged as | pool | runs | Spearman rho | 95% CI (bootstrap) | p (permutation) |",
            "|---|---|---|---|---|---|---|",
        ]
        for d in diagnostics:
            keys_text = ", ".join(md_code(k) for k in d.keys)
            for pool, t in d.pools(groups):
                if t.refused:
                    cells = f"{t.refused} | — | — |"
                else:
                    cells = f"{num(t.rho, 3, True)} | [{num(t.ci[0], 3, True)}, {num(t.ci[1], 3, True)}] | {num(t.p)} |"
                out.append(f"| {d.diagnostic.label} | {keys_text} | {_escape(pool)} | {t.n} | {cells}")
        out.append("")
    changes = change_table(groups, fraction)
    if changes:
        pct = f"{fraction:.0%}"
        out += [
            "## Diagnostics over training (late − early)",
            "",
            f"Each diagnostic's mean over the first {pct} (early) and the last {pct} (late) of a run's iterations "
            "(at least its first / last logged value), mean ± SE over the group's runs; the change late − early "
            "is paired within each run, with its 95% t interval and sign-flip p as above. RAGEN-2's template "
            "collapse shows as MI z-score and retrieval accuracy falling while reasoning entropy stays flat, "
            "and as reasoning length falling.",
            "",
            *changes,
            "",
        ]
    out += list(sections)
    provenance = provenance_lines(groups)
    if provenance:
        out += ["## Provenance", "", "What each run's `summary.json` recorded.", "", *provenance, ""]
    out += [
        "## Runs",
        "",
        "| group | run dir | seed | source | iterations | start success | peak success (iteration) "
        "| final success (iteration) | optimizer steps | trained samples |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        for r in g.runs:
            start, peak, final, totals = r.start_success, peak_success(r), final_point(r), run_totals(r)
            out.append(
                f"| {_escape(g.label)} | {md_code(_display(r.path, base))} | {_escape(format_value(_seed(r)))} | {r.source} | "
                f"{r.last_iteration} | {num(start)} | "
                f"{f'{num(peak[1])} ({peak[0]})' if peak else '—'} | {f'{num(final[1])} ({final[0]})' if final else '—'} | "
                f"{num(totals['optimizer steps'], 0)} | {num(totals['trained samples'], 0)} |"
            )
    out.append("")
    if plots:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(out)
