"""A run dir is never silently shared: a new run refuses a dir that holds another run, and a lock
file marks a run dir in use.

* :func:`check_new_run_dir` (``ragen-train``'s preflight, before Hydra writes anything): a
  ``hydra.run.dir`` (or a sweep job's dir) that already holds a run (:data:`RUN_MARKERS`: its
  summary, a checkpoint, its final policy) is a config error unless ``trainer.resume`` names that
  same dir;
* :func:`lock_run_dir` (``Trainer``, on the main rank, before a resume reads or cleans anything):
  an exclusive ``flock`` on ``<run dir>/.ragen.lock``, held while the trainer lives. A second process
  (two resumes of one dir at once, or two runs that drew the same dir name) gets a config error
  naming the process that holds it. Locks are per process: a process that holds a dir's lock may
  lock it again (a resumed ``Trainer`` built while the first still exists).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> run = Path(tempfile.mkdtemp())
    >>> (run / "checkpoints").mkdir()
    >>> _ = (run / "checkpoints" / "last.pt").write_bytes(b"")
    >>> try:
    ...     check_new_run_dir(run, resume=None)
    ... except ConfigError as e:
    ...     print(str(e).replace(str(run), "RUN").split(";")[0])
    hydra.run.dir=RUN already holds a run (checkpoints/last.pt)
    >>> check_new_run_dir(run, resume=str(run))   # resuming it: fine
    >>> lock = lock_run_dir(run)
    >>> (run / LOCK_FILE).is_file(), lock_run_dir(run).path == lock.path   # the same process may lock again
    (True, True)
"""

from __future__ import annotations

import fcntl
import os
import weakref
from pathlib import Path

from .config_checks import ConfigError

__all__ = [
    "LOCK_FILE",
    "RUN_MARKERS",
    "RunDirInUseError",
    "RunDirLock",
    "check_new_run_dir",
    "lock_run_dir",
    "run_markers",
]

#: the lock file of a run dir in use
LOCK_FILE = ".ragen.lock"
#: what a run leaves in its dir that a new run would replace (its results, checkpoints and final
#: policy); a dir with only logs of a run that never checkpointed may be run again from scratch
RUN_MARKERS = ("summary.json", "checkpoints/last.pt", "checkpoints/prev.pt", "policy")

# realpath -> [fd, holders]: flock conflicts between two open files of one process too, so a
# process locks each dir once and counts its holders
_HELD: dict[str, list[int]] = {}


class RunDirInUseError(ConfigError):
    """Another process holds the run dir's lock (a config error: the CLI exits 2)."""


def run_markers(run_dir: str | os.PathLike, markers: tuple[str, ...] = RUN_MARKERS) -> list[str]:
    """The :data:`RUN_MARKERS` present in ``run_dir`` (``[]`` for a missing or fresh dir).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "summary.json").write_text("{}")
        >>> run_markers(d), run_markers(d / "missing")
        (['summary.json'], [])
    """
    run_dir = Path(run_dir)
    return [m for m in markers if os.path.lexists(run_dir / m)]


def check_new_run_dir(
    run_dir: str | os.PathLike,
    resume: str | os.PathLike | None,
    key: str = "hydra.run.dir",
    markers: tuple[str, ...] = RUN_MARKERS,
) -> None:
    """A :class:`ConfigError` when ``run_dir`` holds a run (``markers``) and ``resume`` does not name it.

    See the module example.
    """
    found = run_markers(run_dir, markers)
    if not found:
        return
    if resume and os.path.realpath(os.path.expanduser(str(resume))) == os.path.realpath(run_dir):
        return
    raise ConfigError(
        f"{key}={run_dir} already holds a run ({', '.join(found)}); a new run never writes over another: "
        f"pick another dir, or continue that run with trainer.resume={run_dir}"
    )


class RunDirLock:
    """A held lock on a run dir (see :func:`lock_run_dir`); released by :meth:`release` or when collected."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self._key = key
        self._finalizer = weakref.finalize(self, _release, key)

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        self._finalizer()


def _release(key: str) -> None:
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] <= 0:
        del _HELD[key]
        os.close(held[0])  # closing the file drops the flock


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


def lock_run_dir(run_dir: str | os.PathLike) -> RunDirLock:
    """Lock ``run_dir`` (created when missing) for this process: ``<run_dir>/.ragen.lock``, an exclusive
    non-blocking ``flock`` holding this process's pid.

    Raises:
        RunDirInUseError: another process holds it.
        ConfigError: the lock file cannot be opened (a symlink planted there, an unwritable dir).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    key = os.path.realpath(run_dir)
    if key in _HELD:
        _HELD[key][1] += 1
        return RunDirLock(path, key)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        raise ConfigError(f"run dir {run_dir}: cannot open its lock file {path} ({e.strerror or e})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        who = _holder(fd)
        os.close(fd)
        raise RunDirInUseError(
            f"run dir {run_dir} is in use by another process{who} (it holds {path}); "
            "two runs never write one dir at once: wait for it to finish"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = [fd, 1]
    return RunDirLock(path, key)
