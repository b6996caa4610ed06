"""The trainer's policies over its one model: the rollout policies (:func:`rollout_policies`: training at
``rollout.temperature``, validation at ``trainer.val_temperature``) and the log-prob policies that score
their replies (:func:`logprob_policy`: the behaviour / loss actor; with ``algo.kl_coeff > 0`` also the
reference, :func:`reference_policy`).

Every one of them sees the same replies: primed as the rollout primes them (``rollout.prime_think``) and
scored at the rollout temperature, so behaviour, reference and loss see the distribution sampled.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import torch
from omegaconf import DictConfig

from ..collectors.rollout_policy import build_rollout_policy
from ..models.priming import prime_text
from ..objectives.logprobs import make_logprob_policy

__all__ = ["RolloutPolicies", "logprob_policy", "reference_policy", "rollout_policies"]


class RolloutPolicies(NamedTuple):
    """What :func:`rollout_policies` builds."""

    train: Any  # samples the training rollouts (rollout.temperature)
    val: Any  # samples the validations (trainer.val_temperature); the same engine under vllm
    weight_sync: Any | None  # pushes the trained weights to a separate engine (vllm), else None


def rollout_policies(cfg: DictConfig, model: torch.nn.Module, tokenizer, processor, *, fsdp: bool) -> RolloutPolicies:
    """The training and validation rollout policies of ``model`` for a (validated) config: ``rollout.backend=hf``
    generates with the training model itself, ``vllm`` with an engine fed the weights after each update."""
    rcfg = cfg.rollout
    # the full distribution unless configured (the config check refuses truncation for training)
    sampling = {k: rcfg[k] for k in ("top_k", "top_p", "min_p")}
    # the reference primes every reply with <think> (a prompt token, never trained)
    sampling["reply_prime"] = prime_text(rcfg.prime_think)
    sampling["trajectory"] = rcfg.trajectory
    sampling["processor"] = processor  # a vision-language model's (None for a text model)
    if rcfg.backend == "hf":  # the token rollout's per-row KV cache between turns
        sampling["kv_cache"] = rcfg.kv_cache
        sampling["max_cached_tokens"] = rcfg.kv_cache_max_tokens
        sampling["sampler"] = rcfg.sampler
        sampling["attention"] = rcfg.attention
    policy, weight_sync = build_rollout_policy(
        rcfg.backend, model, tokenizer, max_new_tokens=rcfg.max_new_tokens, temperature=rcfg.temperature, **sampling
    )
    val_policy, _ = build_rollout_policy(  # the same engine (vllm), another temperature
        rcfg.backend,
        model,
        tokenizer,
        max_new_tokens=rcfg.max_new_tokens,
        temperature=cfg.trainer.val_temperature,
        **sampling,
        **({"engine": policy.model} if weight_sync is not None else {}),
    )
    if fsdp:
        # transformers syncs every generate step across ranks for a sharded model; here the
        # weights are gathered for generation, and ranks generate different lengths
        for p in (policy, val_policy):
            p.generate_kwargs["synced_gpus"] = False
    return RolloutPolicies(policy, val_policy, weight_sync)


def logprob_policy(cfg: DictConfig, model: torch.nn.Module, tokenizer, processor):
    """The log-prob policy of ``model`` that scores the rollouts' replies (behaviour log-probs, the loss)."""
    return make_logprob_policy(
        model,
        tokenizer,
        reply_prime=prime_text(cfg.rollout.prime_think),
        processor=processor,
        temperature=cfg.rollout.temperature,
    )


def reference_policy(
    cfg: DictConfig, model: torch.nn.Module, tokenizer, processor, *, lora: bool, fsdp: bool, dtype: torch.dtype
):
    """The KL reference: a frozen copy of ``model`` as it is now (under FSDP2 in the compute ``dtype``, as the
    policy computes); a LoRA policy's is its own base model, its adapters switched off while it scores (no copy)."""
    ref_model = model if lora else copy.deepcopy(model).eval().requires_grad_(False)
    if fsdp and not lora:
        # the policy computes with FSDP2's gathered compute-dtype weights: so does its unsharded reference
        ref_model.to(dtype)
    ref = logprob_policy(cfg, ref_model, tokenizer, processor)
    ref.lora_reference = lora
    return ref
