"""Grading DeepCoder programs: run the tests in the sandbox, compare in the parent.

The comparison happens here, in the trainer's process, on the captured stdout or on the
JSON-decoded return value, so a program cannot tamper with the verdict (patching ``print``
or ``__eq__``, writing an "expected output" file, exiting 0 early: none of it reaches this
code; the expected value never enters the child).

* stdin tests: both texts with ``\\r\\n`` read as ``\\n``, trailing spaces of each line and
  surrounding blank lines dropped, then equal (the reference compares ``strip()``-ed texts);
  the program must also exit with status 0;
* function tests: the decoded value equals the expected one after a JSON round trip
  (tuples read as lists), or equals the single element of a one-element expected list
  (TACO/APPS store call results wrapped that way).

:class:`Grader` runs a submission's tests one after the other and stops early on a program
that does not compile (every test would fail the same way) and, by default, after its first
timeout (``skip_after_timeout``: one looping submission costs one time limit, not one per
test; its remaining tests count as failed). :meth:`Grader.prefetch` starts a batch of
submissions on ``workers`` background threads (the env's step then parses and renders while
they run), and reports are cached by (code, problem, test set), so the G identical answers
of a collapsed group run once. A program whose outcome depends on
timing is graded once per cache entry. Grading never raises: a run the sandbox could not
start or finish (or any other error while grading) is a failed test with status
``"sandbox_error"``, logged, and such a report is not cached.

Example:
    >>> from ragen_torchrl.envs.games.deepcoder_data import CodingProblem, TestCase
    >>> p = CodingProblem("Echo.", (), (TestCase("hi\\n", "hi\\n"), TestCase("yo\\n", "yo\\n")))
    >>> g = Grader()
    >>> g.grade("print(input())", p).fraction, g.grade("print('hi')", p).fraction
    (1.0, 0.5)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable

from ragen_torchrl.checks import check_bool, check_int

from .deepcoder_data import CodingProblem, TestCase
from .sandbox import RunResult, Sandbox

__all__ = [
    "Grader",
    "GradeReport",
    "TestOutcome",
    "stdout_matches",
    "value_matches",
    "drop_shown_tests",
    "dedupe_hidden_tests",
    "REWARDS",
    "reward_of",
]

log = logging.getLogger(__name__)
#: ``reward`` options: the fraction of hidden tests passed (the reference), or 1.0 only when all pass
REWARDS = ("fraction", "binary")

#: status of a test the sandbox could not run (not cached: the next grading tries again)
SANDBOX_ERROR = "sandbox_error"
#: characters of a got/expected text quoted in feedback
QUOTE_CHARS = 200


def _norm_text(text: str) -> str:
    lines = str(text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def stdout_matches(got: str, expected: str) -> bool:
    """Whether a program's stdout matches the expected text (see the module docstring).

    Example:
        >>> stdout_matches("1 2  \\r\\n3\\n\\n", "1 2\\n3"), stdout_matches("12", "1 2")
        (True, False)
    """
    return _norm_text(got) == _norm_text(expected)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True)


def value_matches(got: Any, expected: Any) -> bool:
    """Whether a returned value matches the expected one (see the module docstring).

    Example:
        >>> value_matches((1, 2), [1, 2]), value_matches(3, [3]), value_matches(True, 1)
        (True, True, False)
    """
    try:
        if _canon(got) == _canon(expected):
            return True
        return isinstance(expected, list) and len(expected) == 1 and _canon(got) == _canon(expected[0])
    except (TypeError, ValueError):
        return False


def _test_key(problem: CodingProblem, test: TestCase) -> str:
    if problem.fn_name is None:
        return "stdin:" + _norm_text(test.input)
    try:
        return "call:" + _canon(test.input)
    except (TypeError, ValueError):
        return "call-repr:" + repr(test.input)


def drop_shown_tests(problem: CodingProblem) -> tuple[CodingProblem | None, int]:
    """``problem`` without the hidden tests whose input is a shown (public) test's input, and
    how many were dropped; ``None`` when no hidden test is left. A hidden test that repeats an
    example pays a program that prints the example's output (common in TACO/APPS records);
    inputs are compared as the grader compares outputs (stdin text line-wise ``rstrip``-ed,
    arguments by canonical JSON).

    Example:
        >>> p = CodingProblem("Echo.", (TestCase("a\\n", "a\\n"),), (TestCase("a \\n", "a\\n"), TestCase("b", "b")))
        >>> q, dropped = drop_shown_tests(p)
        >>> [t.input for t in q.hidden_tests], dropped
        (['b'], 1)
    """
    shown = {_test_key(problem, t) for t in problem.public_tests}
    kept = tuple(t for t in problem.hidden_tests if _test_key(problem, t) not in shown)
    dropped = len(problem.hidden_tests) - len(kept)
    if not dropped:
        return problem, 0
    return (dataclasses.replace(problem, hidden_tests=kept) if kept else None), dropped


def dedupe_hidden_tests(problems: Iterable[CodingProblem], source: str = "") -> list[CodingProblem]:
    """:func:`drop_shown_tests` on every problem; problems left without hidden tests are
    dropped; both counts are logged.

    Example:
        >>> p = CodingProblem("Echo.", (TestCase("a", "a"),), (TestCase("a", "a"),))
        >>> dedupe_hidden_tests([p])
        []
    """
    out, tests, gone = [], 0, 0
    for problem in problems:
        kept, dropped = drop_shown_tests(problem)
        tests += dropped
        if kept is None:
            gone += 1
        else:
            out.append(kept)
    if tests:
        log.warning(
            "DeepCoder data%s: %d hidden tests repeat a shown example and are not counted as hidden; "
            "%d problems had no other hidden test and were dropped",
            f" {source}" if source else "",
            tests,
            gone,
        )
    return out


def reward_of(report: "GradeReport", reward: str = "fraction") -> float:
    """The reward of a graded submission: ``"fraction"`` (the reference's ``passed / total``) or
    ``"binary"`` (1.0 when every test passes, else 0.0).

    Example:
        >>> r = GradeReport((TestOutcome(True, "ok"), TestOutcome(True, "ok"), TestOutcome(False, "error")))
        >>> reward_of(r), reward_of(r, "binary")
        (0.6666666666666666, 0.0)
    """
    if reward == "binary":
        return 1.0 if report.all_passed else 0.0
    if reward == "fraction":
        return report.fraction
    raise ValueError(f"reward must be one of {list(REWARDS)}, got {reward!r}")


@dataclass(frozen=True)
class TestOutcome:
    """One test's result: ``status`` is the run's (``"ok"``, ``"error"``, ``"timeout"``, ...,
    or ``"skipped"``), ``got`` what the program printed or returned (shortened)."""

    __test__ = False

    passed: bool
    status: str
    got: str = ""


@dataclass(frozen=True)
class GradeReport:
    """The outcomes of one submission on one test set.

    Example:
        >>> r = GradeReport((TestOutcome(True, "ok"), TestOutcome(False, "timeout")))
        >>> r.passed, r.total, r.fraction, r.all_passed
        (1, 2, 0.5, False)
    """

    outcomes: tuple[TestOutcome, ...]

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


def _short(text: str) -> str:
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "..."


class Grader:
    """Runs submissions against tests in a :class:`Sandbox` (see the module docstring).

    Args:
        sandbox: the sandbox (default: ``Sandbox()``).
        workers: threads running submissions in parallel in :meth:`prefetch`.
        cache_size: graded (code, problem, test set) entries kept (0: no cache).
        skip_after_timeout: stop a submission's tests after its first timeout.

    Example:
        >>> from ragen_torchrl.envs.games.deepcoder_data import CodingProblem, TestCase
        >>> p = CodingProblem("Double.", (), (TestCase([2], 4), TestCase([3], 6)), fn_name="double")
        >>> Grader().grade("def double(x):\\n    return x + 2", p).passed
        1
    """

    def __init__(
        self,
        sandbox: Sandbox | None = None,
        *,
        workers: int = 2,
        cache_size: int = 4096,
        skip_after_timeout: bool = True,
    ) -> None:
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self.workers = check_int("workers", workers, minimum=1)
        self.cache_size = check_int("cache_size", cache_size, minimum=0)
        self.skip_after_timeout = check_bool("skip_after_timeout", skip_after_timeout)
        self._cache: OrderedDict[str, GradeReport] = OrderedDict()
        self._inflight: dict[str, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        #: sandboxed runs started (a metric for benchmarks and tests)
        self.runs = 0

    @staticmethod
    def _key(code: str, problem: CodingProblem, tests: tuple[TestCase, ...]) -> str:
        if tests is problem.hidden_tests or tests is problem.public_tests:
            which = "hidden" if tests is problem.hidden_tests else "public"  # no repr of big test sets
        else:
            which = repr(tests)
        h = hashlib.sha256()
        for part in (code, problem.digest, which):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()

    def _run_one(self, code: str, problem: CodingProblem, test: TestCase) -> tuple[TestOutcome, RunResult]:
        try:
            return self._run_test(code, problem, test)
        except Exception as exc:  # whatever a program did to the grading: a failed test
            log.warning("DeepCoder grading: a test could not be run: %s: %s", type(exc).__name__, exc)
            run = RunResult(SANDBOX_ERROR, None, "", f"{type(exc).__name__}: {exc}", 0.0)
            return TestOutcome(False, SANDBOX_ERROR), run

    def _run_test(self, code: str, problem: CodingProblem, test: TestCase) -> tuple[TestOutcome, RunResult]:
        if problem.fn_name is None:
            run = self.sandbox.run_script(code, test.input)
            passed = run.status == "ok" and stdout_matches(run.stdout, test.output)
            return TestOutcome(passed, run.status, _short(run.stdout)), run
        run = self.sandbox.call_function(code, problem.fn_name, test.input)
        passed = run.has_value and value_matches(run.value, test.output)
        got = _short(json.dumps(run.value)) if run.has_value else ""
        return TestOutcome(passed, run.status, got), run

    def _grade_uncached(self, code: str, problem: CodingProblem, tests: tuple[TestCase, ...]) -> GradeReport:
        outcomes: list[TestOutcome] = []
        stop = None
        for test in tests:
            if stop is not None:
                outcomes.append(TestOutcome(False, "skipped"))
                continue
            with self._lock:
                self.runs += 1
            outcome, run = self._run_one(code, problem, test)
            outcomes.append(outcome)
            if run.status == "compile_error" or (self.skip_after_timeout and run.status == "timeout"):
                stop = run.status
        return GradeReport(tuple(outcomes))

    def grade(self, code: str, problem: CodingProblem, tests: Iterable[TestCase] | None = None) -> GradeReport:
        """The report of ``code`` on ``tests`` (default: the hidden tests); an empty or
        non-string program fails every test without running. A job already running from
        :meth:`prefetch` is waited for, not run twice."""
        tests = tuple(problem.hidden_tests if tests is None else tests)
        if not isinstance(code, str) or not code.strip():
            return GradeReport(tuple(TestOutcome(False, "empty") for _ in tests))
        key = self._key(code, problem, tests)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            running = self._inflight.get(key)
        if running is not None:
            try:
                return running.result()
            except Exception:  # the background job failed as a whole: grade here instead
                pass
        report = self._grade_safely(code, problem, tests)
        self._store(key, report)
        return report

    def _grade_safely(self, code: str, problem: CodingProblem, tests: tuple[TestCase, ...]) -> GradeReport:
        try:
            return self._grade_uncached(code, problem, tests)
        except Exception as exc:
            log.warning("DeepCoder grading: a submission could not be graded: %s: %s", type(exc).__name__, exc)
            return GradeReport(tuple(TestOutcome(False, SANDBOX_ERROR) for _ in tests))

    def _store(self, key: str, report: GradeReport) -> None:
        with self._lock:
            if self.cache_size and not any(o.status == SANDBOX_ERROR for o in report.outcomes):
                self._cache[key] = report
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
            self._inflight.pop(key, None)  # with the store, under one lock: grade() sees one of them

    def _background(self, key: str, code: str, problem: CodingProblem, tests: tuple[TestCase, ...]) -> GradeReport:
        try:
            report = self._grade_safely(code, problem, tests)
        except BaseException:
            with self._lock:
                self._inflight.pop(key, None)
            raise
        self._store(key, report)
        return report

    def prefetch(self, jobs: Iterable[tuple[str, CodingProblem, tuple[TestCase, ...]]]) -> list[Future]:
        """Start grading many ``(code, problem, tests)`` jobs on ``workers`` background threads
        (distinct jobs once each) and return their futures: the following :meth:`grade` calls
        are cache hits or wait for their job. First one sandboxed process compiles every
        program, so a broken one is graded without a run of its own. Wait for the futures
        (``concurrent.futures.wait``) before relying on no program running."""
        if not self.cache_size:
            return []
        unique: dict[str, tuple] = {}
        for code, problem, tests in jobs:
            if isinstance(code, str) and code.strip():
                unique.setdefault(self._key(code, problem, tuple(tests)), (code, problem, tuple(tests)))
        with self._lock:
            todo = [(key, job) for key, job in unique.items() if key not in self._cache and key not in self._inflight]
        if not todo:
            return []
        with self._lock:
            self.runs += 1
        flags = self.sandbox.compiles([code for _, (code, _, _) in todo])
        futures = []
        for (key, (code, problem, tests)), ok in zip(todo, flags):
            if ok is False:
                outcomes = [TestOutcome(False, "compile_error")] + [TestOutcome(False, "skipped")] * (len(tests) - 1)
                self._store(key, GradeReport(tuple(outcomes[: len(tests)])))
                continue
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="deepcoder-grader")
                future = self._pool.submit(self._background, key, code, problem, tests)
                self._inflight.setdefault(key, future)
            futures.append(future)
        return futures
