"""Batch pieces: a batch's prompt groups (:class:`Groups`), padded rows and group-aware mini-batches.

Example:
    >>> import torch
    >>> from ragen_torchrl.data import group_minibatches
    >>> batches = group_minibatches(torch.tensor([0, 0, 1, 1]), 2)   # whole groups, shuffled
    >>> sorted(b.tolist() for b in batches)
    [[0, 1], [2, 3]]
"""

from __future__ import annotations

from .groups import Groups, group_codes, per_row_values
from .minibatch import group_minibatches

__all__ = [
    "Groups",
    "group_codes",
    "group_minibatches",
    "per_row_values",
]
