"""MetaMathQA: answer a math question, with retries (pure Python, no torch).

The answer is compared with the reference by normalised exact match (see
:func:`normalize_answer`). A correct answer at attempt ``k`` (0-based) earns ``1 / 2**k``
and ends the episode; a wrong one earns 0 and the next observation is
"Incorrect. Please think again."; after ``max_attempts`` (5) wrong answers the episode
ends without success.

Data comes from the user: :func:`load_metamathqa` reads a local JSON-lines / JSON /
parquet file or a hub dataset (optional ``datasets`` package). Without data,
:meth:`MetaMathQAGame.generate` makes a small synthetic arithmetic question (for smoke
tests and demos).

Example:
    >>> game = MetaMathQAGame("What is 2 + 3?", "5")
    >>> game.step("6")[:2]
    (0.0, False)
    >>> game.render_text()
    'Incorrect. Please think again.'
    >>> game.step("The answer is: $5$.")[:2]
    (0.5, True)
"""

from __future__ import annotations

import os
import random
import re
from fractions import Fraction
from typing import Any, NamedTuple, Sequence

from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.records import iter_records

__all__ = [
    "MetaMathQAGame",
    "MathProblem",
    "normalize_answer",
    "answers_match",
    "extract_answer",
    "load_metamathqa",
    "INCORRECT_FEEDBACK",
]

INCORRECT_FEEDBACK = "Incorrect. Please think again."
ANSWER_MARKER = "The answer is:"
MAX_ATTEMPTS = 5


class MathProblem(NamedTuple):
    """A question and its final answer."""

    question: str
    answer: str


# --------------------------------------------------------------------------- normalisation
_PREFIX_RE = re.compile(r"^\s*(?:so,?\s*)?(?:the\s+)?(?:final\s+)?answer\s+is\s*:?\s*", re.IGNORECASE)
_NUM_COMMA_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# (?:\.\d*)? rather than \.?\d*: the latter re-splits a run of digits (quadratic, 0.3 s for 8 kB)
_NUMBER_RE = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$")
_FRAC_RE = re.compile(r"^([+-]?)\\d?frac\{([+-]?\d+)\}\{([+-]?\d+)\}$")
_SLASH_RE = re.compile(r"^([+-]?\d+)/([+-]?\d+)$")


def _unwrap_boxed(s: str) -> str:
    """Replace ``\\boxed{...}`` (balanced braces; the last one) by its content."""
    for tag in ("\\boxed{", "\\fbox{"):
        start = s.rfind(tag)
        if start < 0:
            continue
        i = start + len(tag)
        depth = 1
        j = i
        while j < len(s) and depth:
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
            j += 1
        if depth == 0:
            return s[i : j - 1]
    return s


def normalize_answer(text: Any) -> str:
    """Normalise an answer for exact match.

    Steps: take the content of a ``\\boxed{}`` wrapper; drop a leading "The answer is"
    (also "The answer is:" / "The final answer is"); remove ``$``; lowercase; remove
    thousands commas between digits (``1,000`` -> ``1000``); remove all whitespace; drop
    trailing periods. Numbers are not rewritten here (``2.50`` stays); :func:`answers_match`
    compares numeric values.
    """
    s = "" if text is None else str(text)
    s = s.strip()
    s = _PREFIX_RE.sub("", s, count=1)
    s = _unwrap_boxed(s)
    s = _PREFIX_RE.sub("", s, count=1)
    s = s.replace("$", "")
    s = s.replace("\\!", "").replace("\\,", "").replace("\\left", "").replace("\\right", "")
    s = s.strip().lower()
    s = _NUM_COMMA_RE.sub("", s)
    s = re.sub(r"\s+", "", s)
    s = s.rstrip(".")
    if s.startswith("{") and s.endswith("}") and s.count("{") == 1:
        s = s[1:-1]
    return s


def _as_number(s: str) -> Fraction | None:
    """The exact value of a normalised numeric answer (``2.5``, ``-3``, ``1/2``,
    ``\\frac{1}{2}``), or None."""
    if _NUMBER_RE.match(s):
        try:
            return Fraction(s)
        except (ValueError, ZeroDivisionError):
            return None
    m = _FRAC_RE.match(s) or None
    if m:
        sign, a, b = m.groups()
        a, b = _exact_int(a), _exact_int(b)
        if a is None or not b:
            return None
        v = Fraction(a, b)
        return -v if sign == "-" else v
    m = _SLASH_RE.match(s)
    if m:
        a, b = _exact_int(m.group(1)), _exact_int(m.group(2))
        if a is not None and b:
            return Fraction(a, b)
    return None


