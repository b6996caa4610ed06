"""Draw one token per row from a categorical distribution by inverse CDF, inside ``generate``.

``torch.multinomial`` (what ``transformers``' sampling loop calls at every decoding step) draws its
sample on the CPU by an exponential race over the whole vocabulary: one exponential variate per
entry through the sequential default generator, about 2.7 ms for 64 rows x 768 tokens on one thread.
Inverse CDF needs one uniform per row, a cumulative sum and a binary search (about 0.12 ms), and
draws from the same distribution: token ``i`` is picked when ``u * total`` falls in
``[cdf[i-1], cdf[i])``, an interval of width ``p_i`` (a zero-probability token has an empty one).
The seeded token stream differs from ``torch.multinomial``'s; the distribution does not.

:class:`InverseCDFSampler` is a ``LogitsProcessor`` that applies the sampling warpers
``generate`` would add (temperature, top-k, top-p, min-p, in ``transformers``' order), draws the
token and returns scores where only that token is finite, so ``generate`` run greedily
(``do_sample=False``) picks it; every other logits processor (an
:class:`~ragen_torchrl.models.entropy_recorder.EntropyRecorder`) still runs before it, as before
the warpers. :func:`inverse_cdf_generate_kwargs` rewrites sampling ``generate`` keywords that way.

Example:
    >>> import torch
    >>> probs = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    >>> draws = torch.stack([inverse_cdf_sample(probs, torch.Generator().manual_seed(s)) for s in range(200)])
    >>> draws[:, 0].unique().tolist(), sorted(draws[:, 1].unique().tolist())
    ([1], [0, 2])
"""

from __future__ import annotations

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

__all__ = ["InverseCDFSampler", "inverse_cdf_generate_kwargs", "inverse_cdf_sample"]

#: sampling settings :class:`InverseCDFSampler` does not reproduce: with one of them active the
#: keywords are left to ``transformers``' own sampler
_UNSUPPORTED = {"typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None, "num_beams": 1}

#: the sampling keywords removed when generating greedily through the sampler (``generate`` would
#: otherwise warn that they are set without ``do_sample``)
_SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h")


def inverse_cdf_sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of ``probs`` (``[B, V]``, non-negative, rows need not sum to 1), drawn with
    probability proportional to the row's entries: the first index whose cumulative sum exceeds
    ``u * total`` for a uniform ``u`` in ``[0, 1)``.

    The cumulative sum is taken in float64 so that rounding never moves mass between tokens. On the CPU
    a row without positive, finite mass raises ``ValueError`` (``torch.multinomial`` raises too); on an
    accelerator nothing is checked, so that a decoding step never waits for the device.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> probs = torch.tensor([[0.1, 0.0, 0.9]]).expand(20000, 3)
        >>> counts = torch.bincount(inverse_cdf_sample(probs, g), minlength=3)
        >>> counts[1].item(), round(counts[2].item() / 20000, 2)
        (0, 0.9)
    """
    if probs.dim() != 2:
        raise ValueError(f"probs must be [rows, vocab], got shape {tuple(probs.shape)}")
    cdf = probs.to(torch.float64).cumsum(-1)
    total = cdf[:, -1:]
    on_cpu = probs.device.type == "cpu"
    if on_cpu and (not bool((total > 0).all()) or not bool(torch.isfinite(total).all())):
        raise ValueError("every row needs a finite, positive total probability")
    u = torch.rand(total.shape, dtype=torch.float64, device=probs.device, generator=generator) * total
    index = torch.searchsorted(cdf, u, right=True).reshape(-1)
    past = index >= probs.shape[-1]
    if not on_cpu or bool(past.any()):  # u * total rounded up to total: the last token with positive mass
        last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).to(torch.int8).argmax(-1)
        index = torch.where(past, last, index)
    return index


class InverseCDFSampler(LogitsProcessor):
    """The last logits processor of a greedy ``generate`` that samples: applies the warpers of
    ``temperature`` / ``top_k`` / ``top_p`` / ``min_p`` (``transformers``' classes, in its order),
    draws each row's token with :func:`inverse_cdf_sample` and returns scores that are ``-inf`` except at
    the drawn token (``0``), so the greedy step picks it.

    Build it through :func:`inverse_cdf_generate_kwargs`.

    Example:
        >>> sampler = InverseCDFSampler(temperature=1.0, top_k=1)
        >>> sampler(None, torch.tensor([[0.0, 3.0, 1.0]])).tolist()
        [[-inf, 0.0, -inf]]
    """

    def __init__(
        self,
        *,
        temperature: float | None = 1.0,
        top_k: int | None = None,
        top_p: float | None = 1.0,
        min_p: float | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        warpers = LogitsProcessorList()
        if temperature is not None and temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(temperature))
        if top_k:
            warpers.append(TopKLogitsWarper(top_k=top_k))
        if top_p is not None and top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p=top_p))
        if min_p is not None:
            warpers.append(MinPLogitsWarper(min_p=min_p))
        self.warpers, self.generator = warpers, generator

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = self.warpers(input_ids, scores)
        tokens = inverse_cdf_sample(torch.softmax(scores.float(), -1), self.generator)
        out = torch.full_like(scores, -float("inf"))
        return out.scatter_(-1, tokens[:, None], 0.0)


def inverse_cdf_generate_kwargs(kwargs: dict, *, generation_config=None) -> dict:
    """``generate`` keywords that sample through :class:`InverseCDFSampler` instead of ``torch.multinomial``.

    When ``kwargs`` sample (``do_sample`` true, from the keywords or else ``generation_config``) with
    only temperature / top-k / top-p / min-p truncation, returns a copy that runs ``generate`` greedily
    with the sampler appended to its ``logits_processor`` (the ones already there run first, as
    they run before ``transformers``' warpers). Anything else (greedy, beams, typical-p, epsilon/eta
    cutoffs) is returned unchanged. Settings absent from ``kwargs`` come from ``generation_config``
    as ``generate`` would take them.

    Example:
        >>> kw = inverse_cdf_generate_kwargs({"do_sample": True, "temperature": 1.0, "top_k": 0, "max_new_tokens": 4})
        >>> kw["do_sample"], "temperature" in kw, type(kw["logits_processor"][-1]).__name__, kw["max_new_tokens"]
        (False, False, 'InverseCDFSampler', 4)
        >>> inverse_cdf_generate_kwargs({"do_sample": False})
        {'do_sample': False}
    """

    def setting(name, default):
        if name in kwargs:
            return kwargs[name]
        return getattr(generation_config, name, default) if generation_config is not None else default

    if not setting("do_sample", False):
        return kwargs
    if any(setting(k, v) not in (v, None) for k, v in _UNSUPPORTED.items()):
        return kwargs
    sampler = InverseCDFSampler(
        temperature=setting("temperature", 1.0),
        top_k=setting("top_k", 50),  # transformers' default when nothing sets it
        top_p=setting("top_p", 1.0),
        min_p=setting("min_p", None),
    )
    out = {k: v for k, v in kwargs.items() if k not in _SAMPLING_KEYS}
    out["do_sample"] = False
    out["logits_processor"] = LogitsProcessorList([*(kwargs.get("logits_processor") or []), sampler])
    return out
