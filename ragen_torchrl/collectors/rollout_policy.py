"""The rollout policy of ``rollout.backend``: transformers (``hf``, the default) or vLLM (``vllm``).

Both satisfy :func:`~ragen_torchrl.collectors.collect_rollouts`' policy contract; the ``hf`` policy
is :func:`~ragen_torchrl.collectors.make_generation_policy`, the ``vllm`` one comes with a weight
sync (:mod:`ragen_torchrl.collectors.vllm_backend`, which imports vLLM only when an engine is built).

The backends' names are the config vocabulary of ``rollout.backend``
(:data:`ragen_torchrl.trainer.config_schema.ROLLOUT_BACKENDS`, checked before any model is loaded).

Example:
    >>> build_rollout_policy("sglang", None, None, max_new_tokens=8, temperature=1.0)
    Traceback (most recent call last):
    ...
    ValueError: unknown rollout backend 'sglang'; choose one of: hf, vllm
"""

from __future__ import annotations

import torch

from ..rollout_options import sampling_truncation
from .hf_policy import make_generation_policy
from .vl_policy import VLRolloutPolicy
from .vllm_backend import VLLMWeightSync, make_vllm_generation_policy

__all__ = ["build_rollout_policy"]


def build_rollout_policy(
    backend: str,
    model: torch.nn.Module,
    tokenizer,
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None = None,
    top_p: float = 1.0,
    min_p: float | None = None,
    reply_prime: str = "",
    engine=None,
    trajectory: str | None = None,
    kv_cache: bool = True,
    max_cached_tokens: int | None = None,
    sampler: str | None = None,
    attention: str | None = None,
    processor=None,
    **vllm_kwargs,
):
    """The rollout policy of ``rollout.backend`` and its weight sync: ``(policy, sync)``.

    * ``"hf"``: :func:`~ragen_torchrl.collectors.make_generation_policy` (generates with ``model``
      itself, so always current) and ``sync=None``; ``trajectory`` (``rollout.trajectory``, default
      ``"tokens"``) picks its token-level or history rollout; ``kv_cache`` / ``max_cached_tokens``
      (``rollout.kv_cache`` / ``rollout.kv_cache_max_tokens``, ``None``: the default cap) set the
      token-level rollout's per-row KV cache; ``sampler`` (``rollout.sampler``) how each token is drawn and
      ``attention`` (``rollout.attention``) how the first turn of a group decodes (``None``: the model's
      device picks, :func:`~ragen_torchrl.rollout_options.per_device`);
    * ``"vllm"``: :func:`~ragen_torchrl.collectors.vllm_backend.make_vllm_generation_policy` (``trajectory``
      picks its token-level or history rollout, as for ``"hf"``) and a :class:`~ragen_torchrl.collectors.vllm_backend.VLLMWeightSync` to
      :meth:`~ragen_torchrl.collectors.vllm_backend.VLLMWeightSync.push` after each update. Pass ``engine=policy.model`` of a first vLLM
      policy to sample at another temperature from the same engine: ``sync`` is then ``None``, the
      first policy's sync keeps that engine current.

    With a ``processor`` (a :class:`~ragen_torchrl.models.vision.VLProcessor`: ``model`` is a
    vision-language model) the policy is a :class:`~ragen_torchrl.collectors.vl_policy.VLRolloutPolicy`
    (backend ``hf``, full-distribution sampling at ``temperature`` > 0) and ``sync=None``.

    Raises:
        ValueError: an unknown backend (lists the choices), or bad ``max_new_tokens``/``temperature``.
        VLLMUnavailableError: ``"vllm"`` without vLLM or without a CUDA GPU.

    Example:
        >>> build_rollout_policy("sglang", None, None, max_new_tokens=8, temperature=1.0)
        Traceback (most recent call last):
        ...
        ValueError: unknown rollout backend 'sglang'; choose one of: hf, vllm
    """
    sampling = {"top_k": top_k, "top_p": top_p, "min_p": min_p, "reply_prime": reply_prime}
    if backend not in ("hf", "vllm"):
        raise ValueError(f"unknown rollout backend {backend!r}; choose one of: hf, vllm")
    if processor is not None:
        if backend != "hf" or engine is not None or vllm_kwargs:
            raise ValueError(f"a vision-language policy needs rollout.backend=hf, got {backend!r}")
        if trajectory not in (None, "tokens"):
            raise ValueError(f"a vision-language policy keeps token trajectories; rollout.trajectory={trajectory!r}")
        if sampling_truncation(top_k, top_p, min_p) is not None:
            raise ValueError("a vision-language policy samples the full distribution: leave top_k/top_p/min_p unset")
        policy = VLRolloutPolicy(
            model, processor, max_new_tokens=max_new_tokens, temperature=temperature, reply_prime=reply_prime
        )
        return policy, None
    if backend == "hf":
        if engine is not None or vllm_kwargs:
            raise ValueError(f"rollout backend 'hf' takes no vLLM options, got {sorted(vllm_kwargs) or ['engine']}")
        policy = make_generation_policy(
            model,
            tokenizer,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            trajectory=trajectory or "tokens",
            kv_cache=kv_cache,
            **({} if max_cached_tokens is None else {"max_cached_tokens": max_cached_tokens}),
            sampler=sampler,
            attention=attention,
            **sampling,
        )
        return policy, None
    policy = make_vllm_generation_policy(
        model,
        tokenizer,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        engine=engine,
        trajectory=trajectory or "tokens",
        **sampling,
        **vllm_kwargs,
    )
    return policy, (None if engine is not None else VLLMWeightSync(model, policy))
