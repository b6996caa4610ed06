"""Every result number the README and the docs pages state, bound to its result set, arm and metric.

A region marked ``<!-- numbers: bound -->`` ... ``<!-- /numbers -->`` (README.md, ``docs/**/*.md``
outside ``docs/results/``) holds numbers that :data:`BOUND` ties, one by one and in the order they are
written, to a ``(set, arm, metric)``: the value is recomputed from the set's committed per-run files
(``docs/results/<set>/runs/*/summary.json`` and ``scalars.csv``, through :mod:`ragen_torchrl.reporting`,
the code that writes ``report.md``) and must round to the number as written, with its decimals, its sign
when one is written, integers (seeds, levels, seconds) and percentages included. A number added to a
region without a row here fails, and so does a row whose number left the page.

The README's Results section is one bound region, and every paragraph of README.md or a top-level
``docs/*.md`` page that links to a result set (``results/<set>/``) and states a number lies in one.
Pages under ``docs/experiments/`` and ``docs/envs/`` use bound regions for the claims they share with the
README; their other regions are checked by ``test_docs_numbers.py`` (each number must occur in the cited
file, which binds neither arm nor metric).

A result set is evidence of one code version: all of its ``summary.json`` files (``runs/`` and any other
run dir in the set) must record one commit on a clean tree. A set that cannot is listed in
:data:`MIXED_PROVENANCE_OK` with the reason, and its README must name every commit its runs recorded.

What the arm and metric strings mean (:func:`value`):

* arm: a name from :data:`ARMS` (a group of runs, matched on the report's grouping keys), ``B-A`` (the
  difference arm B − arm A, paired by seed), ``runs/NAME`` (one run dir of the set), ``runs/B-runs/A``
  (two single runs), several arms joined by ``|`` (``min ``/``max `` over them), or ``all``;
* metric, on a group: ``start``, ``final``, ``peak`` (validation success), ``update`` (s / iteration),
  ``kept`` (kept ratio), ``heterogeneity``, ``t3_rate``, ``steps``, ``samples``, ``tokens_trained``
  (per run), each ``.se`` for its standard error; ``n`` (runs); ``iterations`` (``.min``/``.max``);
  ``seconds`` (wall time per run, ``.min``/``.max``); ``iteration_time`` (mean ``timing/total``);
  ``levels`` (validation levels of the final validation); ``gain`` (final − start per run, ``.lo``/``.hi``:
  95% t interval); ``z`` (per run, ``.min``/``.max``: the gain in standard errors of the difference);
  ``early:D`` / ``late:D`` / ``change:D`` (diagnostic D over the first / last 20% of iterations, and the
  change, ``.lo``/``.hi``); ``rho:D`` (Spearman of early D with final success, ``.lo``/``.hi``/``.p``);
  ``val:K`` (mean of the final validation's ``K``); ``config:KEY``; ``slip_pct`` (100 (1 − ``env.success_rate``));
  ``pct_change:D`` / ``ratio_change:D`` (late over early of D's group means);
* on ``B-A``: ``diff:M`` (paired, M of ``ragen-report --paired``; ``.lo``/``.hi``: t interval, ``.p``,
  ``.mde``, ``.up``/``.down``: seeds), ``pct:X`` (100 (B / A − 1) of the group metric X), ``ratio:X``,
  ``valdiff:K`` (paired difference of the final validation's ``K``, ``.lo``/``.hi``);
* on ``runs/NAME``: ``summary:PATH`` (a field of its ``summary.json``), ``z`` and ``gain`` (end vs start
  validation), ``minutes`` (``phases.total.wall`` / 60), ``mean:KEY`` (a scalar's mean over iterations),
  ``ran`` (iterations that ran), ``val_at:IT:KEY`` (a validation's ``KEY``), ``val_best_iteration``;
  on ``runs/B-runs/A``: ``ratio:summary:PATH``, ``ratio:sum:KEY``, ``diff:summary:PATH``, ``z`` (the
  final validations' difference in standard errors);
* ``abs `` before a metric: its magnitude (a page that writes "fell 0.190");
* set ``paper``: a number quoted from a paper, looked up in :data:`PAPER` (with where it is stated); set
  ``method``: a number describing the statistics (the 95% of an interval), read from the code.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import statistics
from pathlib import Path

import pytest

from ragen_torchrl.flat_config import flatten_config
from ragen_torchrl.reporting.cli import grouping_keys
from ragen_torchrl.reporting.run_metrics import (
    TRAINING_DIAGNOSTICS,
    diagnostic_points,
    drop_duplicates,
    early_mean,
    group_runs,
    late_mean,
)
from ragen_torchrl.reporting.runs import load_run, load_runs, result_set_runs
from ragen_torchrl.reporting.statistics import mean_se, paired_comparison, t_interval
from ragen_torchrl.reporting.table import OPTIONAL_COLUMNS, PAIRED_METRICS, group_row

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"

# --------------------------------------------------------------------------- the numbers of a page
_OPEN = re.compile(r"<!-- numbers: (.+?) -->")
_CLOSE = "<!-- /numbers -->"
# what is not a stated number: comments, code spans (config values, commands), link targets, arXiv ids
_STRIP = re.compile(r"<!--.*?-->|`[^`\n]*`|\]\([^)\s]*\)|arXiv:?\s*\d{4}\.\d{4,5}")
# a number, with its sign and a % or x suffix; not part of a word (RAGEN-2, T3, 6x6, Qwen2.5, 2e-4), a
# version (2.13.0) or a section (§3.3)
_TOKEN = re.compile(r"(?<![\w.§/+\-−])[+\-−]?\d+(?:\.\d+)?(?:%|x(?!\w))?(?![\w%]|\.\d)")


def tokens(line: str) -> list[str]:
    """The numbers of one line of Markdown, as written (``−`` as ``-``).

    Example:
        >>> tokens("RAGEN-2 (arXiv 2604.06268) on Sokoban 6x6: 0.759 ± 0.006 → +0.069 [-0.019, +0.033], 80%, 0.78x")
        ['0.759', '0.006', '+0.069', '-0.019', '+0.033', '80%', '0.78x']
        >>> tokens("`algo.lr=1e-4`, GRPO's 2e-4, T3, torch 2.13.0, §3.3, 512–558 s, [link](results/a_2/README.md)")
        ['512', '558']
    """
    return [t.replace("−", "-") for t in _TOKEN.findall(_STRIP.sub(" ", line))]


def bound_tokens(text: str) -> list[tuple[int, str]]:
    """``(line number, number)`` of every number inside the page's ``bound`` regions, in order."""
    out, inside = [], False
    for i, line in enumerate(text.splitlines(), 1):
        opened = _OPEN.match(line.strip())
        if opened:
            inside = opened.group(1).split() == ["bound"]
            continue
        if line.strip() == _CLOSE:
            inside = False
            continue
        if inside:
            out += [(i, t) for t in tokens(line)]
    return out


