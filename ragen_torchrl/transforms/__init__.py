"""TorchRL transforms: group advantage, reward shaping, SNR-aware filtering, T3 truncation.

* record transforms (on trajectory records, e.g. as replay-buffer write-time transforms):
  :class:`GroupAdvantage`, :class:`OverlongPenalty`, :class:`SNRFilter`;
* env transforms: :class:`T3Truncation` (through ``TransformedEnv`` /
  :class:`~ragen_torchrl.envs.RowTransformedEnv`) and its stall rules;
* a replay-buffer sampler with the SNR filter's selection: :class:`TopVarianceGroupSampler`.

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

from __future__ import annotations

from .advantage import GroupAdvantage, group_advantage
from .group_sampler import TopVarianceGroupSampler
from .group_selection import (
    ENTROPY_METRICS,
    METRICS,
    MODES,
    STRATEGIES,
    GroupSelection,
    check_filter_value,
    group_scores,
    random_groups,
    random_seed,
    select_groups,
)
from .overlong import OverlongPenalty, overlong_penalty
from .records import RecordTransform
from .snr import LOSS_SCALE_MODES, SNRFilter, build_filter, keep_rows, validate_filter_config
from .t3 import DEFAULT_PROMPT, T3Truncation, t3_config_defaults, t3_token_stats
from .t3_rules import (
    PAPER_DEFAULTS,
    PREFERENCE_RULES,
    TASK_NAMES,
    AnyRule,
    ConsecutiveUnknownRule,
    EstimateDriftRule,
    OutsideHypothesisRule,
    ShrinkStallRule,
    SimilarityDecreaseRule,
    StallRule,
    make_rule,
)

__all__ = [
    "AnyRule",
    "ConsecutiveUnknownRule",
    "DEFAULT_PROMPT",
    "ENTROPY_METRICS",
    "EstimateDriftRule",
    "GroupAdvantage",
    "GroupSelection",
    "LOSS_SCALE_MODES",
    "METRICS",
    "MODES",
    "OutsideHypothesisRule",
    "OverlongPenalty",
    "PAPER_DEFAULTS",
    "PREFERENCE_RULES",
    "RecordTransform",
    "SNRFilter",
    "STRATEGIES",
    "ShrinkStallRule",
    "SimilarityDecreaseRule",
    "StallRule",
    "T3Truncation",
    "TASK_NAMES",
    "TopVarianceGroupSampler",
    "build_filter",
    "keep_rows",
    "check_filter_value",
    "group_advantage",
    "group_scores",
    "make_rule",
    "overlong_penalty",
    "random_groups",
    "random_seed",
    "select_groups",
    "t3_config_defaults",
    "t3_token_stats",
    "validate_filter_config",
]
