"""The vocabulary of config validation: :class:`ConfigError`, the size limits, and the primitive
checks (:func:`check_positive_int`, :func:`check_probability`, ...) every other check is built from.

:func:`ragen_torchrl.trainer.config.validate_config` composes them; this module only knows how to
read one key and say what is wrong with it.

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"trainer": {"prompts_per_iter": -1}})
    >>> try:
    ...     check_positive_int(cfg, "trainer.prompts_per_iter")
    ... except ValueError as e:
    ...     print(e)
    trainer.prompts_per_iter must be a positive integer, got -1
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import checks


class ConfigError(ValueError):
    """A config value is out of range or of the wrong type."""


class MissingPathError(ConfigError, FileNotFoundError):
    """A path the config names does not exist (e.g. ``trainer.resume`` without a checkpoint)."""


#: upper bounds of size-like keys: each is far above any sensible run and far below what
#: exhausts memory (``env.size=100000`` asks for 10^10 cells). Keys absent from a config are
#: skipped; ``env.dim`` is Sokoban's (height, width) pair or PreferenceEstimation's vector size.
LIMITS: dict[str, int] = {
    "trainer.prompts_per_iter": 4096,
    "trainer.group_size": 256,
    "trainer.val_levels": 65536,
    "trainer.total_iterations": 10_000_000,
    "trainer.log_text_samples": 1024,
    "trainer.log_image_samples": 1024,
    "rollout.max_new_tokens": 32768,
    "rollout.chunk_size": 4096,
    "rollout.kv_cache_max_tokens": 1 << 30,
    "algo.update_epochs": 100,
    "algo.mini_batch_size": 65536,
    "algo.max_length": 1 << 20,
    "algo.critic_chunk_size": 4096,
    "algo.overlong.max_length": 1 << 20,
    "algo.dynamic_sampling.max_extra_rollouts": 100,
    "sft.episodes": 1_000_000,
    "sft.steps": 10_000_000,
    "sft.batch_size": 4096,
    "diagnostics.mi.num_pairs": 1024,  # cross-scoring is quadratic in the pairs
    "model.threads": 1024,
    "model.vocab_size": 1 << 18,
    "model.hidden_size": 16384,
    "model.intermediate_size": 65536,
    "model.num_layers": 256,
    "model.num_heads": 256,
    "model.num_kv_heads": 256,
    "env.size": 64,  # FrozenLake side (size x size cells)
    "env.dim": 64,  # Sokoban side / PreferenceEstimation dimensions
    "env.num_boxes": 64,
    "env.num_steps": 100_000,
    "env.search_depth": 100_000,
    "env.max_nodes": 1_000_000,
    "env.max_turn": 100,
    "env.max_actions_per_turn": 100,
    "env.max_actions_per_traj": 10_000,
    "env.num_circuits": 26,
    "env.num_digits": 10,
    "env.num_symbols": 10,
    "env.list_candidates": 100_000,  # circuits are named A..Z
    "env.n_inputs": 8,  # 2^n truth-table rows per candidate formula
    "env.num_items": 10_000,
    "env.oracle_particles": 1_000_000,
    "env.num_seen": 10_000,
    "env.num_candidates": 10_000,
    "env.num_numbers": 6,  # Countdown's solvability search is factorial in it
    "env.max_number": 1_000_000,
    "env.max_target": 1_000_000_000,
    "env.limit": 100_000_000,
    "env.memory_mb": 65536,  # DeepCoder: RLIMIT_AS of one sandboxed run (64 GiB, = sandbox.MAX_MEMORY_MB)
    "env.max_output_bytes": 1 << 26,  # DeepCoder: output held per run, times env.workers (= sandbox.MAX_OUTPUT_BYTES)
    "env.workers": 256,  # DeepCoder: grading threads, each with a sandboxed process
}
#: rows of one iteration (P x G)
MAX_ROWS = 65536
#: tokens one iteration may generate, P x G x env.max_turn x rollout.max_new_tokens (about
#: 16 bytes each for ids, log-probs and masks: 2^26 tokens ~ 1 GiB before any activations)
MAX_ITERATION_TOKENS = 1 << 26
#: positions of the tiny model (``TinyModelConfig.max_position_embeddings``)
TINY_MAX_POSITIONS = 4096


def _get(cfg: DictConfig, key: str):
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def _has(cfg: DictConfig, key: str) -> bool:
    parent, _, leaf = key.rpartition(".")
    node = _get(cfg, parent) if parent else cfg
    return isinstance(node, (DictConfig, Mapping)) and leaf in node


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _limit_error(key: str, value: Any, limit: int) -> ConfigError:
    return ConfigError(f"{key}={value!r} exceeds the limit {limit} (ragen_torchrl.trainer.config_checks.LIMITS)")


def check_positive_int(
    cfg: DictConfig, key: str, *, allow_zero: bool = False, optional: bool = False, maximum: int | None = None
) -> None:
    """``cfg[key]`` is an int >= 1 (>= 0 with ``allow_zero``), at most ``maximum`` (default
    :data:`LIMITS`); ``optional`` lets ``null`` pass."""
    value = _get(cfg, key)
    if optional and value is None:
        return
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ConfigError(f"{key} must be {kind} integer, got {value!r}")
    limit = LIMITS.get(key) if maximum is None else maximum
    if limit is not None and value > limit:
        raise _limit_error(key, value, limit)


def check_probability(cfg: DictConfig, key: str) -> None:
    value = _get(cfg, key)
    if value is None:
        return
    if not _is_number(value) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"{key} must be a probability in [0, 1], got {value!r}")


def check_positive_float(
    cfg: DictConfig, key: str, *, allow_zero: bool = False, maximum: float | None = None, optional: bool = False
) -> None:
    """``cfg[key]`` is a finite number > 0 (>= 0 with ``allow_zero``) and <= ``maximum``."""
    value = _get(cfg, key)
    if optional and value is None:
        return
    if not _is_number(value) or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(
            f"{key} must be a finite {'non-negative' if allow_zero else 'positive'} number, got {value!r}"
        )
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key} must be at most {maximum}, got {value!r}")


def check_float_range(cfg: DictConfig, key: str, low: float, high: float, *, why: str = "") -> None:
    """``cfg[key]``, when present and not null, is a finite number in [low, high]."""
    value = _get(cfg, key)
    if value is None:
        return
    if not _is_number(value) or not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(f"{key} must be a finite number in [{low}, {high}]{why}, got {value!r}")


def check_bool(cfg: DictConfig, key: str, *, optional: bool = True) -> None:
    """``cfg[key]`` is ``true`` or ``false`` (null too when ``optional``): :func:`ragen_torchrl.checks.check_bool`
    on the key's value, raising :class:`ConfigError`."""
    value = _get(cfg, key)
    if value is None and optional:
        return
    checks.check_bool(key, value, error=ConfigError)


def check_choice(cfg: DictConfig, key: str, choices) -> None:
    """``cfg[key]``, when not null, is one of ``choices``: :func:`ragen_torchrl.checks.check_choice` on the key's
    value, raising :class:`ConfigError`."""
    value = _get(cfg, key)
    if value is not None:
        checks.check_choice(key, value, choices, error=ConfigError)


def check_finite(cfg: DictConfig) -> None:
    """Every float anywhere in ``cfg`` is finite (NaN/inf reach the optimizer or the env otherwise).

    Example:
        >>> from omegaconf import OmegaConf
        >>> check_finite(OmegaConf.create({"algo": {"clip_epsilon": [0.2, float("nan")]}}))
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config_checks.ConfigError: algo.clip_epsilon[1] must be a finite number, got nan
    """

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if prefix == "" and k == "hydra":
                    continue
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{prefix}[{i}]")
        elif isinstance(node, float) and not math.isfinite(node):
            raise ConfigError(f"{prefix} must be a finite number, got {node!r}")

    walk(OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False), "")
