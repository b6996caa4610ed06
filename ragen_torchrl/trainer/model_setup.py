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
    "warm_start_settings",
]

log = logging.getLogger(__name__)

ENV_META_KEYS = ("name",)


def env_kwargs(env_cfg: DictConfig) -> dict[str, Any]:
    """Constructor arguments of the env from its config node (everything but ``name``)."""
    return {k: v for k, v in OmegaConf.to_container(env_cfg, resolve=True).items() if k not in ENV_META_KEYS}


def warm_start_settings(cfg: DictConfig) -> dict[str, Any]:
    """The ``sft`` settings the warm start is built from and cached under (:func:`~.sft.warm_start`'s
    ``sft_cfg``): the node without ``enabled`` and ``seed_from_run``; with ``sft.seed_from_run`` the run's
    ``seed`` in place of ``sft.seed``, so each run seed has its own warm start (and cache entry), while the
    default keeps one warm start for every run seed.

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"seed": 3, "sft": {"enabled": True, "steps": 5, "seed": 0, "seed_from_run": False}})
        >>> warm_start_settings(cfg)
        {'steps': 5, 'seed': 0}
        >>> cfg.sft.seed_from_run = True
        >>> warm_start_settings(cfg)
        {'steps': 5, 'seed': 3}
    """
    settings = OmegaConf.to_container(cfg.sft, resolve=True)
    settings.pop("enabled", None)
    # left out of the cache key: the key of a warm start cached before the switch existed stays valid
    settings.pop("reply_budget", None)  # a check before training, not part of what is trained
    if settings.pop("seed_from_run", False):
        settings["seed"] = int(cfg.seed)
    return settings


def oversubscribed_threads(threads: int, cpus: int | None = None, load: float | None = None) -> str | None:
    """A warning when ``threads`` torch CPU threads meet more runnable work than this machine has cores.

    Every parallel op of torch waits for all its threads; on a machine already busy with other
    processes (one-minute load average ``load``, rounded, plus ``threads`` over ``cpus``: an idle machine's
    load of a few tenths leaves every core free), one of them is
    often off its core, so each op waits for a scheduler time slice. Measured on a 2-core machine
    at load 12-18: ``model.threads=2`` took 5-8x the wall time (6x the CPU time) of
    ``model.threads=1`` for the same iteration. ``None`` when one thread or the cores suffice;
    ``cpus``/``load`` default to this machine's (``os.sched_getaffinity``, ``os.getloadavg``).

    Example:
        >>> oversubscribed_threads(1, cpus=2, load=15.0) is None, oversubscribed_threads(2, cpus=8, load=1.0) is None
        (True, True)
        >>> oversubscribed_threads(2, cpus=2, load=0.2) is None
        True
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
    if int(load + 0.5) + threads <= cpus:  # rounded half up
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

        sft_cfg = warm_start_settings(cfg)
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
            precision=str(cfg.model.get("precision", "mixed")),
            gradient_checkpointing=bool(cfg.model.get("gradient_checkpointing", False)),
            max_new_tokens=int(cfg.rollout.max_new_tokens),
            reply_budget=str(cfg.sft.get("reply_budget", "warn")),
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


def _dry_run_ranks(cfg) -> int:
    """Ranks the dry run sizes for: ``trainer.dry_run_ranks``, else torchrun's ``WORLD_SIZE``, else 1."""
    ranks = OmegaConf.select(cfg, "trainer.dry_run_ranks", default=None)
    if ranks is None:
        ranks = os.environ.get("WORLD_SIZE", "1")
    try:
        ranks = int(ranks)
    except (TypeError, ValueError):
        ranks = 0
    if ranks < 1:
        from .config_checks import ConfigError

        raise ConfigError(f"trainer.dry_run_ranks (or WORLD_SIZE) must be a positive integer, got {ranks!r}")
    return ranks


def _lora_parameters(model, lora_cfg) -> int:
    """Adapter parameters peft adds: ``rank x (in + out)`` for each ``nn.Linear`` named in ``target_modules``."""
    import torch

    targets = set(lora_cfg.get("target_modules") or [])
    rank = int(lora_cfg.get("rank", 16))
    return sum(
        rank * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets
    )


#: values a decoder layer keeps for its backward, per token: ``8 x hidden + 4 x intermediate`` (the two
#: norms' inputs and outputs, q / k / v and the attention output, the residual; the MLP's gate, up,
#: activated gate and product), in the compute dtype; fused SDPA keeps no ``seq x seq`` matrix
ACTIVATION_HIDDEN_FACTOR, ACTIVATION_INTERMEDIATE_FACTOR = 8, 4

#: bytes per vocabulary entry per token of the scored logits: float32 logits and their log-softmax
LOGIT_BYTES = 8


