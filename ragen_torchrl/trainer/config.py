"""Validation of a composed training config, before any model is built.

Hydra already rejects unknown group options (``env=nope`` lists the available ones);
this catches bad values with a message naming the key.

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

from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """A config value is out of range or of the wrong type."""


def _get(cfg: DictConfig, key: str):
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def check_positive_int(cfg: DictConfig, key: str, *, allow_zero: bool = False) -> None:
    value = _get(cfg, key)
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ConfigError(f"{key} must be {kind} integer, got {value!r}")


def check_probability(cfg: DictConfig, key: str) -> None:
    value = _get(cfg, key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"{key} must be a probability in [0, 1], got {value!r}")


def check_positive_float(cfg: DictConfig, key: str, *, allow_zero: bool = False) -> None:
    value = _get(cfg, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{key} must be a {'non-negative' if allow_zero else 'positive'} number, got {value!r}")


def validate_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` naming the first bad value."""
    for key in ("trainer.prompts_per_iter", "trainer.group_size",
                "trainer.val_levels", "algo.ppo_epochs", "algo.mini_batch_size",
                "rollout.max_new_tokens", "rollout.chunk_size"):
        check_positive_int(cfg, key)
    for key in ("trainer.total_iterations", "trainer.val_every", "trainer.save_every", "sft.steps", "sft.episodes"):
        check_positive_int(cfg, key, allow_zero=True)
    for key in ("env.success_rate", "env.p_frozen", "sft.noise"):
        check_probability(cfg, key)
    for key in ("algo.lr", "sft.lr"):
        check_positive_float(cfg, key)
    for key in ("algo.entropy_coeff", "algo.kl_coeff", "algo.max_grad_norm", "rollout.temperature",
                "trainer.val_temperature"):
        check_positive_float(cfg, key, allow_zero=True)
    if _get(cfg, "diagnostics.mi") is not None:
        check_positive_int(cfg, "diagnostics.mi.every")
        check_positive_int(cfg, "diagnostics.mi.num_pairs")
        from ..diagnostics.cross_scoring import METHODS

        if _get(cfg, "diagnostics.mi.method") not in (None, *METHODS):
            raise ConfigError(f"diagnostics.mi.method must be one of {METHODS}, got {_get(cfg, 'diagnostics.mi.method')!r}")
        dtype = _get(cfg, "diagnostics.mi.dtype")
        if dtype not in (None, "float32", "float64", "bfloat16", "float16"):
            raise ConfigError(f"diagnostics.mi.dtype must be null, float32, float64, bfloat16 or float16, got {dtype!r}")
    if _get(cfg, "sft.noise_kind") not in (None, "uniform", "heuristic"):
        raise ConfigError(f"sft.noise_kind must be 'uniform' or 'heuristic', got {_get(cfg, 'sft.noise_kind')!r}")
    if _get(cfg, "algo.minibatch") not in (None, "group", "row"):
        raise ConfigError(f"algo.minibatch must be 'group' or 'row', got {_get(cfg, 'algo.minibatch')!r}")
    clip = _get(cfg, "algo.clip_epsilon")
    clips = list(clip) if OmegaConf.is_list(clip) or isinstance(clip, (list, tuple)) else [clip]
    if not clips or any(isinstance(c, bool) or not isinstance(c, (int, float)) or c <= 0 for c in clips):
        raise ConfigError(f"algo.clip_epsilon must be a positive number or a pair of them, got {clip!r}")
    if _get(cfg, "model.name_or_path") is None and _get(cfg, "model.name") not in ("tiny", None):
        raise ConfigError("model.name_or_path is required unless model=tiny")
