"""Policy objectives on torchrl's ``GRPOLoss``: GRPO, Dr.GRPO, DAPO, GSPO and PPO with a critic.

* :mod:`.algorithm`: :class:`Algorithm` (one algorithm's loss and data hooks, as the training
  loop calls them), :func:`build_algorithm` (``algo`` config node -> ``Algorithm``) and its
  registry (:func:`register_algorithm`, :func:`available_algorithms`);
* the losses, torchrl ``LossModule`` subclasses usable on their own: :mod:`.metrics`
  (``MaskedStatsGRPOLoss``, assistant-token statistics), :mod:`.grpo` (``make_grpo_loss``),
  :mod:`.drgrpo`, :mod:`.dapo` (with DAPO's dynamic sampling), :mod:`.gspo`, :mod:`.ppo`
  (with the critic and GAE);
* :mod:`.logprobs`: log-prob plumbing: the scoring actor (``make_logprob_policy``) and the
  behaviour data the losses read (``compute_behaviour_log_probs``, ``attach_training_data``).

Names are imported from their submodules on first use.

Example:
    >>> from ragen_torchrl.objectives import available_algorithms, build_algorithm
    >>> available_algorithms()[:5]
    ['grpo', 'drgrpo', 'dapo', 'gspo', 'ppo']
    >>> obj = build_algorithm({"name": "drgrpo", "max_length": 64, "entropy_coeff": 0.0}, actor=None, model=None)
    >>> type(obj.loss_module).__name__, obj.loss_module.max_length, obj.dynamic_sampling
    ('DrGRPOLoss', 64, None)
"""

from .. import lazy_exports

_EXPORTS = {
    # the training-loop bundle and the algorithm registry
    "ALGORITHMS": ".algorithm",
    "LOSS_TERMS": ".algorithm",
    "Algorithm": ".algorithm",
    "PPOAlgorithm": ".algorithm",
    "build_algorithm": ".algorithm",
    "register_algorithm": ".algorithm",
    "available_algorithms": ".algorithm",
    # losses (torchrl LossModules) and their defaults
    "MaskedStatsGRPOLoss": ".base",
    "DrGRPOLoss": ".drgrpo",
    "DAPOLoss": ".dapo",
    "GSPOLoss": ".gspo",
    "PPOLoss": ".ppo",
    "PPOLossOutput": ".ppo",
    "Critic": ".ppo",
    "TokenStatsMixin": ".base",
    "DEFAULT_ENTROPY_COEFF": ".base",
    "REF_LOG_PROBS_KEY": ".base",
    "make_grpo_loss": ".grpo",
    # log-prob plumbing: score conversations, attach behaviour data
    "make_logprob_policy": ".logprobs",
    "compute_behaviour_log_probs": ".logprobs",
    "attach_training_data": ".logprobs",
    "training_view": ".logprobs",
    # data hooks and pure functions
    "DynamicSampler": ".dapo",
    "informative_groups": ".dapo",
    "prepare_ppo_batch": ".ppo",
    "masked_gae": ".ppo",
    "bilevel_gae": ".ppo",
    "masked_whiten": ".ppo",
    "sequence_log_ratio": ".gspo",
    "dual_clip_gain": ".base",
    "check_dual_clip": ".base",
    # metrics
    "masked_token_metrics": ".base",
    "loss_output_metrics": ".base",
    "sequence_metrics": ".gspo",
    "value_metrics": ".ppo",
}

# the same names as _EXPORTS (a literal list, for static tools)
__all__ = [
    # the training-loop bundle and the algorithm registry
    "ALGORITHMS",
    "LOSS_TERMS",
    "Algorithm",
    "PPOAlgorithm",
    "build_algorithm",
    "register_algorithm",
    "available_algorithms",
    # losses (torchrl LossModules) and their defaults
    "MaskedStatsGRPOLoss",
    "DrGRPOLoss",
    "DAPOLoss",
    "GSPOLoss",
    "PPOLoss",
    "PPOLossOutput",
    "Critic",
    "TokenStatsMixin",
    "DEFAULT_ENTROPY_COEFF",
    "REF_LOG_PROBS_KEY",
    "make_grpo_loss",
    # log-prob plumbing: score conversations, attach behaviour data
    "make_logprob_policy",
    "compute_behaviour_log_probs",
    "attach_training_data",
    "training_view",
    # data hooks and pure functions
    "DynamicSampler",
    "informative_groups",
    "prepare_ppo_batch",
    "masked_gae",
    "bilevel_gae",
    "masked_whiten",
    "sequence_log_ratio",
    "dual_clip_gain",
    "check_dual_clip",
    # metrics
    "masked_token_metrics",
    "loss_output_metrics",
    "sequence_metrics",
    "value_metrics",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
