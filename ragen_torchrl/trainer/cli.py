"""Command-line entry points: ``ragen-train`` and ``ragen-sft`` (Hydra apps).

``ragen-train`` runs the default experiment (FrozenLake, GRPO, tiny model) and writes
TensorBoard logs and checkpoints under Hydra's run dir ``outputs/<date>/<time>/``::

    ragen-train
    ragen-train env=frozenlake trainer.total_iterations=20 algo.lr=1e-4
    ragen-train trainer.resume=outputs/2026-11-29/21-00-00
    ragen-train trainer=paper model=qwen2.5-3b trainer.dry_run=true   # the memory it needs; nothing loaded

``ragen-sft`` only builds the warm-started policy (cached for later runs).

Every key is a field of a dataclass in :mod:`~ragen_torchrl.trainer.config_schema`;
``ragen-train --describe KEY`` prints its type, default and help (``--describe algo`` a whole
group, ``--describe env.sokoban`` one env's keys) and ``ragen-train --help`` lists the groups.

The presets are the repository's top-level ``configs/``, shipped in the wheel as
``ragen_torchrl/configs/`` (:data:`PACKAGE_CONFIG_DIR`, resolved by
:mod:`ragen_torchrl.trainer.config_paths`), so a non-editable install (``pip install .`` or a wheel)
runs from any directory. Presets of your own go in a folder added with Hydra's ``--config-dir DIR``
(``DIR/env/mine.yaml`` is then ``env=mine``; ``ragen-eval`` and ``ragen-experiment`` take the same
option); a shipped preset of the same name still wins there. ``RAGEN_CONFIG_DIR`` replaces the whole
tree instead (``config.yaml`` plus the groups; what ``--config-dir`` cannot: a changed
``config.yaml`` or a shipped preset's name), for every app at once; :data:`CONFIG_DIR` is the folder in use.

Each app is its own Hydra job: ``hydra.job.name`` is ``ragen-train`` or ``ragen-sft``, and its log
file in the run dir ``ragen-train.log`` / ``ragen-sft.log``.

Exit status: 0 on success, **2 for a config error** (a bad value, an unknown key such as
``+foo=1``, a missing model path, an unwritable run or cache dir, ``trainer.resume`` without
a checkpoint, a ``hydra.run.dir`` that holds another run, a run dir another process is using),
printed as one ``config error: <key>...`` line. The whole config is checked
(:func:`~ragen_torchrl.trainer.config.validate_config`) by :class:`PreflightCallback`
before Hydra creates the run dir, so a bad config leaves nothing behind and no model is built.

Sweeps (Hydra's multirun, ``-m``) run one job per combination of the comma-separated values, one
after another, each in its own dir ``<hydra.sweep.dir>/<job number>/`` (TensorBoard log,
checkpoints, ``summary.json``); ``ragen-report <hydra.sweep.dir>`` reads them all::

    ragen-train -m +experiment=snr_filter filter=none,snr_top_p seed=0,1,2

Before the first job starts, every job's config is composed and validated (and the sweep dir
checked for writability), so a bad value in any job exits 2 before anything is built; each job
is validated again when it starts.
"""

from __future__ import annotations

import logging
import re
import sys

from .config_paths import CONFIG_DIR


def _config_error(e: BaseException) -> SystemExit:
    print(f"config error: {e}", file=sys.stderr, flush=True)
    return SystemExit(2)


