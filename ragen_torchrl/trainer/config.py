"""Validation of a composed training config, before any model is built.

:func:`validate_config` is the first thing :class:`~ragen_torchrl.trainer.loop.Trainer`
does, and ``ragen-train`` / ``ragen-sft`` run it once more before Hydra creates the run
dir; every failure is a :class:`ConfigError` naming the key and the bad value, and the
CLI exits with status 2. It returns the typed config (:mod:`~ragen_torchrl.trainer.config_schema`:
one dataclass per group, every default filled in) the trainer reads. In order, it checks:

* **moved and unknown keys** (:func:`~ragen_torchrl.trainer.config_keys.check_unknown_keys`): a key
  that moved (``algo.ppo_epochs``, ``filter.val_stop``, ...) names its new place; every other key
  must be a field of the schema. Hydra's struct mode already rejects ``foo=1``; this also rejects
  ``+foo=1`` (Hydra's explicit "add a key" syntax), which would otherwise be silently ignored.
* **finiteness**: every float anywhere in the config is finite (NaN and inf are rejected).
* **types** (:func:`~ragen_torchrl.trainer.config_typing.typed_config`): one merge onto the
  dataclasses converts every value to its field's type (``seed=abc`` fails here).
* **each field's own check** (:func:`~ragen_torchrl.trainer.config_typing.check_fields`): ranges
  written next to the field: learning rates in (0, 1], probabilities in [0, 1], penalties <= 0,
  choices, and every size-like key bounded by :data:`LIMITS` (``env.size=100000`` would allocate
  10^10 cells).
* **relations between fields**: clip ranges, T3 on an env without a stall rule, GSPO with a token-level dual
  clip, the SNR filter's value range (RAGEN-2 §3.3, checked once here), the tokens one iteration
  can generate and the tiny model's training memory (:func:`estimate_iteration_tokens`).
* **paths** (:func:`~ragen_torchrl.trainer.config_paths.check_paths`): the model source exists (or, for a hub name, is cached or
  the hub is reachable), the cache and run dirs are writable, a resumed run dir holds a
  checkpoint. Nothing is created on disk.

Example:
    >>> from omegaconf import OmegaConf
    >>> try:
    ...     check_env(OmegaConf.create({"env": {"name": "guess_numbers", "num_digits": 4, "num_symbols": 3}}))
    ... except ConfigError as e:
    ...     print(e)
    env.num_digits (4) must be at most env.num_symbols (3): the code's digits are distinct
"""

from __future__ import annotations

import math
import os

from omegaconf import DictConfig, ListConfig

from .config_checks import (
    LIMITS,
    MAX_ITERATION_TOKENS,
    MAX_ROWS,
    TINY_MAX_POSITIONS,
    ConfigError,
    _get,
    _has,
    _is_number,
    _limit_error,
    check_finite,
    check_positive_float,
    check_positive_int,
)
from .config_keys import check_unknown_keys
from .config_paths import check_paths
from .config_typing import check_fields, typed_config

#: model presets that build their policy when ``model.name_or_path`` is null
BUILT_MODELS = ("tiny", "tiny_vl", "smollm2", None)


# ----------------------------------------------------------------------------- ranges
def check_clip_epsilon(cfg: DictConfig) -> None:
    """``algo.clip_epsilon``: a number or a ``(low, high)`` pair, ``low`` in (0, 1) (the ratio's
    lower bound ``1 - low`` must stay positive) and ``high`` in (0, 1]. GSPO's tiny sequence
    ranges (3e-4, 4e-4) are fine; ``5`` (or ``20`` for 0.2) is a mistake."""
    clip = _get(cfg, "algo.clip_epsilon")
    if clip is None:
        return
    clips = list(clip) if isinstance(clip, (ListConfig, list, tuple)) else [clip]
    if len(clips) not in (1, 2) or any(not _is_number(c) or not math.isfinite(c) or c <= 0 for c in clips):
        raise ConfigError(f"algo.clip_epsilon must be a positive number or a pair (low, high) of them, got {clip!r}")
    low, high = clips[0], clips[-1]
    if low >= 1:
        raise ConfigError(
            f"algo.clip_epsilon low must be < 1 (the ratio's lower clip 1 - low must stay > 0), got {clip!r}"
        )
    if high > 1:
        raise ConfigError(
            f"algo.clip_epsilon high must be <= 1 (a ratio clip above 2 is almost always a typo, "
            f"e.g. 20 for 0.2), got {clip!r}"
        )


