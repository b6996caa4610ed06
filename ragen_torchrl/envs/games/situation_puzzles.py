"""SituationPuzzles (T3 active reasoning): lateral-thinking puzzles solved by yes/no questions.

**Task.** A puzzle tells a strange story; the hidden explanation makes sense of it. The agent asks
yes/no questions (``<interact>Was the man thirsty?</interact>``) and a *judge* who knows the
explanation answers only ``"Yes"``, ``"No"`` or ``"Unknown"``. The final answer is the agent's
explanation; reward = word-level F1 against the hidden explanation (:func:`word_f1`: lower-case,
punctuation stripped, bag of words). ``success`` = F1 ≥ ``success_threshold`` (0.5).
``max_turns`` = 15.

**Judges** (pluggable, :class:`Judge` protocol: ``judge(puzzle, question) -> "Yes"|"No"|"Unknown"``;
a plain callable with that signature works too):

* :class:`RuleBasedJudge` — for puzzles that carry their own fact list (all the shipped ones). A
  fact has keyword *groups* and a truth value; a group is one or more alternatives separated by
  ``|``. A question matches a fact when every group has an alternative that matches a word of the
  question (lower-cased, split on non-alphanumerics); a keyword ``k`` matches a word ``w`` when
  ``w == k``, ``w`` is ``k + "s"`` or ``k + "es"``, or ``k`` has at least 4 letters and ``w`` starts
  with ``k`` (``poison`` matches ``poisoned``). The matching fact with the most groups wins (ties:
  the first in the list) and its truth gives Yes/No; no match gives Unknown.
* :class:`HFJudge` — any Hugging Face causal LM (greedy decoding of ``max_new_tokens`` tokens after a
  prompt with the story, the explanation and the question); :func:`map_judge_output` maps the text
  to Yes/No/Unknown (first word ``yes`` / ``no`` / anything else -> Unknown).

**Progress.** ``progress()`` = the number of consecutive ``"Unknown"`` judge answers ending at the
latest turn (an invalid, empty question counts as Unknown; a Yes/No resets it to 0). T3 truncates
when it reaches k = 5. *Higher is worse.*

The shipped set :data:`PUZZLES` (25 puzzles, written here as Python data) runs offline; puzzles with
index % 5 == 4 form the ``"val"`` split (5), the others ``"train"`` (20).

Example:
    >>> game = SituationPuzzlesGame(PUZZLES[0])
    >>> game.interact("Did the man have hiccups?")[0]
    'Yes'
    >>> game.interact("Is the moon made of cheese?")[1]["consecutive_unknown"]
    1
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from ragen_torchrl.checks import check_int
from ragen_torchrl.envs.games.interactive import InteractiveGame

__all__ = [
    "Fact",
    "HFJudge",
    "Judge",
    "PUZZLES",
    "Puzzle",
    "RuleBasedJudge",
    "SituationPuzzlesGame",
    "load_puzzles",
    "map_judge_output",
    "match_fact",
    "word_f1",
]

JUDGE_ANSWERS = ("Yes", "No", "Unknown")


@dataclass(frozen=True)
class Fact:
    """A checkable fact: keyword groups (``"a|b"`` = alternatives), truth value, and the
    demonstrator's question about it."""

    keywords: tuple[str, ...]
    truth: bool
    question: str


@dataclass(frozen=True)
class Puzzle:
    id: str
    story: str
    explanation: str
    facts: tuple[Fact, ...] = ()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", (text or "").lower())


def word_f1(prediction: str, reference: str) -> float:
    """Bag-of-words F1 after lower-casing and stripping punctuation (1.0 if both are empty)."""
    p, r = Counter(_words(prediction)), Counter(_words(reference))
    if not p and not r:
        return 1.0
    if not p or not r:
        return 0.0
    overlap = sum((p & r).values())
    if overlap == 0:
        return 0.0
    precision = overlap / sum(p.values())
    recall = overlap / sum(r.values())
    return 2 * precision * recall / (precision + recall)


