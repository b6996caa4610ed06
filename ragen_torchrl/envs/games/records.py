"""Data-file records of the dataset-backed games (Countdown, MetaMathQA, SearchQA, WebShop, DeepCoder).

:func:`iter_records` reads JSON lines (``.jsonl`` / ``.json``), a ``.json`` file holding one JSON
array, or a parquet file (with pandas or pyarrow) into ``(line_number, dict)`` pairs, with
errors (:class:`RecordError`, a ``ValueError``) that name the file, the line and the field.
Files come from elsewhere, so the reader is strict and bounded:

* JSON lines are split on ``\\n`` only (a U+2028 or U+0085 inside a string is text, as JSON says)
  and read as a stream: ``limit=N`` stops after N records; a line is at most
  :data:`MAX_LINE_BYTES`, a file at most :data:`MAX_RECORDS` records;
* a file read whole (a JSON array or object, parquet) is at most :data:`MAX_DOCUMENT_BYTES`;
* ``NaN``/``Infinity``, a number that overflows a float (``1e400``) and an integer over Python's
  4300-digit conversion limit are refused, naming the field (they would reach prompts and gold
  answers as the text ``"nan"``, or raise ``OverflowError`` later); in parquet, where NaN is how
  pandas marks a missing value, a NaN becomes ``None`` (missing);
* nesting deeper than :data:`MAX_DEPTH` is refused (a deeply nested line raises ``RecursionError``
  in the ``json`` module), and so is a record of more than :data:`MAX_CONTAINERS` arrays and
  objects, counted before it is parsed (30 MB of ``[],`` would parse into 10^7 lists, gigabytes);
* a JSON-lines file is at most :data:`MAX_JSONL_BYTES`;
* invalid UTF-8 names the file and the line, and so does a lone surrogate escape (``"\\ud800"``
  parses as JSON but is no text: it fails wherever the string is encoded later).

Example:
    >>> import json, tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write(json.dumps({"target": 24, "nums": [3, 4, 6]}) + "\\n")
    >>> read_records(f.name, "fields 'target' and 'nums'")
    [(1, {'target': 24, 'nums': [3, 4, 6]})]
    >>> with open(f.name, "w") as g:
    ...     _ = g.write('{"target": NaN, "nums": [3]}\\n')
    >>> try:
    ...     read_records(f.name, "fields 'target' and 'nums'")
    ... except RecordError as e:
    ...     print(str(e).replace(f.name, "FILE"))
    FILE, line 1: field 'target': NaN is not a number here (NaN/Infinity are refused); expected an object with fields 'target' and 'nums'
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

__all__ = [
    "MAX_CONTAINERS",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_INT_DIGITS",
    "MAX_JSONL_BYTES",
    "MAX_LINE_BYTES",
    "MAX_RECORDS",
    "RecordError",
    "iter_records",
    "parse_json",
    "read_json_document",
    "read_records",
]

#: nesting of arrays/objects in one record (the datasets' records nest 2-4 deep)
MAX_DEPTH = 64
#: bytes of one JSON line (a DeepCoder record with large hidden tests is a few MiB)
MAX_LINE_BYTES = 128 << 20
#: records of one file (MetaMathQA has 395k)
MAX_RECORDS = 10_000_000
#: bytes of a file that is read whole: a JSON array or object, a parquet file
MAX_DOCUMENT_BYTES = 2 << 30
#: digits of a JSON integer (Python's default int/str conversion limit)
MAX_INT_DIGITS = 4300
#: arrays and objects in one record or one parsed string field (a record's tests held as a JSON
#: string are counted when that string is parsed)
MAX_CONTAINERS = 1_000_000
#: bytes of a JSON-lines file (MetaMathQA's is ~400 MB)
MAX_JSONL_BYTES = 16 << 30

# a JSON string literal (escapes included), and what may hide a lone surrogate in one
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class RecordError(ValueError):
    """A data file that cannot be read as records; the message names the file, the line and the field."""


class _Bad:
    """Placeholder the JSON hooks leave where a refused number was, so its field can be named."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