def preflight(cfg, dir_key: str = "hydra.run.dir") -> None:
    """Validate a composed config including Hydra's run dir; exit 2 with a message on an error.

    ``cfg`` is the full config (with its ``hydra`` node) as Hydra passes it to callbacks; the
    task config is the same without ``hydra``. The dir at ``dir_key`` (Hydra's run dir; a sweep
    job's is ``hydra.runtime.output_dir``) is checked for writability without being created (a
    ``trainer.resume`` run also needs its resumed dir writable), and a run or job dir that already
    holds another run is refused unless ``trainer.resume`` names it
    (:func:`~ragen_torchrl.trainer.run_dir.check_new_run_dir`).
    """
    from omegaconf import OmegaConf, open_dict

    from .config import validate_config
    from .config_checks import ConfigError
    from .config_paths import check_run_dir
    from .run_dir import check_new_run_dir

    task = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False))
    run_dir = OmegaConf.select(cfg, dir_key, throw_on_missing=False)
    with open_dict(task):
        task.pop("hydra", None)
    try:
        validate_config(task)
        if run_dir:  # Hydra writes .hydra/ and its log there even when a resumed run trains elsewhere
            check_run_dir(run_dir, dir_key)
            if dir_key != "hydra.sweep.dir":  # a run's or a sweep job's own dir
                check_new_run_dir(run_dir, OmegaConf.select(task, "trainer.resume", default=None), dir_key)
    except ConfigError as e:
        raise _config_error(e) from None


def _sweep_job_configs(cfg) -> list:
    """The config of every job of a multirun, composed as the sweeper will compose them.

    Hydra's basic sweeper and the experiments' ``ragen_arms`` sweeper are expanded here; returns
    ``[]`` when the sweep cannot be (another sweeper plugin, a sweep syntax the basic sweeper does not
    expand): then each job is only checked when it starts.
    """
    from omegaconf import OmegaConf

    from ..experiment_plan import SWEEPER_TARGET

    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from hydra_plugins.ragen_torchrl_arms.arm_sweeper import job_overrides

        sweeper = str(OmegaConf.select(cfg, "hydra.sweeper._target_", default=""))
        if not GlobalHydra.instance().is_initialized():
            return []
        loader = GlobalHydra.instance().config_loader()
        task = list(cfg.hydra.overrides.task)
        if sweeper == SWEEPER_TARGET:
            jobs = [overrides for _, overrides in job_overrides(cfg, task, loader)]
        elif sweeper.endswith("BasicSweeper"):
            params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None) or {}
            args = [f"{k}={v}" for k, v in params.items()] + task
            overrides = OverridesParser.create(config_loader=loader).parse_overrides(args)
            jobs = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
        else:
            return []
    except Exception:  # noqa: BLE001 - Hydra (or the sweeper) reports sweep errors itself, with its own message
        return []
    try:
        return [loader.load_sweep_config(cfg, list(job)) for job in jobs]
    except Exception:  # noqa: BLE001 - a job that does not compose (e.g. filter=nosuch): Hydra reports it
        return []  # before launching any job, as it does for a single run


try:
    from hydra.experimental.callback import Callback as _Callback
except ImportError:  # pragma: no cover
    _Callback = object


class PreflightCallback(_Callback):
    """Hydra callback (``hydra.callbacks.preflight`` in ``configs/config.yaml``): runs
    :func:`preflight` in ``on_run_start``, before Hydra makes the run dir, writes
    ``.hydra/`` or opens its log file there. Under multirun (``-m``), ``on_multirun_start``
    validates every job's config before the sweep dir exists and ``on_job_start`` each job as it
    starts."""

    def on_run_start(self, config, **kwargs) -> None:
        preflight(config)

    def on_multirun_start(self, config, **kwargs) -> None:
        """Multirun (``-m``): check the sweep dir and every job's config before the first job."""
        from omegaconf import OmegaConf

        from .config_checks import ConfigError
        from .config_paths import check_run_dir

        sweep_dir = OmegaConf.select(config, "hydra.sweep.dir", throw_on_missing=False)
        try:
            if sweep_dir:
                check_run_dir(sweep_dir, "hydra.sweep.dir")
        except ConfigError as e:
            raise _config_error(e) from None
        for job in _sweep_job_configs(config):
            preflight(job, dir_key="hydra.sweep.dir")

    def on_job_start(self, config, **kwargs) -> None:
        """Each multirun job again, as launched (its own dir ``hydra.runtime.output_dir``)."""
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.get().mode == RunMode.MULTIRUN:  # a single run was checked in on_run_start
            preflight(config, dir_key="hydra.runtime.output_dir")


def _run_dir() -> str:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.output_dir


