"""Loss diagnostics averaged over assistant tokens only.

torchrl's ``GRPOLoss`` logs ``entropy``, ``kl_approx`` and ``clip_fraction`` as plain means
over the padded ``[B, T]`` mini-batch, so padding and observation tokens (where the
log-weight is 0 and the entropy is 0) dilute them, and by how much depends on how long the
conversations of the mini-batch are. :class:`TokenStatsMixin` returns the per-token tensors
of each forward (detached) with the loss mask in the output's ``token_stats``
(:class:`TokenStatsLossOutput`), :func:`masked_token_metrics` averages them over that mask, and
the mixin writes those masked averages into the loss output's ``entropy``, ``clip_fraction`` and
``kl_approx`` fields, so a loss used on its own reports the numbers over assistant tokens. The
``loss_*`` terms are torchrl's.

The mixin also replaces torchrl's KL-to-reference term by a masked one: torchrl averages
the k3 estimator over every position of the padded batch, which makes the size of the
KL gradient depend on the amount of padding. Here the per-token k3 goes through the loss's
own aggregation (``_aggregate_loss_value``), so the KL is normalised exactly like the
policy term.

Example:
    >>> import torch
    >>> mask = torch.tensor([[False, True, True]])
    >>> m = masked_token_metrics(mask, log_weight=torch.tensor([[9.0, 0.0, 0.0]]),
    ...                          entropy=torch.tensor([[0.0, 1.0, 3.0]]))
    >>> m["entropy"], m["kl_approx"], m["assistant_tokens"]
    (2.0, 0.0, 2.0)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from tensordict import NestedKey, TensorDict, TensorDictBase, is_tensor_collection
from tensordict.utils import expand_as_right
from torchrl.modules.llm import TransformersWrapper
from torchrl.objectives.llm import GRPOLoss, LLMLossOutput

from ..data.dense import trim_padding
from ..keys import MASKS_ASSISTANT, MASKS_ATTENTION, REF_LOG_PROBS_FULL
from ..options import AlgoOptions
from .logprobs import scoring_temperature, token_dist

#: default ``entropy_coeff`` of every loss class here: the value of ``configs/algo/*.yaml``
#: (torchrl's ``GRPOLoss`` defaults to 0.01)
DEFAULT_ENTROPY_COEFF = AlgoOptions.entropy_coeff
#: where every loss reads the frozen reference policy's log-probs (aligned with
#: ``("tokens", "full")``: per row unpadded, or ``[B, T]`` left-padded); torchrl's default is ``("next", "ref_log_probs", "full")``
REF_LOG_PROBS_KEY = REF_LOG_PROBS_FULL

#: what every loss here reads from a batch (shared by the class docstrings)
INPUT_CONTRACT = """
    Input contract (one row per trajectory; tensors per row, unpadded, or ``[B, T]`` padded
    on the left):

    * ``("tokens", "full")`` ``[T]`` int: the whole conversation's token ids;
    * ``("log_probs", "full")`` ``[T]`` float: behaviour log-probs of those tokens, no grad
      (:func:`~ragen_torchrl.objectives.logprobs.compute_behaviour_log_probs`); a non-finite value
      takes its token out of the loss;
    * ``("masks", "all_assistant_mask")`` ``[T]`` bool: the tokens trained (assistant tokens);
    * ``advantage`` ``[1, 1]`` per row (``[B, 1, 1]`` stacked) for GRPO/Dr.GRPO/DAPO/GSPO,
      or ``[T, 1]`` per row for PPO;
    * ``("history", "prompt")``: the conversation (a torchrl ``History``), which the
      log-prob actor re-scores (:func:`~ragen_torchrl.objectives.logprobs.training_view`);
    * with ``kl_to_ref_coeff``: the reference log-probs at ``REF_LOG_PROBS_KEY`` =
      ``("ref_log_probs", "full")`` ``[T]``, aligned with ``("tokens", "full")``.

    Keys can be renamed with ``set_keys`` (``advantage``, ``action``, ``sample_log_prob``,
    ``ref_log_probs``).
