"""Removing a directory a hostile program has written to, without ever touching anything else.

:func:`remove_tree` deletes a tree that may be arbitrarily deep, hold symlinks to host files,
and have directories made unreadable or read-only (``chmod 0``). It

* never follows a symlink (entries are unlinked, never opened; directories are opened with
  ``O_NOFOLLOW | O_DIRECTORY`` relative to their parent's descriptor, so no path is resolved
  again after a check);
* changes permissions only of directories inside the tree, through their own descriptor
  (``fchmod``, or the ``/proc/self/fd`` link of an ``O_PATH`` descriptor when a directory
  without read permission cannot be opened otherwise): the parent of the tree and every file a
  symlink points to keep their modes;
* uses a constant number of descriptors and no recursion whatever the depth: it climbs back
  with ``..`` and checks that it reached the directory it came from (device and inode), so a
  tree moved under it stops the removal instead of steering it elsewhere;
* does not cross into another filesystem (a mount point inside the tree is left alone);
* raises nothing: it reports whether the path is gone.

It is meant for a tree no process writes to any more (the sandbox first waits until every
process of the run is gone).

Example:
    >>> import os, tempfile
    >>> top = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(top, "a", "b"))
    >>> os.chmod(os.path.join(top, "a"), 0)
    >>> remove_tree(top), os.path.lexists(top)
    (True, False)
"""

from __future__ import annotations

import logging
import os
import stat

__all__ = ["remove_tree"]

log = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: rescans of one directory that still holds entries after its first pass (entries unlinked
#: while ``getdents`` iterates may be skipped by it)
_PASSES = 3


def _open_dir(dir_fd: int, name: str) -> int:
    """``name`` (a directory in ``dir_fd``) opened, with owner ``rwx`` restored through its fd."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        # no read permission (a non-root owner cannot open it): an O_PATH descriptor needs
        # none, and its /proc link names exactly that inode (no path is resolved again)
        path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
        finally:
            os.close(path_fd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o700 != 0o700:
            os.fchmod(fd, mode | 0o700)
    except OSError:
        pass  # not the owner: the removal below fails where it must, and says so
    return fd


class _Frame:
    __slots__ = ("name", "dev", "ino", "pending", "passes")

    def __init__(self, name: str, st: os.stat_result) -> None:
        self.name, self.dev, self.ino = name, st.st_dev, st.st_ino
        self.pending: list[str] | None = None
        self.passes = 0


def _scan(fd: int, frame: _Frame) -> None:
    """Unlink the non-directories of ``fd``; remember its subdirectories."""
    subdirs = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.debug("remove_tree: could not remove %r: %s", entry.name, exc)
    frame.pending = subdirs
    frame.passes += 1


def _is_empty(fd: int) -> bool:
    with os.scandir(fd) as entries:
        return next(entries, None) is None


def _remove_at(parent_fd: int, name: str) -> None:
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    cur = _open_dir(parent_fd, name)
    try:
        root = os.fstat(cur)
        if root.st_dev != os.fstat(parent_fd).st_dev:
            raise OSError(f"{name!r} is a mount point")
        frames = [_Frame(name, root)]
        while frames:
            frame = frames[-1]
            if frame.pending is None:
                _scan(cur, frame)
            if frame.pending:
                child = frame.pending.pop()
                try:
                    child_fd = _open_dir(cur, child)
                except OSError as exc:
                    log.debug("remove_tree: could not open %r: %s", child, exc)
                    continue
                child_st = os.fstat(child_fd)
                if child_st.st_dev != frame.dev:  # a mount point: not ours to empty
                    os.close(child_fd)
                    continue
                os.close(cur)
                cur = child_fd
                frames.append(_Frame(child, child_st))
                continue
            if frame.passes < _PASSES and not _is_empty(cur):
                frame.pending = None  # entries the first pass did not see
                continue
            frames.pop()
            if not frames:
                break
            up = os.open("..", _DIR_FLAGS, dir_fd=cur)
            up_st = os.fstat(up)
            if (up_st.st_dev, up_st.st_ino) != (frames[-1].dev, frames[-1].ino):
                os.close(up)
                raise OSError("the tree moved while it was being removed")
            os.close(cur)
            cur = up
            try:
                os.rmdir(frame.name, dir_fd=cur)
            except OSError as exc:
                log.debug("remove_tree: could not remove the directory %r: %s", frame.name, exc)
    finally:
        os.close(cur)
    os.rmdir(name, dir_fd=parent_fd)


def remove_tree(path: str | os.PathLike) -> bool:
    """Remove ``path`` and everything below it (see the module docstring); ``True`` when it
    is gone (also when it never existed). Never raises.

    Example:
        >>> import os, tempfile
        >>> top, victim = tempfile.mkdtemp(), tempfile.NamedTemporaryFile(delete=False).name
        >>> os.chmod(victim, 0o644)
        >>> os.mkdir(os.path.join(top, "ro"))
        >>> os.symlink(victim, os.path.join(top, "ro", "link"))
        >>> os.chmod(os.path.join(top, "ro"), 0o555)
        >>> remove_tree(top), oct(os.stat(victim).st_mode & 0o777)
        (True, '0o644')
    """
    try:
        parent, name = os.path.split(os.path.abspath(os.fspath(path)))
        parent_fd = os.open(parent, _DIR_FLAGS & ~os.O_NOFOLLOW)
    except (OSError, ValueError, TypeError) as exc:
        log.debug("remove_tree: %s", exc)
        return not _lexists(path)
    try:
        _remove_at(parent_fd, name)
    except FileNotFoundError:
        pass
    except Exception as exc:  # a hostile tree must never become the caller's error
        log.debug("remove_tree: %s: %s", path, exc)
    finally:
        os.close(parent_fd)
    return not _lexists(path)


def _lexists(path: str | os.PathLike) -> bool:
    try:
        return os.path.lexists(path)
    except (OSError, ValueError, TypeError):
        return True
