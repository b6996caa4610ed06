"""Configs read back from files a run wrote: ``summary.json``, a checkpoint, ``.hydra/config.yaml``.

Such a file may come from elsewhere, so its config is read as written and checked before use:

* it is a mapping (a list or a number is refused);
* no key or string value holds an OmegaConf interpolation (``${...}``): ``OmegaConf.create``
  would resolve it on access, and ``${oc.env:NAME}`` reads the reader's environment into
  whatever message prints the value. The trainer stores resolved configs, so a ``${`` in one is
  refused, naming the key only (the text is never resolved or printed);
* nesting is at most :data:`MAX_DEPTH` levels.

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

from .config_checks import ConfigError

__all__ = ["MAX_DEPTH", "check_stored_config", "load_yaml_config"]

#: nesting of a stored config (the shipped configs nest 3-4 deep)
MAX_DEPTH = 32


def check_stored_config(data: Any, source: str | os.PathLike) -> dict[str, Any]:
    """``data`` as a plain dict if it is a usable stored config, else :class:`ConfigError` naming ``source``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the stored config is a {type(data).__name__}, not a mapping of config keys")
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


def load_yaml_config(path: str | os.PathLike) -> dict[str, Any]:
    """A YAML config file (e.g. ``.hydra/config.yaml``) with ``yaml.safe_load``, then :func:`check_stored_config`.

    Raises:
        ConfigError: unreadable YAML, not a mapping, an interpolation (names the file and key).

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
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        raise ConfigError(f"{path}: unreadable config ({' '.join(str(e).split())[:200]})") from None
    return check_stored_config(data, path)
