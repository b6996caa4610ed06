"""BM25 passage retrieval (``bm25s``) with the index cached on disk by the corpus's content hash.

:class:`BM25Retriever` indexes :class:`Passage` records (``id``, ``title``, ``text``; the title
is indexed with the text) and returns the top-k passages of a query. Tokens are lowercase word
characters (``\\w+``) minus a short list of English stopwords; no stemming. Ties are broken by
corpus order and passages sharing no term with the query are never returned, so a search is
deterministic and an unknown query returns nothing.

The index is built once per corpus: its files (``bm25s``'s own format) go under
``<cache_dir>/bm25/<fingerprint>/``, where the fingerprint hashes every passage, the tokenizer and
the BM25 parameters, and any later process with the same corpus loads them instead of indexing
again (a different corpus, or an edited passage, gets a new fingerprint). ``cache_dir`` defaults to
:func:`default_cache_dir` (``$RAGEN_CACHE``, else the user cache dir ``~/.cache/ragen_torchrl``).
An unwritable cache dir only costs the rebuild: the index is then kept in memory. Within a process
the index of a fingerprint is built or loaded once and shared.

``bm25s`` is an optional dependency (``pip install ragen_torchrl[search]``); building a retriever
without it raises an :class:`ImportError` that says so.

Example:
    >>> import tempfile
    >>> passages = [Passage("1", "Telmora", "Telmora is a city in the country of Brisland."),
    ...             Passage("2", "Orvane Dask", "Orvane Dask was born in the city of Telmora.")]
    >>> r = BM25Retriever(passages, cache_dir=tempfile.mkdtemp())
    >>> [p.id for p in r.search("Where was Orvane Dask born?", k=5)]
    ['2']
    >>> [p.id for p in r.search("Telmora country")]
    ['1', '2']
    >>> r.search("no such words")
    []
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["BM25Retriever", "Passage", "default_cache_dir", "require_bm25s", "tokenize"]

logger = logging.getLogger(__name__)

#: bump when the tokenizer or the on-disk layout changes (old caches are then ignored)
INDEX_FORMAT = 1
#: queries are cut to this many characters before tokenising (a reply is at most 8192)
MAX_QUERY_CHARS = 1000
#: indexes kept in memory per process, by fingerprint
MEMO_SIZE = 4

STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how in is it its of on or that the this to "
    "was were what when where which who whom whose why with".split()
)
_TOKEN_RE = re.compile(r"\w+")


class Passage(NamedTuple):
    """One corpus passage."""

    id: str
    title: str
    text: str


def tokenize(text: str) -> list[str]:
    """The index terms of ``text``: lowercase ``\\w+`` runs, stopwords removed.

    Example:
        >>> tokenize("Where was the founder of Kelvari Works born?")
        ['founder', 'kelvari', 'works', 'born']
    """
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


def require_bm25s(what: str = "the SearchQA retriever") -> Any:
    """The ``bm25s`` module, or an :class:`ImportError` naming what needs it and the extra to install."""
    try:
        import bm25s
    except ImportError:
        raise ImportError(
            f"{what} needs the bm25s package: pip install ragen_torchrl[search] (or pip install bm25s)"
        ) from None
    return bm25s


def default_cache_dir() -> str:
    """``$RAGEN_CACHE`` when set, else ``$XDG_CACHE_HOME/ragen_torchrl`` (default ``~/.cache/ragen_torchrl``).

    Example:
        >>> default_cache_dir().endswith("ragen_torchrl") or "RAGEN_CACHE" in os.environ
        True
    """
    env = os.environ.get("RAGEN_CACHE")
    if env:
        return os.path.expanduser(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ragen_torchrl")


_MEMO: OrderedDict[str, Any] = OrderedDict()


class BM25Retriever:
    """Top-k BM25 search over passages (see the module docstring).

    Args:
        passages: the corpus; ``search`` returns these objects.
        cache_dir: where the index is cached (``None``: :func:`default_cache_dir`).
        cache: ``False`` keeps the index in memory only (nothing is written).
        k1, b: BM25 parameters (``bm25s``'s Lucene variant).

    Attributes:
        fingerprint: the corpus's content hash (hex).
        cache_path: the index directory on disk, ``None`` when not cached.
        source: ``"built"``, ``"disk"`` (loaded from the cache) or ``"memory"`` (shared in-process).
        seconds: time spent building or loading the index.

    Raises:
        ImportError: ``bm25s`` is not installed.
        ValueError: an empty corpus.
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        cache_dir: str | os.PathLike | None = None,
        cache: bool = True,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        bm25s = require_bm25s()
        self.passages = list(passages)
        if not self.passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.k1, self.b = float(k1), float(b)
        start = time.perf_counter()
        self.fingerprint = self._fingerprint(bm25s.__version__)
        root = Path(os.path.expanduser(os.fspath(cache_dir))) if cache_dir is not None else Path(default_cache_dir())
        self.cache_path: Path | None = root / "bm25" / self.fingerprint if cache else None
        if self.fingerprint in _MEMO:
            _MEMO.move_to_end(self.fingerprint)
            self._bm25, self.source = _MEMO[self.fingerprint], "memory"
        else:
            self._bm25 = self._load(bm25s)
            self.source = "disk"
            if self._bm25 is None:
                self._bm25, self.source = self._build(bm25s), "built"
                self._save()
            _MEMO[self.fingerprint] = self._bm25
            while len(_MEMO) > MEMO_SIZE:
                _MEMO.popitem(last=False)
        self._vocab: dict[str, int] = self._bm25.vocab_dict
        self.seconds = time.perf_counter() - start

    def __len__(self) -> int:
        return len(self.passages)

    # ------------------------------------------------------------------ index
    def _fingerprint(self, version: str) -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(f"ragen-bm25|{INDEX_FORMAT}|bm25s {version.split('.')[0]}|{self.k1}|{self.b}|".encode())
        for p in self.passages:
            h.update(f"{p.id}\x1f{p.title}\x1f{p.text}\x1e".encode("utf-8", "surrogatepass"))
        return h.hexdigest()

    def _build(self, bm25s: Any) -> Any:
        bm25 = bm25s.BM25(k1=self.k1, b=self.b)
        bm25.index([tokenize(f"{p.title} {p.text}") for p in self.passages], show_progress=False)
        return bm25

    def _load(self, bm25s: Any) -> Any:
        path = self.cache_path
        if path is None or not (path / "meta.json").is_file():
            return None
        try:
            meta = json.loads((path / "meta.json").read_text())
            if meta.get("fingerprint") != self.fingerprint or meta.get("num_passages") != len(self.passages):
                raise ValueError("stale meta.json")
            bm25 = bm25s.BM25.load(str(path), show_progress=False)
            if int(bm25.scores["num_docs"]) != len(self.passages):
                raise ValueError("passage count differs")
            return bm25
        except Exception as error:  # a corrupt cache entry is rebuilt, never trusted
            logger.warning("BM25 cache %s is unreadable (%s); rebuilding it", path, error)
            shutil.rmtree(path, ignore_errors=True)
            return None

    def _save(self) -> None:
        path = self.cache_path
        if path is None:
            return
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # write a sibling directory, then rename it: readers never see a half-written index
            tmp = tempfile.mkdtemp(prefix=f".{self.fingerprint}.", dir=path.parent)
            self._bm25.save(tmp, show_progress=False)
            meta = {"fingerprint": self.fingerprint, "num_passages": len(self.passages), "format": INDEX_FORMAT}
            Path(tmp, "meta.json").write_text(json.dumps(meta))
            os.rename(tmp, path)
            tmp = None
        except OSError as error:  # another process won the race, or the dir is read-only
            if not (path / "meta.json").is_file():
                logger.warning("could not cache the BM25 index in %s (%s); it stays in memory", path, error)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    # ------------------------------------------------------------------ search
    def search(self, query: Any, k: int = 5) -> list[Passage]:
        """The ``k`` best passages for ``query`` (best first; only passages sharing a term with it).

        Never raises on text: a non-string or a query without known terms returns ``[]``.
        """
        if not isinstance(query, str) or k < 1:
            return []
        ids = sorted({self._vocab[t] for t in tokenize(query[:MAX_QUERY_CHARS]) if t in self._vocab})
        if not ids:
            return []
        return [self.passages[i] for i in self._top(ids, int(k))]

    def _top(self, ids: list[int], k: int) -> list[int]:
        """Indices of the ``k`` best-scoring passages for the query terms ``ids`` (score > 0; best
        first, ties by corpus order).

        Reads the index's precomputed per-term score columns (CSC ``data``/``indices``/``indptr``, as
        ``bm25s`` stores them). Queries of rare terms only touch the passages that contain them, so
        they cost their postings, not the corpus size; frequent terms use one dense score vector.
        """
        import numpy as np

        index = self._bm25.scores
        data, indices, indptr = index["data"], index["indices"], index["indptr"]
        spans = [(int(indptr[t]), int(indptr[t + 1])) for t in ids]
        postings = sum(b - a for a, b in spans)
        if postings == 0:
            return []
        num_docs = int(index["num_docs"])
        if postings * 8 > num_docs:
            # frequent terms: one dense score vector is cheaper than sorting the postings; a passage
            # occurs once per term column, so the fancy-index add is exact
            scores = np.zeros(num_docs, dtype=np.float64)
            for a, b in spans:
                scores[indices[a:b]] += data[a:b]
            docs = np.flatnonzero(scores)
            scores = scores[docs]
        else:
            docs = np.concatenate([indices[a:b] for a, b in spans])
            weights = np.concatenate([data[a:b] for a, b in spans]).astype(np.float64)
            docs, where = np.unique(docs, return_inverse=True)  # sorted: ties resolve to corpus order
            scores = np.bincount(where.reshape(-1), weights=weights, minlength=docs.size)
        if k < docs.size:
            # the k-th best score; of the passages tied with it, the first ones in corpus order
            kth = np.partition(scores, docs.size - k)[docs.size - k]
            above = np.flatnonzero(scores > kth)
            keep = np.concatenate([above, np.flatnonzero(scores == kth)[: k - above.size]])
            docs, scores = docs[keep], scores[keep]
        order = np.lexsort((docs, -scores))
        return [int(d) for d, sc in zip(docs[order], scores[order]) if sc > 0.0]
