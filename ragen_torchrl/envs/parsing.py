"""Parsing model replies of the form ``<think>…</think><answer>a1 || a2</answer>``.

Pure functions: they never raise on model output, however malformed; they report what
was valid instead, and the env turns an invalid turn into the format penalty.

Example:
    >>> r = parse_response("<think>go right</think><answer>Right || up</answer>",
    ...                    action_names=("Left", "Down", "Right", "Up"), max_actions=2)
    >>> r.actions, r.format_ok, r.think
    (['Right', 'Up'], True, 'go right')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: replies longer than this are cut before parsing (a model can emit thousands of
#: tokens; regexes over megabytes would stall the rollout)
MAX_REPLY_CHARS = 8192

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass
class ParsedResponse:
    """What a reply contained.

    Attributes:
        actions: valid actions in canonical spelling (at most ``max_actions``), or the
            single free-form answer when ``action_names`` is ``None``.
        format_ok: the reply had an ``<answer>`` block (and, when required, a think block).
        think: the reasoning text (stripped), ``""`` when absent.
        answer: the raw text inside ``<answer>``, ``""`` when absent.
        num_invalid: tokens between ``||`` that were not valid actions.
    """

    actions: list[str] = field(default_factory=list)
    format_ok: bool = False
    think: str = ""
    answer: str = ""
    num_invalid: int = 0

    @property
    def is_valid(self) -> bool:
        """A turn is valid when the format is right and at least one action parsed."""
        return self.format_ok and bool(self.actions)


def parse_response(
    text: str,
    action_names: tuple[str, ...] | None,
    max_actions: int = 2,
    *,
    require_think: bool = True,
    separator: str = "||",
) -> ParsedResponse:
    """Parse one reply.

    Args:
        text: the assistant message (the opening ``<think>`` may be missing when the
            generation was primed with it; it is then assumed).
        action_names: canonical names matched case-insensitively; ``None`` keeps the
            answer as one free-form action.
        max_actions: keep at most this many valid actions (extra ones are dropped).
        require_think: a reply without ``</think>`` is a format error.
        separator: action separator inside ``<answer>``.

    Returns:
        :class:`ParsedResponse`; never raises on any string input.

    Example:
        >>> parse_response("no tags at all", ("Up",)).is_valid
        False
        >>> parse_response("<think>x</think><answer>Up || Fly</answer>", ("Up",)).num_invalid
        1
    """
    if not isinstance(text, str):
        return ParsedResponse()
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    text = text[:MAX_REPLY_CHARS]
    if "<think>" not in text and "</think>" in text:
        text = "<think>" + text  # generation was primed with the opening tag
    think_m = _THINK_RE.search(text)
    answer_m = _ANSWER_RE.search(text, think_m.end() if think_m else 0)
    think = think_m.group(1).strip() if think_m else ""
    if answer_m is None or (require_think and think_m is None):
        return ParsedResponse(think=think)
    answer = answer_m.group(1).strip()
    if action_names is None:
        return ParsedResponse(actions=[answer] if answer else [], format_ok=True, think=think, answer=answer)
    lookup = {name.lower(): name for name in action_names}
    actions: list[str] = []
    invalid = 0
    for part in answer.split(separator):
        name = lookup.get(part.strip().lower())
        if name is None:
            invalid += 1
        elif len(actions) < max_actions:
            actions.append(name)
    return ParsedResponse(actions=actions, format_ok=True, think=think, answer=answer, num_invalid=invalid)
