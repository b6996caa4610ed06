"""The child side of :mod:`ragen_torchrl.envs.games.sandbox` (standard library only).

The parent runs ``python -I -S -X utf8 -c BOOTSTRAP CONFIG`` in an empty temporary working
directory with an empty environment; :data:`BOOTSTRAP` imports this module from its folder
(so the cached bytecode is used), takes that folder off ``sys.path`` again and calls
:func:`main` with ``CONFIG``, the hex of a :mod:`marshal`-ed dict (no ``json`` import on the
hot path: a run costs about one bare interpreter start). Before any untrusted code runs it

1. sets the resource limits of the config (CPU seconds, address space, file size, open files,
   core dumps, and processes: binding for a non-root user; inside a user namespace a root
   child cannot raise them again either);
2. installs an audit hook (:pep:`578`; a second layer: under ``isolation="bwrap"`` the
   kernel is the boundary, under ``"weak"`` this hook is all there is and it can be switched
   off from inside, see :mod:`~ragen_torchrl.envs.games.sandbox`) that fails closed: no sockets, no process creation
   (fork, exec, spawn, ``subprocess``, ``os.system``), no signals to other processes, no
   ``ctypes``, no raising of limits, no ``chdir``, no links, no code-object forgery, no
   ``gc`` object walks; files may be written only inside the working directory and read only
   there and in the interpreter's standard library, except the package directories and
   the trainer's package (``denied``);
3. runs the program: ``script`` mode executes it as ``__main__`` (stdin and stdout are the
   test's); ``call`` mode reads ``{"token", "args"}`` from stdin, executes the program as a
   module (its prints go to stderr), calls the function (or the method of ``Solution()``) and
   writes ``token + " " + json(result)`` on the saved stdout.

The program's source comes first on stdin (8 bytes of big-endian length, then the UTF-8
text; the test's input follows), so no file of the run exists before it starts.

The verdict is never computed here: the parent compares the captured output or the decoded
JSON value with the expected one, which never enters the child.

Exit codes: the program's own; :data:`COMPILE_ERROR` when ``solution.py`` does not compile
(the parent then skips the submission's other tests). A third mode, ``compile``, compiles a
marshalled list of programs without running any and prints one ``0``/``1`` per program: the
parent checks a whole batch in one process instead of one process per broken program.

Example (the parent builds the config; shown here for its shape):
    >>> sorted(default_config("/tmp/x", "script"))  # doctest: +NORMALIZE_WHITESPACE
    ['denied', 'hook', 'mode', 'read_roots', 'rlimits', 'workdir']
"""

import sys

#: the ``-c`` program of the child (``{folder!r}`` is this module's folder)
BOOTSTRAP = "import sys; sys.path.insert(0, {folder!r}); import sandbox_driver as d; del sys.path[0]; d.main(sys.argv)"
#: bytes of the source length that opens stdin
SOURCE_HEADER = 8
#: exit code of a program that does not compile
COMPILE_ERROR = 3
#: modules that give a way around the audit hook or to the network
DENIED_IMPORTS = frozenset(
    {"ctypes", "_ctypes", "_posixsubprocess", "_posixshmem", "_socket", "_testcapi", "_testinternalcapi"}
    | {"_xxsubinterpreters"}
)
#: audit events refused outright (prefix match)
DENIED_PREFIXES = (
    "socket.",
    "ctypes.",
    "subprocess.",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.startfile",
    "os.killpg",
    "os.chdir",
    "os.symlink",
    "os.link",
    "os.chown",
    "os.chflags",
    "os.lchflags",
    "os.setxattr",
    "os.removexattr",
    "pty.",
    "resource.setrlimit",
    "resource.prlimit",
    "code.__new__",
    "function.__new__",
    "gc.get_",
    "sys.addaudithook",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
    "imaplib.",
    "poplib.",
    "nntplib.",
    "telnetlib.",
    "webbrowser.",
)
#: write-like filesystem events: event -> (indices of path arguments, indices of dir_fd arguments)
WRITE_EVENTS = {
    "os.mkdir": ((0,), (2,)),
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.chmod": ((0,), (2,)),
    "os.utime": ((0,), (3,)),
    "os.truncate": ((0,), ()),
}
READ_EVENTS = ("os.listdir", "os.scandir")
#: ``os``/``posix`` functions without an audit event that reach other processes or make special files
UNAUDITED_OS = ("pidfd_open", "mkfifo", "mknod", "setns", "unshare")


def default_config(workdir, mode):
    """A minimal config (the parent sends the real one)."""
    return {"workdir": workdir, "mode": mode, "read_roots": [], "denied": [], "rlimits": {}, "hook": True}


def _under(p, allowed, sep="/"):
    return any(p == r or p.startswith(r.rstrip(sep) + sep) for r in allowed)


def readable(path, read_roots, denied):
    """Whether the hook lets a program read ``path`` (an absolute, resolved path) outside its
    working directory: under a read root and under no denied directory.

    Example:
        >>> readable("/lib/py/os.py", ["/lib/py"], ["/lib/py/site-packages"])
        True
        >>> readable("/lib/py/site-packages/x.json", ["/lib/py"], ["/lib/py/site-packages"])
        False
    """
    return _under(path, read_roots) and not _under(path, denied)


def _set_limits(rlimits):
    import resource

    for name, (soft, hard) in rlimits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))


