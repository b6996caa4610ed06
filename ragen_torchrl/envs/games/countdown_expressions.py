"""Countdown equations: an exact evaluator (pure Python, no torch, never ``eval``).

:func:`evaluate_expression` parses an equation such as ``(25 + 50) + 7`` (optionally followed
by ``= 82``) with a small recursive-descent parser and exact rational arithmetic
(:class:`fractions.Fraction`), and checks that it only uses the given numbers; anything it can
not evaluate raises :class:`ExpressionError`. The game's reward on top of it is
:func:`~ragen_torchrl.envs.games.countdown.score_answer`.

Example:
    >>> evaluate_expression("(3 + 4 - 6) * 4", [3, 4, 6, 4])
    (Fraction(4, 1), [3, 4, 6, 4])
    >>> evaluate_expression("8 / 0", [8, 0])
    Traceback (most recent call last):
    ...
    ragen_torchrl.envs.games.countdown_expressions.ExpressionError: division by zero
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any, Iterable

__all__ = ["ExpressionError", "evaluate_expression"]


MAX_EXPRESSION_CHARS = 200


MAX_NESTING = 50


_OPERATOR_ALIASES = {"×": "*", "÷": "/", "−": "-", "–": "-"}


_DIGITS = "0123456789"


class ExpressionError(ValueError):
    """A Countdown equation that can not be evaluated (malformed, a number that is not
    available, division by zero, too long, ...)."""


class _Parser:
    """Recursive descent over tokens: expr := term (('+'|'-') term)*,
    term := factor (('*'|'/') factor)*, factor := '-' factor | INT | '(' expr ')'."""

    def __init__(self, tokens: list[tuple[str, Any]]):
        self.tokens = tokens
        self.i = 0
        self.depth = 0
        self.used: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, Any]:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op, _ = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op, _ = self.take()
            rhs = self.factor()
            if op == "*":
                value = value * rhs
            else:
                if rhs == 0:
                    raise ExpressionError("division by zero")
                value = value / rhs
        return value

    def factor(self) -> Fraction:
        kind = self.peek()
        if kind is None:
            raise ExpressionError("unexpected end of expression")
        if kind == "-":
            self.take()
            self._enter()
            value = -self.factor()
            self.depth -= 1
            return value
        if kind == "num":
            _, n = self.take()
            self.used.append(n)
            return Fraction(n)
        if kind == "(":
            self.take()
            self._enter()
            value = self.expr()
            if self.peek() != ")":
                raise ExpressionError("unbalanced parentheses: missing ')'")
            self.take()
            self.depth -= 1
            return value
        if kind == ")":
            raise ExpressionError("unbalanced parentheses or missing operand before ')'")
        raise ExpressionError(f"unexpected {kind!r} in expression (missing operand)")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExpressionError(f"expression nested deeper than {MAX_NESTING}")


def _tokenize(text: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    i, n = 0, len(text)
    while i < n:
        ch = _OPERATOR_ALIASES.get(text[i], text[i])
        if ch in " \t\n\r":
            i += 1
        elif ch in _DIGITS:
            j = i
            while j < n and text[j] in _DIGITS:
                j += 1
            tokens.append(("num", int(text[i:j])))
            i = j
        elif ch in "+-*/()":
            tokens.append((ch, None))
            i += 1
        else:
            raise ExpressionError(f"invalid character {text[i]!r} at position {i}")
    return tokens


def evaluate_expression(text: str, numbers: Iterable[int], target: int | None = None) -> tuple[Fraction, list[int]]:
    """Evaluate a Countdown equation exactly.

    Accepts integer literals, ``+ - * /`` (also ``×``, ``÷`` and the unicode minus),
    parentheses, unary minus and whitespace, optionally followed by ``= <integer>`` (which
    must equal ``target`` when a target is given; the right-hand side is not counted as a
    used number).

    Returns:
        ``(value, used_numbers)``: the exact value (a :class:`~fractions.Fraction`, equal to
        an ``int`` when integral) and the literals in order of appearance.

    Raises:
        ExpressionError: non-string or text longer than 200 characters, any other character
            (letters, unicode digits, ``**``, ...), unbalanced parentheses, a missing operand,
            division by zero, or a literal that is not among ``numbers`` / is used more
            often than given.
    """
    if not isinstance(text, str):
        raise ExpressionError(f"expression must be a str, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters ({len(text)})")
    lhs = text
    if "=" in text:
        lhs, _, rhs = text.partition("=")
        rhs = rhs.strip()
        if "=" in rhs or not rhs or any(ch not in _DIGITS for ch in rhs):
            raise ExpressionError(f"right-hand side of '=' must be an integer, got {rhs!r}")
        if target is not None and int(rhs) != int(target):
            raise ExpressionError(f"right-hand side {rhs} is not the target {target}")
    tokens = _tokenize(lhs)
    if not tokens:
        raise ExpressionError("empty expression")
    parser = _Parser(tokens)
    value = parser.expr()
    if parser.i != len(tokens):
        kind, val = tokens[parser.i]
        if kind == ")":
            raise ExpressionError("unbalanced parentheses: unexpected ')'")
        what = f"number {val}" if kind == "num" else repr(kind)
        raise ExpressionError(f"unexpected {what} after a complete expression")
    available = Counter(int(x) for x in numbers)
    used = Counter(parser.used)
    for n, k in used.items():
        if n not in available:
            raise ExpressionError(f"number {n} is not one of the given numbers {sorted(available.elements())}")
        if k > available[n]:
            raise ExpressionError(f"number {n} is used {k} times but given {available[n]} time(s)")
    return value, parser.used
