"""A run's machine-readable summary: ``<run_dir>/summary.json``, written at the end of ``Trainer.fit``.

Other tools (``ragen-eval``, reports over a sweep) read it, so its top-level keys are fixed
(:data:`SUMMARY_KEYS`)::

    {"config": {...},                      # the resolved run config
     "val_start": {...} | null,            # validation stats before training (null on a resumed run)
     "val_end": {...} | null,              # validation stats at the end
     "val_peak": {"success", "stderr", "iteration", "levels"} | null,  # the best validation (RAGEN-2's metric)
     "history": [{"iteration": 1, "<tag>": float, ...}, ...],  # every scalar logged per iteration
     "seconds": float,                     # wall time of this fit() call
     "iterations": int,                    # trainer.total_iterations (an early stop: stop_reason, history)
     "stop_reason": str | null,
     "run_dir": str, "final_policy": "<run_dir>/policy" | null,
     # what produced the run and what it cost (optional: older summaries lack them)
     "provenance": {"git": {"commit", "dirty", "diff_hash", "root"} | null,
                    "versions": {"python", "ragen-torchrl", "torch", "torchrl", "tensordict", "transformers"},
                    "machine": {"torch_threads", "torch_interop_threads", "cpu_count", "affinity_count", ...},
                    "load_start": [1, 5, 15 min] | null, "load_end": [...] | null},
     "phases": {"<phase>": {"wall": s, "cpu": s}, ..., "total": {...}},  # warm_start, rollout, diagnostics,
               # filter, update, validation, checkpoint, export, final_eval, setup, other (``Trainer.clock``)
     "totals": {"optimizer_steps", "trained_samples", "trained_tokens", "updates"},
     # with trainer.final_eval.levels > 0 and a policy exported: final_eval.json's content (trainer/final_eval.py)
     "final_eval": {"levels", "temperatures", "policies", "results": {policy: {mode: {...}}}, ...}}

``phases`` cover the whole process from the start of ``Trainer`` (the warm start included) to the
summary, CPU seconds include exited child processes (sandboxed programs); ``trained_samples`` are
the trajectories the updates trained on (after any filter), ``trained_tokens`` their assistant
tokens (:func:`~ragen_torchrl.trainer.provenance.run_totals`).

NaN and infinite values are written as JSON ``null`` (the file is strict JSON), and the file
is replaced atomically (a reader sees the old summary or the new one, never a partial file).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> p = Path(tempfile.mkdtemp()) / "summary.json"
    >>> _ = write_summary(p, config={"seed": 0}, val_start=None, val_end={"success": 0.5},
    ...                   history=[{"iteration": 1, "train/loss": float("nan")}], seconds=1.5,
    ...                   iterations=1, stop_reason=None, run_dir="outputs/r", final_policy=None)
    >>> s = read_summary(p)
    >>> s["history"], s["val_end"]
    ([{'iteration': 1, 'train/loss': None}], {'success': 0.5})
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..safe_io import UnsafeFileError, read_bytes_inside, write_text_atomic

__all__ = [
    "MAX_SUMMARY_BYTES",
    "OPTIONAL_KEYS",
    "SUMMARY_FILE",
    "SUMMARY_KEYS",
    "json_safe",
    "read_summary",
    "write_summary",
]

SUMMARY_FILE = "summary.json"
#: the top-level keys of a summary, in file order
SUMMARY_KEYS = (
    "config",
    "val_start",
    "val_end",
    "val_peak",
    "history",
    "seconds",
    "iterations",
    "stop_reason",
    "run_dir",
    "final_policy",
)
#: bytes of a ``summary.json`` that is read (a 100,000-iteration run's is ~200 MiB)
MAX_SUMMARY_BYTES = 256 << 20
#: top-level keys a summary has when it was written with them (after :data:`SUMMARY_KEYS`, in this order)
OPTIONAL_KEYS = ("provenance", "phases", "totals")


def json_safe(obj: Any) -> Any:
    """``obj`` with NaN/inf floats replaced by ``None`` and scalars (numpy, torch) made plain Python.

    Example:
        >>> json_safe({"a": [1.0, float("nan")], "b": float("-inf"), "c": (1, "x")})
        {'a': [1.0, None], 'b': None, 'c': [1, 'x']}
    """
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        try:
            obj = obj.item()
        except (TypeError, ValueError):
            return str(obj)
        return json_safe(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as strict JSON (NaN/inf -> ``null``) to ``path`` atomically
    (:func:`~ragen_torchrl.safe_io.write_text_atomic`: a fresh ``O_EXCL | O_NOFOLLOW`` temp file, then
    ``os.replace``; a symlink planted in the directory is never written through).

    Example:
        >>> import tempfile
        >>> p = write_json_atomic(Path(tempfile.mkdtemp()) / "x.json", {"v": float("inf")})
        >>> p.read_text()
        '{\\n  "v": null\\n}\\n'
    """
    text = json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n"
    return write_text_atomic(path, text)


