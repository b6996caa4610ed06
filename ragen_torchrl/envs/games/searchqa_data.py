"""Loaders of the user's SearchQA files: questions and a passage corpus (JSON lines, JSON array or parquet).

* Questions (NQ / HotpotQA style), one record each: ``question`` and the gold answers in
  ``answers`` (a list, or a SQuAD-style ``{"text": [...]}``), ``answer`` (a string or a list),
  ``golden_answers`` (FlashRAG / Search-R1) or ``ground_truth`` (RAGEN's parquet); the first of
  these fields present is used.
* Corpus, one passage each: ``id`` (string or integer), ``title`` (optional, default ``""``) and
  ``text``; a record with ``contents`` instead of ``text`` (the FlashRAG / Search-R1 wiki dump:
  ``"\\"Title\\"\\nbody"``) is read as title = first line without its quotes, text = the rest.

Errors name the file, the line and the field (:func:`~.records.iter_records` reads the files).

Example:
    >>> import json, tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write(json.dumps({"question": "Who wrote Hamlet?", "answers": ["Shakespeare"]}) + "\\n")
    >>> load_questions(f.name)
    [QAItem(question='Who wrote Hamlet?', answers=('Shakespeare',), hops=())]
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write(json.dumps({"id": 7, "contents": '"Hamlet"\\nA play by Shakespeare.'}) + "\\n")
    >>> load_corpus(f.name)
    [Passage(id='7', title='Hamlet', text='A play by Shakespeare.')]
"""

from __future__ import annotations

import os
from typing import Any

from .records import iter_records
from .retrieval import Passage
from .searchqa_scoring import normalize_answer
from .searchqa_world import QAItem

__all__ = ["ANSWER_FIELDS", "load_corpus", "load_questions"]

#: fields read for the gold answers, in this order
ANSWER_FIELDS = ("answers", "answer", "golden_answers", "ground_truth")
QUESTIONS_EXPECTED = "a 'question' string and gold answers in 'answers' (list) or 'answer' (string or list)"
CORPUS_EXPECTED = "fields 'id', 'title' (optional) and 'text'"


def _answers(value: Any) -> list[str] | None:
    if isinstance(value, dict):
        value = value.get("text")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return None
    out = [str(v).strip() for v in value if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    out = [a for a in out if normalize_answer(a)]
    return out or None


def load_questions(path: str | os.PathLike, limit: int | None = None) -> list[QAItem]:
    """Questions of a JSON-lines / JSON / parquet file (see the module docstring).

    Raises:
        ValueError: a missing file, a record without a question or without a usable gold answer (the
            message names the file, the line and the field), or a file without records.
    """
    path = os.path.expanduser(os.fspath(path))
    items: list[QAItem] = []
    for line, rec in iter_records(path, QUESTIONS_EXPECTED, limit):
        where = f"{path}, line {line}"
        question = rec.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{where}: field 'question' must be a non-empty string; expected {QUESTIONS_EXPECTED}")
        field = next((f for f in ANSWER_FIELDS if f in rec), None)
        if field is None:
            raise ValueError(
                f"{where}: no gold answer field (one of {', '.join(ANSWER_FIELDS)}); expected {QUESTIONS_EXPECTED}"
            )
        answers = _answers(rec[field])
        if answers is None:
            raise ValueError(
                f"{where}: field {field!r} holds no answer that is non-empty after normalisation (got {str(rec[field])[:80]!r}); "
                f"expected {QUESTIONS_EXPECTED}"
            )
        items.append(QAItem(question.strip(), tuple(answers)))
    if not items:
        raise ValueError(f"{path}: no records; expected {QUESTIONS_EXPECTED}")
    return items


def load_corpus(path: str | os.PathLike, limit: int | None = None) -> list[Passage]:
    """Passages of a JSON-lines / JSON / parquet file (see the module docstring).

    Raises:
        ValueError: a missing file, a record without ``id`` or ``text``, a repeated ``id`` (the message
            names the file, the line and the field), or a file without records.
    """
    path = os.path.expanduser(os.fspath(path))
    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for line, rec in iter_records(path, CORPUS_EXPECTED, limit):
        where = f"{path}, line {line}"
        pid = rec.get("id")
        if isinstance(pid, bool) or not isinstance(pid, (str, int)) or not str(pid).strip():
            raise ValueError(
                f"{where}: field 'id' must be a non-empty string or an integer; expected {CORPUS_EXPECTED}"
            )
        pid = str(pid).strip()
        if pid in seen:
            raise ValueError(f"{where}: id {pid!r} repeats the passage of line {seen[pid]}; ids must be unique")
        seen[pid] = line
        title, text = rec.get("title", ""), rec.get("text")
        if text is None and isinstance(rec.get("contents"), str):
            head, _, body = rec["contents"].partition("\n")
            title, text = (head.strip().strip('"'), body) if body else ("", head)
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise ValueError(f"{where}: field 'title' must be a string; expected {CORPUS_EXPECTED}")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}: field 'text' must be a non-empty string; expected {CORPUS_EXPECTED}")
        passages.append(Passage(pid, title.strip(), text.strip()))
    if not passages:
        raise ValueError(f"{path}: no records; expected {CORPUS_EXPECTED}")
    return passages