def check_algo(cfg: DictConfig) -> None:
    """Relations within the ``algo`` node (each field's own range is checked next to the field)."""
    if _get(cfg, "algo") is None:
        return
    name = str(_get(cfg, "algo.name") or "grpo").lower()
    # GRPO/DAPO/GSPO divide by std + eps: eps = 0 turns a constant group into 0/0
    check_positive_float(cfg, "algo.adv_eps", allow_zero=name not in ("grpo", "dapo", "gspo"), maximum=1.0)
    check_clip_epsilon(cfg)
    dual = _get(cfg, "algo.dual_clip")
    if dual is not None and (not _is_number(dual) or not math.isfinite(dual) or not dual > 1):
        # verl's dual-clip bound c must exceed 1 (objectives.base.check_dual_clip, checked again below)
        raise ConfigError(
            f"algo.dual_clip must be null (off) or a finite number > 1 (the reference uses 3.0), got {dual!r}"
        )
    if name == "gspo" and dual is not None:
        raise ConfigError(
            f"algo.dual_clip is a token-level option; GSPO clips the sequence ratio and takes null, got {dual!r}"
        )
    if name == "drgrpo" and _get(cfg, "algo.max_length") is None:
        raise ConfigError("algo.max_length (L_max, the generation budget of a trajectory) is required for drgrpo")
    if _get(cfg, "algo.overlong.enabled"):
        l_max = _get(cfg, "algo.overlong.max_length") or _get(cfg, "algo.max_length")
        if l_max is None:
            raise ConfigError(
                "algo.overlong.enabled needs algo.overlong.max_length or algo.max_length (L_max, the generation budget)"
            )
        check_positive_int(cfg, "algo.overlong.cache_length", allow_zero=True, maximum=int(l_max))


def check_algo_options(cfg: DictConfig) -> None:
    """The ``algo`` checks that need the objectives package (torchrl): the algorithm name and
    the dual-clip bound, with the objectives' own helpers."""
    if _get(cfg, "algo") is None:
        return
    from ..objectives import available_algorithms
    from ..objectives.base import check_dual_clip

    name = str(_get(cfg, "algo.name") or "grpo").lower()
    known = available_algorithms()  # the built-in algorithms and any registered with register_algorithm
    if name not in known:
        raise ConfigError(f"algo.name must be one of {', '.join(known)}, got {name!r}")
    try:
        check_dual_clip(_get(cfg, "algo.dual_clip"))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_env(cfg: DictConfig) -> None:
    """Relations within the ``env`` node (each field's own range is checked next to the field)."""
    if _get(cfg, "env") is None:
        return
    digits, symbols = _get(cfg, "env.num_digits"), _get(cfg, "env.num_symbols")
    if isinstance(digits, int) and isinstance(symbols, int) and digits > symbols:
        raise ConfigError(
            f"env.num_digits ({digits}) must be at most env.num_symbols ({symbols}): the code's digits are distinct"
        )
    size = _get(cfg, "env.size")
    if isinstance(size, int) and size < 2:
        raise ConfigError(f"env.size must be at least 2 (a start and a goal cell), got {size!r}")
    dim = _get(cfg, "env.dim")
    if dim is not None:
        dims = list(dim) if isinstance(dim, (ListConfig, list, tuple)) else [dim]
        limit = LIMITS["env.dim"]
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
            raise ConfigError(f"env.dim must be a positive integer or a (height, width) pair of them, got {dim!r}")
        if any(d > limit for d in dims):
            raise _limit_error("env.dim", dim, limit)


