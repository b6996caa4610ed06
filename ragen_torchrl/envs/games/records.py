"""Data-file records of the dataset-backed games (Countdown, MetaMathQA).

:func:`read_records` reads JSON lines (``.jsonl`` / ``.json``), a ``.json`` file holding one JSON
array, or a parquet file (with pandas or pyarrow) into ``(line_number, dict)`` pairs, with
errors that name the file, the line and the fields the caller expects.

Example:
    >>> import json, tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write(json.dumps({"target": 24, "nums": [3, 4, 6]}) + "\\n")
    >>> read_records(f.name, "fields 'target' and 'nums'")
    [(1, {'target': 24, 'nums': [3, 4, 6]})]
"""

from __future__ import annotations

import json
import os

__all__ = ["read_records"]


def read_records(path: str | os.PathLike, expected: str) -> list[tuple[int, dict]]:
    """Records of a JSON-lines file (``.jsonl``/``.json``; a ``.json`` holding one JSON
    array also works) or a parquet file, as ``(line_number, dict)`` pairs (1-based; the
    row index + 1 for arrays and parquet).

    Raises:
        ValueError: missing file, unreadable JSON, a record that is not an object (the
            message names the file, the line and ``expected``).
        ImportError: parquet without pandas or pyarrow installed.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: file not found (expected a JSON-lines or parquet file with {expected})")
    if path.endswith(".parquet"):
        rows = _read_parquet(path)
        out = []
        for i, row in enumerate(rows, 1):
            out.append((i, row))
        return out
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON array ({exc}); expected records with {expected}") from None
        pairs = list(enumerate(data, 1))
    else:
        pairs = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                pairs.append((i, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{path}, line {i}: invalid JSON ({exc.msg}); expected an object with {expected}"
                ) from None
    for i, rec in pairs:
        if not isinstance(rec, dict):
            raise ValueError(f"{path}, line {i}: expected a JSON object with {expected}, got {type(rec).__name__}")
    return pairs


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