def bound_lines(text: str) -> set[int]:
    """The line numbers inside ``bound`` regions."""
    lines, inside = set(), False
    for i, line in enumerate(text.splitlines(), 1):
        opened = _OPEN.match(line.strip())
        if opened:
            inside = opened.group(1).split() == ["bound"]
        elif line.strip() == _CLOSE:
            inside = False
        elif inside:
            lines.add(i)
    return lines


def _pages() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "results" not in p.relative_to(ROOT / "docs").parts]
    return [ROOT / "README.md", *docs]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


# --------------------------------------------------------------------------- result sets
#: the groups of each set by name: the grouping-key values that pick the group
ARMS: dict[str, dict[str, dict]] = {
    "default_run": {"all": {}},
    "snr_filter_frozenlake": {
        "none": {"filter.name": "none", "trainer.max_optimizer_steps": None},
        "top_p": {"filter.name": "snr_top_p", "trainer.max_optimizer_steps": None},
        "equal_steps": {"filter.name": "snr_top_p", "trainer.max_optimizer_steps": 240},
    },
    "snr_filter_sokoban": {
        "none": {"filter.name": "none", "trainer.max_optimizer_steps": None},
        "top_p": {"filter.name": "snr_top_p", "trainer.max_optimizer_steps": None},
        "equal_steps": {"filter.name": "snr_top_p", "trainer.max_optimizer_steps": 48},
    },
    "template_collapse": {
        "grounded": {"sft.reasoning": "grounded", "env.success_rate": 1.0},
        "shuffled": {"sft.reasoning": "shuffled"},
        "provoke": {"sft.reasoning": "grounded", "env.success_rate": 0.5},
    },
    "mi_vs_entropy": {
        f"{f}_{reg}": {"filter.name": name, "algo.entropy_coeff": ent, "algo.kl_coeff": kl}
        for f, name in (("none", "none"), ("top_p", "snr_top_p"))
        for reg, ent, kl in (("base", 0.001, 0.0), ("entropy", 0.01, 0.0), ("kl", 0.001, 0.01))
    },
    "mechanism_rl": {"none": {"filter.name": "none"}, "top_p": {"filter.name": "snr_top_p"}},
    "t3_cpu": {
        f"{task}_{arm}": {"env.name": env, "t3.enabled": on}
        for task, env in (("gn", "guess_numbers"), ("cd", "circuit_decoding"))
        for arm, on in (("no_t3", False), ("t3", True))
    },
    "t3_ablation": {
        f"{rule}_{arm}": {"env.malformed": rule, "t3.enabled": on}
        for rule in ("retry", "end")
        for arm, on in (("no_t3", False), ("t3", True))
    },
    "slip_sweep": {
        f"{f}@{slip}": {"filter.name": name, "env.success_rate": rate}
        for f, name in (("none", "none"), ("top_p", "snr_top_p"))
        for slip, rate in ((0, 1.0), (20, 0.8), (50, 0.5), (80, 0.2))
    },
}

#: sets whose runs do not all record one commit on a clean tree: why that is acceptable
MIXED_PROVENANCE_OK = {
    "snr_controls": "all 15 runs at one commit in a clean clone; the tree reads dirty only because the runs wrote "
    "their output (out/) inside that clone, untracked; the README names the commit",
    "default_run_speed": "a before/after comparison of two versions: runs/before predates provenance "
    "records (its commit is named in the set's README), runs/after is one clean commit",
    "visual_frozenlake": "bare_command/ reruns the preset's bare command at a later commit to show it "
    "gives the runs/none_lr1e-4 results; it is not part of report.md",
}

#: numbers quoted from the papers, with where they are stated
PAPER = {
    "step_time_pct.min": (-26, "RAGEN-2 (arXiv 2604.06268): top-p 0.9 cuts per-step time by 26 to 41%"),
    "step_time_pct.max": (-41, "RAGEN-2: the same range"),
    "frozenlake_delta_pct": (-5.0, "RAGEN-2: on FrozenLake the filter's change in success, Δ = −5.0%"),
    "mi_rho": (0.39, "RAGEN-2 §2.3: Spearman of the early trajectory MI z-score with final success"),
}

#: numbers that describe the statistics, read from the code that computes them
METHOD = {"ci_level": lambda: 100 * inspect.signature(t_interval).parameters["level"].default}

_GROUP_METRICS = {
    "start": "start",
    "final": "final",
    "peak": "peak",
    "update": "update",
    "steps": "optimizer steps",
    "samples": "trained samples",
    "tokens_trained": "trained tokens",
    **{name: key for name, (_, key) in zip(("kept", "heterogeneity", "t3_rate"), OPTIONAL_COLUMNS)},
}
_DIAGNOSTICS = {d.slug: d for d in TRAINING_DIAGNOSTICS}


class ResultSet:
    """One committed set: its runs grouped as its ``report.md`` groups them, and per-run summaries."""

    def __init__(self, name: str):
        self.name = name
        self.folder = RESULTS / name
        report = self.folder / "report.md"
        runs, _ = drop_duplicates(load_runs(result_set_runs(self.folder)))
        by = grouping_keys(report.read_text(encoding="utf-8")) if report.is_file() else []
        self.keys, self.groups = group_runs(runs, by=by or None)

    def group(self, arm: str):
        spec = ARMS[self.name][arm]
        found = [g for g in self.groups if all(g.values.get(k) == v for k, v in spec.items())]
        assert len(found) == 1, f"{self.name}: arm {arm} {spec} matches {len(found)} groups"
        return found[0]

    @functools.cache
    def run(self, path: str):
        return load_run(self.folder / path)

    def summary(self, path: str) -> dict:
        return json.loads((self.folder / path / "summary.json").read_text(encoding="utf-8"))

    def raw(self, run) -> dict:
        """The ``summary.json`` of one of the set's runs, as written."""
        return self.summary(run.path.relative_to(self.folder).as_posix())


@functools.cache
def result_set(name: str) -> ResultSet:
    return ResultSet(name)


def _dig(d: dict, path: str):
    for part in path.split("."):
        d = d[part]
    return d


def _field(stat: tuple, field: str) -> float:
    mean, se, _ = stat
    return {"": mean, "se": se}[field]


def _split(metric: str) -> tuple[str, str]:
    """``"change:mi_zscore.lo"`` -> ``("change:mi_zscore", "lo")``; dots inside a config key or a path stay."""
    head, _, tail = metric.rpartition(".")
    if head and tail in {"se", "lo", "hi", "p", "mde", "up", "down", "min", "max", "boot_lo", "boot_hi", "n"}:
        return head, tail
    return metric, ""


