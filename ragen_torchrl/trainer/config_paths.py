"""Where the configs are, and path checks of a config: the model source exists, the cache and run
dirs are writable, a resumed run dir holds a checkpoint. Nothing is created on disk (a probe file is
written and removed in the nearest existing ancestor).

The Hydra presets live in the repository's top-level ``configs/``; a wheel ships them inside the
package as ``ragen_torchrl/configs/``. :data:`PACKAGE_CONFIG_DIR` is whichever of the two exists,
:data:`CONFIG_DIR` the folder in use (``RAGEN_CONFIG_DIR`` wins when set).

Presets of a user's own are added with Hydra's ``--config-dir DIR`` (every app takes it): DIR joins the
search path after the shipped folder, so it adds names (``DIR/env/mine.yaml`` is ``env=mine``) but cannot
replace a shipped preset or ``config.yaml``. ``RAGEN_CONFIG_DIR`` is kept for that: it replaces the whole
tree, for every app and every process it starts.

Example:
    >>> import tempfile
    >>> check_writable_dir(tempfile.gettempdir() + "/ragen-not-created-yet/sub", "model.cache_dir")
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from omegaconf import DictConfig

from .config_checks import ConfigError, MissingPathError, _get

__all__ = [
    "CONFIG_DIR",
    "PACKAGE_CONFIG_DIR",
    "check_paths",
    "check_resume",
    "check_run_dir",
    "check_writable_dir",
    "config_dir",
    "shipped_config_dir",
]


def shipped_config_dir(package_dir: str | os.PathLike | None = None) -> str:
    """The presets that come with the package: ``<package>/configs`` in an installed wheel, else the
    source checkout's top-level ``configs/`` (an editable install or ``PYTHONPATH`` on a clone).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "configs").mkdir(); (root / "configs" / "config.yaml").write_text("seed: 0")
        7
        >>> shipped_config_dir(root / "ragen_torchrl") == str(root / "configs")
        True
        >>> (root / "ragen_torchrl" / "configs").mkdir(parents=True)
        >>> (root / "ragen_torchrl" / "configs" / "config.yaml").write_text("seed: 0")
        7
        >>> shipped_config_dir(root / "ragen_torchrl") == str(root / "ragen_torchrl" / "configs")
        True
    """
    pkg = Path(package_dir) if package_dir is not None else Path(__file__).resolve().parents[1]
    installed, checkout = pkg / "configs", pkg.parent / "configs"
    # the wheel's copy first: next to an installed package, a stray top-level configs/ is not ours
    for candidate in (installed, checkout):
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    return str(checkout)  # neither exists: Hydra's error then names the checkout's folder


#: the configs that come with the package (see :func:`shipped_config_dir`)
PACKAGE_CONFIG_DIR = shipped_config_dir()


def config_dir(environ: dict | None = None) -> str:
    """The config folder: ``RAGEN_CONFIG_DIR`` when set (and not empty), else the shipped one.

    Example:
        >>> config_dir({}) == PACKAGE_CONFIG_DIR
        True
        >>> config_dir({"RAGEN_CONFIG_DIR": "/my/configs"})
        '/my/configs'
    """
    env = os.environ if environ is None else environ
    return env.get("RAGEN_CONFIG_DIR") or PACKAGE_CONFIG_DIR


#: the config folder in use, read once at import (Hydra's ``config_path``)
CONFIG_DIR = config_dir()


def check_writable_dir(path: str | os.PathLike, key: str) -> None:
    """``path`` is (or can be created as) a directory this process can write, without creating it.

    Probes the nearest existing ancestor by creating and removing a temporary file in it.

    Example:
        >>> import tempfile
        >>> f = tempfile.NamedTemporaryFile()
        >>> check_writable_dir(f.name + "/sub", "model.cache_dir")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config_checks.ConfigError: model.cache_dir=.../sub cannot be created: ... is a file, ...
    """
    p = Path(os.path.expanduser(str(path)))
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{key}={path} is a file, not a directory")
    anc = p
    while not anc.exists() and anc.parent != anc:
        anc = anc.parent
    if not anc.is_dir():
        raise ConfigError(f"{key}={path} cannot be created: {anc} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=anc, prefix=".ragen-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{key}={path} is not writable: cannot create files in {anc} ({e.strerror or e})") from None


def check_resume(cfg: DictConfig) -> None:
    """``trainer.resume`` names an existing, writable run dir holding ``checkpoints/last.pt`` or
    ``checkpoints/prev.pt`` (whether a file actually loads is checked when it is read)."""
    resume = _get(cfg, "trainer.resume")
    if not resume:
        return
    run = Path(os.path.expanduser(str(resume)))
    if not run.is_dir():
        raise MissingPathError(f"trainer.resume={resume}: no such run directory (no checkpoint to resume from)")
    ckpt = run / "checkpoints"
    names = ("last.pt", "prev.pt")
    if not any((ckpt / n).is_file() for n in names):
        raise MissingPathError(f"trainer.resume={resume}: no checkpoint in {ckpt} (expected {' or '.join(names)})")
    check_writable_dir(run, "trainer.resume")


def check_paths(cfg: DictConfig) -> None:
    """The model source exists, the cache dir is writable, a resumed run has a checkpoint."""
    name = _get(cfg, "model.name_or_path")
    if name and not _get(cfg, "trainer.dry_run"):  # a dry run loads no weights (see trainer.model_setup.dry_run_report)
        from ..model_source import ModelSourceError, check_model_source

        try:
            check_model_source(str(name), "model.name_or_path")
        except ModelSourceError as e:
            raise ConfigError(str(e)) from None
    critic = _get(cfg, "algo.critic_path")
    if critic and str(_get(cfg, "algo.critic") or "separate") == "separate":
        from ..model_source import ModelSourceError, check_model_source

        try:
            check_model_source(str(critic), "algo.critic_path")
        except ModelSourceError as e:
            raise ConfigError(str(e)) from None
    for key in ("env.data_path", "env.val_data_path", "env.catalog_path"):
        value = _get(cfg, key)
        if value:
            from ..model_source import looks_like_local_path

            if not Path(os.path.expanduser(str(value))).exists() and (
                looks_like_local_path(str(value)) or key != "env.data_path" or _get(cfg, "env.name") != "metamathqa"
            ):
                raise MissingPathError(f"{key}={value}: the file does not exist")
    cache = _get(cfg, "model.cache_dir")
    if cache:
        check_writable_dir(cache, "model.cache_dir")
    check_resume(cfg)


def check_run_dir(run_dir: str | os.PathLike, key: str = "hydra.run.dir") -> None:
    """The run dir (TensorBoard logs, checkpoints) is writable; see :func:`check_writable_dir`."""
    check_writable_dir(run_dir, key)
