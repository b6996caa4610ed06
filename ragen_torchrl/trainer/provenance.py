"""What produced a run and what it cost: code version, packages, machine, and time per phase.

:func:`run_provenance` is recorded once per run in ``summary.json`` (``"provenance"``) and in
TensorBoard's HParams tab; :class:`PhaseClock` splits a run's wall and CPU time into phases
(rollout, diagnostics, filter, update, validation, warm start, ...) so a reader can tell where the
time went and whether the machine was shared (CPU seconds well below wall seconds, or a high load
average, mean the process was waiting for the cores).

Example:
    >>> p = run_provenance()
    >>> sorted(p)
    ['git', 'machine', 'versions']
    >>> p["versions"]["python"].count(".") >= 1 and p["machine"]["cpu_count"] >= 1
    True
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "PACKAGES",
    "PhaseClock",
    "cpu_seconds",
    "git_state",
    "load_average",
    "machine_info",
    "package_versions",
    "run_provenance",
    "run_totals",
]

#: distribution name -> import name of the packages whose versions a run records
PACKAGES = {
    "ragen-torchrl": "ragen_torchrl",
    "torch": "torch",
    "torchrl": "torchrl",
    "tensordict": "tensordict",
    "transformers": "transformers",
}
#: seconds any git call may take before the run records the commit as unknown
GIT_TIMEOUT_S = 10.0


def _git(repo: Path, *args: str) -> bytes | None:
    """``git -C repo args...`` stdout, or ``None`` when git is missing, fails or hangs."""
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(source: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The git commit of the package source, whether its work tree is dirty, and a hash of the changes.

    ``source`` is a file or folder of the package (default: this package). ``None`` when it is not
    inside a git checkout that tracks it (an installed wheel, a copied tree) or git is unavailable.
    ``dirty`` counts tracked changes and untracked files (ignored files are not changes);
    ``diff_hash`` is the first 12 hex digits of the SHA-256 of ``git diff HEAD --binary`` plus the
    untracked files' names and contents, so two runs with the same hash ran the same code; it is
    ``None`` on a clean tree.

    Example:
        >>> import tempfile
        >>> git_state(tempfile.mkdtemp()) is None   # not a git checkout
        True
        >>> s = git_state()
        >>> s is None or (len(s["commit"]) == 40 and isinstance(s["dirty"], bool))
        True
    """
    path = Path(source) if source is not None else Path(__file__).resolve().parent.parent
    folder = path if path.is_dir() else path.parent
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top is None:
        return None
    root = Path(top.decode().strip())
    # a wheel installed into a venv that lives inside some git repo is not that repo's code
    rel = path.resolve().relative_to(root.resolve()) if path.resolve().is_relative_to(root.resolve()) else None
    if rel is None or _git(root, "ls-files", "--error-unmatch", "--", str(rel)) is None:
        return None
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=all")
    if commit is None or status is None:
        return None
    dirty = bool(status.strip())
    diff_hash = None
    if dirty:
        h = hashlib.sha256(_git(root, "diff", "HEAD", "--binary") or b"")
        untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z") or b""
        for name in sorted(n for n in untracked.split(b"\0") if n):
            h.update(b"\0untracked\0" + name + b"\0")
            try:
                h.update((root / name.decode(errors="surrogateescape")).read_bytes())
            except OSError:
                pass
        diff_hash = h.hexdigest()[:12]
    return {"commit": commit.decode().strip(), "dirty": dirty, "diff_hash": diff_hash, "root": str(root)}


def package_versions() -> dict[str, str | None]:
    """Versions of python and :data:`PACKAGES` (``None`` for a package that is not installed).

    Example:
        >>> v = package_versions()
        >>> list(v) == ["python", *PACKAGES] and v["torch"] is not None
        True
    """
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for dist, module in PACKAGES.items():
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            # a source tree on PYTHONPATH without installed metadata: the module may still say
            try:
                versions[dist] = str(getattr(__import__(module), "__version__"))
            except (ImportError, AttributeError):
                versions[dist] = None
    return versions


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (``None`` where the OS has none).

    Example:
        >>> la = load_average()
        >>> la is None or (len(la) == 3 and all(x >= 0 for x in la))
        True
    """
    try:
        return [float(x) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """Torch threads, CPU count, the CPUs this process may run on, host and platform.

    Example:
        >>> m = machine_info()
        >>> m["torch_threads"] >= 1 and m["affinity_count"] <= m["cpu_count"]
        True
    """
    import torch

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        affinity = os.cpu_count()
    return {
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "affinity_count": affinity,
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cuda": torch.cuda.is_available(),
    }


def run_provenance(source: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{"git": git_state(source), "versions": package_versions(), "machine": machine_info()}``."""
    return {"git": git_state(source), "versions": package_versions(), "machine": machine_info()}