def _exact_int(text: str) -> int | None:
    """``int(text)``, or None past Python's 4300-digit conversion limit (a model can write
    any number of digits; the answer is then compared as text, never clamped)."""
    try:
        return int(text)
    except ValueError:
        return None


def answers_match(prediction: Any, reference: Any) -> bool:
    """Normalised exact match, with numeric comparison when both sides are numbers
    (``2.50`` == ``2.5``, ``1/2`` == ``0.5``, ``1,000`` == ``1000``)."""
    p, r = normalize_answer(prediction), normalize_answer(reference)
    if not p:
        return False
    if p == r:
        return True
    pv, rv = _as_number(p), _as_number(r)
    return pv is not None and rv is not None and pv == rv


def extract_answer(response: str) -> str | None:
    """The final answer of a MetaMathQA ``response`` (the text after the last
    "The answer is:"), or None when the marker is missing."""
    idx = response.rfind(ANSWER_MARKER)
    if idx < 0:
        m = list(re.finditer(r"the answer is:?", response, re.IGNORECASE))
        if not m:
            return None
        ans = response[m[-1].end() :]
    else:
        ans = response[idx + len(ANSWER_MARKER) :]
    ans = ans.strip()
    return ans or None


# --------------------------------------------------------------------------- game
#: what every MetaMathQA prompt asks, before it says how many tries there are
_TASK = (
    "You are solving a math problem. Think step by step, then give only the final answer, as a number or a "
    "short expression."
)


