"""What a report reads from runs: groups by swept config keys, and per-run measures.

* :func:`swept_keys` / :func:`group_runs`: runs that differ only in ``seed`` (and paths) form one group;
* :func:`early_mean` / :func:`late_mean`: a diagnostic over the first / last 20% of the iterations that ran;
* :func:`diagnostic_points`: final success against an early diagnostic, per run;
* :func:`peak_success`, :func:`final_point`, :func:`run_totals`, :func:`update_times`: per-run numbers;
* :data:`FINAL_EVAL_MEASURES`: the final evaluation's success per policy and mode (``final_eval.json``,
  :func:`final_eval_stats`), missing with a note (:func:`final_eval_note`) for a run without one;
* :data:`DIAGNOSTICS`: the diagnostics related to final success (MI z-score and MI in nats, retrieval
  accuracy, entropy); :data:`TRAINING_DIAGNOSTICS` adds the score spread and the reasoning length.

The statistics over runs (intervals, tests, power) are in :mod:`ragen_torchrl.reporting.statistics`.

Example:
    >>> from pathlib import Path
    >>> runs = [Run(Path(f"r{s}"), {"seed": s, "filter": {"name": f}}) for s in (0, 1) for f in ("none", "top_p")]
    >>> keys, groups = group_runs(runs)
    >>> keys, [len(g.runs) for g in groups]
    (['filter.name'], [2, 2])
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..flat_config import flatten_config
from ..safe_io import read_bytes_inside
from ..validation_peak import can_set_peak, peak_of
from .runs import Run, RunError
from .statistics import CorrelationTest, correlation_test, spearman

__all__ = [
    "DIAGNOSTICS",
    "FINAL_EVAL_MEASURES",
    "TRAINING_DIAGNOSTICS",
    "drop_duplicates",
    "final_point",
    "peak_candidates",
    "peak_success",
    "run_identity",
    "run_totals",
    "Diagnostic",
    "DiagnosticPoints",
    "Group",
    "diagnostic_points",
    "differing_keys",
    "early_mean",
    "final_eval_note",
    "final_eval_stats",
    "final_eval_success",
    "format_value",
    "group_runs",
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
    # the z-score's numerator in its own unit: a z-score can move through its denominator alone
    Diagnostic("mi_nats", "trajectory MI estimate (nats)", ("collapse/trajectory/mi_estimate",)),
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

#: the diagnostics tracked over training (early vs late): :data:`DIAGNOSTICS` and the reasoning length,
#: which RAGEN-2 §4.2 reports falling under template collapse (it is not a predictor of final success there)
TRAINING_DIAGNOSTICS = (
    *DIAGNOSTICS[:2],
    # the z-score's denominator: the spread of the in-batch log p(z) over the batch's reasoning
    Diagnostic(
        "score_spread",
        "score spread: std of the in-batch log p(z) (nats; the z-score's denominator)",
        ("collapse/trajectory/marginal_std",),
    ),
    *DIAGNOSTICS[2:],
    Diagnostic("reasoning_length", "reasoning length (tokens)", ("collapse/trajectory/reasoning_length",)),
)

# config keys that name files or folders: never a swept key
_PATH_KEY = re.compile(r"(^|[._])(dir|dirs|path|paths|file|resume)$|name_or_path$|^hydra\.")


def _hashable(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def differing_keys(runs: Sequence[Run]) -> list[str]:
    """Every config key whose value differs between runs, without ``seed`` and path/dir keys (sorted).

    Unlike :func:`swept_keys`, a key that splits the runs as another key does is kept: a legend names them all.

    Example:
        >>> from pathlib import Path
        >>> cfgs = [{"seed": s, "filter": {"name": f, "value": v}} for s in (0, 1) for f, v in (("a", 1), ("b", 2))]
        >>> differing_keys([Run(Path(str(i)), c) for i, c in enumerate(cfgs)])
        ['filter.name', 'filter.value']
    """
    flat = [flatten_config(r.config) for r in runs]
    keys = sorted({k for f in flat for k in f})
    return [k for k in keys if k != "seed" and not _PATH_KEY.search(k) and len({_hashable(f.get(k)) for f in flat}) > 1]


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

    The window is a fraction of the iterations that ran (:attr:`Run.last_iteration`), not of the
    planned ``trainer.total_iterations``: an early-stopped run's windows cover its own length.

    Example:
        >>> from pathlib import Path
        >>> h = [{"iteration": i, "mi": float(i)} for i in (1, 6, 11, 16, 21, 26, 31, 36, 41, 46, 50)]
        >>> early_mean(Run(Path("r"), {}, h, iterations=50), "mi")   # iterations <= 10: 1 and 6
        3.5
        >>> early_mean(Run(Path("r"), {}, h[:5], iterations=50), "mi")   # stopped at 21: <= 5
        1.0
    """
    pts = run.series(key)
    if not pts:
        return None
    cut = max(1, math.ceil(fraction * run.last_iteration))
    early = [v for it, v in pts if it <= cut] or [pts[0][1]]
    return sum(early) / len(early)