class _Decoder:
    """A strict ``json`` decoder: refused numbers become :class:`_Bad` and set ``bad``."""

    def __init__(self) -> None:
        self.bad = False
        self.decoder = json.JSONDecoder(
            parse_constant=self._constant, parse_float=self._float, parse_int=self._int, strict=True
        )

    def _flag(self, why: str) -> _Bad:
        self.bad = True
        return _Bad(why)

    def _constant(self, name: str) -> Any:
        return self._flag(f"{name} is not a number here (NaN/Infinity are refused)")

    def _float(self, text: str) -> Any:
        value = float(text)
        if math.isfinite(value):
            return value
        return self._flag(f"{text[:40]} overflows a float")

    def _int(self, text: str) -> Any:
        digits = len(text.lstrip("-"))
        if digits > MAX_INT_DIGITS:
            return self._flag(f"an integer of {digits} digits exceeds the limit of {MAX_INT_DIGITS}")
        return int(text)

    def loads(self, text: str, where: str, expected: str = "") -> Any:
        """Parse ``text``; a refused value raises :class:`RecordError` naming ``where`` and its field."""
        tail = f"; expected {expected}" if expected else ""
        self.bad = False
        brackets = text.count("[") + text.count("{")
        if brackets > MAX_CONTAINERS:  # the raw count includes brackets inside strings: count again without them
            structural = _STRING.sub("", text)
            if structural.count("[") + structural.count("{") > MAX_CONTAINERS:
                raise RecordError(
                    f"{where}: more than {MAX_CONTAINERS} arrays and objects in one record "
                    f"(ragen_torchrl.envs.games.records.MAX_CONTAINERS){tail}"
                )
        surrogates = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
        try:
            value = self.decoder.decode(text)
        except RecursionError:
            raise RecordError(f"{where}: nesting deeper than {MAX_DEPTH} levels{tail}") from None
        except json.JSONDecodeError as exc:
            raise RecordError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno}){tail}") from None
        if self.bad or surrogates or brackets > MAX_DEPTH:
            _check_tree(value, where, tail, surrogates)
        return value


def _field_name(path: list) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out if len(out) <= 120 else out[:117] + "..."


def _locate(root: Any, path: list, where: str) -> tuple[str, str]:
    """``where`` (plus ``record N`` inside a top-level array of records) and the field named by ``path``."""
    if isinstance(root, list) and path and isinstance(path[0], int):
        where, path = f"{where}, record {path[0] + 1}", path[1:]
    return where, (f" field {_field_name(path)!r}:" if path else "")


def _problem(node: Any, depth: int, surrogates: bool) -> str | None:
    """What is wrong with one node of a parsed record (``None``: nothing)."""
    if isinstance(node, _Bad):
        return node.why
    if surrogates and isinstance(node, str) and _SURROGATE.search(node):
        return "a lone surrogate escape (\\ud800-\\udfff without its pair) is not text"
    if isinstance(node, (dict, list)):
        if depth >= MAX_DEPTH:
            return f"nests deeper than {MAX_DEPTH} levels"
        if surrogates and isinstance(node, dict) and any(_SURROGATE.search(k) for k in node):
            return "a key holds a lone surrogate escape (\\ud800-\\udfff without its pair), which is not text"
    return None


def _check_tree(value: Any, where: str, tail: str, surrogates: bool = False) -> None:
    """Depth, refused numbers and (``surrogates``) lone surrogates, walked without recursion; the
    first problem is reported with its field (paths are built only to name it)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if _problem(node, depth, surrogates) is not None:
            break
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    else:
        return
    paths: list[tuple[Any, list, int]] = [(value, [], 0)]
    while paths:
        node, path, depth = paths.pop()
        why = _problem(node, depth, surrogates)
        if why is not None:
            at, field = _locate(value, path, where)
            raise RecordError(f"{at}:{field} {why}{tail}")
        if isinstance(node, (dict, list)):
            items = node.items() if isinstance(node, dict) else enumerate(node)
            paths.extend((v, [*path, k], depth + 1) for k, v in reversed(list(items)))


def parse_json(text: str, where: str, expected: str = "") -> Any:
    """``json.loads`` with the reader's rules (no NaN/Infinity/overflow, bounded nesting and digits).

    For JSON held inside a record's string field (LiveCodeBench's tests); errors name ``where``.

    Example:
        >>> parse_json('{"a": [1, 2.5]}', "x.jsonl, line 3, field 'tests'")
        {'a': [1, 2.5]}
        >>> try:
        ...     parse_json('{"a": [1, Infinity]}', "x.jsonl, line 3, field 'tests'")
        ... except RecordError as e:
        ...     print(e)
        x.jsonl, line 3, field 'tests': field 'a[1]': Infinity is not a number here (NaN/Infinity are refused)
    """
    return _Decoder().loads(text, where, expected)


def _check_size(path: str, expected: str) -> None:
    size = os.path.getsize(path)
    if size > MAX_DOCUMENT_BYTES:
        raise RecordError(
            f"{path}: {size} bytes, over the limit of {MAX_DOCUMENT_BYTES} for a file read whole "
            f"(ragen_torchrl.envs.games.records.MAX_DOCUMENT_BYTES); write it as JSON lines; expected {expected}"
        )


def _decode(raw: bytes, where: str, expected: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(
            f"{where}: invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); expected {expected}"
        ) from None


def read_json_document(path: str | os.PathLike, expected: str) -> Any:
    """A whole-file JSON document (array or object) with the reader's rules and size limit.

    Raises:
        RecordError: a missing or oversized file, invalid UTF-8 or JSON, a refused value.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        ...     _ = f.write('{"B01": {"price": 1e999}}')
        >>> try:
        ...     read_json_document(f.name, "an object")
        ... except RecordError as e:
        ...     print(str(e).replace(f.name, "FILE"))
        FILE: field 'B01.price': 1e999 overflows a float; expected an object
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise RecordError(f"{path}: file not found (expected {expected})")
    _check_size(path, expected)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise RecordError(
            f"{path}, line {line}: invalid UTF-8 (byte 0x{raw[exc.start]:02x}); expected {expected}"
        ) from None
    return _Decoder().loads(text, path, expected)


