"""Files in directories from elsewhere: writes that follow no link, reads that stay inside, bounded parses.

A run dir, a result set or a checkpoint may come from another machine, so the command lines treat
what they find there as hostile:

* **writes** (:func:`write_bytes_atomic`, :func:`write_text_atomic`, :func:`create_exclusive`): the
  bytes go to a fresh temp file next to the target, created with ``O_CREAT | O_EXCL | O_NOFOLLOW``
  (a name planted in advance, a symlink to a victim file included, makes the open fail instead of
  writing through it), are fsync-ed, then renamed over the target with ``os.replace`` (which
  replaces a symlink at the target itself, never the file it points to);
* **reads** (:func:`inside`, :func:`read_bytes_inside`): a path under a root is refused when it
  resolves outside the root (an absolute symlink ``.hydra/config.yaml -> ~/.ssh/id_rsa`` would copy
  that file into a report), and a file is read up to a size limit;
* **parses** (:func:`load_yaml_bounded`, :func:`check_tree`): YAML aliases are refused (a few
  hundred bytes of aliases expand to 10^9 nodes), and a parsed tree is walked with limits on its
  nodes and depth, counting a shared sub-tree once per path (as every later walker sees it).

Every refusal is an :class:`UnsafeFileError` (a ``ValueError``) naming the file and, for trees,
the field.

Example:
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> victim = d / "victim.txt"
    >>> _ = victim.write_text("keep")
    >>> os.symlink(victim, d / "out.json")            # a link planted where the output goes
    >>> _ = write_text_atomic(d / "out.json", "{}")
    >>> victim.read_text(), (d / "out.json").is_symlink(), (d / "out.json").read_text()
    ('keep', False, '{}')
    >>> try:
    ...     load_yaml_bounded("a: &x [1, 2]\\nb: *x\\n", "config.yaml")
    ... except UnsafeFileError as e:
    ...     print(e)
    config.yaml, line 2: a YAML alias (*name) is refused here; write the value out
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "MAX_TREE_DEPTH",
    "MAX_TREE_NODES",
    "MAX_YAML_BYTES",
    "UnsafeFileError",
    "check_tree",
    "create_exclusive",
    "inside",
    "load_yaml_bounded",
    "read_bytes_inside",
    "write_bytes_atomic",
    "write_text_atomic",
]

#: nodes (mappings, sequences and scalars, counted per path) of a parsed config tree
MAX_TREE_NODES = 100_000
#: nesting of a parsed config tree (the shipped configs nest 3-4 deep)
MAX_TREE_DEPTH = 32
#: bytes of a YAML file read whole (Hydra's ``.hydra/config.yaml`` is a few KiB)
MAX_YAML_BYTES = 16 << 20

# no link is followed at the last path component; O_CLOEXEC keeps the fd from child processes
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class UnsafeFileError(ValueError):
    """A file that is refused: a symlink leading outside its root, over a size limit, a YAML alias,
    a tree with too many nodes or levels. The message names the file (and the field)."""


def create_exclusive(path: str | os.PathLike, mode: int = 0o666) -> BinaryIO:
    """A new file at ``path`` opened for binary writing; refused (``FileExistsError``) when anything,
    a symlink included, is already there.

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "new.bin"
        >>> with create_exclusive(p) as f:
        ...     _ = f.write(b"x")
        >>> try:
        ...     create_exclusive(p)
        ... except FileExistsError:
        ...     print("exists")
        exists
    """
    fd = os.open(os.fspath(path), _CREATE_FLAGS, mode)
    return os.fdopen(fd, "wb")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a fresh ``O_EXCL | O_NOFOLLOW`` temp file in the same
    directory (random name), fsync, ``os.replace``. The parent directory is created when missing.

    A reader sees the old file or the new one, never a partial file; a symlink at ``path`` is
    replaced by the file (its target is left alone).

    Example:
        >>> import tempfile
        >>> p = write_bytes_atomic(Path(tempfile.mkdtemp()) / "sub" / "x.bin", b"abc")
        >>> p.read_bytes(), sorted(q.name for q in p.parent.iterdir())
        (b'abc', ['x.bin'])
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(16):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            f = create_exclusive(tmp)
            break
        except FileExistsError:  # a name taken (planted or not): draw another
            continue
    else:
        raise FileExistsError(f"{path.parent}: could not create a temp file for {path.name}")
    try:
        with f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """:func:`write_bytes_atomic` of ``text`` as UTF-8.

    Example:
        >>> import tempfile
        >>> write_text_atomic(Path(tempfile.mkdtemp()) / "a.txt", "hi").read_text()
        'hi'
    """
    return write_bytes_atomic(path, text.encode("utf-8"))


def inside(path: str | os.PathLike, root: str | os.PathLike) -> Path:
    """``path`` when it resolves (symlinks followed) to ``root`` or below it, else :class:`UnsafeFileError`.

    A link that stays inside the root is fine; one that leads out of it (absolute or through ``..``)
    is refused without reading anything, and the message does not say where it leads.

    Example:
        >>> import os, tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> os.symlink("/etc/hostname", run / "config.yaml")
        >>> inside(run / "summary.json", run) == run / "summary.json"
        True
        >>> try:
        ...     inside(run / "config.yaml", run)
        ... except UnsafeFileError as e:
        ...     print(str(e).replace(str(run), "RUN"))
        RUN/config.yaml: a symlink leading outside RUN (a file of a run dir is read only from inside it)
    """
    path, root = Path(path), Path(root)
    real, base = os.path.realpath(path), os.path.realpath(root)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise UnsafeFileError(
            f"{path}: a symlink leading outside {root} (a file of a run dir is read only from inside it)"
        )
    return path


def read_bytes_inside(path: str | os.PathLike, root: str | os.PathLike | None, limit: int) -> bytes:
    """The bytes of ``path`` (checked by :func:`inside` when ``root`` is given), at most ``limit`` of them.

    Raises:
        UnsafeFileError: outside ``root``, or larger than ``limit`` bytes.
        OSError: the file cannot be read.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "a.json").write_text("{}")
        >>> read_bytes_inside(d / "a.json", d, 10)
        b'{}'
        >>> try:
        ...     read_bytes_inside(d / "a.json", d, 1)
        ... except UnsafeFileError as e:
        ...     print(str(e).replace(str(d), "D"))
        D/a.json: larger than 1 bytes, the limit for this file
    """
    if root is not None:
        inside(path, root)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFileError(f"{path}: larger than {limit} bytes, the limit for this file")
    return data


def check_tree(
    data: Any, where: str | os.PathLike, *, max_nodes: int = MAX_TREE_NODES, max_depth: int = MAX_TREE_DEPTH
) -> Any:
    """``data`` unchanged when walking it (mappings, lists, tuples; a shared sub-tree once per path)
    meets at most ``max_nodes`` nodes and ``max_depth`` levels; else :class:`UnsafeFileError`.

    The walk stops at the first node over a limit, so its cost is bounded by ``max_nodes``.

    Example:
        >>> inner = {"x": 1}
        >>> for _ in range(30):
        ...     inner = {"a": inner, "b": inner}      # 2^30 paths in a few hundred objects
        >>> try:
        ...     check_tree(inner, "last.pt: config")
        ... except UnsafeFileError as e:
        ...     print(e)
        last.pt: config: more than 100000 nodes when walked (shared sub-trees count once per path)
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise UnsafeFileError(
                f"{where}: more than {max_nodes} nodes when walked (shared sub-trees count once per path)"
            )
        if isinstance(node, Mapping):
            children = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if depth >= max_depth:
            raise UnsafeFileError(f"{where}: nests deeper than {max_depth} levels")
        for child in children:
            stack.append((child, depth + 1))
            if len(stack) > max_nodes:  # one huge container: refused before it is copied whole
                raise UnsafeFileError(f"{where}: more than {max_nodes} nodes when walked")
    return data


