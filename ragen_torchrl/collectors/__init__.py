"""Data collection: G samples per level, played to the end (:mod:`.grouped`), with the rollout
policy of either generation backend (:mod:`.rollout_policy`: ``hf`` or ``vllm``; :mod:`.vllm_backend`
imports vLLM only when an engine is built).

Example:
    >>> from ragen_torchrl.collectors import build_rollout_policy, collect_rollouts, make_generation_policy
    >>> callable(collect_rollouts) and callable(make_generation_policy) and callable(build_rollout_policy)
    True
"""

from __future__ import annotations

from ..rollout_options import check_sampling, sampling_truncation
from .grouped import (
    POLICY_OUTPUT_KEYS,
    TOKEN_POLICY_OUTPUT_KEYS,
    TRAJECTORY_MODES,
    PolicyContractError,
    TokenPromptWrapper,
    check_policy_output,
    collect_rollouts,
    hf_generate_kwargs,
    make_generation_policy,
    turn_cache_metrics,
    wrapper_generate_kwargs,
)
from .rollout_policy import build_rollout_policy
from .vl_policy import VLRolloutPolicy
from .vllm_backend import (
    LOG_PROBS_RESPONSE,
    VLLMTokenPolicy,
    VLLMUnavailableError,
    VLLMWeightSync,
    find_vllm_model,
    make_vllm_generation_policy,
    reparse_replies,
    reply_from_output,
    require_vllm,
    token_sampling_kwargs,
    vllm_engine_kwargs,
    vllm_sampling_kwargs,
)

__all__ = [
    "LOG_PROBS_RESPONSE",
    "POLICY_OUTPUT_KEYS",
    "TOKEN_POLICY_OUTPUT_KEYS",
    "TRAJECTORY_MODES",
    "PolicyContractError",
    "TokenPromptWrapper",
    "VLLMTokenPolicy",
    "VLLMUnavailableError",
    "VLLMWeightSync",
    "VLRolloutPolicy",
    "build_rollout_policy",
    "check_policy_output",
    "check_sampling",
    "collect_rollouts",
    "find_vllm_model",
    "hf_generate_kwargs",
    "make_generation_policy",
    "make_vllm_generation_policy",
    "reparse_replies",
    "reply_from_output",
    "require_vllm",
    "sampling_truncation",
    "token_sampling_kwargs",
    "turn_cache_metrics",
    "vllm_engine_kwargs",
    "vllm_sampling_kwargs",
    "wrapper_generate_kwargs",
]
