"""Unknown config keys: every key of a composed config must be a field of its schema.

Hydra's struct mode rejects ``foo=1``; :func:`check_unknown_keys` also rejects ``+foo=1`` (Hydra's
explicit "add a key" syntax), which the code would otherwise silently ignore. The allowed keys are
the fields of the config's dataclasses (:func:`~ragen_torchrl.trainer.config_schema.schema_tree`):
the env, algo and model nodes by their ``name`` (``algo=dapo_ragen`` has ``name: ppo`` and PPO's
keys; an env registered at run time may have any keys). A key that moved
(:data:`~ragen_torchrl.moved_keys.MOVED_KEYS`) is named with its new place first.

Example:
    >>> from omegaconf import OmegaConf
    >>> unknown_keys(OmegaConf.create({"sft": {"steps": 1, "stepz": 2}}), {"sft": {"steps": None}})
    ['sft.stepz']
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .config_checks import ConfigError
from .config_moved import check_moved_keys
from .config_schema import schema_tree

__all__ = ["check_unknown_keys", "unknown_keys"]


def unknown_keys(cfg: DictConfig | Mapping, allowed: Mapping[str, Any]) -> list[str]:
    """Dotted keys of ``cfg`` that ``allowed`` (a key tree; ``...`` allows any keys below) does not have.

    Example:
        >>> from omegaconf import OmegaConf
        >>> unknown_keys(OmegaConf.create({"a": {"b": 1, "c": 2}, "foo": 1}), {"a": {"b": None}})
        ['a.c', 'foo']
    """
    out: list[str] = []

    def walk(node: Any, tree: Any, prefix: str) -> None:
        if not isinstance(node, Mapping) or not isinstance(tree, dict):
            return
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if prefix == "" and k == "hydra":
                continue
            if k not in tree:
                out.append(key)
            else:
                walk(v, tree[k], key)

    walk(
        OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False) if OmegaConf.is_config(cfg) else cfg,
        allowed,
        "",
    )
    return out


def check_unknown_keys(cfg: DictConfig | Mapping) -> None:
    """Reject keys no dataclass field defines (``+foo=1``, ``+algo.lrr=0.1``), with close matches.

    Example:
        >>> try:
        ...     check_unknown_keys({"algo": {"name": "grpo", "lrr": 0.1}})
        ... except ConfigError as e:
        ...     print(str(e).split(";")[0])
        unknown config key(s): algo.lrr (did you mean algo.lr?)
    """
    check_moved_keys(cfg)
    allowed = schema_tree(cfg)
    bad = unknown_keys(cfg, allowed)
    if not bad:
        return
    hints = []
    for key in bad:
        parent, _, leaf = key.rpartition(".")
        tree: Any = allowed
        for part in parent.split(".") if parent else []:
            tree = tree.get(part) if isinstance(tree, dict) else None
        close = difflib.get_close_matches(leaf, list(tree) if isinstance(tree, dict) else [], n=1)
        hints.append(f"{key} (did you mean {parent + '.' if parent else ''}{close[0]}?)" if close else key)
    them = "it" if len(bad) == 1 else "them"
    raise ConfigError(
        f"unknown config key(s): {', '.join(hints)}; no field of the config schema "
        f"(ragen_torchrl.trainer.config_schema) defines {them} (the code would silently ignore {them}); "
        "ragen-train --describe GROUP lists a group's keys"
    )
