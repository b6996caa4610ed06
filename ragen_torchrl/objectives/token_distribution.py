"""The loss's per-token distribution, held only where the mask is set.

torchrl's ``LLMMaskedCategorical`` keeps ``[B, T, V]`` logits and evaluates ``log_prob`` and
``entropy`` at every position, masked ones included. A loss reads only the assistant tokens, so
:class:`CompactMaskedCategorical` keeps the ``[N, V]`` logits of the N masked positions, and
:func:`masked_position_logits` asks the model for logits at the positions some row needs
(transformers' ``logits_to_keep``: the LM head runs only there, as TRL's GRPO trainer does for the
completion). Values at the masked positions are those of the full computation; outside the mask
``log_prob`` and ``entropy`` are 0, as torchrl's give.

Example:
    >>> import torch
    >>> logits = torch.randn(2, 3, 5)
    >>> mask = torch.tensor([[False, True, True], [False, False, True]])
    >>> value = torch.tensor([[0, 1, 2], [0, 3, 4]])
    >>> full = LLMMaskedCategorical(logits=logits, mask=mask)
    >>> compact = CompactMaskedCategorical(logits[mask], mask)
    >>> torch.allclose(full.log_prob(value), compact.log_prob(value), atol=1e-6)
    True
    >>> torch.allclose(full.entropy(), compact.entropy(), atol=1e-6)
    True
"""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F
from torchrl.modules.distributions import LLMMaskedCategorical

__all__ = [
    "PLAIN_HEAD_MODEL_TYPES",
    "CompactMaskedCategorical",
    "in_parameter_dtype",
    "logits_at",
    "masked_position_logits",
    "plain_head",
    "supports_logits_to_keep",
    "token_log_prob_entropy",
]


