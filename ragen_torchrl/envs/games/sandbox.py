"""A process sandbox for untrusted Python programs (pure Python, no torch).

Every run is a fresh ``python -I -S -X utf8`` interpreter (no site-packages, no ``PYTHON*``
variables, no script directory on ``sys.path``) running the fixed driver
:mod:`~ragen_torchrl.envs.games.sandbox_driver`, which sets the limits and an audit hook
before the program runs. Layers, outermost first:

* **namespaces** (``isolation="auto"`` when the probe succeeds, or ``"namespace"`` to
  require them): ``unshare --user --map-root-user --net --pid --fork --kill-child``. A new
  network namespace has no interfaces but loopback (no network); a new PID namespace hides
  every other process (``os.kill`` of the trainer cannot even name it) and makes the
  program PID 1, so when it ends the kernel kills whatever it left behind; the user
  namespace drops the capabilities of the real root, so a root parent's limits bind too;
* **the process**: a new session (its group is killed with ``SIGKILL`` when the run ends,
  before the leader is reaped), an empty environment (``env={}``), an empty temporary
  working directory (removed afterwards), stdin from an unnamed temporary file;
* **resource limits** set by the driver: ``RLIMIT_CPU`` (ceil of the timeout),
  ``RLIMIT_AS`` (``memory_mb``), ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, ``RLIMIT_CORE`` 0 and
  ``RLIMIT_NPROC`` 0 (no fork: binding for a non-root user; the kernel exempts uid 0, so for
  a root parent the audit hook and the PID namespace cover it);
* **the audit hook** of the driver (fails closed, also without namespaces): no sockets (the
  ``_socket`` module cannot even be imported), no process creation, no signals to other
  processes, no ``ctypes``, no raising limits, writes only in the working directory, reads
  only there and in the standard library;
* **the parent's reading**: wall-clock timeout, at most ``max_output_bytes`` read from the
  pipes (more kills the run), outputs compared in the parent
  (:mod:`~ragen_torchrl.envs.games.deepcoder_grading`); the expected output never enters
  the child.

Residual risk (documented, not hidden): the audit hook is a policy inside the interpreter,
not a kernel boundary. Without namespaces (``isolation="process"``) and for a parent that
runs as root (the interpreter under ``/root`` cannot be read by another uid, so the child
keeps uid 0) the file and fork rules rest on that hook; a program that corrupts the
interpreter's memory (a CPython bug) could get past it. Run training as a non-root user, or
where ``unshare`` works, for kernel-enforced limits. Disk use is bounded only by
``RLIMIT_FSIZE`` per file and the time limit.

Example:
    >>> box = Sandbox(SandboxLimits(timeout_s=2.0))
    >>> run = box.run_script("print(sum(map(int, input().split())))", stdin="2 3\\n")
    >>> run.status, run.stdout
    ('ok', '5\\n')
    >>> box.call_function("def add(a, b):\\n    return a + b", "add", [2, 3]).value
    5
"""

from __future__ import annotations

import functools
import json
import marshal
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from ragen_torchrl.validation import check_choice, check_int, check_number

from . import sandbox_driver

__all__ = ["Sandbox", "SandboxLimits", "RunResult", "namespaces_available", "ISOLATIONS"]

DRIVER_DIR = os.path.dirname(os.path.abspath(sandbox_driver.__file__))
BOOTSTRAP = sandbox_driver.BOOTSTRAP.format(folder=DRIVER_DIR)
#: ``isolation`` options: namespaces when the probe works, namespaces or an error, none
ISOLATIONS = ("auto", "namespace", "process")
UNSHARE_ARGS = ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--")
#: stderr kept for messages (the rest is read and dropped, but counts toward the output cap)
STDERR_KEEP = 4096


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run.

    Args:
        timeout_s: wall-clock seconds (``RLIMIT_CPU`` is its ceiling, rounded up).
        memory_mb: address space (``RLIMIT_AS``); the interpreter itself needs ~30 MB.
        max_output_bytes: stdout + stderr read before the run is killed.
        max_file_mb: largest file the program may write (``RLIMIT_FSIZE``).
        max_open_files: ``RLIMIT_NOFILE``.

    Example:
        >>> SandboxLimits(timeout_s=0)
        Traceback (most recent call last):
        ...
        ValueError: timeout_s must be in (0, 600], got 0
    """

    timeout_s: float = 2.0
    memory_mb: int = 512
    max_output_bytes: int = 1 << 20
    max_file_mb: int = 16
    max_open_files: int = 64

    def __post_init__(self) -> None:
        t = check_number("timeout_s", self.timeout_s, expected="in (0, 600]")
        if not 0 < t <= 600:
            raise ValueError(f"timeout_s must be in (0, 600], got {self.timeout_s!r}")
        check_int("memory_mb", self.memory_mb, minimum=64)
        check_int("max_output_bytes", self.max_output_bytes, minimum=1)
        check_int("max_file_mb", self.max_file_mb, minimum=1)
        check_int("max_open_files", self.max_open_files, minimum=16)

    def rlimits(self) -> dict[str, tuple[int, int]]:
        """The driver's ``resource`` limits, ``name -> (soft, hard)``."""
        cpu = max(1, math.ceil(self.timeout_s))
        mem = self.memory_mb << 20
        return {
            "RLIMIT_CPU": (cpu, cpu + 1),
            "RLIMIT_AS": (mem, mem),
            "RLIMIT_FSIZE": (self.max_file_mb << 20, self.max_file_mb << 20),
            "RLIMIT_NOFILE": (self.max_open_files, self.max_open_files),
            "RLIMIT_CORE": (0, 0),
            "RLIMIT_NPROC": (0, 0),
        }


