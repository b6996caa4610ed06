"""Configs read back from files a run wrote: ``summary.json``, a checkpoint, ``.hydra/config.yaml``.

Such a file may come from elsewhere, so its config is read as written and checked before use:

* it is a mapping (a list or a number is refused);
* no key or string value holds an OmegaConf interpolation (``${...}``): ``OmegaConf.create``
  would resolve it on access, and ``${oc.env:NAME}`` reads the reader's environment into
  whatever message prints the value. The trainer stores resolved configs, so a ``${`` in one is
  refused, naming the key only (the text is never resolved or printed);
* nesting is at most :data:`MAX_DEPTH` levels, and walking it meets at most :data:`MAX_NODES` nodes
  (a checkpoint's config may share one sub-dict under many keys: a few KiB that walk as 10^9 paths
  are refused after the first :data:`MAX_NODES`);
* a YAML file (:func:`load_yaml_config`) is read up to :data:`~ragen_torchrl.safe_io.MAX_YAML_BYTES`,
  with aliases refused (:func:`~ragen_torchrl.safe_io.load_yaml_bounded`), and, given the run dir it
  belongs to, only when it resolves inside that dir.

The values themselves are checked where they are used (``ragen-eval`` bounds ``trainer.val_levels``
and the other sizes by :data:`~ragen_torchrl.trainer.config_checks.LIMITS`).

Example:
    >>> check_stored_config({"seed": 0, "env": {"name": "frozenlake"}}, "run/summary.json")
    {'seed': 0, 'env': {'name': 'frozenlake'}}
    >>> try:
    ...     check_stored_config({"env": {"name": "${oc.env:HOME}"}}, "run/summary.json")
    ... except ConfigError as e:
    ...     print(e)
    run/summary.json: env.name holds an interpolation ('${'); a stored config is read as written, never resolved
    >>> try:
    ...     check_stored_config([1, 2], "run/summary.json")
    ... except ConfigError as e:
    ...     print(e)
    run/summary.json: the stored config is a list, not a mapping of config keys
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..safe_io import MAX_YAML_BYTES, UnsafeFileError, check_tree, load_yaml_bounded, read_bytes_inside
from .config_checks import ConfigError

__all__ = ["MAX_DEPTH", "MAX_NODES", "check_stored_config", "load_yaml_config"]

#: nesting of a stored config (the shipped configs nest 3-4 deep)
MAX_DEPTH = 32
#: nodes of a stored config, counted per path (the shipped configs have ~400)
MAX_NODES = 100_000


def check_stored_config(data: Any, source: str | os.PathLike) -> dict[str, Any]:
    """``data`` as a plain dict if it is a usable stored config, else :class:`ConfigError` naming ``source``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the stored config is a {type(data).__name__}, not a mapping of config keys")
    try:  # bounded first: the walk below visits every path
        check_tree(data, f"{source}: the stored config", max_nodes=MAX_NODES, max_depth=1 << 30)  # depth: below
    except UnsafeFileError as e:
        raise ConfigError(str(e)) from None
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        node, key, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"{source}: {key or 'the config'} nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, Mapping):
            for k, v in node.items():
                if not isinstance(k, str):
                    raise ConfigError(f"{source}: {key or 'the config'} has a key that is not a string")
                if "${" in k:
                    raise ConfigError(f"{source}: a key under {key or 'the config'} holds an interpolation ('${{')")
                stack.append((v, f"{key}.{k}" if key else k, depth + 1))
        elif isinstance(node, (list, tuple)):
            stack.extend((v, f"{key}[{i}]", depth + 1) for i, v in enumerate(node))
        elif isinstance(node, str) and "${" in node:
            raise ConfigError(
                f"{source}: {key} holds an interpolation ('${{'); a stored config is read as written, never resolved"
            )
    return dict(data)


def load_yaml_config(path: str | os.PathLike, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """A YAML config file (e.g. ``.hydra/config.yaml``) read with :func:`~ragen_torchrl.safe_io.load_yaml_bounded`
    (no aliases, bounded nodes and depth), then :func:`check_stored_config`. ``root``: the run dir the
    file belongs to; a file resolving outside it is refused.

    Raises:
        ConfigError: unreadable YAML, an alias, too large, outside ``root``, not a mapping, an
            interpolation (names the file and key).

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        ...     _ = f.write("seed: 1\\nmodel:\\n  cache_dir: ${oc.env:HOME}\\n")
        >>> try:
        ...     load_yaml_config(f.name)
        ... except ConfigError as e:
        ...     print(str(e).replace(f.name, "FILE").split(";")[0])
        FILE: model.cache_dir holds an interpolation ('${')
    """
    import yaml

    path = Path(path)
    try:
        text = read_bytes_inside(path, root, MAX_YAML_BYTES).decode("utf-8")
        data = load_yaml_bounded(text, path, max_nodes=MAX_NODES, max_depth=MAX_DEPTH + 1)
    except UnsafeFileError as e:
        raise ConfigError(str(e)) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        raise ConfigError(f"{path}: unreadable config ({' '.join(str(e).split())[:200]})") from None
    return check_stored_config(data, path)
