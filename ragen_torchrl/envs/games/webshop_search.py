"""A small BM25 index over texts, on top of the optional ``bm25s`` package.

:class:`BM25Index` tokenises with a fixed rule (lowercase words of letters, digits and ``_`` in any
script, English stopwords removed, a light plural stemmer), indexes with ``bm25s`` (Okapi BM25, k1=1.5, b=0.75) and returns the
ids of the best-scoring documents, ties broken by document order, documents sharing no word with the
query left out (as a Lucene search returns only matches). A query never raises: words the corpus does
not have are ignored, and a query without known words returns nothing.

``bm25s`` is an optional dependency (``pip install ragen_torchrl[search]``); building an index
without it raises an :class:`ImportError` that says so.

Example:
    >>> index = BM25Index(["red cotton shirt", "blue denim jeans", "red ceramic mug"])
    >>> index.search("red shirts", k=5)
    [0, 2]
    >>> index.search("zebra", k=5), index.search("", k=5)
    ([], [])
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import retrieval

__all__ = ["BM25Index", "tokenize", "require_bm25s", "INSTALL_HINT"]

INSTALL_HINT = "pip install ragen_torchrl[search]"
#: queries are cut to this many characters before tokenising (a model can write megabytes)
MAX_QUERY_CHARS = 2000
#: a word: letters, digits and ``_`` of any script, as Lucene's tokenizer (WebShop's search) keeps
#: ``crème`` and ``x_large`` whole and does not fold accents; a run of ``_`` alone is no word
_WORD = re.compile(r"\w+")
_STOP = frozenset(
    "a an and are as at be but by for from i if in into is it me my need no not of on or s such that the "
    "their then there these they this to want was will with looking find".split()
)


def require_bm25s():
    """The ``bm25s`` module, or an ImportError naming the extra to install."""
    return retrieval.require_bm25s("the WebShop product search")


def _stem(word: str) -> str:
    # plural "s" only: "covers" -> "cover", "glass" and "bus" stay
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """The index's words of ``text``.

    Example:
        >>> tokenize("I need 2 Pillow-Covers, and a glass!"), tokenize("Crème brûlée candles")
        (['2', 'pillow', 'cover', 'glass'], ['crème', 'brûlée', 'candle'])
    """
    text = str(text)[:MAX_QUERY_CHARS].lower()
    return [_stem(w) for w in _WORD.findall(text) if w not in _STOP and w.strip("_")]


class BM25Index:
    """BM25 over ``texts``; :meth:`search` returns indices into ``texts``.

    Args:
        texts: the documents.
        k1, b: the BM25 parameters.

    Raises:
        ImportError: ``bm25s`` is not installed (the message says ``pip install ragen_torchrl[search]``).
    """

    def __init__(self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        bm25s = require_bm25s()
        import numpy as np

        self._np = np
        self.size = len(texts)
        corpus = [tokenize(t) or ["<empty>"] for t in texts]
        self._retriever = bm25s.BM25(k1=k1, b=b)
        self._retriever.index(corpus, show_progress=False)
        self._vocab = set(self._retriever.vocab_dict)

    def search(self, query: str, k: int = 50) -> list[int]:
        """Ids of the ``k`` best documents for ``query`` (score > 0), best first."""
        words = [w for w in tokenize(query) if w in self._vocab]
        if not words or k < 1 or self.size == 0:
            return []
        np = self._np
        scores = np.asarray(self._retriever.get_scores(words), dtype=np.float64)
        order = np.argsort(-scores, kind="stable")[:k]
        return [int(i) for i in order if scores[i] > 0.0]