def iter_records(path: str | os.PathLike, expected: str, limit: int | None = None) -> Iterator[tuple[int, dict]]:
    """Records of a JSON-lines file (``.jsonl``/``.json``; a ``.json`` holding one JSON array also
    works) or a parquet file, as ``(line_number, dict)`` pairs (1-based; the row index + 1 for
    arrays and parquet), read lazily: JSON lines past the ``limit``-th record are never read.

    Raises:
        RecordError: a missing file, unreadable JSON, a record that is not an object, a refused
            value or a limit passed (the message names the file, the line, the field and ``expected``).
        ImportError: parquet without pandas or pyarrow installed.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as f:
        ...     _ = f.write('{"q": "a\\u2028b"}\\n{"q": 2}\\n{"q": 3}\\n'.encode())
        >>> list(iter_records(f.name, "field 'q'", limit=2))
        [(1, {'q': 'a\\u2028b'}), (2, {'q': 2})]
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise RecordError(f"{path}: file not found (expected a JSON-lines or parquet file with {expected})")
    if limit is not None and limit <= 0:
        return
    size = os.path.getsize(path)
    if size > MAX_JSONL_BYTES:
        raise RecordError(
            f"{path}: {size} bytes, over the limit of {MAX_JSONL_BYTES} for a data file "
            f"(ragen_torchrl.envs.games.records.MAX_JSONL_BYTES); split it; expected {expected}"
        )
    if path.endswith(".parquet"):
        _check_size(path, expected)
        for i, row in enumerate(_read_parquet(path), 1):
            yield i, _clean_parquet_row(row, f"{path}, line {i}", expected)
            if limit is not None and i >= limit:
                return
        return
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        data = read_json_document(path, expected)
        if not isinstance(data, list):  # "[" then not an array cannot parse; kept for clarity
            raise RecordError(f"{path}: expected a JSON array of records with {expected}")
        for i, rec in enumerate(data, 1):
            if not isinstance(rec, dict):
                raise RecordError(f"{path}, line {i}: expected a JSON object with {expected}, got {type(rec).__name__}")
            yield i, rec
            if limit is not None and i >= limit:
                return
        return
    decoder, count = _Decoder(), 0
    with open(path, "rb") as f:
        for i in range(1, sys.maxsize):
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            where = f"{path}, line {i}"
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise RecordError(
                    f"{where}: longer than {MAX_LINE_BYTES} bytes "
                    f"(ragen_torchrl.envs.games.records.MAX_LINE_BYTES); expected one record per line with {expected}"
                )
            line = _decode(raw, where, expected)
            if not line.strip():
                continue
            rec = decoder.loads(line, where, f"an object with {expected}")
            if not isinstance(rec, dict):
                raise RecordError(f"{where}: expected a JSON object with {expected}, got {type(rec).__name__}")
            count += 1
            if count > MAX_RECORDS:
                raise RecordError(
                    f"{where}: more than {MAX_RECORDS} records (ragen_torchrl.envs.games.records.MAX_RECORDS); "
                    "pass a limit or split the file"
                )
            yield i, rec
            if limit is not None and count >= limit:
                return


def read_records(path: str | os.PathLike, expected: str, limit: int | None = None) -> list[tuple[int, dict]]:
    """:func:`iter_records` as a list (every record up to ``limit``).

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        ...     _ = f.write('[{"q": 1}, {"q": 2}]')
        >>> read_records(f.name, "field 'q'", limit=1)
        [(1, {'q': 1})]
    """
    return list(iter_records(path, expected, limit))


def _clean_parquet_row(row: dict, where: str, expected: str) -> dict:
    """NaN (pandas' missing value) -> ``None``; an infinite float is refused, naming the column."""
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            if v != v:
                v = None
            else:
                raise RecordError(f"{where}: field {k!r}: {v} is not a number here; expected {expected}")
        out[k] = v
    return out


def _read_parquet(path: str) -> list[dict]:
    try:
        import pandas as pd  # noqa: F401
    except ImportError:
        pd = None
    if pd is not None:
        return pd.read_parquet(path).to_dict(orient="records")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            f"{path}: reading parquet needs pandas or pyarrow (pip install pyarrow), or convert the file to JSON lines"
        ) from None
    return pq.read_table(path).to_pylist()
