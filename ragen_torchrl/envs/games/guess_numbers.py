"""GuessNumbers (T3 active reasoning) and the shared base of the interactive T3 games.

**Task.** The secret is a string of 4 *distinct* digits; a leading zero is allowed, so there
are 10·9·8·7 = 5040 possible secrets (``ALL_CODES``). A query is a guess of 4 distinct digits; the
feedback is ``(A, B)``: A digits in the right place, B right digits in the wrong place, rendered as
``"Guess 1234: 1 in place, 2 misplaced"``. The final answer is a 4-digit string; reward 1.0 for an
exact match, else 0.0. ``max_turns`` = 10 (queries and the answer together).

**Hypothesis set.** ``H_t`` = the secrets consistent with every valid feedback so far
(:func:`consistent_candidates`, ``|H_0| = 5040``). It is tracked exactly; ``progress()`` is
``|H_t|`` (lower is closer; 1 means solved in principle). T3 reads ``hypothesis_size`` and
``guess_in_previous_hypotheses`` (was the guess in ``H_{t-1}``) from the step info.

The interactive game API shared by the five T3 games is
:class:`~ragen_torchrl.envs.games.interactive.InteractiveGame` (re-exported here).

Example:
    >>> game = GuessNumbersGame("0157")
    >>> text, info = game.interact("0123")
    >>> text, info["hypothesis_size"] < 5040
    ('Guess 0123: 2 in place, 0 misplaced', True)
    >>> game.answer("0157")[0]
    1.0
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from functools import lru_cache
from typing import Any, Iterable, Sequence

from ragen_torchrl.checks import check_choice
from ragen_torchrl.envs.games.interactive import InteractiveGame

__all__ = [
    "ALL_CODES",
    "GuessNumbersGame",
    "InteractiveGame",
    "consistent_candidates",
    "feedback",
    "is_valid_code",
]


# --------------------------------------------------------------------------------------------
# pure functions
# --------------------------------------------------------------------------------------------
#: all 5040 codes of 4 distinct digits, in lexicographic order (leading zero allowed)
ALL_CODES: tuple[str, ...] = tuple("".join(p) for p in itertools.permutations("0123456789", 4))
#: the demonstrator's fixed first guess (default size)
OPENER = "0123"
#: the paper's size: 4 distinct digits out of 0-9
DEFAULT_DIGITS, DEFAULT_SYMBOLS = 4, 10


def _check_size(num_digits: int, num_symbols: int) -> tuple[int, int]:
    num_digits, num_symbols = int(num_digits), int(num_symbols)
    if not 1 <= num_digits <= num_symbols <= 10:
        raise ValueError(
            f"need 1 <= num_digits <= num_symbols <= 10 (distinct decimal digits), got num_digits={num_digits}, "
            f"num_symbols={num_symbols}"
        )
    return num_digits, num_symbols


@lru_cache(maxsize=64)
def all_codes(num_digits: int = DEFAULT_DIGITS, num_symbols: int = DEFAULT_SYMBOLS) -> tuple[str, ...]:
    """Every secret of ``num_digits`` distinct digits drawn from ``0 .. num_symbols-1``, in
    lexicographic order (``all_codes(4, 10) == ALL_CODES``; ``all_codes(3, 6)`` has 120 codes).

    Example:
        >>> len(all_codes(3, 6)), all_codes(3, 6)[:3]
        (120, ('012', '013', '014'))
    """
    num_digits, num_symbols = _check_size(num_digits, num_symbols)
    if (num_digits, num_symbols) == (DEFAULT_DIGITS, DEFAULT_SYMBOLS):
        return ALL_CODES
    return tuple("".join(p) for p in itertools.permutations("0123456789"[:num_symbols], num_digits))


@lru_cache(maxsize=64)
def _code_index(num_digits: int, num_symbols: int) -> dict[str, int]:
    return {c: i for i, c in enumerate(all_codes(num_digits, num_symbols))}


def is_valid_code(code: object, num_digits: int = DEFAULT_DIGITS, num_symbols: int = DEFAULT_SYMBOLS) -> bool:
    """True for a string of exactly ``num_digits`` distinct digits below ``num_symbols`` (default 4 of 0-9)."""
    return isinstance(code, str) and code in _code_index(num_digits, num_symbols)


def _fb(secret: str, guess: str) -> tuple[int, int]:
    a = sum(s == g for s, g in zip(secret, guess))
    common = len(set(secret) & set(guess))
    return a, common - a


def _valid_pair(secret: object, guess: object) -> bool:
    return (
        isinstance(secret, str)
        and isinstance(guess, str)
        and len(secret) == len(guess) >= 1
        and secret.isdigit()
        and guess.isdigit()
        and len(set(secret)) == len(secret)
        and len(set(guess)) == len(guess)
    )


def feedback(secret: str, guess: str) -> tuple[int, int]:
    """``(A, B)``: digits of ``guess`` in the right place, and right digits in the wrong place.

    Both arguments must be strings of distinct digits of the same length (``ValueError`` otherwise).

    Example:
        >>> feedback("0157", "0123"), feedback("015", "510")
        ((2, 0), (1, 2))
    """
    if not _valid_pair(secret, guess):
        raise ValueError(f"secret and guess must be distinct digits of the same length, got {secret!r}, {guess!r}")
    return _fb(secret, guess)


def consistent_candidates(
    history: Iterable[tuple[str, tuple[int, int]]], candidates: Sequence[str] | None = None
) -> list[str]:
    """All codes (from ``candidates``, default :data:`ALL_CODES`) consistent with ``history``.

    ``history`` is a sequence of ``(guess, (A, B))`` pairs; the result keeps the candidates'
    order. With an empty history this is all of ``candidates`` (5040 codes by default).
    """
    pool = list(ALL_CODES if candidates is None else candidates)
    for guess, fb in history:
        if not (isinstance(guess, str) and guess.isdigit() and len(set(guess)) == len(guess)):
            raise ValueError(f"invalid guess in history: {guess!r}")
        target = (int(fb[0]), int(fb[1]))
        pool = [c for c in pool if _fb(c, guess) == target]
    return pool


def _partition_sizes(guess: str, candidates: Sequence[str]) -> Counter:
    return Counter(_fb(c, guess) for c in candidates)


#: feedback evaluations the oracle may spend per decision (keeps a demo step well under 0.1 s)
ORACLE_BUDGET = 60_000


@lru_cache(maxsize=8192)
def _oracle_guess(
    history: tuple[tuple[str, tuple[int, int]], ...],
    num_digits: int = DEFAULT_DIGITS,
    num_symbols: int = DEFAULT_SYMBOLS,
) -> str:
    """Minimax guess from a bounded pool drawn from the consistent set (always inside H)."""
    if not history:
        return "0123456789"[:num_digits]
    cands = consistent_candidates(history, all_codes(num_digits, num_symbols))
    if len(cands) <= 2:
        return cands[0]
    limit = max(8, ORACLE_BUDGET // len(cands))
    if len(cands) <= limit:
        pool = cands
    else:  # evenly spaced deterministic subsample
        stride = len(cands) / limit
        pool = [cands[int(i * stride)] for i in range(limit)]
    best, best_key = pool[0], None
    for g in pool:
        sizes = _partition_sizes(g, cands)
        # minimise the worst case, then prefer more distinct outcomes (and a chance to hit)
        key = (max(sizes.values()), -len(sizes))
        if best_key is None or key < best_key:
            best, best_key = g, key
    return best


def _fb_text(guess: str, fb: tuple[int, int]) -> str:
    return f"Guess {guess}: {fb[0]} in place, {fb[1]} misplaced"


#: an optional ``guess`` prefix; the rest is stripped with ``str.strip`` (a regex
#: ``(.*?)\s*$`` was quadratic in a run of spaces)
_GUESS_RE = re.compile(r"\s*(?:guess\s*[:=]?)?", re.IGNORECASE)


def _parse_code(text: str, num_digits: int = DEFAULT_DIGITS, num_symbols: int = DEFAULT_SYMBOLS) -> str | None:
    """A code of distinct digits from loose text (``"1234"``, ``"1 2 3 4"``, ``"guess 1,2,3,4"``).

    Example:
        >>> _parse_code("Guess: 1, 2, 3, 4"), _parse_code("1123"), _parse_code(" " * 10_000 + "x")
        ('1234', None, None)
        >>> _parse_code("0 1 5", 3, 6), _parse_code("016", 3, 6)
        ('015', None)
    """
    text = text if isinstance(text, str) else ""
    body = text[_GUESS_RE.match(text).end() :].strip()
    body = re.sub(r"[\s,;\-\[\]\(\)\"'`.]", "", body)
    return body if is_valid_code(body, num_digits, num_symbols) else None


# --------------------------------------------------------------------------------------------
# the game
# --------------------------------------------------------------------------------------------
class GuessNumbersGame(InteractiveGame):
    """Bulls-and-cows over distinct digits (see the module docstring).

    Args:
        secret: the hidden code.
        max_turns: the turn budget (default 10, the paper's).
        num_digits, num_symbols: code length and alphabet (digits ``0 .. num_symbols-1``); the
            paper's size is 4 of 10 (5040 codes, the default). Smaller sizes keep every rule and
            the progress signal ``|H_t|``, e.g. 3 of 6 (120 codes) for the ``guess_numbers_small``
            preset, which a tiny model can learn on a CPU.
        terse: shorter demonstrator reasoning (:meth:`explain`): the number of codes that still
            fit, the candidates themselves once at most ``list_candidates`` are left, and the
            move.
        list_candidates: with ``terse``, list the candidates once at most this many are left
            (default 4). A list the reasoning carries from turn to turn lets a small model
            filter it by the newest feedback alone instead of re-deriving it from the whole history.

    Info keys of an interaction: ``guess`` (the parsed guess or ``None``), ``in_place``,
    ``misplaced`` (``None`` when invalid), ``hypothesis_size`` (``|H_t|``),
    ``hypothesis_size_before`` (``|H_{t-1}|``), ``guess_in_previous_hypotheses`` (False for an
    invalid query), ``repeated_query``. ``action_is_effective`` is True when ``H`` shrank.
    Answer info: ``valid``, ``answer``, ``success``, ``reward``.

    ``progress()`` = ``|H_t|`` (float).

    Example:
        >>> game = GuessNumbersGame("31", num_digits=2, num_symbols=5, terse=True, list_candidates=6)
        >>> game.hypothesis_size, game.interact("01")[0]
        (20, 'Guess 01: 1 in place, 0 misplaced')
        >>> game.explain(game.oracle_action())
        '6 fit: 02 03 04 21 31 41. I guess 02.'
    """

    max_turns = 10
    task_name = "GuessNumbers"
    #: terse reasoning lists the candidates once at most this many are left (``list_candidates``)
    list_candidates = 4

    def __init__(
        self,
        secret: str,
        max_turns: int | None = None,
        *,
        num_digits: int = DEFAULT_DIGITS,
        num_symbols: int = DEFAULT_SYMBOLS,
        terse: bool = False,
        list_candidates: int | None = None,
    ) -> None:
        super().__init__(max_turns)
        self.num_digits, self.num_symbols = _check_size(num_digits, num_symbols)
        if list_candidates is not None:
            if int(list_candidates) < 0:
                raise ValueError(f"list_candidates must be >= 0, got {list_candidates}")
            self.list_candidates = int(list_candidates)
        if not is_valid_code(secret, self.num_digits, self.num_symbols):
            raise ValueError(
                f"secret must be {self.num_digits} distinct digits from 0-{self.num_symbols - 1}, got {secret!r}"
            )
        self.secret = secret
        self.terse = bool(terse)
        self.history: list[tuple[str, tuple[int, int]]] = []
        self.hypotheses: list[str] = list(all_codes(self.num_digits, self.num_symbols))
        self.instructions = (
            f"Find the secret number: {self.num_digits} distinct digits from 0-{self.num_symbols - 1} "
            "(a leading zero is allowed). "
            f"Ask with <interact>GUESS</interact> ({self.num_digits} distinct digits) and get how many digits "
            "are in the right place and how many are right but misplaced. Finish with <answer>NUMBER</answer>."
        )

    #: how validation instances differ from training ones (``generate(split_by=...)``)
    SPLIT_BY = ("secret", "level")

    @classmethod
    def generate(
        cls,
        seed: int,
        split: str = "train",
        *,
        num_digits: int = DEFAULT_DIGITS,
        num_symbols: int = DEFAULT_SYMBOLS,
        split_by: str = "secret",
        **kwargs: Any,
    ) -> "GuessNumbersGame":
        """A deterministic instance of the ``"train"`` or ``"val"`` split.

        ``split_by="secret"`` (default): secrets with index % 5 == 0 (in :func:`all_codes`) are
        the ``"val"`` split (1008 of the 5040 default secrets), the rest ``"train"``: no
        validation secret is ever a training secret. ``split_by="level"``: both splits draw from
        every code, each from its own level seeds (the trainer keeps validation and training
        level seeds apart). Use it for tiny code spaces (20 codes at 2 of 5), where holding out a
        fifth of the secrets only holds out valid answers the rules allow: the secret is hidden in
        every episode, so a policy cannot memorise it either way.
        """
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        check_choice("split_by", split_by, cls.SPLIT_BY)
        codes = all_codes(num_digits, num_symbols)
        rng = random.Random(f"GuessNumbers/{split}/{int(seed)}")
        while True:
            idx = rng.randrange(len(codes))
            if split_by == "level" or (idx % 5 == 0) == (split == "val"):
                return cls(codes[idx], num_digits=num_digits, num_symbols=num_symbols, **kwargs)

    def _parse(self, text: str) -> str | None:
        return _parse_code(text, self.num_digits, self.num_symbols)

    # ---- proxy -------------------------------------------------------------------------------
    @property
    def hypothesis_size(self) -> int:
        return len(self.hypotheses)

    def progress(self) -> float:
        return float(len(self.hypotheses))

    # ---- hooks -------------------------------------------------------------------------------
    def _describe(self) -> str:
        return self.instructions

    def _interact(self, query: str) -> tuple[str, dict[str, Any]]:
        before = len(self.hypotheses)
        guess = self._parse(query)
        if guess is None:
            feedback_text = (
                f"Invalid query {query!r}: a guess must be {self.num_digits} distinct digits from "
                f"0-{self.num_symbols - 1}, for example {'0123456789'[: self.num_digits]}."
            )
            return feedback_text, {
                "valid": False,
                "guess": None,
                "in_place": None,
                "misplaced": None,
                "hypothesis_size": before,
                "hypothesis_size_before": before,
                "guess_in_previous_hypotheses": False,
                "repeated_query": False,
                "action_is_effective": False,
            }
        repeated = any(g == guess for g, _ in self.history)
        in_prev = guess in set(self.hypotheses)
        fb = _fb(self.secret, guess)
        self.history.append((guess, fb))
        self.hypotheses = [c for c in self.hypotheses if _fb(c, guess) == fb]
        after = len(self.hypotheses)
        return _fb_text(guess, fb), {
            "valid": True,
            "guess": guess,
            "in_place": fb[0],
            "misplaced": fb[1],
            "hypothesis_size": after,
            "hypothesis_size_before": before,
            "guess_in_previous_hypotheses": in_prev,
            "repeated_query": repeated,
            "action_is_effective": after < before,
        }

    def _answer(self, text: str) -> tuple[float, dict[str, Any]]:
        code = self._parse(text)
        if code is None:
            return 0.0, {
                "valid": False,
                "answer": None,
                "success": False,
                "feedback": f"Invalid answer {text!r}: expected {self.num_digits} distinct digits. Reward 0.",
            }
        ok = code == self.secret
        fb = "Correct!" if ok else f"Wrong: the secret was {self.secret}."
        return float(ok), {"valid": True, "answer": code, "success": ok, "feedback": fb}

    # ---- demonstrator ------------------------------------------------------------------------
    def oracle_action(self) -> str:
        if len(self.hypotheses) == 1:
            return self.ANSWER_PREFIX + self.hypotheses[0]
        if self.turns_left <= 1 and self.hypotheses:
            return self.ANSWER_PREFIX + self.hypotheses[0]
        return self.INTERACT_PREFIX + _oracle_guess(tuple(self.history), self.num_digits, self.num_symbols)

    def explain(self, action: str) -> str:
        kind, payload = self.split_action(action)
        if self.terse:
            return self._explain_terse(kind, payload) or super().explain(action)
        n = len(self.hypotheses)
        t = len(self.history)
        if kind == "answer":
            code = self._parse(payload)
            if code is not None and n == 1 and code == self.hypotheses[0]:
                return f"Only {code} fits all {t} feedback lines, so I answer {code}."
            return f"{n} numbers still fit the feedback; I answer {payload}."
        if kind == "interact":
            guess = self._parse(payload)
            if guess is None:
                return f"I ask {payload}."
            worst = max(_partition_sizes(guess, self.hypotheses).values()) if n else 0
            if t == 0:
                return (
                    f"No feedback yet, so all {n} numbers are possible. I open with {guess}; "
                    f"at most {worst} stay possible after the reply."
                )
            inside = "it fits all feedback so far" if guess in self.hypotheses else "it is a probe"
            return (
                f"After {t} guess{'es' if t != 1 else ''}, {n} numbers still fit the feedback. "
                f"I guess {guess} because "
                f"{inside} and at most {worst} stay possible after the reply."
            )
        return super().explain(action)

    def _explain_terse(self, kind: str, payload: str) -> str | None:
        n = len(self.hypotheses)
        fits = f"{n} fit" if n > self.list_candidates or n == 0 else f"{n} fit: {' '.join(self.hypotheses)}"
        if kind == "answer":
            return f"{fits}. I answer {payload}."
        if kind == "interact":
            if not self.history:
                return f"No feedback yet. I open with {payload}."
            return f"{fits}. I guess {payload}."
        return None
