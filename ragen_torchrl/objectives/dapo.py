"""DAPO (arXiv 2503.14476): clip-higher, token-level loss, dynamic sampling, overlong shaping.

* **Clip-higher**: asymmetric clip ``(eps_low, eps_high) = (0.2, 0.28)`` lets unlikely
  tokens grow faster than GRPO's symmetric 0.2 allows (against entropy collapse).
* **Token-level loss**: ``sum over all tokens of the mini-batch / number of tokens``
  (torchrl's ``aggregation="token_mean"``): every token weighs the same, so long
  trajectories are not under-weighted as with GRPO's per-sequence mean.
* **No KL** term by default.
* **Dynamic sampling** (:class:`DynamicSampler`): groups whose trajectories all succeed or
  all fail (the paper's accuracy rule; ``criterion="return"``: all shaped returns equal)
  have no learning signal and only dilute the batch; drop them and roll out new groups
  until the batch is full again (bounded; a shortfall is logged, never raised).
* **Soft overlong punishment**: a reward transform,
  :class:`ragen_torchrl.transforms.overlong.OverlongPenalty`.

The loss is torchrl's ``DAPO`` (a ``GRPOLoss`` that only changes the output type) with the
masked-metrics mixin.

Example:
    >>> import torch
    >>> informative_groups(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1, 2, 2]))
    (tensor([0, 1, 2]), tensor([False,  True, False]))
"""

from __future__ import annotations

import logging
import math
from typing import Callable

import torch
from tensordict import TensorDictBase, lazy_stack
from torchrl.objectives.llm import DAPO

from ragen_torchrl.checks import check_choice

from ..data.groups import Groups
from ..keys import EPISODE_RETURN, GROUP_ID, SUCCESS
from .base import INPUT_CONTRACT, TokenStatsMixin

log = logging.getLogger(__name__)


class DAPOLoss(TokenStatsMixin, DAPO):
    """torchrl's ``DAPO`` loss with DAPO's defaults: clip ``(0.2, 0.28)``, ``token_mean``."""

    def __init__(
        self, actor_network=None, *, clip_epsilon=(0.2, 0.28), aggregation: str = "token_mean", **kwargs
    ) -> None:
        super().__init__(actor_network, clip_epsilon=clip_epsilon, aggregation=aggregation, **kwargs)


DAPOLoss.__doc__ += INPUT_CONTRACT


def informative_groups(values: torch.Tensor, group_ids: torch.Tensor, *, tol: float = 1e-6):
    """Which prompt groups carry a learning signal (not all values equal, up to ``tol``).

    ``values`` are per-trajectory outcomes (``success`` booleans or returns); compared in
    float64. Returns ``(group_ids_sorted, keep)``: the unique group ids and a bool per group.
    """
    values = torch.as_tensor(values).reshape(-1).to(torch.float64)
    ids, codes = torch.unique(torch.as_tensor(group_ids).reshape(-1), return_inverse=True)
    return ids, Groups.from_values(codes, values, name="outcomes").spread > tol


def _rows(td: TensorDictBase, index: torch.Tensor) -> list[TensorDictBase]:
    return list(td[index].unbind(0)) if index.numel() else []


CRITERIA = ("success", "return")


