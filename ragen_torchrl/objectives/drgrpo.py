"""Dr.GRPO (arXiv 2503.20783): GRPO without its length and difficulty biases.

Two changes to GRPO, both about normalisation:

* advantage ``A_i = R_i - mean_g R`` (no division by the group std, which up-weights
  near-solved and near-failed prompts): ``group_advantage(..., scale="none")``;
* loss ``(1 / (G * L_max)) * sum_i sum_t l_it`` with ``L_max`` a *constant* (the
  generation budget of a trajectory), instead of GRPO's ``1 / |y_i|`` per sequence, which
  gives each token of a short answer more weight than a token of a long one (and so
  rewards long wrong answers less than short wrong answers: the length bias).

No KL term by default. Implemented as a ``GRPOLoss`` whose ``_aggregate_loss_value`` (the
hook torchrl leaves for loss normalisation) divides each sequence's token sum by
``max_length`` and averages over the sequences of the mini-batch; the entropy bonus goes
through the same aggregation.

Example:
    >>> import torch
    >>> loss = DrGRPOLoss(None, max_length=4)
    >>> per_token = torch.ones(2, 3, 1)                      # [B, T, 1]
    >>> mask = torch.tensor([[True, True, False], [True, True, True]])
    >>> loss._aggregate_loss_value(per_token, mask).item()  # (2/4 + 3/4) / 2
    0.625
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torchrl.objectives.llm import GRPOLoss

from .base import INPUT_CONTRACT, TokenStatsMixin, masked_aggregate_sum


class DrGRPOLoss(TokenStatsMixin, GRPOLoss):
    """``GRPOLoss`` with Dr.GRPO's constant length normalisation.

    Args:
        actor_network: the log-prob ``TransformersWrapper`` (``None`` for pure-tensor use).
        max_length: ``L_max``, the constant every sequence's token sum is divided by.
        **kwargs: forwarded to ``GRPOLoss`` (``clip_epsilon``, ``entropy_coeff``,
            ``masking_strategy``, ...). ``aggregation`` is fixed to this class's rule
            (``"none"`` still returns the masked per-token loss).
    """

    def __init__(self, actor_network=None, *, max_length: int, **kwargs) -> None:
        if isinstance(max_length, bool) or int(max_length) != max_length or max_length < 1:
            raise ValueError(f"max_length (L_max) must be a positive integer, got {max_length!r}")
        kwargs.setdefault("aggregation", "dr_grpo")
        if kwargs["aggregation"] not in ("dr_grpo", "none"):
            # the constant-length normalisation IS Dr.GRPO: refuse rather than silently ignore
            raise ValueError(f"DrGRPOLoss aggregates as 'dr_grpo' (or 'none'), got {kwargs['aggregation']!r}")
        super().__init__(actor_network, **kwargs)
        self.max_length = int(max_length)

    def _aggregate_loss_value(
        self, value: torch.Tensor, mask: torch.Tensor, tensordict: TensorDictBase | None = None
    ) -> torch.Tensor:
        if self.aggregation == "none" or self.reduction == "none":
            return super()._aggregate_loss_value(value, mask, tensordict=tensordict)
        # sum over each sequence's tokens / L_max, then mean over sequences:
        # a token weighs 1 / (B * L_max) whatever the length of its sequence
        return (masked_aggregate_sum(value, mask) / self.max_length).mean(dim=0)


DrGRPOLoss.__doc__ += INPUT_CONTRACT
