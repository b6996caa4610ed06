"""Data collection: G samples per level, played to the end (:mod:`.grouped`), with the rollout
policy of either generation backend (:mod:`.rollout_policy`: ``hf``, :mod:`.hf_policy`, or ``vllm``,
:mod:`.vllm_backend`, which imports vLLM only when an engine is built). What the collector asks of a
policy is the protocol of :mod:`.policy_protocol`.

Example:
    >>> from ragen_torchrl.collectors import build_rollout_policy, collect_rollouts, make_generation_policy
    >>> callable(collect_rollouts) and callable(make_generation_policy) and callable(build_rollout_policy)
    True
"""

from __future__ import annotations

from ..rollout_options import check_sampling, sampling_truncation
from .generation import (
    NEUTRAL_GENERATE_KWARGS,
    NEUTRAL_SAMPLING_KWARGS,
    TRAJECTORY_MODES,
    build_generating_wrapper,
    check_trajectory,
    hf_generate_kwargs,
    token_policy_template,
    warn_if_truncated,
    wrapper_generate_kwargs,
)
from .grouped import RowAccumulators, collect_rollouts, turn_cache_metrics
from .hf_policy import HFRolloutPolicy, TokenPromptWrapper, make_generation_policy
from .policy_protocol import (
    POLICY_OUTPUT_KEYS,
    TOKEN_POLICY_OUTPUT_KEYS,
    EntropyRecording,
    PolicyContractError,
    RolloutPolicy,
    TokenPromptPolicy,
    TrajectoryOwner,
    as_rollout_policy,
    check_policy_output,
    protocol_members,
)
from .rollout_policy import build_rollout_policy
from .vl_policy import VLRolloutPolicy
from .vllm_backend import (
    VLLMUnavailableError,
    VLLMWeightSync,
    find_vllm_model,
    make_vllm_generation_policy,
    reparse_replies,
    require_vllm,
    vllm_engine_kwargs,
    vllm_sampling_kwargs,
)
from .vllm_token_policy import LOG_PROBS_RESPONSE, VLLMTokenPolicy, reply_from_output, token_sampling_kwargs

__all__ = [
    "LOG_PROBS_RESPONSE",
    "NEUTRAL_GENERATE_KWARGS",
    "NEUTRAL_SAMPLING_KWARGS",
    "POLICY_OUTPUT_KEYS",
    "TOKEN_POLICY_OUTPUT_KEYS",
    "TRAJECTORY_MODES",
    "EntropyRecording",
    "HFRolloutPolicy",
    "PolicyContractError",
    "RolloutPolicy",
    "RowAccumulators",
    "TokenPromptPolicy",
    "TokenPromptWrapper",
    "TrajectoryOwner",
    "VLLMTokenPolicy",
    "VLLMUnavailableError",
    "VLLMWeightSync",
    "VLRolloutPolicy",
    "as_rollout_policy",
    "build_generating_wrapper",
    "build_rollout_policy",
    "check_policy_output",
    "check_sampling",
    "check_trajectory",
    "collect_rollouts",
    "find_vllm_model",
    "hf_generate_kwargs",
    "make_generation_policy",
    "make_vllm_generation_policy",
    "protocol_members",
    "reparse_replies",
    "reply_from_output",
    "require_vllm",
    "sampling_truncation",
    "token_policy_template",
    "token_sampling_kwargs",
    "turn_cache_metrics",
    "vllm_engine_kwargs",
    "vllm_sampling_kwargs",
    "warn_if_truncated",
    "wrapper_generate_kwargs",
]