def _z(start: dict, end: dict) -> float:
    return (end["success"] - start["success"]) / math.hypot(start["success_stderr"], end["success_stderr"])


def _run_values(rs: ResultSet, runs, metric: str) -> list[float]:
    """A per-run metric of each run of a group."""
    kind, _, name = metric.partition(":")
    out = []
    for r in runs:
        s = r.summary
        if kind == "seconds":
            out.append(s["seconds"])
        elif kind == "iterations":
            out.append(r.last_iteration)
        elif kind == "iteration_time":
            out.append(statistics.mean(v for _, v in r.series("timing/total")))
        elif kind in ("gain", "z"):
            raw = rs.raw(r)
            a, b = raw["val_start"], raw["val_end"]
            out.append(b["success"] - a["success"] if kind == "gain" else _z(a, b))
        elif kind in ("early", "late", "change"):
            key = _DIAGNOSTICS[name].key_for(r) if name in _DIAGNOSTICS else name
            e, lt = early_mean(r, key), late_mean(r, key)
            out.append({"early": e, "late": lt, "change": lt - e}[kind])
        elif kind == "val":
            raw = rs.raw(r)
            out.append(raw["val_end"][name])
        else:
            raise KeyError(metric)
    return out


def _group_value(rs: ResultSet, arm: str, metric: str) -> float:
    base, field = _split(metric)
    if base.startswith("rho:"):
        diag = next(d for d in diagnostic_points(rs.groups) if d.diagnostic.slug == base[4:])
        pools = dict(diag.pools(rs.groups))
        test = pools["all runs" if arm == "all" else rs.group(arm).label]
        return {"": test.rho, "lo": test.ci[0], "hi": test.ci[1], "p": test.p, "n": test.n}[field]
    group = rs.group(arm)
    if base in _GROUP_METRICS:
        return _field(group_row(group)[_GROUP_METRICS[base]], field)
    if base == "n":
        return len(group.runs)
    if base == "slip_pct":
        return 100 * (1 - _group_value(rs, arm, "config:env.success_rate"))
    if base.startswith(("pct_change:", "ratio_change:")):
        kind, _, name = base.partition(":")
        ratio = _group_value(rs, arm, f"late:{name}") / _group_value(rs, arm, f"early:{name}")
        return 100 * (ratio - 1) if kind == "pct_change" else ratio
    if base == "levels":
        levels = {rs.raw(r)["val_end"]["num_trajectories"] for r in group.runs}
        assert len(levels) == 1, levels
        return levels.pop()
    if base.startswith("config:"):
        values = {json.dumps(flatten_config(r.config)[base[7:]]) for r in group.runs}
        assert len(values) == 1, values
        return float(json.loads(values.pop()))
    values = _run_values(rs, group.runs, base)
    if field in ("min", "max"):
        return min(values) if field == "min" else max(values)
    if field in ("lo", "hi"):
        lo, hi = t_interval(values)
        return lo if field == "lo" else hi
    if field == "up":
        return sum(v > 0 for v in values)
    if field == "down":
        return sum(v < 0 for v in values)
    if len(values) == 1 and base in ("iterations", "seconds"):
        return values[0]
    return _field((*mean_se(values), len(values)), field)


def _paired(rs: ResultSet, arm_b: str, arm_a: str, metric: str) -> float:
    base, field = _split(metric)
    kind, _, name = base.partition(":")
    a, b = rs.group(arm_a), rs.group(arm_b)
    if kind in ("pct", "ratio"):
        ratio = _group_value(rs, arm_b, name) / _group_value(rs, arm_a, name)
        return 100 * (ratio - 1) if kind == "pct" else ratio
    if kind == "diff":
        fn = PAIRED_METRICS[name][1]
    elif kind == "valdiff":

        def fn(r):
            return rs.raw(r)["val_end"][name]
    else:
        raise KeyError(metric)
    va = {r.config["seed"]: fn(r) for r in a.runs}
    vb = {r.config["seed"]: fn(r) for r in b.runs}
    c = paired_comparison(va, vb)
    return {
        "": c.mean,
        "lo": c.t_ci[0],
        "hi": c.t_ci[1],
        "boot_lo": c.boot_ci[0],
        "boot_hi": c.boot_ci[1],
        "p": c.p,
        "mde": c.mde,
        "up": c.b_greater,
        "down": c.b_less,
        "n": c.n,
    }[field]


def _single_run(rs: ResultSet, path: str, metric: str) -> float:
    s = rs.summary(path)
    kind, _, name = metric.partition(":")
    if kind == "summary":
        return _dig(s, name)
    if kind == "z":
        return _z(s["val_start"], s["val_end"])
    if kind == "gain":
        return s["val_end"]["success"] - s["val_start"]["success"]
    if kind == "minutes":
        return s["phases"]["total"]["wall"] / 60
    if kind == "mean":
        return statistics.mean(v for _, v in rs.run(path).series(name))
    if kind == "ran":
        return rs.run(path).last_iteration
    if kind == "val_best_iteration":
        return max((it for it, v in rs.run(path).val if it > 0), key=lambda it: dict(rs.run(path).val)[it]["success"])
    if kind == "val_at":
        iteration, _, key = name.partition(":")
        return dict(rs.run(path).val)[int(iteration)][key]
    raise KeyError(metric)


def _run_pair(rs: ResultSet, path_b: str, path_a: str, metric: str) -> float:
    kind, _, name = metric.partition(":")
    if kind == "z":
        a, b = rs.summary(path_a)["val_end"], rs.summary(path_b)["val_end"]
        return _z(a, b)
    sub, _, key = name.partition(":")
    if sub == "summary":
        vb, va = _dig(rs.summary(path_b), key), _dig(rs.summary(path_a), key)
    elif sub == "sum":
        vb, va = (sum(v for _, v in rs.run(p).series(key)) for p in (path_b, path_a))
    else:
        raise KeyError(metric)
    return {"ratio": vb / va, "diff": vb - va}[kind]


def value(set_name: str, arm: str, metric: str) -> float:
    """The value a bound number states, recomputed from the set's committed files (see the module docstring).

    Example:
        >>> round(value("default_run", "all", "start"), 3), value("default_run", "all", "n")
        (0.759, 4)
    """
    if set_name == "paper":
        return PAPER[metric][0]
    if set_name == "method":
        return METHOD[metric]()
    if metric.startswith("abs "):
        return abs(value(set_name, arm, metric[4:]))
    rs = result_set(set_name)
    if metric.startswith(("min ", "max ")):
        values = [value(set_name, a, metric[4:]) for a in arm.split("|")]
        return min(values) if metric.startswith("min") else max(values)
    if arm.startswith("runs/") and "-runs/" in arm:
        b, a = arm.split("-runs/")
        return _run_pair(rs, b, "runs/" + a, metric)
    if arm.startswith("runs/") or arm == ".":
        return _single_run(rs, arm, metric)
    if "-" in arm and arm not in ARMS.get(set_name, {}):
        b, a = arm.split("-")
        return _paired(rs, b, a, metric)
    return _group_value(rs, arm, metric)