def late_mean(run: Run, key: str, fraction: float = 0.2) -> float | None:
    """Mean of ``key`` over the iterations in the last ``fraction`` of the run (at least its last value).

    The window is a fraction of the iterations that ran, as in :func:`early_mean`.

    Example:
        >>> from pathlib import Path
        >>> h = [{"iteration": i, "mi": float(i)} for i in (1, 20, 41, 46, 50)]
        >>> late_mean(Run(Path("r"), {}, h, iterations=50), "mi")   # iterations > 40: 41, 46 and 50
        45.666666666666664
        >>> late_mean(Run(Path("r"), {}, h[:4], iterations=50), "mi")   # stopped at 46: > 36
        43.5
    """
    pts = run.series(key)
    if not pts:
        return None
    ran = run.last_iteration
    cut = ran - max(1, math.ceil(fraction * ran))
    late = [v for it, v in pts if it > cut] or [pts[-1][1]]
    return sum(late) / len(late)


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

    def pools(self, groups: Sequence[Group]) -> list[tuple[str, CorrelationTest]]:
        """:func:`correlation_test` over every pool: all runs, then each group's runs (refused below 5).

        Example:
            >>> from pathlib import Path
            >>> def run(mi, success):
            ...     return Run(Path("r"), {}, [{"iteration": 1, "collapse/trajectory/mi_zscore": mi}],
            ...                [(1, {"success": success})])
            >>> g = Group({}, [run(0.1 * i, 0.1 * i) for i in range(5)])
            >>> [(label, t.rho, t.refused) for label, t in diagnostic_points([g])[0].pools([g])]
            [('all runs', 1.0, '')]
        """
        out = [("all runs", correlation_test([p[2] for p in self.points], [p[3] for p in self.points]))]
        if len(groups) > 1:
            for gi, group in enumerate(groups):
                pts = [p for p in self.points if p[0] == gi]
                out.append((group.label, correlation_test([p[2] for p in pts], [p[3] for p in pts])))
        return out


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


# --------------------------------------------------------------------------- runs
def run_identity(run: Run) -> str:
    """The run's config without path/dir keys (seed included) as canonical JSON: equal for duplicate runs.

    Example:
        >>> from pathlib import Path
        >>> a = Run(Path("a"), {"seed": 0, "algo": {"lr": 1e-5}, "model": {"cache_dir": "/x"}})
        >>> b = Run(Path("b"), {"seed": 0, "algo": {"lr": 1e-5}, "model": {"cache_dir": "/y"}})
        >>> run_identity(a) == run_identity(b), run_identity(a)
        (True, '{"algo.lr": 1e-05, "seed": 0}')
    """
    flat = {k: v for k, v in flatten_config(run.config).items() if not _PATH_KEY.search(k)}
    return _hashable(flat)


def drop_duplicates(runs: Sequence[Run]) -> tuple[list[Run], list[tuple[Run, Run]]]:
    """``(kept, dropped)``: of runs with the same config and seed (:func:`run_identity`) the first by path is kept.

    ``dropped`` pairs each dropped run with the kept run it duplicates. Runs without a config are never
    duplicates (nothing says they are the same experiment). Kept runs stay in their input order.

    Example:
        >>> from pathlib import Path
        >>> runs = [Run(Path(p), {"seed": s}) for p, s in (("b", 0), ("a", 0), ("c", 1))]
        >>> kept, dropped = drop_duplicates(runs)
        >>> [str(r.path) for r in kept], [(str(d.path), str(k.path)) for d, k in dropped]
        (['a', 'c'], [('b', 'a')])
    """
    first: dict[str, Run] = {}
    for run in sorted(runs, key=lambda r: str(r.path)):
        if run.config:
            first.setdefault(run_identity(run), run)
    dropped = [(r, first[run_identity(r)]) for r in runs if r.config and first[run_identity(r)] is not r]
    dropped.sort(key=lambda pair: str(pair[0].path))
    gone = {id(d) for d, _ in dropped}
    return [r for r in runs if id(r) not in gone], dropped


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _levels(stats: dict) -> float | None:
    n = stats.get("num_trajectories")
    return float(n) if _finite_number(n) else None


