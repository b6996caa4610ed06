"""The budget caps that end a run at a matched budget: optimizer steps, training rollouts, seconds.

A control arm (e.g. the unfiltered baseline next to a filtered run) is compared at the same budget
by capping it at the other arm's count: ``trainer.max_optimizer_steps`` (optimizer steps),
``trainer.max_rollouts`` (training trajectories collected) and ``trainer.max_seconds`` (wall-clock
seconds of the training phases). The trainer checks them after every iteration, next to the
early-stop rules (:mod:`ragen_torchrl.trainer.early_stop`), so a run stops at the first iteration
whose end reaches a cap (it overshoots by less than one iteration); the cap that stopped it is the
run's ``stop_reason`` in ``summary.json`` (``"trainer.max_rollouts=4096 reached"``), and the
counts the caps read are its ``totals`` (``optimizer_steps``, ``rollouts``, ``training_seconds``),
so the other arm's count is read from its summary with the same functions.

Pure functions of a run's history and phases; no torch.

Example:
    >>> history = [{"train/optimizer_steps": 1.0, "rollout/num_trajectories": 64.0}] * 3
    >>> phases = {"setup": {"wall": 9.0}, "rollout": {"wall": 20.0}, "update": {"wall": 10.0}}
    >>> budget_stop({"max_rollouts": 192, "max_seconds": 60.0}, history, phases)
    'trainer.max_rollouts=192 reached'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CAPS", "TRAINING_PHASES", "budget_stop", "budget_totals", "training_rollouts", "training_seconds"]

#: the ``trainer`` keys of the caps, in the order a stop reason names them
CAPS = ("max_optimizer_steps", "max_rollouts", "max_seconds")
#: the phases of :class:`~ragen_torchrl.trainer.provenance.PhaseClock` that ``max_seconds`` counts: the
#: training pipeline. Validation, diagnostics (the MI and gradient-SNR probes), checkpoints, setup,
#: the warm start and the export are measurement or bookkeeping, so two arms with different
#: validation or diagnostic schedules are still matched on the time they spent training.
TRAINING_PHASES = ("rollout", "filter", "update")


def _sum(history: Iterable[Mapping[str, Any]], tag: str) -> float:
    # a scalar the iteration did not log (a skipped update has no train/ scalars) adds nothing
    return float(sum(float(h[tag]) for h in history if isinstance(h.get(tag), (int, float))))


def training_rollouts(history: Iterable[Mapping[str, Any]]) -> float:
    """The training trajectories a run collected: ``rollout/num_trajectories`` (P x G per iteration)
    plus ``dynamic_sampling/extra_rows`` (DAPO's refills), summed over the history; validation
    episodes are not training rollouts.

    Example:
        >>> training_rollouts([{"rollout/num_trajectories": 64.0},
        ...                    {"rollout/num_trajectories": 64.0, "dynamic_sampling/extra_rows": 16.0}])
        144.0
    """
    history = list(history)
    return _sum(history, "rollout/num_trajectories") + _sum(history, "dynamic_sampling/extra_rows")


def training_seconds(phases: Mapping[str, Mapping[str, float]] | None) -> float:
    """The wall-clock seconds of the :data:`TRAINING_PHASES` in a run's ``phases`` (summary.json's, or
    :meth:`PhaseClock.phases() <ragen_torchrl.trainer.provenance.PhaseClock.phases>`); a resumed run's
    clock holds the seconds of its earlier parts too.

    Example:
        >>> training_seconds({"setup": {"wall": 5.0, "cpu": 5.0}, "validation": {"wall": 7.0, "cpu": 7.0},
        ...                   "rollout": {"wall": 3.0, "cpu": 6.0}, "update": {"wall": 1.5, "cpu": 2.0}})
        4.5
    """
    return float(sum(float((phases or {}).get(name, {}).get("wall", 0.0)) for name in TRAINING_PHASES))


def budget_totals(history: Iterable[Mapping[str, Any]], phases: Mapping[str, Mapping[str, float]] | None) -> dict:
    """What the caps read, as ``summary.json`` records it under ``totals``: ``optimizer_steps``,
    ``rollouts`` and ``training_seconds``.

    Example:
        >>> budget_totals([{"train/optimizer_steps": 2.0, "rollout/num_trajectories": 4.0}], {"update": {"wall": 1.0}})
        {'optimizer_steps': 2.0, 'rollouts': 4.0, 'training_seconds': 1.0}
    """
    history = list(history)
    return {
        "optimizer_steps": _sum(history, "train/optimizer_steps"),
        "rollouts": training_rollouts(history),
        "training_seconds": training_seconds(phases),
    }


def _shown(cap: Any) -> str:
    # an integer-valued cap as written (240, not 240.0); a fractional number of seconds in full
    return str(int(cap)) if float(cap).is_integer() else repr(float(cap))


def budget_stop(
    caps: Mapping[str, Any], history: Iterable[Mapping[str, Any]], phases: Mapping[str, Mapping[str, float]] | None
) -> str | None:
    """The stop reason of every cap in ``caps`` (a ``trainer`` node) that the run has reached, or ``None``.

    A cap that is missing or ``null`` is off. Several caps reached at the same iteration are all
    named, in :data:`CAPS` order, joined by ``"; "``.

    Examples:
        >>> h = [{"train/optimizer_steps": 2.0, "rollout/num_trajectories": 4.0}] * 2
        >>> budget_stop({"max_optimizer_steps": 4, "max_rollouts": None}, h, {})
        'trainer.max_optimizer_steps=4 reached'
        >>> budget_stop({"max_optimizer_steps": 5, "max_rollouts": 9}, h, {}) is None
        True
        >>> budget_stop({"max_rollouts": 8, "max_seconds": 0.5}, h, {"filter": {"wall": 0.75}})
        'trainer.max_rollouts=8 reached; trainer.max_seconds=0.5 reached'
    """
    history = list(history)
    totals = budget_totals(history, phases)
    reached = []
    for key, total in zip(CAPS, ("optimizer_steps", "rollouts", "training_seconds")):
        cap = caps.get(key)
        if cap is not None and totals[total] >= float(cap):
            reached.append(f"trainer.{key}={_shown(cap)} reached")
    return "; ".join(reached) or None
