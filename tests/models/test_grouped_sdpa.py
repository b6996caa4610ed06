"""Grouped-query SDPA under a mask on the CPU: the same logits and gradients as transformers' ``sdpa``."""

from __future__ import annotations

import json

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ragen_torchrl.models import grouped_sdpa
from ragen_torchrl.models.grouped_sdpa import GROUPED_SDPA, use_grouped_sdpa
from ragen_torchrl.models.kv_cache import forward_kwargs, shared_prefix_supported


def _model(kv_heads: int = 2, attn: str = "sdpa") -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        attn_implementation=attn,
    )
    return LlamaForCausalLM(config).eval()


def _batch():
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [3, 4, 5, 6, 7, 9]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    return ids, mask


def _logits_and_grads(model):
    ids, mask = _batch()
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask).logits
    (logits[mask.bool()].log_softmax(-1)[:, 3].sum()).backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_logits_and_gradients_equal_sdpa_with_key_value_copies():
    model = _model()
    ref, ref_grads = _logits_and_grads(model)  # transformers' sdpa: repeat_kv under the mask
    assert use_grouped_sdpa(model) and model.config._attn_implementation == GROUPED_SDPA
    out, grads = _logits_and_grads(model)
    assert torch.allclose(out, ref, atol=1e-5)
    for name, g in ref_grads.items():
        assert torch.allclose(grads[name], g, atol=1e-5), name


def test_the_grouped_call_runs_only_where_it_helps(monkeypatch):
    model = _model()
    use_grouped_sdpa(model)
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("enable_gqa", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    ids, mask = _batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)  # masked prefill: grouped
        assert calls == [True, True]
        calls.clear()
        step = torch.tensor([[1], [2]])
        model(
            input_ids=step,
            attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1),
            **{forward_kwargs(model)[0]: out.past_key_values},
        )  # a decoding step: transformers' own path
        assert len(calls) == 2
    calls.clear()
    plain = _model(kv_heads=4)  # no grouping: nothing to save
    use_grouped_sdpa(plain)
    with torch.no_grad():
        plain(input_ids=ids, attention_mask=mask)
    assert calls == [False, False]


def test_only_sdpa_text_models_switch_and_the_checkpoint_is_unchanged(tmp_path):
    eager = _model(attn="eager")
    assert not use_grouped_sdpa(eager) and eager.config._attn_implementation == "eager"
    model = _model()
    assert use_grouped_sdpa(model) and shared_prefix_supported(model)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert GROUPED_SDPA not in json.dumps(saved)


def test_load_pretrained_uses_it(tiny_model_dir):
    from ragen_torchrl.models.loading import load_pretrained

    model, _ = load_pretrained(tiny_model_dir, device="cpu", dtype="float32")
    assert model.config._attn_implementation == GROUPED_SDPA and shared_prefix_supported(model)


def test_non_cpu_tensors_take_transformers_path(monkeypatch):
    seen = []
    monkeypatch.setattr(
        grouped_sdpa, "sdpa_attention_forward", lambda *a, **k: seen.append(a[1].device.type) or ("x", None)
    )

    class Layer(torch.nn.Module):
        num_key_value_groups = 2

    q, k = torch.zeros(1, 4, 3, 8, device="meta"), torch.zeros(1, 2, 3, 8, device="meta")
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool, device="meta")
    assert grouped_sdpa.grouped_sdpa_forward(Layer(), q, k, k, mask) == ("x", None)
    assert seen == ["meta"]