def _keyword_matches(keyword: str, word: str) -> bool:
    return (
        word == keyword
        or word == keyword + "s"
        or word == keyword + "es"
        or (len(keyword) >= 4 and word.startswith(keyword))
    )


def _fact_matches(fact: Fact, words: Sequence[str]) -> bool:
    for group in fact.keywords:
        alts = [a.strip().lower() for a in group.split("|") if a.strip()]
        if not any(_keyword_matches(a, w) for a in alts for w in words):
            return False
    return bool(fact.keywords)


def match_fact(puzzle: Puzzle, question: str) -> Fact | None:
    """The fact a question is about (most keyword groups wins, ties: first), or ``None``."""
    words = _words(question)
    best, best_n = None, 0
    for fact in puzzle.facts:
        if len(fact.keywords) > best_n and _fact_matches(fact, words):
            best, best_n = fact, len(fact.keywords)
    return best


@runtime_checkable
class Judge(Protocol):
    """Answers a yes/no question about a puzzle with ``"Yes"``, ``"No"`` or ``"Unknown"``."""

    def judge(self, puzzle: Puzzle, question: str) -> str: ...


class RuleBasedJudge:
    """Keyword matching over the puzzle's own fact list (see the module docstring)."""

    def judge(self, puzzle: Puzzle, question: str) -> str:
        fact = match_fact(puzzle, question)
        if fact is None:
            return "Unknown"
        return "Yes" if fact.truth else "No"

    __call__ = judge


def map_judge_output(text: str) -> str:
    """Map generated text to ``"Yes"``/``"No"``/``"Unknown"``: the first word decides
    (``yes`` -> Yes, ``no`` -> No); anything else (including empty text) -> Unknown."""
    words = _words(text if isinstance(text, str) else "")
    if not words:
        return "Unknown"
    if words[0] == "yes":
        return "Yes"
    if words[0] == "no":
        return "No"
    return "Unknown"


JUDGE_PROMPT = (
    "You are the judge of a situation puzzle (a lateral-thinking puzzle).\n"
    "Puzzle: {story}\n"
    "Hidden explanation: {explanation}\n"
    "The player asks: {question}\n"
    "Reply with exactly one word: Yes, No, or Unknown (Unknown when the explanation does not "
    "decide the question).\n"
    "Answer:"
)


