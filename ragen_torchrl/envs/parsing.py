"""Parsing model replies of the form ``<think>…</think><answer>a1 || a2</answer>``.

Pure functions: they never raise on model output, however malformed; they report what
was valid instead, and the env turns an invalid turn into the format penalty.

Action selection follows the RAGEN reference (RAGEN-2, arXiv 2604.06268, REFERENCE
environments): the answer is split on ``||`` (empty pieces dropped), only the first
``max_actions`` pieces are kept, the valid ones among them are executed in order, and the
turn is penalised when any kept piece is invalid. An invalid piece therefore uses up a
slot: ``"Fly || Up || Left"`` with ``max_actions=2`` executes ``Up`` only, with the penalty.

Reply formats (:data:`REPLY_FORMATS`, ``env.reply_format``):

- ``strict`` (default, the RAGEN reference): the reply, read as if generation was primed with
  ``<think>`` (the tag is put in front unless the reply starts with it), must contain
  ``<think>…</think>`` followed by **only whitespace** and then ``<answer>…</answer>``; it is
  the reference's ``re.search(r"<think>(.*?)</think>\\s*<answer>(.*?)</answer>", …)``. Text
  before the think block or after ``</answer>`` is allowed. The reference's special tokens
  (``<think>``, ``</think>``, ``<answer>``, ``</answer>``, ``<|im_start|>``, ``<|im_end|>``)
  are removed from the think and answer texts, so ``<answer><answer>Up</answer>`` reads ``Up``.
- ``lenient``: any ``<answer>…</answer>`` after the first ``</think>`` counts, whatever text lies
  between them (``<think>go</think> I go left. <answer>Left</answer>`` runs ``Left``); tags
  inside the answer are kept (and make the action invalid).

Example:
    >>> r = parse_response("<think>go right</think><answer>Right || up</answer>",
    ...                    action_names=("Left", "Down", "Right", "Up"), max_actions=2)
    >>> r.actions, r.format_ok, r.think, r.penalised
    (['Right', 'Up'], True, 'go right', False)
    >>> r = parse_response("<think>x</think><answer>Fly || Up || Left</answer>",
    ...                    action_names=("Left", "Down", "Right", "Up"), max_actions=2)
    >>> r.actions, r.num_invalid, r.penalised
    (['Up'], 1, True)
    >>> text = "<think>go</think> I will go left. <answer>Left</answer>"
    >>> parse_response(text, ("Left",)).is_valid, parse_response(text, ("Left",), reply_format="lenient").actions
    (False, ['Left'])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: replies longer than this are cut before parsing (a model can emit thousands of
#: tokens; regexes over megabytes would stall the rollout). ``TextGameEnv`` cuts every
#: reply to this length before any parser or game sees it.
MAX_REPLY_CHARS = 8192

#: significant digits :func:`safe_int` converts; longer numbers are clamped to
#: ``±INT_CLAMP``. Python refuses to convert more than 4300 digits (``ValueError``), and no
#: id, count or answer in these games needs more than 18.
MAX_INT_DIGITS = 18
INT_CLAMP = 10**MAX_INT_DIGITS

#: the reasoning block of a reply; the one pattern every parser and diagnostic uses
THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
#: the reference's join of the two blocks: ``</think>``, whitespace only, ``<answer>``
_THINK_ANSWER_JOIN_RE = re.compile(r"</think>\s*<answer>")

#: ``strict``: the RAGEN reference's reply format (only whitespace between ``</think>`` and
#: ``<answer>``); ``lenient``: any answer block after the think block
REPLY_FORMATS = ("strict", "lenient")

#: removed from the think and answer texts in the strict format (RAGEN reference's list)
SPECIAL_TOKENS = ("<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>")


@dataclass
class ParsedResponse:
    """What a reply contained.

    Attributes:
        actions: the valid actions among the first ``max_actions`` action tokens, in
            order and canonical spelling, or the single free-form answer when
            ``action_names`` is ``None``.
        format_ok: the reply had an ``<answer>`` block (and, when required, a think block before
            it; in the strict format, joined to it by whitespace only).
        think: the reasoning text (stripped), ``""`` when absent.
        answer: the raw text inside ``<answer>``, ``""`` when absent.
        num_invalid: invalid tokens among the first ``max_actions`` (tokens after those
            are never looked at, valid or not).
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

    @property
    def penalised(self) -> bool:
        """Whether the turn gets the format penalty (reference rule): a format error, no
        valid action, or any invalid action among the kept tokens.

        Example:
            >>> ParsedResponse(actions=["Up"], format_ok=True, num_invalid=1).penalised
            True
        """
        return not self.is_valid or self.num_invalid > 0


