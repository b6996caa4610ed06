"""``ragen-experiment NAME``: one command per result: the runs of an experiment, then its report.

Every experiment of the repository is registered here (:data:`EXPERIMENTS`) as arms x seeds of
``ragen-train`` overrides. The command prints the plan and its estimated cost, then runs the arms
**interleaved by seed** (seed 0: every arm, then seed 1: every arm, ...), one run at a time or
``--jobs N`` at a time, each in ``<out>/runs/<arm>_seed<k>/``, and finally writes the report
(``ragen-report``) into ``<out>``::

    ragen-experiment --list
    ragen-experiment snr_filter_frozenlake --dry-run            # the plan and the cost, nothing run
    ragen-experiment snr_filter_frozenlake --out docs/results/snr_filter_frozenlake
    ragen-experiment t3_cpu --seeds 0 1 algo.lr=1e-4             # any ragen-train override, every run
    ragen-experiment t3_cpu --config-dir my_presets env=mine     # presets of your own (my_presets/env/mine.yaml)
    ragen-experiment mechanism_rl --jobs 2                       # two runs at a time (a 2-core machine)

A run whose dir already holds ``summary.json`` is not run again, and one with a checkpoint
continues from it (``trainer.resume``), so an interrupted experiment picks up where it stopped.

**Cost.** Before starting, the command prints the estimated CPU-hours: per run, its iterations
times the wall seconds per iteration of that arm, plus its validations (levels played times seconds
per level), plus each distinct warm start once (cached after the first run that needs it); CPU
hours are wall hours times the torch threads of a run (``model.threads``, 1 in every experiment).
The seconds are those of earlier runs (:data:`COST_NOTE`), measured at one torch thread
on a 2-core development machine that other jobs often shared: upper bounds for an idle machine,
rough for another one. Each finished run's ``summary.json`` then records its measured seconds
per phase (``phases``), so the table can be refreshed from real runs.

Example:
    >>> exp = EXPERIMENTS["snr_filter_frozenlake"]
    >>> [arm.name for arm in exp.arms], exp.seeds
    (['none', 'top_p', 'top_p_equal_steps'], (0, 1, 2, 3, 4))
    >>> [name for name, _ in plan(exp, seeds=[0, 1])][:4]
    ['none_seed0', 'top_p_seed0', 'top_p_equal_steps_seed0', 'none_seed1']
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "EXPERIMENTS",
    "Arm",
    "Experiment",
    "estimate_seconds",
    "finished_runs",
    "main",
    "merge_overrides",
    "plan",
    "run_experiment",
]

COST_NOTE = (
    "seconds per iteration measured in the committed runs of snr_filter_frozenlake, snr_filter_sokoban, "
    "slip_sweep, template_collapse, mi_vs_entropy and t3_cpu (each run's wall time less its validations, two "
    "runs at a time on a 2-core machine: FrozenLake SNR 6.7 s none / 4.4 s top-p; Sokoban 21.8 / 13.2 s; "
    "T3 GuessNumbers 32.8 s without / 6.6 s with T3, CircuitDecoding 24.3 / 11.9 s), the default run's in an "
    "earlier run (9.2 s/iteration); validation ~0.05 s per level; one torch thread per run"
)


@dataclass(frozen=True)
class Arm:
    """One arm: its ``ragen-train`` overrides (on top of the experiment's) and what one run of it costs.

    Args:
        name: the arm's name (run dirs are ``<name>_seed<k>``).
        overrides: ``ragen-train`` overrides of this arm.
        iterations: the iterations a run is expected to take (for an arm that stops at an
            optimizer-step cap, the expected count, not the cap).
        seconds_per_iteration: wall seconds per iteration (see :data:`COST_NOTE`).
        validation_levels: levels played by all of a run's validations together.
        seconds_per_level: wall seconds per validation level.
        warm_start: the name of its warm start (runs with the same name share one, built once).
    """

    name: str
    overrides: tuple[str, ...]
    iterations: int
    seconds_per_iteration: float
    validation_levels: int
    seconds_per_level: float = 0.05
    warm_start: str = "frozenlake"


@dataclass(frozen=True)
class Experiment:
    """A registered experiment: the claim it tests, its arms, its default seeds, how its report groups runs."""

    name: str
    claim: str
    overrides: tuple[str, ...]
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    #: ``ragen-report --by`` keys (empty: the keys whose values differ)
    report_by: tuple[str, ...] = ()
    #: ``ragen-report --paired`` metrics (empty: its default, final and peak validation success)
    report_paired: tuple[str, ...] = ()
    #: ``ragen-report --within`` keys: arms are compared only where these values agree (each task's own arms)
    report_within: tuple[str, ...] = ()
    #: wall seconds of each named warm start
    warm_starts: dict[str, float] = field(default_factory=lambda: {"frozenlake": 485.0})
    threads: int = 1


def _vals(start: int, end: int, every: int, periodic: int, total: int) -> int:
    """Validation levels of a run: ``start`` and ``end`` levels plus one periodic validation every ``every``."""
    return start + end + periodic * max(0, (total - 1) // every) if every else start + end


# one seed's unfiltered FrozenLake/Sokoban arm takes 4 optimizer steps per iteration (16 groups x 4
# samples in mini-batches of 16): the equal-steps arm stops at the same count, iterations x 4
_FL_STEPS = 60 * 4
_SOKO_STEPS = 12 * 4
_FL_VALS = _vals(256, 256, 10, 128, 60)

EXPERIMENTS: dict[str, Experiment] = {}


def _register(exp: Experiment) -> Experiment:
    EXPERIMENTS[exp.name] = exp
    return exp


_register(
    Experiment(
        name="default_run",
        claim="`ragen-train` with its defaults (FrozenLake, GRPO, tiny model, 60 iterations of 16 x 4) learns: "
        "validation success at the end and at the peak above the warm start's.",
        overrides=("model.threads=1",),
        arms=(Arm("default", (), 60, 9.2, _vals(512, 512, 10, 128, 60)),),
        seeds=(0, 1, 2),
    )
)

_register(
    Experiment(
        name="snr_filter_frozenlake",
        claim="RAGEN-2 §3.3: SNR-aware filtering (top-p 0.9 on reward variance) raises validation success over "
        "no filter and cuts update time (paper: -26% to -41%), FrozenLake with a 2% slip. The equal-steps "
        "arm takes as many optimizer steps as the unfiltered arm (trainer.max_optimizer_steps = 60 x 4) by "
        "running more iterations, so it trains on about as many trajectories as the unfiltered arm: "
        "it separates 'less data' from 'better data'.",
        overrides=("+experiment=snr_filter", "model.threads=1"),
        arms=(
            Arm("none", ("filter=none",), 60, 6.7, _FL_VALS),
            Arm("top_p", ("filter=snr_top_p",), 60, 4.4, _FL_VALS),
            # the filter kept about 0.28 of the trajectories: the committed runs took 148-175 iterations
            # (mean 162) to reach the unfiltered run's optimizer steps
            Arm(
                "top_p_equal_steps",
                (
                    "filter=snr_top_p",
                    f"trainer.total_iterations={_FL_STEPS}",
                    f"trainer.max_optimizer_steps={_FL_STEPS}",
                ),
                162,
                3.7,
                _vals(256, 256, 10, 128, 162),
            ),
        ),
        seeds=(0, 1, 2, 3, 4),
        report_by=("filter.name", "trainer.max_optimizer_steps"),
    )
)

_register(
    Experiment(
        name="snr_filter_sokoban",
        claim="RAGEN-2 §3.3 on a second task: Sokoban 6x6 with one box, 12 iterations, no filter vs top-p 0.9 "
        "vs top-p 0.9 at the unfiltered arm's optimizer-step count (12 x 4).",
        overrides=("+experiment=snr_filter_sokoban",),
        arms=(
            Arm("none", ("filter=none",), 12, 21.8, 2 * 128 + 32, 0.5, "sokoban"),
            Arm("top_p", ("filter=snr_top_p",), 12, 13.2, 2 * 128 + 32, 0.5, "sokoban"),
            # the filter kept about a sixth of the groups (~11 rows: 1 mini-batch per iteration)
            Arm(
                "top_p_equal_steps",
                (
                    "filter=snr_top_p",
                    f"trainer.total_iterations={_SOKO_STEPS}",
                    f"trainer.max_optimizer_steps={_SOKO_STEPS}",
                ),
                _SOKO_STEPS,
                10.0,
                2 * 128 + 4 * 32,
                0.5,
                "sokoban",
            ),
        ),
        seeds=(0, 1, 2),
        report_by=("filter.name", "trainer.max_optimizer_steps"),
        warm_starts={"sokoban": 1260.0},
    )
)

_register(
    Experiment(
        name="template_collapse",
        claim="RAGEN-2 §2: reasoning can stay fluent (entropy unchanged) while it stops depending on the input; "
        "MI proxies see it, entropy does not. grounded vs shuffled warm-start reasoning (same texts, permuted), "
        "and an attempt to provoke collapse with RL (50% slip, 50x entropy bonus).",
        overrides=("+experiment=template_collapse", "model.threads=1"),
        arms=(
            Arm("grounded", ("sft.reasoning=grounded",), 30, 5.9, _vals(256, 256, 10, 128, 30)),
            Arm("shuffled", ("sft.reasoning=shuffled",), 30, 7.4, _vals(256, 256, 10, 128, 30), warm_start="shuf"),
            Arm(
                "provoke",
                ("env.success_rate=0.5", "algo.entropy_coeff=0.05"),
                30,
                8.5,
                _vals(256, 256, 10, 128, 30),
                warm_start="slip50",
            ),
        ),
        seeds=(0, 1, 2),
        # every key the provoke arm changes, so no group label hides one (env.success_rate splits as entropy does)
        report_by=("sft.reasoning", "env.success_rate", "algo.entropy_coeff"),
        warm_starts={"frozenlake": 485.0, "shuf": 485.0, "slip50": 485.0},
    )
)

_register(
    Experiment(
        name="mi_vs_entropy",
        claim="RAGEN-2 §2.3: across runs that vary entropy regularisation, KL and top-p filtering, the early "
        "trajectory MI z-score predicts final success (paper: Spearman +0.39) better than entropy (-0.11 to "
        "-0.14). One task (FrozenLake, 2% slip), so the pool does not mix tasks; 30 iterations, MI every 2.",
        overrides=(
            "+experiment=snr_filter",
            "trainer.total_iterations=30",
            "diagnostics.mi.every=2",
            "diagnostics.grad_snr.every=0",
            "model.threads=1",
        ),
        arms=tuple(
            Arm(f"{reg}_{filt}", (f"filter={f}", *o), 30, s, _vals(256, 256, 10, 128, 30))
            for reg, o, costs in (
                ("base", (), (6.2, 4.2)),
                ("entropy", ("algo.entropy_coeff=0.01",), (6.5, 4.1)),
                ("kl", ("algo.kl_coeff=0.01",), (7.1, 4.2)),
            )
            for (filt, f), s in zip((("none", "none"), ("top_p", "snr_top_p")), costs)
        ),
        seeds=(0, 1, 2),
        report_by=("filter.name", "algo.entropy_coeff", "algo.kl_coeff"),
    )
)

_register(
    Experiment(
        name="slip_sweep",
        claim="RAGEN-2 §4: the filter's gain over no filter shrinks as the environment gets random and closes "
        "at 80-100% stochasticity. FrozenLake at slip 0, 20, 50, 80% (env.success_rate = 1 - slip).",
        overrides=("+experiment=slip_sweep", "model.threads=1"),
        arms=tuple(
            Arm(
                f"{filt}_sr{rate}",
                (f"filter={f}", f"env.success_rate={rate}"),
                30,
                s,
                _vals(256, 256, 10, 128, 30),
                warm_start=f"sr{rate}",
            )
            for rate in ("1.0", "0.8", "0.5", "0.2")
            for filt, f, s in (("none", "none", 6.7), ("top_p", "snr_top_p", 4.1))
        ),
        seeds=(0, 1, 2),
        report_by=("filter.name", "env.success_rate"),
        # the filter against none at each slip rate, not one rate against another
        report_within=("env.success_rate",),
        warm_starts={f"sr{r}": 200.0 for r in ("1.0", "0.8", "0.5", "0.2")},
    )
)

_register(
    Experiment(
        name="t3_cpu",
        claim="T3 (arXiv 2510.12264): truncating belief-trapped training trajectories gives higher success with "
        "fewer rollout tokens. GuessNumbers and CircuitDecoding (small presets), without and with T3.",
        overrides=("+experiment=t3_cpu",),
        arms=tuple(
            # validations at 0, 10 and 20 on 128 levels
            Arm(f"{short}_{arm}", (f"env={env}", f"t3.enabled={flag}"), 20, s, 3 * 128, 0.05, env)
            for env, short, costs in (
                ("guess_numbers_small", "gn", (32.8, 6.6)),
                ("circuit_decoding_small", "cd", (24.3, 11.9)),
            )
            for (arm, flag), s in zip((("no_t3", "false"), ("t3", "true")), costs)
        ),
        seeds=(0, 1, 2, 3, 4),
        report_by=("env.name", "t3.enabled"),
        # T3's claims are about realised episodes too: turns and generated tokens per episode, paired by seed
        report_paired=("final", "peak", "turns", "tokens"),
        report_within=("env.name",),
        warm_starts={"guess_numbers_small": 370.0, "circuit_decoding_small": 505.0},
    )
)

_register(
    Experiment(
        name="mechanism_rl",
        claim=(
            "RAGEN-2 §3's SNR account under RL: where reward variance is low the task gradient is weak and the "
            "input-agnostic regularisers (KL, entropy) dominate, so without a filter MI should decline while "
            "entropy stays flat; top-p 0.9 should hold MI and success. Task: FrozenLake with a 2% slip, where "
            "the warm-started tiny policy solves most maps, so about two thirds of the groups have zero reward "
            "variance (kept ratio ~0.36 in snr_filter_frozenlake) and the heterogeneity Std(RV)/Mean(RV) ~1.4 "
            "leaves the filter high-variance groups to keep; 60 iterations there were too short to show a decline. "
            "200 iterations; KL (0.01) and entropy (0.01) "
            "terms on, 10x the entropy default so they are not negligible next to the task term (the 50x bonus of "
            "template_collapse broke the policy); the early stops off in both arms, so neither stops in the "
            "middle of the decline it should show; MI every 5 iterations, the gradient-SNR probe every 20, "
            "validation every 10 on 128 levels; checkpoints every 50 (a long run resumes)."
        ),
        overrides=(
            "+experiment=snr_filter",
            "trainer.total_iterations=200",
            "algo.kl_coeff=0.01",
            "algo.entropy_coeff=0.01",
            "trainer.early_stop.collapse_stop.enabled=false",
            "trainer.early_stop.val_stop.enabled=false",
            "trainer.early_stop.max_consecutive_empty=0",
            "diagnostics.mi.every=5",
            "diagnostics.grad_snr.every=20",
            "trainer.save_every=50",
            "model.threads=1",
        ),
        arms=(
            # the KL term adds a reference forward over the batch: ~15% on top of the snr_filter iterations
            Arm("none", ("filter=none",), 200, 11.0, _vals(256, 256, 10, 128, 200)),
            Arm("top_p", ("filter=snr_top_p",), 200, 8.8, _vals(256, 256, 10, 128, 200)),
        ),
        seeds=(0, 1, 2, 3, 4),
        report_by=("filter.name",),
        # the claim is about the arms' diagnostics over training, not only their success
        report_paired=("final", "peak", "mi_late", "mi_change", "retrieval_change", "entropy_change", "length_change"),
    )
)


# --------------------------------------------------------------------------------------- planning
def _key(override: str) -> str:
    """The config key an override sets (``+a.b=1`` -> ``a.b``; ``~a`` -> ``a``; ``filter=none`` -> ``filter``)."""
    return override.split("=", 1)[0].lstrip("+~")


def merge_overrides(*groups: Sequence[str]) -> list[str]:
    """Overrides of several sources in order; a later one for the same key replaces an earlier one.

    Hydra refuses two values for one key on a command line, so an arm's or the user's override
    takes the place of the experiment's instead of being appended.

    Example:
        >>> merge_overrides(["+experiment=x", "filter=none", "trainer.total_iterations=60"],
        ...                 ["filter=snr_top_p"], ["trainer.total_iterations=2"])
        ['+experiment=x', 'filter=snr_top_p', 'trainer.total_iterations=2']
    """
    out: dict[str, str] = {}
    for group in groups:
        for o in group:
            out.pop(_key(o), None)  # a replaced override moves to where its replacement was given
            out[_key(o)] = o
    return list(out.values())


def plan(exp: Experiment, seeds: Sequence[int] | None = None, extra: Sequence[str] = ()) -> list[tuple[str, list[str]]]:
    """The runs in the order they run: ``[(run name, overrides), ...]``, arms interleaved by seed.

    Example:
        >>> p = plan(EXPERIMENTS["t3_cpu"], seeds=[3])
        >>> p[1]
        ('gn_t3_seed3', ['+experiment=t3_cpu', 'env=guess_numbers_small', 't3.enabled=true', 'seed=3'])
    """
    seeds = exp.seeds if seeds is None else tuple(seeds)
    return [
        (f"{arm.name}_seed{seed}", merge_overrides(exp.overrides, arm.overrides, [f"seed={seed}"], extra))
        for seed in seeds
        for arm in exp.arms
    ]


def _run_seconds(arm: Arm) -> float:
    return arm.iterations * arm.seconds_per_iteration + arm.validation_levels * arm.seconds_per_level


def estimate_seconds(
    exp: Experiment, seeds: Sequence[int] | None = None, done: Collection[str] = ()
) -> dict[str, float]:
    """Estimated wall seconds of the experiment: ``{"runs", "warm_starts", "total", "cpu_hours"}``.

    Each run: iterations x seconds per iteration + validation levels x seconds per level; each
    distinct warm start once; CPU-hours = total / 3600 x threads per run (see the module docstring).
    Runs named in ``done`` (finished earlier) cost nothing, nor do the warm starts they built.

    Example:
        >>> e = Experiment("x", "", (), (Arm("a", (), 10, 2.0, 100, 0.1),), (0, 1), warm_starts={"frozenlake": 50.0})
        >>> estimate_seconds(e)
        {'runs': 60.0, 'warm_starts': 50.0, 'total': 110.0, 'cpu_hours': 0.030555555555555555}
        >>> estimate_seconds(e, done={"a_seed0"})["total"]
        30.0
    """
    runs = [(f"{arm.name}_seed{seed}", arm) for seed in (exp.seeds if seeds is None else seeds) for arm in exp.arms]
    todo = [arm for name, arm in runs if name not in done]
    built = {arm.warm_start for name, arm in runs if name in done}
    run_s = float(sum(_run_seconds(arm) for arm in todo))
    warm = float(sum(exp.warm_starts.get(w, 0.0) for w in {arm.warm_start for arm in todo} - built))
    total = run_s + warm
    return {"runs": run_s, "warm_starts": warm, "total": total, "cpu_hours": total / 3600 * exp.threads}


def finished_runs(out: str | Path) -> set[str]:
    """Names of the runs under ``<out>/runs/`` that finished (their dir holds ``summary.json``)."""
    root = Path(out) / "runs"
    return {p.parent.name for p in root.glob("*/summary.json")} if root.is_dir() else set()


def describe(exp: Experiment, seeds: Sequence[int] | None, out: Path, extra: Sequence[str] = (), jobs: int = 1) -> str:
    """The plan as text: the claim, every run's command, and the estimated cost (what ``--dry-run`` prints).

    Runs that finished earlier in ``out`` are marked and not costed. With ``jobs`` runs at a time the
    wall time is about the total divided by ``jobs`` (the CPU-hours stay the same).
    """
    runs = plan(exp, seeds, extra)
    done = finished_runs(out) & {name for name, _ in runs}
    cost = estimate_seconds(exp, seeds, done)
    at_a_time = "one at a time" if jobs == 1 else f"{jobs} at a time"
    lines = [f"experiment {exp.name}: {exp.claim}", f"{len(runs)} runs, {at_a_time}, into {out}/runs/:"]
    lines += [
        f"  {name}: ragen-train {shlex.join(o)}" + ("  [finished earlier: skipped]" if name in done else "")
        for name, o in runs
    ]
    lines += [
        " ".join(["report: ragen-report", f"{out}/runs/*", "--out", str(out), *_report_args(exp)]),
        f"estimated cost: {cost['cpu_hours']:.1f} CPU-hours ({cost['total'] / 3600:.1f} h wall at "
        f"{exp.threads} torch thread(s) per run: runs {cost['runs'] / 3600:.1f} h, warm starts "
        f"{cost['warm_starts'] / 3600:.1f} h)"
        + (f" for the {len(runs) - len(done)} runs still to run" if done else "")
        + (f"; about {cost['total'] / jobs / 3600:.1f} h wall with {jobs} runs at a time" if jobs > 1 else ""),
        f"  estimated from {COST_NOTE}; overrides given on the command line are not costed",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- running
def run_experiment(
    exp: Experiment,
    out: str | Path,
    seeds: Sequence[int] | None = None,
    extra: Sequence[str] = (),
    python: str = sys.executable,
    jobs: int = 1,
) -> int:
    """Run every planned run (skipping finished ones), then write the report; returns an exit status.

    Each run is ``python -m ragen_torchrl.train OVERRIDES hydra.run.dir=<out>/runs/<run>`` in a
    subprocess (its own process: nothing carries over between runs). ``jobs`` runs go at a time, in
    the plan's order (arms interleaved by seed); with more than one, each run's console output goes
    to ``<run dir>/console.log`` instead of the terminal. Runs that share a warm start build it once
    (:func:`~ragen_torchrl.models.build_cache.build_once`). A failed run stops the experiment with its
    exit status: no further run starts, the ones already running finish, no report is written.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    out = Path(out)
    run_dirs, todo = [], []
    for name, overrides in plan(exp, seeds, extra):
        run_dir = out / "runs" / name
        run_dirs.append(run_dir)
        if (run_dir / "summary.json").exists():
            print(f"[{name}] finished earlier: {run_dir}/summary.json", flush=True)
            continue
        resume = [f"trainer.resume={run_dir}"] if (run_dir / "checkpoints" / "last.pt").exists() else []
        todo.append(
            (name, run_dir, [python, "-m", "ragen_torchrl.train", *overrides, *resume, f"hydra.run.dir={run_dir}"])
        )
    status = _run_all(todo, jobs)
    if status != 0:
        return status
    from .reporting.cli import main as report_main

    return report_main([*map(str, run_dirs), "--out", str(out), *_report_args(exp)])


def _report_args(exp: Experiment) -> list[str]:
    """The experiment's ``ragen-report`` options: its ``--by`` keys, ``--paired`` metrics and ``--within`` keys."""
    return (
        [a for k in exp.report_by for a in ("--by", k)]
        + [a for m in exp.report_paired for a in ("--paired", m)]
        + [a for k in exp.report_within for a in ("--within", k)]
    )


def _run_all(todo: Sequence[tuple[str, Path, list[str]]], jobs: int) -> int:
    """Run ``(name, run dir, command)`` items, ``jobs`` at a time; the first failure's status, else 0."""
    pending = list(todo)
    running: dict[subprocess.Popen, tuple[str, object, float]] = {}
    status = 0
    try:
        while pending or running:
            while pending and len(running) < jobs and status == 0:
                name, run_dir, cmd = pending.pop(0)
                print(f"[{name}] {shlex.join(cmd[1:])}", flush=True)
                if jobs == 1:
                    log = None
                else:
                    run_dir.mkdir(parents=True, exist_ok=True)
                    log = open(run_dir / "console.log", "a")  # closed when the run ends
                    print(f"[{name}] output: {run_dir / 'console.log'}", flush=True)
                running[subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT if log else None)] = (
                    name,
                    log,
                    time.monotonic(),
                )
            if not running:
                break
            done = _wait_any(running)
            name, log, start = running.pop(done)
            if log is not None:
                log.close()
            code = done.returncode
            print(f"[{name}] exit status {code} after {time.monotonic() - start:.0f} s", flush=True)
            if code != 0 and status == 0:
                print(f"ragen-experiment: error: run {name} failed with exit status {code}", file=sys.stderr)
                status = code
    except KeyboardInterrupt:
        for proc in running:
            proc.terminate()
        raise
    return status


