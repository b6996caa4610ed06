"""Countdown: reach a target number with + - * / over given numbers (pure Python, no torch).

One turn: the answer is an equation such as ``(25 + 50) + 7`` (optionally followed by
``= 82``). Scoring follows RAGEN:

* 1.0 if the equation only uses given numbers, each at most as often as given, and its
  value equals the target;
* 0.1 if it uses exactly the given numbers (a permutation of the multiset) but the value is
  wrong;
* 0.0 otherwise (including malformed text, which never raises inside :meth:`step`).

Expressions are evaluated by a small recursive-descent parser with exact rational
arithmetic (:class:`fractions.Fraction`), never ``eval``
(:mod:`~ragen_torchrl.envs.games.countdown_expressions`); data files are read by
:mod:`~ragen_torchrl.envs.games.records`.

Example:
    >>> game = CountdownGame(target=24, numbers=[3, 4, 6])
    >>> game.step("(3 + 4 - 6) * 24")[0]   # 24 is not one of the numbers
    0.0
    >>> CountdownGame(24, [3, 4, 6]).step("4 * 6")[0]
    1.0
    >>> CountdownGame(24, [3, 4, 6]).step("3 * 4 + 6")[0]
    0.1
"""

from __future__ import annotations

import os
import random
from fractions import Fraction
from typing import Any, NamedTuple, Sequence

from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.countdown_expressions import (
    ExpressionError,
    evaluate_expression,
)
from ragen_torchrl.envs.games.records import iter_records

__all__ = [
    "CountdownGame",
    "CountdownProblem",
    "load_countdown_file",
    "score_answer",
]


CORRECT_REWARD = 1.0


FORMAT_REWARD = 0.1


class CountdownProblem(NamedTuple):
    """One Countdown instance."""

    target: int
    numbers: tuple[int, ...]


def score_answer(answer: str, target: int, numbers: Sequence[int]) -> float:
    """RAGEN Countdown reward of an answer (1.0 / 0.1 / 0.0); never raises."""
    try:
        value, used = evaluate_expression(answer, numbers, target=target)
    except (ExpressionError, RecursionError):
        return 0.0
    if value == target:
        return CORRECT_REWARD
    if sorted(used) == sorted(int(x) for x in numbers):
        return FORMAT_REWARD
    return 0.0


def _solve(
    target: int, numbers: Sequence[int], allow_fractions: bool = False
) -> tuple[str, list[tuple[str, str, str, Fraction]]] | None:
    """``(expression, steps)`` reaching ``target`` with a subset of ``numbers``, or None.

    ``steps`` lists the arithmetic steps ``(left, op, right, result)`` in order.
    Depth-first search combining two values at a time (subtraction only with a
    non-negative result; division only exact unless ``allow_fractions``).
    """
    items = [(Fraction(n), str(n), ()) for n in numbers]
    for v, s, st in items:
        if v == target:
            return s, []
    seen: set[tuple[Fraction, ...]] = set()

    def rec(items):
        key = tuple(sorted(v for v, _, _ in items))
        if key in seen:
            return None
        seen.add(key)
        n = len(items)
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                (a, sa, sta), (b, sb, stb) = items[i], items[j]
                rest = [items[k] for k in range(n) if k != i and k != j]
                cands = []
                if i < j:
                    cands.append((a + b, "+"))
                    cands.append((a * b, "*"))
                if a > b or (a == b and i < j):
                    cands.append((a - b, "-"))
                if b != 0 and (allow_fractions or a % b == 0):
                    cands.append((a / b, "/"))
                for v, op in cands:
                    expr = f"({sa} {op} {sb})"
                    steps = sta + stb + ((_fmt_value(a), op, _fmt_value(b), v),)
                    if v == target:
                        return _strip(expr), list(steps)
                    if rest:
                        found = rec(rest + [(v, expr, steps)])
                        if found:
                            return found
        return None

    return rec(items)


def _strip(expr: str) -> str:
    """Drop one pair of outer parentheses when they wrap the whole expression."""
    if expr.startswith("(") and expr.endswith(")"):
        depth = 0
        for k, ch in enumerate(expr):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and k < len(expr) - 1:
                return expr
        return expr[1:-1]
    return expr


