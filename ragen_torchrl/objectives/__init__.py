"""Policy objectives on torchrl's ``GRPOLoss``: GRPO, Dr.GRPO, DAPO, GSPO and PPO with a critic.

* :mod:`.algorithm`: :class:`Algorithm` (one algorithm's loss and data hooks, as the training
  loop calls them), :func:`build_algorithm` (``algo`` config node -> ``Algorithm``) and its
  registry (:func:`register_algorithm`, :func:`available_algorithms`);
* the losses, torchrl ``LossModule`` subclasses usable on their own: :mod:`.base`
  (``MaskedStatsGRPOLoss``, the GRPO loss, with assistant-token statistics), :mod:`.drgrpo`, :mod:`.dapo` (with DAPO's dynamic sampling), :mod:`.gspo`, :mod:`.ppo`
  (with the critic and GAE);
* :mod:`.logprobs`: log-prob plumbing: the scoring actor (``make_logprob_policy``) and the
  behaviour data the losses read (``compute_behaviour_log_probs``, ``attach_training_data``).

Example:
    >>> from ragen_torchrl.objectives import available_algorithms, build_algorithm
    >>> available_algorithms()[:5]
    ['grpo', 'drgrpo', 'dapo', 'gspo', 'ppo']
    >>> obj = build_algorithm({"name": "drgrpo", "max_length": 64, "entropy_coeff": 0.0}, actor=None, model=None)
    >>> type(obj.loss_module).__name__, obj.loss_module.max_length, obj.dynamic_sampling
    ('DrGRPOLoss', 64, None)
"""

from __future__ import annotations

from .algorithm import (
    ALGORITHMS,
    LOSS_TERMS,
    Algorithm,
    AlgorithmFactory,
    PPOAlgorithm,
    available_algorithms,
    build_algorithm,
    register_algorithm,
)
from .base import (
    DEFAULT_ENTROPY_COEFF,
    REF_LOG_PROBS_KEY,
    MaskedStatsGRPOLoss,
    TokenStatsMixin,
    check_dual_clip,
    dual_clip_gain,
    loss_output_metrics,
    masked_token_metrics,
)
from .dapo import DAPOLoss, DynamicSampler, informative_groups
from .drgrpo import DrGRPOLoss
from .gspo import GSPOLoss, sequence_log_ratio, sequence_metrics
from .logprobs import (
    TRAIN_ON,
    attach_training_data,
    behaviour_batch,
    check_temperature,
    compute_behaviour_log_probs,
    make_logprob_policy,
    masked_mean,
    scoring_temperature,
    token_dist,
    tokenize_conversations,
    training_view,
)
from .ppo import (
    Critic,
    PPOLoss,
    PPOLossOutput,
    bilevel_gae,
    masked_gae,
    masked_whiten,
    prepare_ppo_batch,
    value_metrics,
)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "AlgorithmFactory",
    "Critic",
    "DAPOLoss",
    "DEFAULT_ENTROPY_COEFF",
    "DrGRPOLoss",
    "DynamicSampler",
    "GSPOLoss",
    "LOSS_TERMS",
    "MaskedStatsGRPOLoss",
    "PPOAlgorithm",
    "PPOLoss",
    "PPOLossOutput",
    "REF_LOG_PROBS_KEY",
    "TRAIN_ON",
    "TokenStatsMixin",
    "attach_training_data",
    "available_algorithms",
    "behaviour_batch",
    "bilevel_gae",
    "build_algorithm",
    "check_dual_clip",
    "check_temperature",
    "compute_behaviour_log_probs",
    "dual_clip_gain",
    "informative_groups",
    "loss_output_metrics",
    "make_logprob_policy",
    "masked_gae",
    "masked_mean",
    "masked_token_metrics",
    "masked_whiten",
    "prepare_ppo_batch",
    "register_algorithm",
    "scoring_temperature",
    "sequence_log_ratio",
    "sequence_metrics",
    "token_dist",
    "tokenize_conversations",
    "training_view",
    "value_metrics",
]
