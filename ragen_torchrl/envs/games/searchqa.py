"""SearchQA: answer a question by searching a passage corpus (pure Python, no torch).

Actions (RAGEN reference ``ragen/env/search``: ``search[query]`` / ``finish[answer]``), one per
turn, written inside the package's ``<answer>`` tag:

* ``search[query]``: the retriever's top ``top_k`` (5) passages for the query become the
  observation, each as ``title: text`` cut to ``passage_chars`` characters; reward 0;
* ``finish[answer]``: ends the episode; reward 1 for an exact match with a gold answer after SQuAD
  normalisation, else the token F1 when it is at least 0.3, else 0
  (:func:`~.searchqa_scoring.score_answer`); success is the exact match.

The action word is case-insensitive, and the brackets hold no ``[`` or ``]``: ``<answer>`` holds
exactly one action, and anything else (``search[]``, ``finish[a] || search[b]``, plain text) is not
an action: :func:`parse_action` returns ``None`` and :meth:`SearchQAGame.step` changes nothing
(the env gives the format penalty). The turn limit (5) is the env's.

``info`` of a finish carries ``exact_match`` and ``f1``. A search is effective when it shows a
passage not seen before in the episode. ``progress()`` is the number of supporting passages not yet
retrieved plus 1 until the question is answered right (lower is closer; questions without a known
hop chain count only the answer).

The oracle (:meth:`SearchQAGame.oracle_action`) searches hop by hop with each hop's query until the
supporting passage of every hop has been shown, then finishes with the gold answer; for a question
without a hop chain (the user's files) it searches once with the question and then finishes.

Example:
    >>> from ragen_torchrl.envs.games.retrieval import BM25Retriever
    >>> from ragen_torchrl.envs.games.searchqa_world import generate_world
    >>> import tempfile
    >>> world = generate_world(0)
    >>> retriever = BM25Retriever(world.passages, cache_dir=tempfile.mkdtemp())
    >>> q = next(q for q in world.questions if q.question.startswith("Where was the founder of"))
    >>> game = SearchQAGame(q, retriever)
    >>> game.oracle_action() == f"search[{q.hops[0].query}]"
    True
    >>> while not game.done:
    ...     reward, done, info = game.step(game.oracle_action())
    >>> reward, info["success"], game.searches
    (1.0, True, 2)
"""

from __future__ import annotations

import random
import re
from typing import Any

from .base import TextGame
from .retrieval import BM25Retriever, Passage
from .searchqa_scoring import F1_THRESHOLD, score_answer
from .searchqa_world import QAItem

__all__ = ["ACTIONS_HINT", "SearchQAGame", "parse_action"]

ACTIONS_HINT = "Actions: search[query] or finish[answer]."
#: characters of a query echoed back in the observation
MAX_ECHO_CHARS = 200

_ACTION_RE = re.compile(r"\s*(search|finish)\s*\[([^\[\]]*)\]\s*", re.IGNORECASE)


def parse_action(text: Any) -> tuple[str, str] | None:
    """``("search" | "finish", argument)`` of one action, or ``None`` when ``text`` is not exactly one.

    Never raises; the argument is stripped and must be non-empty.

    Example:
        >>> parse_action(" Search[ Kelvari Works founder ] ")
        ('search', 'Kelvari Works founder')
        >>> parse_action("finish[Telmora]"), parse_action("finish[]"), parse_action("search[a] || finish[b]")
        (('finish', 'Telmora'), None, None)
    """
    if not isinstance(text, str):
        return None
    m = _ACTION_RE.fullmatch(text)
    if m is None or not m.group(2).strip():
        return None
    return m.group(1).lower(), m.group(2).strip()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 3, 0)].rstrip() + "..."