def estimate_iteration_tokens(cfg: DictConfig) -> int:
    """Upper bound of the tokens one training iteration generates: P x G x max_turn x max_new_tokens.

    Example:
        >>> from omegaconf import OmegaConf
        >>> estimate_iteration_tokens(OmegaConf.create({"trainer": {"prompts_per_iter": 16, "group_size": 4},
        ...     "env": {"max_turn": 5}, "rollout": {"max_new_tokens": 48}}))
        15360
    """
    p = int(_get(cfg, "trainer.prompts_per_iter") or 1)
    g = int(_get(cfg, "trainer.group_size") or 1)
    turns = int(_get(cfg, "env.max_turn") or 1)
    return p * g * turns * int(_get(cfg, "rollout.max_new_tokens") or 1)


def estimate_tiny_model_bytes(cfg: DictConfig) -> int:
    """Training memory of the tiny model: parameters x 16 bytes (fp32 weights, gradients and
    AdamW's two moments); 0 when a pretrained model is used."""
    m = _get(cfg, "model")
    if m is None or _get(cfg, "model.name_or_path") or _get(cfg, "model.hidden_size") is None:
        return 0
    h, v = int(m.hidden_size), int(m.vocab_size)
    inter, layers = int(m.intermediate_size), int(m.num_layers)
    kv = h // max(int(m.num_heads), 1) * int(m.num_kv_heads)
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h
    return 16 * (2 * v * h + layers * per_layer)


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None


def check_sizes(cfg: DictConfig) -> None:
    """Relations between sizes: rows per iteration, generated tokens, the tiny model's positions
    and its training memory against this machine's RAM."""
    p, g = _get(cfg, "trainer.prompts_per_iter"), _get(cfg, "trainer.group_size")
    if p * g > MAX_ROWS:
        raise ConfigError(
            f"trainer.prompts_per_iter x trainer.group_size = {p} x {g} = {p * g} rows per iteration "
            f"exceeds the limit {MAX_ROWS}"
        )
    tokens = estimate_iteration_tokens(cfg)
    if tokens > MAX_ITERATION_TOKENS:
        raise ConfigError(
            f"one iteration may generate trainer.prompts_per_iter x trainer.group_size x env.max_turn x "
            f"rollout.max_new_tokens = {tokens:,} tokens (about {tokens * 16 / 2**30:.1f} GiB of ids and "
            f"log-probs), over the limit {MAX_ITERATION_TOKENS:,}: lower one of them"
        )
    tiny = _get(cfg, "model.hidden_size") is not None and not _get(cfg, "model.name_or_path")
    if tiny:
        generated = int(_get(cfg, "env.max_turn") or 1) * int(_get(cfg, "rollout.max_new_tokens"))
        if generated > TINY_MAX_POSITIONS:
            raise ConfigError(
                f"env.max_turn x rollout.max_new_tokens = {generated} tokens per trajectory exceeds the "
                f"tiny model's {TINY_MAX_POSITIONS} positions"
            )
        hidden, heads, kv = (_get(cfg, k) for k in ("model.hidden_size", "model.num_heads", "model.num_kv_heads"))
        if hidden % heads:
            raise ConfigError(f"model.hidden_size={hidden} must be divisible by model.num_heads={heads}")
        if heads % kv:
            raise ConfigError(f"model.num_heads={heads} must be divisible by model.num_kv_heads={kv}")
        need, ram = estimate_tiny_model_bytes(cfg), _physical_memory()
        if ram and need > ram // 2:
            raise ConfigError(
                f"the tiny model (model.vocab_size/hidden_size/intermediate_size/num_layers) needs about "
                f"{need / 2**30:.1f} GiB to train, more than half of this machine's "
                f"{ram / 2**30:.1f} GiB"
            )