class CompactMaskedCategorical(LLMMaskedCategorical):
    """A categorical over vocabularies at the masked positions of a ``[B, T]`` batch only.

    Args:
        logits: ``[N, V]``, the logits of the N positions where ``mask`` is True, in row-major order
            (``full_logits[mask]``).
        mask: ``[B, T]`` bool.
    """

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor, ignore_index: int = -100) -> None:
        mask = mask.bool()
        if logits.ndim != 2 or logits.shape[0] != int(mask.sum()):
            raise ValueError(
                f"compact logits must be [N, V] with N = mask.sum() = {int(mask.sum())}, got {tuple(logits.shape)}"
            )
        self._compact = logits
        self._mask = mask
        self.ignore_index = ignore_index
        self._position_level_masking = True
        self._masked_logits = None
        self._masked_dist = None
        self._entropies: torch.Tensor | None = None  # [N], set by log_prob's fused pass
        torch.distributions.Distribution.__init__(
            self, batch_shape=mask.shape, event_shape=logits.shape[-1:], validate_args=False
        )

    @property
    def logits(self) -> torch.Tensor:
        """The ``[N, V]`` logits of the masked positions."""
        return self._compact

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` log-probs of ``value``: 0 outside the mask (as torchrl's ignore-index path).

        The entropies come out of the same pass over the ``[N, V]`` logits (:func:`token_log_prob_entropy`)
        and :meth:`entropy` returns them: a loss that reads both walks the vocabulary once."""
        out = torch.zeros(self._mask.shape, dtype=self._compact.dtype, device=self._compact.device)
        picked = value.to(self._compact.device)[self._mask]
        if picked.numel() and bool((picked >= 0).all()):
            log_p, self._entropies = token_log_prob_entropy(self._compact, picked)
            out[self._mask] = log_p.to(out.dtype)
        else:  # ignore-index (-100) positions: cross_entropy gives them 0
            out[self._mask] = -F.cross_entropy(self._compact, picked, reduction="none")
        return out

    def entropy(self) -> torch.Tensor:
        """``[B, T]`` entropies; 0 outside the mask (as torchrl's, whose masked logits normalise to 0 there)."""
        out = torch.zeros(self._mask.shape, dtype=self._compact.dtype, device=self._compact.device)
        entropies = self._entropies
        if entropies is None:
            log_p = self._compact - self._compact.logsumexp(-1, keepdim=True)
            log_p = log_p.clamp(min=torch.finfo(log_p.dtype).min)  # as torch's Categorical.entropy
            entropies = -(log_p * log_p.exp()).sum(-1)
        out[self._mask] = entropies.to(out.dtype)
        return out

    def sample(self, sample_shape=None):  # noqa: D102 - a scoring distribution
        raise NotImplementedError("CompactMaskedCategorical scores tokens; it does not sample")


class _TokenLogProbEntropy(torch.autograd.Function):
    """``(log softmax(z)[index], entropy(softmax(z)))`` per row, with a hand-written backward.

    Autograd through ``cross_entropy`` plus an entropy built from ``logsumexp``, ``exp`` and a product
    keeps and walks several ``[N, V]`` tensors per step of each pass; this keeps ``p`` and ``log p`` and
    writes the gradient in one buffer:
    ``dL/dz = p * (-g_H * (log p + H) - g_lp) + g_lp * onehot(index)``.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, index: torch.Tensor):
        log_p = logits - logits.logsumexp(-1, keepdim=True)
        log_p.clamp_(min=torch.finfo(log_p.dtype).min)  # a -inf logit: p log p = 0, as torch's Categorical.entropy
        p = log_p.exp()
        # -sum p log p per row as a batched dot product: no [N, V] product tensor; in the logits' dtype,
        # not autocast's (bmm is on its lower-precision list)
        with torch.autocast(logits.device.type, enabled=False):
            entropy = -torch.bmm(p.unsqueeze(1), log_p.unsqueeze(2)).reshape(-1)
        picked = log_p.gather(-1, index.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(p, log_p, entropy, index)
        return picked, entropy

    @staticmethod
    def backward(ctx, grad_picked, grad_entropy):
        p, log_p, entropy, index = ctx.saved_tensors
        if grad_picked is None:
            grad_picked = torch.zeros_like(entropy)
        if grad_entropy is None:
            grad = p * -grad_picked.unsqueeze(-1)
        else:
            grad = log_p + entropy.unsqueeze(-1)
            grad.mul_(-grad_entropy.unsqueeze(-1)).sub_(grad_picked.unsqueeze(-1)).mul_(p)
        grad.scatter_add_(-1, index.unsqueeze(-1), grad_picked.unsqueeze(-1))
        return grad, None


def token_log_prob_entropy(logits: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's log-probability of its ``index`` token and its entropy under ``softmax(logits)``, in one pass
    over the ``[N, V]`` logits (and one in the backward); both differentiable with respect to ``logits``.

    The values and gradients are those of ``-cross_entropy(logits, index)`` and ``Categorical(logits).entropy()``
    up to float round-off (``tests/objectives/test_token_distribution.py``).

    Example:
        >>> z = torch.tensor([[0.0, 0.0], [2.0, 0.0]], requires_grad=True)
        >>> lp, h = token_log_prob_entropy(z, torch.tensor([0, 1]))
        >>> [round(v, 4) for v in lp.tolist()], [round(v, 4) for v in h.tolist()]
        ([-0.6931, -2.1269], [0.6931, 0.3653])
    """
    if logits.ndim != 2 or index.shape != logits.shape[:1]:
        raise ValueError(f"logits must be [N, V] and index [N], got {tuple(logits.shape)} and {tuple(index.shape)}")
    return _TokenLogProbEntropy.apply(logits, index.to(torch.long))


def supports_logits_to_keep(model) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (transformers >= 4.50 causal LMs)."""
    return _forward_takes_logits_to_keep(type(model))


@functools.cache
def _forward_takes_logits_to_keep(cls: type) -> bool:
    # once per model class: the loss asks on every forward
    try:
        return "logits_to_keep" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


#: causal LMs whose logits are exactly ``lm_head(decoder(...).last_hidden_state)`` (no soft-capping, no scale)
PLAIN_HEAD_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


def plain_head(model) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
    """``(decoder, lm_head)`` of a causal LM whose logits are the LM head on the decoder's last hidden state
    (:data:`PLAIN_HEAD_MODEL_TYPES`, an ``nn.Linear`` head, not FSDP-sharded), else ``None``.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> m = LlamaForCausalLM(LlamaConfig(vocab_size=20, hidden_size=8, intermediate_size=16,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
        >>> type(plain_head(m)[1]).__name__, plain_head(torch.nn.Linear(2, 2))
        ('Linear', None)
    """
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in PLAIN_HEAD_MODEL_TYPES:
        return None
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    if type(model).__name__.startswith("FSDP"):  # FSDP2 gathers the root's weights only in the root's forward
        return None
    head, decoder = model.get_output_embeddings(), model.get_decoder()
    if type(head) is not torch.nn.Linear or decoder is None or decoder is model:
        return None
    return decoder, head


def logits_at(
    model, rows: torch.Tensor, cols: torch.Tensor, keep: torch.Tensor | None = None, **forward
) -> torch.Tensor:
    """``[N, V]`` output logits of the ``N`` (row, column) positions ``rows``/``cols`` of one forward.

    A :func:`plain_head` model runs its LM head on those ``N`` hidden states only (with a 49k vocabulary the
    head is a large part of a small model's compute); any other runs its forward with ``logits_to_keep=keep``
    (the sorted columns any row needs; ``cols`` then index into ``keep``'s order through the caller's map)
    when it takes one, and the logits are gathered.

    The logits come back in the parameters' dtype (:func:`in_parameter_dtype`).
    """
    return in_parameter_dtype(_logits_at(model, rows, cols, keep, **forward), model)


def in_parameter_dtype(logits: torch.Tensor, model) -> torch.Tensor:
    """``logits`` in ``model``'s parameter dtype: under mixed precision (float32 parameters, a bf16 forward
    through :func:`torch.autocast` or FSDP2's mixed precision policy) the losses' log-softmax and entropy
    then run in float32, as verl and TRL compute them; otherwise ``logits`` unchanged.

    Example:
        >>> m = torch.nn.Linear(2, 3)
        >>> in_parameter_dtype(torch.zeros(1, 3, dtype=torch.bfloat16), m).dtype
        torch.float32
    """
    param = next(model.parameters(), None)
    if param is None or not param.dtype.is_floating_point or logits.dtype == param.dtype:
        return logits
    return logits.to(param.dtype)


def _logits_at(model, rows: torch.Tensor, cols: torch.Tensor, keep: torch.Tensor | None, **forward) -> torch.Tensor:
    plain = plain_head(model)
    if plain is not None:
        decoder, head = plain
        hidden = decoder(**forward).last_hidden_state
        return head(hidden[rows, cols])
    if keep is not None and supports_logits_to_keep(model):
        column = torch.full((int(forward["input_ids"].shape[1]),), -1, dtype=torch.long, device=cols.device)
        column[keep.to(cols.device)] = torch.arange(keep.numel(), device=cols.device)
        logits = model(**forward, logits_to_keep=keep.to(forward["input_ids"].device))["logits"]
        return logits[rows, column[cols]]
    return model(**forward)["logits"][rows, cols]


def masked_position_logits(
    model, tokens: torch.Tensor, attention: torch.Tensor, mask: torch.Tensor, **model_kwargs
) -> torch.Tensor:
    """``[N, V]`` logits scoring the tokens at the ``N`` positions of ``mask`` (``[B, T]``).

    Position ``t`` is scored by the model's output at ``t - 1`` (position 0 by zero logits, as
    torchrl's wrapper does). The LM head runs only at output positions some row needs.
    """
    mask = mask.bool()
    need = mask[:, 1:].any(0)  # output position j scores token j + 1
    keep = torch.nonzero(need).reshape(-1)
    rows, cols = torch.nonzero(mask.cpu(), as_tuple=True)
    scored = cols > 0
    device = tokens.device
    picked = logits_at(
        model,
        rows[scored].to(device),
        (cols[scored] - 1).to(device),
        keep if keep.numel() < need.numel() else None,
        input_ids=tokens,
        attention_mask=attention,
        **model_kwargs,
    )
    if bool(scored.all()):
        return picked
    out = picked.new_zeros((rows.numel(), picked.shape[-1]))  # position 0: nothing before it scores it
    out[scored.to(out.device)] = picked
    return out
