"""The typed training config: one dataclass per config group, each field with its default, help and check.

The YAML presets under ``configs/`` stay the files a user reads and edits; these dataclasses are
their schema. A field is made with :func:`~ragen_torchrl.trainer.config_fields.setting` (default,
help text, check). This module holds the trainer, algo, rollout, sft, t3, diagnostics, filter and
logger nodes and the whole config (:class:`RagenConfig`); the model and env groups have one dataclass
per option (:mod:`.model_schemas`, :mod:`.env_schemas`), chosen by the node's ``name``
(:func:`group_schema`). Around the schema: :func:`~ragen_torchrl.trainer.config_typing.typed_config`
merges a composed config onto it in one pass (types checked and converted, every key the presets
leave out gets its default) and :func:`~ragen_torchrl.trainer.config_typing.check_fields` runs each
field's check; :mod:`.config_describe` prints it (``--describe``); :mod:`.config_moved` names the new
place of an old key. :func:`register_schemas` stores the dataclasses in Hydra's ``ConfigStore``
(group ``schema``; ``ragen-train`` registers them at start), so a preset of your own may name one in
its defaults list to be validated by Hydra while it is composed
(``defaults: [/schema/algo/grpo@_here_, _self_]`` in ``algo/mine.yaml``). The shipped presets do
not: a bad value in them is reported by :func:`~ragen_torchrl.trainer.config.validate_config` as a
``config error`` naming the key (exit status 2), with a "did you mean" for an unknown key.

Example:
    >>> group_schema("algo", "ppo").__name__, group_schema("env", "sokoban").__name__
    ('PPOAlgoConfig', 'SokobanEnvConfig')
    >>> RagenConfig().trainer.early_stop.val_stop.patience, "payout_seeding" in schema_tree({"env": {"name": "bandit"}})["env"]
    (5, True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Optional  # noqa: UP035 - OmegaConf resolves typing's generics by name

from omegaconf import DictConfig, OmegaConf

from ..options import FILTER_CONFIG_DEFAULTS, AlgoOptions, DynamicSamplingOptions, OverlongOptions
from ..rollout_options import ATTENTIONS, SAMPLERS, per_device
from .config_checks import (
    LIMITS,
    ConfigError,
    _get,
    check_bool,
    check_float_range,
    check_positive_float,
    check_positive_int,
    check_probability,
)
from .config_fields import (
    _choice,
    _final_eval_modes,
    _integer,
    _lazy_choice,
    _limited,
    _node,
    _nonneg_float,
    _nonneg_int,
    _opt_pos_int,
    _opt_temperature,
    _quoted_choice,
    _temperature,
    _unit,
    setting,
)
from .env_schemas import ENV_SCHEMAS, EnvConfig, FrozenLakeEnvConfig
from .logger_backends import check_backend
from .model_schemas import (
    HFModelConfig,
    ModelConfig,
    SmolLM2ModelConfig,
    TinyModelConfig,
    TinyVLModelConfig,
)

# ${per_device:${model.device},<cpu value>,<accelerator value>}: the defaults of the settings tuned on a
# CPU only (rollout.sampler, rollout.attention), resolved wherever the config is read
OmegaConf.register_new_resolver("per_device", per_device, replace=True)

__all__ = [
    "ALGO_SCHEMAS",
    "ENV_SCHEMAS",
    "GROUPS",
    "MODEL_SCHEMAS",
    "ROLLOUT_BACKENDS",
    "RagenConfig",
    "group_schema",
    "register_schemas",
    "schema_tree",
]


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
class FinalEvalConfig:
    """The end-of-run evaluation on many held-out levels, per level (``final_eval.json``, ``final_eval_levels.csv``)."""

    levels: int = setting(
        0,
        "held-out levels of the final evaluation (0 = off): the final policy and, with trainer.keep_best, the "
        "best one on the same fixed levels, disjoint from training and from the validation levels",
        _limited(_nonneg_int, 1 << 20),
    )
    modes: Any = setting(
        help="greedy (temperature 0) and/or sampled (temperature trainer.final_eval.temperature)",
        check=_final_eval_modes,
        factory=lambda: ["greedy", "sampled"],
    )
    temperature: Optional[float] = setting(
        None, "temperature of the sampled mode (null = trainer.val_temperature)", _opt_temperature
    )
    batch_levels: int = setting(
        256,
        "levels played together: one env and its records of this many rows at a time",
        _limited(check_positive_int, 65536),
    )


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
    final_eval: FinalEvalConfig = _node(FinalEvalConfig, "the final evaluation (off by default)")
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
    seed_from_run: bool = setting(
        False, "true: the run's seed replaces sft.seed, one warm start per run seed (its own cache entry)", check_bool
    )
    reply_budget: str = setting(
        "warn",
        "demonstrated replies longer than rollout.max_new_tokens in the model's tokens: warn: log them and train |"
        " error: refuse a warm start most of whose replies no rollout can finish",
        _quoted_choice("error", "warn"),
    )


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


#: names that live in the modules split from this one, still importable from here
_ELSEWHERE = {
    "typed_config": ".config_typing",
    "check_fields": ".config_typing",
    "describe": ".config_describe",
    "schema_fields": ".config_describe",
    "shown_value": ".config_describe",
    "check_moved_keys": ".config_moved",
    "check_moved_overrides": ".config_moved",
}


def __getattr__(name: str) -> Any:
    # imported on first use: those modules import this one, so importing them here at the top would be a cycle
    if name in _ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(_ELSEWHERE[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
