"""What a training run starts from: the env's constructor arguments and the starting policy.

:func:`prepare_model` builds (or finds) the policy a :class:`~ragen_torchrl.trainer.loop.Trainer`
starts from -- any Hugging Face model by path, or the tiny offline model warm-started on the
env's oracle demonstrations -- so benchmarks can start from exactly the trainer's policy.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["ENV_META_KEYS", "env_kwargs", "prepare_model"]

log = logging.getLogger(__name__)

ENV_META_KEYS = ("name",)


def env_kwargs(env_cfg: DictConfig) -> dict[str, Any]:
    """Constructor arguments of the env from its config node (everything but ``name``)."""
    return {k: v for k, v in OmegaConf.to_container(env_cfg, resolve=True).items() if k not in ENV_META_KEYS}


def prepare_model(cfg: DictConfig, env) -> str:
    """Directory of the starting policy for ``cfg``: an HF model, or the tiny model, warm-started.

    This is exactly what :class:`Trainer` starts from, so benchmarks can compare against the
    trainer's own policy. The tiny model's tokenizer is trained on ``env``'s text and the warm
    start uses ``env``'s oracle (both cached by config hash under ``cfg.model.cache_dir``).

    Example:
        >>> from hydra import compose, initialize_config_dir
        >>> from ragen_torchrl.trainer.cli import CONFIG_DIR
        >>> with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        ...     cfg = compose("config", overrides=["model.name_or_path=/models/qwen", "sft.enabled=false"])
        >>> prepare_model(cfg, env=None)
        '/models/qwen'
    """
    if cfg.model.get("name_or_path"):
        base = str(cfg.model.name_or_path)
    else:
        from ..models.tiny import TinyModelConfig, build_tiny_model
        from .demonstrations import tokenizer_corpus

        m = cfg.model
        tiny = TinyModelConfig(
            vocab_size=m.vocab_size,
            hidden_size=m.hidden_size,
            intermediate_size=m.intermediate_size,
            num_layers=m.num_layers,
            num_heads=m.num_heads,
            num_kv_heads=m.num_kv_heads,
        )
        base = build_tiny_model(tokenizer_corpus(env), tiny, m.cache_dir)
    if cfg.sft.enabled and cfg.sft.steps > 0:
        from ..models.priming import prime_text
        from .sft import warm_start

        sft_cfg = OmegaConf.to_container(cfg.sft, resolve=True)
        sft_cfg.pop("enabled", None)
        t0 = time.time()
        # demonstrations come from the untransformed env (T3 only shapes RL rollouts)
        base = warm_start(
            base,
            env,
            sft_cfg,
            cfg.model.cache_dir,
            cfg.model.device,
            cfg.model.dtype,
            env_kwargs(cfg.env),
            reply_prime=prime_text(bool(cfg.rollout.get("prime_think", True))),
        )
        log.info("warm start ready in %.1fs: %s", time.time() - t0, base)
    return base
