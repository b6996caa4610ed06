"""Diagnostics: template-collapse monitoring (MI proxies, entropy) and gradient-SNR probes.

:class:`CollapseMonitor` works on any Hugging Face causal LM and any batch of trajectory
records (RAGEN-2, arXiv 2604.06268).

Example:
    >>> import torch
    >>> from ragen_torchrl.diagnostics import entropy_metrics
    >>> m = entropy_metrics(torch.tensor([1.0, 3.0, 2.0, 2.0]), torch.tensor([0, 0, 1, 1]))
    >>> m["reasoning_token_entropy_mean"], m["reasoning_token_entropy_group_std"]
    (2.0, 0.0)
"""

from __future__ import annotations

from .collapse import CollapseMonitor, turn_pairs
from .cross_scoring import DEFAULT_BATCH_SIZE, METHODS, cross_score
from .entropy import entropy_metrics, token_entropy
from .grad_snr import GradSNRProbe, bucket_grad_norms, rv_buckets
from .mi import DEFAULT_MI_EVERY, RETRIEVAL_KS, ZSCORE_EPS, MIProxyTracker, mi_proxies
from .mi_sampling import (
    DEFAULT_MI_NUM_PAIRS,
    PairSample,
    equivalence_from_keys,
    reasoning_valid_rate,
    sample_first_turn_pairs,
    sample_trajectory_uniform_pairs,
)
from .prefix_tree import PrefixTree, build_prefix_tree, chunk_sorted_by_budget
from .tree_scoring import tree_supported
from .vl_scoring import VLContext, cross_score_vl, vl_context, vl_context_key

__all__ = [
    "CollapseMonitor",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MI_EVERY",
    "DEFAULT_MI_NUM_PAIRS",
    "GradSNRProbe",
    "METHODS",
    "MIProxyTracker",
    "PairSample",
    "PrefixTree",
    "RETRIEVAL_KS",
    "VLContext",
    "ZSCORE_EPS",
    "bucket_grad_norms",
    "build_prefix_tree",
    "chunk_sorted_by_budget",
    "cross_score",
    "cross_score_vl",
    "entropy_metrics",
    "equivalence_from_keys",
    "mi_proxies",
    "reasoning_valid_rate",
    "rv_buckets",
    "sample_first_turn_pairs",
    "sample_trajectory_uniform_pairs",
    "token_entropy",
    "tree_supported",
    "turn_pairs",
    "vl_context",
    "vl_context_key",
]