"""


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    x = x.detach().float().reshape(mask.shape)
    m = mask.to(x.dtype)
    return float((torch.where(mask, x, torch.zeros_like(x)) * m).sum() / m.sum().clamp_min(1))


def masked_token_metrics(
    mask: torch.Tensor,
    *,
    log_weight: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    clipped: torch.Tensor | None = None,
    dual_clipped: torch.Tensor | None = None,
    kl_to_ref: torch.Tensor | None = None,
    **_: torch.Tensor,
) -> dict[str, float]:
    """Per-token statistics averaged over ``mask`` (the assistant tokens), as floats.

    Args:
        mask: ``[B, T]`` bool, the tokens the loss trains on.
        log_weight: ``[B, T]`` ``log pi_theta - log pi_old``.
        entropy: ``[B, T]`` policy entropy per token.
        clipped: ``[B, T]`` bool, the importance ratio fell outside the clip range.
        dual_clipped: ``[B, T]`` bool, the dual-clip bound ``c A`` was taken (``A < 0``).
        kl_to_ref: ``[B, T]`` k3 estimate of KL(pi_theta || pi_ref) per token.

    Returns ``assistant_tokens`` and, for the tensors given: ``kl_approx`` (k1,
    ``mean(log pi_old - log pi_theta)``, the estimator torchrl logs), ``kl_k3``
    (``mean(r - 1 - log r)``), ``ratio_mean``, ``ratio_max``, ``entropy``,
    ``clip_fraction``, ``dual_clip_fraction`` and ``kl_to_ref``. Extra keyword tensors are ignored, so a
    loss output's ``token_stats`` (:class:`TokenStatsLossOutput`) can be passed as ``**out.token_stats``.
    """
    mask = mask.bool()
    out = {"assistant_tokens": float(mask.sum())}
    if log_weight is not None:
        lw = log_weight.detach().float().reshape(mask.shape)
        out["kl_approx"] = _masked_mean(-lw, mask)
        out["kl_k3"] = _masked_mean(lw.expm1() - lw, mask)
        out["ratio_mean"] = _masked_mean(lw.exp(), mask)
        out["ratio_max"] = float(lw.exp()[mask].max()) if mask.any() else 1.0
    if entropy is not None:
        out["entropy"] = _masked_mean(entropy, mask)
    if clipped is not None:
        out["clip_fraction"] = _masked_mean(clipped.float(), mask)
    if dual_clipped is not None:
        out["dual_clip_fraction"] = _masked_mean(dual_clipped.float(), mask)
    if kl_to_ref is not None:
        out["kl_to_ref"] = _masked_mean(kl_to_ref, mask)
    return out


def loss_output_metrics(out) -> dict[str, float]:
    """The scalar fields of a loss output (``loss_*`` terms summed, ``ESS``, ...) as floats."""
    vals: dict[str, float] = {}
    for name, value in out.items():
        if value is None or is_tensor_collection(value) or not isinstance(value, torch.Tensor):
            continue
        vals[name] = float(value.detach().float().sum())
    return vals


class TokenStatsLossOutput(LLMLossOutput):
    """A GRPO-style loss output plus ``token_stats``: the forward's per-token tensors, detached.

    ``token_stats`` is a ``TensorDict`` (batch size ``[]``) of ``[B, T]`` tensors: ``mask``
    (assistant tokens with a finite behaviour log-prob), ``log_weight``, ``clipped``, and
    ``entropy`` / ``kl_to_ref`` / ``dual_clipped`` when those terms are computed, plus what a
    subclass adds (GSPO's ``sequence_log_ratio`` ``[B]``, PPO's values). It is not a ``loss_*`` term:
    the total loss and :func:`loss_output_metrics` skip it.
    """

    token_stats: TensorDictBase | None = None


class TokenStatsMixin:
    """Mixin for ``GRPOLoss`` subclasses: return per-token internals, mask the KL term.

    Each forward returns a :class:`TokenStatsLossOutput` whose ``token_stats`` holds that forward's
    detached per-token tensors (the mask, ``log_weight``, ``clipped``, ...). While the forward runs,
    torchrl's hooks collect them with :meth:`_stash`; subclasses that compute more (GSPO's sequence
    ratio) stash them too, or add them to the output (PPO's values). Nothing is kept on the module
    after the call. Put the mixin first in the bases: ``class MyLoss(TokenStatsMixin, GRPOLoss)``.

    The mixin also adds verl's **dual-clip** (arXiv 1912.09729) to the token-level clipped
    objective: keyword ``dual_clip=c`` (``None``, the default, = off; the RAGEN reference
    config uses ``c = 3``) bounds the loss of a negative-advantage token whose ratio ran far
    above 1, where the plain clipped objective is unbounded::

        A >= 0: gain = min(r A, clip(r) A)
        A <  0: gain = max(min(r A, clip(r) A), c A)      (no gradient once r > c)

    See :func:`dual_clip_gain`.

    Defaults that differ from torchrl's ``GRPOLoss``: ``masking_strategy="rlhf"`` (every
    assistant token), ``entropy_coeff=0.001`` (the configs' value, :data:`DEFAULT_ENTROPY_COEFF`) and the reference log-prob key
    ``("ref_log_probs", "full")`` (:data:`REF_LOG_PROBS_KEY`). The output's ``entropy``,
    ``clip_fraction`` and ``kl_approx`` are means over the loss mask (assistant tokens with
    a finite behaviour log-prob), not over the padded ``[B, T]`` batch.
    """

    output_type = TokenStatsLossOutput

    @dataclass
    class _AcceptedKeys(GRPOLoss._AcceptedKeys):
        """GRPOLoss's keys, with the reference log-probs where this package stores them."""

        ref_log_probs: NestedKey = REF_LOG_PROBS_KEY

    #: what ``set_keys(name=None)`` restores (torchrl's ``GRPOLoss`` lacks it)
    default_keys = _AcceptedKeys

    def __init__(self, *args, dual_clip: float | None = None, **kwargs) -> None:
        kwargs.setdefault("entropy_coeff", DEFAULT_ENTROPY_COEFF)
        # assistant tokens only (torchrl's default "sft" trains the last reply of a re-tokenised
        # history, which is neither multi-turn nor the stored token ids)
        kwargs.setdefault("masking_strategy", "rlhf")
        super().__init__(*args, **kwargs)
        self.dual_clip = check_dual_clip(dual_clip)

    #: True inside :meth:`current_as_behaviour`: the behaviour log-probs are the current ones
    behaviour_from_current: bool = False
    #: score the batch's stored token ids (:func:`~ragen_torchrl.objectives.logprobs.token_dist`);
    #: False sends every forward through the wrapper's history path (chat template applied again)
    score_stored_tokens: bool = True
    #: with stored tokens: logits only at the assistant positions (the LM head runs only where some
    #: row needs it; :mod:`~ragen_torchrl.objectives.token_distribution`); False: every position
    compact_logits: bool = True
    #: with compact logits: each prompt shared by several rows of the batch runs through the model
    #: once (:mod:`~ragen_torchrl.objectives.shared_prefix`; same values up to round-off); False: one
    #: padded pass over every row (``algo.shared_prefix``)
    shared_prefix: bool = True

    @contextlib.contextmanager
    def current_as_behaviour(self) -> Iterator[None]:
        """Treat the batch as exactly on-policy: the behaviour log-probs are the current policy's.

        Inside the block the loss does not read ``sample_log_prob``; it uses the log-probs of
        its own forward, detached, as the behaviour ones (the ratio is 1 with the gradient of
        ``log pi``). That is exact when the policy has not changed since the batch was
        generated (the first optimizer step of the first epoch) and saves the separate
        behaviour forward over those rows; TRL's GRPO does the same with one step per batch.
        """
        previous = self.behaviour_from_current
        self.behaviour_from_current = True
        try:
            yield
        finally:
            self.behaviour_from_current = previous

    def required_keys(self) -> list[NestedKey]:
        """The batch keys this loss reads (its input contract, after ``set_keys``)."""
        keys = [self.tensor_keys.action, self.tensor_keys.advantage]
        if not self.behaviour_from_current:
            keys.insert(1, self.tensor_keys.sample_log_prob)
        if self.kl_to_ref_coeff:
            keys.append(self.tensor_keys.ref_log_probs)
        return keys

    def forward(self, tensordict: TensorDictBase):
        # a dense batch's selection: only the columns some of its rows use
        tensordict = trim_padding(tensordict)
        present = set(tensordict.keys(True))
        missing = [k for k in self.required_keys() if k not in present]
        if missing:
            raise KeyError(
                f"{type(self).__name__} needs {missing} in the batch (see the class docstring's input contract: "
                "compute_behaviour_log_probs + attach_training_data write tokens, log-probs and masks; "
                "a group advantage transform writes 'advantage'; rename keys with set_keys)"
            )
        try:
            out = super().forward(tensordict)
        finally:
            # the scratch of this call only: the statistics leave with the output
            stats = self.__dict__.pop("_token_scratch", {})
        out.token_stats = TensorDict(stats, batch_size=[])
        # torchrl averages these three over the padded [B, T] batch (padding and observation
        # tokens count as 0); report them over the tokens the loss trains on instead
        mask = stats["mask"].bool()
        m = mask.to(torch.float32)
        n = m.sum().clamp_min(1)

        def masked(x: torch.Tensor) -> torch.Tensor:
            x = x.detach().float().reshape(mask.shape)
            return torch.where(mask, x, torch.zeros_like(x)).sum() / n

        if "clipped" in stats:
            out.clip_fraction = masked(stats["clipped"])
        if "log_weight" in stats:
            out.kl_approx = masked(-stats["log_weight"])
        if "entropy" in stats and getattr(out, "entropy", None) is not None:
            out.entropy = masked(stats["entropy"])
        return out

    def _stash(self, **tensors: torch.Tensor) -> None:
        """Keep detached per-token tensors of the running forward for its output's ``token_stats``."""
        stats = self.__dict__.setdefault("_token_scratch", {})
        for k, v in tensors.items():
            stats[k] = v.detach()

    def _log_weight(self, tensordict: TensorDictBase, adv_shape: torch.Size):
        if self.behaviour_from_current:
            log_weight, dist, kl_approx, mask = self._on_policy_log_weight(tensordict)
        else:
            log_weight, dist, kl_approx, mask = super()._log_weight(tensordict, adv_shape)
        # a fresh scratch per forward: nothing from the previous mini-batch leaks into metrics
        self.__dict__["_token_scratch"] = {}
        self._stash(mask=mask, log_weight=log_weight.squeeze(-1))
        return log_weight, dist, kl_approx, mask

    def _get_cur_log_prob(self, tensordict: TensorDictBase):
        # the batch already holds the token ids and masks of every conversation: score them
        # directly instead of letting the wrapper apply the chat template and tokenise again
        keys = tensordict.keys(True)
        actor = self.actor_network
        if (
            self.score_stored_tokens
            and self.masking_strategy == "rlhf"
            and self.tensor_keys.action in keys
            and MASKS_ASSISTANT in keys
            and MASKS_ATTENTION in keys
            and isinstance(actor, TransformersWrapper)
        ):
            dist = token_dist(
                actor,
                tensordict,
                self.tensor_keys.action,
                MASKS_ASSISTANT,
                compact=self.compact_logits,
                shared_prefix=self.shared_prefix,
            )
            action = tensordict.get(
                self.tensor_keys.action, as_padded_tensor=True, padding_side="left", padding_value=-100
            )
            real = tensordict.get(MASKS_ATTENTION, as_padded_tensor=True, padding_side="left", padding_value=False)
            action = action.masked_fill(~real.bool(), -100)  # a dense batch pads with a token id
            return dist.log_prob(action.to(dist.logits.device)), dist, False
        if scoring_temperature(actor) != 1.0:
            # torchrl's history path scores softmax(logits): the rollout sampled softmax(logits / T)
            raise ValueError(
                f"{type(self).__name__}: the actor's rollout temperature is {scoring_temperature(actor)}, but this "
                "batch goes through the wrapper's history path, which scores at temperature 1; give the batch "
                "('tokens', 'full') and its assistant and attention masks (attach_training_data writes them)"
            )
        return super()._get_cur_log_prob(tensordict)

    def _on_policy_log_weight(self, tensordict: TensorDictBase):
        # GRPOLoss._log_weight with the behaviour log-probs = the current ones, detached
        cur_log_prob, dist, _ = self._get_cur_log_prob(tensordict)
        mask = dist.mask & torch.isfinite(cur_log_prob)
        cur_log_prob = torch.where(expand_as_right(mask, cur_log_prob), cur_log_prob, 0.0)
        prev_log_prob = cur_log_prob.detach()
        tensordict.set("_cur_log_prob", cur_log_prob)
        return (cur_log_prob - prev_log_prob).unsqueeze(-1), dist, (prev_log_prob - cur_log_prob).unsqueeze(-1), mask

    @property
    def _loss_mask(self) -> torch.Tensor:
        """Mask of the running forward (set by ``_log_weight``)."""
        return self.__dict__["_token_scratch"]["mask"]

    def _get_entropy(self, dist, adv_shape: torch.Size):
        entropy = super()._get_entropy(dist, adv_shape)
        if not is_tensor_collection(entropy):
            self._stash(entropy=entropy.squeeze(-1))
        return entropy

    def _compute_policy_objective(self, log_weight: torch.Tensor, advantage: torch.Tensor):
        loss, clip_fraction = super()._compute_policy_objective(log_weight, advantage)
        low, high = self._clip_bounds
        self._stash(clipped=((log_weight < low) | (log_weight > high)).squeeze(-1))
        if self.dual_clip is not None:
            bound = -self.dual_clip * advantage  # -max(gain, c A) = min(-gain, -c A) for A < 0
            dual = (advantage < 0) & (bound < loss)
            loss = torch.where(dual, bound.expand_as(loss), loss)
            self._stash(dual_clipped=dual.expand_as(log_weight).squeeze(-1))
        return loss, clip_fraction

    def _kl_to_ref(
        self,
        tensordict: TensorDictBase,
        key: NestedKey = ("next", "ref_log_probs"),
        ref_log_prob: torch.Tensor | None = None,
        coeff: float | None = None,
        mask: torch.Tensor | None = None,
        dist=None,
    ):
        """k3 estimator of KL(pi_theta || pi_ref), averaged over the loss mask only.

        Same inputs and padding conventions as torchrl's ``GRPOLoss._kl_to_ref``; the
        difference is the reduction (see the module docstring). Returns
        ``(coeff * aggregated k3, masked token-mean k3)``.
        """
        if coeff is None:
            coeff = self.kl_to_ref_coeff
        cur_log_prob = tensordict.get("_cur_log_prob")
        if ref_log_prob is None:
            ref_log_prob = tensordict.get(
                key,
                as_padded_tensor=True,
                padding_side=self.ref_log_prob_padding_side,
                padding_value=self.ref_log_prob_padding_value,
            )
            if ref_log_prob is None:
                raise KeyError(f"Couldn't find the ref log-prob {key} in the input data.")
            if ref_log_prob.ndim == cur_log_prob.ndim + 1:
                ref_log_prob = ref_log_prob.squeeze(-1)
        if ref_log_prob.shape != cur_log_prob.shape:
            raise ValueError(
                f"ref_log_prob {tuple(ref_log_prob.shape)} and cur_log_prob {tuple(cur_log_prob.shape)} differ: "
                "store reference log-probs per row, unpadded, aligned with ('tokens', 'full')."
            )
        if mask is None:
            mask = torch.ones_like(cur_log_prob, dtype=torch.bool)
        # select, never multiply: padded positions may hold non-finite values
        diff = torch.where(mask, ref_log_prob.to(cur_log_prob.dtype) - cur_log_prob, torch.zeros_like(cur_log_prob))
        k3 = diff.expm1() - diff
        name = "kl_to_inference" if key == self.tensor_keys.sample_log_prob else "kl_to_ref"
        self._stash(**{name: k3})
        loss = coeff * self._aggregate_loss_value(k3.unsqueeze(-1), mask, tensordict=tensordict)
        m = mask.to(k3.dtype)
        return loss, (k3 * m).sum() / m.sum().clamp_min(1)


def check_dual_clip(value) -> float | None:
    """``None`` (off) or a float ``c > 1`` (the dual-clip bound; verl requires ``c > 1``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 1:
        raise ValueError(f"algo.dual_clip must be null (off) or a number > 1 (the reference uses 3.0), got {value!r}")
    return float(value)


def dual_clip_gain(
    ratio: torch.Tensor, advantage: torch.Tensor, clip_low: float, clip_high: float, dual_clip: float | None
) -> torch.Tensor:
    """Per-token PPO gain (minus the loss), with verl's dual-clip for negative advantages.

    ``gain = min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)``, and for ``A < 0`` with
    ``dual_clip = c``: ``max(gain, c A)`` (verl ``compute_policy_loss``, clip_ratio_c).

    Example:
        >>> import torch
        >>> r, a = torch.tensor([4.0, 2.0, 4.0]), torch.tensor([-1.0, -1.0, 1.0])
        >>> [round(g, 4) for g in dual_clip_gain(r, a, 0.2, 0.2, 3.0).tolist()]  # -4 is bounded at -3
        [-3.0, -2.0, 1.2]
    """
    gain = torch.minimum(ratio * advantage, ratio.clamp(1 - clip_low, 1 + clip_high) * advantage)
    if dual_clip is None:
        return gain
    return torch.where(advantage < 0, torch.maximum(gain, dual_clip * advantage), gain)


def masked_aggregate_sum(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence sum of a ``[B, T, 1]`` per-token value over ``mask`` -> ``[B, 1]``."""
    mask_exp = expand_as_right(mask, value)
    return torch.where(mask_exp, value, torch.zeros_like(value)).sum(dim=-2)


