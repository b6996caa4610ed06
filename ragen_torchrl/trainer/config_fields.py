"""The building blocks of the config schema: :func:`setting` (a dataclass field with its help text and
its check) and the checks the schema's fields share.

Every config key is a field made with :func:`setting` in :mod:`.config_schema`, :mod:`.model_schemas`
or :mod:`.env_schemas`; this module holds what those files have in common, so none of them imports
another's private helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from functools import partial
from typing import Any  # noqa: UP035 - OmegaConf resolves typing's generics by name

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from .config_checks import (
    ConfigError,
    _get,
    check_choice,
    check_float_range,
    check_positive_float,
    check_positive_int,
)

__all__ = ["FINAL_EVAL_MODES", "MIN_TEMPERATURE", "Check", "setting"]

Check = Callable[[DictConfig, str], None]


def setting(default: Any = MISSING, help: str = "", check: Check | None = None, *, factory: Any = None) -> Any:  # noqa: A002
    """A dataclass field with its help text and its check (``check(cfg, "group.key")`` raises :class:`ConfigError`).

    Example:
        >>> import dataclasses
        >>> from ragen_torchrl.trainer.config_schema import TrainerConfig
        >>> f = {f.name: f for f in dataclasses.fields(TrainerConfig)}["group_size"]
        >>> f.default, f.metadata["help"]
        (4, 'G samples per group')
    """
    meta = {"help": help, "check": check}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _node(cls: type, help: str) -> Any:  # noqa: A002
    return setting(help=help, factory=cls)


# ------------------------------------------------------------------------------------------- checks
_nonneg_int = partial(check_positive_int, allow_zero=True)
_opt_pos_int = partial(check_positive_int, optional=True)
_nonneg_float = partial(check_positive_float, allow_zero=True)
#: the smallest positive sampling temperature: logits / T overflows a float for smaller ones (0 = greedy)
MIN_TEMPERATURE = 1e-3


def _temperature(cfg: DictConfig, key: str) -> None:
    """A sampling temperature: 0 (greedy) or a finite number >= :data:`MIN_TEMPERATURE`.

    Example:
        >>> _temperature(OmegaConf.create({"rollout": {"temperature": 0.0}}), "rollout.temperature")
        >>> try:
        ...     _temperature(OmegaConf.create({"rollout": {"temperature": 1e-40}}), "rollout.temperature")
        ... except ConfigError as e:
        ...     print(e)
        rollout.temperature=1e-40 is below 0.001: logits / temperature overflows; use 0 for greedy decoding
    """
    _nonneg_float(cfg, key)
    value = OmegaConf.select(cfg, key)
    if 0 < value < MIN_TEMPERATURE:
        raise ConfigError(
            f"{key}={value!r} is below {MIN_TEMPERATURE}: logits / temperature overflows; use 0 for greedy decoding"
        )


def _opt_temperature(cfg: DictConfig, key: str) -> None:
    """:func:`_temperature`, or null."""
    if OmegaConf.select(cfg, key) is not None:
        _temperature(cfg, key)


#: the decoding modes of ``trainer.final_eval.modes``: greedy is temperature 0
FINAL_EVAL_MODES = ("greedy", "sampled")


def _final_eval_modes(cfg: DictConfig, key: str) -> None:
    """A non-empty list of distinct :data:`FINAL_EVAL_MODES`.

    Example:
        >>> _final_eval_modes(OmegaConf.create({"m": ["sampled", "greedy"]}), "m")
        >>> for bad in (["beam"], [], "greedy", ["greedy", "greedy"]):
        ...     try:
        ...         _final_eval_modes(OmegaConf.create({"m": bad}), "m")
        ...     except ConfigError as e:
        ...         print(e)
        m=['beam']: unknown mode 'beam'; a list of greedy and/or sampled, e.g. [greedy,sampled]
        m=[]: a list of greedy and/or sampled, e.g. [greedy,sampled]
        m='greedy': a list of greedy and/or sampled, e.g. [greedy,sampled]
        m=['greedy', 'greedy']: a mode is listed twice
    """
    value = OmegaConf.select(cfg, key)
    value = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    hint = "a list of " + " and/or ".join(FINAL_EVAL_MODES) + ", e.g. [" + ",".join(FINAL_EVAL_MODES) + "]"
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{key}={value!r}: {hint}")
    for mode in value:
        if mode not in FINAL_EVAL_MODES:
            raise ConfigError(f"{key}={value!r}: unknown mode {mode!r}; {hint}")
    if len(set(value)) < len(value):
        raise ConfigError(f"{key}={value!r}: a mode is listed twice")


def _limited(check: Callable, maximum: int) -> Check:
    return partial(check, maximum=maximum)


def _choice(*choices: str) -> Check:
    return partial(check_choice, choices=choices)


def _lazy_choice(module: str, attr: str) -> Check:
    """A choice among the values of ``module.attr`` (imported at check time: the envs import torch)."""

    def check(cfg: DictConfig, key: str) -> None:
        import importlib

        obj = importlib.import_module(module, __package__)
        for part in attr.split("."):
            obj = obj[part] if isinstance(obj, Mapping) else getattr(obj, part)
        check_choice(cfg, key, obj)

    return check


def _integer(cfg: DictConfig, key: str) -> None:
    value = _get(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**63:
        raise ConfigError(f"{key} must be an integer, got {value!r}")


def _quoted_choice(*choices: str) -> Check:
    def check(cfg: DictConfig, key: str) -> None:
        value = _get(cfg, key)
        if value is not None and value not in choices:
            raise ConfigError(f"{key} must be {' or '.join(repr(c) for c in choices)}, got {value!r}")

    return check


def _precision(cfg: DictConfig, key: str) -> None:
    """``model.precision``: mixed | pure; fp16 compute over fp32 parameters (mixed) would need loss scaling."""
    check_choice(cfg, key, ("mixed", "pure"))
    if _get(cfg, key) == "mixed" and _get(cfg, "model.dtype") in ("float16", "fp16"):
        raise ConfigError(
            f"{key}=mixed with model.dtype=float16: fp16 compute over fp32 parameters needs loss scaling, "
            "which the update does not do; use model.dtype=bfloat16, or model.precision=pure"
        )


def _export_dtype(cfg: DictConfig, key: str) -> None:
    check_choice(cfg, key, ("auto", "float32", "bfloat16", "float16"))


def _unit(cfg: DictConfig, key: str) -> None:
    check_float_range(cfg, key, 0.0, 1.0)
