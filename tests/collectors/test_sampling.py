"""Rollouts sample from the policy that is trained: the full softmax at the rollout temperature.

transformers' ``generate`` fills every setting it is not given from the checkpoint's
``generation_config`` and then from its global defaults (``top_k=50``); the behaviour log-probs and
the losses score tokens with the full softmax, so the sampler must draw from exactly that.

The distribution tests draw one token from a tiny random Qwen2 (vocabulary 128 > 50, so a
leaked ``top_k=50`` cuts mass off) thousands of times in one batched ``generate`` call and
compare the counts with ``softmax(logits / T)`` by a chi-square test.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from helpers import random_qwen2

from ragen_torchrl.collectors import check_sampling, hf_generate_kwargs, make_generation_policy, sampling_truncation

VOCAB = 128
DRAWS = 10000


def _tiny_qwen2(seed: int = 0):
    return random_qwen2(VOCAB, seed=seed)


def _chi2_critical(df: int, z: float = 3.719) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (z = 3.719: p = 1e-4)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic with the tokens expected fewer than 5 times pooled into one bin."""
    expected = probs.double() * counts.sum()
    small = expected < 5
    obs = torch.cat([counts[~small].double(), counts[small].double().sum().reshape(1)])
    exp = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    keep = exp > 0
    stat = (((obs - exp) ** 2)[keep] / exp[keep]).sum().item()
    return stat, int(keep.sum()) - 1


def _draw(model, temperature: float, **sampling) -> tuple[torch.Tensor, torch.Tensor]:
    prompt = torch.tensor([[5, 17, 42, 9]])
    with torch.no_grad():
        probs = torch.softmax(model(prompt).logits[0, -1].double() / temperature, -1)
    torch.manual_seed(1)
    kwargs = hf_generate_kwargs(1, temperature, **sampling)
    with torch.no_grad():
        out = model.generate(
            input_ids=prompt.expand(DRAWS, -1), attention_mask=torch.ones(DRAWS, 4, dtype=torch.long), **kwargs
        )
    return torch.bincount(out[:, -1], minlength=VOCAB), probs


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_samples_follow_the_full_softmax(temperature):
    model = _tiny_qwen2()
    counts, probs = _draw(model, temperature)
    # the test has power: a top-50 sampler would never draw this much tail mass
    assert probs.sort(descending=True).values[50:].sum() > 0.02
    stat, df = _chi2(counts, probs)
    assert stat < _chi2_critical(df), (stat, df)


def test_a_checkpoint_generation_config_does_not_truncate_sampling(tmp_path):
    """generation_config.json with top_k=5 and a repetition penalty: still the full softmax."""
    from transformers import AutoModelForCausalLM

    model = _tiny_qwen2()
    model.generation_config.do_sample, model.generation_config.top_k = True, 5
    model.generation_config.repetition_penalty = 1.8
    model.generation_config.min_p = 0.2
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.generation_config.top_k == 5  # it is in the checkpoint
    counts, probs = _draw(loaded, 1.0)
    assert int((counts > 0).sum()) > 5
    stat, df = _chi2(counts, probs)
    assert stat < _chi2_critical(df), (stat, df)


def test_configured_top_k_truncates_and_is_logged(caplog):
    model = _tiny_qwen2()
    counts, probs = _draw(model, 1.0, top_k=5)
    assert set(torch.nonzero(counts).reshape(-1).tolist()) <= set(probs.topk(5).indices.tolist())
    with caplog.at_level(logging.WARNING, logger="ragen_torchrl.collectors.grouped"):
        make_generation_policy(model, _FakeTokenizer(), max_new_tokens=1, top_k=5, min_p=0.1)
    assert "truncated distribution (top_k=5, min_p=0.1)" in caplog.text


def test_the_wrapper_passes_every_sampling_setting_to_generate():
    """torchrl's constructor drops settings it does not know (min_p, typical_p, ...): the built
    wrapper's generate_kwargs hold them all."""
    policy = make_generation_policy(_tiny_qwen2(), _FakeTokenizer(), max_new_tokens=3)
    want = hf_generate_kwargs(3, 1.0)
    got = policy.generate_kwargs
    assert {k: got[k] for k in want} == want
    assert got["top_k"] == 0 and got["min_p"] is None and got["typical_p"] == 1.0


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"top_p": 0.0}, "rollout.top_p"),
        ({"top_p": 1.5}, "rollout.top_p"),
        ({"top_k": -1}, "rollout.top_k"),
        ({"top_k": 2.5}, "rollout.top_k"),
        ({"min_p": 1.0}, "rollout.min_p"),
        ({"min_p": -0.1}, "rollout.min_p"),
    ],
)
def test_bad_sampling_values_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        check_sampling(**kwargs)


def test_sampling_truncation_words():
    assert sampling_truncation() is None and sampling_truncation(top_k=0, top_p=1.0, min_p=0.0) is None
    assert sampling_truncation(top_p=0.95) == "top_p=0.95"


class _FakeTokenizer:
    """Just enough of a tokenizer for the wrapper's constructor."""

    pad_token = "<pad>"
    pad_token_id = 0
    eos_token_id = 1
    chat_template = None
    name_or_path = "fake"
    padding_side = "left"

    def __call__(self, text, **kwargs):
        return {"input_ids": [0]}
