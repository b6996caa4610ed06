"""The interface every pure-Python game core implements.

A game core knows nothing about torch, tokenizers or chat formatting: it holds the
state of one episode, applies one already-parsed action at a time, renders itself as
text and knows an oracle move. The TorchRL wrapper (:mod:`ragen_torchrl.envs.text_env`)
does the parsing of model output, the batching, the chat messages and the TensorDict
keys, so a new task only needs a subclass of :class:`TextGame`.

Example:
    >>> from ragen_torchrl.envs.games.frozenlake import FrozenLakeGame
    >>> game = FrozenLakeGame(desc=["SF", "FG"])
    >>> reward, done, info = game.step("Right")
    >>> sorted(info)
    ['action_is_effective', 'success']
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class TextGame(ABC):
    """One episode of a text game.

    Subclasses set ``action_names`` (the case-insensitive action vocabulary) or leave it
    ``None`` for free-form answers (Countdown, MetaMathQA), and implement the methods below.

    Contract:
        * ``step(action)`` receives one valid action (a name from ``action_names``, in its
          canonical spelling, or a free-form answer string) and returns
          ``(reward, done, info)``; ``info`` has at least the bool keys ``success`` and
          ``action_is_effective`` (did the state change).
        * ``render_text()`` is the observation shown to the model.
        * ``oracle_action()`` is the move a demonstrator makes (optimal where cheap).
        * ``progress()`` is a float proxy of how far the episode is from solved (used by
          T3 truncation and logged); lower is closer unless the game documents otherwise.
        * ``explain(action)`` is a short observation-dependent reason for choosing
          ``action``, used in supervised demonstrations.
    """

    #: canonical action names, or ``None`` when the answer is free text
    action_names: tuple[str, ...] | None = None
    #: one-line task description shown in the system prompt
    instructions: str = ""

    @abstractmethod
    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        """Apply one action and return ``(reward, done, info)``."""

    @abstractmethod
    def render_text(self) -> str:
        """The current observation as text."""

    @abstractmethod
    def oracle_action(self) -> str:
        """The demonstrator's action in the current state."""

    def progress(self) -> float:
        """Task progress proxy (default 0.0: no proxy)."""
        return 0.0

    def explain(self, action: str) -> str:
        """Observation-dependent reasoning text for ``action`` (used by demonstrations)."""
        return f"I choose {action}."

    @property
    def success(self) -> bool:
        """Whether the episode ended with the task solved."""
        return bool(getattr(self, "_success", False))