class MetaMathQAGame(TextGame):
    """One question, up to ``max_attempts`` answer turns.

    ``info['success']`` is True on a correct answer; ``info['action_is_effective']`` is True
    when the answer is non-empty after normalisation. ``progress()`` is the number of wrong
    attempts so far (lower is closer).
    """

    action_names = None
    instructions: str = (
        f"{_TASK} If your answer is wrong you will be told so and you can try again; a right answer "
        "on the first try gives 1, and each new try gives half as much."
    )
    #: the instructions when ``max_attempts == 1``: no feedback and no second try to promise
    single_attempt_instructions: str = f"{_TASK} You have one try: a right answer gives 1, a wrong one 0."

    def __init__(self, question: str, answer: str, max_attempts: int = MAX_ATTEMPTS, solution: str | None = None):
        if not isinstance(question, str) or not question.strip():
            raise ValueError("MetaMathQA question must be a non-empty string")
        if answer is None or not normalize_answer(answer):
            raise ValueError(f"MetaMathQA answer must be a non-empty string, got {answer!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.question = question
        self.answer = str(answer).strip()
        self.solution = solution
        self.max_attempts = int(max_attempts)
        self.attempt = 0
        self._done = False
        self._success = False
        self._last_wrong = False

    @classmethod
    def from_problems(cls, problems: Sequence[MathProblem | tuple], seed: int, **kwargs: Any) -> "MetaMathQAGame":
        """The problem ``problems[seed % len(problems)]`` (e.g. from :func:`load_metamathqa`)."""
        if not problems:
            raise ValueError("MetaMathQA problem list is empty")
        question, answer = problems[int(seed) % len(problems)][:2]
        return cls(question, answer, **kwargs)

    @classmethod
    def generate(
        cls, seed: int, problems: Sequence[MathProblem | tuple] | None = None, **kwargs: Any
    ) -> "MetaMathQAGame":
        """``problems[seed % len(problems)]``, or, when ``problems`` is None, a synthetic
        arithmetic question (two or three numbers with + - *) deterministic in ``seed``."""
        if problems is not None:
            return cls.from_problems(problems, seed, **kwargs)
        rng = random.Random(f"metamathqa-synthetic:{int(seed)}")
        a, b, c = rng.randint(2, 50), rng.randint(2, 50), rng.randint(2, 9)
        kind = rng.randrange(4)
        if kind == 0:
            q, v = f"What is {a} + {b}?", a + b
            sol = f"{a} + {b} = {v}."
        elif kind == 1:
            q, v = f"What is {a} times {c}?", a * c
            sol = f"{a} * {c} = {v}."
        elif kind == 2:
            hi, lo = max(a, b), min(a, b)
            q, v = f"Tom has {hi} apples and gives away {lo}. How many apples does he have left?", hi - lo
            sol = f"{hi} - {lo} = {v}."
        else:
            q, v = f"A box holds {c} pens. How many pens are in {a} boxes plus {b} more pens?", a * c + b
            sol = f"{a} * {c} = {a * c}, and {a * c} + {b} = {v}."
        return cls(q, str(v), solution=sol, **kwargs)

    # ---------------------------------------------------------------- dynamics
    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        if self._done:
            return 0.0, True, {"success": self._success, "action_is_effective": False}
        effective = bool(normalize_answer(action))
        correct = answers_match(action, self.answer)
        attempt = self.attempt
        self.attempt += 1
        if correct:
            self._done = True
            self._success = True
            self._last_wrong = False
            return 1.0 / (2**attempt), True, {"success": True, "action_is_effective": effective}
        self._last_wrong = True
        if self.attempt >= self.max_attempts:
            self._done = True
        return 0.0, self._done, {"success": False, "action_is_effective": effective}

    @property
    def done(self) -> bool:
        return self._done

    def oracle_action(self) -> str:
        return self.answer

    def progress(self) -> float:
        return float(self.attempt - (1 if self._success else 0))

    # ---------------------------------------------------------------- text
    def render_text(self) -> str:
        if self._last_wrong:
            return INCORRECT_FEEDBACK
        if self._success:
            return "Correct."
        return self.question

    def explain(self, action: str) -> str:
        if answers_match(action, self.answer):
            if self.solution and len(self.solution) <= 200:
                return f"{self.solution} So the answer is {self.answer}."
            return f"I work it out step by step, and the answer is {self.answer}."
        return f"I work it out step by step, and I think the answer is {str(action).strip()}."

    def __repr__(self) -> str:
        q = self.question if len(self.question) <= 40 else self.question[:37] + "..."
        return f"MetaMathQAGame({q!r}, answer={self.answer!r}, attempt={self.attempt})"


# --------------------------------------------------------------------------- data
_EXPECTED = "fields 'query' and 'response' (the final answer after 'The answer is: '), or 'question' and 'answer'"
_LOCAL_SUFFIXES = (".json", ".jsonl", ".parquet")


def _record_to_problem(rec: dict, where: str) -> MathProblem:
    question = rec.get("query", rec.get("question"))
    if "answer" in rec and rec["answer"] is not None and not isinstance(rec["answer"], (dict, list)):
        answer = str(rec["answer"]).strip()
        # GSM8K-style answers carry reasoning then '#### 42'
        if "####" in answer:
            answer = answer.rsplit("####", 1)[1].strip()
    elif isinstance(rec.get("response"), str):
        answer = extract_answer(rec["response"])
    else:
        answer = None
    if not isinstance(question, str) or not question.strip() or not answer or not normalize_answer(answer):
        keys = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
        raise ValueError(f"{where}: malformed record (keys {keys}); expected {_EXPECTED}")
    return MathProblem(question.strip(), answer)


def load_metamathqa(
    path_or_name: str | os.PathLike, split: str = "train", limit: int | None = None
) -> list[MathProblem]:
    """Load MetaMathQA-style problems.

    Args:
        path_or_name: a local ``.jsonl`` / ``.json`` (JSON lines or one JSON array) /
            ``.parquet`` file, or a hub dataset name (e.g. ``"meta-math/MetaMathQA"``) loaded
            with the optional ``datasets`` package.
        split: the hub split (ignored for local files).
        limit: keep at most this many problems.

    Records need ``query`` and ``response`` (the answer is the text after the last
    "The answer is: ") or ``question`` and ``answer``.

    Raises:
        ValueError: a missing local file or a malformed record (names the file and the
            expected fields).
        ImportError: a hub name without ``datasets`` installed.
    """
    src = os.fspath(path_or_name)
    problems: list[MathProblem] = []
    looks_local = os.path.exists(src) or src.lower().endswith(_LOCAL_SUFFIXES) or src.startswith((".", "~", os.sep))
    if looks_local:
        src = os.path.expanduser(src)
        for line, rec in iter_records(src, _EXPECTED, limit):
            problems.append(_record_to_problem(rec, f"{src}, line {line}"))
    else:
        try:
            import datasets  # type: ignore[import-not-found]
        except ImportError:
            raise ImportError(
                f"loading the hub dataset {src!r} needs the 'datasets' package: "
                f"pip install datasets, or pass a local .jsonl/.json/.parquet file"
            ) from None
        ds = datasets.load_dataset(src, split=split)
        for i, rec in enumerate(ds):
            problems.append(_record_to_problem(dict(rec), f"{src} [{split}], row {i}"))
            if limit is not None and len(problems) >= limit:
                break
    if not problems:
        raise ValueError(f"{src}: no records; expected {_EXPECTED}")
    return problems
