"""What an experiment is: arms x seeds of ``ragen-train`` overrides, their order, their cost, their report.

An experiment is a config under ``configs/experiment/`` whose ``hydra.sweeper`` node is the
``ragen_arms`` sweeper (:mod:`hydra_plugins.ragen_torchrl_arms.arm_sweeper`)::

    # @package _global_
    defaults:
      - override /hydra/sweeper: ragen_arms
    trainer: {total_iterations: 30}          # the pins every arm shares
    hydra:
      sweeper:
        name: my_experiment
        claim: "top-p beats no filter"
        seeds: [0, 1, 2]
        arms:
          - {name: none, overrides: [filter=none], iterations: 30, seconds_per_iteration: 6.7}
          - {name: top_p, overrides: [filter=snr_top_p], iterations: 30, seconds_per_iteration: 4.4}
        report: {by: [filter.name]}

That one file drives both entry points, with the same runs in the same layout
(``<out>/runs/<arm>_seed<k>/``, then the report in ``<out>``):

* ``ragen-train -m +experiment=my_experiment`` (Hydra multirun through that sweeper), and
* ``ragen-experiment my_experiment`` (subprocess runs, ``--jobs N`` at a time, ``--dry-run``).

This module holds the pure part both use: the spec read into :class:`Experiment`
(:func:`experiment_from_spec`, with a clear error for a bad spec), the run plan (:func:`plan`:
arms interleaved by seed, a later override replacing an earlier one for the same key) and the
cost estimate (:func:`estimate_seconds`). It imports nothing beyond the standard library.

Example:
    >>> exp = experiment_from_spec({"name": "x", "claim": "c", "seeds": [0, 1], "arms": [
    ...     {"name": "a", "overrides": ["filter=none"], "iterations": 10, "seconds_per_iteration": 2.0},
    ...     {"name": "b", "overrides": ["filter=snr_top_p"], "iterations": 10, "seconds_per_iteration": 1.0}]})
    >>> [name for name, _ in plan(exp)]
    ['a_seed0', 'b_seed0', 'a_seed1', 'b_seed1']
    >>> plan(exp, seeds=[3], extra=["trainer.total_iterations=2"])[1]
    ('b_seed3', ['+experiment=x', 'filter=snr_top_p', 'seed=3', 'trainer.total_iterations=2'])
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "COST_NOTE",
    "Arm",
    "Experiment",
    "ExperimentSpecError",
    "estimate_seconds",
    "experiment_from_spec",
    "merge_overrides",
    "plan",
    "report_args",
    "run_state",
]

#: the sweeper's ``_target_``: a composed config whose ``hydra.sweeper`` has it is an experiment
SWEEPER_TARGET = "hydra_plugins.ragen_torchrl_arms.arm_sweeper.ArmSweeper"

COST_NOTE = (
    "the arms' seconds per iteration in configs/experiment/<name>.yaml, measured in the committed runs of each "
    "result set (each run's wall time less its validations, two runs at a time on a 2-core machine, one torch "
    "thread per run); validation ~0.05 s per FrozenLake level"
)


class ExperimentSpecError(ValueError):
    """An experiment's ``hydra.sweeper`` spec is malformed (the message names the field)."""


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
    validation_levels: int = 0
    seconds_per_level: float = 0.05
    warm_start: str = "frozenlake"


@dataclass(frozen=True)
class Experiment:
    """An experiment: the claim it tests, its arms, its default seeds, how its report groups runs.

    ``overrides`` are what every run starts from (``+experiment=<name>``: the file's own pins).
    """

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
    warm_starts: dict[str, float] = field(default_factory=dict)
    threads: int = 1
    #: each seed builds its own warm starts (``sft.seed_from_run``): costed once per warm start and seed
    warm_start_per_seed: bool = False