def peak_candidates(run: Run) -> list[tuple[int, float]]:
    """``(iteration, success)`` of the validations that can set the run's peak
    (:func:`~ragen_torchrl.validation_peak.can_set_peak`): after iteration 0, on as many levels as the final
    validation played (the full validation set).

    Example:
        >>> from pathlib import Path
        >>> peak_candidates(Run(Path("r"), {}, [], [(0, {"success": 0.6, "num_trajectories": 512}),
        ...     (10, {"success": 0.7, "num_trajectories": 128}), (60, {"success": 0.58, "num_trajectories": 512})]))
        [(60, 0.58)]
    """
    final = run.val[-1][1] if run.val else {}
    full = _levels(final)
    return [
        (it, float(st["success"]))
        for it, st in run.val
        if _finite_number(st.get("success")) and can_set_peak(it, _levels(st), full)
    ]


def peak_success(run: Run) -> tuple[int, float] | None:
    """``(iteration, success)`` of the run's peak validation (:func:`~ragen_torchrl.validation_peak.peak_of`):
    the best of :func:`peak_candidates`, the earliest on ties; ``None`` when there is none.

    The validation before training (iteration 0) does not count, nor does a periodic validation on fewer
    levels than the final one: the trainer's ``val_peak`` follows the same rule.

    Example:
        >>> from pathlib import Path
        >>> peak_success(Run(Path("r"), {}, [], [(0, {"success": 0.9}), (10, {"success": 0.5}),
        ...                                        (20, {"success": 0.7}), (30, {"success": 0.7})]))
        (20, 0.7)
    """
    return peak_of([(it, v, None) for it, v in peak_candidates(run)], None)


def final_point(run: Run, key: str = "success") -> tuple[int, float] | None:
    """``(iteration, value)`` of the validation statistic ``key`` (success; ``tokens``, ``turns``: per episode)
    at the last validation that recorded it (``None`` when there is none).

    Example:
        >>> from pathlib import Path
        >>> run = Run(Path("r"), {}, [], [(0, {"success": 0.5, "tokens": 90.0}),
        ...                               (60, {"success": 0.75, "tokens": 80.0})])
        >>> final_point(run), final_point(run, "tokens"), final_point(run, "turns")
        ((60, 0.75), (60, 80.0), None)
    """
    pts = run.val_series(key)
    return pts[-1] if pts else None


#: per-run totals: (name, summary keys that record it, per-iteration scalar summed when none does)
TOTALS = (
    ("optimizer steps", ("optimizer_steps", "train/optimizer_steps"), "train/optimizer_steps"),
    ("trained samples", ("trained_samples", "samples_trained"), "filter/kept_trajectories"),
    ("trained tokens", ("trained_tokens", "tokens_trained"), "train/assistant_tokens"),
)


def _lookup(summary: dict[str, Any], names: Sequence[str]) -> float | None:
    for section in (summary, *(v for v in summary.values() if isinstance(v, dict))):
        for name in names:
            v = section.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                return float(v)
    return None


def run_totals(run: Run) -> dict[str, float | None]:
    """Optimizer steps, trained samples (trajectories) and trained tokens of a run, ``None`` when unknown.

    A total the summary records (top level or one level down) is used as it is; else the per-iteration
    scalar is summed over the run's history (``filter/kept_trajectories``: the trajectories the
    update trained on; ``train/assistant_tokens``: their assistant tokens).

    Example:
        >>> from pathlib import Path
        >>> h = [{"iteration": i, "train/optimizer_steps": 4.0, "filter/kept_trajectories": 16.0} for i in (1, 2)]
        >>> run_totals(Run(Path("r"), {}, h, summary={"provenance": {"trained_tokens": 900}}))
        {'optimizer steps': 8.0, 'trained samples': 32.0, 'trained tokens': 900.0}
    """
    out: dict[str, float | None] = {}
    for name, keys, scalar in TOTALS:
        value = _lookup(run.summary, keys)
        if value is None and run.has(scalar):
            value = sum(v for _, v in run.series(scalar))
        out[name] = value
    return out


