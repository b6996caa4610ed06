"""Boolean formulas of the CircuitDecoding task (pure Python, no torch).

The formula AST (``("var", i)`` with ``i`` 1-based, ``("const", b)``, ``("not", f)``,
``(op, f, g)`` with ``op`` in :data:`OPS`), its evaluation and truth table
(:func:`evaluate`, :func:`truth_table`), its text (:func:`formula_text`), the enumerable
families the hidden circuits come from (:func:`enumerate_family`, :func:`candidate_classes`)
and the parser of the formulas an agent writes (:func:`parse_formula`, ``AND``/``OR``/``XOR``/
``NOT``, ``& | ^ ~ !``, constants 0/1; precedence NOT > AND > XOR > OR).

Example:
    >>> f = parse_formula("x1 AND NOT x2", 2)
    >>> formula_text(f), [evaluate(f, bits) for bits in assignments(2)]
    ('x1 AND NOT x2', [0, 0, 1, 0])
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from typing import Sequence

__all__ = [
    "FAMILIES",
    "OPS",
    "assignments",
    "candidate_classes",
    "enumerate_family",
    "evaluate",
    "formula_text",
    "parse_formula",
    "truth_table",
]


OPS = ("AND", "OR", "XOR")


FAMILIES = ("basic", "default")


# AST: ("var", i) with i 1-based, ("const", b), ("not", f), (op, f, g) with op in OPS
Formula = tuple


def _apply(op: str, a: int, b: int) -> int:
    if op == "AND":
        return a & b
    if op == "OR":
        return a | b
    return a ^ b


def evaluate(formula: Formula, bits: Sequence[int]) -> int:
    """Evaluate an AST on ``bits`` (``bits[0]`` is x1)."""
    kind = formula[0]
    if kind == "var":
        return int(bits[formula[1] - 1])
    if kind == "const":
        return int(formula[1])
    if kind == "not":
        return 1 - evaluate(formula[1], bits)
    return _apply(kind, evaluate(formula[1], bits), evaluate(formula[2], bits))


def assignments(n: int) -> list[tuple[int, ...]]:
    """All assignments in order; index ``k`` has ``x1`` as the most significant bit of ``k``."""
    return list(itertools.product((0, 1), repeat=n))


def truth_table(formula: Formula, n: int) -> int:
    """Truth table as an int: bit ``k`` is the output on assignment ``assignments(n)[k]``."""
    table = 0
    for k, bits in enumerate(assignments(n)):
        if evaluate(formula, bits):
            table |= 1 << k
    return table


def formula_text(formula: Formula, top: bool = True) -> str:
    """Canonical text: ``x1 AND (x2 OR x3)``, ``NOT (x1 XOR x2)``, ``NOT x1``."""
    kind = formula[0]
    if kind == "var":
        return f"x{formula[1]}"
    if kind == "const":
        return str(int(formula[1]))
    if kind == "not":
        inner = formula[1]
        body = formula_text(inner, top=False)
        return f"NOT {body}"
    text = f"{formula_text(formula[1], False)} {kind} {formula_text(formula[2], False)}"
    return text if top else f"({text})"


def enumerate_family(n: int = 3, family: str = "default") -> list[Formula]:
    """The candidate formulas (see the module docstring), in a fixed order."""
    if family not in FAMILIES:
        raise ValueError(f"unknown circuit family {family!r}; valid: {', '.join(FAMILIES)}")
    if n < 2:
        raise ValueError(f"n_inputs must be >= 2, got {n}")
    var = [("var", i) for i in range(1, n + 1)]
    out: list[Formula] = list(var)
    out += [("not", v) for v in var]
    pairs = list(itertools.combinations(range(1, n + 1), 2))
    out += [(op, ("var", i), ("var", j)) for i, j in pairs for op in OPS]
    out += [("not", (op, ("var", i), ("var", j))) for i, j in pairs for op in OPS]
    if family == "default":
        for i in range(1, n + 1):
            for j, k in pairs:
                if i in (j, k):
                    continue
                for op in OPS:
                    for op2 in OPS:
                        out.append((op, ("var", i), (op2, ("var", j), ("var", k))))
    return out


@lru_cache(maxsize=32)
def candidate_classes(n: int = 3, family: str = "default") -> dict[int, tuple[str, ...]]:
    """Truth table -> formulas (texts) with that table, in family order; the first is the
    class representative used by the demonstrator."""
    classes: dict[int, list[str]] = {}
    for f in enumerate_family(n, family):
        classes.setdefault(truth_table(f, n), []).append(formula_text(f))
    return {t: tuple(fs) for t, fs in classes.items()}


_TOKEN_RE = re.compile(
    r"\s*(?:(?P<var>[xX]\d+)|(?P<word>AND|OR|XOR|NOT)\b|(?P<sym>&&|\|\||[&|^~!()])|(?P<const>[01])\b)",
    re.IGNORECASE,
)


_SYM = {"&&": "AND", "&": "AND", "||": "OR", "|": "OR", "^": "XOR", "~": "NOT", "!": "NOT"}


_MAX_FORMULA_CHARS = 500


def _tokenize(text: str) -> list[str] | None:
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            return None
        if m.group("var"):
            tokens.append(m.group("var").lower())
        elif m.group("word"):
            tokens.append(m.group("word").upper())
        elif m.group("sym"):
            s = m.group("sym")
            tokens.append(_SYM.get(s, s))
        else:
            tokens.append(m.group("const"))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens


def parse_formula(text: str, n: int) -> Formula | None:
    """Parse a formula over ``x1..xn``; ``None`` when malformed (never raises)."""
    if not isinstance(text, str) or not text.strip() or len(text) > _MAX_FORMULA_CHARS:
        return None
    tokens = _tokenize(text)
    if not tokens:
        return None
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        return tok

    def binary(level: int) -> Formula:
        ops = ("OR", "XOR", "AND")
        if level == len(ops):
            return unary()
        left = binary(level + 1)
        while peek() == ops[level]:
            take()
            left = (ops[level], left, binary(level + 1))
        return left

    def unary() -> Formula:
        tok = peek()
        if tok is None:
            raise ValueError("unexpected end")
        if tok == "NOT":
            take()
            return ("not", unary())
        if tok == "(":
            take()
            inner = binary(0)
            if peek() != ")":
                raise ValueError("missing )")
            take()
            return inner
        if tok in ("0", "1"):
            take()
            return ("const", int(tok))
        if tok.startswith("x"):
            idx = int(take()[1:])
            if not 1 <= idx <= n:
                raise ValueError("variable out of range")
            return ("var", idx)
        raise ValueError(f"unexpected token {tok}")

    try:
        tree = binary(0)
    except (ValueError, IndexError, RecursionError):
        return None
    if pos != len(tokens):
        return None
    return tree
