"""Old config keys (:data:`ragen_torchrl.moved_keys.MOVED_KEYS`) in a config or on the command line:
a :class:`~ragen_torchrl.trainer.config_checks.ConfigError` that names the key to use now."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from ..moved_keys import MOVED_KEYS
from .config_checks import ConfigError

__all__ = ["check_moved_keys", "check_moved_overrides"]


def _moved_message(old: str, new: str, why: str, value: Any) -> str:
    why = f" ({why})" if why else ""
    if isinstance(value, Mapping):
        sets = " ".join(f"{new}.{k}={v!r}" for k, v in value.items())
        return f"{old} is now {new}{why}" + (f"; set {sets}" if sets else "")
    return f"{old}={value!r} is now {new}{why}; set {new}={value!r}"


def check_moved_keys(cfg: Mapping) -> None:
    """A key that moved or was renamed (:data:`MOVED_KEYS`) is a :class:`ConfigError` naming the new key.

    Example:
        >>> try:
        ...     check_moved_keys({"algo": {"ppo_epochs": 2}})
        ... except ConfigError as e:
        ...     print(e)
        algo.ppo_epochs=2 is now algo.update_epochs (it applies to every algorithm); set algo.update_epochs=2
    """
    for old, (new, why) in MOVED_KEYS.items():
        group, _, leaf = old.partition(".")
        node = cfg.get(group) if isinstance(cfg, Mapping) else None
        if isinstance(node, Mapping) and leaf in node:
            value = node[leaf]
            raise ConfigError(
                _moved_message(old, new, why, OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
            )


def check_moved_overrides(overrides: list[str]) -> None:
    """Command-line overrides that name a moved key (``algo.ppo_epochs=2``, ``+filter.val_stop.patience=3``).

    Hydra refuses them as keys no preset has before any check of ours runs; this names the new key.

    Example:
        >>> try:
        ...     check_moved_overrides(["seed=1", "filter.val_stop.patience=3"])
        ... except ConfigError as e:
        ...     print(e)
        filter.val_stop.patience=3 is now trainer.early_stop.val_stop.patience (the stops run with or without a filter); set trainer.early_stop.val_stop.patience=3
    """
    for arg in overrides:
        key, eq, value = arg.lstrip("+~").partition("=")
        for old, (new, why) in MOVED_KEYS.items():
            if eq and (key == old or key.startswith(old + ".")):
                moved = new + key[len(old) :]
                why = f" ({why})" if why else ""
                raise ConfigError(f"{key}={value} is now {moved}{why}; set {moved}={value}")
