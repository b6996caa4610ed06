"""Validation of a composed training config, before any model is built.

:func:`validate_config` is the first thing :class:`~ragen_torchrl.trainer.loop.Trainer`
does, and ``ragen-train`` / ``ragen-sft`` run it once more before Hydra creates the run
dir; every failure is a :class:`ConfigError` naming the key and the bad value, and the
CLI exits with status 2. In order, it checks:

* **unknown keys** (:func:`~ragen_torchrl.trainer.config_keys.check_unknown_keys`): every key must be one the config files
  define (``configs/config.yaml`` and the files of the selected group options).
  Hydra's struct mode already rejects ``foo=1``; this also rejects ``+foo=1`` (Hydra's
  explicit "add a key" syntax), which would otherwise be silently ignored.
* **types and finiteness**: every float anywhere in the config is finite (NaN and inf
  are rejected); integers are integers (``seed=abc`` fails here); booleans are booleans.
* **ranges**: learning rates in (0, 1], probabilities in [0, 1], penalties <= 0, clip
  ranges in (0, 1), dual-clip > 1, the SNR filter's value range (RAGEN-2 §3.3), ...
* **nonsense combinations**: a group of one sample for a group-relative algorithm (every
  advantage would be 0), T3 on an env without a stall rule, DAPO's dynamic-sampling
  criterion, GSPO with a token-level dual clip.
* **sizes** (:data:`LIMITS`, :func:`estimate_iteration_tokens`): every size-like key is
  bounded (``env.size=100000`` would allocate 10^10 cells), and so are the tokens one
  iteration can generate and the tiny model's training memory.
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
import tempfile  # noqa: F401 (tests patch tempfile.mkstemp through this module)

from omegaconf import DictConfig, ListConfig

# the vocabulary, the unknown-key check and the path checks live in their own modules; they are
# re-exported here, where every caller has always imported them from
from .config_checks import (  # noqa: F401
    LIMITS,
    MAX_ITERATION_TOKENS,
    MAX_ROWS,
    OPTIONAL_KEYS,
    TINY_MAX_POSITIONS,
    ConfigError,
    MissingPathError,
    _get,
    _has,
    _is_number,
    _limit_error,
    check_bool,
    check_choice,
    check_finite,
    check_float_range,
    check_positive_float,
    check_positive_int,
    check_probability,
)
from .config_keys import GLOBAL_PACKAGE, allowed_keys, check_unknown_keys, config_schema, unknown_keys  # noqa: F401
from .config_paths import check_paths, check_resume, check_run_dir, check_writable_dir  # noqa: F401

#: algorithms whose advantage compares a sample with its group (a group of one has A = 0)
GROUP_RELATIVE = ("grpo", "drgrpo", "dapo", "gspo")

_BOOL_KEYS = (
    "sft.enabled",
    "trainer.fsdp",
    "t3.enabled",
    "diagnostics.mi.enabled",
    "env.require_think",
    "env.nonnegative",
    "algo.bi_level",
    "algo.whiten_advantages",
    "algo.overlong.enabled",
    "algo.dynamic_sampling.enabled",
    "trainer.resume_allow_changes",
    "t3.outside_trigger",
    "rollout.prime_think",
    "rollout.kv_cache",
    "trainer.dry_run",
)


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


def check_group_size(cfg: DictConfig) -> None:
    """A group-relative advantage (GRPO, Dr.GRPO, DAPO, GSPO) needs G >= 2: with one sample per
    group ``R - mean_g R = 0`` for every row, so the policy learns from the entropy bonus alone.
    PPO (a critic's baseline, also ``algo=dapo_ragen``) allows G = 1."""
    name = str(_get(cfg, "algo.name") or "grpo").lower()
    g = _get(cfg, "trainer.group_size")
    if name in GROUP_RELATIVE and g == 1:
        raise ConfigError(
            f"trainer.group_size=1 with algo.name={name}: a group-relative advantage is 0 for every "
            "sample of a one-sample group (nothing to learn from); use group_size >= 2, or algo=ppo "
            "(a critic baseline)"
        )


def check_algo(cfg: DictConfig) -> None:
    """Ranges of the ``algo`` node's numbers and options."""
    if _get(cfg, "algo") is None:
        return
    name = str(_get(cfg, "algo.name") or "grpo").lower()
    check_positive_float(cfg, "algo.lr", maximum=1.0)
    if _has(cfg, "algo.critic_lr"):
        check_positive_float(cfg, "algo.critic_lr", maximum=1.0)
    if _has(cfg, "algo.critic_grad_clip"):  # null: the actor's max_grad_norm
        check_positive_float(cfg, "algo.critic_grad_clip", allow_zero=True, optional=True)
    for key in ("algo.entropy_coeff", "algo.kl_coeff", "algo.max_grad_norm"):
        if _has(cfg, key):
            check_positive_float(cfg, key, allow_zero=True)
    for key in ("algo.weight_decay", "algo.gamma", "algo.lam", "algo.turn_gamma", "algo.turn_lam"):
        check_float_range(cfg, key, 0.0, 1.0)
    if _has(cfg, "algo.adv_eps"):
        # GRPO/DAPO/GSPO divide by std + eps: eps = 0 turns a constant group into 0/0
        check_positive_float(cfg, "algo.adv_eps", allow_zero=name not in ("grpo", "dapo", "gspo"), maximum=1.0)
    if _has(cfg, "algo.value_clip"):
        check_positive_float(cfg, "algo.value_clip", optional=True)
    if _has(cfg, "algo.value_coeff"):
        check_positive_float(cfg, "algo.value_coeff", allow_zero=True)
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
    check_choice(cfg, "algo.minibatch", ("group", "row"))
    check_bool(cfg, "algo.on_policy_first_minibatch")
    check_choice(cfg, "algo.train_on", ("generated", "retokenized"))
    if _has(cfg, "algo.shared_prefix"):
        check_bool(cfg, "algo.shared_prefix")
    check_choice(cfg, "algo.critic", ("separate", "head"))
    for key in ("algo.ppo_epochs", "algo.mini_batch_size"):
        check_positive_int(cfg, key)
    for key in ("algo.max_length", "algo.critic_chunk_size", "algo.overlong.max_length", "algo.micro_batch_size"):
        if _has(cfg, key):
            check_positive_int(cfg, key, optional=True)
    if name == "drgrpo" and _get(cfg, "algo.max_length") is None:
        raise ConfigError("algo.max_length (L_max, the generation budget of a trajectory) is required for drgrpo")
    if _get(cfg, "algo.overlong.enabled"):
        l_max = _get(cfg, "algo.overlong.max_length") or _get(cfg, "algo.max_length")
        if l_max is None:
            raise ConfigError(
                "algo.overlong.enabled needs algo.overlong.max_length or algo.max_length (L_max, the generation budget)"
            )
        check_positive_int(cfg, "algo.overlong.cache_length", allow_zero=True, maximum=int(l_max))
    if _get(cfg, "algo.dynamic_sampling") is not None:
        if _has(cfg, "algo.dynamic_sampling.max_extra_rollouts"):
            check_positive_int(cfg, "algo.dynamic_sampling.max_extra_rollouts", allow_zero=True)
        if _has(cfg, "algo.dynamic_sampling.oversample"):
            check_float_range(cfg, "algo.dynamic_sampling.oversample", 1.0, 100.0)
        if _has(cfg, "algo.dynamic_sampling.tol"):
            check_positive_float(cfg, "algo.dynamic_sampling.tol", allow_zero=True, maximum=1.0)


def check_algo_options(cfg: DictConfig) -> None:
    """The ``algo`` checks that need the objectives package (torchrl): the algorithm name,
    the dual-clip bound and DAPO's dynamic-sampling criterion, with the objectives' own helpers."""
    if _get(cfg, "algo") is None:
        return
    from ..objectives import available_algorithms
    from ..objectives.base import check_dual_clip
    from ..objectives.dapo import CRITERIA

    name = str(_get(cfg, "algo.name") or "grpo").lower()
    known = available_algorithms()  # the built-in algorithms and any registered with register_algorithm
    if name not in known:
        raise ConfigError(f"algo.name must be one of {', '.join(known)}, got {name!r}")
    try:
        check_dual_clip(_get(cfg, "algo.dual_clip"))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if _get(cfg, "algo.dynamic_sampling") is not None:
        check_choice(cfg, "algo.dynamic_sampling.criterion", CRITERIA)


def check_env(cfg: DictConfig) -> None:
    """Ranges and size bounds of the ``env`` node (keys absent from the chosen env are skipped)."""
    if _get(cfg, "env") is None:
        return
    for key in ("env.success_rate", "env.p_frozen", "env.noise_repeat", "env.success_threshold"):
        check_probability(cfg, key)
    if _has(cfg, "env.format_penalty"):
        # a penalty: a positive value would reward malformed replies
        check_float_range(cfg, "env.format_penalty", -100.0, 0.0, why=" (a penalty: <= 0)")
    from ..envs.parsing import REPLY_FORMATS

    check_choice(cfg, "env.reply_format", REPLY_FORMATS)
    check_float_range(cfg, "env.threshold", -1.0, 1.0, why=" (a cosine similarity)")
    if _has(cfg, "env.malformed"):
        from ..envs.active.env import MALFORMED_MODES

        check_choice(cfg, "env.malformed", MALFORMED_MODES)
    if _has(cfg, "env.presentation"):
        from ..envs.games.circuit_decoding import CircuitDecodingGame

        check_choice(cfg, "env.presentation", CircuitDecodingGame.PRESENTATIONS)
    val_fraction = _get(cfg, "env.val_fraction")
    if val_fraction is not None and (not _is_number(val_fraction) or not 0.0 <= val_fraction < 1.0):
        raise ConfigError(f"env.val_fraction must be in [0, 1), got {val_fraction!r}")
    for key in (
        "env.size",
        "env.num_boxes",
        "env.search_depth",
        "env.max_nodes",
        "env.max_turn",
        "env.max_actions_per_turn",
        "env.max_actions_per_traj",
        "env.num_circuits",
        "env.n_inputs",
        "env.num_digits",
        "env.num_symbols",
        "env.num_items",
        "env.oracle_particles",
        "env.num_seen",
        "env.num_candidates",
        "env.max_number",
        "env.max_target",
        "env.memory_mb",
        "env.max_output_bytes",
        "env.workers",
    ):
        if _has(cfg, key):
            check_positive_int(cfg, key)
    digits, symbols = _get(cfg, "env.num_digits"), _get(cfg, "env.num_symbols")
    if isinstance(digits, int) and isinstance(symbols, int) and digits > symbols:
        raise ConfigError(
            f"env.num_digits ({digits}) must be at most env.num_symbols ({symbols}): the code's digits are distinct"
        )
    if _has(cfg, "env.list_candidates"):
        check_positive_int(cfg, "env.list_candidates", allow_zero=True, optional=True)
    for key in ("env.num_steps", "env.num_numbers", "env.limit"):
        if _has(cfg, key):
            check_positive_int(cfg, key, optional=True)
    size = _get(cfg, "env.size")
    if size is not None and size < 2:
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
    check_positive_int(cfg, "t3.k", optional=True, maximum=1000)
    if _get(cfg, "t3.cumulative") is not None:
        check_bool(cfg, "t3.cumulative")
    if _get(cfg, "t3.rule") is not None:
        from ..transforms.t3_rules import PREFERENCE_RULES

        check_choice(cfg, "t3.rule", PREFERENCE_RULES["MovieRecommendation"])
    if not _get(cfg, "t3.enabled"):
        return
    from .. import envs
    from ..transforms.t3 import ENV_TASKS
    from ..transforms.t3_rules import make_rule

    env_name = str(_get(cfg, "env.name"))
    builder = getattr(envs, "_REGISTRY", {}).get(env_name)
    task = (
        getattr(builder, "task_name", "") or ENV_TASKS.get(env_name) or ENV_TASKS.get(env_name.removesuffix("_small"))
    )
    if not task:
        t3_envs = sorted(
            {n for n, b in getattr(envs, "_REGISTRY", {}).items() if getattr(b, "task_name", "")} | set(ENV_TASKS)
        )
        raise ConfigError(
            f"t3.enabled=true needs an env with a T3 stall rule ({', '.join(t3_envs)}); env.name={env_name} has none"
        )
    try:
        make_rule(
            task,
            k=_get(cfg, "t3.k"),
            cumulative=_get(cfg, "t3.cumulative"),
            outside_trigger=bool(_get(cfg, "t3.outside_trigger") or False),
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
    from ..models.sampling import check_sampling, sampling_truncation

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


#: generation backends of ``rollout.backend``
ROLLOUT_BACKENDS = ("hf", "vllm")


def check_rollout_backend(cfg: DictConfig) -> None:
    """``rollout.backend``: ``hf`` (transformers ``generate`` through torchrl's ``TransformersWrapper``,
    the default) or ``vllm`` (torchrl's ``vLLMWrapper`` on a vLLM engine that the trainer keeps in sync
    with the training model: :mod:`ragen_torchrl.collectors.vllm_backend`), which needs the ``vllm``
    extra and a CUDA GPU: both are checked here, before any model is loaded."""
    check_choice(cfg, "rollout.backend", ROLLOUT_BACKENDS)
    if _has(cfg, "rollout.trajectory"):
        check_choice(cfg, "rollout.trajectory", ("tokens", "history"))
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
    if (_get(cfg, "rollout.trajectory") or "tokens") == "tokens":
        raise ConfigError(
            "rollout.backend=vllm generates from chat histories: set rollout.trajectory=history "
            "(rollout.trajectory=tokens, the default, is the hf backend's token-level rollout)"
        )


def validate_config(cfg: DictConfig, *, config_dir: str | os.PathLike | None = None) -> None:
    """Raise :class:`ConfigError` naming the first bad value (see the module docstring).

    Nothing is built or written: this runs before any env, model or run dir exists.

    Args:
        cfg: the composed config.
        config_dir: where the config files are (for the unknown-key check); default the
            CLI's ``RAGEN_CONFIG_DIR`` or the shipped ``configs/``.
    """
    check_unknown_keys(cfg, config_dir)
    check_finite(cfg)
    seed = _get(cfg, "seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or abs(seed) >= 2**63:
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    for key in (
        "trainer.prompts_per_iter",
        "trainer.group_size",
        "trainer.val_levels",
        "rollout.max_new_tokens",
        "rollout.chunk_size",
    ):
        check_positive_int(cfg, key)
    for key in ("trainer.total_iterations", "trainer.val_every", "trainer.save_every", "sft.steps", "sft.episodes"):
        check_positive_int(cfg, key, allow_zero=True, maximum=LIMITS.get(key, 10_000_000))
    if _has(cfg, "diagnostics.grad_snr"):
        check_positive_int(cfg, "diagnostics.grad_snr.every", allow_zero=True, optional=True)
        check_positive_int(cfg, "diagnostics.grad_snr.buckets", optional=True, maximum=1024)
    if _has(cfg, "rollout.kv_cache_max_tokens"):
        check_positive_int(cfg, "rollout.kv_cache_max_tokens", allow_zero=True)
    if _has(cfg, "rollout.shards"):
        check_positive_int(cfg, "rollout.shards", optional=True, maximum=LIMITS.get("rollout.shards", 4096))
        shards = _get(cfg, "rollout.shards")
        if shards is not None and shards > int(_get(cfg, "trainer.prompts_per_iter")):
            raise ConfigError(
                f"rollout.shards={shards} exceeds trainer.prompts_per_iter={_get(cfg, 'trainer.prompts_per_iter')}: "
                "every part collects at least one prompt group"
            )
    if _has(cfg, "trainer.val_every_levels"):
        check_positive_int(cfg, "trainer.val_every_levels", optional=True, maximum=LIMITS.get("trainer.val_levels"))
    if _has(cfg, "trainer.max_optimizer_steps"):
        check_positive_int(cfg, "trainer.max_optimizer_steps", optional=True, maximum=10_000_000)
    if _has(cfg, "trainer.log_text_samples"):
        check_positive_int(cfg, "trainer.log_text_samples", allow_zero=True)
    if _has(cfg, "sft.batch_size"):
        check_positive_int(cfg, "sft.batch_size")
    if _has(cfg, "sft.seed"):
        value = _get(cfg, "sft.seed")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"sft.seed must be an integer, got {value!r}")
    for key in _BOOL_KEYS:
        check_bool(cfg, key)
    check_probability(cfg, "sft.noise")
    check_positive_float(cfg, "sft.lr", maximum=1.0)
    for key in ("rollout.temperature", "trainer.val_temperature"):
        check_positive_float(cfg, key, allow_zero=True)
    check_rollout_sampling(cfg)
    # cheap checks first (no torch import): most mistakes are reported within a second
    check_algo(cfg)
    check_group_size(cfg)
    check_env(cfg)
    if _get(cfg, "model") is not None:
        for key in (
            "model.vocab_size",
            "model.hidden_size",
            "model.intermediate_size",
            "model.num_layers",
            "model.num_heads",
            "model.num_kv_heads",
        ):
            if _has(cfg, key) and not _get(cfg, "model.name_or_path"):
                check_positive_int(cfg, key)
        if _has(cfg, "model.threads"):
            check_positive_int(cfg, "model.threads", optional=True)
    check_sizes(cfg)
    if _get(cfg, "diagnostics.mi") is not None:
        check_positive_int(cfg, "diagnostics.mi.every")
        check_positive_int(cfg, "diagnostics.mi.num_pairs")
        dtype = _get(cfg, "diagnostics.mi.dtype")
        if dtype not in (None, "float32", "float64", "bfloat16", "float16"):
            raise ConfigError(
                f"diagnostics.mi.dtype must be null, float32, float64, bfloat16 or float16, got {dtype!r}"
            )
    if _get(cfg, "sft.noise_kind") not in (None, "uniform", "heuristic"):
        raise ConfigError(f"sft.noise_kind must be 'uniform' or 'heuristic', got {_get(cfg, 'sft.noise_kind')!r}")
    if _get(cfg, "sft.reasoning") not in (None, "grounded", "shuffled"):
        raise ConfigError(f"sft.reasoning must be 'grounded' or 'shuffled', got {_get(cfg, 'sft.reasoning')!r}")
    if _get(cfg, "model.name_or_path") is None and _get(cfg, "model.name") not in ("tiny", None):
        raise ConfigError("model.name_or_path is required unless model=tiny")
    check_paths(cfg)
    # then the checks that import torch / torchrl (a few seconds)
    check_rollout_backend(cfg)
    check_algo_options(cfg)
    if _get(cfg, "model") is not None:
        from ..models.loading import resolve_device

        try:
            resolve_device(str(_get(cfg, "model.device") or "auto"), str(_get(cfg, "model.dtype") or "auto"))
        except (ValueError, RuntimeError) as e:
            raise ConfigError(str(e)) from None
    if _get(cfg, "diagnostics.mi") is not None:
        from ..diagnostics.cross_scoring import METHODS

        check_choice(cfg, "diagnostics.mi.method", METHODS)
    if _get(cfg, "filter") is not None:
        from ..transforms.snr import validate_filter_config

        try:
            validate_filter_config(_get(cfg, "filter"))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    check_t3(cfg)
