"""TorchRL transforms: group advantage, reward shaping, SNR-aware filtering, T3 truncation.

* record transforms (on trajectory records, e.g. as replay-buffer write-time transforms):
  :class:`GroupAdvantage`, :class:`OverlongPenalty`, :class:`SNRFilter`;
* env transforms: :class:`T3Truncation` (through ``TransformedEnv`` /
  :class:`RowTransformedEnv`) and its stall rules.

Names are imported from their submodules on first use.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
    >>> from ragen_torchrl.transforms import SNRFilter
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), transform=SNRFilter(), batch_size=2)
    >>> _ = rb.extend(TensorDict(group_id=torch.tensor([0, 0, 1, 1]),
    ...                          episode_return=torch.tensor([0.0, 1.0, 1.0, 1.0]), batch_size=[4]))
    >>> len(rb)  # group 1 has no reward variance: never written
    2
"""

from .. import lazy_exports

_EXPORTS = {
    # group advantage and reward shaping
    "GroupAdvantage": ".advantage",
    "group_advantage": ".advantage",
    "OverlongPenalty": ".overlong",
    "overlong_penalty": ".overlong",
    "RecordTransform": ".records",
    # SNR-aware filtering (RAGEN-2, arXiv 2604.06268)
    "SNRFilter": ".snr",
    "FilterGuard": "..trainer.early_stop",
    "ValidationStop": "..trainer.early_stop",
    "build_filter": ".snr",
    "check_filter_value": ".group_selection",
    "GroupSelection": ".group_selection",
    "group_scores": ".group_selection",
    "loss_scale": "..trainer.early_stop",
    "select_groups": ".group_selection",
    "stop_stats": "..trainer.early_stop",
    "unfiltered_stats": "..trainer.early_stop",
    "validate_filter_config": ".snr",
    "FILTER_CONFIG_DEFAULTS": ".snr",
    "STRATEGIES": ".group_selection",
    "MODES": ".group_selection",
    "METRICS": ".group_selection",
    "ENTROPY_METRICS": ".group_selection",
    "LOSS_SCALE_MODES": ".snr",
    # T3 truncation
    "T3Truncation": ".t3",
    "DEFAULT_PROMPT": ".t3",
    "PAPER_DEFAULTS": ".t3_rules",
    "PREFERENCE_RULES": ".t3_rules",
    "TASK_NAMES": ".t3_rules",
    "RowTransformedEnv": ".t3",
    "t3_config_defaults": ".t3",
    "t3_token_stats": ".t3",
    "StallRule": ".t3_rules",
    "AnyRule": ".t3_rules",
    "ConsecutiveUnknownRule": ".t3_rules",
    "EstimateDriftRule": ".t3_rules",
    "OutsideHypothesisRule": ".t3_rules",
    "ShrinkStallRule": ".t3_rules",
    "SimilarityDecreaseRule": ".t3_rules",
    "make_rule": ".t3_rules",
}

# the same names as _EXPORTS (a literal list, for static tools)
__all__ = [
    "DEFAULT_PROMPT",
    "ENTROPY_METRICS",
    "FILTER_CONFIG_DEFAULTS",
    "LOSS_SCALE_MODES",
    "METRICS",
    "MODES",
    "PAPER_DEFAULTS",
    "PREFERENCE_RULES",
    "STRATEGIES",
    "TASK_NAMES",
    "AnyRule",
    "ConsecutiveUnknownRule",
    "EstimateDriftRule",
    "FilterGuard",
    "GroupSelection",
    "GroupAdvantage",
    "OutsideHypothesisRule",
    "OverlongPenalty",
    "RecordTransform",
    "RowTransformedEnv",
    "SNRFilter",
    "ShrinkStallRule",
    "SimilarityDecreaseRule",
    "StallRule",
    "T3Truncation",
    "ValidationStop",
    "build_filter",
    "check_filter_value",
    "group_advantage",
    "group_scores",
    "loss_scale",
    "make_rule",
    "overlong_penalty",
    "select_groups",
    "stop_stats",
    "t3_config_defaults",
    "t3_token_stats",
    "unfiltered_stats",
    "validate_filter_config",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