def matches(written: str, actual: float) -> bool:
    """Whether ``actual`` rounds to the number as written: its decimals, its sign when written, a % or x suffix.

    Example:
        >>> matches("0.759", 0.75935), matches("+0.069", 0.0694), matches("-0.013", 0.0127), matches("4", 4)
        (True, True, False, True)
        >>> matches("-33%", -32.7), matches("0.78x", 0.7835), matches("+0.000", -0.0001)
        (True, True, True)
    """
    text = written.rstrip("%x")
    decimals = len(text.split(".")[1]) if "." in text else 0
    if abs(actual - float(text)) > 0.5 * 10**-decimals + 1e-9:
        return False
    if text[0] in "+-" and round(actual, decimals) != 0:
        return (actual > 0) == (text[0] == "+")
    return True


# --------------------------------------------------------------------------- the bindings
# (number as written, set, arm, metric); one list per page, in the order the numbers stand on it
SNR = "snr_filter_frozenlake"
SLIP_PAIRS = "|".join(f"top_p@{s}-none@{s}" for s in (0, 20, 50, 80))

BOUND: dict[str, list[tuple[str, str, str, str]]] = {}
SMOL, PRESET, VIS = "smollm2_bandit", "smollm2_bandit_preset", "visual_frozenlake"
NOISY, BARE = "smollm2_arithmetic_noisy", "smollm2_arithmetic_bare"
GRPO, DRGRPO = "runs/grpo_seed0", "runs/drgrpo_seed0"
MECH, T3, SOKO, TC, MVE = "mechanism_rl", "t3_cpu", "snr_filter_sokoban", "template_collapse", "mi_vs_entropy"
T3A = "t3_ablation"
MI_NATS, SPREAD = "collapse/trajectory/mi_estimate", "collapse/trajectory/marginal_std"
TOKEN_ENTROPY = "mean:collapse/trajectory/reasoning_token_entropy_mean"
MVE_ARMS = "|".join(ARMS[MVE])
CI = ("95%", "method", "", "ci_level")

