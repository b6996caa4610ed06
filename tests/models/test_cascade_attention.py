"""Cascade attention against ``scaled_dot_product_attention`` on each row's whole keys (prefix copied per row)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ragen_torchrl.models.cascade_attention import cascade_attention, prefix_bias


def _case(seed, q_len, prefix_lens, groups_of_rows, own, heads=4, kv_heads=2, dim=8):
    g = torch.Generator().manual_seed(seed)
    n_ctx, plen, batch = len(prefix_lens), max(prefix_lens), len(groups_of_rows)
    pk, pv = torch.randn(n_ctx, kv_heads, plen, dim, generator=g), torch.randn(n_ctx, kv_heads, plen, dim, generator=g)
    valid = torch.arange(plen)[None, :] < torch.tensor(prefix_lens)[:, None]
    k, v = torch.randn(batch, kv_heads, own, dim, generator=g), torch.randn(batch, kv_heads, own, dim, generator=g)
    q = torch.randn(batch, heads, q_len, dim, generator=g)
    slot = torch.tensor(groups_of_rows)
    width = int(torch.bincount(slot).max())
    group_rows = torch.zeros(n_ctx, width, dtype=torch.long)
    row_place = torch.zeros(batch, dtype=torch.long)
    for c in range(n_ctx):
        rows = torch.nonzero(slot == c).reshape(-1)
        group_rows[c] = rows[0]
        group_rows[c, : rows.numel()] = rows
        row_place[rows] = c * width + torch.arange(rows.numel())
    return q, k, v, pk, pv, valid, slot, group_rows, row_place


def _reference(q, k, v, pk, pv, valid, slot, own_mask):
    rep = q.shape[1] // k.shape[1]
    keys = torch.cat([pk[slot], k], 2).repeat_interleave(rep, 1)
    values = torch.cat([pv[slot], v], 2).repeat_interleave(rep, 1)
    q_len, own = q.shape[2], k.shape[2]
    mask = torch.cat([valid[slot][:, None, None, :].expand(-1, 1, q_len, -1), own_mask.expand(-1, 1, q_len, own)], -1)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_equals_attention_over_the_whole_keys(mask_kind):
    """Three prefixes of different lengths (one with no real slot), groups of 3, 2 and 1 rows out of order,
    two query positions with a causal mask over the own slots."""
    q_len, own = 2, 5
    q, k, v, pk, pv, valid, slot, group_rows, row_place = _case(0, q_len, [6, 0, 4], [2, 0, 0, 1, 0, 2], own)
    if mask_kind == "none":
        own_mask, ref_mask = None, torch.ones(6, 1, 1, own, dtype=torch.bool)
    else:
        causal = torch.ones(q_len, own, dtype=torch.bool).tril(own - q_len)
        ref_mask = causal[None, None].expand(6, 1, q_len, own)
        own_mask = ref_mask if mask_kind == "bool" else torch.zeros(ref_mask.shape).masked_fill(~ref_mask, -1e30)
    out = cascade_attention(q, k, v, own_mask, pk, pv, prefix_bias(valid), group_rows, row_place, 8**-0.5)
    ref = _reference(q, k, v, pk, pv, valid, slot, ref_mask)
    assert out.shape == (6, q_len, 4, 8)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


def test_float64_agrees_to_round_off():
    q, k, v, pk, pv, valid, slot, group_rows, row_place = _case(1, 1, [7, 3], [0, 1, 1, 0], 3)
    q, k, v, pk, pv = (x.double() for x in (q, k, v, pk, pv))
    out = cascade_attention(q, k, v, None, pk, pv, prefix_bias(valid, torch.float64), group_rows, row_place, 0.3)
    keys = torch.cat([pk[slot], k], 2).repeat_interleave(2, 1)
    values = torch.cat([pv[slot], v], 2).repeat_interleave(2, 1)
    mask = torch.cat([valid[slot], torch.ones(4, 3, dtype=torch.bool)], 1)[:, None, None, :]
    ref = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=0.3).transpose(1, 2)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_bfloat16_is_within_bfloat16_rounding_of_float32_sdpa():
    """bfloat16 inputs (8 rows in 3 groups, prefixes of 40/25/33 slots, 8 query heads over 2 key heads of 64,
    scores of std ~4, so the softmax is peaked) against SDPA in float32 on the same values. Stated tolerance:
    ``|out - ref| <= 2**-8 * |ref| + 1e-5`` per element, half a bfloat16 step of the output (8 significant
    bits), i.e. no worse than rounding the float32 result to bfloat16. Measured: max abs error 0.0075 (the
    same as rounding ``ref`` itself), 0.97 of the bound at worst. The same computation in bfloat16 (scores
    rounded before the exponential, as before the float32 softmax) is off by 0.029 at most, 590x the bound."""
    from ragen_torchrl.models.cascade_attention import _cascade

    q, k, v, pk, pv, valid, slot, group_rows, row_place = _case(
        3, 1, [40, 25, 33], [0, 0, 0, 1, 1, 2, 2, 2], 9, heads=8, kv_heads=2, dim=64
    )
    q, k, pk = 2 * q, 2 * k, 2 * pk
    q, k, v, pk, pv = (x.bfloat16() for x in (q, k, v, pk, pv))
    keys = torch.cat([pk[slot], k], 2).repeat_interleave(4, 1).float()
    values = torch.cat([pv[slot], v], 2).repeat_interleave(4, 1).float()
    mask = torch.cat([valid[slot], torch.ones(8, 9, dtype=torch.bool)], 1)[:, None, None, :]
    ref = F.scaled_dot_product_attention(q.float(), keys, values, attn_mask=mask, scale=0.125).transpose(1, 2)
    bound = 2**-8 * ref.abs() + 1e-5

    out = cascade_attention(q, k, v, None, pk, pv, prefix_bias(valid), group_rows, row_place, 0.125)
    assert out.dtype == torch.bfloat16
    err = (out.float() - ref).abs()
    assert bool((err <= bound).all()), float((err / bound).max())
    # no worse than the float32 result rounded to bfloat16
    assert float(err.max()) <= float((ref.bfloat16().float() - ref).abs().max()) + 1e-5

    in_bf16 = _cascade(q, k, v, None, pk, pv, prefix_bias(valid), group_rows, row_place, 0.125, torch.bfloat16)
    err_bf16 = (in_bf16.float() - ref).abs()
    assert float(err_bf16.max()) > 3 * float(err.max()) and float((err_bf16 / bound).max()) > 10