def _fmt_value(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


class CountdownGame(TextGame):
    """One Countdown episode (a single answer turn).

    ``step(answer)`` always ends the episode; ``info['success']`` is True when the reward
    is 1; ``info['action_is_effective']`` is True when the answer parses as a valid
    equation over the given numbers. ``progress()`` is ``|value - target|`` of the last
    valid answer (``float(target)`` before any), lower is closer.
    """

    action_names = None
    instructions: str = (
        "You are playing Countdown. You get a list of numbers and a target. Write one "
        "equation that uses the numbers, each at most once, with + - * / and parentheses, "
        "so that its value is the target, for example (25 + 50) + 7. Give only the left "
        "side of the equation, or add = and the target at the end. A correct equation "
        "scores 1, an equation that uses all the numbers but misses the target scores 0.1, "
        "anything else scores 0."
    )

    def __init__(self, target: int, numbers: Sequence[int]):
        try:
            nums = tuple(int(n) for n in numbers)
            target_i = int(target)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Countdown target and numbers must be integers: {exc}") from None
        if not nums:
            raise ValueError("Countdown needs at least one number")
        if target_i != target or any(n != m for n, m in zip(nums, numbers)):
            raise ValueError("Countdown target and numbers must be integers")
        self.target = target_i
        self.numbers = nums
        self._done = False
        self._success = False
        self._last_value: Fraction | None = None
        self._last_answer: str | None = None
        self._solution: tuple[str, list] | None | bool = False  # False = not computed

    @classmethod
    def generate(
        cls,
        seed: int,
        num_numbers: int | None = None,
        max_number: int = 99,
        max_target: int = 1000,
    ) -> "CountdownGame":
        """A solvable instance, deterministic in ``seed``.

        Draws ``num_numbers`` (3 or 4 when None) numbers from ``1..max_number``, then builds
        the target from a random expression over a random subset (at least two numbers)
        with + - * / where every intermediate result is a positive integer; the target is
        in ``1..max_target``.
        """
        rng = random.Random(f"countdown:{int(seed)}")
        n = num_numbers if num_numbers is not None else rng.choice((3, 4))
        if n < 2:
            raise ValueError(f"num_numbers must be >= 2, got {n}")
        while True:
            numbers = [rng.randint(1, max_number) for _ in range(n)]
            k = rng.randint(2, n)
            values = rng.sample(numbers, k)
            while len(values) > 1:
                a = values.pop(rng.randrange(len(values)))
                b = values.pop(rng.randrange(len(values)))
                ops = ["+", "*"]
                if a != b:
                    ops.append("-")
                if b > 1 and a % b == 0 or a > 1 and b % a == 0:
                    ops.append("/")
                op = rng.choice(ops)
                if op == "+":
                    v = a + b
                elif op == "*":
                    v = a * b
                elif op == "-":
                    v = abs(a - b)
                else:
                    v = a // b if b > 1 and a % b == 0 else b // a
                values.append(v)
            target = values[0]
            if 1 <= target <= max_target and target not in numbers:
                return cls(target, numbers)

    @classmethod
    def from_problems(cls, problems: Sequence[CountdownProblem | tuple], seed: int) -> "CountdownGame":
        """The instance ``problems[seed % len(problems)]`` (e.g. from :func:`load_countdown_file`)."""
        if not problems:
            raise ValueError("Countdown problem list is empty")
        target, numbers = problems[int(seed) % len(problems)]
        return cls(target, numbers)

    # ---------------------------------------------------------------- dynamics
    def evaluate(self, answer: str) -> tuple[Fraction, list[int]]:
        """:func:`evaluate_expression` with this game's numbers and target."""
        return evaluate_expression(answer, self.numbers, target=self.target)

    def score(self, answer: str) -> float:
        return score_answer(answer, self.target, self.numbers)

    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        if self._done:
            return 0.0, True, {"success": self._success, "action_is_effective": False}
        self._done = True
        self._last_answer = action
        try:
            value, _ = self.evaluate(action)
            effective = True
            self._last_value = value
        except (ExpressionError, RecursionError):
            effective = False
        reward = self.score(action) if effective else 0.0
        self._success = reward == CORRECT_REWARD
        return reward, True, {"success": self._success, "action_is_effective": effective}

    @property
    def done(self) -> bool:
        return self._done

    def solution(self) -> tuple[str, list] | None:
        if self._solution is False:
            self._solution = _solve(self.target, self.numbers) or _solve(
                self.target, self.numbers, allow_fractions=True
            )
        return self._solution  # type: ignore[return-value]

    def solve(self) -> str | None:
        """An expression over the numbers (each at most once) equal to the target, or None."""
        sol = self.solution()
        return None if sol is None else sol[0]

    def oracle_action(self) -> str:
        """:meth:`solve`'s expression; when unsolvable, all numbers added (scores 0.1)."""
        expr = self.solve()
        return expr if expr is not None else " + ".join(str(n) for n in self.numbers)

    def progress(self) -> float:
        if self._last_value is None:
            return float(self.target)
        return float(abs(self._last_value - self.target))

    # ---------------------------------------------------------------- text
    def render_text(self) -> str:
        nums = ", ".join(str(n) for n in self.numbers)
        text = (
            f"Target: {self.target}. Numbers: [{nums}]. Use each number at most once with "
            f"+ - * / and parentheses to make {self.target}."
        )
        if self._done:
            if self._success:
                text += " Your equation is correct."
            elif self._last_value is not None:
                text += f" Your equation gives {_fmt_value(self._last_value)}, not {self.target}."
            else:
                text += " Your equation is not valid."
        return text

    def explain(self, action: str) -> str:
        nums = ", ".join(str(n) for n in self.numbers)
        head = f"I need to make {self.target} from {nums}."
        sol = self.solution()
        if sol is not None and action.strip() == sol[0]:
            steps = [f"{a} {op} {b} = {_fmt_value(v)}" for a, op, b, v in sol[1]]
            if not steps:
                return f"{head} The number {self.target} is given, so the answer is {sol[0]}."
            if len(steps) == 1:
                return f"{head} {steps[0]}, so the answer is {sol[0]}."
            return f"{head} " + ", then ".join(steps) + f". So the answer is {sol[0]}."
        try:
            value, _ = self.evaluate(action)
        except (ExpressionError, RecursionError):
            return f"{head} I try {action}."
        if value == self.target:
            return f"{head} {action.strip()} is {self.target}, so this is the answer."
        return f"{head} {action.strip()} is {_fmt_value(value)}, which is not {self.target}, but it is my best try."

    def __repr__(self) -> str:
        return f"CountdownGame(target={self.target}, numbers={list(self.numbers)})"


def load_countdown_file(path: str | os.PathLike) -> list[CountdownProblem]:
    """Countdown problems from a JSON-lines (or parquet) file with fields ``target`` and
    ``nums`` (or ``numbers``), e.g. ``{"target": 24, "nums": [3, 4, 6]}``.

    Raises:
        ValueError: missing file or a malformed record (names the file, line and fields).
    """
    expected = "fields 'target' (int) and 'nums' or 'numbers' (list of ints)"
    problems = []
    for line, rec in iter_records(path, expected):
        nums = rec.get("nums", rec.get("numbers"))
        target = rec.get("target")
        try:
            if target is None or nums is None or isinstance(nums, (str, bytes)):
                raise TypeError
            nums_l = list(nums)
            if not nums_l or isinstance(target, bool) or any(isinstance(n, bool) for n in nums_l):
                raise TypeError
            t = int(target)
            ns = tuple(int(n) for n in nums_l)
            if t != target or any(a != b for a, b in zip(ns, nums_l)):
                raise TypeError
        except (TypeError, ValueError):
            raise ValueError(f"{os.fspath(path)}, line {line}: malformed record {rec!r}; expected {expected}") from None
        problems.append(CountdownProblem(t, ns))
    if not problems:
        raise ValueError(f"{os.fspath(path)}: no records; expected {expected}")
    return problems