BOUND["README.md"] = [
    # default run
    ("4", "default_run", "all", "n"),
    ("0.759", "default_run", "all", "start"),
    ("0.006", "default_run", "all", "start.se"),
    ("0.828", "default_run", "all", "final"),
    ("0.002", "default_run", "all", "final.se"),
    ("512", "default_run", "all", "levels"),
    ("2.2", "default_run", "all", "z.min"),
    ("3.4", "default_run", "all", "z.max"),
    ("+0.069", "default_run", "all", "gain"),
    CI,
    ("+0.049", "default_run", "all", "gain.lo"),
    ("+0.090", "default_run", "all", "gain.hi"),
    ("512", "default_run", "all", "seconds.min"),
    ("558", "default_run", "all", "seconds.max"),
    # SmolLM2
    ("2", BARE, GRPO, "summary:config.model.threads"),
    ("30", BARE, GRPO, "summary:config.trainer.total_iterations"),
    ("0.184", BARE, GRPO, "summary:val_start.success"),
    ("0.017", BARE, GRPO, "summary:val_start.success_stderr"),
    ("0.420", BARE, GRPO, "summary:val_end.success"),
    ("0.022", BARE, GRPO, "summary:val_end.success_stderr"),
    ("512", BARE, GRPO, "summary:val_end.num_trajectories"),
    ("8.5", BARE, GRPO, "z"),
    ("33", BARE, GRPO, "minutes"),
    # SNR filter, FrozenLake
    ("5", SNR, "none", "n"),
    ("4.20", SNR, "none", "update"),
    ("0.11", SNR, "none", "update.se"),
    ("1.52", SNR, "top_p", "update"),
    ("0.03", SNR, "top_p", "update.se"),
    ("-64%", SNR, "top_p-none", "pct:update"),
    ("7.22", SNR, "none", "iteration_time"),
    ("4.86", SNR, "top_p", "iteration_time"),
    ("-33%", SNR, "top_p-none", "pct:iteration_time"),
    ("-26", "paper", "RAGEN-2", "step_time_pct.min"),
    ("-41%", "paper", "RAGEN-2", "step_time_pct.max"),
    ("+0.007", SNR, "top_p-none", "diff:final"),
    CI,
    ("-0.019", SNR, "top_p-none", "diff:final.lo"),
    ("+0.033", SNR, "top_p-none", "diff:final.hi"),
    ("+0.025", SNR, "equal_steps-none", "diff:final"),
    ("-0.006", SNR, "equal_steps-none", "diff:final.lo"),
    ("+0.056", SNR, "equal_steps-none", "diff:final.hi"),
    ("0.188", SNR, "equal_steps-none", "diff:final.p"),
    ("-5.0%", "paper", "RAGEN-2", "frozenlake_delta_pct"),
    # template collapse
    ("0.020", TC, "shuffled", "early:mi_zscore"),
    ("0.004", TC, "shuffled", "early:mi_zscore.se"),
    ("3.075", TC, "grounded", "early:mi_zscore"),
    ("0.303", TC, "grounded", "early:mi_zscore.se"),
    ("0.509", TC, "shuffled", "early:reasoning_entropy"),
    ("0.004", TC, "shuffled", "early:reasoning_entropy.se"),
    ("0.289", TC, "grounded", "early:reasoning_entropy"),
    ("0.003", TC, "grounded", "early:reasoning_entropy.se"),
    ("3", TC, "grounded", "n"),
    ("0.598", "visual_mi", "runs/shuffled_seed0", TOKEN_ENTROPY),
    ("0.352", "visual_mi", "runs/grounded_seed0", TOKEN_ENTROPY),
    ("0.606", "visual_mi", "runs/shuffled_seed1", TOKEN_ENTROPY),
    ("0.321", "visual_mi", "runs/grounded_seed1", TOKEN_ENTROPY),
    # MI vs entropy
    ("18", MVE, "all", "rho:mi_zscore.n"),
    ("-0.113", MVE, "all", "rho:mi_zscore"),
    ("-0.571", MVE, "all", "rho:mi_zscore.lo"),
    ("+0.341", MVE, "all", "rho:mi_zscore.hi"),
    ("-0.300", SNR, "all", "rho:mi_zscore"),
    ("-0.800", SNR, "all", "rho:mi_zscore.lo"),
    ("+0.314", SNR, "all", "rho:mi_zscore.hi"),
    ("0.283", SNR, "all", "rho:mi_zscore.p"),
    ("15", SNR, "all", "rho:mi_zscore.n"),
    ("+0.39", "paper", "RAGEN-2", "mi_rho"),
    ("0.798", MVE, MVE_ARMS, "min final"),
    ("0.823", MVE, MVE_ARMS, "max final"),
    # the mechanism
    ("200", MECH, "none", "config:trainer.total_iterations"),
    ("5", MECH, "none", "n"),
    ("-2.127", MECH, "none", "change:mi_zscore"),
    ("-2.623", MECH, "none", "change:mi_zscore.lo"),
    ("-1.632", MECH, "none", "change:mi_zscore.hi"),
    ("0.190", MECH, "none", f"abs change:{MI_NATS}"),
    ("29%", MECH, "none", f"abs pct_change:{MI_NATS}"),
    ("4.4x", MECH, "none", f"ratio_change:{SPREAD}"),
    ("+0.605", MECH, "none", "change:reasoning_entropy"),
    ("0.667", MECH, "top_p", f"early:{MI_NATS}"),
    ("0.664", MECH, "top_p", f"late:{MI_NATS}"),
    ("+1.009", MECH, "top_p-none", "diff:mi_late"),
    ("+0.368", MECH, "top_p-none", "diff:mi_late.lo"),
    ("+1.651", MECH, "top_p-none", "diff:mi_late.hi"),
    ("+0.000", MECH, "top_p-none", "diff:final"),
    ("-0.021", MECH, "top_p-none", "diff:final.lo"),
    ("+0.021", MECH, "top_p-none", "diff:final.hi"),
    # T3
    ("5", T3, "gn_no_t3", "n"),
    ("20", T3, "gn_no_t3", "config:trainer.total_iterations"),
    ("-1.02", T3, "gn_t3-gn_no_t3", "diff:turns"),
    ("-25.3", T3, "gn_t3-gn_no_t3", "diff:tokens"),
    ("-2.0", T3, "gn_t3-gn_no_t3", "valdiff:tokens"),
    ("-4.2", T3, "gn_t3-gn_no_t3", "valdiff:tokens.lo"),
    ("+0.2", T3, "gn_t3-gn_no_t3", "valdiff:tokens.hi"),
    ("26.32", T3, "gn_no_t3", "update"),
    ("3.64", T3, "gn_t3", "update"),
    ("-86%", T3, "gn_t3-gn_no_t3", "pct:update"),
    ("24%", T3, "gn_t3-gn_no_t3", "abs pct:tokens_trained"),
    ("-0.008", T3, "gn_t3-gn_no_t3", "diff:final"),
    ("-0.035", T3, "gn_t3-gn_no_t3", "diff:final.lo"),
    ("+0.020", T3, "gn_t3-gn_no_t3", "diff:final.hi"),
    ("0.791", T3, "gn_no_t3", "start"),
    ("0.848", T3, "gn_no_t3", "final"),
    # t3_ablation (generated)
    ("6", T3A, "retry_no_t3", "n"),
    ("-38.6", T3A, "end_no_t3-retry_no_t3", "diff:tokens"),
    ("-41.7", T3A, "retry_t3-retry_no_t3", "diff:tokens"),
    ("-6.0", T3A, "end_t3-end_no_t3", "diff:tokens"),
    ("-6.6", T3A, "end_t3-end_no_t3", "diff:tokens.lo"),
    ("-5.3", T3A, "end_t3-end_no_t3", "diff:tokens.hi"),
    # Sokoban
    ("3", SOKO, "none", "n"),
    ("0.068", SOKO, "none", "start"),
    ("0.017", SOKO, "none", "start.se"),
    ("0.081", SOKO, "none", "final"),
    ("0.016", SOKO, "none", "final.se"),
    ("9.37", SOKO, "none", "update"),
    ("0.08", SOKO, "none", "update.se"),
    ("1.46", SOKO, "top_p", "update"),
    ("0.27", SOKO, "top_p", "update.se"),
    ("+0.013", SOKO, "top_p-none", "diff:final"),
    ("-0.245", SOKO, "top_p-none", "diff:final.lo"),
    ("+0.271", SOKO, "top_p-none", "diff:final.hi"),
    # slip sweep
    ("0", "slip_sweep", "none@0", "slip_pct"),
    ("20", "slip_sweep", "none@20", "slip_pct"),
    ("50", "slip_sweep", "none@50", "slip_pct"),
    ("80%", "slip_sweep", "none@80", "slip_pct"),
    ("3", "slip_sweep", "none@0", "n"),
    ("-0.013", "slip_sweep", SLIP_PAIRS, "min diff:final"),
    ("+0.020", "slip_sweep", SLIP_PAIRS, "max diff:final"),
    CI,
    ("-0.086", "slip_sweep", "top_p@20-none@20", "diff:final.lo"),  # the widest: see the test below
    ("+0.060", "slip_sweep", "top_p@20-none@20", "diff:final.hi"),
    # image-conditioned FrozenLake
    ("0.764", VIS, "runs/none_lr1e-4", "summary:val_start.success"),
    ("0.019", VIS, "runs/none_lr1e-4", "summary:val_start.success_stderr"),
    ("0.822", VIS, "runs/none_lr1e-4", "summary:val_end.success"),
    ("0.017", VIS, "runs/none_lr1e-4", "summary:val_end.success_stderr"),
    ("+0.059", VIS, "runs/none_lr1e-4", "gain"),
    ("2.3", VIS, "runs/none_lr1e-4", "z"),
    ("0.699", VIS, "runs/none_lr2e-4", "summary:val_end.success"),
    ("0.020", VIS, "runs/none_lr2e-4", "summary:val_end.success_stderr"),
    ("913", VIS, "runs/none_lr2e-4", "summary:phases.total.wall"),  # the run that built the fresh cache
    ("3.752", "visual_mi", "runs/grounded_seed0", "mean:collapse/first_turn/mi_zscore"),
    ("3.094", "visual_mi", "runs/grounded_seed1", "mean:collapse/first_turn/mi_zscore"),
    ("0.001", "visual_mi", "runs/shuffled_seed0", "mean:collapse/first_turn/mi_zscore"),
    ("0.000", "visual_mi", "runs/shuffled_seed1", "mean:collapse/first_turn/mi_zscore"),
    # Benchmarks: the default run before and after token-level trajectories
    ("60", "default_run_speed", "runs/after", "summary:config.trainer.total_iterations"),
    ("0.78x", "default_run_speed", "runs/after-runs/before", "ratio:summary:seconds"),
    ("0.69x", "default_run_speed", "runs/after-runs/before", "ratio:sum:timing/rollout"),
    ("+0.014", "default_run_speed", "runs/after-runs/before", "diff:summary:val_end.success"),
    ("0.6", "default_run_speed", "runs/after-runs/before", "z"),
]

