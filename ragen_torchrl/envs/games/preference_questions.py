"""The pairwise-question protocol of the preference games (pure Python, no torch).

PreferenceEstimation and MovieRecommendation ask the user "Would you prefer A over B?" and get
``Yes`` / ``Equal`` / ``No``; a question may carry the agent's running estimate
(``"... estimate: 0.5, 0.1"``). Here: parsing a question (:func:`split_estimate`,
:func:`parse_pair`, :func:`parse_compare`) and a vector (:func:`parse_vector`), writing a
vector (:func:`format_vector`), and the user's reply with its bookkeeping (:func:`pair_answer`,
:func:`ask_pair`). None of the parsers raises on hostile input.

Example:
    >>> split_estimate("Would you prefer item 3 over item 7? estimate: 0.5, 0.1")
    ('Would you prefer item 3 over item 7?', '0.5, 0.1')
    >>> parse_pair("Would you prefer item 3 over item 7?"), parse_vector("0.5, 0.1")
    ((3, 7), [0.5, 0.1])
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from ragen_torchrl.envs.parsing import safe_int

__all__ = [
    "EQUAL_TOL",
    "ask_pair",
    "format_vector",
    "pair_answer",
    "parse_compare",
    "parse_pair",
    "parse_vector",
    "split_estimate",
]

Vector = list[float]


def format_vector(v: Sequence[float], digits: int = 2) -> str:
    return ", ".join(f"{x:.{digits}f}" for x in v)


_NUMBER_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def parse_vector(text: str, dim: int | None = None) -> Vector | None:
    """Numbers in ``text`` as a vector (``None`` if none, non-finite, or not ``dim`` long)."""
    if not isinstance(text, str) or len(text) > 2000:
        return None
    body = re.sub(r"^\s*[A-Za-z][A-Za-z _\-]{0,30}[:=]", "", text)
    if re.search(r"[A-Za-z]", re.sub(r"[eE][-+]?\d", "", body)):
        return None
    nums = _NUMBER_RE.findall(body)
    if not nums:
        return None
    vec = [float(x) for x in nums]
    if any(not math.isfinite(x) for x in vec):
        return None
    if dim is not None and len(vec) != dim:
        return None
    return vec


_ESTIMATE_RE = re.compile(r"(?:^|[;,\s])estimate\s*[:=]?", re.IGNORECASE)


def split_estimate(query: str) -> tuple[str, str | None]:
    """``"compare 1 2; estimate: 0.1, 0.2"`` -> ``("compare 1 2", "0.1, 0.2")``."""
    m = _ESTIMATE_RE.search(query or "")
    if not m:
        return (query or "").strip(), None
    body = query[: m.start()].strip().rstrip(";,").strip()
    return body, query[m.end() :].strip()


_COMPARE_RE = re.compile(
    r"^\s*(?:compare\s*)?(?:items?\s*)?#?(\d+)\s*(?:,|vs\.?|versus|and|with|to|\s)\s*"
    r"(?:items?\s*)?#?(\d+)\s*\.?\s*$",
    re.IGNORECASE,
)


_PREFER_RE = re.compile(
    r"^\s*(?:would|do|does)?\s*(?:you|the\s+user)?\s*prefer\s+(?:items?\s*)?#?(\d+)\s+"
    r"(?:over|to|than)\s+(?:items?\s*)?#?(\d+)\s*[?.]?\s*$",
    re.IGNORECASE,
)


def _squash(text: str) -> str:
    # one space per whitespace run: the question regexes have neighbouring \s* pieces, which
    # backtrack cubically over a long run of spaces (seconds for 2,000 spaces)
    return " ".join(text.split()) if isinstance(text, str) else ""


def _ids(m: re.Match[str]) -> tuple[int, int]:
    # safe_int: ids of more than 18 digits are clamped (out of range) instead of raising
    # int()'s ValueError beyond 4300 digits
    return safe_int(m.group(1)), safe_int(m.group(2))


def parse_compare(text: str) -> tuple[int, int] | None:
    """``"compare 3 7"`` -> ``(3, 7)`` (ids as written); ``None`` if not a comparison.

    Never raises: an id of more than 18 digits comes back clamped to ``10**18`` (out of
    range for every instance).

    Example:
        >>> parse_compare("compare 3 7"), parse_compare("3 vs " + "9" * 10_000) == (3, 10**18)
        ((3, 7), True)
    """
    m = _COMPARE_RE.match(_squash(text))
    return _ids(m) if m else None


def parse_pair(text: str) -> tuple[int, int] | None:
    """A pairwise question -> the two ids as written; ``None`` if it is not one.

    Never raises (ids of more than 18 digits are clamped, as in :func:`parse_compare`).

    Example:
        >>> parse_pair("Would you prefer item 3 over item 7?"), parse_pair("compare 3 7")
        ((3, 7), (3, 7))
        >>> parse_pair("rate 3") is None
        True
    """
    m = _PREFER_RE.match(_squash(text))
    if m:
        return _ids(m)
    return parse_compare(text)


#: utilities closer than this are "Equal" (attributes have 2 decimals, so real ties are exact)
EQUAL_TOL = 1e-9


def pair_answer(u_first: float, u_second: float, tol: float = EQUAL_TOL) -> str:
    """The user's reply to "Would you prefer the first over the second?": Yes / Equal / No.

    Example:
        >>> pair_answer(0.5, 0.2), pair_answer(0.2, 0.2), pair_answer(0.1, 0.2)
        ('Yes', 'Equal', 'No')
    """
    if abs(u_first - u_second) <= tol:
        return "Equal"
    return "Yes" if u_first > u_second else "No"


def ask_pair(
    asked: set, comparisons: list[tuple[int, int]], a: int, b: int, u_a: float, u_b: float
) -> tuple[str, tuple[int, int] | None, bool, bool]:
    """Answer "Would you prefer a over b?" and record it in the game's question log.

    Adds the pair to ``asked`` and, unless the answer is Equal, ``(winner, loser)`` to
    ``comparisons``. Returns ``(reply, (winner, loser) or None, repeated, observed)``:
    ``repeated`` -- the pair was asked before; ``observed`` -- the ordering is new evidence.

    Example:
        >>> asked, comps = set(), []
        >>> ask_pair(asked, comps, 0, 1, 0.2, 0.5), comps
        (('No', (1, 0), False, True), [(1, 0)])
        >>> ask_pair(asked, comps, 1, 0, 0.5, 0.2)   # the same pair again, same ordering
        ('Yes', (1, 0), True, False)
    """
    key = frozenset((a, b))
    repeated = key in asked
    asked.add(key)
    reply = pair_answer(u_a, u_b)
    if reply == "Equal":
        return reply, None, repeated, False
    order = (a, b) if reply == "Yes" else (b, a)
    observed = order not in comparisons
    comparisons.append(order)
    return reply, order, repeated, observed
