"""GRPO on multi-turn trajectories with torchrl's ``GRPOLoss``: :func:`make_grpo_loss`.

The loss is torchrl's :class:`~torchrl.objectives.llm.GRPOLoss` with
``masking_strategy="rlhf"`` (assistant tokens only: observations are never trained) and
``aggregation="prompt_mean"`` (token mean per sequence, then mean over sequences). Its
actor is a ``TransformersWrapper`` in log-prob mode (``generate=False``) over the same
model that generates (:func:`~ragen_torchrl.objectives.logprobs.make_logprob_policy`).

Compatibility: the log-prob plumbing (``make_logprob_policy``, ``compute_behaviour_log_probs``,
``training_view``, ``attach_training_data``, ``masked_mean``) lives in
:mod:`ragen_torchrl.objectives.logprobs`; this module re-exports it under the old names so
``from ragen_torchrl.objectives.grpo import make_logprob_policy`` keeps working. New code
imports it from :mod:`ragen_torchrl.objectives` or :mod:`ragen_torchrl.objectives.logprobs`.

Example:
    >>> from ragen_torchrl.objectives.grpo import make_grpo_loss
    >>> loss = make_grpo_loss(None, clip_epsilon=(0.2, 0.28))
    >>> type(loss).__name__, loss.aggregation, loss.masking_strategy
    ('MaskedStatsGRPOLoss', 'prompt_mean', 'rlhf')
"""

from __future__ import annotations

from torchrl.modules.llm import TransformersWrapper

from .base import MaskedStatsGRPOLoss

# re-exported for code written against the old layout (see the module docstring)
from .logprobs import (
    attach_training_data,
    compute_behaviour_log_probs,
    make_logprob_policy,
    masked_mean,
    training_view,
)

__all__ = [
    "make_grpo_loss",
    # compatibility re-exports from .logprobs
    "attach_training_data",
    "compute_behaviour_log_probs",
    "make_logprob_policy",
    "masked_mean",
    "training_view",
]


def make_grpo_loss(
    actor: TransformersWrapper,
    *,
    clip_epsilon=0.2,
    entropy_coeff: float = 0.001,
    kl_coeff: float = 0.0,
    aggregation: str = "prompt_mean",
) -> MaskedStatsGRPOLoss:
    """torchrl's GRPOLoss configured for multi-turn assistant-only training.

    A :class:`~ragen_torchrl.objectives.base.MaskedStatsGRPOLoss`: torchrl's loss terms,
    with ``entropy`` / ``clip_fraction`` / ``kl_approx`` reported over assistant tokens and
    the reference log-probs read from ``("ref_log_probs", "full")``.
    """
    return MaskedStatsGRPOLoss(
        actor,
        clip_epsilon=clip_epsilon,
        entropy_bonus=entropy_coeff > 0,
        entropy_coeff=entropy_coeff,
        kl_to_ref_coeff=kl_coeff if kl_coeff > 0 else None,
        masking_strategy="rlhf",
        aggregation=aggregation,
    )