BOUND["docs/real_models.md"] = [
    ("800", PRESET, GRPO, "summary:config.sft.episodes"),
    ("100", PRESET, GRPO, "summary:config.sft.steps"),
    ("8", PRESET, GRPO, "summary:config.sft.batch_size"),
    ("30", SMOL, "runs/smollm2_bandit_seed0", "ran"),
    ("0.143", SMOL, "runs/smollm2_bandit_seed0", "summary:val_start.success"),
    ("0.211", SMOL, "runs/smollm2_bandit_seed0", "summary:val_end.success"),
    ("+2.9", SMOL, "runs/smollm2_bandit_seed0", "z"),
    ("60", PRESET, GRPO, "summary:config.trainer.total_iterations"),
    ("56", PRESET, GRPO, "ran"),
    ("0.289", PRESET, GRPO, "val_at:20:success"),
    ("128", PRESET, GRPO, "val_at:20:num_trajectories"),
    ("20", PRESET, GRPO, "val_best_iteration"),
    ("0.174", PRESET, GRPO, "summary:val_end.success"),
    ("+1.4", PRESET, GRPO, "z"),
    ("0.232", PRESET, DRGRPO, "summary:val_end.success"),
    ("+3.7", PRESET, DRGRPO, "z"),
    ("0.793", "smollm2_mi", "runs/grounded", f"mean:{MI_NATS}"),
    ("0.001", "smollm2_mi", "runs/shuffled", f"mean:{MI_NATS}"),
    ("0.609", "smollm2_mi", "runs/grounded", "mean:collapse/trajectory/retrieval_accuracy"),
    ("0.094", "smollm2_mi", "runs/shuffled", "mean:collapse/trajectory/retrieval_accuracy"),
    ("60", NOISY, GRPO, "summary:config.trainer.total_iterations"),
    ("33", BARE, GRPO, "minutes"),
    ("0.184", BARE, GRPO, "summary:val_start.success"),
    ("0.017", BARE, GRPO, "summary:val_start.success_stderr"),
    ("0.420", BARE, GRPO, "summary:val_end.success"),
    ("0.022", BARE, GRPO, "summary:val_end.success_stderr"),
    ("512", BARE, GRPO, "summary:val_end.num_trajectories"),
]


PAPER_STEP = [("-26", "paper", "RAGEN-2", "step_time_pct.min"), ("-41%", "paper", "RAGEN-2", "step_time_pct.max")]
BOUND["docs/experiments/snr_filter.md"] = [
    ("-33%", SNR, "top_p-none", "pct:iteration_time"),
    ("0.359", SNR, "top_p", "kept"),
    ("0.008", SNR, "top_p", "kept.se"),
    ("1.52", SNR, "top_p", "update"),
    ("0.03", SNR, "top_p", "update.se"),
    ("4.20", SNR, "none", "update"),
    ("0.11", SNR, "none", "update.se"),
    ("-64%", SNR, "top_p-none", "pct:update"),
    ("4.86", SNR, "top_p", "iteration_time"),
    ("0.11", SNR, "top_p", "iteration_time.se"),
    ("7.22", SNR, "none", "iteration_time"),
    ("0.18", SNR, "none", "iteration_time.se"),
    ("-33%", SNR, "top_p-none", "pct:iteration_time"),
    *PAPER_STEP,
    ("319", SNR, "top_p", "seconds"),
    ("8", SNR, "top_p", "seconds.se"),
    ("460", SNR, "none", "seconds"),
    ("12", SNR, "none", "seconds.se"),
    # Sokoban
    ("0.212", SOKO, "top_p", "kept"),
    ("0.051", SOKO, "top_p", "kept.se"),
    ("1.46", SOKO, "top_p", "update"),
    ("0.27", SOKO, "top_p", "update.se"),
    ("9.37", SOKO, "none", "update"),
    ("0.08", SOKO, "none", "update.se"),
    ("-84%", SOKO, "top_p-none", "pct:update"),
    ("12.28", SOKO, "top_p", "iteration_time"),
    ("0.52", SOKO, "top_p", "iteration_time.se"),
    ("20.80", SOKO, "none", "iteration_time"),
    ("0.29", SOKO, "none", "iteration_time.se"),
    ("-41%", SOKO, "top_p-none", "pct:iteration_time"),
    *PAPER_STEP,
]

MARGINAL_ENTROPY = "collapse/trajectory/reasoning_entropy"
BOUND["docs/experiments/template_collapse.md"] = [
    ("0.516", TC, "shuffled", f"early:{MARGINAL_ENTROPY}"),
    ("0.009", TC, "shuffled", f"early:{MARGINAL_ENTROPY}.se"),
    ("0.872", TC, "grounded", f"early:{MARGINAL_ENTROPY}"),
    ("0.017", TC, "grounded", f"early:{MARGINAL_ENTROPY}.se"),
    ("0.598", "visual_mi", "runs/shuffled_seed0", TOKEN_ENTROPY),
    ("0.606", "visual_mi", "runs/shuffled_seed1", TOKEN_ENTROPY),
    ("0.352", "visual_mi", "runs/grounded_seed0", TOKEN_ENTROPY),
    ("0.321", "visual_mi", "runs/grounded_seed1", TOKEN_ENTROPY),
    ("0.085", "smollm2_mi", "runs/shuffled", TOKEN_ENTROPY),
    ("0.076", "smollm2_mi", "runs/grounded", TOKEN_ENTROPY),
    ("0.677", "visual_mi", "runs/shuffled_seed0", f"mean:{MARGINAL_ENTROPY}"),
    ("0.618", "visual_mi", "runs/shuffled_seed1", f"mean:{MARGINAL_ENTROPY}"),
    ("1.072", "visual_mi", "runs/grounded_seed0", f"mean:{MARGINAL_ENTROPY}"),
    ("1.175", "visual_mi", "runs/grounded_seed1", f"mean:{MARGINAL_ENTROPY}"),
    ("0.074", "smollm2_mi", "runs/shuffled", f"mean:{MARGINAL_ENTROPY}"),
    ("0.911", "smollm2_mi", "runs/grounded", f"mean:{MARGINAL_ENTROPY}"),
    ("3", TC, "grounded", "n"),
]

