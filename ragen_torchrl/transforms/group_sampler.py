"""A replay-buffer sampler that draws mini-batches only from the top prompt groups.

The write-time :class:`~ragen_torchrl.transforms.snr.SNRFilter` decides once per rollout which
groups enter the buffer. With a *persistent* buffer (several rollouts kept across iterations) the
same decision can instead be made at sampling time, over everything currently stored:
:class:`TopVarianceGroupSampler` scores the stored groups with the same metric and selection rule
and samples row indices only from the kept groups.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import Storage

from .snr import SNRFilter, filter_arguments

__all__ = ["TopVarianceGroupSampler"]


class TopVarianceGroupSampler(Sampler):
    """Sample rows of the top-scoring prompt groups of a 1-D replay-buffer storage.

    On the first ``sample`` after the storage changed (the buffer's ``add``/``extend`` notify the
    sampler, and the storage length is checked too), the sampler reads the group id, the return
    (and the entropy/length column when the metric needs it) of every stored row, scores and
    selects groups exactly like :class:`~ragen_torchrl.transforms.snr.SNRFilter` (same arguments,
    same defaults), and caches the storage indices of the kept groups' rows. Between writes the
    kept set is reused, so sampling costs one ``randint``.

    Rows are drawn uniformly from the kept rows, with replacement by default. With
    ``without_replacement=True`` the kept rows are visited in shuffled epochs: no row repeats until
    all have been drawn (a batch larger than what is left of an epoch continues into the next one).
    When no group is selected, ``can_sample`` is False and ``sample`` raises ``RuntimeError``.

    Group ids are global: rows of the same ``group_id`` written in different ``extend`` calls form
    one group. Give each rollout's groups fresh ids if they should stay apart.

    With ``strategy="random"`` (the random control) each recomputation after a write draws a new
    subset, the filter's ``seed`` mixed with the number of recomputations so far; that count is not
    part of :meth:`state_dict`, so a reloaded sampler starts its draws again from 0.

    :meth:`selection` returns the kept rows with the filter statistics of the stored groups (see
    ``SNRFilter``).

    Keyword Args:
        without_replacement: sample in shuffled epochs over the kept rows. Defaults to False.
        **filter_kwargs: the selection arguments (``metric``, ``strategy``, ``value``, ``mode``,
            ``include_zero``, ``eps``, ``largest``) and storage columns (``group_key``,
            ``return_key``, ``entropy_key``, ``length_key``) of
            :class:`~ragen_torchrl.transforms.snr.SNRFilter`, with its defaults (the paper's rule:
            reward variance, top_p 0.9 linear, zero-variance groups excluded; ``value`` must be
            in its strategy's range).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(16), sampler=TopVarianceGroupSampler(),
        ...                   batch_size=8)
        >>> _ = rb.extend(TensorDict(group_id=torch.tensor([0, 0, 1, 1]),
        ...                          episode_return=torch.tensor([0.0, 1.0, 1.0, 1.0]),
        ...                          batch_size=[4]))
        >>> sorted(set(rb.sample()["group_id"].tolist()))  # group 1 is constant: never sampled
        [0]
    """

    def __init__(self, *, without_replacement: bool = False, **filter_kwargs: Any):
        # The filter validates the arguments and does the scoring; the sampler only caches.
        self._filter = SNRFilter(**filter_kwargs)
        if not isinstance(without_replacement, bool):
            raise ValueError(f"without_replacement must be a bool, got {without_replacement!r}")
        self.without_replacement = without_replacement
        self._writes = 0
        self._cache_key: tuple[int, int] | None = None
        self._kept_rows = torch.empty(0, dtype=torch.long)
        self._epoch: torch.Tensor | None = None
        self._epoch_pos = 0
        self._stats: dict[str, float] = {}

    @classmethod
    def from_config(cls, cfg: Mapping, **kwargs) -> TopVarianceGroupSampler:
        """Build from a ``filter`` config node (the ``enabled`` flag is not consulted).

        Examples:
            >>> TopVarianceGroupSampler.from_config({"strategy": "top_k", "value": 0.5}).strategy
            'top_k'
        """
        return cls(**filter_arguments(cfg), **kwargs)

    # The selection settings live on the inner filter; expose them read-only.
    metric = property(lambda self: self._filter.metric)
    strategy = property(lambda self: self._filter.strategy)
    value = property(lambda self: self._filter.value)
    mode = property(lambda self: self._filter.mode)
    include_zero = property(lambda self: self._filter.include_zero)
    eps = property(lambda self: self._filter.eps)
    largest = property(lambda self: self._filter.largest)

    # -- storage bookkeeping ---------------------------------------------------------------------
    def add(self, index: int) -> None:
        self._writes += 1

    def extend(self, index: torch.Tensor) -> None:
        self._writes += 1

    def selection(self, storage: Storage) -> tuple[torch.Tensor, dict[str, float]]:
        """``(storage indices of the kept groups' rows, filter statistics of the stored groups)``.

        Recomputed only after a write; ``{}`` statistics for an empty storage.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=TopVarianceGroupSampler())
            >>> _ = rb.extend(TensorDict(group_id=torch.tensor([0, 0, 1, 1]),
            ...                          episode_return=torch.tensor([0.0, 1.0, 1.0, 1.0]), batch_size=[4]))
            >>> rows, stats = rb.sampler.selection(rb.storage)
            >>> rows.tolist(), stats["kept_groups"], stats["num_groups"]
            ([0, 1], 1.0, 2.0)
        """
        key = (self._writes, len(storage))
        if key != self._cache_key:
            self._recompute(storage)
            self._cache_key = key
        return self._kept_rows, self._stats

    def kept_rows(self, storage: Storage) -> torch.Tensor:
        """Storage indices of the rows of the kept groups (recomputed only after a write)."""
        return self.selection(storage)[0]

    def _recompute(self, storage: Storage) -> None:
        if getattr(storage, "ndim", 1) != 1:
            raise RuntimeError(f"{type(self).__name__} supports 1-D storages only, got ndim={storage.ndim}")
        self._epoch, self._epoch_pos = None, 0
        if len(storage) == 0:
            self._kept_rows = torch.empty(0, dtype=torch.long)
            self._stats = {}
            return
        content = storage.get(torch.arange(len(storage)))
        if not isinstance(content, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__} needs TensorDict content in the storage, got {type(content).__name__}"
            )
        mask, self._stats = self._filter.row_mask(content)
        self._kept_rows = torch.nonzero(mask).flatten()

    # -- the Sampler API -------------------------------------------------------------------------
    def _sampleable_count(self, storage: Storage, batch_size: int) -> int:
        return int(self.kept_rows(storage).numel())

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        rows, stats = self.selection(storage)
        if rows.numel() == 0:
            raise RuntimeError(
                f"{type(self).__name__}: no group of the {len(storage)} stored rows was selected "
                f"(strategy={self.strategy}, value={self.value}); nothing to sample. "
                f"Stats: {stats}"
            )
        if not self.without_replacement:
            pick = torch.randint(rows.numel(), (batch_size,), generator=self._rng)
            return rows[pick], {}
        parts, need = [], batch_size
        while need > 0:
            if self._epoch is None or self._epoch_pos >= self._epoch.numel():
                self._epoch = rows[torch.randperm(rows.numel(), generator=self._rng)]
                self._epoch_pos = 0
            part = self._epoch[self._epoch_pos : self._epoch_pos + need]
            self._epoch_pos += part.numel()
            need -= part.numel()
            parts.append(part)
        return torch.cat(parts), {}

    def _empty(self) -> None:
        self._writes = 0
        self._cache_key = None
        self._kept_rows = torch.empty(0, dtype=torch.long)
        self._epoch, self._epoch_pos = None, 0
        self._stats = {}

    def state_dict(self) -> dict[str, Any]:
        # The kept set is a pure function of the storage content, so it is recomputed after a
        # load rather than saved; only the write counter is state.
        return {"writes": self._writes}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._empty()
        self._writes = int(state_dict["writes"])

    def dumps(self, path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "sampler_metadata.json").write_text(json.dumps(self.state_dict()))

    def loads(self, path) -> None:
        self.load_state_dict(json.loads((Path(path) / "sampler_metadata.json").read_text()))

    def __repr__(self) -> str:
        f = self._filter
        return (
            f"{type(self).__name__}(metric={f.metric}, strategy={f.strategy}, value={f.value}, "
            f"mode={f.mode}, include_zero={f.include_zero}, largest={f.largest}, "
            f"without_replacement={self.without_replacement})"
        )
