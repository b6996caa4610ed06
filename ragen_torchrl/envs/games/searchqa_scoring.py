"""SearchQA answer scoring: SQuAD/HotpotQA normalisation, exact match and token F1 (pure Python).

The rule (RAGEN reference ``ragen/env/search/reward.py``, from RLLM's HotpotQA reward): an answer
is normalised (lowercase, punctuation removed, the articles *a*/*an*/*the* removed, whitespace
collapsed) and compared with every gold answer; an exact match scores 1, otherwise the best token
F1 scores its own value when it is at least ``f1_threshold`` (0.3), else 0. As in the official
HotpotQA evaluation, F1 is 0 when either side is *yes*/*no*/*noanswer* and they differ. Success is
an exact match (the reference also counts F1 partial credit as success; this package keeps success
binary).

Example:
    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    >>> score_answer("Orvane Dask", ["orvane dask"])
    AnswerScore(reward=1.0, exact_match=True, f1=1.0)
    >>> score_answer("Dask", ["Orvane Dask"]).reward  # F1 2/3 >= 0.3: partial credit
    0.6666666666666666
    >>> score_answer("Paris", ["Orvane Dask"]).reward
    0.0
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = ["AnswerScore", "F1_THRESHOLD", "exact_match", "normalize_answer", "score_answer", "token_f1"]

#: token F1 below this scores 0 (reference ``f1_threshold``)
F1_THRESHOLD = 0.3
#: answers are cut to this many characters before scoring (a reply is at most 8192 characters)
MAX_ANSWER_CHARS = 1000

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_YES_NO = ("yes", "no", "noanswer")


class AnswerScore(NamedTuple):
    """The reward of one answer and the two measures behind it."""

    reward: float
    exact_match: bool
    f1: float


def normalize_answer(text: Any) -> str:
    """SQuAD normalisation: lowercase, strip punctuation, drop articles, collapse whitespace.

    Example:
        >>> normalize_answer("  An  Apple, a day. ")
        'apple day'
    """
    s = "" if not isinstance(text, str) else text[:MAX_ANSWER_CHARS]
    s = s.lower().translate(_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def token_f1(prediction: Any, gold: Any) -> float:
    """Token-level F1 of two answers after :func:`normalize_answer` (HotpotQA's yes/no rule).

    Example:
        >>> round(token_f1("the city of Telmora", "Telmora"), 3)
        0.5
        >>> token_f1("yes", "no")
        0.0
    """
    p, g = normalize_answer(prediction), normalize_answer(gold)
    if (p in _YES_NO or g in _YES_NO) and p != g:
        return 0.0
    p_tokens, g_tokens = p.split(), g.split()
    common = sum((Counter(p_tokens) & Counter(g_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p_tokens), common / len(g_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: Any, golds: Iterable[str]) -> bool:
    """Whether the normalised prediction equals a normalised gold answer (an empty one never does).

    Example:
        >>> exact_match("the Telmora", ["Telmora"]), exact_match("", [""])
        (True, False)
    """
    p = normalize_answer(prediction)
    return bool(p) and any(p == normalize_answer(g) for g in golds)


def score_answer(prediction: Any, golds: Iterable[str], f1_threshold: float = F1_THRESHOLD) -> AnswerScore:
    """The reward of ``prediction`` against the gold answers (see the module docstring).

    Example:
        >>> score_answer("1953", ["1953", "nineteen fifty-three"])
        AnswerScore(reward=1.0, exact_match=True, f1=1.0)
    """
    golds = [g for g in golds if isinstance(g, str)]
    if exact_match(prediction, golds):
        return AnswerScore(1.0, True, 1.0)
    f1 = max((token_f1(prediction, g) for g in golds), default=0.0)
    return AnswerScore(f1 if f1 >= f1_threshold else 0.0, False, f1)