class SearchQAGame(TextGame):
    """One question; search the corpus, then answer (see the module docstring).

    Args:
        item: the question, its gold answers and (optionally) its hop chain.
        retriever: the corpus's :class:`~.retrieval.BM25Retriever`.
        top_k: passages shown per search.
        passage_chars: each shown passage (``title: text``) is cut to this many characters.
        f1_threshold: token F1 below this scores 0.
    """

    action_names = None
    instructions = (
        "You answer a question by searching a collection of passages. Use search[query] to see the "
        "passages that best match a query, and finish[answer] to give your final answer, a short "
        "span copied from the passages. One action per turn."
    )

    def __init__(
        self,
        item: QAItem,
        retriever: BM25Retriever,
        *,
        top_k: int = 5,
        passage_chars: int = 300,
        f1_threshold: float = F1_THRESHOLD,
    ) -> None:
        if not item.answers:
            raise ValueError(f"SearchQA question {item.question!r} has no gold answer")
        self.item = item
        self.question = item.question
        self.answers = tuple(item.answers)
        self.retriever = retriever
        self.top_k, self.passage_chars, self.f1_threshold = int(top_k), int(passage_chars), float(f1_threshold)
        self.searches = 0
        self.queries: list[str] = []
        self.results: list[Passage] = []
        self.seen_ids: set[str] = set()
        self.final_answer: str | None = None
        self.last_score = None
        self._done = False
        self._success = False

    # ---------------------------------------------------------------- dynamics
    @property
    def done(self) -> bool:
        return self._done

    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        if self._done:
            return 0.0, True, {"success": self._success, "action_is_effective": False}
        parsed = parse_action(action)
        if parsed is None:  # not an action: nothing changes
            return 0.0, False, {"success": False, "action_is_effective": False}
        kind, arg = parsed
        if kind == "search":
            self.searches += 1
            self.queries.append(arg)
            self.results = self.retriever.search(arg, k=self.top_k)
            new = {p.id for p in self.results} - self.seen_ids
            self.seen_ids |= new
            return 0.0, False, {"success": False, "action_is_effective": bool(new)}
        score = score_answer(arg, self.answers, self.f1_threshold)
        self.final_answer, self.last_score = arg, score
        self._done, self._success = True, score.exact_match
        info = {"success": score.exact_match, "action_is_effective": True, "exact_match": score.exact_match}
        info["f1"] = score.f1
        return score.reward, True, info

    def missing_hops(self) -> list:
        """The hops whose supporting passage has not been shown yet."""
        return [h for h in self.item.hops if h.passage_id not in self.seen_ids]

    def progress(self) -> float:
        return float(len(self.missing_hops()) + (0 if self._success else 1))

    # ---------------------------------------------------------------- oracle
    def oracle_action(self) -> str:
        missing = self.missing_hops()
        if missing and missing[0].query not in self.queries:
            return f"search[{missing[0].query}]"
        if not self.item.hops and not self.queries:
            return f"search[{_clip(self.question, MAX_ECHO_CHARS)}]"
        return f"finish[{self.answers[0]}]"

    def noisy_action(self, rng: random.Random, can_recover: bool) -> str:
        """A non-optimal action for demonstrations: a search for an unrelated passage's title when
        the budget leaves room to recover (``can_recover``), else a wrong answer (a title shown in
        the results or, failing that, any passage's title)."""
        titles = [p.title for p in self.retriever.passages[:2000] if p.title]
        if can_recover and titles:
            return f"search[{rng.choice(titles)}]"
        wrong = [p.title for p in self.results if p.title and not score_answer(p.title, self.answers).reward]
        wrong = wrong or [t for t in titles if not score_answer(t, self.answers).reward] or ["unknown"]
        return f"finish[{rng.choice(wrong)}]"

    def explain(self, action: str) -> str:
        parsed = parse_action(action)
        if parsed is None:
            return "I am not sure what to do."
        kind, arg = parsed
        shown = [h for h in self.item.hops if h.passage_id in self.seen_ids]
        known = f"{shown[-1].need[0].upper()}{shown[-1].need[1:]} is {shown[-1].value}." if shown else ""
        if kind == "search":
            hop = next((h for h in self.item.hops if h.query == arg), None)
            if hop is not None:
                return f"{known} I need {hop.need}.".strip()
            if not self.item.hops and not self.queries:
                return "I search for the key words of the question."
            return f"{known} I search for {_clip(arg, MAX_ECHO_CHARS)}.".strip()
        if score_answer(arg, self.answers).exact_match:
            return known or f"The passages say the answer is {arg}."
        return f"{known} I guess {_clip(arg, MAX_ECHO_CHARS)}.".strip()

    # ---------------------------------------------------------------- text
    def render_text(self) -> str:
        if self._done:
            answer = _clip(self.final_answer or "", MAX_ECHO_CHARS)
            verdict = "correct" if self._success else "not correct"
            return f"Your answer {answer} is {verdict}. Reward: {self.last_score.reward:.2f}"
        if not self.queries:
            return f"Question: {self.question}\n{ACTIONS_HINT}"
        query = _clip(self.queries[-1], MAX_ECHO_CHARS)
        if not self.results:
            return f"No passage matches search[{query}].\n{ACTIONS_HINT}"
        lines = [f"Results for search[{query}]:"]
        for i, p in enumerate(self.results, 1):
            text = f"{p.title}: {p.text}" if p.title else p.text
            lines.append(f"{i}. {_clip(text, self.passage_chars)}")
        lines.append(ACTIONS_HINT)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SearchQAGame({_clip(self.question, 40)!r}, answers={self.answers!r}, searches={self.searches})"
