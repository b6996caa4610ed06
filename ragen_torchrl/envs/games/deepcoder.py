"""DeepCoder: write a Python program that passes hidden tests (pure Python, no torch).

The observation is the problem statement, its public tests (examples) and, for function
problems, the function to write (and the starter code). The answer (the text inside
``<answer>``; a fenced ```` ```python ```` block inside it is taken when present) is the
program; :func:`extract_code` never raises.

Rules (RAGEN-2, arXiv 2604.06268; the RAGEN reference's DeepCoder env, itself after rllm):

* **reward** of the final submission: ``reward="fraction"`` (default, the reference's
  ``passed / total``): the fraction of hidden tests passed; ``reward="binary"``: 1.0 when every
  hidden test passes, else 0.0. Public tests never count (they are shown, so counting them would pay for
  hard-coding the examples), nor do hidden tests that repeat them
  (:func:`~ragen_torchrl.envs.games.deepcoder_grading.dedupe_hidden_tests`, applied where
  the env loads problems). The reference has no public/hidden split and scores all tests of
  a record; with this package's loaders the record's tests are split (see
  :mod:`~ragen_torchrl.envs.games.deepcoder_data`), and ``success`` means every hidden test
  passed;
* **turns**: the reference is single-turn (``max_turn: 1``): the answer is graded at once.
  With ``max_attempts > 1`` an answer is first run on the public tests: when it passes them
  all (or the problem has none, or it is the last attempt) it is submitted and graded on the
  hidden tests; otherwise the episode goes on with feedback from the public tests (reward 0
  for that turn), as the reference's multi-step mode shows feedback between attempts;
* an empty program scores 0 (the reference's invalid action scores 0; a reply without an
  ``<answer>`` block gets the env's format penalty).

Programs run in :class:`~ragen_torchrl.envs.games.sandbox.Sandbox` processes through a
:class:`~ragen_torchrl.envs.games.deepcoder_grading.Grader`.

Example:
    >>> from ragen_torchrl.envs.games.deepcoder_data import shipped_problems
    >>> problem = next(p for p in shipped_problems() if p.problem_id == "sum_of_list")
    >>> game = DeepCoderGame(problem)
    >>> reward, done, info = game.step(game.oracle_action())
    >>> reward, done, info["success"], info["passed"], info["total"]
    (1.0, True, True, 4, 4)
"""

from __future__ import annotations

import json
import re
from typing import Any

from ragen_torchrl.checks import check_choice
from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.deepcoder_data import CodingProblem, TestCase
from ragen_torchrl.envs.games.deepcoder_grading import REWARDS, Grader, GradeReport, reward_of

__all__ = ["DeepCoderGame", "extract_code", "render_problem"]

#: test inputs/outputs longer than this are shortened in the prompt
SHOW_CHARS = 300
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)

_DEFAULT_GRADER: Grader | None = None


def default_grader() -> Grader:
    """A process-wide :class:`Grader` with default limits (built on first use).

    Example:
        >>> default_grader() is default_grader()
        True
    """
    global _DEFAULT_GRADER
    if _DEFAULT_GRADER is None:
        _DEFAULT_GRADER = Grader()
    return _DEFAULT_GRADER


def extract_code(answer: Any) -> str:
    """The program of an answer: the first fenced block tagged ``python``/``py`` (or the first
    untagged one), else the whole text; never raises.

    Example:
        >>> extract_code("Here:\\n```python\\nprint(1)\\n```\\nDone.")
        'print(1)\\n'
        >>> extract_code("print(2)")
        'print(2)'
    """
    if not isinstance(answer, str):
        return ""
    blocks = _FENCE_RE.findall(answer)
    for lang, body in blocks:
        if lang.lower() in ("python", "py", "python3"):
            return body
    for lang, body in blocks:
        if not lang:
            return body
    return answer.strip()


def _show(value: Any, is_text: bool) -> str:
    text = value if is_text else json.dumps(value)
    return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + "..."


def _show_test(problem: CodingProblem, test: TestCase) -> str:
    if problem.fn_name is None:
        return f"Input:\n{_show(test.input, True)}\nOutput:\n{_show(test.output, True)}"
    args = ", ".join(_show(a, False) for a in test.input)
    return f"{problem.fn_name}({args}) returns {_show(test.output, False)}"


def render_problem(problem: CodingProblem) -> str:
    """The first observation: statement, I/O convention, examples, starter code.

    Example:
        >>> p = CodingProblem("Add two numbers.", (TestCase([1, 2], 3),), (TestCase([2, 2], 4),), fn_name="add")
        >>> print(render_problem(p))
        Add two numbers.
        Write a Python function add; it is called with the test's arguments and its return value is checked.
        Example:
        add(1, 2) returns 3
    """
    parts = [problem.question]
    if problem.fn_name is None:
        parts.append("Write a Python program that reads standard input and writes the answer to standard output.")
    else:
        parts.append(
            f"Write a Python function {problem.fn_name}; it is called with the test's arguments and its "
            "return value is checked."
        )
    if problem.public_tests:
        parts.append("Example:" if len(problem.public_tests) == 1 else "Examples:")
        parts.extend(_show_test(problem, t) for t in problem.public_tests)
    if problem.starter_code.strip():
        parts.append(f"Starter code:\n```python\n{problem.starter_code.rstrip()}\n```")
    return "\n".join(parts)


