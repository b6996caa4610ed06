"""One build per cache key across processes: the tiny models and the SFT warm starts.

A cached build lives in a directory named by a hash of its inputs (``tiny-qwen2-<hash>``,
``sft-<hash>``). Two runs started together with the same inputs (``ragen-experiment --jobs 2``, a
Hydra multirun with a parallel launcher, two terminals) would both find it missing and both build
it: correct, since each writes to a temporary directory renamed into place at the end, but a warm
start is minutes of CPU. :func:`build_once` holds a lock file next to the target (``<target>.lock``,
:mod:`filelock`) while it builds, so the second process waits for the first and then reuses its build.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

__all__ = ["build_once", "has_config"]


def has_config(target: Path) -> bool:
    """Whether ``target`` holds a saved model (its ``config.json``)."""
    return (target / "config.json").is_file()


def build_once(target: str | Path, build: Callable[[], object], ready: Callable[[Path], bool] = has_config) -> str:
    """Return ``target`` once it is ``ready``, calling ``build()`` only if no process has built it.

    ``build`` must leave ``target`` ready (write elsewhere, then rename into place, so a reader
    never sees half a build). While one process builds, another calling this for the same target
    waits on the lock, finds the target ready and returns without building.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "sft-abc"
        >>> calls = []
        >>> def build():
        ...     calls.append(1)
        ...     target.mkdir()
        ...     _ = (target / "config.json").write_text("{}")
        >>> build_once(target, build) == str(target), build_once(target, build) == str(target), len(calls)
        (True, True, 1)
    """
    target = Path(target)
    if ready(target):
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not ready(target):  # another process may have built it while this one waited
            build()
            if not ready(target):
                raise RuntimeError(f"the build of {target} finished without leaving a model there")
    return str(target)