class MaskedStatsGRPOLoss(TokenStatsMixin, GRPOLoss):
    """torchrl's ``GRPOLoss`` plus the per-token stash for masked metrics (the GRPO loss).

    Built as :func:`~ragen_torchrl.objectives.build_algorithm` builds GRPO (``masking_strategy="rlhf"``,
    ``aggregation="prompt_mean"``) it computes the same ``loss_objective`` / ``loss_entropy`` as torchrl; the KL-to-reference
    term (off by default) is averaged over assistant tokens instead of the padded batch, and
    the logged ``entropy`` / ``clip_fraction`` / ``kl_approx`` are assistant-token means.
    Keyword arguments are ``GRPOLoss``'s (``clip_epsilon``, ``entropy_coeff`` = 0.001 here,
    ``kl_to_ref_coeff``, ``masking_strategy`` (``"rlhf"`` here), ``aggregation``, ...) plus
    ``dual_clip``. The input contract follows the example.

    Example (a hand-built batch; the actor is any module with torchrl's ``_get_rlhf_dist``,
    normally :func:`~ragen_torchrl.objectives.logprobs.make_logprob_policy`):
        >>> import math, torch
        >>> from tensordict import TensorDict
        >>> from torch import nn
        >>> class Dist(torch.distributions.Distribution):
        ...     arg_constraints = {}
        ...     def __init__(self, lp, mask):
        ...         super().__init__(batch_shape=lp.shape, validate_args=False)
        ...         self.lp, self.mask = lp, mask
        ...     def log_prob(self, action):
        ...         return self.lp
        ...     def entropy(self):
        ...         return torch.ones_like(self.lp)
        >>> class Actor(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.lp = nn.Parameter(torch.full((1, 4), -1.0))
        ...     def get_dist(self, td, **kwargs):    # torchrl calls _get_rlhf_dist, else get_dist
        ...         return Dist(self.lp, td.get(("masks", "all_assistant_mask")))
        >>> batch = TensorDict({("tokens", "full"): torch.tensor([[5, 6, 7, 8]]),
        ...                     ("log_probs", "full"): torch.full((1, 4), -1.0 - math.log(2.0)),  # ratio 2
        ...                     ("masks", "all_assistant_mask"): torch.tensor([[False, False, True, True]]),
        ...                     "advantage": torch.ones(1, 1, 1)}, batch_size=[1])
        >>> out = MaskedStatsGRPOLoss(Actor(), masking_strategy="rlhf")(batch)
        >>> round(out.loss_objective.item(), 4), out.clip_fraction.item(), out.entropy.item()
        (-1.2, 1.0, 1.0)
    """


MaskedStatsGRPOLoss.__doc__ += INPUT_CONTRACT