def write_summary(
    path: str | os.PathLike,
    *,
    config: Mapping[str, Any],
    val_start: Mapping[str, float] | None,
    val_end: Mapping[str, float] | None,
    history: list[Mapping[str, Any]],
    seconds: float,
    iterations: int,
    stop_reason: str | None,
    run_dir: str | os.PathLike,
    final_policy: str | os.PathLike | None,
    val_peak: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    phases: Mapping[str, Mapping[str, float]] | None = None,
    totals: Mapping[str, float] | None = None,
    final_eval: Mapping[str, Any] | None = None,
) -> Path:
    """Write a run summary (schema in the module docstring) to ``path`` atomically; returns the path.

    Example:
        >>> import tempfile
        >>> p = write_summary(Path(tempfile.mkdtemp()) / "summary.json", config={}, val_start=None,
        ...                   val_end=None, history=[], seconds=0.0, iterations=0, stop_reason=None,
        ...                   run_dir="r", final_policy=None)
        >>> list(read_summary(p)) == list(SUMMARY_KEYS)
        True
    """
    summary = {
        "config": dict(config),
        "val_start": None if val_start is None else dict(val_start),
        "val_end": None if val_end is None else dict(val_end),
        "val_peak": None if val_peak is None else dict(val_peak),
        "history": [dict(h) for h in history],
        "seconds": float(seconds),
        "iterations": int(iterations),
        "stop_reason": None if stop_reason is None else str(stop_reason),
        "run_dir": str(run_dir),
        "final_policy": None if final_policy is None else str(final_policy),
    }
    for key, value in (("provenance", provenance), ("phases", phases), ("totals", totals), ("final_eval", final_eval)):
        if value is not None:
            summary[key] = dict(value)
    return write_json_atomic(path, summary)


def read_summary(path: str | os.PathLike) -> dict[str, Any]:
    """Load a summary written by :func:`write_summary` (a run dir is accepted too: its ``summary.json``).

    A run dir's ``summary.json`` that is a symlink leading out of the dir is refused, and so is a file
    over :data:`MAX_SUMMARY_BYTES`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not JSON, lacks one of :data:`SUMMARY_KEYS`, leads out of its run
            dir or is too large.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "summary.json").write_text('{"config": {}}')
        >>> try:
        ...     read_summary(d)
        ... except ValueError as e:
        ...     print(str(e).split(": ", 1)[1])
        not a run summary (missing ['val_start', 'val_end', 'val_peak', 'history', 'seconds', 'iterations', 'stop_reason', 'run_dir', 'final_policy'])
    """
    path = Path(path)
    root = None
    if path.is_dir():
        root, path = path, path / SUMMARY_FILE
    try:
        data = json.loads(read_bytes_inside(path, root, MAX_SUMMARY_BYTES).decode("utf-8"))
    except UnsafeFileError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({' '.join(str(e).split())[:200]})") from None
    except RecursionError:
        raise ValueError(f"{path}: not a run summary (nested too deeply)") from None
    missing = [k for k in SUMMARY_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        raise ValueError(f"{path}: not a run summary (missing {missing})")
    return data