BOUND["docs/experiments/mechanism_rl.md"] = [
    ("0.656", MECH, "none", f"early:{MI_NATS}"),
    ("0.019", MECH, "none", f"early:{MI_NATS}.se"),
    ("0.466", MECH, "none", f"late:{MI_NATS}"),
    ("0.023", MECH, "none", f"late:{MI_NATS}.se"),
    ("-0.190", MECH, "none", f"change:{MI_NATS}"),
    CI,
    ("-0.267", MECH, "none", f"change:{MI_NATS}.lo"),
    ("-0.113", MECH, "none", f"change:{MI_NATS}.hi"),
    ("5", MECH, "none", f"change:{MI_NATS}.down"),
    ("5", MECH, "none", "n"),
    ("-29%", MECH, "none", f"pct_change:{MI_NATS}"),
    ("0.298", MECH, "none", f"early:{SPREAD}"),
    ("1.295", MECH, "none", f"late:{SPREAD}"),
    ("4.4x", MECH, "none", f"ratio_change:{SPREAD}"),
    ("0.667", MECH, "top_p", f"early:{MI_NATS}"),
    ("0.664", MECH, "top_p", f"late:{MI_NATS}"),
    ("-0.003", MECH, "top_p", f"change:{MI_NATS}"),
    ("-0.045", MECH, "top_p", f"change:{MI_NATS}.lo"),
    ("+0.038", MECH, "top_p", f"change:{MI_NATS}.hi"),
    ("0.290", MECH, "top_p", f"early:{SPREAD}"),
    ("0.582", MECH, "top_p", f"late:{SPREAD}"),
    ("2.0x", MECH, "top_p", f"ratio_change:{SPREAD}"),
    ("-1.117", MECH, "top_p", "change:mi_zscore"),
]

BOUND["docs/experiments/t3_cpu.md"] = [
    ("-2.0", T3, "gn_t3-gn_no_t3", "valdiff:tokens"),
    CI,
    ("-4.2", T3, "gn_t3-gn_no_t3", "valdiff:tokens.lo"),
    ("+0.2", T3, "gn_t3-gn_no_t3", "valdiff:tokens.hi"),
    ("-0.2", T3, "cd_t3-cd_no_t3", "valdiff:tokens"),
    ("-12.2", T3, "cd_t3-cd_no_t3", "valdiff:tokens.lo"),
    ("+11.9", T3, "cd_t3-cd_no_t3", "valdiff:tokens.hi"),
    ("26.32", T3, "gn_no_t3", "update"),
    ("3.64", T3, "gn_t3", "update"),
    ("-86%", T3, "gn_t3-gn_no_t3", "pct:update"),
    ("16.79", T3, "cd_no_t3", "update"),
    ("6.76", T3, "cd_t3", "update"),
    ("-60%", T3, "cd_t3-cd_no_t3", "pct:update"),
    ("24%", T3, "gn_t3-gn_no_t3", "abs pct:tokens_trained"),
    ("14%", T3, "cd_t3-cd_no_t3", "abs pct:tokens_trained"),
    # t3_ablation (generated)
    ("-41.7", T3A, "retry_t3-retry_no_t3", "diff:tokens"),
    ("-48.1", T3A, "retry_t3-retry_no_t3", "diff:tokens.lo"),
    ("-35.4", T3A, "retry_t3-retry_no_t3", "diff:tokens.hi"),
    ("0.031", T3A, "retry_t3-retry_no_t3", "diff:tokens.p"),
    ("-38.6", T3A, "end_no_t3-retry_no_t3", "diff:tokens"),
    ("-44.8", T3A, "end_no_t3-retry_no_t3", "diff:tokens.lo"),
    ("-32.4", T3A, "end_no_t3-retry_no_t3", "diff:tokens.hi"),
    ("0.031", T3A, "end_no_t3-retry_no_t3", "diff:tokens.p"),
    ("-6.0", T3A, "end_t3-end_no_t3", "diff:tokens"),
    ("-6.6", T3A, "end_t3-end_no_t3", "diff:tokens.lo"),
    ("-5.3", T3A, "end_t3-end_no_t3", "diff:tokens.hi"),
    ("0.031", T3A, "end_t3-end_no_t3", "diff:tokens.p"),
    ("-0.25", T3A, "end_t3-end_no_t3", "diff:turns"),
    ("-0.29", T3A, "end_t3-end_no_t3", "diff:turns.lo"),
    ("-0.22", T3A, "end_t3-end_no_t3", "diff:turns.hi"),
    ("-0.005", T3A, "retry_t3-retry_no_t3", "diff:final_sampled"),
    ("-0.034", T3A, "retry_t3-retry_no_t3", "diff:final_sampled.lo"),
    ("+0.024", T3A, "retry_t3-retry_no_t3", "diff:final_sampled.hi"),
    ("-0.000", T3A, "end_t3-end_no_t3", "diff:final_sampled"),
    ("-0.081", T3A, "end_t3-end_no_t3", "diff:final_sampled.lo"),
    ("+0.080", T3A, "end_t3-end_no_t3", "diff:final_sampled.hi"),
    ("-0.023", T3A, "end_no_t3-retry_no_t3", "diff:final_sampled"),
    ("-0.070", T3A, "end_no_t3-retry_no_t3", "diff:final_sampled.lo"),
    ("+0.024", T3A, "end_no_t3-retry_no_t3", "diff:final_sampled.hi"),
    ("-1.3", T3A, "retry_t3-retry_no_t3", "diff:val_tokens"),
    ("-3.0", T3A, "retry_t3-retry_no_t3", "diff:val_tokens.lo"),
    ("+0.4", T3A, "retry_t3-retry_no_t3", "diff:val_tokens.hi"),
    ("-0.9", T3A, "end_t3-end_no_t3", "diff:val_tokens"),
    ("-3.1", T3A, "end_t3-end_no_t3", "diff:val_tokens.lo"),
    ("+1.3", T3A, "end_t3-end_no_t3", "diff:val_tokens.hi"),
]


# --------------------------------------------------------------------------- the tests
def _bound_pages() -> list[Path]:
    return [p for p in _pages() if bound_lines(p.read_text(encoding="utf-8"))]


def binding_problems(page: str, text: str, table: list[tuple[str, str, str, str]]) -> list[str]:
    """What is wrong with a page's bound numbers: ``[]`` when they are exactly ``table``'s, in order,
    and each rounds from its recomputed value."""
    found = bound_tokens(text)
    problems = []
    for k, ((line, written), row) in enumerate(zip(found, table)):
        if written != row[0].replace("−", "-"):
            problems.append(
                f"{page}:{line}: number {k + 1} of the bound regions is {written}, the table's row {k + 1} is "
                f"{row[0]} ({', '.join(row[1:])}): a number was added, removed or changed without its row"
            )
            return problems
        actual = value(*row[1:])
        if not matches(written, actual):
            problems.append(f"{page}:{line}: {written} is not {'/'.join(row[1:])} = {actual!r}")
    if len(found) > len(table):
        line, written = found[len(table)]
        problems.append(f"{page}:{line}: {written} (and {len(found) - len(table) - 1} more) has no row in BOUND")
    elif len(found) < len(table):
        problems.append(f"{page}: the table's rows from {table[len(found)]} on are not on the page")
    return problems


@pytest.mark.parametrize("page", _bound_pages(), ids=_name)
def test_every_bound_number_is_its_result_sets_value(page):
    assert _name(page) in BOUND, f"{_name(page)} has bound regions and no BOUND table"
    assert binding_problems(_name(page), page.read_text(encoding="utf-8"), BOUND[_name(page)]) == []