def _wait_any(running: Collection[subprocess.Popen]) -> subprocess.Popen:
    """The first of ``running`` to finish (polled: the runs take minutes, a second's delay is nothing)."""
    if len(running) == 1:
        proc = next(iter(running))
        proc.wait()
        return proc
    while True:
        for proc in running:
            if proc.poll() is not None:
                return proc
        time.sleep(1.0)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ragen-experiment",
        description="Run a registered experiment (arms x seeds of ragen-train, interleaved by seed), then its report.",
    )
    p.add_argument("name", nargs="?", help="experiment name (--list shows them)")
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="ragen-train overrides (Hydra's syntax) for every run"
    )
    p.add_argument(
        "--config-dir",
        metavar="DIR",
        help="a folder of presets added to the shipped ones (Hydra's --config-dir) for every run",
    )
    p.add_argument("--list", action="store_true", help="list the registered experiments and their cost")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the estimated cost, run nothing")
    p.add_argument("--seeds", type=int, nargs="+", metavar="SEED", help="seeds (default: the experiment's)")
    p.add_argument("--out", help="output dir (default: outputs/experiments/NAME)")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="runs at a time (default 1); each uses the experiment's torch threads (1), so up to one per core",
    )
    p.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="deprecated (goes in the next release): write the override bare, KEY=VALUE",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The ``ragen-experiment`` console script; returns the exit status (2: bad arguments).

    Example:
        >>> main(["no_such_experiment"])
        2
    """
    args = _parser().parse_intermixed_args(argv)
    if args.override:
        print(
            "ragen-experiment: warning: -o/--override is deprecated and goes in the next release; "
            f"write the overrides bare: ragen-experiment {args.name or 'NAME'} {' '.join(args.override)}",
            file=sys.stderr,
        )
    extra = [*args.overrides, *args.override]
    if args.config_dir is not None:
        if not Path(args.config_dir).is_dir():
            print(f"ragen-experiment: error: --config-dir {args.config_dir}: no such directory", file=sys.stderr)
            return 2
        # what ragen-train --config-dir DIR does, as an override every run takes
        extra.append(f"hydra.searchpath=[{Path(args.config_dir).resolve().as_uri()}]")
    if args.list:
        for exp in EXPERIMENTS.values():
            cost = estimate_seconds(exp)
            print(f"{exp.name:24s} {len(exp.arms)} arms x {len(exp.seeds)} seeds, ~{cost['cpu_hours']:.1f} CPU-hours")
        return 0
    if args.name not in EXPERIMENTS:
        known = ", ".join(EXPERIMENTS)
        print(f"ragen-experiment: error: unknown experiment {args.name!r} (known: {known})", file=sys.stderr)
        return 2
    if args.seeds is not None and (not args.seeds or len(set(args.seeds)) != len(args.seeds)):
        print(f"ragen-experiment: error: --seeds must be distinct integers, got {args.seeds}", file=sys.stderr)
        return 2
    bad = [o for o in extra if "=" not in o and not o.startswith("~")]
    if bad:
        print(f"ragen-experiment: error: overrides are KEY=VALUE, got {bad}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"ragen-experiment: error: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return 2
    exp = EXPERIMENTS[args.name]
    cores = os.cpu_count() or 1
    if args.jobs * exp.threads > cores:
        print(
            f"ragen-experiment: warning: {args.jobs} runs x {exp.threads} torch thread(s) on {cores} CPUs: "
            "the runs will share cores, and their timings say so",
            file=sys.stderr,
        )
    out = Path(args.out or Path("outputs") / "experiments" / exp.name)
    print(describe(exp, args.seeds, out, extra, args.jobs), flush=True)
    if args.dry_run:
        return 0
    return run_experiment(exp, out, args.seeds, extra, jobs=args.jobs)


def console_main() -> None:
    """Entry point of the ``ragen-experiment`` script (exits with :func:`main`'s status)."""
    sys.exit(main())


if __name__ == "__main__":
    console_main()
