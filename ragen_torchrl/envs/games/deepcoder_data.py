"""DeepCoder problems: the record type, the loaders of user files and the shipped offline set.

A :class:`CodingProblem` is a statement, **public** tests (shown in the prompt, used for
feedback) and **hidden** tests (held back, they make the reward), with an optional function
name (function-call tests: ``args -> expected``; otherwise stdin -> stdout tests), starter
code and reference solution.

:func:`load_coding_problems` reads JSON lines / a JSON array / parquet in the formats of the
paper's sources (RAGEN-2 draws DeepCoder problems from PrimeIntellect, TACO and
LiveCodeBench v5):

* **TACO / APPS**: ``question``, ``input_output`` (a JSON string or object with ``inputs``,
  ``outputs`` and optional ``fn_name``), optional ``starter_code`` and ``solutions``;
* **LiveCodeBench**: ``question_content``, ``public_test_cases`` and ``private_test_cases``
  (JSON lists of ``{input, output, testtype}``; ``testtype`` ``"functional"`` takes one JSON
  argument per input line), ``starter_code``, ``metadata`` with ``func_name``. Compressed
  private tests (base64 zlib pickle in the hub release) are refused: unpickling is unsafe,
  decompress them to JSON first;
* **PrimeIntellect / DeepCoder-Preview**: ``problem`` or ``prompt``, ``tests`` (a list of
  ``{input, output[, testtype]}`` or ``{inputs, outputs}``, possibly JSON-encoded),
  ``metadata.func_name``, ``starter_code``;
* **plain**: ``question``/``prompt``, ``public_tests`` and ``hidden_tests`` (or ``tests``),
  ``fn_name``, ``starter_code``, ``solution``: the format of the shipped set.

Without an explicit public/hidden split the first ``num_public`` tests are public when more
tests remain for the hidden set (else all tests are hidden and none is shown).

The shipped set (:func:`shipped_problems`, ``data/deepcoder/handwritten.jsonl``) is **small
and hand-written for this package** (sum of a list, reverse words, FizzBuzz variants...), with
reference solutions: a smoke test of the pipeline and the sandbox, not the benchmark.

Example:
    >>> problems = shipped_problems()
    >>> len(problems) >= 20 and all(p.solution and p.hidden_tests for p in problems)
    True
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragen_torchrl.envs.games.records import RecordError, iter_records, parse_json

__all__ = ["CodingProblem", "TestCase", "load_coding_problems", "shipped_problems", "SHIPPED_PATH"]

SHIPPED_PATH = Path(__file__).resolve().parent / "data" / "deepcoder" / "handwritten.jsonl"
_EXPECTED = (
    "a statement ('question', 'question_content', 'problem' or 'prompt') and tests ('input_output', "
    "'public_test_cases'/'private_test_cases', 'tests' or 'public_tests'/'hidden_tests')"
)


@dataclass(frozen=True)
class TestCase:
    """One test: ``input`` is stdin text (stdin tests) or the argument list (function tests);
    ``output`` the expected stdout text or return value.

    Example:
        >>> TestCase([1, 2], 3).input
        [1, 2]
    """

    __test__ = False  # not a pytest class

    input: Any
    output: Any


@dataclass(frozen=True)
class CodingProblem:
    """A coding problem (see the module docstring).

    Example:
        >>> p = CodingProblem("Add.", (), (TestCase([1, 2], 3),), fn_name="add")
        >>> p.key, len(p.digest)
        ('add.|add', 64)
    """

    question: str
    public_tests: tuple[TestCase, ...]
    hidden_tests: tuple[TestCase, ...]
    fn_name: str | None = None
    starter_code: str = ""
    solution: str | None = None
    problem_id: str = ""

    @property
    def key(self) -> str:
        """Content key of the train/validation split."""
        return " ".join(self.question.split()).lower() + "|" + (self.fn_name or "")

    @functools.cached_property
    def digest(self) -> str:
        """A hash of the whole problem, tests included (computed once; the grading cache key)."""
        content = [self.question, self.fn_name, self.starter_code, self.public_tests, self.hidden_tests]
        return hashlib.sha256(repr(content).encode("utf-8", "surrogatepass")).hexdigest()


def _maybe_json(value: Any, where: str, field: str) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            return parse_json(text, f"{where}: field {field!r} is not JSON")
        except RecordError as exc:
            raise RecordError(
                f"{exc}; LiveCodeBench's compressed private tests (base64 zlib pickle) must be "
                f"decompressed to JSON first (pickle is never loaded)"
            ) from None
    return value


def _func_arg_lines(text: Any, where: str) -> list:
    # LiveCodeBench functional input: one JSON value per line (split on "\n" only, as JSON lines are)
    if isinstance(text, list):
        return text
    return [parse_json(line, where) for line in str(text).split("\n") if line.strip()]


def _tests(raw: Any, where: str, field: str, fn_name: str | None) -> list[TestCase]:
    raw = _maybe_json(raw, where, field)
    if isinstance(raw, dict):  # {"inputs": [...], "outputs": [...]}
        ins, outs = raw.get("inputs"), raw.get("outputs")
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise ValueError(f"{where}: field {field!r} needs lists 'inputs' and 'outputs' of equal length")
        raw = [{"input": i, "output": o} for i, o in zip(ins, outs)]
    if not isinstance(raw, list):
        raise ValueError(f"{where}: field {field!r} must be a list of {{input, output}} tests")
    tests = []
    for k, t in enumerate(raw):
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise ValueError(f"{where}: test {k} of {field!r} must be an object with 'input' and 'output'")
        inp, out = t["input"], t["output"]
        try:
            if fn_name is not None:
                if t.get("testtype") == "functional" or isinstance(inp, str):
                    inp = _func_arg_lines(inp, f"{where}, test {k} of {field!r}, input")
                    if isinstance(out, str) and t.get("testtype") == "functional":
                        out = parse_json(out, f"{where}, test {k} of {field!r}, output")
                if not isinstance(inp, list):
                    raise ValueError("function-call input must be a list of arguments")
            else:
                if isinstance(inp, list):  # TACO sometimes stores stdin as a list of lines
                    inp = "\n".join(map(str, inp)) + "\n"
                if isinstance(out, list):
                    out = "\n".join(map(str, out)) + "\n"
                if not isinstance(inp, str) or not isinstance(out, str):
                    raise ValueError("stdin tests need text 'input' and 'output'")
        except RecordError:
            raise  # already names the file, line and field
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{where}: test {k} of {field!r}: {exc}") from None
        tests.append(TestCase(inp, out))
    return tests


def _first(rec: dict, *names: str) -> Any:
    for n in names:
        if rec.get(n) not in (None, ""):
            return rec[n]
    return None


def problem_from_record(rec: dict, where: str, num_public: int = 1) -> CodingProblem:
    """One :class:`CodingProblem` of a TACO / LiveCodeBench / PrimeIntellect / plain record.

    Raises:
        ValueError: a missing statement or tests, or a malformed test (names ``where`` and the field).

    Example:
        >>> rec = {"prompt": "Print the sum.", "tests": [{"input": "1 2\\n", "output": "3\\n"}] * 3}
        >>> p = problem_from_record(rec, "x.jsonl, line 1")
        >>> len(p.public_tests), len(p.hidden_tests), p.fn_name
        (1, 2, None)
    """
    question = _first(rec, "question", "question_content", "problem", "prompt")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: missing statement; expected {_EXPECTED} (keys {sorted(rec)})")
    meta = _maybe_json(rec.get("metadata") or {}, where, "metadata")
    io = _maybe_json(rec["input_output"], where, "input_output") if rec.get("input_output") else None
    fn_name = _first(rec, "fn_name", "func_name") or (meta.get("func_name") if isinstance(meta, dict) else None)
    if fn_name is None and isinstance(io, dict):
        fn_name = io.get("fn_name")
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise ValueError(f"{where}: fn_name must be a Python identifier, got {fn_name!r}")
    public: list[TestCase] | None = None
    if io is not None:
        tests = _tests(io, where, "input_output", fn_name)
    elif rec.get("public_test_cases") is not None or rec.get("private_test_cases") is not None:
        public = _tests(rec.get("public_test_cases") or [], where, "public_test_cases", fn_name)
        tests = _tests(rec.get("private_test_cases") or [], where, "private_test_cases", fn_name)
    elif rec.get("hidden_tests") is not None:
        public = _tests(rec.get("public_tests") or [], where, "public_tests", fn_name)
        tests = _tests(rec["hidden_tests"], where, "hidden_tests", fn_name)
    elif rec.get("tests") is not None or rec.get("ground_truth") is not None:
        field = "tests" if rec.get("tests") is not None else "ground_truth"
        tests = _tests(rec[field], where, field, fn_name)
    else:
        raise ValueError(f"{where}: missing tests; expected {_EXPECTED} (keys {sorted(rec)})")
    if public is None:  # no explicit split: the first num_public tests are shown
        k = num_public if len(tests) > num_public else 0
        public, tests = tests[:k], tests[k:]
    if not tests:
        raise ValueError(f"{where}: no hidden tests (the reward is the fraction of hidden tests passed)")
    solution = _first(rec, "solution", "canonical_solution")
    if solution is None and rec.get("solutions"):
        sols = _maybe_json(rec["solutions"], where, "solutions")
        solution = sols[0] if isinstance(sols, list) and sols else None
    return CodingProblem(
        question=question.strip(),
        public_tests=tuple(public),
        hidden_tests=tuple(tests),
        fn_name=fn_name,
        starter_code=str(rec.get("starter_code") or ""),
        solution=solution if isinstance(solution, str) else None,
        problem_id=str(_first(rec, "id", "problem_id", "question_id", "task_id") or ""),
    )


def load_coding_problems(path: str | os.PathLike, num_public: int = 1, limit: int | None = None) -> list[CodingProblem]:
    """Coding problems of a JSON-lines / JSON / parquet file (see the module docstring).

    Raises:
        ValueError: missing file or malformed record (the message names the file, the
            line and the field).

    Example:
        >>> import json, tempfile
        >>> rec = {"question": "Add.", "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [2, 2]], "outputs": [3, 4]})}
        >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        ...     _ = f.write(json.dumps(rec) + "\\n")
        >>> [(p.fn_name, p.hidden_tests) for p in load_coding_problems(f.name)]
        [('add', (TestCase(input=[2, 2], output=4),))]
    """
    src = os.path.expanduser(os.fspath(path))
    problems = []
    for line, rec in iter_records(src, _EXPECTED, limit):
        problems.append(problem_from_record(rec, f"{src}, line {line}", num_public))
    if not problems:
        raise ValueError(f"{src}: no records; expected {_EXPECTED}")
    return problems


def shipped_problems() -> tuple[CodingProblem, ...]:
    """The hand-written offline set shipped with the package (each with a reference solution).

    Example:
        >>> sorted(p.problem_id for p in shipped_problems())[:3]
        ['add', 'caesar_shift', 'count_even']
    """
    return tuple(load_coding_problems(SHIPPED_PATH))