def check_t3(cfg: DictConfig) -> None:
    """``t3.enabled`` needs an env with a T3 stall rule (the active-reasoning envs); the options
    are checked by building the rule (:func:`~ragen_torchrl.transforms.t3_rules.make_rule`)."""
    if not _get(cfg, "t3.enabled"):
        return
    from .. import envs
    from ..transforms.t3 import ENV_TASKS
    from ..transforms.t3_rules import make_rule

    env_name = str(_get(cfg, "env.name"))
    builder = envs.env_builder(env_name)
    task = (
        getattr(builder, "task_name", "") or ENV_TASKS.get(env_name) or ENV_TASKS.get(env_name.removesuffix("_small"))
    )
    if not task:
        t3_envs = sorted(
            {n for n in envs.available_envs() if getattr(envs.env_builder(n), "task_name", "")} | set(ENV_TASKS)
        )
        raise ConfigError(
            f"t3.enabled=true needs an env with a T3 stall rule ({', '.join(t3_envs)}); env.name={env_name} has none"
        )
    try:
        make_rule(
            task,
            k=_get(cfg, "t3.k"),
            cumulative=_get(cfg, "t3.cumulative"),
            outside_trigger=bool(_get(cfg, "t3.outside_trigger")),
            rule=_get(cfg, "t3.rule"),
        )
    except ValueError as e:
        raise ConfigError(f"t3: {e}") from None


# ----------------------------------------------------------------------------- entry point
def check_rollout_sampling(cfg: DictConfig) -> None:
    """``rollout.top_k`` / ``top_p`` / ``min_p``: valid values, and no truncation of the sampling distribution.

    The behaviour log-probs and the losses score the policy's full softmax; a truncated sampler
    would draw from another distribution than the one whose importance ratio is computed, so it is
    refused rather than silently biasing the update.

    Example:
        >>> from omegaconf import OmegaConf
        >>> try:
        ...     check_rollout_sampling(OmegaConf.create({"rollout": {"top_k": 50}}))
        ... except ConfigError as e:
        ...     print(str(e)[:55])
        rollout.top_k=50 truncates the sampling distribution, b
    """
    from ..rollout_options import check_sampling, sampling_truncation

    top_k, top_p, min_p = (_get(cfg, f"rollout.{k}") for k in ("top_k", "top_p", "min_p"))
    top_p = 1.0 if top_p is None else top_p
    try:
        check_sampling(top_k, top_p, min_p)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    truncation = sampling_truncation(top_k, top_p, min_p)
    if truncation is not None:
        raise ConfigError(
            f"rollout.{truncation} truncates the sampling distribution, but the behaviour log-probs and the "
            "losses use the policy's full softmax: the samples would not come from the policy that is trained. "
            "Keep rollout.top_k=null, rollout.top_p=1.0, rollout.min_p=null"
        )


def check_lora(cfg: DictConfig) -> None:
    """``model.lora.enabled`` trains adapters injected into the rollout model itself: it needs
    ``rollout.backend=hf`` (a vLLM engine would be fed base weights) and ``trainer.fsdp=false``, and
    ``peft`` installed."""
    if not _get(cfg, "model.lora.enabled"):
        return
    if _get(cfg, "rollout.backend") != "hf":
        raise ConfigError("model.lora.enabled=true needs rollout.backend=hf (the adapters live in the training model)")
    if _get(cfg, "trainer.fsdp"):
        raise ConfigError(
            "model.lora.enabled=true with trainer.fsdp=true is not supported: train the adapters on one rank"
        )
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        raise ConfigError("model.lora.enabled=true needs peft: pip install peft")