def _bounded_loader(where: str, max_nodes: int, max_depth: int):
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """``yaml.SafeLoader`` that refuses aliases and counts nodes and depth while composing."""

        nodes = 0
        depth = 0

        def compose_node(self, parent, index):
            mark = self.peek_event().start_mark
            line = f"{where}, line {mark.line + 1}"
            if self.check_event(yaml.AliasEvent):
                raise UnsafeFileError(f"{line}: a YAML alias (*name) is refused here; write the value out")
            self.nodes += 1
            if self.nodes > max_nodes:
                raise UnsafeFileError(f"{line}: more than {max_nodes} YAML nodes")
            if self.depth >= max_depth:
                raise UnsafeFileError(f"{line}: nests deeper than {max_depth} levels")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def load_yaml_bounded(
    text: str, where: str | os.PathLike, *, max_nodes: int = MAX_TREE_NODES, max_depth: int = MAX_TREE_DEPTH
) -> Any:
    """``yaml.safe_load(text)`` refusing aliases, more than ``max_nodes`` nodes and ``max_depth`` levels.

    Raises:
        UnsafeFileError: an alias, too many nodes or levels (names ``where`` and the line).
        yaml.YAMLError: text that is not YAML.

    Example:
        >>> load_yaml_bounded("seed: 1\\nenv: {name: frozenlake}\\n", "c.yaml")
        {'seed': 1, 'env': {'name': 'frozenlake'}}
        >>> try:
        ...     load_yaml_bounded("[" * 40 + "]" * 40, "c.yaml")
        ... except UnsafeFileError as e:
        ...     print(e)
        c.yaml, line 1: nests deeper than 32 levels
    """
    loader = _bounded_loader(str(where), max_nodes, max_depth)(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