def cpu_seconds() -> float:
    """CPU seconds (user + system, every thread) of this process and of its waited-for children.

    Children count once they have exited and been waited for (sandboxed programs, git calls).

    Example:
        >>> a = cpu_seconds(); _ = sum(i * i for i in range(3 * 10**6)); cpu_seconds() > a  # ticks are 10 ms
        True
    """
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class PhaseClock:
    """Wall and CPU seconds per named phase: every moment belongs to the phase last entered.

    :meth:`enter` switches phase and returns the previous one (so a nested phase, such as a
    validation in the middle of the loop, can hand the clock back). The phases' seconds add up to
    the clock's total, so nothing is counted twice and nothing is lost.

    Example:
        >>> clock = PhaseClock(phase="setup")
        >>> outer = clock.enter("rollout")
        >>> _ = clock.enter("validation"); _ = clock.enter(outer)
        >>> p = clock.phases()
        >>> list(p), sorted(p["rollout"])
        (['setup', 'rollout', 'validation', 'total'], ['cpu', 'wall'])
        >>> abs(sum(p[k]["wall"] for k in p if k != "total") - p["total"]["wall"]) < 1e-9
        True
    """

    def __init__(self, phase: str = "other") -> None:
        self.load_start = load_average()
        self._seconds: dict[str, list[float]] = {}
        self._phase = phase
        self._wall, self._cpu = time.perf_counter(), cpu_seconds()

    @property
    def phase(self) -> str:
        """The phase the clock is in now."""
        return self._phase

    def enter(self, phase: str) -> str:
        """Charge the time since the last switch to the current phase, switch to ``phase``; returns the old one."""
        wall, cpu = time.perf_counter(), cpu_seconds()
        acc = self._seconds.setdefault(self._phase, [0.0, 0.0])
        acc[0] += wall - self._wall
        acc[1] += cpu - self._cpu
        self._wall, self._cpu = wall, cpu
        previous, self._phase = self._phase, phase
        return previous

    def phases(self) -> dict[str, dict[str, float]]:
        """``{phase: {"wall": s, "cpu": s}, ..., "total": {...}}`` up to now (phases in first-entered order)."""
        self.enter(self._phase)
        out = {k: {"wall": w, "cpu": c} for k, (w, c) in self._seconds.items()}
        out["total"] = {
            "wall": sum(v["wall"] for v in out.values()),
            "cpu": sum(v["cpu"] for v in out.values()),
        }
        return out

    def state_dict(self) -> dict[str, Any]:
        """The seconds so far (a resumed run adds its own to them)."""
        self.enter(self._phase)
        return {"seconds": {k: list(v) for k, v in self._seconds.items()}, "load_start": self.load_start}

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Add the seconds of :meth:`state_dict` (an earlier, interrupted part of the run) to this clock."""
        for k, (w, c) in ((state or {}).get("seconds") or {}).items():
            acc = self._seconds.setdefault(k, [0.0, 0.0])
            acc[0] += float(w)
            acc[1] += float(c)


def _total(history: Iterable[Mapping[str, Any]], tag: str) -> float:
    return float(sum(float(h[tag]) for h in history if isinstance(h.get(tag), (int, float))))


def run_totals(history: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Optimizer steps, trained samples (trajectories) and trained tokens over a run's history.

    ``trained_samples`` sums ``train/trajectories`` (the trajectories each update trained on, after
    any filter; counted once per iteration, not once per epoch) and ``trained_tokens`` sums
    ``train/assistant_tokens`` (their assistant tokens, the tokens in the loss). An iteration whose
    update was skipped adds nothing.

    Example:
        >>> run_totals([{"train/optimizer_steps": 2.0, "train/trajectories": 64.0, "train/assistant_tokens": 900.0},
        ...             {"filter/skipped_update": 1.0},
        ...             {"train/optimizer_steps": 1.0, "train/trajectories": 20.0, "train/assistant_tokens": 300.0}])
        {'optimizer_steps': 3.0, 'trained_samples': 84.0, 'trained_tokens': 1200.0, 'updates': 2.0}
    """
    history = list(history)
    return {
        "optimizer_steps": _total(history, "train/optimizer_steps"),
        "trained_samples": _total(history, "train/trajectories"),
        "trained_tokens": _total(history, "train/assistant_tokens"),
        "updates": float(sum(1 for h in history if "train/optimizer_steps" in h)),
    }
