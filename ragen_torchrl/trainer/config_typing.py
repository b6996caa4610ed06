"""A composed config merged onto its schema (:func:`typed_config`: typed, every default filled in) and
each field's own check run on it (:func:`check_fields`).

The schema is :class:`~ragen_torchrl.trainer.config_schema.RagenConfig`, with the algo, env and model
dataclasses the config's names choose (:func:`~ragen_torchrl.trainer.config_schema.group_schema`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .config_checks import ConfigError
from .config_schema import _root_for

__all__ = ["check_fields", "typed_config"]

_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def _field_type(root: Any, key: str) -> str:
    """The annotation of the dataclass field at the dotted ``key`` (``""`` when there is none)."""
    obj, tp = root, ""
    for part in key.split("."):
        hit = [f for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
        match = next((f for f in hit if f.name == part), None)
        if match is None:
            return ""
        obj, tp = getattr(obj, part), str(match.type)
    return tp.removeprefix("Optional[").removesuffix("]")


def _type_error(e: OmegaConfBaseException, root: Any) -> ConfigError:
    key = getattr(e, "full_key", None) or "the config"
    value = getattr(e, "value", None)
    word = _TYPE_WORDS.get(_field_type(root, key))
    if word is not None:
        return ConfigError(f"{key} must be {word}, got {value!r}")
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ConfigError(f"{key}: {msg}")


def _check_bools(obj: Any, data: Any, prefix: str) -> None:
    """A bool field takes ``true`` or ``false`` only (OmegaConf would also read ``"yes"``, ``"off"`` or ``1``)."""
    if not dataclasses.is_dataclass(obj) or not isinstance(data, Mapping):
        return
    for f in dataclasses.fields(obj):
        if f.name not in data:
            continue
        value, key = data[f.name], f"{prefix}{f.name}"
        if str(f.type) in ("bool", "Optional[bool]"):
            if not isinstance(value, bool) and not (value is None and f.type != "bool"):
                raise ConfigError(f"{key} must be true or false, got {value!r}")
        else:
            _check_bools(getattr(obj, f.name), value, f"{key}.")


#: the structured schema of each (algo, env, model) dataclass choice, built on first use
_STRUCTURED: dict[tuple[type, type, type], DictConfig] = {}


def typed_config(cfg: Mapping) -> DictConfig:
    """``cfg`` merged onto its schema (:class:`RagenConfig`): typed, with every default filled in.

    One pass: each value is converted to its field's type (``"1"`` for an int field becomes 1) or a
    :class:`ConfigError` names the key and the value; keys a preset leaves out get the dataclass
    default. The result is a struct-mode ``DictConfig`` (attribute access, no new keys).
    ``hydra`` is dropped. Unknown keys are not reported here (``check_unknown_keys`` does, with
    suggestions); they make the merge fail.

    Example:
        >>> cfg = typed_config({"trainer": {"group_size": "8"}, "env": {"name": "sokoban"}})
        >>> cfg.trainer.group_size, cfg.trainer.prompts_per_iter, list(cfg.env.dim)
        (8, 16, [6, 6])
        >>> typed_config({"seed": "abc"})
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config_checks.ConfigError: seed must be an integer, got 'abc'
    """
    data = OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False) if OmegaConf.is_config(cfg) else dict(cfg)
    data.pop("hydra", None)
    root = _root_for(data)
    _check_bools(root, data, "")
    # building the structured schema is half the cost of this pass: once per (algo, env, model) choice
    choice = (type(root.algo), type(root.env), type(root.model))
    if choice not in _STRUCTURED:
        _STRUCTURED[choice] = OmegaConf.structured(root)
    try:
        return OmegaConf.merge(_STRUCTURED[choice], data)  # a new config: the cached schema is not changed
    except OmegaConfBaseException as e:
        raise _type_error(e, root) from None


def check_fields(cfg: DictConfig, obj: Any = None, prefix: str = "") -> None:
    """Run every field's check (``metadata["check"]``) on ``cfg`` (a :func:`typed_config`), depth first.

    Example:
        >>> check_fields(typed_config({"trainer": {"early_stop": {"val_stop": {"patience": 0}}}}))
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config_checks.ConfigError: trainer.early_stop.val_stop.patience must be a positive integer, got 0
    """
    if obj is None:
        obj = _root_for(cfg)
    for f in dataclasses.fields(obj):
        key = f"{prefix}{f.name}"
        check = f.metadata.get("check")
        if check is not None:
            check(cfg, key)
        sub = getattr(obj, f.name)
        if dataclasses.is_dataclass(sub):
            check_fields(cfg, sub, f"{key}.")
