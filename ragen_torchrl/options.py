"""The options of an algorithm (the ``algo`` node) and of the SNR filter (``filter``) with their defaults.

Plain dataclasses and constants without torch, so the typed config
(:mod:`ragen_torchrl.trainer.config_schema`, which ``ragen-train --help`` imports) takes its field
defaults from here and a default is written once.

:func:`~ragen_torchrl.objectives.algorithm.build_algorithm` merges a partial mapping (a plain dict
or the ``algo`` node of a composed config) onto :class:`AlgoOptions` once with :func:`algo_options`
and reads attributes from then on. An unknown key is a ``ValueError`` naming it.
:func:`~ragen_torchrl.transforms.snr.validate_filter_config` fills a ``filter`` node from
:data:`FILTER_CONFIG_DEFAULTS`.

Example:
    >>> opts = algo_options({"name": "dapo", "clip_epsilon": [0.2, 0.28], "dynamic_sampling": {"tol": 0.0}})
    >>> opts.clip_epsilon, opts.entropy_coeff, opts.dynamic_sampling.tol, opts.dynamic_sampling.max_extra_rollouts
    ((0.2, 0.28), 0.001, 0.0, 3)
    >>> try:
    ...     algo_options({"name": "grpo", "entropy_coef": 0.01})
    ... except ValueError as e:
    ...     print(str(e)[:60])
    unknown key algo.entropy_coef; valid keys: name, lr, weight_
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FILTER_CONFIG_DEFAULTS", "AlgoOptions", "DynamicSamplingOptions", "OverlongOptions", "algo_options"]

#: Defaults of the ``filter`` config node: the paper's rule (RAGEN-2 §3.3, the ``snr_top_p`` preset).
FILTER_CONFIG_DEFAULTS: dict[str, Any] = {
    "name": "snr_top_p",
    "enabled": True,
    "metric": "reward_variance",
    "strategy": "top_p",
    "value": 0.9,
    "mode": "linear",
    "include_zero": False,
    "largest": True,
    "eps": 0.0,
    "loss_scale": "none",
}


@dataclass(frozen=True)
class OverlongOptions:
    """DAPO's soft overlong punishment (``algo.overlong``; any algorithm may turn it on)."""

    enabled: bool = False
    #: L_max; ``None``: ``algo.max_length``
    max_length: int | None = None
    #: L_cache: the penalty ramps from 0 to -1 over the last ``cache_length`` tokens
    cache_length: int = 0


@dataclass(frozen=True)
class DynamicSamplingOptions:
    """DAPO's dynamic sampling with refill (``algo.dynamic_sampling``)."""

    enabled: bool = True
    max_extra_rollouts: int = 3
    oversample: float = 1.0
    #: ``success`` | ``return`` (:data:`~ragen_torchrl.objectives.dapo.CRITERIA`)
    criterion: str = "success"
    tol: float = 1.0e-6


@dataclass(frozen=True)
class AlgoOptions:
    """Every key of the ``algo`` node and its default (what each means: ``ragen-train --describe algo``).

    The optimizer keys (``lr`` ... ``max_grad_norm``) are read by the trainer's update, the rest by
    :func:`~ragen_torchrl.objectives.algorithm.build_algorithm`; the PPO keys (``critic`` ...
    ``whiten_advantages``) only by PPO, ``dynamic_sampling`` only by DAPO.
    """

    name: str = "grpo"
    # the optimizer and the update (read by the trainer)
    lr: float = 2.0e-4
    weight_decay: float = 0.0
    #: a number or ``(low, high)``; ``None``: the algorithm's own (GRPO, Dr.GRPO, PPO 0.2; DAPO
    #: (0.2, 0.28); GSPO (3e-4, 4e-4))
    clip_epsilon: Any = None
    entropy_coeff: float = 0.001
    kl_coeff: float = 0.0
    update_epochs: int = 1
    on_policy_first_minibatch: bool = True
    train_on: str = "generated"
    shared_prefix: bool = True
    mini_batch_size: int = 16
    mini_batch_by: str = "group"
    micro_batch_size: int | None = None
    max_grad_norm: float = 1.0
    # the loss
    dual_clip: float | None = None
    adv_eps: float = 1.0e-6
    aggregation: str | None = None
    max_length: int | None = None
    overlong: OverlongOptions = field(default_factory=OverlongOptions)
    # PPO
    critic: str = "separate"
    critic_path: str | None = None
    critic_lr: float = 1.0e-3
    #: the critic's own gradient-norm clip (0 = none); ``None``: the actor's ``max_grad_norm``
    critic_grad_clip: float | None = None
    critic_chunk_size: int = 32
    value_clip: float | None = 0.5
    value_coeff: float = 1.0
    gamma: float = 1.0
    lam: float = 1.0
    bi_level: bool = False
    turn_gamma: float = 0.95
    turn_lam: float = 1.0
    whiten_advantages: bool = True
    # DAPO
    dynamic_sampling: DynamicSamplingOptions = field(default_factory=DynamicSamplingOptions)


def _plain(value: Any) -> Any:
    # a list in a config (``clip_epsilon: [0.2, 0.28]``) becomes a tuple: the options are frozen
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        return tuple(_plain(v) for v in value)
    return value


def _merge(cls: type, data: Any, where: str) -> Any:
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in data if k not in fields)
    if unknown:
        keys = ", ".join(f"{where}.{k}" for k in unknown)
        raise ValueError(f"unknown key{'s' * (len(unknown) > 1)} {keys}; valid keys: {', '.join(fields)}")
    kwargs = {}
    for key, value in data.items():
        factory = fields[key].default_factory
        if dataclasses.is_dataclass(factory):
            kwargs[key] = _merge(factory, value, f"{where}.{key}")
        else:
            kwargs[key] = _plain(value)
    return cls(**kwargs)


def algo_options(cfg: Mapping | AlgoOptions) -> AlgoOptions:
    """``cfg`` (a partial ``algo`` mapping, a ``DictConfig``, or :class:`AlgoOptions`) merged onto the defaults.

    Raises:
        ValueError: a key that is no option (nested ones too: ``algo.overlong.lenght``).

    Example:
        >>> algo_options({"overlong": {"enabled": True}}).overlong
        OverlongOptions(enabled=True, max_length=None, cache_length=0)
        >>> algo_options(algo_options({"lr": 0.1})).lr
        0.1
    """
    return _merge(AlgoOptions, cfg, "algo")
