"""What a training run starts from: the env's constructor arguments and the starting policy.

:func:`prepare_model` builds (or finds) the policy a :class:`~ragen_torchrl.trainer.loop.Trainer`
starts from -- any Hugging Face model by path, or the tiny offline model warm-started on the
env's oracle demonstrations -- so benchmarks can start from exactly the trainer's policy.
:func:`training_memory` / :func:`dry_run_report` size it without loading a weight
(``ragen-train ... trainer.dry_run=true``).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = [
    "ENV_META_KEYS",
    "dry_run_report",
    "env_kwargs",
    "model_architecture",
    "oversubscribed_threads",
    "prepare_model",
    "training_memory",
]

log = logging.getLogger(__name__)

ENV_META_KEYS = ("name",)


def env_kwargs(env_cfg: DictConfig) -> dict[str, Any]:
    """Constructor arguments of the env from its config node (everything but ``name``)."""
    return {k: v for k, v in OmegaConf.to_container(env_cfg, resolve=True).items() if k not in ENV_META_KEYS}


def oversubscribed_threads(threads: int, cpus: int | None = None, load: float | None = None) -> str | None:
    """A warning when ``threads`` torch CPU threads meet more runnable work than this machine has cores.

    Every parallel op of torch waits for all its threads; on a machine already busy with other
    processes (one-minute load average ``load`` plus ``threads`` over ``cpus``), one of them is
    often off its core, so each op waits for a scheduler time slice. Measured on a 2-core machine
    at load 12-18: ``model.threads=2`` took 5-8x the wall time (6x the CPU time) of
    ``model.threads=1`` for the same iteration. ``None`` when one thread or the cores suffice;
    ``cpus``/``load`` default to this machine's (``os.sched_getaffinity``, ``os.getloadavg``).

    Example:
        >>> oversubscribed_threads(1, cpus=2, load=15.0) is None, oversubscribed_threads(2, cpus=8, load=1.0) is None
        (True, True)
        >>> print(oversubscribed_threads(2, cpus=2, load=15.7))
        model.threads=2 on 2 CPU cores with a load average of 15.7: each parallel torch op waits for a thread other processes hold; model.threads=1 is likely faster here
    """
    if threads <= 1:
        return None
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # pragma: no cover (no load average on this platform)
            return None
    if load + threads <= cpus:
        return None
    return (
        f"model.threads={threads} on {cpus} CPU cores with a load average of {load:.1f}: each parallel torch op "
        "waits for a thread other processes hold; model.threads=1 is likely faster here"
    )


def prepare_model(cfg: DictConfig, env) -> str:
    """Directory of the starting policy for ``cfg``: an HF model, or the tiny model, warm-started.

    This is exactly what :class:`Trainer` starts from, so benchmarks can compare against the
    trainer's own policy. The tiny model's tokenizer is trained on ``env``'s text and the warm
    start uses ``env``'s oracle (both cached by config hash under ``cfg.model.cache_dir``).

    Example:
        >>> from hydra import compose, initialize_config_dir
        >>> from ragen_torchrl.trainer.config_paths import CONFIG_DIR
        >>> with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        ...     cfg = compose("config", overrides=["model.name_or_path=/models/qwen", "sft.enabled=false"])
        >>> prepare_model(cfg, env=None)
        '/models/qwen'
    """
    if cfg.model.name_or_path:
        base = str(cfg.model.name_or_path)
    elif cfg.model.get("name") == "smollm2":
        from ..models.smollm2 import build_smollm2

        base = build_smollm2(cfg.model.cache_dir)
    elif cfg.model.get("name") == "tiny_vl":
        from ..models.tiny_vl import TinyVLConfig, build_tiny_vl_model
        from .demonstrations import tokenizer_corpus

        base = build_tiny_vl_model(
            tokenizer_corpus(env), TinyVLConfig.from_model_config(cfg.model), cfg.model.cache_dir
        )
    else:
        from ..models.tiny import TinyModelConfig, build_tiny_model
        from .demonstrations import tokenizer_corpus

        tiny = TinyModelConfig.from_model_config(cfg.model)
        base = build_tiny_model(tokenizer_corpus(env), tiny, cfg.model.cache_dir)
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
            reply_prime=prime_text(bool(cfg.rollout.prime_think)),
        )
        log.info("warm start ready in %.1fs: %s", time.time() - t0, base)
    return base


_DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}


def model_architecture(model_cfg) -> tuple[Any, str]:
    """The transformers config of the policy ``model_cfg`` describes, and where it came from; nothing downloaded.

    In order: ``config.json`` of a local model dir; of a hub model already in the Hugging Face cache;
    ``model.architecture`` (config.json's numbers shipped in a preset, e.g. ``model=qwen2.5-3b``);
    the tiny model's sizes (``model=tiny``). A hub name with none of these is a config error.

    Example:
        >>> config, source = model_architecture({"name": "tiny", "name_or_path": None, "vocab_size": 300,
        ...     "hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2})
        >>> config.model_type, config.num_hidden_layers, source
        ('qwen2', 1, 'model=tiny sizes')
    """
    from transformers import AutoConfig

    from .config_checks import ConfigError

    m = dict(model_cfg)
    name = m["name_or_path"]
    if not name:
        return (
            AutoConfig.for_model(
                "qwen2",
                vocab_size=int(m["vocab_size"]),
                hidden_size=int(m["hidden_size"]),
                intermediate_size=int(m["intermediate_size"]),
                num_hidden_layers=int(m["num_layers"]),
                num_attention_heads=int(m["num_heads"]),
                num_key_value_heads=int(m["num_kv_heads"]),
                tie_word_embeddings=True,
            ),
            "model=tiny sizes",
        )
    path = Path(os.path.expanduser(str(name)))
    if (path / "config.json").is_file():
        return AutoConfig.from_pretrained(str(path)), str(path / "config.json")
    if not path.exists():
        try:  # the Hugging Face cache only: a dry run never downloads
            return AutoConfig.from_pretrained(str(name), local_files_only=True), f"{name} (Hugging Face cache)"
        except (OSError, ValueError):
            pass
    arch = m.get("architecture")
    if arch:
        arch = dict(arch)
        model_type = str(arch.pop("model_type", "qwen2"))
        try:
            return AutoConfig.for_model(model_type, **arch), "model.architecture"
        except (TypeError, ValueError, KeyError) as e:
            raise ConfigError(f"model.architecture: not a transformers config ({e})") from None
    raise ConfigError(
        f"model.name_or_path={name}: trainer.dry_run needs the model's config.json: a local model dir, the "
        "model in the Hugging Face cache, or model.architecture (its numbers, as model=qwen2.5-3b ships them)"
    )


def _dtype_name(model_cfg) -> str:
    """``model.dtype`` as the run would resolve it (``auto``: bfloat16 on CUDA, else float32)."""
    import torch

    dtype = str(model_cfg.dtype)
    if dtype == "auto":
        device = str(model_cfg.device)
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        return "bfloat16" if cuda else "float32"
    if dtype not in _DTYPE_BYTES:
        from .config_checks import ConfigError

        raise ConfigError(f"model.dtype={dtype}: unknown dtype; valid: auto, {', '.join(_DTYPE_BYTES)}")
    return {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)


def training_memory(cfg: DictConfig) -> dict[str, Any]:
    """Bytes the policy's training state needs, from a model built on the meta device (no weight allocated).

    The parameters are counted on ``AutoModelForCausalLM.from_config`` built under
    ``torch.device("meta")`` (tied embeddings once). Gradients and torch's AdamW states
    (``exp_avg``, ``exp_avg_sq``) have the parameters' dtype (``model.dtype``). A KL term
    (``algo.kl_coeff > 0``) adds a frozen reference copy; PPO's separate critic
    (``algo.critic=separate``) is counted as a second trunk with its own gradients and AdamW states.
    Activations, the KV cache and a vLLM engine come on top.

    Returns ``parameters``, ``dtype``, ``bytes_per_param``, ``source`` (see :func:`model_architecture`) and
    the bytes of ``weights``, ``gradients``, ``optimizer``, ``reference``, ``critic`` and ``total``.

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"model": {"name": "tiny", "name_or_path": None, "vocab_size": 300,
        ...     "hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2,
        ...     "device": "cpu", "dtype": "auto"}, "algo": {"name": "grpo", "kl_coeff": 0.0}})
        >>> mem = training_memory(cfg)
        >>> # embedding 300*32 + layer (q, k, v with bias: 1056 + 528 + 528; o 1024; mlp 3*32*64; 2 norms) + norm
        >>> mem["parameters"], mem["dtype"], mem["total"] == 4 * 4 * mem["parameters"]  # weights, grads, 2 states
        (18976, 'float32', True)
    """
    import torch
    from transformers import AutoModelForCausalLM

    config, source = model_architecture(cfg.model)
    dtype = _dtype_name(cfg.model)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    n = sum(p.numel() for p in model.parameters())
    size = _DTYPE_BYTES[dtype]
    algo = cfg.algo
    weights = n * size
    reference = weights if float(algo.kl_coeff) > 0 else 0
    critic = 4 * weights if algo.name == "ppo" and str(algo.critic) == "separate" else 0
    out = {
        "parameters": n,
        "dtype": dtype,
        "bytes_per_param": size,
        "source": source,
        "weights": weights,
        "gradients": weights,
        "optimizer": 2 * weights,
        "reference": reference,
        "critic": critic,
    }
    out["total"] = 4 * weights + reference + critic
    return out


def dry_run_report(cfg: DictConfig) -> str:
    """What ``trainer.dry_run=true`` prints: the policy's size and the memory its training state needs.

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"model": {"name": "tiny", "name_or_path": None, "vocab_size": 300,
        ...     "hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2,
        ...     "device": "cpu", "dtype": "auto"}, "algo": {"name": "grpo", "kl_coeff": 0.0},
        ...     "trainer": {"prompts_per_iter": 2, "group_size": 2}})
        >>> print(dry_run_report(cfg).splitlines()[1])
        parameters: 18,976 (0.00 B), float32 (4 bytes each)
    """
    mem = training_memory(cfg)
    gib = 2.0**30
    name = cfg.model.name_or_path or "the tiny model"
    t = cfg.trainer
    lines = [
        f"dry run: {name} ({mem['source']}), built on the meta device; nothing loaded, nothing trained",
        f"parameters: {mem['parameters']:,} ({mem['parameters'] / 1e9:.2f} B), {mem['dtype']} "
        f"({mem['bytes_per_param']} bytes each)",
        f"  weights         {mem['weights'] / gib:8.2f} GiB",
        f"  gradients       {mem['gradients'] / gib:8.2f} GiB",
        f"  AdamW states    {mem['optimizer'] / gib:8.2f} GiB (exp_avg + exp_avg_sq, {mem['dtype']})",
    ]
    if mem["reference"]:
        lines.append(f"  reference copy  {mem['reference'] / gib:8.2f} GiB (algo.kl_coeff > 0)")
    if mem["critic"]:
        lines.append(f"  critic          {mem['critic'] / gib:8.2f} GiB (separate trunk: weights, grads, AdamW)")
    lines.append(
        f"  total           {mem['total'] / gib:8.2f} GiB per process without FSDP, plus activations, the KV "
        f"cache of {t.prompts_per_iter} x {t.group_size} rollouts and any vLLM engine"
    )
    return "\n".join(lines)
