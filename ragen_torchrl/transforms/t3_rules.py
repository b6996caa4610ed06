"""T3 stall rules: pure per-episode detectors of belief-trapped trajectories (no torch).

T3 truncates a training trajectory at turn t when the task's progress proxy has stalled for the
last k turns (REFERENCE §3). Each rule here watches one episode: call ``update(progress, info)``
after every *interaction* turn (not after the final answer) with the game's ``progress()`` and the
step ``info``; it returns True when the trajectory should be truncated at this turn (and keeps
returning True while the condition holds). ``reset(initial_progress=None)`` starts a new episode;
the optional initial progress is the baseline of the first comparison.

A malformed turn (``info["malformed"] = True``: no parsable query) makes no epistemic progress, so
every rule counts it as a stalled turn (REFERENCE §3: "a malformed turn makes no epistemic progress,
so it counts toward the stall window").

Baseline of "did it improve": ``info["progress_before"]`` when present (the T3 games always put it
there), else the previous ``update``'s progress, else ``reset``'s ``initial_progress``; with none of
them the first update only records the baseline and never fires.

Rules and the paper defaults (:func:`make_rule`):

* GuessNumbers: :class:`ShrinkStallRule`, k = 1 (``|H|`` not shrinking: the rule of the T3 paper,
  "Reducing Belief Deviation in RL for Active Reasoning"). ``outside_trigger=True`` adds
  :class:`OutsideHypothesisRule` (k guesses outside ``H_{t-1}``; not in the paper, off by default).
* CircuitDecoding: :class:`ShrinkStallRule`, k = 3, ``cumulative=False``: k *consecutive* stalls,
  the paper's "for all tau in [t-k, t)"; ``cumulative=True`` is the reference code (stalled turns
  counted over the episode, never reset).
* SituationPuzzles: :class:`ConsecutiveUnknownRule`, k = 5.
* PreferenceEstimation and MovieRecommendation: :class:`SimilarityDecreaseRule`, k = 2: k
  consecutive turns without an improvement of ``cos(v̂_t, v*)`` (not increasing, or no new
  estimate), counted once a first estimate exists (``rule="improve"``, the default). The other
  :data:`PREFERENCE_RULES` (config key ``t3.rule``): ``"decrease"`` (only strict decreases are
  stalls), ``"reference"`` (the supervised counting the reference code keeps commented out, see
  below) and ``"drift"``: :class:`EstimateDriftRule`, the rule the released reference code runs (its
  ``MovieRecSpace``, through which PreferenceEstimation runs too: mean of the last 4 raw estimate steps
  below ``epsilon_win = 0.28``).

Invalid turns of PE/MR. Under ``"improve"`` / ``"decrease"`` a query the game rejects as a whole
(an unknown item, an estimate of the wrong length) carries no estimate: the game ignores it. The
reference code reads the estimate of every query on its own, whatever the question part, so under
the reference switches (``"reference"``, ``"drift"``) the estimate of a query about an unknown item
counts (``info["query_estimate"]``), and a missing or wrong-length estimate is "no estimate": a
stall for ``"reference"`` (its similarity change is taken as −1), a zero step for ``"drift"``.

Example:
    >>> rule = make_rule("GuessNumbers")
    >>> rule.reset(5040)
    >>> rule.update(1440, {})
    False
    >>> rule.update(1440, {})  # |H| did not shrink for k = 1 turn
    True
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Mapping

__all__ = [
    "AnyRule",
    "ConsecutiveUnknownRule",
    "EstimateDriftRule",
    "OutsideHypothesisRule",
    "PAPER_DEFAULTS",
    "PREFERENCE_RULES",
    "ShrinkStallRule",
    "SimilarityDecreaseRule",
    "StallRule",
    "TASK_NAMES",
    "make_rule",
]


class StallRule(ABC):
    """Common interface: ``update(progress, info) -> bool`` and ``reset(initial_progress=None)``.

    ``info["malformed"]`` True marks a turn without a parsable query: a stalled turn for every rule.
    """

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
    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool: ...


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
        if before is None and not info.get("malformed", False):
            return False
        if info.get("malformed", False) or before - progress <= self.min_delta:
            self.stalls += 1
        elif not self.cumulative:
            self.stalls = 0
        return self.stalls >= self.k


class OutsideHypothesisRule(StallRule):
    """GuessNumbers option (not in the paper): fires once ``k`` consecutive guesses were outside
    ``H_{t-1}`` (``info["guess_in_previous_hypotheses"] is False``; a missing key counts as inside;
    a malformed turn counts as outside). ``cumulative=True`` counts them over the episode.

    Example:
        >>> rule = OutsideHypothesisRule(k=2)
        >>> [rule.update(10, {"guess_in_previous_hypotheses": v}) for v in (False, True, False, False)]
        [False, False, False, True]
    """

    def __init__(self, k: int = 1, cumulative: bool = False) -> None:
        super().__init__()
        if int(k) < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = int(k)
        self.cumulative = bool(cumulative)
        self.outside = 0

    def _reset_state(self) -> None:
        self.outside = 0

    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        if info.get("malformed", False) or info.get("guess_in_previous_hypotheses", True) is False:
            self.outside += 1
        elif not self.cumulative:
            self.outside = 0
        return self.outside >= self.k


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
        if info.get("malformed", False):
            self.count += 1  # no question asked: no answer either
        elif "judge_answer" in info:
            self.count = 0 if info["judge_answer"] in ("Yes", "No") else self.count + 1
        else:
            self.count = int(progress)
        return self.count >= self.k


class SimilarityDecreaseRule(StallRule):
    """PreferenceEstimation / MovieRecommendation: ``progress`` = ``cos(v̂_t, v*)``.

    A turn is a *stall* when it does not improve the similarity: the cosine did not increase by
    more than ``min_delta``, or the turn carried no new estimate (``info["estimate_updated"]``, or
    ``info["estimate_reported"]``, is False; with neither key every turn counts as carrying one),
    or it was malformed. Stalls are counted only once a first estimate exists: the turn that gives
    the first estimate is the baseline, not a comparison (a first estimate with a negative cosine
    is not a decrease). ``k`` consecutive stalls fire; an improving turn resets the count.

    ``require_decrease=True`` counts only strict decreases as stalls (a turn without a new
    estimate, or with an equal cosine, then resets the count) -- the literal "similarity
    decreases" reading of the paper's summary; off by default.

    ``reference_counting=True`` is the reference code's (supervised) counting: the estimate of a
    turn is ``info["query_estimate_similarity"]`` (the cosine of the estimate written in the query,
    even in a query the game rejects, e.g. about an unknown item; ``None``, i.e. no estimate, when
    it is missing, of the wrong length, or the turn was malformed); the baseline is the rule's own
    last estimate; after the first estimate a turn without one is a stall, and so is one whose
    cosine did not increase by more than ``min_delta``.

    Example:
        >>> rule = SimilarityDecreaseRule(k=2)
        >>> [rule.update(c, {"estimate_updated": True}) for c in (-0.3, 0.5, 0.5)]
        [False, False, False]
        >>> rule.update(0.5, {"estimate_updated": False})  # repeating itself: second stall
        True
    """

    def __init__(
        self, k: int = 2, min_delta: float = 0.0, require_decrease: bool = False, reference_counting: bool = False
    ) -> None:
        super().__init__()
        if int(k) < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if require_decrease and reference_counting:
            raise ValueError("require_decrease and reference_counting are two different rules; pick one")
        self.k = int(k)
        self.min_delta = float(min_delta)
        self.require_decrease = bool(require_decrease)
        self.reference_counting = bool(reference_counting)
        self.decreases = 0
        self.started = False
        self._last_cos: float | None = None

    def _reset_state(self) -> None:
        self.decreases = 0
        self.started = False
        self._last_cos = None

    @staticmethod
    def _estimate_updated(info: Mapping[str, Any]) -> bool:
        if "estimate_updated" in info:
            return bool(info["estimate_updated"])
        if "estimate_reported" in info:
            return bool(info["estimate_reported"])
        return True

    def _update_reference(self, info: Mapping[str, Any]) -> bool:
        cos = None if info.get("malformed", False) else info.get("query_estimate_similarity")
        if not self.started:
            if cos is not None:
                self.started = True
                self._last_cos = float(cos)
            return False
        stall = cos is None or float(cos) <= self._last_cos + self.min_delta
        if cos is not None:
            self._last_cos = float(cos)
        self.decreases = self.decreases + 1 if stall else 0
        return self.decreases >= self.k

    def _update(self, progress: float, before: float | None, info: Mapping[str, Any]) -> bool:
        if self.reference_counting:
            return self._update_reference(info)
        malformed = bool(info.get("malformed", False))
        updated = not malformed and self._estimate_updated(info)
        if not self.started:
            # the first estimate is the baseline of the comparisons, never a stall itself
            if updated:
                self.started = True
                self._last_cos = progress
            return False
        # baseline: the similarity of the previous estimate (the game's progress_before when given)
        base = before if before is not None else self._last_cos
        if self.require_decrease:
            stall = updated and base is not None and progress < base - self.min_delta
        else:
            stall = (not updated) or base is None or progress <= base + self.min_delta
        if updated:
            self._last_cos = progress
        self.decreases = self.decreases + 1 if stall else 0
        return self.decreases >= self.k


class EstimateDriftRule(StallRule):
    """The reference code's live PE / MR rule (its ``MovieRecSpace``): the agent's estimate stopped
    moving -- the mean of the last ``window`` step sizes ``||v̂_t - v̂_{t-1}||`` over the *raw*,
    unnormalised estimates is below ``threshold`` (the reference's ``epsilon_win = 0.28``). As the reference, the estimate of a turn is the
    one written in the query whatever its question part (``info["query_estimate"]``, even in a
    query the game rejects, e.g. about an unknown item); once a first estimate exists, a turn
    without one (missing, of the wrong length, or a malformed turn) is a step of size 0 (zero
    movement).

    Example:
        >>> rule = EstimateDriftRule(window=2, threshold=0.28)
        >>> rule.update(0, {"query_estimate": [1.0, 0.0]})
        False
        >>> rule.update(0, {"query_estimate": [2.0, 0.0]})  # step 1.0
        False
        >>> rule.update(0, {"query_estimate": None})  # steps [1.0, 0.0]: mean 0.5
        False
        >>> rule.update(0, {"query_estimate": None})  # steps [0.0, 0.0]
        True
    """

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
        est = None if info.get("malformed", False) else info.get("query_estimate")
        if est is not None:
            cur = [float(x) for x in est]
            if self._last is not None:
                if len(self._last) == len(cur):
                    self.steps.append(math.sqrt(sum((a - b) ** 2 for a, b in zip(cur, self._last))))
                else:
                    self.steps.append(0.0)
            self._last = cur
        elif self._last is not None:
            self.steps.append(0.0)  # no new estimate: the belief did not move
        if len(self.steps) < self.window:
            return False
        recent = self.steps[-self.window :]
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
    "CircuitDecoding": {"k": 3, "cumulative": False},
    "SituationPuzzles": {"k": 5, "cumulative": None},
    "PreferenceEstimation": {"k": 2, "cumulative": None},
    "MovieRecommendation": {"k": 2, "cumulative": None},
}
TASK_NAMES: tuple[str, ...] = tuple(PAPER_DEFAULTS)

#: ``t3.rule`` values per task (the first is the default): ``improve`` (paper text: no increase of
#: cos(v̂, v*), or no new estimate), ``decrease`` (only strict decreases), ``reference`` (the
#: supervised counting commented out in the reference code), ``drift`` (the unsupervised rule the
#: reference code runs for both tasks)
PREFERENCE_RULES: dict[str, tuple[str, ...]] = {
    "PreferenceEstimation": ("improve", "decrease", "reference", "drift"),
    "MovieRecommendation": ("improve", "decrease", "reference", "drift"),
}


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
    outside_trigger: bool = False,
    rule: str | None = None,
) -> StallRule:
    """The T3 rule of a task with the paper defaults (``k``/``cumulative`` override them).

    Task names are matched ignoring case, ``_``, ``-`` and spaces (``"guess_numbers"`` works).
    ``cumulative`` applies to the hypothesis-shrink tasks only (GuessNumbers, CircuitDecoding).
    ``outside_trigger=True`` (GuessNumbers only) adds :class:`OutsideHypothesisRule` with the same
    ``k`` and ``cumulative`` (a guess outside ``H_{t-1}``; not in the paper, off by default).
    ``rule`` (PreferenceEstimation / MovieRecommendation only, :data:`PREFERENCE_RULES`; ``None``
    = ``"improve"``): ``"improve"`` / ``"decrease"`` / ``"reference"`` give
    :class:`SimilarityDecreaseRule` (default / ``require_decrease`` / ``reference_counting``),
    ``"drift"`` :class:`EstimateDriftRule` with the reference's window 4 and threshold 0.28 (``k`` does
    not apply to it).

    Example:
        >>> make_rule("circuit_decoding").cumulative  # the paper: consecutive stalls
        False
        >>> type(make_rule("GuessNumbers", outside_trigger=True)).__name__
        'AnyRule'
        >>> drift = make_rule("preference_estimation", rule="drift")
        >>> type(drift).__name__, drift.window, drift.threshold
        ('EstimateDriftRule', 4, 0.28)

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
        raise ValueError(f"cumulative applies to GuessNumbers and CircuitDecoding only, not {task}")
    if rule is not None:
        valid = PREFERENCE_RULES.get(task)
        if valid is None:
            raise ValueError(
                f"t3.rule applies to PreferenceEstimation ({', '.join(PREFERENCE_RULES['PreferenceEstimation'])}) "
                f"and MovieRecommendation ({', '.join(PREFERENCE_RULES['MovieRecommendation'])}) only; "
                f"{task} has one rule: leave t3.rule null, got {rule!r}"
            )
        if rule not in valid:
            raise ValueError(f"t3.rule for {task} must be one of {', '.join(valid)} (or null), got {rule!r}")
    if outside_trigger and task != "GuessNumbers":
        raise ValueError(f"outside_trigger applies to GuessNumbers only, not {task}")
    if kk < 1:
        raise ValueError(f"t3.k must be >= 1, got {k}")
    cum = defaults["cumulative"] if cumulative is None else bool(cumulative)
    if task == "GuessNumbers":
        out: StallRule = ShrinkStallRule(kk, cumulative=cum)
        if outside_trigger:
            out = AnyRule(OutsideHypothesisRule(kk, cumulative=cum), out)
    elif task == "CircuitDecoding":
        out = ShrinkStallRule(kk, cumulative=cum)
    elif task == "SituationPuzzles":
        out = ConsecutiveUnknownRule(kk)
    elif rule == "drift":
        out = EstimateDriftRule()
    else:
        out = SimilarityDecreaseRule(kk, require_decrease=rule == "decrease", reference_counting=rule == "reference")
    out.reset()
    return out