# --------------------------------------------------------------------------- the final evaluation
#: written into a run dir by ``trainer.final_eval`` and ``ragen-eval RUN --final-eval``
FINAL_EVAL_FILE = "final_eval.json"


def final_eval_stats(run: Run, policy: str, mode: str) -> dict[str, Any] | None:
    """The final evaluation's stats of ``policy`` (``final`` / ``best``) in ``mode`` (``greedy`` / ``sampled``):
    ``{success, success_stderr, n, ...}`` from the run dir's ``final_eval.json`` (a re-evaluation rewrites it),
    else from ``summary.json``'s ``final_eval``; ``None`` when the run has none (or no such policy and mode).
    A ``final_eval.json`` that is not JSON, or leads out of the run dir, is a :class:`RunError` naming it.

    Example:
        >>> from pathlib import Path
        >>> stats = {"success": 0.8, "success_stderr": 0.009, "n": 2048}
        >>> run = Run(Path("r"), {}, summary={"final_eval": {"results": {"final": {"greedy": stats}}}})
        >>> final_eval_stats(run, "final", "greedy")["n"], final_eval_stats(run, "best", "greedy")
        (2048, None)
    """
    result = run.summary.get("final_eval")
    path = run.path / FINAL_EVAL_FILE
    if path.is_file():
        try:
            result = json.loads(read_bytes_inside(path, run.path, 64 << 20).decode("utf-8"))
        except (OSError, ValueError) as e:  # UnsafeFileError is a ValueError
            raise RunError(f"{path}: unreadable final evaluation ({' '.join(str(e).split())[:200]})") from None
    results = result.get("results") if isinstance(result, dict) else None
    stats = results.get(policy) if isinstance(results, dict) else None
    stats = stats.get(mode) if isinstance(stats, dict) else None
    return stats if isinstance(stats, dict) and _finite_number(stats.get("success")) else None


def final_eval_success(run: Run, policy: str, mode: str) -> float | None:
    """The final evaluation's success of ``policy`` in ``mode`` (:func:`final_eval_stats`), ``None`` without one.

    Example:
        >>> from pathlib import Path
        >>> final_eval_success(Run(Path("no/such/run"), {}), "final", "greedy") is None
        True
    """
    stats = final_eval_stats(run, policy, mode)
    return None if stats is None else float(stats["success"])


#: per-run measures of the final evaluation, as ``(label, function of a run, digits)``: the shape of the
#: report's paired metrics (``report.paired`` / ``ragen-report --paired`` names)
FINAL_EVAL_MEASURES = {
    f"{policy}_{mode}": (
        f"final-evaluation success, {policy} policy, {mode}",
        partial(final_eval_success, policy=policy, mode=mode),
        3,
    )
    for policy in ("final", "best")
    for mode in ("greedy", "sampled")
}


def final_eval_note(runs: Sequence[Run], name: str) -> str:
    """What a report says under a final-evaluation measure ``name``: the levels per run, and the runs without one.

    Example:
        >>> from pathlib import Path
        >>> fe = {"results": {"final": {"greedy": {"success": 0.8, "success_stderr": 0.009, "n": 2048}}}}
        >>> runs = [Run(Path("a"), {}, summary={"final_eval": fe}), Run(Path("b"), {})]
        >>> final_eval_note(runs, "final_greedy")
        'final_greedy: 2048 levels per run; missing for 1 of 2 runs (b: no final evaluation of the final policy, greedy; ragen-eval RUN --final-eval --levels N adds one)'
    """
    policy, mode = name.split("_", 1)
    found = {id(r): final_eval_stats(r, policy, mode) for r in runs}
    levels = sorted({int(s["n"]) for s in found.values() if s is not None and _finite_number(s.get("n"))})
    missing = [str(r.path) for r in runs if found[id(r)] is None]
    note = f"{name}: {'/'.join(map(str, levels)) or 'no'} levels per run"
    if missing:
        note += (
            f"; missing for {len(missing)} of {len(runs)} runs ({', '.join(missing[:5])}"
            f"{', ...' if len(missing) > 5 else ''}: no final evaluation of the {policy} policy, {mode}; "
            "ragen-eval RUN --final-eval --levels N adds one)"
        )
    return note