class HFJudge:
    """A judge backed by any Hugging Face causal LM and its tokenizer (greedy decoding).

    The prompt (:data:`JUDGE_PROMPT`) goes through the tokenizer's chat template when it has one.
    The generated text is mapped by :func:`map_judge_output`. The player's question is cut to
    ``max_question_chars`` characters (default 500): a model can write thousands of tokens, which
    would overflow the judge's context (an index error, or a device-side assert on a GPU, which
    no ``except`` survives); a yes/no question never needs more.

    Example:
        >>> class Tok:
        ...     chat_template = None
        >>> judge = HFJudge(model=None, tokenizer=Tok(), max_question_chars=9)
        >>> prompt = judge.build_prompt(PUZZLES[0], "Was he thirsty?" * 1000)
        >>> "asks: Was he th" in prompt, "asks: Was he thi" in prompt
        (True, False)
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_new_tokens: int = 4,
        prompt: str = JUDGE_PROMPT,
        max_question_chars: int = 500,
    ):
        check_int("max_question_chars", max_question_chars, minimum=1, expected="a positive integer")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.prompt = prompt
        self.max_question_chars = max_question_chars
        self.last_output = ""

    def build_prompt(self, puzzle: Puzzle, question: str) -> str:
        text = self.prompt.format(
            story=puzzle.story, explanation=puzzle.explanation, question=question[: self.max_question_chars]
        )
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        return text

    def generate_text(self, prompt: str) -> str:
        enc = self.tokenizer(prompt, return_tensors="pt")
        device = getattr(self.model, "device", None)
        if device is not None and hasattr(enc, "to"):
            enc = enc.to(device)
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(self.tokenizer, "eos_token_id", None)
        out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=pad)
        new_tokens = out[0][enc["input_ids"].shape[1] :]
        return self.tokenizer.decode(new_tokens, skip_special_tokens=True)

    def judge(self, puzzle: Puzzle, question: str) -> str:
        self.last_output = self.generate_text(self.build_prompt(puzzle, question))
        return map_judge_output(self.last_output)

    __call__ = judge


#: the shipped puzzle set (a JSON file in the package: ``envs/games/data/situation_puzzles.json``)
PUZZLES_FILE = "situation_puzzles.json"


def load_puzzles(path: str | os.PathLike | None = None) -> tuple[Puzzle, ...]:
    """Puzzles from a JSON file: the shipped set by default, or a user file of the same layout
    (``{"puzzles": [{"id", "story", "explanation", "facts": [{"keywords", "truth", "question"}]}]}``;
    ``keywords`` lists keyword groups, alternatives inside a group separated by ``|``).

    Raises ``ValueError`` naming the puzzle and field when the file does not have that layout.

    Example:
        >>> puzzles = load_puzzles()
        >>> puzzles[0].id, puzzles[0].facts[0].question
        ('hiccups', 'Did the man have hiccups?')
    """
    if path is None:
        text = resources.files("ragen_torchrl.envs.games").joinpath("data", PUZZLES_FILE).read_text(encoding="utf-8")
        where = PUZZLES_FILE
    else:
        text = Path(path).read_text(encoding="utf-8")
        where = str(path)
    try:
        items = json.loads(text)["puzzles"]
        puzzles = tuple(
            Puzzle(
                str(item["id"]),
                str(item["story"]),
                str(item["explanation"]),
                tuple(
                    Fact(tuple(str(k) for k in fact["keywords"]), bool(fact["truth"]), str(fact["question"]))
                    for fact in item.get("facts", ())
                ),
            )
            for item in items
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: not a puzzle file ({type(e).__name__}: {e})") from None
    if not puzzles or len({p.id for p in puzzles}) != len(puzzles):
        raise ValueError(f"{where}: needs at least one puzzle and distinct ids")
    return puzzles


#: the shipped puzzles (original wordings of classic lateral-thinking puzzles)
PUZZLES: tuple[Puzzle, ...] = load_puzzles()


def _as_judge(judge: Any) -> Callable[[Puzzle, str], str]:
    if judge is None:
        return RuleBasedJudge().judge
    if hasattr(judge, "judge"):
        return judge.judge
    if callable(judge):
        return judge
    raise TypeError("judge must have a judge(puzzle, question) method or be callable")


class SituationPuzzlesGame(InteractiveGame):
    """Ask yes/no questions, then explain the story (see the module docstring).

    Info keys of an interaction: ``judge_answer`` (``"Yes"``/``"No"``/``"Unknown"``, ``None`` for an
    invalid query), ``consecutive_unknown`` (= ``progress()``), ``unknown_count`` (total),
    ``repeated_query``. ``action_is_effective``: a new question answered Yes or No.
    Answer info: ``valid`` (non-empty), ``f1``, ``success`` (F1 ≥ ``success_threshold``), ``reward``.
    """

    max_turns = 15
    task_name = "SituationPuzzles"

    def __init__(
        self,
        puzzle: Puzzle,
        judge: Judge | Callable[[Puzzle, str], str] | None = None,
        success_threshold: float = 0.5,
        max_turns: int | None = None,
    ) -> None:
        super().__init__(max_turns)
        self.puzzle = puzzle
        self.judge = judge if judge is not None else RuleBasedJudge()
        self._judge_fn = _as_judge(self.judge)
        self.success_threshold = float(success_threshold)
        self.consecutive_unknown = 0
        self.unknown_count = 0
        self.questions: list[tuple[str, str]] = []  # (question, judge answer)

    @classmethod
    def generate(
        cls,
        seed: int,
        split: str = "train",
        puzzles: Sequence[Puzzle] = PUZZLES,
        **kwargs: Any,
    ) -> "SituationPuzzlesGame":
        """A puzzle of the split (index % 5 == 4 -> ``"val"``) chosen by ``seed``."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        pool = [p for i, p in enumerate(puzzles) if (i % 5 == 4) == (split == "val")]
        if not pool:
            raise ValueError(f"no puzzles in split {split!r}")
        rng = random.Random(f"SituationPuzzles/{split}/{int(seed)}")
        return cls(pool[rng.randrange(len(pool))], **kwargs)

    def progress(self) -> float:
        return float(self.consecutive_unknown)

    def _describe(self) -> str:
        return (
            "Solve the situation puzzle. Ask yes/no questions with <interact>QUESTION</interact>; "
            "the judge answers only Yes, No or Unknown. When you know what happened, give the full "
            "explanation in <answer>EXPLANATION</answer>.\n"
            f"Puzzle: {self.puzzle.story}"
        )

    def _interact(self, query: str) -> tuple[str, dict[str, Any]]:
        if not _words(query):
            self.consecutive_unknown += 1
            self.unknown_count += 1
            return "Invalid query: ask a yes/no question.", {
                "valid": False,
                "judge_answer": None,
                "consecutive_unknown": self.consecutive_unknown,
                "unknown_count": self.unknown_count,
                "repeated_query": False,
                "action_is_effective": False,
            }
        key = " ".join(_words(query))
        repeated = any(" ".join(_words(q)) == key for q, _ in self.questions)
        raw = self._judge_fn(self.puzzle, query)
        verdict = raw if raw in JUDGE_ANSWERS else map_judge_output(str(raw))
        self.questions.append((query, verdict))
        if verdict == "Unknown":
            self.consecutive_unknown += 1
            self.unknown_count += 1
        else:
            self.consecutive_unknown = 0
        return verdict, {
            "valid": True,
            "judge_answer": verdict,
            "consecutive_unknown": self.consecutive_unknown,
            "unknown_count": self.unknown_count,
            "repeated_query": repeated,
            "action_is_effective": verdict != "Unknown" and not repeated,
        }

    def _answer(self, text: str) -> tuple[float, dict[str, Any]]:
        valid = bool(_words(text))
        f1 = word_f1(text, self.puzzle.explanation) if valid else 0.0
        ok = f1 >= self.success_threshold
        fb = f"Word F1 {f1:.2f}. The explanation: {self.puzzle.explanation}"
        return f1, {"valid": valid, "f1": f1, "success": ok, "feedback": fb}

    # ---- demonstrator ------------------------------------------------------------------------
    def _next_fact(self) -> Fact | None:
        asked = {" ".join(_words(q)) for q, _ in self.questions}
        for fact in self.puzzle.facts:
            if " ".join(_words(fact.question)) not in asked:
                return fact
        return None

    def oracle_action(self) -> str:
        fact = self._next_fact()
        if fact is None or self.turns_left <= 1:
            return self.ANSWER_PREFIX + self.puzzle.explanation
        return self.INTERACT_PREFIX + fact.question

    def explain(self, action: str) -> str:
        kind, payload = self.split_action(action)
        yes = [q for q, a in self.questions if a == "Yes"]
        no = [q for q, a in self.questions if a == "No"]
        if kind == "answer":
            return (
                f"{len(yes)} questions got Yes and {len(no)} got No; together they explain the "
                "story, so I give the explanation."
            )
        if kind == "interact":
            if not self.questions:
                return "Nothing is known yet, so I test the most likely explanation first."
            return (
                f"So far {len(yes)} Yes and {len(no)} No answers. The story is not explained yet, "
                f"so I check another detail: {payload}"
            )
        return super().explain(action)
