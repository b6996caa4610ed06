"""GSPO: group sequence policy optimisation (sequence-level importance ratio).

Token-level ratios are noisy estimates of an off-policy correction that only makes sense
per sequence (the reward is per sequence). GSPO uses the length-normalised sequence ratio

    s_i = (pi_theta(y_i | x) / pi_old(y_i | x)) ** (1 / |y_i|)
        = exp( mean over the sequence's assistant tokens of (log pi_theta - log pi_old) )

clipped with its own, much tighter range (T3 used eps_low 3e-4, eps_high 4e-4), and applies
``-min(s_i A_i, clip(s_i) A_i)`` to every token of the sequence. With the default
``prompt_mean`` aggregation (token mean per sequence, then mean over sequences) the loss is
exactly GSPO's ``(1/G) sum_i min(...)``; the gradient reaching each token is
``-A_i s_i / |y_i|`` (unclipped) or 0 (clipped). No KL term by default. As in verl, ``log s_i``
is capped at :data:`MAX_SEQUENCE_LOG_RATIO` (10) before the ``exp``: a sequence far off-policy
with ``A_i < 0`` gives a bounded loss (``e^10 |A_i|``, no gradient) instead of an overflow to inf.

Example:
    >>> import torch
    >>> lw = torch.tensor([[[0.0], [0.002], [0.004]]])      # [B=1, T=3, 1], log-ratios
    >>> mask = torch.tensor([[False, True, True]])          # the first token is not trained
    >>> round(sequence_log_ratio(lw, mask).item(), 6)       # mean over the 2 assistant tokens
    0.003
"""

from __future__ import annotations

import torch
from torchrl.objectives.llm import GRPOLoss

from .base import INPUT_CONTRACT, TokenStatsMixin, masked_aggregate_sum

#: the cap on ``log s_i`` before the ``exp`` (verl's ``compute_policy_loss_gspo``)
MAX_SEQUENCE_LOG_RATIO = 10.0


def sequence_log_ratio(log_weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log s_i``: the mean of the per-token log-ratios over ``mask``, shape ``[B, 1]``.

    ``log_weight`` is ``[B, T, 1]``, ``mask`` ``[B, T]``; a sequence with no masked token
    gets ``log s_i = 0`` (ratio 1).
    """
    count = mask.sum(-1, keepdim=True).clamp_min(1).to(log_weight.dtype)
    return masked_aggregate_sum(log_weight, mask) / count


class GSPOLoss(TokenStatsMixin, GRPOLoss):
    """``GRPOLoss`` with GSPO's clipped sequence-level ratio.

    Keyword Args:
        clip_epsilon: ``(eps_low, eps_high)`` for the *sequence* ratio, default ``(3e-4, 4e-4)``.
        aggregation: default ``"prompt_mean"`` (GSPO's sequence mean).
        **kwargs: forwarded to ``GRPOLoss``.

    ``kl_mask_threshold`` is not supported (it edits the token mask after the sequence ratio
    has been formed), nor is ``dual_clip`` (a token-level bound).
    """

    def __init__(
        self, actor_network=None, *, clip_epsilon=(3e-4, 4e-4), aggregation: str = "prompt_mean", **kwargs
    ) -> None:
        if kwargs.get("kl_mask_threshold"):
            raise ValueError("GSPOLoss does not support kl_mask_threshold")
        if kwargs.get("dual_clip") is not None:
            # the sequence ratio has its own tight clip; verl's GSPO loss has no dual-clip either
            raise ValueError(f"algo.dual_clip is a token-level option; GSPO takes null, got {kwargs['dual_clip']!r}")
        super().__init__(actor_network, clip_epsilon=clip_epsilon, aggregation=aggregation, **kwargs)

    def _compute_policy_objective(self, log_weight: torch.Tensor, advantage: torch.Tensor):
        mask = self._loss_mask
        seq_lw = sequence_log_ratio(log_weight, mask)  # [B, 1]: carries the gradient of every token
        seq_lw_tok = seq_lw.unsqueeze(-2).expand_as(log_weight)  # the sequence ratio, on each token
        gain1 = seq_lw_tok.clamp(max=MAX_SEQUENCE_LOG_RATIO).exp() * advantage
        clipped_lw = seq_lw_tok.clamp(*self._clip_bounds)
        gain2 = clipped_lw.exp() * advantage
        gain = torch.minimum(gain1, gain2)
        clipped = (clipped_lw != seq_lw_tok).squeeze(-1)
        self._stash(clipped=clipped, sequence_log_ratio=seq_lw.squeeze(-1))
        # torchrl-style (unmasked) clip fraction for the output; metrics() reports the masked one
        return -gain, clipped.to(log_weight.dtype).mean()


GSPOLoss.__doc__ += INPUT_CONTRACT


def sequence_metrics(stash: dict[str, torch.Tensor]) -> dict[str, float]:
    """GSPO extras: mean sequence ratio and the fraction of sequences whose ratio was clipped."""
    seq_lw = stash.get("sequence_log_ratio")
    if seq_lw is None:
        return {}
    has_tokens = stash["mask"].any(-1)
    clipped = stash["clipped"].any(-1) & has_tokens
    n = has_tokens.sum().clamp_min(1)
    return {
        "seq_ratio_mean": float(seq_lw.exp()[has_tokens].mean()) if has_tokens.any() else 1.0,
        "seq_clip_fraction": float(clipped.sum() / n),
    }