def _train(cfg) -> None:
    from ..model_source import ModelSourceError
    from .config_checks import ConfigError
    from .loop import Trainer

    if cfg.trainer.dry_run:
        from .model_setup import dry_run_report

        try:
            print(dry_run_report(cfg), flush=True)
        except ConfigError as e:
            raise _config_error(e) from None
        return
    try:
        trainer = Trainer(cfg, _run_dir())
    except (ConfigError, ModelSourceError) as e:
        raise _config_error(e) from None
    if trainer.dist.is_main:
        print(f"run dir: {trainer.run_dir}  (tensorboard --logdir {trainer.run_dir})", flush=True)
    try:
        trainer.fit()
    finally:
        trainer.dist.close()


def _sft(cfg) -> None:
    from ..model_source import ModelSourceError
    from .config import validate_config
    from .config_checks import ConfigError
    from .loop import Trainer

    try:
        cfg = validate_config(cfg)
        cfg.trainer.total_iterations = 0
        trainer = Trainer(cfg, _run_dir())
    except (ConfigError, ModelSourceError) as e:
        raise _config_error(e) from None
    stats, _ = trainer.validate(step=0)
    print(f"warm-started model: {trainer.model_path}")
    print(
        f"validation success {stats['success']:.3f} ± {stats['success_stderr']:.3f}, "
        f"format-valid {stats['format_valid']:.3f}"
    )


def describe_main(argv: list[str]) -> bool:
    """``--describe KEY`` (or ``--describe=KEY``) in ``argv``: print KEY's fields (type, default,
    help) and return True; a KEY the schema lacks is a config error (exit 2). Without a KEY, every group.

    Example:
        >>> describe_main(["--describe", "trainer.early_stop.val_stop.patience"])
        trainer.early_stop.val_stop.patience: int = 5
            consecutive low validations that stop the run
        True
    """
    from .config_describe import describe
    from .config_schema import GROUPS

    keys = [a.split("=", 1)[1] for a in argv if a.startswith("--describe=")]
    if "--describe" in argv:
        i = argv.index("--describe")
        keys.append(argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else "")
    if not keys:
        return False
    for key in keys:
        try:
            if "=" in key:
                text = describe_preset(key)
            else:
                text = describe(key) if key else "\n\n".join(describe(g) for g in ("seed", *GROUPS))
            print(text, flush=True)
        except ValueError as e:
            raise _config_error(e) from None
    return True