def _install_hook(workdir, read_roots, denied=(), enabled=True):
    if not enabled:  # tests of the kernel sandbox: as if the program had switched the hook off
        return
    import os

    realpath, fspath, fsdecode, isdir, getpid = os.path.realpath, os.fspath, os.fsdecode, os.path.isdir, os.getpid
    sep = os.sep
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    work = realpath(workdir)
    roots = tuple(realpath(r) for r in read_roots) + ("/dev/null", "/dev/urandom")
    denied = tuple(realpath(d) for d in denied) + tuple(denied)
    me = getpid()
    busy = [False]

    def resolve(path):
        p = realpath(fspath(path))
        return fsdecode(p) if isinstance(p, bytes) else p

    def under(p, allowed):
        return any(p == r or p.startswith(r + sep) for r in allowed)

    def check_path(path, write, opening=False):
        if isinstance(path, int) or path is None:
            return  # an already open descriptor (opened under this policy) or the default
        p = resolve(path)
        if under(p, (work,)):
            return
        if write or not under(p, roots) or under(p, denied):
            raise PermissionError(f"sandbox: access to {p!r} is not allowed")
        if opening and isdir(p):  # a directory descriptor outside would let dir_fd paths escape the check
            raise PermissionError(f"sandbox: opening the directory {p!r} is not allowed")

    def hook(event, args):
        if busy[0]:
            return
        if event == "import":
            if args[0].split(".")[0] in DENIED_IMPORTS:
                raise ImportError(f"sandbox: import of {args[0]!r} is not allowed")
            return
        if event.startswith(DENIED_PREFIXES):
            raise PermissionError(f"sandbox: {event} is not allowed")
        busy[0] = True
        try:
            if event == "open":
                path, mode, flags = args
                write = bool(flags & write_flags) if isinstance(flags, int) else False
                write = write or (isinstance(mode, str) and any(c in mode for c in "wax+"))
                check_path(path, write, opening=True)
            elif event in WRITE_EVENTS:
                paths, dirfds = WRITE_EVENTS[event]
                for i in dirfds:
                    if i < len(args) and isinstance(args[i], int) and args[i] != -1:
                        raise PermissionError(f"sandbox: {event} with dir_fd is not allowed")
                for i in paths:
                    check_path(args[i], True)
            elif event in READ_EVENTS:
                check_path(args[0], False)
            elif event == "os.kill":
                if args[0] != me:
                    raise PermissionError("sandbox: signals to other processes are not allowed")
        finally:
            busy[0] = False

    sys.addaudithook(hook)
    # calls that raise no audit event: removed (best effort; the PID namespace is the real fence)
    import _signal  # not signal: its enum classes cost more than a whole bare interpreter start
    import posix

    modules = [(posix, UNAUDITED_OS), (os, UNAUDITED_OS), (_signal, ("pidfd_send_signal",))]
    if "signal" in sys.modules:  # a later ``import signal`` copies from _signal, already without it
        modules.append((sys.modules["signal"], ("pidfd_send_signal",)))
    for module, names in modules:
        for name in names:
            if hasattr(module, name):
                delattr(module, name)


def _read_exact(fd, n):
    import os

    parts = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _read_source():
    # exactly the source's bytes from fd 0: the rest of stdin stays the program's input
    return _read_exact(0, int.from_bytes(_read_exact(0, SOURCE_HEADER), "big"))


def _compile(source):
    try:
        return compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        sys.exit(COMPILE_ERROR)


def _compiles(source):
    try:
        compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return "0"
    return "1"


def main(argv):
    import builtins
    import marshal
    import os

    cfg = marshal.loads(bytes.fromhex(argv[1]))
    _set_limits(cfg["rlimits"])
    source = _read_source()
    hook = (cfg["workdir"], cfg["read_roots"], cfg.get("denied", ()), cfg.get("hook", True))
    if cfg["mode"] == "compile":  # compile many programs (never run them): one 0/1 per program
        sources = marshal.loads(sys.stdin.buffer.read())
        _install_hook(*hook)
        flags = "".join(_compiles(src) for src in sources)
        sys.stdout.write(flags)
        return
    code = _compile(source)
    del source
    if cfg["mode"] == "script":
        scope = {"__name__": "__main__", "__builtins__": builtins}
        _install_hook(*hook)
        del cfg, argv
        exec(code, scope)
        return
    # call mode: the request comes on stdin, the result leaves on a saved copy of stdout
    import json

    request = json.loads(sys.stdin.read())
    token, args, fn_name = request["token"], request["args"], request["fn_name"]
    out = os.dup(1)
    os.dup2(2, 1)  # the program's prints go to stderr
    dumps, write = json.dumps, os.write
    scope = {"__name__": "solution", "__builtins__": builtins}
    _install_hook(*hook)
    del cfg, argv, request, hook
    exec(code, scope)
    target = scope.get("Solution")
    if isinstance(target, type) and hasattr(target, fn_name):
        func = getattr(target(), fn_name)
    elif fn_name in scope:
        func = scope[fn_name]
    else:
        raise NameError(f"the program defines no function {fn_name!r} (nor a Solution class with it)")
    result = func(*args)
    payload = dumps(result, allow_nan=True)
    write(out, (token + " " + payload + "\n").encode("utf-8"))


if __name__ == "__main__":
    main(sys.argv)