class DynamicSampler:
    """DAPO's dynamic sampling with refill.

    ``sampler(records, collect_more) -> (records | None, stats)``: drops the prompt groups
    that carry no learning signal, then calls ``collect_more(num_groups)`` for new groups
    until the batch again has as many groups as it started with (its target), all informative,
    at most ``max_extra_rollouts`` times. Extra groups beyond the target are discarded (in
    arrival order). When the budget runs out the batch is returned short and the shortfall
    is logged and reported in ``stats``; when no group at all carries signal the records are
    ``None`` (the caller skips the update, as with an empty SNR filter). Never raises for
    lack of signal.

    Which groups carry no signal (``criterion``):

    * ``"success"`` (default; the DAPO paper, arXiv 2503.14476 Eq. 11:
      ``0 < |{correct}| < G``): every trajectory of the group succeeded, or every one
      failed, by the records' boolean ``success`` column (the task outcome).
    * ``"return"``: all ``episode_return`` values equal up to ``tol`` (the shaped return,
      format and overlong penalties included: a group of failures that differ only in
      penalties is kept).

    ``collect_more(num_groups)`` should roll out ``num_groups`` *new* groups (any number,
    more or fewer than a rollout batch) and return their records, as ``collect_rollouts``
    does. It may return fewer or more rows than asked, partial groups, or ``None`` /
    an empty batch: all of that counts against the budget, nothing raises. Group ids must
    be distinct *within* one return (ids that collide with ones already seen are renumbered
    after the largest id seen, so groups of different calls stay distinct).
    ``reward_transform`` (e.g. the overlong penalty) is applied to every refill before its
    groups are judged, so refills are shaped exactly like the first batch; it must be
    idempotent (``OverlongPenalty`` is).

    Work is bounded: at most ``max_extra_rollouts`` calls of at most
    ``ceil(target * oversample)`` groups each. Each call asks for
    ``ceil(missing * oversample)`` groups, ``missing`` being the informative groups still
    needed (so at the default P = 16 with 12 groups dropped it asks for 12).

    Args:
        max_extra_rollouts: the most ``collect_more`` calls per batch (0 = drop only).
        oversample: each call asks for ``ceil(missing * oversample)`` groups (>= 1);
            above 1 fills faster when most groups are degenerate.
        tol: values closer than this count as equal.
        criterion: ``"success"`` or ``"return"`` (see above).
        reward_transform: callable applied to refill records (``None`` = none).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> def batch(wins, gids):
        ...     return TensorDict(success=torch.tensor(wins), episode_return=torch.tensor(wins).float(),
        ...                       group_id=torch.tensor(gids), batch_size=[len(wins)])
        >>> first = batch([True, True, False, True], [0, 0, 1, 1])   # group 0 all-success: dropped
        >>> more = lambda n: batch([False, True] * n, [g for g in range(n) for _ in range(2)])
        >>> out, stats = DynamicSampler(max_extra_rollouts=2)(first, more)
        >>> out["group_id"].tolist(), stats["dynamic_sampling/shortfall"]
        ([1, 1, 2, 2], 0.0)
    """

    def __init__(
        self,
        *,
        max_extra_rollouts: int = 3,
        oversample: float = 1.0,
        tol: float = 1e-6,
        criterion: str = "success",
        reward_transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
        return_key=EPISODE_RETURN,
        group_key=GROUP_ID,
        success_key=SUCCESS,
    ) -> None:
        if (
            isinstance(max_extra_rollouts, bool)
            or int(max_extra_rollouts) != max_extra_rollouts
            or max_extra_rollouts < 0
        ):
            raise ValueError(f"max_extra_rollouts must be a non-negative integer, got {max_extra_rollouts!r}")
        if not oversample >= 1.0:
            raise ValueError(f"oversample must be >= 1, got {oversample!r}")
        check_choice("criterion", criterion, CRITERIA)
        self.max_extra_rollouts = int(max_extra_rollouts)
        self.oversample = float(oversample)
        self.tol = float(tol)
        self.criterion = criterion
        self.reward_transform = reward_transform
        self.return_key, self.group_key, self.success_key = return_key, group_key, success_key

    def _outcomes(self, records: TensorDictBase) -> torch.Tensor:
        key = self.success_key if self.criterion == "success" else self.return_key
        if key not in records.keys(True):
            raise ValueError(
                f"dynamic sampling with criterion={self.criterion!r} reads the records' {key!r} "
                f"column, which is missing (keys: {sorted(map(str, records.keys()))})"
            )
        return records.get(key)

    def _split(self, records: TensorDictBase):
        """``(kept rows grouped per kept group, number of groups, number dropped, largest group)``."""
        gids = records.get(self.group_key).reshape(-1)
        outcomes = Groups.from_values(gids, torch.as_tensor(self._outcomes(records)).reshape(-1), name="outcomes")
        keep = outcomes.spread > self.tol
        members = outcomes.members()
        groups = [_rows(records, members[k]) for k in torch.nonzero(keep).reshape(-1).tolist()]
        largest = int(outcomes.counts.max()) if gids.numel() else 0
        return groups, outcomes.num_groups, int((~keep).sum()), largest

    def __call__(self, records: TensorDictBase | None, collect_more: Callable[[int], TensorDictBase | None]):
        if records is None or records.batch_size[0] == 0:
            groups, target, dropped, group_size = [], 0, 0, 0
        else:
            records = _flat(records)
            groups, target, dropped, group_size = self._split(records)
        seen = set(records.get(self.group_key).reshape(-1).tolist()) if target else set()
        cap = math.ceil(target * self.oversample)
        calls = collected = requested = rows_in = 0
        while len(groups) < target and calls < self.max_extra_rollouts:
            request = min(max(1, math.ceil((target - len(groups)) * self.oversample)), cap)
            more = collect_more(request)
            calls += 1
            requested += request
            if more is None or more.batch_size[0] == 0:
                continue
            more = _flat(more)
            if self.reward_transform is not None:
                more = self.reward_transform(more)
            more = self._renumber(more, seen)
            new_groups, n_new, n_dropped, largest = self._split(more)
            if largest > group_size:
                log.warning(
                    "dynamic sampling: collect_more returned a group of %d rows (the batch's groups have %d):"
                    " group ids must be distinct within one return",
                    largest,
                    group_size,
                )
            rows_in += more.batch_size[0]
            collected += n_new
            dropped += n_dropped
            groups.extend(new_groups)
        discarded = max(len(groups) - target, 0)
        groups = groups[:target]
        shortfall = target - len(groups)
        stats = {
            "dynamic_sampling/target_groups": float(target),
            "dynamic_sampling/kept_groups": float(len(groups)),
            "dynamic_sampling/dropped_groups": float(dropped),
            "dynamic_sampling/extra_rollouts": float(calls),
            "dynamic_sampling/requested_groups": float(requested),
            "dynamic_sampling/extra_groups": float(collected),
            "dynamic_sampling/extra_rows": float(rows_in),
            "dynamic_sampling/discarded_groups": float(discarded),
            "dynamic_sampling/shortfall": float(shortfall),
        }
        if shortfall:
            log.warning(
                "dynamic sampling: %d of %d groups carry signal after %d extra rollouts (shortfall %d)",
                len(groups),
                target,
                calls,
                shortfall,
            )
        if not groups:
            return None, stats
        if calls == 0 and dropped == 0:
            return records, stats  # nothing changed: keep the caller's object and row order
        return lazy_stack([row for g in groups for row in g]), stats

    refill = __call__

    def _renumber(self, more: TensorDictBase, seen: set[int]) -> TensorDictBase:
        gids = more.get(self.group_key).reshape(-1)
        if seen.intersection(gids.tolist()):
            # shift the whole refill past every id seen so far (keeps its own grouping)
            gids = gids - gids.min() + max(seen) + 1
            more.set(self.group_key, gids.reshape(more.get(self.group_key).shape))
        seen.update(gids.tolist())
        return more


def _flat(td: TensorDictBase) -> TensorDictBase:
    """One row per trajectory (a ``[groups, G]`` batch is flattened)."""
    return td.reshape(-1) if td.batch_dims > 1 else td