@dataclass
class RunResult:
    """What one run did.

    ``status``: ``"ok"`` (exit 0), ``"error"`` (non-zero exit or killed by a signal),
    ``"compile_error"`` (the program does not compile), ``"timeout"`` (wall clock or CPU
    limit), ``"output_limit"`` (more than ``max_output_bytes``). ``value``/``has_value``:
    the function's decoded return value in call mode.

    Example:
        >>> run = Sandbox().run_script("import sys; sys.exit(2)")
        >>> run.status, run.returncode, run.ok
        ('error', 2, False)
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    value: Any = None
    has_value: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@functools.lru_cache(maxsize=4)
def namespaces_available(python: str = sys.executable) -> bool:
    """Whether ``unshare`` can give a run its own user, network and PID namespaces here
    (probed once per interpreter path).

    Example:
        >>> isinstance(namespaces_available(), bool)
        True
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        probe = subprocess.run(
            [unshare, *UNSHARE_ARGS, python, "-I", "-S", "-c", "pass"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            env={},
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _read_roots() -> list[str]:
    paths = sysconfig.get_paths()
    roots = {paths["stdlib"], paths["platstdlib"]}
    roots.add(os.path.join(os.path.dirname(paths["stdlib"]), f"python{sys.version_info[0]}{sys.version_info[1]}.zip"))
    return sorted(r for r in roots if r)


class Sandbox:
    """Runs untrusted Python programs, one fresh process per run (see the module docstring).

    Args:
        limits: :class:`SandboxLimits` of every run.
        isolation: ``"auto"`` (namespaces when :func:`namespaces_available`), ``"namespace"``
            (raise ``RuntimeError`` without them) or ``"process"`` (no namespaces).
        python: the interpreter (default: the running one).
        tmp_root: where the per-run working directories are made (default: the system's).

    Thread-safe: runs share nothing, so a thread pool may call it concurrently.

    Example:
        >>> Sandbox(isolation="process").run_script("import os; print(os.environ.get('HOME'))").stdout
        'None\\n'
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        isolation: str = "auto",
        python: str | None = None,
        tmp_root: str | os.PathLike | None = None,
    ) -> None:
        self.limits = limits if limits is not None else SandboxLimits()
        if not isinstance(self.limits, SandboxLimits):
            raise ValueError(f"limits must be a SandboxLimits, got {type(self.limits).__name__}")
        check_choice("isolation", isolation, ISOLATIONS)
        self.python = python or sys.executable
        self.tmp_root = None if tmp_root is None else os.fspath(tmp_root)
        use_ns = isolation != "process" and namespaces_available(self.python)
        if isolation == "namespace" and not use_ns:
            raise RuntimeError("isolation='namespace': unshare cannot create user/net/pid namespaces here")
        self.isolation = "namespace" if use_ns else "process"
        self._prefix = [shutil.which("unshare") or "unshare", *UNSHARE_ARGS] if use_ns else []
        self._roots = _read_roots()

    # ------------------------------------------------------------------ public API
    def run_script(self, code: str, stdin: str = "") -> RunResult:
        """Run ``code`` as ``__main__`` with ``stdin``; ``stdout`` is its output."""
        return self._run(code, "script", stdin.encode("utf-8", "surrogatepass"))

    def call_function(self, code: str, fn_name: str, args: list) -> RunResult:
        """Define ``code`` and call ``fn_name(*args)`` (or ``Solution().fn_name``); the
        JSON-decoded return value is ``result.value`` when ``result.has_value``."""
        token = secrets.token_hex(16)
        request = json.dumps({"token": token, "args": list(args), "fn_name": str(fn_name)})
        run = self._run(code, "call", request.encode("utf-8"))
        if run.status == "ok":
            marker = token + " "
            for line in run.stdout.splitlines():
                if line.startswith(marker):
                    try:
                        run.value, run.has_value = json.loads(line[len(marker) :]), True
                    except ValueError:
                        pass
            if not run.has_value:
                run.status = "error"
        run.stdout = ""  # only the value counts in call mode
        return run

    def compiles(self, sources: list[str]) -> list[bool | None]:
        """Whether each program compiles, checked in one sandboxed process (nothing runs);
        ``None`` for all when the check itself failed.

        Example:
            >>> Sandbox().compiles(["print(1)", "def f(:"])
            [True, False]
        """
        sources = [s if isinstance(s, str) else "" for s in sources]
        if not sources:
            return []
        run = self._run("", "compile", marshal.dumps(sources))
        flags = run.stdout.strip()
        if run.status != "ok" or len(flags) != len(sources) or set(flags) - {"0", "1"}:
            return [None] * len(sources)
        return [f == "1" for f in flags]

    # ------------------------------------------------------------------ one run
    def _run(self, code: str, mode: str, stdin: bytes) -> RunResult:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        workdir = tempfile.mkdtemp(prefix="ragen_sandbox_", dir=self.tmp_root)
        proc = None
        start = time.perf_counter()
        try:
            with open(os.path.join(workdir, "solution.py"), "wb") as f:
                f.write(code.encode("utf-8", "surrogatepass"))
            cfg = {"workdir": workdir, "mode": mode, "read_roots": self._roots, "rlimits": self.limits.rlimits()}
            cmd = [*self._prefix, self.python, "-I", "-S", "-X", "utf8", "-c", BOOTSTRAP, marshal.dumps(cfg).hex()]
            with tempfile.TemporaryFile() as stdin_file:
                stdin_file.write(stdin)
                stdin_file.seek(0)
                proc = subprocess.Popen(
                    cmd,
                    stdin=stdin_file,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=workdir,
                    env={},
                    start_new_session=True,
                    close_fds=True,
                )
            out, err, timed_out, over = self._collect(proc, start)
            self._kill_group(proc)
            rc = proc.wait()
            proc = None
        finally:
            if proc is not None:  # an exception while running: nothing may survive it
                self._kill_group(proc)
                proc.wait()
            shutil.rmtree(workdir, onerror=_force_remove)
        wall = time.perf_counter() - start
        if timed_out or rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
            status = "timeout"
        elif over:
            status = "output_limit"
        elif rc == 0:
            status = "ok"
        elif rc == sandbox_driver.COMPILE_ERROR:
            status = "compile_error"
        else:
            status = "error"
        stdout = out.decode("utf-8", "replace")
        stderr = err[:STDERR_KEEP].decode("utf-8", "replace")
        return RunResult(status, rc, stdout, stderr, wall)

    def _collect(self, proc: subprocess.Popen, start: float) -> tuple[bytes, bytes, bool, bool]:
        """Read stdout/stderr until both close, the deadline, or the output cap."""
        deadline = start + self.limits.timeout_s
        cap = self.limits.max_output_bytes
        out, err = bytearray(), bytearray()
        total = 0
        sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        timed_out = over = False
        try:
            while sel.get_map():
                left = deadline - time.perf_counter()
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(timeout=left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    total += len(chunk)
                    buf = key.data
                    if buf is out:
                        buf += chunk[: max(0, cap + 1 - len(out))]
                    elif len(err) < STDERR_KEEP:
                        buf += chunk[: STDERR_KEEP - len(err)]
                    if total > cap:
                        over = True
                        break
                if over:
                    break
            # pipes closed: wait for the exit without reaping (the group id stays reserved)
            while not (timed_out or over) and not _exited(proc.pid):
                if time.perf_counter() >= deadline:
                    timed_out = True
                    break
                time.sleep(0.002)
        finally:
            sel.close()
            proc.stdout.close()
            proc.stderr.close()
        return bytes(out[:cap]), bytes(err), timed_out, over

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        # the leader is not reaped yet, so its process group id cannot have been reused
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _exited(pid: int) -> bool:
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _force_remove(func: Any, path: str, exc_info: Any) -> None:
    # a program may chmod its files or directories read-only: restore and retry once
    try:
        os.chmod(os.path.dirname(path) or ".", 0o700)
        os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass
