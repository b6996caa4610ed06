"""``ragen-experiment NAME``: one command per result: the runs of an experiment, then its report.

An experiment is a config under ``configs/experiment/`` that lists its arms, seeds, report
grouping and cost per iteration under ``hydra.sweeper`` (the format:
:mod:`ragen_torchrl.experiment_plan`). This command reads that file, prints the plan and its
estimated cost, then runs the arms **interleaved by seed** (seed 0: every arm, then seed 1: every
arm, ...), one run at a time or ``--jobs N`` at a time, each in ``<out>/runs/<arm>_seed<k>/``, and
finally writes the report (``ragen-report``) into ``<out>``::

    ragen-experiment --list
    ragen-experiment snr_filter_frozenlake --dry-run            # the plan and the cost, nothing run
    ragen-experiment snr_filter_frozenlake --out docs/results/snr_filter_frozenlake
    ragen-experiment t3_cpu --seeds 0 1 algo.lr=1e-4             # any ragen-train override, every run
    ragen-experiment mine --config-dir my_presets                # my_presets/experiment/mine.yaml
    ragen-experiment mechanism_rl --jobs 2                       # two runs at a time (a 2-core machine)

``ragen-train -m +experiment=NAME`` runs the same runs into the same layout under
``hydra.sweep.dir`` (``outputs/experiments/NAME`` unless overridden), one after another, through
the ``ragen_arms`` Hydra sweeper that the file selects.

A run whose dir already holds ``summary.json`` is not run again, and one with a checkpoint
continues from it (``trainer.resume``), so an interrupted experiment picks up where it stopped.

**Cost.** Before starting, the command prints the estimated CPU-hours: per run, its iterations
times the wall seconds per iteration of that arm, plus its validations (levels played times seconds
per level), plus each distinct warm start once (cached after the first run that needs it); CPU
hours are wall hours times the torch threads of a run (``model.threads``, 1 in every experiment).
The seconds are those of earlier runs (:data:`~ragen_torchrl.experiment_plan.COST_NOTE`): upper
bounds for an idle machine, rough for another one. Each finished run's ``summary.json`` then
records its measured seconds per phase (``phases``), so the arms' numbers can be refreshed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from .cli_overrides import add_deprecated_override_option, warn_deprecated_overrides
from .experiment_plan import (
    COST_NOTE,
    SWEEPER_TARGET,
    Experiment,
    ExperimentSpecError,
    estimate_seconds,
    experiment_from_spec,
    plan,
    report_args,
    run_state,
)

__all__ = [
    "ExperimentNotFound",
    "experiment_names",
    "finished_runs",
    "load_experiment",
    "main",
    "run_experiment",
]


class ExperimentNotFound(LookupError):
    """No experiment config of that name, or a config under ``experiment/`` without arms (a base)."""


def _experiment_dirs(config_dir: str | os.PathLike | None) -> list[Path]:
    from .trainer.config_paths import CONFIG_DIR

    dirs = [Path(config_dir) / "experiment"] if config_dir is not None else []
    return [*dirs, Path(CONFIG_DIR) / "experiment"]


def _searchpath(config_dir: str | os.PathLike | None) -> list[str]:
    """The override that adds ``config_dir`` to every run's search path (what ``--config-dir`` does)."""
    return [] if config_dir is None else [f"hydra.searchpath=[{Path(config_dir).resolve().as_uri()}]"]