def _strings(value, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ExperimentSpecError(f"{where} must be a list of strings, got {value!r}")
    bad = [v for v in value if not isinstance(v, str) or not v]
    if bad:
        raise ExperimentSpecError(f"{where} must be a list of non-empty strings, got {bad!r}")
    return tuple(value)


def _number(value, where: str, kind=float, minimum: float = 0.0):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise ExperimentSpecError(f"{where} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if value < minimum:
        raise ExperimentSpecError(f"{where} must be >= {minimum:g}, got {value!r}")
    return kind(value)


_ARM_KEYS = {
    "name",
    "overrides",
    "iterations",
    "seconds_per_iteration",
    "validation_levels",
    "seconds_per_level",
    "warm_start",
}
_SPEC_KEYS = {"name", "claim", "seeds", "arms", "report", "warm_starts", "threads", "warm_start_per_seed"}


def _arm(spec, where: str) -> Arm:
    if not isinstance(spec, Mapping):
        raise ExperimentSpecError(f"{where} must be a mapping (name, overrides, iterations, ...), got {spec!r}")
    unknown = sorted(set(spec) - _ARM_KEYS)
    if unknown:
        raise ExperimentSpecError(f"{where} has unknown keys {unknown} (known: {sorted(_ARM_KEYS)})")
    name = spec.get("name")
    if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise ExperimentSpecError(f"{where}.name must be a name of letters, digits, '_', '-' or '.', got {name!r}")
    overrides = _strings(spec.get("overrides"), f"{where}.overrides")
    bad = [o for o in overrides if "=" not in o and not o.startswith("~")]
    if bad:
        raise ExperimentSpecError(f"{where}.overrides are KEY=VALUE, got {bad}")
    if any(_key(o) == "seed" for o in overrides):
        raise ExperimentSpecError(f"{where}.overrides set seed: the seeds are the experiment's (its seeds list)")
    return Arm(
        name=name,
        overrides=overrides,
        iterations=_number(spec.get("iterations", 0), f"{where}.iterations", int),
        seconds_per_iteration=_number(spec.get("seconds_per_iteration", 0.0), f"{where}.seconds_per_iteration"),
        validation_levels=_number(spec.get("validation_levels", 0), f"{where}.validation_levels", int),
        seconds_per_level=_number(spec.get("seconds_per_level", 0.05), f"{where}.seconds_per_level"),
        warm_start=str(spec.get("warm_start") or "frozenlake"),
    )


def experiment_from_spec(spec: Mapping, where: str = "hydra.sweeper") -> Experiment:
    """The :class:`Experiment` an experiment config's ``hydra.sweeper`` node describes.

    Unknown keys (besides the sweeper's own ``_target_``), a missing name or arm, duplicate arm
    names or seeds, an arm that sets ``seed`` or a negative cost are :class:`ExperimentSpecError`.

    Example:
        >>> experiment_from_spec({"name": "x", "seeds": [0], "arms": []})
        Traceback (most recent call last):
        ...
        ragen_torchrl.experiment_plan.ExperimentSpecError: hydra.sweeper.arms must list at least one arm
    """
    if not isinstance(spec, Mapping):
        raise ExperimentSpecError(f"{where} must be a mapping, got {spec!r}")
    unknown = sorted(set(spec) - _SPEC_KEYS - {"_target_"})
    if unknown:
        raise ExperimentSpecError(f"{where} has unknown keys {unknown} (known: {sorted(_SPEC_KEYS)})")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ExperimentSpecError(f"{where}.name must be the experiment's name (its file name), got {name!r}")
    arms_spec = spec.get("arms")
    if not isinstance(arms_spec, Sequence) or isinstance(arms_spec, str) or not arms_spec:
        raise ExperimentSpecError(f"{where}.arms must list at least one arm")
    arms = tuple(_arm(a, f"{where}.arms[{i}]") for i, a in enumerate(arms_spec))
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ExperimentSpecError(f"{where}.arms: arm names must be distinct, got {names}")
    seeds_spec = spec.get("seeds")
    if not isinstance(seeds_spec, Sequence) or isinstance(seeds_spec, str) or not seeds_spec:
        raise ExperimentSpecError(f"{where}.seeds must list at least one seed, got {seeds_spec!r}")
    seeds = tuple(_number(s, f"{where}.seeds[{i}]", int) for i, s in enumerate(seeds_spec))
    if len(set(seeds)) != len(seeds):
        raise ExperimentSpecError(f"{where}.seeds must be distinct, got {list(seeds)}")
    report = spec.get("report") or {}
    if not isinstance(report, Mapping) or set(report) - {"by", "paired", "within"}:
        raise ExperimentSpecError(f"{where}.report takes by, paired and within (lists), got {report!r}")
    warm = spec.get("warm_starts") or {}
    if not isinstance(warm, Mapping):
        raise ExperimentSpecError(f"{where}.warm_starts must map a warm start's name to its seconds, got {warm!r}")
    return Experiment(
        name=name,
        claim=str(spec.get("claim") or ""),
        overrides=(f"+experiment={name}",),
        arms=arms,
        seeds=seeds,
        report_by=_strings(report.get("by"), f"{where}.report.by"),
        report_paired=_strings(report.get("paired"), f"{where}.report.paired"),
        report_within=_strings(report.get("within"), f"{where}.report.within"),
        warm_starts={str(k): _number(v, f"{where}.warm_starts.{k}") for k, v in warm.items()},
        threads=_number(spec.get("threads", 1), f"{where}.threads", int, 1),
        warm_start_per_seed=_flag(spec.get("warm_start_per_seed", False), f"{where}.warm_start_per_seed"),
    )


def _flag(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise ExperimentSpecError(f"{where} must be true or false, got {value!r}")
    return value


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

    Each run's overrides: the experiment's, the arm's, its seed, then ``extra`` (the user's, which
    win). Both entry points run exactly these.
    """
    if any(_key(o) == "seed" for o in extra):
        raise ExperimentSpecError(
            "an experiment's runs take their seeds from its seeds list: pick others with --seeds "
            "(ragen-experiment) or seed=0,1 (ragen-train -m), not a seed override for every run"
        )
    seeds = exp.seeds if seeds is None else tuple(seeds)
    return [
        (f"{arm.name}_seed{seed}", merge_overrides(exp.overrides, arm.overrides, [f"seed={seed}"], extra))
        for seed in seeds
        for arm in exp.arms
    ]


def report_args(exp: Experiment) -> list[str]:
    """The experiment's ``ragen-report`` options: its ``--by`` keys, ``--paired`` metrics and ``--within`` keys.

    Example:
        >>> report_args(Experiment("x", "", (), (), (0,), report_by=("filter.name",), report_paired=("final",)))
        ['--by', 'filter.name', '--paired', 'final']
    """
    return (
        [a for k in exp.report_by for a in ("--by", k)]
        + [a for m in exp.report_paired for a in ("--paired", m)]
        + [a for k in exp.report_within for a in ("--within", k)]
    )


def _run_seconds(arm: Arm) -> float:
    return arm.iterations * arm.seconds_per_iteration + arm.validation_levels * arm.seconds_per_level


def estimate_seconds(
    exp: Experiment, seeds: Sequence[int] | None = None, done: Collection[str] = ()
) -> dict[str, float]:
    """Estimated wall seconds of the experiment: ``{"runs", "warm_starts", "total", "cpu_hours"}``.

    Each run: iterations x seconds per iteration + validation levels x seconds per level; each
    distinct warm start once (once per seed with ``warm_start_per_seed``); CPU-hours = total / 3600 x
    threads per run.
    Runs named in ``done`` (finished earlier) cost nothing, nor do the warm starts they built.

    Example:
        >>> e = Experiment("x", "", (), (Arm("a", (), 10, 2.0, 100, 0.1),), (0, 1), warm_starts={"frozenlake": 50.0})
        >>> estimate_seconds(e)
        {'runs': 60.0, 'warm_starts': 50.0, 'total': 110.0, 'cpu_hours': 0.030555555555555555}
        >>> estimate_seconds(e, done={"a_seed0"})["total"]
        30.0
        >>> from dataclasses import replace
        >>> estimate_seconds(replace(e, warm_start_per_seed=True))["warm_starts"]
        100.0
    """
    runs = [
        (f"{arm.name}_seed{seed}", arm, (arm.warm_start, seed if exp.warm_start_per_seed else None))
        for seed in (exp.seeds if seeds is None else seeds)
        for arm in exp.arms
    ]
    todo = [(arm, warm) for name, arm, warm in runs if name not in done]
    built = {warm for name, _, warm in runs if name in done}
    run_s = float(sum(_run_seconds(arm) for arm, _ in todo))
    warm = float(sum(exp.warm_starts.get(w[0], 0.0) for w in {w for _, w in todo} - built))
    total = run_s + warm
    return {"runs": run_s, "warm_starts": warm, "total": total, "cpu_hours": total / 3600 * exp.threads}


def run_state(run_dir) -> str:
    """``"finished"`` (its dir holds ``summary.json``), ``"interrupted"`` (a checkpoint, no summary) or ``"new"``.

    A finished run is not run again; an interrupted one continues from its checkpoint
    (``trainer.resume``), so an experiment started again picks up where it stopped.

    Example:
        >>> run_state("/nonexistent/run")
        'new'
    """
    run_dir = Path(run_dir)
    if (run_dir / "summary.json").exists():
        return "finished"
    if (run_dir / "checkpoints" / "last.pt").exists():
        return "interrupted"
    return "new"
