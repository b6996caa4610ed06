"""Every rule that ends a run before ``trainer.total_iterations``, in one place: :class:`StopRules`.

Each check returns its decision, a stop reason or ``None``, and the caller decides what to do with
it (:meth:`Trainer.fit <ragen_torchrl.trainer.loop.Trainer.fit>` keeps the first reason of an
iteration and ends the run after it):

* :meth:`StopRules.after_selection`: the rollout batch as collected (before DAPO's dynamic sampling or
  the SNR filter drop groups) and whether the update was skipped, read by
  :class:`~ragen_torchrl.trainer.early_stop.FilterGuard` (reward-variance collapse, empty selections);
* :meth:`StopRules.after_validation`: a periodic validation's success rate, read by
  :class:`~ragen_torchrl.trainer.early_stop.ValidationStop` (sustained low validation success);
* :meth:`StopRules.after_iteration`: the budget caps ``trainer.max_optimizer_steps`` / ``max_rollouts`` /
  ``max_seconds`` on the run's history and phases (:func:`~ragen_torchrl.trainer.budget.budget_stop`).

Example:
    >>> rules = StopRules({"early_stop": {"val_stop": {"patience": 1}}, "max_rollouts": 8})
    >>> rules.after_validation(0.0, 10)
    ('validation_success: below 0.01 for 1 consecutive validations', {'val_consecutive_low': 1.0, 'val_patience': 1.0})
    >>> rules.after_iteration([{"rollout/num_trajectories": 8.0}], phases=dict)
    'trainer.max_rollouts=8 reached'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..data.groups import Groups
from .budget import CAPS, budget_stop
from .early_stop import FilterGuard, ValidationStop, stop_stats

__all__ = ["StopRules"]


class StopRules:
    """The early-stop rules of a ``trainer`` config node (``early_stop`` and the ``max_*`` caps; keys it leaves out
    keep their defaults); their counters are checkpointed (:meth:`state_dict`).

    Attributes:
        guard: the :class:`~ragen_torchrl.trainer.early_stop.FilterGuard` of ``early_stop``.
        val_stop: the :class:`~ragen_torchrl.trainer.early_stop.ValidationStop` of ``early_stop.val_stop``.
        caps: the budget caps, ``{key: cap or None}`` for every key of :data:`~ragen_torchrl.trainer.budget.CAPS`.
    """

    def __init__(self, trainer: Mapping[str, Any]) -> None:
        early_stop = trainer.get("early_stop") or {}
        self.guard = FilterGuard.from_config(early_stop)
        self.val_stop = ValidationStop.from_config(early_stop)
        self.caps = {key: trainer.get(key) for key in CAPS}

    def after_selection(self, collected: Groups, *, skipped: bool) -> tuple[str | None, dict[str, float]]:
        """The collapse / empty-selection rules on one iteration: ``collected``, the groups as the rollout
        collected them, and whether the update was ``skipped`` for lack of signal; ``(reason, stats)``,
        ``stats`` the guard's counters (logged as ``stop/*``)."""
        reason = self.guard.update(stop_stats(groups=collected, skipped=skipped))
        return reason, self.guard.metrics()

    def after_validation(self, success: float, step: int) -> tuple[str | None, dict[str, float]]:
        """The sustained-low-validation rule on the success rate of the validation at ``step`` (step 0, before
        training, is checked but not counted); ``(reason, stats)``, ``stats`` its counters (``stop/*``)."""
        return self.val_stop.update(success, step), self.val_stop.metrics()

    def after_iteration(
        self, history: Iterable[Mapping[str, Any]], phases: Callable[[], Mapping[str, Mapping[str, float]]]
    ) -> str | None:
        """The budget cap(s) the run's ``history`` has reached, or ``None``; ``phases()`` (the clock's seconds
        per phase) is called only when ``max_seconds`` is set (in a multi-rank run it is a collective)."""
        seconds = phases() if self.caps["max_seconds"] is not None else None
        return budget_stop(self.caps, history, seconds)

    def state_dict(self) -> dict[str, Any]:
        """The rules' counters, as a checkpoint stores them (``guard``, ``val_stop``)."""
        return {"guard": self.guard.state_dict(), "val_stop": self.val_stop.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the counters of :meth:`state_dict` (a checkpoint without them leaves the rules fresh)."""
        if state.get("guard"):
            self.guard.load_state_dict(state["guard"])
        if state.get("val_stop"):
            self.val_stop.load_state_dict(state["val_stop"])