def test_every_table_has_its_page():
    assert set(BOUND) <= {_name(p) for p in _bound_pages()}


def test_the_readme_results_section_is_bound():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = lines.index("## Results")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    inside = bound_lines(text)
    unbound = [(i + 1, tokens(lines[i])) for i in range(start, end) if tokens(lines[i]) and i + 1 not in inside]
    assert unbound == []


def _paragraphs(text: str):
    """``(first line number, lines)`` of each paragraph outside code fences."""
    block, first, fenced = [], 0, False
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.strip() or line.startswith("```"):
            if block:
                yield first, block
            block = []
            continue
        if not block:
            first = i
        block.append(line)
    if block:
        yield first, block


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_a_paragraph_citing_a_result_set_states_numbers_only_in_bound_regions(page):
    text = page.read_text(encoding="utf-8")
    inside = bound_lines(text)
    problems = []
    for first, block in _paragraphs(text):
        if not re.search(r"\]\([^)]*results/", "\n".join(block)):
            continue
        for i, line in enumerate(block, first):
            if tokens(line) and i not in inside:
                problems.append(f"{_name(page)}:{i}: {tokens(line)} cite a result set outside a bound region")
    assert problems == []


def test_the_slip_sweeps_widest_interval_is_the_one_quoted():
    widths = {
        pair: value("slip_sweep", pair, "diff:final.hi") - value("slip_sweep", pair, "diff:final.lo")
        for pair in SLIP_PAIRS.split("|")
    }
    assert max(widths, key=widths.get) == "top_p@20-none@20"
    # and every per-slip interval spans zero, as the README says
    assert all(value("slip_sweep", p, "diff:final.lo") < 0 < value("slip_sweep", p, "diff:final.hi") for p in widths)


# --------------------------------------------------------------------------- provenance
def _provenance(folder: Path) -> list[tuple[str, str | None, bool | None]]:
    """``(run dir, commit, dirty)`` of every ``summary.json`` in a set (``None`` where none is recorded)."""
    out = []
    for path in sorted(folder.rglob("summary.json")):
        git = (json.loads(path.read_text(encoding="utf-8")).get("provenance") or {}).get("git") or {}
        out.append((path.parent.relative_to(folder).as_posix(), git.get("commit"), git.get("dirty")))
    return out


def provenance_problem(folder: Path) -> str:
    """Why a set is not evidence of one clean code version (``""`` when it is)."""
    records = _provenance(folder)
    if not records:
        return ""
    missing = [d for d, c, _ in records if c is None]
    dirty = [d for d, c, x in records if c is not None and x is not False]
    commits = sorted({c[:12] for _, c, _ in records if c})
    why = []
    if missing:
        why.append(f"no commit recorded in {', '.join(missing)}")
    if dirty:
        why.append(f"a dirty (or unrecorded) tree in {', '.join(dirty)}")
    if len(commits) > 1:
        why.append(f"{len(commits)} commits ({', '.join(commits)})")
    return "; ".join(why)


_SETS = sorted(d for d in RESULTS.iterdir() if d.is_dir() and any(d.rglob("summary.json")))


@pytest.mark.parametrize("folder", _SETS, ids=lambda p: p.name)
def test_a_result_set_is_one_clean_commit_unless_marked(folder):
    problem = provenance_problem(folder)
    if folder.name in MIXED_PROVENANCE_OK:
        assert problem, f"{folder.name} is marked in MIXED_PROVENANCE_OK but is one clean commit: unmark it"
        readme = (folder / "README.md").read_text(encoding="utf-8")
        for commit in sorted({c[:7] for _, c, _ in _provenance(folder) if c}):
            assert commit in readme, f"{folder.name}/README.md does not name commit {commit}"
    else:
        assert problem == "", f"{folder.name}: {problem}; rerun it at one clean commit or mark it with the reason"


def test_provenance_problems_are_found(tmp_path):
    def run(name, git):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "summary.json").write_text(json.dumps({"config": {}, "provenance": {"git": git}}))

    run("runs/a", {"commit": "a" * 40, "dirty": False})
    assert provenance_problem(tmp_path) == ""
    run("runs/b", {"commit": "b" * 40, "dirty": True})
    run("c", {})
    assert provenance_problem(tmp_path) == (
        f"no commit recorded in c; a dirty (or unrecorded) tree in runs/b; 2 commits ({'a' * 12}, {'b' * 12})"
    )


# --------------------------------------------------------------------------- the checker itself
def test_tokens_and_rounding():
    assert tokens("RAGEN-2 on Sokoban 6x6: 0.759 ± 0.006 → +0.069 [−0.019, +0.033], 80%, 0.78x") == [
        "0.759",
        "0.006",
        "+0.069",
        "-0.019",
        "+0.033",
        "80%",
        "0.78x",
    ]
    assert tokens("`algo.lr=1e-4`, GRPO's 2e-4, T3, Qwen2.5, torch 2.13.0, §3.3, arXiv 2604.06268, 512–558 s") == [
        "512",
        "558",
    ]
    assert tokens("[results/a_2](results/a_2/README.md) <!-- 7 -->") == []
    assert matches("0.759", 0.75935) and matches("+0.069", 0.0694) and matches("4", 4)
    assert not matches("-0.013", 0.0127) and not matches("0.760", 0.759) and not matches("5", 4)
    assert matches("-33%", -32.7) and matches("0.78x", 0.7835) and matches("+0.000", -0.0001)


def test_a_number_without_its_row_or_with_a_wrong_value_fails():
    table = [("0.759", "default_run", "all", "start"), ("4", "default_run", "all", "n")]
    ok = "<!-- numbers: bound -->\nsuccess 0.759 over 4 seeds\n<!-- /numbers -->\n"
    assert binding_problems("p.md", ok, table) == []
    added = ok.replace("4 seeds", "4 seeds and 0.828 at the end")
    assert binding_problems("p.md", added, table) == ["p.md:2: 0.828 (and 0 more) has no row in BOUND"]
    swapped = ok.replace("0.759 over 4", "4 over 0.759")
    assert "a number was added, removed or changed without its row" in binding_problems("p.md", swapped, table)[0]
    wrong = [("0.759", "default_run", "all", "final"), ("4", "default_run", "all", "n")]
    assert binding_problems("p.md", ok, wrong)[0].startswith("p.md:2: 0.759 is not default_run/all/final = 0.828")
    # a number outside every bound region is not this test's (test_docs_numbers.py checks the other regions)
    assert binding_problems("p.md", ok + "0.5\n", table) == []


def test_report_check_says_it_does_not_compare_the_plots(capsys):
    from ragen_torchrl.reporting import cli

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "plots are not compared" in help_text
    assert "plots are not compared" in " ".join(cli.__doc__.split())