def training_memory(cfg: DictConfig) -> dict[str, Any]:
    """Bytes a training run of ``cfg`` needs per rank, from a model built on the meta device (nothing allocated).

    ``n`` parameters (tied embeddings once) of a model in the compute dtype ``model.dtype`` (``c``
    bytes; ``auto``: bfloat16 on CUDA, else float32). Under ``model.precision=mixed`` with ``c < 4``
    the trained parameters also have float32 master weights, and their gradients and AdamW's two
    moments are float32; otherwise (``pure``, or float32 compute) gradients and moments have the
    parameters' dtype. With LoRA (``model.lora.enabled``) only the adapters train (their parameters
    ``rank x (in + out)`` per target ``Linear``), and the reference is the base with the adapters
    off (no copy); without it a KL term (``algo.kl_coeff > 0``) keeps a frozen copy in ``c``. PPO's
    separate critic (``algo.critic=separate``) is a second trunk with the policy's training state.

    Shapes: one sequence is ``T = prompt + turns x max_new_tokens`` tokens (``trainer.dry_run_prompt_tokens``
    for the prompt and the observations, ``env.max_turn``, ``rollout.max_new_tokens``). A training
    pass holds ``b`` rows (``algo.micro_batch_size``, else ``ceil(algo.mini_batch_size / ranks)``), its
    activations are, per layer, ``b x T x (8 x hidden + 4 x intermediate) x c`` bytes
    (:data:`ACTIVATION_HIDDEN_FACTOR`), or with ``model.gradient_checkpointing`` each layer's input
    ``b x T x hidden x c`` plus one layer recomputed in full, and the logits add ``b x T x vocab x 8``
    (float32 logits and log-softmax). The KV cache of the rollouts holds ``rows = min(rollout.chunk_size,
    prompts_per_iter x group_size / ranks)`` rows of ``T`` tokens: ``rows x T x layers x 2 x kv_heads
    x head_dim x c``. Under ``trainer.fsdp`` the parameters, master weights, gradients, moments, the
    reference and the critic are sharded over the ranks (``trainer.dry_run_ranks``, else ``WORLD_SIZE``,
    else 1); activations, logits and the KV cache are per rank. ``total`` adds everything (an upper
    bound: the rollout's cache and the training activations do not coexist).

    Returns ``parameters``, ``trainable``, ``dtype``, ``bytes_per_param``, ``mixed``, ``ranks``, ``fsdp``,
    ``source`` (see :func:`model_architecture`), the shapes (``seq_tokens``, ``train_rows``,
    ``rollout_rows``) and per-rank bytes of ``weights``, ``master``, ``gradients``, ``optimizer``,
    ``reference``, ``critic``, ``activations``, ``activations_checkpointed``, ``logits``, ``kv_cache``
    and ``total`` (with the activations of the configured ``model.gradient_checkpointing``).

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"model": {"name": "tiny", "name_or_path": None, "vocab_size": 300,
        ...     "hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2,
        ...     "device": "cpu", "dtype": "auto"}, "algo": {"name": "grpo", "kl_coeff": 0.0}})
        >>> mem = training_memory(cfg)
        >>> # embedding 300*32 + layer (q, k, v with bias: 1056 + 528 + 528; o 1024; mlp 3*32*64; 2 norms) + norm
        >>> mem["parameters"], mem["dtype"], mem["weights"] + mem["gradients"] + mem["optimizer"] == 16 * 18976
        (18976, 'float32', True)
    """
    import math

    import torch
    from transformers import AutoModelForCausalLM

    config, source = model_architecture(cfg.model)
    dtype = _dtype_name(cfg.model)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    n = sum(p.numel() for p in model.parameters())
    c = _DTYPE_BYTES[dtype]
    mcfg, algo = cfg.model, cfg.algo
    mixed = str(mcfg.get("precision", "mixed")) == "mixed" and c < 4
    lora_cfg = mcfg.get("lora") or {}
    lora = bool(lora_cfg.get("enabled", False))
    trainable = _lora_parameters(model, lora_cfg) if lora else n
    ranks = _dry_run_ranks(cfg)
    fsdp = bool(OmegaConf.select(cfg, "trainer.fsdp", default=False)) and ranks > 1
    shard = ranks if fsdp else 1
    state = 4 if mixed else c  # bytes of a gradient and of each AdamW moment
    weights = (n + (trainable if lora else 0)) * c
    master = trainable * 4 if mixed else 0
    gradients = trainable * state
    optimizer = 2 * trainable * state
    reference = n * c if float(algo.get("kl_coeff", 0.0)) > 0 and not lora else 0
    critic = (
        (weights + master + gradients + optimizer)
        if algo.get("name") == "ppo" and str(algo.get("critic", "")) == "separate"
        else 0
    )
    # the shapes
    hidden, inter = int(config.hidden_size), int(config.intermediate_size)
    layers, vocab = int(config.num_hidden_layers), int(config.vocab_size)
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    t = cfg.get("trainer") or {}
    rollout = cfg.get("rollout") or {}
    env = cfg.get("env") or {}
    prompt = int(t.get("dry_run_prompt_tokens", 512))
    seq = prompt + int(env.get("max_turn", 1) or 1) * int(rollout.get("max_new_tokens", 48))
    rows_total = int(t.get("prompts_per_iter", 1)) * int(t.get("group_size", 1))
    micro = algo.get("micro_batch_size")
    train_rows = int(micro) if micro else math.ceil(int(algo.get("mini_batch_size", rows_total)) / ranks)
    rollout_rows = min(int(rollout.get("chunk_size", 128)), math.ceil(rows_total / ranks))
    per_layer = train_rows * seq * (ACTIVATION_HIDDEN_FACTOR * hidden + ACTIVATION_INTERMEDIATE_FACTOR * inter) * c
    activations = layers * per_layer
    activations_checkpointed = layers * train_rows * seq * hidden * c + per_layer
    logits = train_rows * seq * vocab * LOGIT_BYTES
    kv_cache = rollout_rows * seq * layers * 2 * kv_heads * head_dim * c
    out = {
        "parameters": n,
        "trainable": trainable,
        "dtype": dtype,
        "bytes_per_param": c,
        "mixed": mixed,
        "ranks": ranks,
        "fsdp": fsdp,
        "source": source,
        "seq_tokens": seq,
        "train_rows": train_rows,
        "rollout_rows": rollout_rows,
        "weights": weights // shard,
        "master": master // shard,
        "gradients": gradients // shard,
        "optimizer": optimizer // shard,
        "reference": reference // shard,
        "critic": critic // shard,
        "activations": activations,
        "activations_checkpointed": activations_checkpointed,
        "logits": logits,
        "kv_cache": kv_cache,
    }
    checkpointing = bool(mcfg.get("gradient_checkpointing", False))
    sharded = ("weights", "master", "gradients", "optimizer", "reference", "critic")
    out["total"] = (
        sum(out[k] for k in sharded) + (activations_checkpointed if checkpointing else activations) + logits + kv_cache
    )
    out["checkpointing"] = checkpointing
    return out


