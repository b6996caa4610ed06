"""Base class for transforms over batches of trajectory records.

Record transforms (group advantage, overlong penalty) rewrite a whole batch of finished
trajectories the same way whether they run as a replay-buffer write-time transform
(``_inv_call``), inside a ``Compose`` (``_call``) or called directly (``forward``); ``None``
(an empty write) passes through. Subclasses implement :meth:`RecordTransform._apply` only.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> class Double(RecordTransform):
    ...     def _apply(self, td):
    ...         return None if td is None else td.set("x", td["x"] * 2)
    >>> Double(in_keys=["x"], out_keys=["x"])(TensorDict(x=torch.ones(2), batch_size=[2]))["x"].tolist()
    [2.0, 2.0]
"""

from __future__ import annotations

from tensordict import TensorDictBase
from torchrl.envs.transforms import Transform

__all__ = ["RecordTransform"]


class RecordTransform(Transform):
    """A ``Transform`` whose every entry point applies :meth:`_apply` to the records.

    Once an instance has run as a replay-buffer write-time transform (``_inv_call``, from
    ``rb.extend``), ``forward`` passes data through: ``rb.sample()`` calls ``forward`` on each
    sampled mini-batch, and recomputing e.g. a group advantage on a mini-batch that holds part
    of a group would overwrite the stored values with wrong ones (the same rule as
    :class:`~ragen_torchrl.transforms.snr.SNRFilter`'s ``filter_on_forward=None``).
    """

    _used_at_write = False

    def _apply(self, td: TensorDictBase | None) -> TensorDictBase | None:
        raise NotImplementedError

    def forward(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        if self._used_at_write:
            return tensordict
        return self._apply(tensordict)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._apply(next_tensordict)

    def _inv_call(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        self._used_at_write = True
        return self._apply(tensordict)
