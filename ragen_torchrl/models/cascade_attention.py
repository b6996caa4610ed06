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
mask interface, with the ``sdpa`` mask): a layer whose cache layer holds shared prefixes (see
:class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`, which selects it for the call of
``generate`` whose rows are all at their first turn and share prompts) runs
:func:`cascade_attention`; any other call goes to ``sdpa`` attention
(:func:`~ragen_torchrl.models.grouped_sdpa.grouped_sdpa_forward`).

Example:
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> B, H, KV, D, P, S = 4, 4, 2, 8, 5, 3
    >>> prefix_k, prefix_v = torch.randn(2, KV, P, D), torch.randn(2, KV, P, D)  # two distinct prompts
    >>> group_rows, row_place = torch.tensor([[0, 1], [2, 3]]), torch.arange(4)     # rows 0-1 and 2-3
    >>> q, k, v = torch.randn(B, H, 1, D), torch.randn(B, KV, S, D), torch.randn(B, KV, S, D)
    >>> out = cascade_attention(q, k, v, None, prefix_k, prefix_v, prefix_bias(torch.ones(2, P, dtype=torch.bool)),
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
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .grouped_sdpa import grouped_sdpa_forward

__all__ = ["ACTIVE_CACHE", "CASCADE_ATTENTION", "cascade_attention", "cascade_attention_forward", "prefix_bias"]

#: the attention implementation name (``config._attn_implementation``) of :func:`cascade_attention_forward`
CASCADE_ATTENTION = "ragen_cascade"

#: the cache of the ``generate`` call running with :data:`CASCADE_ATTENTION` (its layers hold the prefixes)
ACTIVE_CACHE: ContextVar = ContextVar("ragen_cascade_cache", default=None)


def prefix_bias(valid: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``[C, 1, 1, P]`` additive mask of prefixes whose real slots are ``valid`` (``[C, P]`` bool): 0 or ``-inf``.

    Example:
        >>> prefix_bias(torch.tensor([[True, False]])).tolist()
        [[[[0.0, -inf]]]]
    """
    bias = torch.zeros(valid.shape, dtype=dtype, device=valid.device).masked_fill_(~valid, -float("inf"))
    return bias[:, None, None, :]


def cascade_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    own_mask: torch.Tensor | None,
    prefix_keys: torch.Tensor,
    prefix_values: torch.Tensor,
    prefix_mask: torch.Tensor,
    group_rows: torch.Tensor,
    row_place: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Attention of each row over its group's shared prefix followed by its own keys; ``[B, Q, H, D]``.

    The scores, the softmax and the log-sum-exp merge of the two parts run in float32 whatever the
    inputs' dtype (float64 stays float64), as fused SDPA kernels keep them, and the output is cast back
    to ``query``'s dtype. With bfloat16 inputs the result is then within bfloat16's rounding of the
    output of float32 SDPA on the same inputs (``|out - ref| <= 2**-8 * |ref| + 1e-5`` per element, half
    a bfloat16 step; ``tests/models/test_cascade_attention.py``); computed in bfloat16 (scores rounded to
    8 significant bits before the exponential) it is off by several bfloat16 steps.

    Args:
        query: ``[B, H, Q, D]``.
        keys, values: ``[B, KV, S, D]``, each row's own keys/values; ``H`` is a multiple of ``KV``
            (grouped-query attention: query head ``h`` reads key head ``h // (H // KV)``).
        own_mask: ``[B, 1, Q, S]`` mask over the own slots (bool, True = attend, or additive float);
            ``None``: each query attends to every own slot.
        prefix_keys, prefix_values: ``[C, KV, P, D]``, one per distinct prefix.
        prefix_mask: ``[C, 1, 1, P]`` additive mask of each prefix's real slots (:func:`prefix_bias`).
        group_rows: ``[C, M]`` the rows reading each prefix (padded with any of its rows).
        row_place: ``[B]`` each row's place ``c * M + j`` in ``group_rows``.
        scale: the softmax scale.
    """
    compute = torch.promote_types(query.dtype, torch.float32)
    out = _cascade(
        query, keys, values, own_mask, prefix_keys, prefix_values, prefix_mask, group_rows, row_place, scale, compute
    )
    return out.to(query.dtype)


def _cascade(
    query, keys, values, own_mask, prefix_keys, prefix_values, prefix_mask, group_rows, row_place, scale, compute
):
    """:func:`cascade_attention` with its scores, softmax and merge in ``compute`` (the output in ``compute``)."""
    query, keys, values = query.to(compute), keys.to(compute), values.to(compute)
    prefix_keys, prefix_values, prefix_mask = (
        prefix_keys.to(compute),
        prefix_values.to(compute),
        prefix_mask.to(compute),
    )
    if own_mask is not None and own_mask.dtype != torch.bool:
        own_mask = own_mask.to(compute)
    batch, heads, q_len, dim = query.shape
    kv_heads = keys.shape[1]
    groups, width = group_rows.shape
    per_kv = heads // kv_heads * q_len
    # the query heads of one key head (times positions) as rows of one matrix, scaled once
    q = query.reshape(batch, kv_heads, per_kv, dim) * scale
    # the rows' own keys
    scores = torch.matmul(q, keys.transpose(-1, -2))
    if own_mask is not None:
        own = own_mask.unsqueeze(2).expand(batch, 1, heads // kv_heads, q_len, own_mask.shape[-1])
        own = own.reshape(batch, 1, per_kv, -1)
        scores = scores.masked_fill(~own, -float("inf")) if own.dtype == torch.bool else scores + own
    top_s = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - top_s)
    sum_s, out_s = weights.sum(-1, keepdim=True), torch.matmul(weights, values)
    # each prefix once, for all the rows that read it
    qg = q.index_select(0, group_rows.reshape(-1)).view(groups, width, kv_heads, per_kv, dim).transpose(1, 2)
    scores = torch.matmul(qg.reshape(groups, kv_heads, width * per_kv, dim), prefix_keys.transpose(-1, -2))
    scores = scores.add_(prefix_mask)
    top_p = scores.amax(-1, keepdim=True)  # -inf for a prefix with no real slot: its weight below is 0
    weights = torch.exp(scores.sub_(torch.where(torch.isfinite(top_p), top_p, torch.zeros_like(top_p))))
    # the prefix parts back to rows in one gather: [out | sum | max] per query
    packed = torch.cat([torch.matmul(weights, prefix_values), weights.sum(-1, keepdim=True), top_p], -1)
    packed = packed.view(groups, kv_heads, width, per_kv, dim + 2).transpose(1, 2)
    packed = packed.reshape(groups * width, kv_heads, per_kv, dim + 2).index_select(0, row_place)
    out_p, sum_p, top_p = packed[..., :dim], packed[..., dim : dim + 1], packed[..., dim + 1 :]
    top = torch.maximum(top_p, top_s)
    a, b = torch.exp(top_p - top), torch.exp(top_s - top)
    out = (out_p * a + out_s * b) / (sum_p * a + sum_s * b)
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
    :data:`ACTIVE_CACHE`) holds a shared prefix, else ``sdpa`` attention (``grouped_sdpa_forward``)."""
    cache = ACTIVE_CACHE.get()
    layer = None
    if cache is not None and getattr(module, "layer_idx", None) is not None:
        layer = cache.layers[module.layer_idx]
    if getattr(layer, "prefix_keys", None) is None:
        return grouped_sdpa_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    # a layer's own slots hold no padding (each row's last prompt token and its reply): one query attends
    # to all of them, several need the causal part of the mask
    own_mask = None
    if attention_mask is not None and query.shape[2] > 1:
        own_mask = attention_mask[..., layer.prefix_keys.shape[-2] :]
    out = cascade_attention(
        query,
        key,
        value,
        own_mask,
        layer.prefix_keys,
        layer.prefix_values,
        layer.prefix_mask,
        layer.group_rows,
        layer.row_place,
        scale,
    )
    return out, None


AttentionInterface.register(CASCADE_ATTENTION, cascade_attention_forward)
AttentionMaskInterface.register(CASCADE_ATTENTION, sdpa_mask)