def parse_response(
    text: str,
    action_names: tuple[str, ...] | None,
    max_actions: int = 2,
    *,
    require_think: bool = True,
    separator: str = "||",
    reply_format: str = "strict",
) -> ParsedResponse:
    """Parse one reply.

    Args:
        text: the assistant message (the opening ``<think>`` may be missing when the
            generation was primed with it; it is then assumed).
        action_names: canonical names matched case-insensitively; ``None`` keeps the
            answer as one free-form action.
        max_actions: look at the first this many action tokens (non-empty pieces between
            separators); later tokens are dropped unread.
        require_think: a reply without ``</think>`` is a format error.
        separator: action separator inside ``<answer>``.
        reply_format: ``"strict"`` (the reference: only whitespace between ``</think>`` and
            ``<answer>``) or ``"lenient"``; see the module docstring.

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
    if reply_format not in REPLY_FORMATS:
        raise ValueError(f"reply_format must be one of {', '.join(REPLY_FORMATS)}, got {reply_format!r}")
    text = text[:MAX_REPLY_CHARS]
    if reply_format == "strict":
        blocks = _strict_blocks(text, require_think)
        if blocks is None:  # still report the reasoning of a malformed reply
            think_m = THINK_RE.search(text if text.startswith("<think>") or not require_think else "<think>" + text)
            return ParsedResponse(think=_drop_special_tokens(think_m.group(1)) if think_m else "")
        think, answer = (_drop_special_tokens(b) for b in blocks)
    else:
        if "<think>" not in text and "</think>" in text:
            text = "<think>" + text  # generation was primed with the opening tag
        think_m = THINK_RE.search(text)
        answer_m = _ANSWER_RE.search(text, think_m.end() if think_m else 0)
        think = think_m.group(1).strip() if think_m else ""
        if answer_m is None or (require_think and think_m is None):
            return ParsedResponse(think=think)
        answer = answer_m.group(1).strip()
    if action_names is None:
        return ParsedResponse(actions=[answer] if answer else [], format_ok=True, think=think, answer=answer)
    actions, invalid = select_actions(answer, action_names, max_actions, separator=separator)
    return ParsedResponse(actions=actions, format_ok=True, think=think, answer=answer, num_invalid=invalid)


def _strict_blocks(text: str, require_think: bool) -> tuple[str, str] | None:
    """``(think, answer)`` raw texts as the reference's ``re.search(r"<think>(.*?)</think>\\s*<answer>(.*?)</answer>",
    "<think>" + reply, re.DOTALL)`` finds them, or ``None`` when it finds nothing.

    Computed without that regex, whose backtracking is cubic on replies full of tags: the leftmost
    ``<think>`` and the first ``</think>\\s*<answer>`` after it give the only candidate (a later
    one leaves less text for ``</answer>``), so the reply is valid iff a ``</answer>`` follows.
    Without ``require_think`` the answer is the first ``<answer>…</answer>`` anywhere.
    """
    if not require_think:
        answer_m = _ANSWER_RE.search(text)
        if answer_m is None:
            return None
        think_m = THINK_RE.search(text, 0, answer_m.start())
        return (think_m.group(1) if think_m else ""), answer_m.group(1)
    if not text.startswith("<think>"):
        text = "<think>" + text  # the reference primes every generation with the opening tag
    join = _THINK_ANSWER_JOIN_RE.search(text, len("<think>"))
    if join is None:
        return None
    close = text.find("</answer>", join.end())
    if close < 0:
        return None
    return text[len("<think>") : join.start()], text[join.end() : close]


def _drop_special_tokens(block: str) -> str:
    """Remove the reference's special tokens (and surrounding whitespace) from a block."""
    for token in SPECIAL_TOKENS:
        block = block.replace(token, "").strip()
    return block.strip()


def safe_int(text: str) -> int | None:
    """The integer a model wrote, or ``None`` when ``text`` is not one; never raises.

    ``text`` is an optional sign followed by decimal digits (any script ``int()`` accepts,
    e.g. fullwidth ``"１２"``), surrounding whitespace allowed. A number with more than
    :data:`MAX_INT_DIGITS` significant digits is clamped to ``±INT_CLAMP``, which is out of
    range for every id and answer of these games, so it is rejected as one instead of
    crashing ``int()`` (Python's 4300-digit limit).

    Example:
        >>> safe_int("42"), safe_int(" -007 "), safe_int("１２"), safe_int("4x")
        (42, -7, 12, None)
        >>> safe_int("9" * 10_000) == INT_CLAMP
        True
    """
    if not isinstance(text, str):
        return None
    body = text.strip()
    sign = -1 if body[:1] == "-" else 1
    if body[:1] in "+-" and body:
        body = body[1:]
    if not body or not body.isdecimal():
        return None
    body = body.lstrip("0") or "0"
    if len(body) > MAX_INT_DIGITS:
        return sign * INT_CLAMP
    return sign * int(body)


def select_actions(
    answer: str, action_names: tuple[str, ...], max_actions: int, *, separator: str = "||"
) -> tuple[list[str], int]:
    """The valid actions among the first ``max_actions`` tokens of ``answer``, and how many
    of those tokens were invalid.

    Pieces between separators are stripped and empty ones dropped (``"Up ||"`` is one
    token); names match case-insensitively. An invalid token takes a slot, so a later
    valid one is not pulled in (reference: truncate to ``max_actions_per_turn``, then
    keep the valid ones).

    Example:
        >>> select_actions("Fly || Up || Left", ("Left", "Up"), 2)
        (['Up'], 1)
        >>> select_actions("up ||  || LEFT || Up", ("Left", "Up"), 2)
        (['Up', 'Left'], 0)
    """
    lookup = {name.lower(): name for name in action_names}
    tokens = [piece.strip() for piece in answer.split(separator)]
    tokens = [t for t in tokens if t][:max_actions]
    names = [lookup.get(t.lower()) for t in tokens]
    return [n for n in names if n is not None], sum(n is None for n in names)
