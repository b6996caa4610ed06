"""Batch pieces: a batch's prompt groups (:class:`Groups`), a group-selecting sampler and group-aware mini-batches.

Example:
    >>> import torch
    >>> from ragen_torchrl.data import group_minibatches
    >>> batches = group_minibatches(torch.tensor([0, 0, 1, 1]), 2)   # whole groups, shuffled
    >>> sorted(b.tolist() for b in batches)
    [[0, 1], [2, 3]]
"""

from .. import lazy_exports

_EXPORTS = {
    "Groups": ".groups",
    "group_codes": ".groups",
    "per_row_values": ".groups",
    "TopVarianceGroupSampler": ".group_sampler",
    "group_minibatches": ".minibatch",
}

# the same names as _EXPORTS (a literal list, for static tools)
__all__ = [
    "Groups",
    "TopVarianceGroupSampler",
    "group_codes",
    "group_minibatches",
    "per_row_values",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