def describe_preset(choice: str) -> str:
    """What ``--describe GROUP=OPTION`` prints: every key of the group as that preset composes it (the
    values ``ragen-train GROUP=OPTION`` runs, base presets and interpolations as written), with the
    schema's type and help; then the keys outside the group the preset changes (a ``_global_`` preset's
    pins, e.g. ``model=smollm2``'s warm start).

    Example:
        >>> print(describe_preset("algo=dapo").splitlines()[0])
        algo.name: str = dapo
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from ..flat_config import flatten_config
    from .config_describe import schema_fields, shown_value
    from .config_schema import GROUPS

    group, _, option = choice.partition("=")
    if group not in GROUPS or group == "seed" or not option:
        raise ValueError(f"--describe {choice}: expected GROUP=OPTION with GROUP one of {', '.join(GROUPS)}")
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", overrides=[choice])
            base = compose("config")
    except HydraException as e:
        raise ValueError(f"--describe {choice}: {' '.join(str(e).split())}") from None
    name = OmegaConf.select(cfg, f"{group}.name") if group in ("algo", "env", "model") else None
    # as written (interpolations such as ${oc.env:RAGEN_CACHE,...} unresolved, ??? for a required key)
    tree = OmegaConf.to_container(cfg, resolve=False)
    flat_cfg = flatten_config(tree)
    flat_base = flatten_config(OmegaConf.to_container(base, resolve=False))
    lines = []
    for path, tp, default, help_text in schema_fields(group, name):
        value = tree
        for part in path.split("."):
            value = value.get(part, default) if isinstance(value, dict) else default
        lines.append(f"{path}: {tp} = {shown_value(value, tp)}")
        if help_text:
            lines.append(f"    {help_text}")
    changed = [
        k
        for k in flat_cfg
        if not k.startswith(f"{group}.") and k != "hydra" and flat_cfg[k] != flat_base.get(k, object())
    ]
    if changed:
        lines.append(f"# outside {group}: what {choice} also sets")
        lines += [f"{k} = {shown_value(flat_cfg[k])}" for k in changed]
    return "\n".join(lines)


def job_name_override(app: str, argv: list[str]) -> list[str]:
    """The ``hydra.job.name`` / ``hydra.help.app_name`` overrides naming ``app``'s job (its log file
    ``<run dir>/<app>.log``), less those ``argv`` sets itself.

    Example:
        >>> job_name_override("ragen-sft", ["trainer=smoke"])
        ['hydra.job.name=ragen-sft', 'hydra.help.app_name=ragen-sft']
        >>> job_name_override("ragen-sft", ["hydra.job.name=mine"])
        ['hydra.help.app_name=ragen-sft']
    """
    out = []
    for key in ("hydra.job.name", "hydra.help.app_name"):
        if not any(a.lstrip("+").startswith(f"{key}=") for a in argv):
            out.append(f"{key}={app}")
    return out


def override_position(argv: list[str]) -> int:
    """Where extra overrides go in ``argv``: right after the user's last ``key=value``, else at the end.

    Hydra's parser takes the overrides as one run of positional arguments: an override added after a
    trailing flag (``... model.device=cuda --resolve``) would be a second run, which argparse refuses.

    Example:
        >>> override_position(["ragen-train", "--cfg", "job", "model.device=cuda", "--resolve"])
        4
        >>> override_position(["ragen-train", "--cfg", "job"])
        3
    """
    last = [i for i, a in enumerate(argv) if i > 0 and "=" in a and not a.startswith("-")]
    return last[-1] + 1 if last else len(argv)


_DOTTED_KEY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def schema_keys_settable(argv: list[str], nodes: tuple[str, ...]) -> list[str]:
    """``argv`` with every bare ``node.key=value`` override written ``++node.key=value`` (set or add).

    A key the schema defines but no YAML preset writes (the presets state only what differs) is then
    settable bare, as every other key: Hydra would refuse it as "not in struct". A typo is still an
    error, with a suggestion: the whole config is checked against the schema before the run starts.
    Group choices (``env=sokoban``), ``+`` / ``~`` overrides, ``hydra.*`` and flags are left as they are.

    Example:
        >>> schema_keys_settable(["ragen-train", "env=sokoban", "trainer.keep_best=true", "+a.b=1", "hydra.run.dir=x"],
        ...                      ("trainer", "env"))
        ['ragen-train', 'env=sokoban', '++trainer.keep_best=true', '+a.b=1', 'hydra.run.dir=x']
    """
    out = list(argv[:1])
    for arg in argv[1:]:
        key, eq, _ = arg.partition("=")
        if eq and _DOTTED_KEY.match(key) and key.split(".", 1)[0] in nodes:
            arg = "++" + arg
        out.append(arg)
    return out


def _hydra_main(task, app: str = "ragen-train"):
    import hydra

    from hydra_plugins.ragen_torchrl_arms.arm_sweeper import register as register_sweeper

    from .config_moved import check_moved_overrides
    from .config_schema import GROUPS, register_schemas

    if describe_main(sys.argv[1:]):
        raise SystemExit(0)
    try:  # Hydra would refuse a moved key as unknown without saying where it went
        check_moved_overrides(sys.argv[1:])
    except ValueError as e:
        raise _config_error(e) from None
    register_schemas()  # a preset of the user's may build on /schema/<group>/<option>
    register_sweeper()  # -m +experiment=NAME: the experiment's arms x seeds
    sys.argv[:] = schema_keys_settable(sys.argv, GROUPS)
    # Hydra names the job after the task's module (cli): every app's log would be cli.log
    at = override_position(sys.argv)
    sys.argv[at:at] = job_name_override(app, sys.argv[1:])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    return hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")(task)


def train_main() -> None:
    """Entry point of ``ragen-train``."""
    _hydra_main(_train)()


def sft_main() -> None:
    """Entry point of ``ragen-sft``."""
    _hydra_main(_sft, "ragen-sft")()
