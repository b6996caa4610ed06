"""CircuitDecoding (T3 active reasoning): identify hidden Boolean circuits by querying them.

**Task.** There are ``num_circuits`` hidden circuits (default 2, named ``A``, ``B``, ...) over
``n_inputs`` inputs ``x1..xn`` (default 3). Each circuit is one formula of an enumerable family
(:func:`enumerate_family`):

* ``"basic"``: ``xi``, ``NOT xi``, ``xi OP xj`` and ``NOT (xi OP xj)`` (i < j);
* ``"default"``: ``"basic"`` plus ``xi OP (xj OP xk)`` (j < k, i not in {j, k});

with ``OP`` in ``AND``, ``OR``, ``XOR`` (51 formulas, 45 distinct truth tables for n = 3; 152 and 128 for n = 4).

**Queries.** A query names **one** circuit: ``A(1,0,1)`` evaluates circuit A on x1=1, x2=0, x3=1
and returns its bit (``"A(1,0,1) = 1"``), as in the reference. A query without a name (``(1,0,1)``,
``*(1,0,1)``), which would read every circuit at once, is invalid. Bits may be written ``1,0,1``,
``1 0 1`` or ``101``. A malformed query never raises (``info["valid"] = False``).

**Hypothesis set.** Two formulas with the same truth table cannot be told apart by any query, so
the candidates are the truth-table *equivalence classes* of the family. ``H_t`` = for each circuit,
the classes consistent with every answer so far. ``progress()`` = total number of surviving
classes over all circuits (lower is closer; ``num_circuits`` means every circuit is identified).
``info["formula_count"]`` also gives the surviving formulas.

**Presentation.** ``presentation="indexed"`` (default, the reference code; the T3 paper text does
not say how the task is shown): the task lists the family's candidate formulas with 1-based
indices (:attr:`CircuitDecodingGame.candidates`, family order) and asks for an index per circuit,
``"A = 3; B = 17"``. ``presentation="formula"``: the family is described in words and the answer
is formula text. The rules, the hypothesis set and the rewards are the same: an index stands for
its candidate formula, and formula text is accepted in both presentations.

**Answer.** ``"A = x1 AND x2; B = NOT x3"`` (pieces separated by ``;`` or new lines; ``=`` or ``:``).
Any formula in ``AND``/``OR``/``XOR``/``NOT`` with parentheses is accepted (also ``& | ^ ~ !``,
constants 0/1; precedence NOT > AND > XOR > OR), not only the family's templates. A circuit counts
as identified when the answer's **truth table equals the hidden one**; reward = fraction of circuits
identified, ``success`` = all of them. A missing or unparsable piece scores 0 for that circuit.
``max_turns`` = 10.

The formulas (evaluation, families, parsing) are in
:mod:`~ragen_torchrl.envs.games.circuit_formulas`.

Example:
    >>> game = CircuitDecodingGame(["x1 AND x2", "NOT x3"])
    >>> game.interact("A(1,1,0)")[0]
    'A(1,1,0) = 1'
    >>> game.answer("A = x2 AND x1; B = NOT x3")[0]
    1.0
"""

from __future__ import annotations

import random
import re
from typing import Any, Sequence

from ragen_torchrl.checks import check_choice
from ragen_torchrl.envs.games.circuit_formulas import (
    Formula,
    assignments,
    candidate_classes,
    enumerate_family,
    formula_text,
    parse_formula,
    truth_table,
)
from ragen_torchrl.envs.games.interactive import InteractiveGame

# the game, and the formula names (importable from here as before the split)
__all__ = ["CircuitDecodingGame"]


#: ``NAME = formula`` / ``NAME: formula``; the formula is cut by :func:`_formula_body`, not by
#: the regex: ``(.+?)\s*\.?\s*$`` backtracked cubically over a run of spaces (minutes for 8 kB)
_ANSWER_LINE_RE = re.compile(r"\s*([A-Za-z]+)\s*[=:](.*)", re.DOTALL)