def _sweeper_spec(name: str, config_dir: str | os.PathLike | None):
    """``hydra.sweeper`` of ``+experiment=NAME`` as composed (defaults and interpolations applied)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from hydra_plugins.ragen_torchrl_arms.arm_sweeper import register

    from .trainer import config as _resolvers  # noqa: F401 - the config's own resolvers (${per_device:...})
    from .trainer.config_paths import CONFIG_DIR

    register()
    was = GlobalHydra.instance().is_initialized()
    saved = GlobalHydra.instance().hydra if was else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose(
                "config", overrides=[f"+experiment={name}", *_searchpath(config_dir)], return_hydra_config=True
            )
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:  # a caller inside a Hydra app keeps its own
            GlobalHydra.instance().initialize(saved)
    return OmegaConf.to_container(cfg.hydra.sweeper, resolve=False)


def experiment_names(config_dir: str | os.PathLike | None = None) -> list[str]:
    """The experiment config files (``configs/experiment/*.yaml``, and ``<config_dir>/experiment/``), sorted.

    A file there without arms (``snr_filter``: the pins others build on) is listed too;
    :func:`load_experiment` says it has none.
    """
    return sorted({p.stem for d in _experiment_dirs(config_dir) if d.is_dir() for p in d.glob("*.yaml")})


def load_experiment(name: str, config_dir: str | os.PathLike | None = None) -> Experiment:
    """The :class:`~ragen_torchrl.experiment_plan.Experiment` of ``configs/experiment/NAME.yaml``.

    Composed as ``ragen-train +experiment=NAME`` composes it (a ``config_dir`` of the user's presets
    first on the search path), so the ``ragen_arms`` sweeper of ``ragen-train -m +experiment=NAME``
    and this command read the same arms. Raises :class:`ExperimentNotFound` for an unknown name or a
    config without arms, :class:`~ragen_torchrl.experiment_plan.ExperimentSpecError` for a bad spec.

    Example:
        >>> exp = load_experiment("snr_filter_frozenlake")
        >>> [arm.name for arm in exp.arms], exp.seeds
        (['none', 'top_p', 'top_p_equal_steps'], (0, 1, 2, 3, 4))
        >>> [name for name, _ in plan(exp, seeds=[0, 1])][:4]
        ['none_seed0', 'top_p_seed0', 'top_p_equal_steps_seed0', 'none_seed1']
    """
    known = experiment_names(config_dir)
    if name not in known:
        raise ExperimentNotFound(f"unknown experiment {name!r} (known: {', '.join(known)})")
    spec = _sweeper_spec(name, config_dir)
    if spec.get("_target_") != SWEEPER_TARGET:
        raise ExperimentNotFound(
            f"experiment/{name}.yaml has no arms (its hydra.sweeper is not ragen_arms): it holds pins other "
            "experiments build on; sweep it with ragen-train -m +experiment=" + name + " KEY=A,B ..."
        )
    exp = experiment_from_spec(spec, f"experiment/{name}.yaml: hydra.sweeper")
    if exp.name != name:
        raise ExperimentSpecError(
            f"experiment/{name}.yaml: hydra.sweeper.name is {exp.name!r}; it must be the file's name, {name!r}"
        )
    return exp


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
        " ".join(["report: ragen-report", f"{out}/runs/*", "--out", str(out), *report_args(exp)]),
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
        state = run_state(run_dir)
        if state == "finished":
            print(f"[{name}] finished earlier: {run_dir}/summary.json", flush=True)
            continue
        resume = [f"trainer.resume={run_dir.resolve()}"] if state == "interrupted" else []
        todo.append(
            (name, run_dir, [python, "-m", "ragen_torchrl.train", *overrides, *resume, f"hydra.run.dir={run_dir}"])
        )
    status = _run_all(todo, jobs)
    if status != 0:
        return status
    from .reporting.cli import main as report_main

    return report_main([*map(str, run_dirs), "--out", str(out), *report_args(exp)])


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
    add_deprecated_override_option(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The ``ragen-experiment`` console script; returns the exit status (2: bad arguments).

    Example:
        >>> main(["no_such_experiment"])
        2
    """
    args = _parser().parse_intermixed_args(argv)
    warn_deprecated_overrides("ragen-experiment", args.name or "NAME", args.override)
    extra = [*args.overrides, *args.override]
    if args.config_dir is not None:
        if not Path(args.config_dir).is_dir():
            print(f"ragen-experiment: error: --config-dir {args.config_dir}: no such directory", file=sys.stderr)
            return 2
        # what ragen-train --config-dir DIR does, as an override every run takes
        extra.extend(_searchpath(args.config_dir))
    if args.list:
        for name in experiment_names(args.config_dir):
            try:
                exp = load_experiment(name, args.config_dir)
            except ExperimentNotFound:
                print(f"{name:24s} (no arms: pins other experiments build on)")
                continue
            cost = estimate_seconds(exp)
            print(f"{exp.name:24s} {len(exp.arms)} arms x {len(exp.seeds)} seeds, ~{cost['cpu_hours']:.1f} CPU-hours")
        return 0
    if not args.name:
        print("ragen-experiment: error: give an experiment's name (--list shows them)", file=sys.stderr)
        return 2
    try:
        exp = load_experiment(args.name, args.config_dir)
    except (ExperimentNotFound, ExperimentSpecError) as e:
        print(f"ragen-experiment: error: {e}", file=sys.stderr)
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
    if any(o.split("=", 1)[0].lstrip("+") == "seed" for o in extra):
        print("ragen-experiment: error: the seeds are given with --seeds, not a seed= override", file=sys.stderr)
        return 2
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