def check_rollout_backend(cfg: DictConfig) -> None:
    """``rollout.backend``: ``hf`` (transformers ``generate`` through torchrl's ``TransformersWrapper``,
    the default) or ``vllm`` (a vLLM engine that the trainer keeps in sync with the training model, in
    either ``rollout.trajectory`` mode: :mod:`ragen_torchrl.collectors.vllm_backend`), which needs the ``vllm``
    extra and a CUDA GPU: both are checked here, before any model is loaded (the choice itself is
    :class:`~ragen_torchrl.trainer.config_schema.RolloutConfig`'s)."""
    if _get(cfg, "rollout.backend") != "vllm":
        return
    metric = _get(cfg, "filter.metric")
    if _get(cfg, "filter.enabled") and metric in ("entropy", "entropy_std", "entropy_variance"):
        # the HF path records token entropy from generate's logits; vLLM's engine returns none
        raise ConfigError(
            f"filter.metric={metric} ranks groups by generation entropy, which rollout.backend=vllm does not "
            "record (the column would be 0); use rollout.backend=hf for the entropy ablations"
        )
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "rollout.backend=vllm needs vLLM: pip install 'ragen_torchrl[vllm]' (on a machine with a CUDA GPU); "
            "rollout.backend=hf (the default) generates with transformers"
        )
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("rollout.backend=vllm needs a CUDA GPU (none is visible); use rollout.backend=hf on CPU")
    device = str(_get(cfg, "model.device") or "auto")
    if not (device == "auto" or device.startswith("cuda")):
        raise ConfigError(
            f"rollout.backend=vllm runs its engine on the GPU beside the training model; model.device={device} "
            "keeps the model on the CPU (use model.device=cuda or auto, or rollout.backend=hf)"
        )


def validate_config(cfg: DictConfig) -> DictConfig:
    """The typed config (:func:`~ragen_torchrl.trainer.config_typing.typed_config`) of ``cfg``, or
    :class:`ConfigError` naming the first bad value (see the module docstring).

    Nothing is built or written: this runs before any env, model or run dir exists. The filter
    node is checked here, once (``transforms.snr.validate_filter_config``).

    Example:
        >>> from hydra import compose, initialize_config_dir
        >>> from ragen_torchrl.trainer.config_paths import CONFIG_DIR
        >>> with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        ...     cfg = validate_config(compose("config", overrides=["sft.enabled=false", "model.cache_dir=/tmp/rt"]))
        >>> cfg.algo.update_epochs, cfg.trainer.early_stop.max_consecutive_empty
        (1, 5)
    """
    check_unknown_keys(cfg)
    check_finite(cfg)
    typed = typed_config(cfg)
    check_fields(typed)
    # cheap relations first (no torch import): most mistakes are reported within a second
    shards = _get(typed, "rollout.shards")
    if shards is not None and shards > typed.trainer.prompts_per_iter:
        raise ConfigError(
            f"rollout.shards={shards} exceeds trainer.prompts_per_iter={typed.trainer.prompts_per_iter}: "
            "every part collects at least one prompt group"
        )
    check_rollout_sampling(typed)
    check_algo(typed)
    check_env(typed)
    tiny = not _get(typed, "model.name_or_path")
    if tiny and _has(typed, "model.hidden_size"):
        for key in (
            "model.vocab_size",
            "model.hidden_size",
            "model.intermediate_size",
            "model.num_layers",
            "model.num_heads",
            "model.num_kv_heads",
        ):
            check_positive_int(typed, key)
    check_sizes(typed)
    if _get(typed, "model.name_or_path") is None and _get(typed, "model.name") not in BUILT_MODELS:
        raise ConfigError("model.name_or_path is required unless model=tiny, model=tiny_vl or model=smollm2")
    if _get(typed, "model.name") == "smollm2" and _get(typed, "model.name_or_path") is None:
        from ..models.smollm2 import smollm2_missing

        missing = smollm2_missing()
        if missing and not _get(typed, "trainer.dry_run"):
            raise ConfigError(missing)
    check_lora(typed)
    check_paths(typed)
    # then the checks that import torch / torchrl (a few seconds)
    check_rollout_backend(typed)
    check_algo_options(typed)
    from ..models.loading import resolve_device

    try:
        resolve_device(str(typed.model.device), str(typed.model.dtype))
    except (ValueError, RuntimeError) as e:
        raise ConfigError(str(e)) from None
    from ..transforms.snr import validate_filter_config

    try:
        validate_filter_config(typed.filter)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_t3(typed)
    return typed