def dry_run_report(cfg: DictConfig) -> str:
    """What ``trainer.dry_run=true`` prints: the policy's size and, per rank, the memory of each part of a
    training run (see :func:`training_memory` for the formulas).

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"model": {"name": "tiny", "name_or_path": None, "vocab_size": 300,
        ...     "hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 4, "num_kv_heads": 2,
        ...     "device": "cpu", "dtype": "auto"}, "algo": {"name": "grpo", "kl_coeff": 0.0},
        ...     "trainer": {"prompts_per_iter": 2, "group_size": 2}})
        >>> print(dry_run_report(cfg).splitlines()[1])
        parameters: 18,976 (0.00 B), float32 (4 bytes each), all trained
    """
    mem = training_memory(cfg)
    gib = 2.0**30
    name = cfg.model.name_or_path or "the tiny model"
    dtype = mem["dtype"]
    state = "float32" if mem["mixed"] else dtype
    trained = "all trained" if mem["trainable"] == mem["parameters"] else f"{mem['trainable']:,} trained (LoRA)"
    where = (
        f"per rank of {mem['ranks']} (FSDP: parameters and optimizer state sharded)"
        if mem["fsdp"]
        else f"per rank ({mem['ranks']} rank{'s' if mem['ranks'] > 1 else ''}, nothing sharded)"
    )
    ck = " (model.gradient_checkpointing)" if mem["checkpointing"] else ""
    rows = [
        ("weights", mem["weights"], f"{dtype}, the compute copy"),
        ("master weights", mem["master"], "float32 (model.precision=mixed)" if mem["mixed"] else ""),
        ("gradients", mem["gradients"], state),
        ("AdamW moments", mem["optimizer"], f"exp_avg + exp_avg_sq, {state}"),
        ("reference", mem["reference"], f"{dtype} (algo.kl_coeff > 0)"),
        ("critic", mem["critic"], "separate trunk: its weights and training state"),
        (
            "activations",
            mem["activations_checkpointed"] if mem["checkpointing"] else mem["activations"],
            f"{mem['train_rows']} rows x {mem['seq_tokens']} tokens{ck}; "
            f"{mem['activations'] / gib:.2f} GiB without checkpointing, "
            f"{mem['activations_checkpointed'] / gib:.2f} GiB with",
        ),
        ("logits", mem["logits"], "float32 logits + log-softmax"),
        ("KV cache", mem["kv_cache"], f"{mem['rollout_rows']} rollout rows x {mem['seq_tokens']} tokens, {dtype}"),
    ]
    lines = [
        f"dry run: {name} ({mem['source']}), built on the meta device; nothing loaded, nothing trained",
        f"parameters: {mem['parameters']:,} ({mem['parameters'] / 1e9:.2f} B), {dtype} "
        f"({mem['bytes_per_param']} bytes each), {trained}",
        f"memory {where}:",
    ]
    lines += [f"  {label:<16}{b / gib:8.2f} GiB  {note}".rstrip() for label, b, note in rows if b]
    lines.append(f"  {'total':<16}{mem['total'] / gib:8.2f} GiB  (an upper bound; plus any vLLM engine)")
    return "\n".join(lines)
