"""The reply format of the active-reasoning (T3) chat environments.

Each turn the model replies ``<think>reasoning</think>`` followed by either
``<interact>query</interact>`` (ask the environment) or ``<answer>final answer</answer>``
(end the episode). :func:`parse_active_reply` reads a reply into an :class:`ActiveReply`; the
prompts that explain the format (:data:`ACTIVE_FORMAT_INSTRUCTIONS`), answer a malformed reply
(:data:`INVALID_REPLY`, :data:`INVALID_REPLY_END`) and ask for the answer on the last turn
(:data:`LAST_TURN_PROMPT`) are here too.

Example:
    >>> parse_active_reply("<think>ask</think><interact>1234</interact>").as_action()
    'interact:1234'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..parsing import MAX_REPLY_CHARS, THINK_RE

__all__ = [
    "ACTIVE_FORMAT_INSTRUCTIONS",
    "ActiveReply",
    "INVALID_REPLY",
    "INVALID_REPLY_END",
    "LAST_TURN_PROMPT",
    "parse_active_reply",
]


#: system prompt shared by the active-reasoning tasks (the task itself is in the first user message)
ACTIVE_FORMAT_INSTRUCTIONS = (
    "You solve a task by asking questions. Each turn, reason inside <think>...</think>, then either ask "
    "one query with <interact>QUERY</interact> or give your final answer with <answer>ANSWER</answer>. "
    "The answer ends the episode. When asked to present your answer, answer at once."
)


#: the next user message after a reply without an ``<interact>``/``<answer>`` block when the
#: episode goes on (the reference's wording, T3 arXiv "Reducing Belief Deviation in RL for Active
#: Reasoning": "The previous action is invalid. ... Try again.")
INVALID_REPLY = (
    "The previous action is invalid. If you want to make an interaction, you should put it between "
    "<interact> and </interact>. If you want to give the final answer, you should put the answer "
    "between <answer> and </answer>. Try again."
)

#: the last user message after a malformed reply that ends the episode
INVALID_REPLY_END = "The previous action is invalid: no <interact> or <answer> block. The episode is over."


#: appended to the user message before the last turn of the budget (reference: "... Now present
#: your answer inside <answer> and </answer> ..."); the T3 transform uses the same sentence
LAST_TURN_PROMPT = "This is your last turn. Now present your answer inside <answer> and </answer>."


_OPEN_RE = re.compile(r"<(interact|answer)>")


def _first_action_block(text: str, start: int) -> tuple[str, str] | None:
    """``(kind, raw payload)`` of the first ``<interact>…</interact>`` / ``<answer>…</answer>``
    at or after ``start`` (what ``re.search(r"<(interact|answer)>(.*?)</\\1>")`` finds), in linear
    time: the regex rescans to the end from every unclosed opening tag (quadratic on 10k
    nested tags)."""
    last_close = {kind: text.rfind(f"</{kind}>") for kind in ("interact", "answer")}
    for m in _OPEN_RE.finditer(text, start):
        kind = m.group(1)
        if last_close[kind] >= m.end():
            return kind, text[m.end() : text.find(f"</{kind}>", m.end())]
    return None


@dataclass(frozen=True)
class ActiveReply:
    """What one reply contained.

    Attributes:
        kind: ``"interact"``, ``"answer"``, or ``None`` when the format is wrong.
        payload: the stripped text inside the tag (``""`` when ``kind`` is ``None``).
        think: the stripped reasoning text (``""`` when absent).
    """

    kind: str | None
    payload: str = ""
    think: str = ""

    @property
    def is_valid(self) -> bool:
        return self.kind is not None

    def as_action(self) -> str:
        """The game-core action: ``"interact:<payload>"`` / ``"answer:<payload>"``."""
        if self.kind is None:
            raise ValueError("an invalid reply has no action")
        return f"{self.kind}:{self.payload}"


def parse_active_reply(text: Any, *, require_think: bool = False) -> ActiveReply:
    """Parse an optional ``<think>…</think>`` then the first ``<interact>…</interact>`` or
    ``<answer>…</answer>``.

    Never raises. The opening ``<think>`` may be missing when generation was primed with it.
    The first action block after the reasoning (when there is one) counts; an empty block is a
    format error. The reasoning block is optional, as in the T3 reference code, which looks only
    for the action block; ``require_think=True`` makes a reply without ``</think>`` a format error.

    Example:
        >>> parse_active_reply("<think>try</think><interact>0123</interact>")
        ActiveReply(kind='interact', payload='0123', think='try')
        >>> parse_active_reply("<answer>0123</answer>").kind  # no reasoning block: still an answer
        'answer'
        >>> parse_active_reply("<answer>0123</answer>", require_think=True).kind is None
        True
        >>> parse_active_reply("<think>x</think><answer> </answer>").kind is None
        True
    """
    if not isinstance(text, str):
        return ActiveReply(None)
    text = text[:MAX_REPLY_CHARS]  # bounded regex work on runaway generations
    if "<think>" not in text and "</think>" in text:
        text = "<think>" + text
    think_m = THINK_RE.search(text)
    think = think_m.group(1).strip() if think_m else ""
    if require_think and think_m is None:
        return ActiveReply(None, think=think)
    block = _first_action_block(text, think_m.end() if think_m else 0)
    if block is None:
        return ActiveReply(None, think=think)
    payload = block[1].strip()
    if not payload:
        return ActiveReply(None, think=think)
    return ActiveReply(block[0], payload, think)