def _formula_body(text: str) -> str:
    """The formula of an answer line: stripped, one trailing period dropped.

    Example:
        >>> _formula_body("  x1 AND x2 . ")
        'x1 AND x2'
    """
    body = text.strip()
    return body[:-1].rstrip() if body.endswith(".") and len(body) > 1 else body


_QUERY_RE = re.compile(r"^\s*(?:(?P<name>[A-Za-z]+|\*)\s*)?\((?P<bits>[^()]*)\)\s*$")


def _parse_bits(text: str, n: int) -> tuple[int, ...] | None:
    parts = [p for p in re.split(r"[\s,;]+", text.strip()) if p]
    if len(parts) == 1 and len(parts[0]) == n:
        parts = list(parts[0])
    if len(parts) != n or any(p not in ("0", "1") for p in parts):
        return None
    return tuple(int(p) for p in parts)


class CircuitDecodingGame(InteractiveGame):
    """Identify hidden Boolean circuits (see the module docstring).

    Info keys of an interaction: ``circuits`` (names evaluated, ``[]`` when invalid),
    ``assignment`` (tuple of bits or ``None``), ``outputs`` (name -> bit), ``hypothesis_size``
    (total surviving classes), ``hypothesis_size_before``, ``hypothesis_sizes`` (name -> count),
    ``formula_count`` (total surviving formulas), ``repeated_query``. ``action_is_effective`` is
    True when the total class count shrank.
    Answer info: ``valid`` (every circuit given and parsed), ``correct`` (name -> bool),
    ``reward`` (fraction identified), ``success`` (all identified).

    ``progress()`` = total surviving class count (float).
    """

    max_turns = 10
    task_name = "CircuitDecoding"
    #: how validation instances differ from training ones (``generate(split_by=...)``)
    SPLIT_BY = ("circuits", "level")
    #: how the task is shown and answered: indexed candidate formulas (reference) or formula text
    PRESENTATIONS = ("indexed", "formula")

    def __init__(
        self,
        circuits: Sequence[str],
        n_inputs: int = 3,
        family: str = "default",
        names: Sequence[str] | None = None,
        max_turns: int | None = None,
        terse: bool = False,
        presentation: str = "indexed",
    ) -> None:
        super().__init__(max_turns)
        self.terse = bool(terse)
        self.presentation = check_choice("presentation", presentation, self.PRESENTATIONS)
        self.n = int(n_inputs)
        self.family = family
        self.classes = candidate_classes(self.n, family)
        #: the family's formulas in family order; index i + 1 in the indexed presentation
        self.candidates: list[str] = [formula_text(f) for f in enumerate_family(self.n, family)]
        if not circuits:
            raise ValueError("at least one circuit is needed")
        names = list(names) if names is not None else [chr(ord("A") + i) for i in range(len(circuits))]
        if len(names) != len(circuits) or len(set(n.upper() for n in names)) != len(names):
            raise ValueError(f"need one distinct name per circuit, got {names}")
        if any(not re.fullmatch(r"[A-Za-z]+", nm) for nm in names):
            raise ValueError(f"circuit names must be letters, got {names}")
        self.names = [nm.upper() for nm in names]
        self.tables: list[int] = []
        self.formulas: list[str] = []
        for text in circuits:
            tree = parse_formula(text, self.n)
            if tree is None:
                raise ValueError(f"cannot parse circuit formula {text!r} over {self.n} inputs")
            table = truth_table(tree, self.n)
            if table not in self.classes:
                raise ValueError(f"circuit {text!r} is not in the {family!r} family")
            self.tables.append(table)
            self.formulas.append(formula_text(tree))
        self.assignments = assignments(self.n)
        self.alive: list[list[int]] = [list(self.classes) for _ in self.tables]
        self.queries: list[tuple[tuple[str, ...], tuple[int, ...]]] = []

    @classmethod
    def generate(
        cls,
        seed: int,
        split: str = "train",
        num_circuits: int = 2,
        n_inputs: int = 3,
        family: str = "default",
        split_by: str = "circuits",
        **kwargs: Any,
    ) -> "CircuitDecodingGame":
        """Distinct hidden classes drawn uniformly (representative formulas).

        ``split_by="circuits"`` (default): an instance is ``"val"`` when the mixed-radix rank of
        its class tuple is divisible by 5, else ``"train"`` (disjoint splits). ``split_by="level"``:
        both splits draw from every tuple, each from its own level seeds; for tiny families (one
        circuit of 24 functions), where holding out a fifth of the tuples holds out answers the
        rules allow (the circuits are hidden in every episode either way).
        """
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        check_choice("split_by", split_by, cls.SPLIT_BY)
        classes = candidate_classes(n_inputs, family)
        tables = sorted(classes)
        if num_circuits > len(tables):
            raise ValueError("more circuits than distinct candidate functions")
        rng = random.Random(f"CircuitDecoding/{split}/{int(seed)}")
        while True:
            picks = rng.sample(range(len(tables)), num_circuits)
            rank = 0
            for p in picks:
                rank = rank * len(tables) + p
            if split_by == "level" or (rank % 5 == 0) == (split == "val"):
                circuits = [classes[tables[p]][0] for p in picks]
                return cls(circuits, n_inputs=n_inputs, family=family, **kwargs)

    # ---- proxy -------------------------------------------------------------------------------
    @property
    def hypothesis_sizes(self) -> dict[str, int]:
        return {nm: len(a) for nm, a in zip(self.names, self.alive)}

    @property
    def hypothesis_size(self) -> int:
        return sum(len(a) for a in self.alive)

    @property
    def formula_count(self) -> int:
        return sum(len(self.classes[t]) for a in self.alive for t in a)

    def progress(self) -> float:
        return float(self.hypothesis_size)

    # ---- text --------------------------------------------------------------------------------
    def _family_text(self) -> str:
        base = "xi, NOT xi, xi OP xj, NOT (xi OP xj)"
        if self.family == "default":
            base += ", xi OP (xj OP xk)"
        return base + " with OP one of AND, OR, XOR"

    def _describe(self) -> str:
        names = ", ".join(self.names)
        xs = ", ".join(f"x{i}" for i in range(1, self.n + 1))
        example = ",".join("1" if i % 2 == 0 else "0" for i in range(self.n))
        if self.presentation == "indexed":
            listing = "\n".join(f"{i}. {f}" for i, f in enumerate(self.candidates, 1))
            return (
                f"Identify {len(self.names)} hidden Boolean circuits ({names}) over inputs {xs}. "
                f"Each circuit is one of these candidate formulas:\n{listing}\n"
                f"Ask <interact>{self.names[0]}({example})</interact> to get circuit {self.names[0]}'s "
                "output on that input (one circuit per query). "
                "Finish with <answer>"
                + "; ".join(f"{nm} = <index>" for nm in self.names)
                + "</answer> (candidate indices); an answer is right when its formula computes the same function."
            )
        return (
            f"Identify {len(self.names)} hidden Boolean circuits ({names}) over inputs {xs}. "
            f"Each circuit is one formula of the form {self._family_text()}. "
            f"Ask <interact>{self.names[0]}({example})</interact> to get circuit {self.names[0]}'s "
            "output on that input (one circuit per query). "
            "Finish with <answer>"
            + "; ".join(f"{nm} = <formula>" for nm in self.names)
            + "</answer>; a formula is right when it computes the same function."
        )

    # ---- hooks -------------------------------------------------------------------------------
    def _invalid(self, query: str, why: str) -> tuple[str, dict[str, Any]]:
        size = self.hypothesis_size
        return f"Invalid query {query!r}: {why}", {
            "valid": False,
            "circuits": [],
            "assignment": None,
            "outputs": {},
            "hypothesis_size": size,
            "hypothesis_size_before": size,
            "hypothesis_sizes": self.hypothesis_sizes,
            "formula_count": self.formula_count,
            "repeated_query": False,
            "action_is_effective": False,
        }

    def _interact(self, query: str) -> tuple[str, dict[str, Any]]:
        example = f"{self.names[0]}({','.join(['1'] * self.n)})"
        m = _QUERY_RE.match(query)
        if not m:
            return self._invalid(query, f"expected a circuit name and {self.n} bits, e.g. {example}.")
        bits = _parse_bits(m.group("bits"), self.n)
        if bits is None:
            return self._invalid(query, f"expected exactly {self.n} bits (0 or 1), e.g. {example}.")
        name = m.group("name")
        if name is None or name == "*" or name.upper() == "ALL":
            # reference rule: one circuit per query (reading all of them at once is not allowed)
            return self._invalid(query, f"name one circuit ({', '.join(self.names)}) per query, e.g. {example}.")
        if name.upper() in self.names:
            idxs = [self.names.index(name.upper())]
        else:
            return self._invalid(query, f"unknown circuit {name!r}; the circuits are {', '.join(self.names)}.")
        before = self.hypothesis_size
        k = self.assignments.index(bits)
        circuits = tuple(self.names[i] for i in idxs)
        repeated = any(b == bits and set(circuits) <= set(c) for c, b in self.queries)
        self.queries.append((circuits, bits))
        outputs: dict[str, int] = {}
        for i in idxs:
            out = (self.tables[i] >> k) & 1
            outputs[self.names[i]] = out
            self.alive[i] = [t for t in self.alive[i] if (t >> k) & 1 == out]
        bit_text = ",".join(map(str, bits))
        feedback_text = ", ".join(f"{nm}({bit_text}) = {o}" for nm, o in outputs.items())
        after = self.hypothesis_size
        return feedback_text, {
            "valid": True,
            "circuits": list(circuits),
            "assignment": bits,
            "outputs": outputs,
            "hypothesis_size": after,
            "hypothesis_size_before": before,
            "hypothesis_sizes": self.hypothesis_sizes,
            "formula_count": self.formula_count,
            "repeated_query": repeated,
            "action_is_effective": after < before,
        }

    def parse_answer(self, text: str) -> dict[str, Formula | None]:
        """Circuit name -> parsed formula (``None`` when missing or malformed)."""
        out: dict[str, Formula | None] = {nm: None for nm in self.names}
        pieces = [p for p in re.split(r"[;\n]+", text or "") if p.strip()]
        for piece in pieces:
            m = _ANSWER_LINE_RE.match(piece)
            if m and m.group(1).upper() in self.names:
                out[m.group(1).upper()] = self._parse_choice(_formula_body(m.group(2)))
            elif len(self.names) == 1 and len(pieces) == 1:
                out[self.names[0]] = self._parse_choice(piece.strip().rstrip("."))
        return out

    def _parse_choice(self, text: str) -> Formula | None:
        """A formula, or (indexed presentation) a candidate index ``3`` / ``#3`` standing for
        :attr:`candidates` ``[2]``; ``None`` when neither (an index out of range included)."""
        if self.presentation == "indexed" and re.fullmatch(r"#?\d{1,9}", text.strip()):
            i = int(text.strip().lstrip("#"))
            return parse_formula(self.candidates[i - 1], self.n) if 1 <= i <= len(self.candidates) else None
        return parse_formula(text, self.n)

    def _answer(self, text: str) -> tuple[float, dict[str, Any]]:
        parsed = self.parse_answer(text)
        correct = {}
        for nm, table in zip(self.names, self.tables):
            tree = parsed[nm]
            correct[nm] = tree is not None and truth_table(tree, self.n) == table
        valid = all(t is not None for t in parsed.values())
        reward = sum(correct.values()) / len(self.names)
        hidden = "; ".join(f"{nm} = {f}" for nm, f in zip(self.names, self.formulas))
        fb = f"{sum(correct.values())} of {len(self.names)} circuits correct."
        if reward < 1.0:
            fb += f" The circuits were: {hidden}."
        if not valid:
            fb = "Some circuits were missing or malformed. " + fb
        return reward, {"valid": valid, "correct": correct, "success": reward == 1.0, "feedback": fb}

    # ---- demonstrator ------------------------------------------------------------------------
    def _best_query(self) -> tuple[int, int]:
        """``(circuit index, assignment index)`` of the named query with the smallest worst-case
        number of surviving classes (ties: the largest circuit first, then the lowest index)."""
        best, best_key = (0, 0), None
        for i, alive in enumerate(self.alive):
            if len(alive) <= 1:
                continue
            for k in range(len(self.assignments)):
                ones = sum((t >> k) & 1 for t in alive)
                worst = max(ones, len(alive) - ones)
                key = (worst - len(alive), worst, i, k)  # largest expected removal first
                if best_key is None or key < best_key:
                    best, best_key = (i, k), key
        return best

    def _oracle_answer_text(self) -> str:
        parts = []
        for nm, alive in zip(self.names, self.alive):
            formula = self.classes[alive[0]][0] if alive else self.candidates[0]
            if self.presentation == "indexed":
                formula = str(self.candidates.index(formula) + 1)
            parts.append(f"{nm} = {formula}")
        return "; ".join(parts)

    def oracle_action(self) -> str:
        if all(len(a) <= 1 for a in self.alive) or self.turns_left <= 1:
            return self.ANSWER_PREFIX + self._oracle_answer_text()
        i, k = self._best_query()
        return self.INTERACT_PREFIX + f"{self.names[i]}(" + ",".join(map(str, self.assignments[k])) + ")"

    #: terse reasoning names a circuit's candidate functions once at most this many are left
    LIST_CANDIDATES = 2

    def known_table(self, index: int) -> str:
        """What the queries so far revealed of circuit ``index``: one character per assignment
        (in :func:`assignments` order): the output bit, or ``?`` when not asked yet.

        Example:
            >>> game = CircuitDecodingGame(["x1 AND x2"], n_inputs=2)
            >>> _ = game.interact("A(1,1)"); game.known_table(0)
            '???1'
        """
        name = self.names[index]
        cells = ["?"] * len(self.assignments)
        for circuits, bits in self.queries:
            if name in circuits:
                k = self.assignments.index(bits)
                cells[k] = str((self.tables[index] >> k) & 1)
        return "".join(cells)

    def _explain_terse(self, kind: str, payload: str) -> str | None:
        # the known part of each truth table, carried from turn to turn (a small model updates
        # one cell per feedback instead of re-reading the history), and the function once found
        parts = []
        for i, (nm, alive) in enumerate(zip(self.names, self.alive)):
            part = f"{nm} {self.known_table(i)}"
            if 0 < len(alive) <= self.LIST_CANDIDATES:
                part += " is " + " or ".join(self.classes[t][0] for t in alive)
            parts.append(part)
        state = ", ".join(parts)
        if kind == "answer":
            return f"{state}. I answer."
        if kind == "interact":
            return f"{state}. I ask {payload}."
        return None

    def explain(self, action: str) -> str:
        kind, payload = self.split_action(action)
        if self.terse:
            return self._explain_terse(kind, payload) or super().explain(action)
        sizes = ", ".join(f"{nm}: {len(a)}" for nm, a in zip(self.names, self.alive))
        if kind == "answer":
            if all(len(a) == 1 for a in self.alive):
                return f"Each circuit has exactly one function left ({sizes}), so I answer {payload}."
            return f"Functions still possible per circuit: {sizes}. I answer with my best guess."
        if kind == "interact":
            m = _QUERY_RE.match(payload)
            bits = _parse_bits(m.group("bits"), self.n) if m else None
            if bits is None:
                return f"I ask {payload}."
            k = self.assignments.index(bits)
            name = (m.group("name") or "").upper()
            if name not in self.names:
                return f"I ask {payload}."
            alive = self.alive[self.names.index(name)]
            ones = sum((t >> k) & 1 for t in alive)
            worst = max(ones, len(alive) - ones)
            return (
                f"Functions still possible per circuit: {sizes}. Input {','.join(map(str, bits))} "
                f"splits circuit {name}'s {len(alive)} so that at most {worst} stay possible."
            )
        return super().explain(action)
