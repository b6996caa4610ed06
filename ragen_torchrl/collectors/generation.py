"""What the ``hf`` and ``vllm`` rollout policies share: sampling settings, the chat template, the wrapper.

Both backends sample the policy's full distribution at ``temperature`` with every setting explicit
(:func:`hf_generate_kwargs`, which the vLLM settings are derived from), render trajectories with the
same primed template (:func:`token_policy_template`), build their history-mode torchrl wrapper the
same way (:func:`build_generating_wrapper`) and warn the same way when ``top_k`` / ``top_p`` /
``min_p`` truncate the distribution (:func:`warn_if_truncated`).

Example:
    >>> check_trajectory("tokens")
    >>> check_trajectory("text")
    Traceback (most recent call last):
    ...
    ValueError: rollout.trajectory must be one of tokens, history, got 'text'
"""

from __future__ import annotations

import logging

from ..models.chat_template import trainable_chat_template
from ..models.loading import wrapper_chat_template
from ..models.priming import primed_chat_template
from ..rollout_options import check_sampling, sampling_truncation

__all__ = [
    "NEUTRAL_GENERATE_KWARGS",
    "NEUTRAL_SAMPLING_KWARGS",
    "TRAJECTORY_MODES",
    "build_generating_wrapper",
    "check_trajectory",
    "hf_generate_kwargs",
    "token_policy_template",
    "warn_if_truncated",
    "wrapper_generate_kwargs",
]

log = logging.getLogger(__name__)

#: ``rollout.trajectory``: one token sequence per row (``tokens``) or the conversation re-rendered each turn
TRAJECTORY_MODES = ("tokens", "history")

#: generation settings that leave the policy's distribution as it is (``None`` = off). transformers'
#: ``generate`` fills every setting not passed from the checkpoint's ``generation_config`` and then
#: from its global defaults (``top_k=50``), so each one is passed explicitly
NEUTRAL_GENERATE_KWARGS = {
    "num_beams": 1,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "bad_words_ids": None,
    "sequence_bias": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "guidance_scale": None,
    "watermarking_config": None,
}
#: the sampling warpers besides temperature, top-k, top-p and min-p, switched off
NEUTRAL_SAMPLING_KWARGS = {"typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None}


def check_trajectory(trajectory: str) -> None:
    """Raise ``ValueError`` unless ``trajectory`` is one of :data:`TRAJECTORY_MODES` (``rollout.trajectory``)."""
    if trajectory not in TRAJECTORY_MODES:
        raise ValueError(f"rollout.trajectory must be one of {', '.join(TRAJECTORY_MODES)}, got {trajectory!r}")


def hf_generate_kwargs(
    max_new_tokens: int, temperature: float, *, top_k: int | None = None, top_p: float = 1.0, min_p=None
) -> dict:
    """``generate_kwargs`` of :func:`~ragen_torchrl.collectors.make_generation_policy`: sample at
    ``temperature`` (0 = greedy) from the **full** distribution by default, every sampling setting explicit.

    ``top_k`` (``None``/0: off), ``top_p`` (1.0: off) and ``min_p`` (``None``: off) truncate it when
    set. Nothing comes from transformers' defaults (``top_k=50``) or from the checkpoint's own
    ``generation_config`` (instruct checkpoints ship ``top_k``, ``repetition_penalty``, ...): the
    behaviour log-probs and the losses score tokens with the policy's full softmax at ``temperature``,
    so the sampler must draw from that same distribution (RAGEN-2, arXiv 2604.06268, samples at temperature 1,
    top-p 1, no top-k). The vLLM backend mirrors these
    (:func:`ragen_torchrl.collectors.vllm_backend.vllm_sampling_kwargs`).

    Example:
        >>> kw = hf_generate_kwargs(64, 1.0)
        >>> {k: kw[k] for k in ("do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty")}
        {'do_sample': True, 'temperature': 1.0, 'top_k': 0, 'top_p': 1.0, 'min_p': None, 'repetition_penalty': 1.0}
        >>> hf_generate_kwargs(64, 0)["do_sample"], "top_k" in hf_generate_kwargs(64, 0)
        (False, False)
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    check_sampling(top_k, top_p, min_p)
    kwargs = {"max_new_tokens": int(max_new_tokens), **NEUTRAL_GENERATE_KWARGS}
    if temperature > 0:
        kwargs.update(
            do_sample=True,
            temperature=float(temperature),
            top_k=int(top_k or 0),  # 0: transformers adds no top-k warper
            top_p=float(top_p),
            min_p=None if min_p is None else float(min_p),
            **NEUTRAL_SAMPLING_KWARGS,
        )
    else:
        kwargs.update(do_sample=False)
    return kwargs


def wrapper_generate_kwargs(kwargs: dict) -> dict:
    """``kwargs`` without a ``top_k`` that switches top-k off (0 or -1): torchrl's LLM wrappers refuse
    ``top_k <= 0`` in their constructor; the full settings are set on the built wrapper.

    Example:
        >>> wrapper_generate_kwargs({"top_k": 0, "top_p": 1.0}), wrapper_generate_kwargs({"top_k": 5})
        ({'top_p': 1.0}, {'top_k': 5})
    """
    return {k: v for k, v in kwargs.items() if not (k == "top_k" and (v is None or v <= 0))}


def warn_if_truncated(top_k, top_p, min_p, temperature: float, backend: str = "") -> None:
    """Log a warning when the sampler draws from a truncated distribution (``temperature`` > 0 and a
    ``top_k`` / ``top_p`` / ``min_p`` that cuts it): the losses score the full softmax.

    Example:
        >>> warn_if_truncated(None, 1.0, None, 1.0)  # the full distribution: nothing to say
    """
    truncation = sampling_truncation(top_k, top_p, min_p) if temperature > 0 else None
    if truncation is not None:
        log.warning(
            "%srollouts sample a truncated distribution (%s): the behaviour log-probs and the losses use the "
            "policy's full softmax, so the samples are not drawn from the policy that is trained",
            f"{backend} " if backend else "",
            truncation,
        )


def token_policy_template(tokenizer, reply_prime: str) -> str | None:
    """The primed template both backends' policies render with (``None``: a tokenizer without a template
    and no prime; torchrl's wrapper then picks its own, as for any torchrl policy).

    Example:
        >>> token_policy_template(None, "") is None
        True
    """
    if wrapper_chat_template(tokenizer) is None and not reply_prime:
        template = None
    else:
        template = trainable_chat_template(tokenizer, prime=reply_prime)
    return primed_chat_template(template, reply_prime)


def build_generating_wrapper(cls, model, tokenizer, *, chat_template, input_mode: str, sampling: dict, reply_prime):
    """A torchrl LLM wrapper of class ``cls`` (a ``TransformersWrapper`` or ``vLLMWrapper`` subclass) that
    samples one reply per prompt with ``sampling`` (the backend's settings: the caller sets those the
    constructor drops on the built wrapper) and no log-probs, unpadded, with ``reply_prime`` recorded."""
    policy = cls(
        model,
        tokenizer=tokenizer,
        chat_template=chat_template,
        input_mode=input_mode,
        generate=True,
        return_log_probs=False,
        pad_output=False,
        generate_kwargs=wrapper_generate_kwargs(sampling),
    )
    policy.reply_prime = reply_prime
    return policy
