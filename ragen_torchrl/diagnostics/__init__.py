"""Diagnostics: template-collapse monitoring (MI proxies, entropy) and gradient-SNR probes.

:class:`CollapseMonitor` works on any Hugging Face causal LM and any batch of trajectory
records (RAGEN-2, arXiv 2604.06268). Names are imported from their submodules on first use.

Example:
    >>> import torch
    >>> from ragen_torchrl.diagnostics import entropy_metrics
    >>> m = entropy_metrics(torch.tensor([1.0, 3.0, 2.0, 2.0]), torch.tensor([0, 0, 1, 1]))
    >>> m["reasoning_token_entropy_mean"], m["reasoning_token_entropy_group_std"]
    (2.0, 0.0)
"""

from .. import lazy_exports

_EXPORTS = {
    # collapse monitor (MI proxies + entropy on a batch of conversations)
    "CollapseMonitor": ".collapse",
    "turn_pairs": ".collapse",
    # cross-scoring every reasoning against every context
    "cross_score": ".cross_scoring",
    "tree_supported": ".cross_scoring",
    "METHODS": ".cross_scoring",
    "DEFAULT_BATCH_SIZE": ".cross_scoring",
    "PrefixTree": ".prefix_tree",
    "build_prefix_tree": ".prefix_tree",
    "chunk_sorted_by_budget": ".prefix_tree",
    # mutual-information proxies and pair sampling
    "MIProxyTracker": ".mi",
    "PairSample": ".mi_sampling",
    "mi_proxies": ".mi",
    "equivalence_from_keys": ".mi_sampling",
    "reasoning_valid_rate": ".mi_sampling",
    "sample_first_turn_pairs": ".mi_sampling",
    "sample_trajectory_uniform_pairs": ".mi_sampling",
    "DEFAULT_MI_EVERY": ".mi",
    "DEFAULT_MI_NUM_PAIRS": ".mi_sampling",
    "RETRIEVAL_KS": ".mi",
    "ZSCORE_EPS": ".mi",
    # entropy
    "token_entropy": ".entropy",
    "entropy_metrics": ".entropy",
    # gradient SNR per reward-variance bucket
    "rv_buckets": ".grad_snr",
    "bucket_grad_norms": ".grad_snr",
    "GradSNRProbe": ".grad_snr",
}

# the same names as _EXPORTS (a literal list, for static tools)
__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MI_EVERY",
    "DEFAULT_MI_NUM_PAIRS",
    "METHODS",
    "RETRIEVAL_KS",
    "ZSCORE_EPS",
    "CollapseMonitor",
    "GradSNRProbe",
    "MIProxyTracker",
    "PairSample",
    "PrefixTree",
    "bucket_grad_norms",
    "build_prefix_tree",
    "chunk_sorted_by_budget",
    "cross_score",
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
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