class DeepCoderGame(TextGame):
    """One coding problem, up to ``max_attempts`` answers (see the module docstring).

    ``reward``: ``"fraction"`` (of hidden tests passed, the reference) or ``"binary"`` (1.0 when
    every hidden test passes). ``info`` of a step adds ``passed`` and
    ``total`` (hidden tests, on a graded submission; public tests on a feedback turn) and
    ``submitted``. ``progress()`` is 1 minus the best hidden fraction so far (lower is closer).

    Example:
        >>> p = CodingProblem("Echo.", (TestCase("a\\n", "a\\n"),), (TestCase("b\\n", "b\\n"),))
        >>> game = DeepCoderGame(p, max_attempts=2)
        >>> game.step("print('a')")[:2], game.step("print(input())")[:2], game.progress()
        ((0.0, True), (0.0, True), 1.0)
    """

    action_names = None
    instructions = (
        "You are solving a coding task. Write a complete Python program (or the requested function) "
        "inside the answer, in a ```python code block. It is run on hidden tests and rewarded when it "
        "passes them."
    )

    def __init__(
        self, problem: CodingProblem, grader: Grader | None = None, max_attempts: int = 1, reward: str = "fraction"
    ) -> None:
        if not isinstance(problem, CodingProblem) or not problem.hidden_tests:
            raise ValueError("DeepCoderGame needs a CodingProblem with hidden tests")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}")
        self.problem = problem
        self.reward = check_choice("reward", reward, REWARDS)
        self.grader = grader
        self.max_attempts = max_attempts
        self.attempt = 0
        self._done = False
        self._success = False
        self._best = 0.0
        self._message: str | None = None

    @property
    def done(self) -> bool:
        return self._done

    def _grader(self) -> Grader:
        return self.grader if self.grader is not None else default_grader()

    def pending_job(self, answer: Any) -> tuple[str, CodingProblem, tuple[TestCase, ...]] | None:
        """The ``(code, problem, tests)`` the next ``step(answer)`` runs first, for a batched
        :meth:`Grader.prefetch`; ``None`` when nothing would run."""
        code = extract_code(answer)
        if self._done or not code.strip():
            return None
        return code, self.problem, self._first_tests()

    def _first_tests(self) -> tuple[TestCase, ...]:
        if self.attempt < self.max_attempts - 1 and self.problem.public_tests:
            return self.problem.public_tests
        return self.problem.hidden_tests

    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        if self._done:
            return 0.0, True, {"success": self._success, "action_is_effective": False}
        code = extract_code(action)
        effective = bool(code.strip())
        grader = self._grader()
        feedback_turn = self._first_tests() is self.problem.public_tests and bool(self.problem.public_tests)
        self.attempt += 1
        if feedback_turn:  # run the examples first; submit only when they all pass
            public = grader.grade(code, self.problem, self.problem.public_tests)
            if not public.all_passed:
                self._message = self._feedback(public)
                info = {"success": False, "action_is_effective": effective, "submitted": False}
                return 0.0, False, {**info, "passed": public.passed, "total": public.total}
        report = grader.grade(code, self.problem, self.problem.hidden_tests)
        self._done = True
        self._success = report.all_passed
        self._best = max(self._best, report.fraction)
        self._message = self._verdict(report)
        info = {"success": self._success, "action_is_effective": effective, "submitted": True}
        return reward_of(report, self.reward), True, {**info, "passed": report.passed, "total": report.total}

    def _feedback(self, report: GradeReport) -> str:
        lines = [f"Your program passed {report.passed} of {report.total} example tests. Fix it and answer again."]
        for test, outcome in zip(self.problem.public_tests, report.outcomes):
            if not outcome.passed:
                lines.append(_show_test(self.problem, test))
                lines.append(f"Your program: {outcome.status}" + (f", output {outcome.got!r}" if outcome.got else ""))
                break
        return "\n".join(lines)

    @staticmethod
    def _verdict(report: GradeReport) -> str:
        if report.all_passed:
            return f"All {report.total} hidden tests passed."
        return f"Passed {report.passed} of {report.total} hidden tests."

    def render_text(self) -> str:
        return self._message if self._message is not None else render_problem(self.problem)

    def oracle_action(self) -> str:
        """The reference solution in a fenced block (``""`` for a problem without one)."""
        return f"```python\n{self.problem.solution.rstrip()}\n```" if self.problem.solution else ""

    def progress(self) -> float:
        return 1.0 - self._best

    def explain(self, action: str) -> str:
        first = self.problem.question.split(". ")[0].strip().rstrip(".")
        if len(first) > 120:
            first = first[:117] + "..."
        io = "read stdin and print" if self.problem.fn_name is None else f"define {self.problem.fn_name} that returns"
        return f"The task: {first}. I {io} the result."

    def __repr__(self) -> str:
        return f"DeepCoderGame({self.problem.problem_id or self.problem.question[:30]!r}, attempt={self.attempt})"
