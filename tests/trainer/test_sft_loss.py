"""The warm start's loss runs the LM head on the target positions only and equals the full-logits loss."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ragen_torchrl.trainer.sft import assistant_token_loss


@pytest.mark.parametrize("tied", [True, False])
def test_the_loss_equals_the_mean_nll_of_the_full_logits_with_the_same_gradients(tied):
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1, tie_word_embeddings=tied)
    )  # fmt: skip
    ids = torch.randint(0, 50, (3, 9))
    attention = torch.ones_like(ids)
    attention[0, :2] = 0  # a left-padded row
    target = torch.rand(3, 9) > 0.5
    target[0, :2] = False
    ours = assistant_token_loss(model, ids, attention, target)
    grads = torch.autograd.grad(ours, list(model.parameters()))
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    full = (nll * target[:, 1:]).sum() / target[:, 1:].sum()
    torch.testing.assert_close(ours, full, atol=1e-6, rtol=1e-6)
    for g, h in zip(grads, torch.autograd.grad(full, list(model.parameters())), strict=True):
        torch.testing.assert_close(g, h, atol=1e-6, rtol=1e-5)
