"""T3 stall rules: pure per-episode detectors of belief-trapped trajectories (no torch).

T3 truncates a training trajectory at turn t when the task's progress proxy has stalled for the
last k turns (REFERENCE §3). Each rule here watches one episode: call ``update(progress, info)``
after every *interaction* turn (not after the final answer) with the game's ``progress()`` and the
step ``info``; it returns True when the trajectory should be truncated at this turn (and keeps
returning True while the condition holds). ``reset(initial_progress=None)`` starts a new episode;
the optional initial progress is the baseline of the first comparison.

Baseline of "did it improve": ``info["progress_before"]`` when present (the T3 games always put it
there), else the previous ``update``'s progress, else ``reset``'s ``initial_progress``; with none of
them the first update only records the baseline and never fires.

Rules and the paper defaults (:func:`make_rule`):

* GuessNumbers: :class:`OutsideHypothesisRule` OR :class:`ShrinkStallRule`, k = 1 (a guess
  outside ``H_{t-1}``, or ``|H|`` not shrinking).
* CircuitDecoding: :class:`ShrinkStallRule`, k = 3, ``cumulative=True`` like the reference code
  (stalled turns are counted over the episode and never reset); ``cumulative=False`` counts
  consecutive stalls as the paper's text reads.
* SituationPuzzles: :class:`ConsecutiveUnknownRule`, k = 5.
* PreferenceEstimation: :class:`SimilarityDecreaseRule`, k = 2.
* MovieRecommendation: :class:`SimilarityDecreaseRule`, k = 2; with ``unsupervised=True``
  :class:`EstimateDriftRule` (mean of the last 4 estimate steps below 0.28).

Example:
    >>> rule = make_rule("GuessNumbers")
    >>> rule.reset(5040)
    >>> rule.update(1440, {"guess_in_previous_hypotheses": True})
    False
    >>> rule.update(1440, {"guess_in_previous_hypotheses": True})
    True
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Mapping, Sequence

__all__ = [
    "AnyRule",
    "ConsecutiveUnknownRule",
    "EstimateDriftRule",
    "OutsideHypothesisRule",
    "PAPER_DEFAULTS",
    "ShrinkStallRule",
    "SimilarityDecreaseRule",
    "StallRule",
    "TASK_NAMES",
    "make_rule",
]


class StallRule(ABC):
    """Common interface: ``update(progress, info) -> bool`` and ``reset(initial_progress=None)``."""

    def __init__(self) -> None:
        self._prev: float | None = None
        self.turns = 0
        self.fired = False

    def reset(self, initial_progress: float | None = None) -> None:
        self._prev = None if initial_progress is None else float(initial_progress)
        self.turns = 0
        self.fired = False
        self._reset_state()

    def _reset_state(self) -> None:
        """Subclass state to clear on :meth:`reset`."""

    def _baseline(self, info: Mapping[str, Any] | None) -> float | None:
        if info is not None and info.get("progress_before") is not None:
            return float(info["progress_before"])
        return self._prev

    def update(self, progress: float, info: Mapping[str, Any] | None = None) -> bool:
        """Feed one interaction turn; True when the trajectory should be truncated now."""
        info = info if info is not None else {}
        progress = float(progress)
        before = self._baseline(info)
        self.turns += 1
        fire = bool(self._update(progress, before, info))
        self._prev = progress
        self.fired = self.fired or fire
        return fire

    @abstractmethod
    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        ...


class ShrinkStallRule(StallRule):
    """The hypothesis set (``progress`` = its size) did not shrink by more than ``min_delta``.

    ``cumulative=False``: fires once ``k`` *consecutive* turns stalled (a shrink resets the count).
    ``cumulative=True``: counts every stalled turn of the episode, never resets (reference
    CircuitDecoding behaviour); fires once ``k`` stalls have accumulated.
    """

    def __init__(self, k: int = 1, cumulative: bool = False, min_delta: float = 0.0) -> None:
        super().__init__()
        if int(k) < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = int(k)
        self.cumulative = bool(cumulative)
        self.min_delta = float(min_delta)
        self.stalls = 0

    def _reset_state(self) -> None:
        self.stalls = 0

    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        if before is None:
            return False
        if before - progress <= self.min_delta:
            self.stalls += 1
        elif not self.cumulative:
            self.stalls = 0
        return self.stalls >= self.k


class OutsideHypothesisRule(StallRule):
    """GuessNumbers: fires at once when the guess was outside ``H_{t-1}``
    (``info["guess_in_previous_hypotheses"] is False``; a missing key never fires)."""

    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        return info.get("guess_in_previous_hypotheses", True) is False


class ConsecutiveUnknownRule(StallRule):
    """SituationPuzzles: ``k`` consecutive ``"Unknown"`` judge answers.

    Counts from ``info["judge_answer"]`` when the key is present (anything but Yes/No — including
    ``None`` for an invalid question — counts as Unknown); otherwise ``progress`` is taken as the
    game's own consecutive-Unknown count.
    """

    def __init__(self, k: int = 5) -> None:
        super().__init__()
        if int(k) < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = int(k)
        self.count = 0

    def _reset_state(self) -> None:
        self.count = 0

    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        if "judge_answer" in info:
            self.count = 0 if info["judge_answer"] in ("Yes", "No") else self.count + 1
        else:
            self.count = int(progress)
        return self.count >= self.k


class SimilarityDecreaseRule(StallRule):
    """PreferenceEstimation / MovieRecommendation: ``progress`` = ``cos(v̂_t, v*)`` decreased (by
    more than ``min_delta``) on ``k`` consecutive turns; any other turn resets the count."""

    def __init__(self, k: int = 2, min_delta: float = 0.0) -> None:
        super().__init__()
        if int(k) < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = int(k)
        self.min_delta = float(min_delta)
        self.decreases = 0

    def _reset_state(self) -> None:
        self.decreases = 0

    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        if before is not None and progress < before - self.min_delta:
            self.decreases += 1
        else:
            self.decreases = 0
        return self.decreases >= self.k


def _unit(v: Sequence[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v] if n > 0 else [0.0 for _ in v]


class EstimateDriftRule(StallRule):
    """Unsupervised MovieRecommendation variant: the agent's estimate stopped moving — the mean of
    the last ``window`` step sizes ``||v̂_t - v̂_{t-1}||`` (unit-normalised estimates, read from
    ``info["estimate"]``) is below ``threshold``. Turns without an estimate are skipped."""

    def __init__(self, window: int = 4, threshold: float = 0.28) -> None:
        super().__init__()
        if int(window) < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = int(window)
        self.threshold = float(threshold)
        self._last: list[float] | None = None
        self.steps: list[float] = []

    def _reset_state(self) -> None:
        self._last = None
        self.steps = []

    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        est = info.get("estimate")
        if est is not None:
            cur = _unit([float(x) for x in est])
            if self._last is not None and len(self._last) == len(cur):
                self.steps.append(math.sqrt(sum((a - b) ** 2 for a, b in zip(cur, self._last))))
            self._last = cur
        if len(self.steps) < self.window:
            return False
        recent = self.steps[-self.window:]
        return sum(recent) / len(recent) < self.threshold


class AnyRule(StallRule):
    """Fires when any of its rules fires (every rule is updated every turn)."""

    def __init__(self, *rules: StallRule) -> None:
        super().__init__()
        if not rules:
            raise ValueError("AnyRule needs at least one rule")
        self.rules = list(rules)

    def reset(self, initial_progress: float | None = None) -> None:
        super().reset(initial_progress)
        for r in self.rules:
            r.reset(initial_progress)

    def update(self, progress: float, info: Mapping[str, Any] | None = None) -> bool:
        self.turns += 1
        fire = False
        for r in self.rules:
            fire = r.update(progress, info) or fire
        self._prev = float(progress)
        self.fired = self.fired or fire
        return fire

    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        raise NotImplementedError  # update() is overridden


#: task name -> (k, cumulative) paper defaults
PAPER_DEFAULTS: dict[str, dict[str, Any]] = {
    "GuessNumbers": {"k": 1, "cumulative": False},
    "CircuitDecoding": {"k": 3, "cumulative": True},
    "SituationPuzzles": {"k": 5, "cumulative": None},
    "PreferenceEstimation": {"k": 2, "cumulative": None},
    "MovieRecommendation": {"k": 2, "cumulative": None},
}
TASK_NAMES: tuple[str, ...] = tuple(PAPER_DEFAULTS)


def _canonical(name: str) -> str | None:
    key = str(name).replace("_", "").replace("-", "").replace(" ", "").lower()
    for task in TASK_NAMES:
        if task.lower() == key:
            return task
    return None


def make_rule(
    task_name: str,
    k: int | None = None,
    cumulative: bool | None = None,
    unsupervised: bool = False,
) -> StallRule:
    """The T3 rule of a task with the paper defaults (``k``/``cumulative`` override them).

    Task names are matched ignoring case, ``_``, ``-`` and spaces (``"guess_numbers"`` works).
    ``cumulative`` applies to the hypothesis-shrink tasks only (GuessNumbers, CircuitDecoding).
    ``unsupervised=True`` (MovieRecommendation only) gives :class:`EstimateDriftRule`.

    Raises:
        ValueError: unknown task (the message lists the valid names), or an option that does not
            apply to the task.
    """
    task = _canonical(task_name)
    if task is None:
        raise ValueError(f"unknown T3 task {task_name!r}; valid names: {', '.join(TASK_NAMES)}")
    defaults = PAPER_DEFAULTS[task]
    kk = defaults["k"] if k is None else int(k)
    if cumulative is not None and task not in ("GuessNumbers", "CircuitDecoding"):
        raise ValueError(
            f"cumulative applies to GuessNumbers and CircuitDecoding only, not {task}"
        )
    if unsupervised and task != "MovieRecommendation":
        raise ValueError(f"unsupervised applies to MovieRecommendation only, not {task}")
    cum = defaults["cumulative"] if cumulative is None else bool(cumulative)
    if task == "GuessNumbers":
        rule: StallRule = AnyRule(OutsideHypothesisRule(), ShrinkStallRule(kk, cumulative=cum))
    elif task == "CircuitDecoding":
        rule = ShrinkStallRule(kk, cumulative=cum)
    elif task == "SituationPuzzles":
        rule = ConsecutiveUnknownRule(kk)
    elif task == "MovieRecommendation" and unsupervised:
        rule = EstimateDriftRule()
    else:
        rule = SimilarityDecreaseRule(kk)
    rule.reset()
    return rule
