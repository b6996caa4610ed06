"""Cascade attention: rows that share a prompt read its keys/values once per step, not once per row.

When a GRPO group's ``G`` rows decode from the same prompt, every decoding step of ordinary attention
reads that prompt's keys and values ``G`` times (once per row's copy of the cache); on a CPU decode
step that reading, not arithmetic, is what the attention costs. Cascade attention (as in FlashInfer's
cascade kernels) splits each row's keys into the **prefix** its group shares, stored once per group,
and the row's own **suffix** (its last prompt token and the tokens it has sampled), computes the
softmax over each part separately and merges the two with their log-sum-exp weights. The result is
exact attention up to float round-off.

:func:`cascade_attention` is the computation on plain tensors. :data:`CASCADE_ATTENTION` is the name
of an attention implementation registered with ``transformers``' ``AttentionInterface`` (and its
mask interface, with the ``sdpa`` mask): a layer whose cache layer is a prefix-sharing layer (see
:class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`, which selects it for the call of
``generate`` whose rows are all at their first turn and share prompts) runs
:func:`cascade_attention`; any other call goes to ``transformers``' ``sdpa`` attention.

Example:
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> B, H, KV, D, P, S = 4, 4, 2, 8, 5, 3
    >>> prefix_k, prefix_v = torch.randn(2, KV, P, D), torch.randn(2, KV, P, D)  # two distinct prompts
    >>> group_rows, row_place = torch.tensor([[0, 1], [2, 3]]), torch.arange(4)     # rows 0-1 and 2-3
    >>> q, k, v = torch.randn(B, H, 1, D), torch.randn(B, KV, S, D), torch.randn(B, KV, S, D)
    >>> out = cascade_attention(q, k, v, None, prefix_k, prefix_v, torch.ones(2, P, dtype=torch.bool),
    ...                         group_rows, row_place, D ** -0.5)
    >>> full_k = torch.cat([prefix_k[[0, 0, 1, 1]], k], 2).repeat_interleave(2, 1)
    >>> full_v = torch.cat([prefix_v[[0, 0, 1, 1]], v], 2).repeat_interleave(2, 1)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, full_k, full_v).transpose(1, 2)
    >>> out.shape, torch.allclose(out, ref, atol=1e-6)
    (torch.Size([4, 1, 4, 8]), True)
"""

from __future__ import annotations

from contextvars import ContextVar

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

__all__ = ["ACTIVE_CACHE", "CASCADE_ATTENTION", "cascade_attention", "cascade_attention_forward"]

#: the attention implementation name (``config._attn_implementation``) of :func:`cascade_attention_forward`
CASCADE_ATTENTION = "ragen_cascade"

#: the cache of the ``generate`` call running with :data:`CASCADE_ATTENTION` (its layers hold the prefixes)
ACTIVE_CACHE: ContextVar = ContextVar("ragen_cascade_cache", default=None)


def _softmax_parts(scores: torch.Tensor, values: torch.Tensor):
    """``(max, sum of exp, exp-weighted values)`` of masked (``-inf``) scores, all-masked rows giving 0 sums."""
    top = scores.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(scores - top)
    return top, weights.sum(-1, keepdim=True), torch.matmul(weights, values)


def cascade_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    prefix_keys: torch.Tensor,
    prefix_values: torch.Tensor,
    prefix_valid: torch.Tensor,
    group_rows: torch.Tensor,
    row_place: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Attention of each row over its group's shared prefix followed by its own keys; ``[B, Q, H, D]``.

    Args:
        query: ``[B, H, Q, D]``.
        keys, values: ``[B, KV, S, D]``, each row's own (suffix) keys/values; ``H`` is a multiple of ``KV``
            (grouped-query attention: query head ``h`` reads key head ``h // (H // KV)``).
        mask: the ``[B, 1, Q, P + S]`` mask over prefix and suffix slots (bool, True = attend, or additive
            float), of which the suffix part is used; ``None``: every suffix slot is attended.
        prefix_keys, prefix_values: ``[C, KV, P, D]``, one per distinct prefix.
        prefix_valid: ``[C, P]`` bool, the real (unpadded) slots of each prefix.
        group_rows: ``[C, M]`` the rows reading each prefix (padded with any of its rows).
        row_place: ``[B]`` each row's place ``c * M + j`` in ``group_rows``.
        scale: the softmax scale.
    """
    batch, heads, q_len, dim = query.shape
    kv_heads = keys.shape[1]
    groups, width = group_rows.shape
    prefix_len = prefix_keys.shape[-2]
    per_kv = heads // kv_heads * q_len
    q = query.reshape(batch, kv_heads, per_kv, dim)  # query heads of one key head, times positions
    # the rows' own keys
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale
    if mask is not None:
        own = mask[..., prefix_len:]  # [B, 1, Q, S]
        own = own.unsqueeze(2).expand(batch, 1, heads // kv_heads, q_len, own.shape[-1]).reshape(batch, 1, per_kv, -1)
        scores = scores.masked_fill(~own, -float("inf")) if own.dtype == torch.bool else scores + own
    top_s, sum_s, out_s = _softmax_parts(scores, values)
    # each prefix once, for all the rows that read it
    qg = q[group_rows.reshape(-1)].reshape(groups, width, kv_heads, per_kv, dim).transpose(1, 2)
    scores = torch.matmul(qg.reshape(groups, kv_heads, width * per_kv, dim), prefix_keys.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~prefix_valid[:, None, None, :], -float("inf"))
    parts = _softmax_parts(scores, prefix_values)

    def to_rows(x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(groups, kv_heads, width, per_kv, x.shape[-1]).transpose(1, 2)
        return x.reshape(groups * width, kv_heads, per_kv, x.shape[-1])[row_place]

    top_p, sum_p, out_p = (to_rows(x) for x in parts)
    top = torch.maximum(top_p, top_s)
    a, b = torch.exp(top_p - top), torch.exp(top_s - top)
    out = (a * out_p + b * out_s) / (a * sum_p + b * sum_s)
    return out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous()


def cascade_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    """``transformers`` attention function: :func:`cascade_attention` when the layer's cache (in
    :data:`ACTIVE_CACHE`) holds a shared prefix, else ``transformers``' ``sdpa`` attention."""
    cache = ACTIVE_CACHE.get()
    layer = None
    if cache is not None and getattr(module, "layer_idx", None) is not None:
        layer = cache.layers[module.layer_idx]
    if getattr(layer, "prefix_keys", None) is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = cascade_attention(
        query,
        key,
        value,
        attention_mask,
        layer.prefix_keys,
        layer.prefix_values,
        layer.prefix_valid,
        layer.group_rows,
        layer.row_place,
        scale,
    )
    return out, None


AttentionInterface.register(CASCADE_ATTENTION, cascade_attention_forward)
AttentionMaskInterface.register(CASCADE_ATTENTION, sdpa_mask)
