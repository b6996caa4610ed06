"""The ``ragen_arms`` Hydra sweeper: ``ragen-train -m +experiment=NAME`` runs an experiment's arms x seeds.

An experiment config (``configs/experiment/NAME.yaml``) selects this sweeper
(``defaults: [override /hydra/sweeper: ragen_arms]``) and lists its arms, seeds, report grouping
and cost under ``hydra.sweeper`` (the format: :mod:`ragen_torchrl.experiment_plan`). The sweeper
launches the runs :func:`ragen_torchrl.experiment_plan.plan` gives (arms interleaved by seed, the
command line's overrides winning over an arm's), each in ``<hydra.sweep.dir>/runs/<arm>_seed<k>/``,
skips a run that finished (its dir holds ``summary.json``), continues one that was interrupted
(``trainer.resume``), and writes the experiment's report into ``hydra.sweep.dir``: the same runs in
the same layout as ``ragen-experiment NAME --out <hydra.sweep.dir>``.

On the command line, ``seed=0,1`` (or ``seed=3``) picks the seeds; any other sweep (``a=1,2``) is refused: an
experiment's variations are its arms (write an arm, or sweep a config without arms, which keeps
Hydra's basic sweeper).

It is a Hydra plugin (Hydra instantiates sweepers only from the ``hydra_plugins`` package), so
this module is imported whenever a Hydra app starts: it imports nothing heavy. (No
``from __future__ import annotations``: Hydra's scanner runs the module before it is in
``sys.modules``, where dataclasses would look string annotations up.)
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


@dataclass
class ArmSweeperConf:
    """``hydra.sweeper`` of an experiment (checked by :func:`ragen_torchrl.experiment_plan.experiment_from_spec`)."""

    _target_: str = "hydra_plugins.ragen_torchrl_arms.arm_sweeper.ArmSweeper"
    name: Optional[str] = None
    claim: str = ""
    seeds: List[int] = field(default_factory=lambda: [0])
    arms: List[Any] = field(default_factory=list)
    report: Dict[str, Any] = field(default_factory=dict)
    warm_starts: Dict[str, float] = field(default_factory=dict)
    threads: int = 1
    warm_start_per_seed: bool = False


ConfigStore.instance().store(group="hydra/sweeper", name="ragen_arms", node=ArmSweeperConf, provider="ragen_torchrl")


def _experiment(sweeper_cfg: DictConfig):
    from ragen_torchrl.experiment_plan import ExperimentSpecError, experiment_from_spec

    try:
        return experiment_from_spec(OmegaConf.to_container(sweeper_cfg, resolve=True))
    except ExperimentSpecError as e:
        raise HydraException(f"experiment config: {e}") from None


def split_arguments(arguments: Sequence[str], config_loader) -> tuple[Optional[List[int]], List[str]]:
    """The command line's seeds (``seed=0,1``; ``None``: the experiment's) and its other overrides."""
    seeds: Optional[List[int]] = None
    extra: List[str] = []
    for override in OverridesParser.create(config_loader=config_loader).parse_overrides(list(arguments)):
        key = override.get_key_element()
        if key == "seed" and not override.is_sweep_override():  # one seed: the experiment's runs at it
            seeds = [int(override.value())]
            continue
        if override.is_sweep_override():
            if key == "seed" and override.is_discrete_sweep():
                seeds = [int(v) for v in override.sweep_string_iterator()]
                continue
            shown = (override.input_line or key).removeprefix("++")  # as typed (ragen-train adds the ++)
            raise HydraException(
                f"an experiment's runs are its arms x seeds: the sweep {shown!r} is not one of them "
                "(add an arm to the experiment's hydra.sweeper.arms, or sweep seed=...)"
            )
        extra.append(override.input_line or f"{key}={override.get_value_element_as_str()}")
    return seeds, extra


def job_overrides(config: DictConfig, arguments: Sequence[str], config_loader) -> List[tuple[str, List[str]]]:
    """``[(run name, overrides), ...]`` of the experiment ``config`` selects, with the command line's ``arguments``."""
    from ragen_torchrl.experiment_plan import plan

    exp = _experiment(config.hydra.sweeper)
    seeds, extra = split_arguments(arguments, config_loader)
    return plan(exp, seeds, extra)


class ArmSweeper(Sweeper):
    """Runs an experiment's arms x seeds (see the module docstring)."""

    def __init__(self, **spec: Any) -> None:
        super().__init__()
        self.spec = spec
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: List[str]) -> Any:
        from ragen_torchrl.experiment_plan import report_args, run_state

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        exp = _experiment(self.config.hydra.sweeper)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        batch, run_dirs = [], []
        for name, overrides in job_overrides(self.config, arguments, self.hydra_context.config_loader):
            run_dir = sweep_dir / "runs" / name
            run_dirs.append(run_dir)
            state = run_state(run_dir)
            if state == "finished":
                log.info(f"[{name}] finished earlier: {run_dir}/summary.json")
                continue
            resume = [f"trainer.resume={run_dir.resolve()}"] if state == "interrupted" else []
            batch.append([*overrides, *resume, f"hydra.sweep.subdir=runs/{name}"])
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns = []
        if batch:
            self.validate_batch_is_legal(batch)
            returns = list(self.launcher.launch(batch, initial_job_idx=0))
            for r in returns:
                r.return_value  # noqa: B018 - raises the job's exception when it failed
        from ragen_torchrl.reporting.cli import main as report_main

        status = report_main([*map(str, run_dirs), "--out", str(sweep_dir), *report_args(exp)])
        if status != 0:
            log.warning(f"ragen-report exited with status {status} (see above); the runs are in {sweep_dir}/runs")
        return returns


def register() -> None:
    """Make the sweeper known to Hydra where its plugin scan cannot list ``hydra_plugins``.

    An editable install (``pip install -e .``) puts ``hydra_plugins`` behind an import hook that
    ``pkgutil`` cannot walk, so Hydra's scan misses this module; importing it stores
    ``hydra/sweeper: ragen_arms`` and this registers the class (Hydra's ``Plugins.register``).
    ``ragen-train`` and ``ragen-experiment`` call it before composing; calling it twice is harmless.
    """
    from hydra.core.plugins import Plugins

    plugins = Plugins.instance()
    if ArmSweeper not in plugins.discover(Sweeper):
        plugins.register(ArmSweeper)
