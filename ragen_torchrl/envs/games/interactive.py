"""The base of the interactive T3 games: ``interact``/``answer`` plus a prefix-dispatching ``step``.

**Interactive game API** (all five T3 games, via :class:`InteractiveGame`):

* ``interact(query) -> (feedback_text, info)`` — one question to the environment; never raises:
  a malformed query gives ``"Invalid query ..."`` and ``info["valid"] = False`` (it still uses a turn).
* ``answer(text) -> (reward, info)`` — the terminal answer; ends the episode. An unparsable answer
  ends it too, with reward 0 and ``info["valid"] = False``.
* ``step(action)`` keeps the :class:`TextGame` contract by dispatching on a prefix:
  ``step("interact:" + query)`` returns ``(0.0, done, info)`` and ``step("answer:" + text)`` returns
  ``(reward, True, info)``; the feedback text is in ``info["feedback"]``. Anything else is an invalid
  action (a turn is used, nothing else changes).
* ``oracle_action()`` returns the demonstrator's next action in the same ``"interact:..."`` /
  ``"answer:..."`` form; ``explain(action)`` gives a short observation-dependent reason.
* The game never ends itself on the number of turns: ``turn`` counts the actions taken and
  ``max_turns`` holds the paper's budget, which the environment wrapper enforces (it may also
  grant a final answer turn after a T3 truncation).

Every interaction info has the keys ``kind`` (``"interact"``/``"answer"``/``"invalid"``),
``valid``, ``feedback``, ``turn``, ``turns_left``, ``progress``, ``progress_before``, ``success`` and
``action_is_effective``; each game adds its own keys (documented on the class).

Example:
    >>> from ragen_torchrl.envs.games.guess_numbers import GuessNumbersGame
    >>> game = GuessNumbersGame("0157")
    >>> game.step("interact:0123")[2]["feedback"], game.turns_left
    ('Guess 0123: 2 in place, 0 misplaced', 9)
    >>> InteractiveGame.split_action("answer: 0157")
    ('answer', '0157')
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from ragen_torchrl.envs.games.base import TextGame

__all__ = ["InteractiveGame"]


# --------------------------------------------------------------------------------------------
class InteractiveGame(TextGame):
    """Base of the T3 games: ``interact``/``answer`` plus the prefix-dispatching ``step``.

    Subclasses implement ``_interact(query) -> (feedback, info)``,
    ``_answer(text) -> (reward, info)`` (``info`` must hold ``success`` and ``valid``),
    ``_describe()`` (the task text shown above the history), ``progress()``, ``oracle_action()``
    and ``explain()``.
    """

    action_names = None
    #: the paper's turn budget (queries + answer); enforced by the wrapper
    max_turns: int = 10
    #: task name used by the T3 rule registry (:func:`ragen_torchrl.transforms.t3_rules.make_rule`)
    task_name: str = ""

    INTERACT_PREFIX = "interact:"
    ANSWER_PREFIX = "answer:"

    def __init__(self, max_turns: int | None = None) -> None:
        if max_turns is not None:
            if int(max_turns) < 1:
                raise ValueError(f"max_turns must be >= 1, got {max_turns}")
            self.max_turns = int(max_turns)
        self.turn = 0
        self.done = False
        self._success = False
        self.final_reward = 0.0
        #: ``(query, feedback)`` for every interaction, valid or not (answers included)
        self.transcript: list[tuple[str, str]] = []
        self.last_feedback = ""

    # ---- hooks -------------------------------------------------------------------------------
    @abstractmethod
    def _interact(self, query: str) -> tuple[str, dict[str, Any]]:
        """Handle one query (already stripped); the turn is already counted."""

    @abstractmethod
    def _answer(self, text: str) -> tuple[float, dict[str, Any]]:
        """Score the final answer (already stripped)."""

    @abstractmethod
    def _describe(self) -> str:
        """The task statement shown above the interaction history."""

    # ---- public API --------------------------------------------------------------------------
    @property
    def turns_left(self) -> int:
        return max(0, self.max_turns - self.turn)

    def _base_info(self, kind: str, progress_before: float) -> dict[str, Any]:
        return {
            "kind": kind,
            "valid": False,
            "feedback": "",
            "turn": self.turn,
            "turns_left": self.turns_left,
            "progress_before": float(progress_before),
            "progress": float(self.progress()),
            "success": bool(self.success),
            "action_is_effective": False,
        }

    def _finish_info(self, info: dict[str, Any], feedback: str, kind: str, before: float) -> dict:
        out = self._base_info(kind, before)
        out.update(info)
        out["feedback"] = feedback
        out["turn"] = self.turn
        out["turns_left"] = self.turns_left
        out["progress"] = float(self.progress())
        out["progress_before"] = float(before)
        return out

    def interact(self, query: str) -> tuple[str, dict[str, Any]]:
        """Ask one query; returns ``(feedback, info)``. Never raises on a bad query."""
        query = "" if query is None else str(query)
        before = self.progress()
        if self.done:
            feedback = "The episode is over; no more queries are accepted."
            return feedback, self._finish_info({"valid": False}, feedback, "interact", before)
        self.turn += 1
        feedback, info = self._interact(query.strip())
        self.transcript.append((query.strip(), feedback))
        self.last_feedback = feedback
        info.setdefault("success", False)
        return feedback, self._finish_info(info, feedback, "interact", before)

    def answer(self, text: str) -> tuple[float, dict[str, Any]]:
        """Give the final answer; returns ``(reward, info)`` and ends the episode."""
        text = "" if text is None else str(text)
        before = self.progress()
        if self.done:
            feedback = "The episode is over; the answer was already given."
            info = self._finish_info({"valid": False, "reward": 0.0}, feedback, "answer", before)
            return 0.0, info
        self.turn += 1
        reward, info = self._answer(text.strip())
        reward = float(reward)
        self.done = True
        self._success = bool(info.get("success", False))
        self.final_reward = reward
        feedback = info.pop("feedback", "") or f"Answer received (reward {reward:g})."
        self.transcript.append(("ANSWER " + text.strip(), feedback))
        self.last_feedback = feedback
        info["reward"] = reward
        info["success"] = self._success
        info["action_is_effective"] = True
        return reward, self._finish_info(info, feedback, "answer", before)

    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        """``"interact:<query>"`` -> ``(0.0, done, info)``; ``"answer:<text>"`` -> ``(reward, True, info)``."""
        text = "" if action is None else str(action)
        head, sep, payload = text.partition(":")
        kind = head.strip().lower()
        if sep and kind == "interact":
            _, info = self.interact(payload)
            return 0.0, self.done, info
        if sep and kind == "answer":
            reward, info = self.answer(payload)
            return reward, True, info
        before = self.progress()
        feedback = "Invalid action: use 'interact:<query>' to ask or 'answer:<answer>' to finish."
        if not self.done:
            self.turn += 1
            self.transcript.append((text.strip(), feedback))
            self.last_feedback = feedback
        return 0.0, self.done, self._finish_info({"valid": False}, feedback, "invalid", before)

    def render_text(self) -> str:
        lines = [self._describe()]
        if self.transcript:
            lines.append("History:")
            for i, (query, feedback) in enumerate(self.transcript, 1):
                lines.append(f"Turn {i}: {query} -> {feedback}")
        else:
            lines.append("History: none yet.")
        if self.done:
            lines.append("The episode is over.")
        else:
            lines.append(f"Turns left: {self.turns_left}.")
        return "\n".join(lines)

    @staticmethod
    def split_action(action: str) -> tuple[str, str]:
        """``"interact:q"`` -> ``("interact", "q")``; anything else -> ``("", action)``."""
        head, sep, payload = str(action).partition(":")
        kind = head.strip().lower()
        if sep and kind in ("interact", "answer"):
            return kind, payload.strip()
        return "", str(action)
