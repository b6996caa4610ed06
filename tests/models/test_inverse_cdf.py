"""The inverse-CDF sampler: the distribution it draws, against exact probabilities computed independently,
inside ``generate`` as ``transformers``' own sampler would draw, and its bad inputs."""

from __future__ import annotations

import pytest
import torch
from helpers import random_qwen2
from transformers import LogitsProcessorList

import ragen_torchrl.models.inverse_cdf as inverse_cdf
from ragen_torchrl.collectors import hf_generate_kwargs
from ragen_torchrl.models.entropy_recorder import EntropyRecorder
from ragen_torchrl.models.inverse_cdf import InverseCDFSampler, inverse_cdf_generate_kwargs, inverse_cdf_sample

DRAWS = 200_000
# 5 standard errors of a frequency near 0.5 over DRAWS draws: the largest gap a correct sampler shows
TOL = 5 * (0.25 / DRAWS) ** 0.5


def _freq(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.bincount(tokens.reshape(-1), minlength=vocab).double() / tokens.numel()


def test_frequencies_match_the_probabilities_and_zero_mass_is_never_drawn():
    probs = torch.tensor([0.05, 0.0, 0.3, 0.0, 0.15, 0.5, 0.0])  # zeros between and at the end
    g = torch.Generator().manual_seed(0)
    tokens = inverse_cdf_sample(probs.expand(DRAWS, -1), g)
    freq = _freq(tokens, 7)
    assert freq[[1, 3, 6]].sum() == 0
    assert (freq - probs.double()).abs().max() < TOL


def test_unnormalised_rows_are_drawn_in_proportion():
    weights = torch.tensor([[2.0, 6.0], [1.0, 0.0]]).repeat(DRAWS // 2, 1)
    tokens = inverse_cdf_sample(weights, torch.Generator().manual_seed(1)).reshape(-1, 2)
    assert abs(tokens[:, 0].double().mean().item() - 0.75) < TOL
    assert tokens[:, 1].eq(0).all()


def test_a_uniform_that_rounds_up_to_the_total_takes_the_last_token_with_mass(monkeypatch):
    # u * total == total would search past the end: the last token with positive mass, never a masked one
    monkeypatch.setattr(inverse_cdf.torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=torch.float64))
    probs = torch.tensor([[0.2, 0.8, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    assert inverse_cdf_sample(probs).tolist() == [1, 3]


@pytest.mark.parametrize(
    "probs, match",
    [
        (torch.tensor([0.5, 0.5]), r"\[rows, vocab\]"),
        (torch.tensor([[0.0, 0.0], [0.5, 0.5]]), "positive total"),
        (torch.tensor([[float("nan"), 1.0]]), "finite, positive"),
        (torch.tensor([[float("inf"), 1.0]]), "finite, positive"),
    ],
)
def test_bad_probabilities_are_refused_clearly(probs, match):
    with pytest.raises(ValueError, match=match):
        inverse_cdf_sample(probs)


def _exact_warped(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The tempered, top-k then top-p truncated distribution, by hand (sorted cumulative mass)."""
    p = torch.softmax(logits.double() / temperature, -1)
    order = p.argsort(descending=True)
    keep = torch.zeros_like(p, dtype=torch.bool)
    keep[order[:top_k]] = True
    q = torch.where(keep, p, 0.0)
    q = q / q.sum()
    # nucleus: drop the tail whose mass (smallest first) is at most 1 - top_p
    asc = q.argsort()
    tail = q[asc].cumsum(0) <= 1 - top_p
    q[asc[tail]] = 0
    return q / q.sum()


def test_the_sampler_draws_the_warped_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, 1.5, -3.0, 0.2]])
    sampler = InverseCDFSampler(temperature=0.7, top_k=5, top_p=0.8, generator=torch.Generator().manual_seed(2))
    scores = sampler(None, logits.expand(DRAWS, -1).clone())
    assert torch.isinf(scores).sum(-1).eq(7).all() and scores.max(-1).values.eq(0).all()
    freq = _freq(scores.argmax(-1), 8)
    exact = _exact_warped(logits[0], 0.7, 5, 0.8)
    assert exact.gt(0).sum() == 3  # the truncation matters here
    assert (freq - exact).abs().max() < TOL


@pytest.fixture(scope="module")
def model():
    return random_qwen2(12, logit_scale=25.0)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_generate_draws_the_first_token_from_the_models_softmax(model, temperature):
    """Through ``generate``: the first new token's frequencies over many rows equal the model's
    (tempered) softmax computed by a forward pass, for ours and for ``transformers``' sampler alike."""
    rows = 20_000
    ids = torch.tensor([[3, 5, 7]]).expand(rows, -1)
    with torch.no_grad():
        exact = torch.softmax(model(ids[:1]).logits[0, -1].double() / temperature, -1)
    kwargs = hf_generate_kwargs(1, temperature)
    tol = 5 * (0.25 / rows) ** 0.5
    untempered = torch.softmax(model(ids[:1]).logits[0, -1].double().detach(), -1)
    assert temperature == 1.0 or (exact - untempered).abs().max() > 3 * tol  # the temperature is visible
    for kw in (kwargs, inverse_cdf_generate_kwargs(kwargs)):
        torch.manual_seed(3)
        with torch.no_grad():
            first = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)[:, -1]
        assert (_freq(first, 12) - exact).abs().max() < tol


def test_processors_already_there_run_first_and_see_the_logits(model):
    """An entropy recorder set before the rewrite still records the model's scores (not the sampler's
    one-hot); the caller's dict and list are left as they were."""
    rec = EntropyRecorder()
    kwargs = {**hf_generate_kwargs(3, 1.0), "logits_processor": LogitsProcessorList([rec])}
    out = inverse_cdf_generate_kwargs(kwargs)
    assert out["do_sample"] is False and kwargs["do_sample"] is True
    assert [type(p) for p in out["logits_processor"]] == [EntropyRecorder, InverseCDFSampler]
    assert len(kwargs["logits_processor"]) == 1
    ids = torch.tensor([[3, 5, 7], [4, 4, 2]])
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **out)
    sums, counts = rec.row_sums([3, 3])
    assert torch.isfinite(sums).all() and (sums > 0).all()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"do_sample": False, "max_new_tokens": 2},
        {"do_sample": True, "typical_p": 0.9},
        {"do_sample": True, "epsilon_cutoff": 0.01},
        {"do_sample": True, "num_beams": 2},
    ],
)
def test_what_the_sampler_does_not_reproduce_is_left_to_transformers(kwargs):
    assert inverse_cdf_generate_kwargs(kwargs) is kwargs


def test_settings_absent_from_the_keywords_come_from_the_generation_config(model):
    cfg = model.generation_config.__class__(do_sample=True, temperature=0.5, top_k=4)
    out = inverse_cdf_generate_kwargs({"max_new_tokens": 2}, generation_config=cfg)
    warpers = [type(w).__name__ for w in out["logits_processor"][-1].warpers]
    assert out["do_sample"] is False and warpers == ["TemperatureLogitsWarper", "TopKLogitsWarper"]
    # nothing sets top_k: transformers' default of 50 applies, as in its own sampler
    out = inverse_cdf_generate_kwargs({"do_sample": True})
    assert [type(w).__name__ for w in out["logits_processor"][-1].warpers] == ["TopKLogitsWarper"]
