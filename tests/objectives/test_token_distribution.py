"""The fused token log-prob + entropy pass: values and gradients of cross_entropy and Categorical.entropy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ragen_torchrl.objectives.token_distribution import CompactMaskedCategorical, token_log_prob_entropy


def _reference(z, index):
    log_p = -F.cross_entropy(z, index, reduction="none")
    entropy = torch.distributions.Categorical(logits=z).entropy()
    return log_p, entropy


def _logits(n=7, v=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, v, generator=g, dtype=torch.float64) * 3
    z[1, 4] = -float("inf")  # a masked vocabulary entry: p log p counts 0
    return z, torch.randint(0, v, (n,), generator=g).clamp_max(v - 1).masked_fill(torch.arange(n) == 1, 0)


@pytest.mark.parametrize("uses", [("lp", "h"), ("lp",), ("h",)])
def test_values_and_gradients_match_the_autograd_reference(uses):
    z, index = _logits()
    weights = torch.linspace(-1, 1, z.shape[0], dtype=z.dtype)
    grads = []
    for fn in (token_log_prob_entropy, _reference):
        x = z.clone().requires_grad_(True)
        lp, h = fn(x, index)
        loss = sum((weights * t).sum() for name, t in (("lp", lp), ("h", h)) if name in uses)
        loss.backward()
        grads.append((lp.detach(), h.detach(), x.grad))
    (lp, h, g), (rlp, rh, rg) = grads
    torch.testing.assert_close(lp, rlp, atol=1e-10, rtol=0)
    torch.testing.assert_close(h, rh, atol=1e-10, rtol=0)
    torch.testing.assert_close(g.nan_to_num(), rg.nan_to_num(), atol=1e-10, rtol=0)
    assert torch.isfinite(g).all()


def test_hand_computed_two_token_case():
    z = torch.tensor([[2.0, 0.0]], requires_grad=True)
    lp, h = token_log_prob_entropy(z, torch.tensor([1]))
    p1 = 1 / (1 + 2.718281828**2)
    assert lp.item() == pytest.approx(-2.126928, abs=1e-5)
    assert h.item() == pytest.approx(
        -(p1 * torch.log(torch.tensor(p1)) + (1 - p1) * torch.log(torch.tensor(1 - p1))).item(), abs=1e-6
    )
    lp.sum().backward()
    assert z.grad.tolist()[0] == pytest.approx([-(1 - p1), 1 - p1], abs=1e-6)  # onehot - p


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\[N, V\]"):
        token_log_prob_entropy(torch.zeros(2, 3, 4), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="index"):
        token_log_prob_entropy(torch.zeros(2, 3), torch.zeros(3, dtype=torch.long))


def test_the_distribution_reads_both_from_one_pass_and_keeps_ignore_index():
    z, index = _logits(n=4, v=6)
    mask = torch.tensor([[False, True, True], [False, True, True]])
    value = torch.zeros(2, 3, dtype=torch.long)
    value[mask] = index
    dist = CompactMaskedCategorical(z, mask)
    lp, h = dist.log_prob(value), dist.entropy()
    rlp, rh = _reference(z, index)
    torch.testing.assert_close(lp[mask], rlp, atol=1e-10, rtol=0)
    torch.testing.assert_close(h[mask], rh, atol=1e-10, rtol=0)
    assert lp[~mask].eq(0).all() and h[~mask].eq(0).all()
    fresh = CompactMaskedCategorical(z, mask)  # entropy first, without log_prob: the direct formula
    torch.testing.assert_close(fresh.entropy()[mask], rh, atol=1e-10, rtol=0)
    value[0, 1] = -100  # an ignored position scores 0, as cross_entropy's ignore_index
    assert CompactMaskedCategorical(z, mask).log_prob(value)[0, 1] == 0


def test_under_bf16_autocast_the_values_keep_the_logits_dtype():
    z, index = _logits()
    z = z.float().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp, h = token_log_prob_entropy(z, index)
    assert lp.dtype == h.dtype == torch.float32
    rlp, rh = _reference(z.detach(), index)
    torch.testing.assert_close(h.detach(), rh, atol=1e-5, rtol=0)
    (lp.sum() + h.sum()).backward()
    assert z.grad.dtype == torch.float32 and torch.isfinite(z.grad).all()
