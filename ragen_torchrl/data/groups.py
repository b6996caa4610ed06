"""Prompt-group statistics of one batch, computed once: the :class:`Groups` value.

Every group-relative piece of an iteration reads the same numbers: the SNR filter's reward
variance (RAGEN-2, arXiv 2604.06268, §3.3), the early-stop statistics, the group-normalised
advantages (GRPO / Dr.GRPO / DAPO / GSPO), DAPO's dynamic sampling (which groups carry signal)
and the group-aligned mini-batch plan (which rows form each group). :class:`Groups` holds them:
the unique ids, each row's group, the counts, the float64 mean and unbiased (ddof = 1) variance,
the min / max, and the flat-group mask.

Statistics are float64 and each group's values are summed in ascending order, so two groups
holding the same values in another order get bit-identical moments (ties stay ties at every
reward scale). The variance is two-pass (deviations from the mean) and a *flat* group (all values
equal, which includes a group of one) has variance exactly 0, whatever the rounding of its mean: a
zero test then needs no absolute tolerance, which would depend on the reward scale. A flat group of
two or more has advantage exactly 0; a group of one has nothing to compare with and takes mean 0
and std 1, so its advantage is its value (verl's and RAGEN's GRPO advantage).

Example:
    >>> import torch
    >>> g = Groups.from_values(torch.tensor([7, 7, 3, 3, 9]), torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0]))
    >>> g.ids.tolist(), g.counts.tolist(), g.var.tolist(), g.flat.tolist()
    ([3, 7, 9], [2, 2, 1], [0.0, 0.5, 0.0], [True, False, True])
    >>> [round(a, 4) for a in g.advantage().tolist()]
    [0.7071, -0.7071, 0.0, 0.0, 2.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Groups", "group_codes", "per_row_values"]


def group_codes(value: Any, num_rows: int) -> torch.Tensor:
    """A group-id column (tensor, or non-tensor such as strings) as one long code per row.

    An ``(N, T)`` tensor must repeat each row's id along ``T``; strings get codes in order of
    first appearance.

    Example:
        >>> group_codes(["b", "a", "b"], 3).tolist(), group_codes(torch.tensor([[4, 4], [2, 2]]), 2).tolist()
        ([0, 1, 0], [4, 2])
    """
    if isinstance(value, torch.Tensor):
        if value.numel() == 0 and num_rows == 0:
            return torch.empty(0, dtype=torch.long)
        if value.shape[:1] != (num_rows,):
            raise ValueError(f"group id column has shape {tuple(value.shape)}, expected ({num_rows}, ...)")
        flat = value.reshape(num_rows, -1)
        # (N, T) batches repeat the id along time; anything else is not a prompt group.
        if flat.shape[1] != 1 and not bool((flat == flat[:, :1]).all()):
            raise ValueError("group id must be constant within a trajectory")
        flat = flat[:, 0]
        if flat.is_floating_point():
            raise ValueError(f"group ids must be integers or strings, got dtype {flat.dtype}")
        return flat.long()
    items = value.tolist() if hasattr(value, "tolist") else list(value)
    codes: dict[Any, int] = {}
    return torch.tensor([codes.setdefault(item, len(codes)) for item in items], dtype=torch.long)


def per_row_values(name: str, values: Any, num_rows: int) -> torch.Tensor:
    """One float64 value per trajectory; accepts ``(N,)``, ``(N, 1)`` or ``(N, 1, 1)`` (the LLM reward shape).

    Example:
        >>> per_row_values("returns", torch.ones(2, 1, 1), 2).tolist()
        [1.0, 1.0]
    """
    values = torch.as_tensor(values)
    if values.numel() != num_rows:
        raise ValueError(
            f"{name} must hold one value per trajectory ({num_rows}), got shape "
            f"{tuple(values.shape)}; reduce per-step/per-token values to one per trajectory first"
        )
    values = values.reshape(num_rows).to(torch.float64)
    if torch.isnan(values).any():
        raise ValueError(f"{name} contains NaN")
    return values


@dataclass(frozen=True)
class Groups:
    """The prompt groups of a batch and the float64 moments of one value per row (the returns).

    Build it with :meth:`from_values` (or :meth:`from_ids` when only the membership is needed).

    Attributes:
        ids: unique group ids, ascending (long).
        inverse: each row's position in ``ids`` (long, ``(N,)``).
        counts: rows per group (long).
        values: the per-row values the moments describe (float64, ``(N,)``), or None.
        mean: per-group mean (float64).
        var: per-group unbiased variance (ddof = 1), exactly 0 for a flat group.
        low, high: per-group min and max (float64).
    """

    ids: torch.Tensor
    inverse: torch.Tensor
    counts: torch.Tensor
    values: torch.Tensor | None = None
    mean: torch.Tensor | None = None
    var: torch.Tensor | None = None
    low: torch.Tensor | None = None
    high: torch.Tensor | None = None

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_ids(cls, group_ids: Any) -> Groups:
        """Membership only (no moments): ids, inverse and counts.

        Example:
            >>> Groups.from_ids(torch.tensor([5, 2, 5])).counts.tolist()
            [1, 2]
        """
        ids_t = torch.as_tensor(group_ids)
        codes = group_codes(ids_t if ids_t.ndim else ids_t.reshape(1), ids_t.shape[0] if ids_t.ndim else 1)
        ids, inverse, counts = torch.unique(codes, sorted=True, return_inverse=True, return_counts=True)
        return cls(ids=ids, inverse=inverse, counts=counts)

    @classmethod
    def from_values(cls, group_ids: Any, values: Any, *, name: str = "returns") -> Groups:
        """Groups of ``group_ids`` (integers, an ``(N, T)`` repeat, or strings) with the moments of ``values``.

        ``values``: one number per row (``(N,)``, ``(N, 1)`` or ``(N, 1, 1)``); NaN raises a
        ``ValueError`` naming ``name``. Runs on CPU (one scalar per trajectory).

        Example:
            >>> g = Groups.from_values(["a", "a", "b"], [1.0, 3.0, 2.0])
            >>> g.mean.tolist(), g.var.tolist(), [round(s, 4) for s in g.std.tolist()]
            ([2.0, 2.0], [2.0, 0.0], [1.4142, 0.0])
        """
        ids_t = group_ids if not isinstance(group_ids, torch.Tensor) else group_ids.cpu()
        num_rows = len(ids_t) if not isinstance(ids_t, torch.Tensor) else (ids_t.shape[0] if ids_t.ndim else 1)
        codes = group_codes(ids_t, num_rows)
        vals = per_row_values(name, torch.as_tensor(values).cpu(), codes.numel())
        ids, inverse, counts = torch.unique(codes, sorted=True, return_inverse=True, return_counts=True)
        mean, var, low, high = _moments(vals, inverse, ids.numel())
        return cls(ids=ids, inverse=inverse, counts=counts, values=vals, mean=mean, var=var, low=low, high=high)

    def take(self, rows: Any) -> Groups:
        """The groups of the rows ``rows`` (indices, or a boolean row mask), which must hold whole groups.

        A filter keeps groups whole, so the kept groups' moments are the ones already computed.

        Example:
            >>> g = Groups.from_values(torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, 0.0, 2.0, 2.0]))
            >>> k = g.take(torch.tensor([2, 3]))
            >>> k.ids.tolist(), k.inverse.tolist(), k.flat.tolist()
            ([1], [0, 0], [True])
        """
        rows = torch.as_tensor(rows)
        if rows.dtype == torch.bool:
            rows = torch.nonzero(rows.reshape(-1)).reshape(-1)
        rows = rows.reshape(-1).long()
        inverse = self.inverse[rows]
        taken = torch.bincount(inverse, minlength=self.num_groups)
        kept = taken > 0
        if not bool((taken[kept] == self.counts[kept]).all()):
            raise ValueError("Groups.take needs whole groups: some group lost part of its rows")
        position = torch.cumsum(kept.long(), 0) - 1
        pick = lambda t: None if t is None else t[kept]  # noqa: E731
        return Groups(
            ids=self.ids[kept],
            inverse=position[inverse],
            counts=self.counts[kept],
            values=None if self.values is None else self.values[rows],
            mean=pick(self.mean),
            var=pick(self.var),
            low=pick(self.low),
            high=pick(self.high),
        )

    # -- derived views ---------------------------------------------------------------------
    @property
    def num_groups(self) -> int:
        return int(self.ids.numel())

    @property
    def num_rows(self) -> int:
        return int(self.inverse.numel())

    @property
    def std(self) -> torch.Tensor:
        """Per-group unbiased std (ddof = 1), exactly 0 for a flat group."""
        return self._moment("var").sqrt()

    @property
    def flat(self) -> torch.Tensor:
        """Per-group mask: every value of the group equal (a group of one included); no signal at any scale."""
        return self._moment("low") == self._moment("high")

    @property
    def spread(self) -> torch.Tensor:
        """Per-group ``max - min`` (DAPO's "all outcomes equal up to ``tol``" test)."""
        return self._moment("high") - self._moment("low")

    def members(self) -> list[torch.Tensor]:
        """Row indices of each group, in the order of :attr:`ids` (rows in their batch order).

        Example:
            >>> [m.tolist() for m in Groups.from_ids(torch.tensor([1, 0, 1])).members()]
            [[1], [0, 2]]
        """
        order = torch.argsort(self.inverse, stable=True)
        return list(torch.split(order, self.counts.tolist()))

    def centred(self) -> torch.Tensor:
        """Per-row ``value - group mean`` (float64), exactly 0 in flat groups."""
        values, mean = self._moment("values"), self._moment("mean")
        flat = self.flat[self.inverse]
        return torch.where(flat, torch.zeros_like(values), values - mean[self.inverse])

    def advantage(self, scale: str = "std", eps: float = 1e-6) -> torch.Tensor:
        """Group-relative advantage per row (float32): ``(R - mean) / (std + eps)`` or ``R - mean``.

        ``scale="std"`` (GRPO, DAPO, GSPO) divides by the unbiased in-group std plus ``eps``;
        ``"none"`` (Dr.GRPO) keeps the centred value. A flat group of two or more gets exactly 0; a
        group of one takes mean 0 and std 1 (verl, RAGEN): ``R / (1 + eps)``, or ``R`` unscaled.

        Example:
            >>> g = Groups.from_values(torch.tensor([0, 0, 1]), torch.tensor([2.0, 0.0, 5.0]))
            >>> g.advantage("none").tolist(), [round(a, 4) for a in g.advantage("std").tolist()]
            ([1.0, -1.0, 5.0], [0.7071, -0.7071, 5.0])
        """
        if scale not in ("std", "none"):
            raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
        alone = (self.counts == 1)[self.inverse]
        centred = torch.where(alone, self._moment("values"), self.centred())
        if scale == "none":
            return centred.to(torch.float32)
        std = torch.where(alone, torch.ones_like(centred), self.std[self.inverse])
        return (centred / (std + eps)).to(torch.float32)

    def _moment(self, name: str) -> torch.Tensor:
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"Groups.{name} needs values: build with Groups.from_values(group_ids, values)")
        return value


def _moments(values: torch.Tensor, inverse: torch.Tensor, num_groups: int):
    """Per-group mean, unbiased variance (0 for flat groups), min and max, all float64."""
    # each group summed in ascending value order: equal multisets give bit-identical moments
    by_value = torch.argsort(values, stable=True)
    order = by_value[torch.argsort(inverse[by_value], stable=True)]
    values, inverse = values[order], inverse[order]
    count = torch.zeros(num_groups, dtype=torch.float64)
    count.index_add_(0, inverse, torch.ones_like(values))
    mean = torch.zeros_like(count).index_add_(0, inverse, values) / count
    # two-pass: a constant group has exactly zero variance (E[x^2] - E[x]^2 would not)
    deviation = values - mean[inverse]
    squares = torch.zeros_like(count).index_add_(0, inverse, deviation * deviation)
    var = torch.where(count > 1, squares / (count - 1).clamp_min(1), torch.zeros_like(count))
    low = torch.full_like(count, math.inf).scatter_reduce(0, inverse, values, "amin")
    high = torch.full_like(count, -math.inf).scatter_reduce(0, inverse, values, "amax")
    var = torch.where(low == high, torch.zeros_like(var), var)
    return mean, var, low, high
