"""Unknown config keys: every key of a composed config must be one the config files define.

Hydra's struct mode rejects ``foo=1``; :func:`check_unknown_keys` also rejects ``+foo=1`` (Hydra's
explicit "add a key" syntax), which the code would otherwise silently ignore. The allowed keys are
read from the config files themselves (:func:`config_schema`): ``config.yaml`` plus, per group, the
options whose ``name`` matches the composed node's. A preset whose first line is
``# @package _global_`` (e.g. ``env=guess_numbers_small``, which also pins its warm start) holds
its group's keys under the group's name and may set keys of ``config.yaml``.

Example:
    >>> from omegaconf import OmegaConf
    >>> unknown_keys(OmegaConf.create({"sft": {"steps": 1, "stepz": 2}}), {"sft": {"steps": None}})
    ['sft.stepz']
"""

from __future__ import annotations

import copy
import difflib
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .config_checks import OPTIONAL_KEYS, ConfigError, _get

__all__ = ["GLOBAL_PACKAGE", "allowed_keys", "check_unknown_keys", "config_schema", "unknown_keys"]


def _tree(node: Any) -> Any:
    """Key tree of a YAML mapping (leaves are ``None``), without Hydra's ``defaults`` list."""
    if not isinstance(node, dict):
        return None
    return {str(k): _tree(v) for k, v in node.items() if k != "defaults"}


def _union(a: Any, b: Any) -> Any:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return a if isinstance(a, dict) else b
    out = dict(a)
    for k, v in b.items():
        out[k] = _union(out[k], v) if k in out else v
    return out


#: first-line header of a group preset whose keys are global (``env: {...}``, ``sft: {...}``)
GLOBAL_PACKAGE = "@package _global_"


def _inherited(group_dir: Path, data: Any, depth: int = 0) -> tuple[Any, Any]:
    """``(name, key tree)`` a preset inherits through its ``defaults`` list from options of its own group.

    ``filter/snr_smallest.yaml`` lists ``defaults: [snr_top_p, _self_]`` and holds only what differs:
    its allowed keys are the base's plus its own. Entries that are not plain option names of the
    same group (``_self_``, ``/group: option``, ``override ...``) are skipped.
    """
    import yaml

    name, tree = None, {}
    defaults = data.get("defaults") if isinstance(data, dict) else None
    if depth > 8 or not isinstance(defaults, list):
        return name, tree
    for entry in defaults:
        path = group_dir / f"{entry}.yaml" if isinstance(entry, str) and entry != "_self_" else None
        if path is None or not path.is_file():
            continue
        parent = yaml.safe_load(path.read_text()) or {}
        p_name, p_tree = _inherited(group_dir, parent, depth + 1)
        own = parent.get("name") if isinstance(parent, dict) else None
        name = own if own is not None else (p_name if p_name is not None else name)
        tree = _union(tree, _union(p_tree, _tree(parent)))
    return name, tree


def config_schema(config_dir: str | os.PathLike) -> dict[str, Any]:
    """The keys the config files in ``config_dir`` define.

    Returns ``{"main": tree of config.yaml, "groups": {group: {option: (name, tree)}}}``
    where a tree maps each key to its sub-tree (``None`` for a leaf). Every validation asks for
    it, so the parse is kept per state of the folder (each file's path, mtime and size): an
    edited preset is parsed again, an unchanged folder is not.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()); (d / "algo").mkdir()
        >>> _ = (d / "config.yaml").write_text("{seed: 0, algo: {}}")
        >>> _ = (d / "algo" / "grpo.yaml").write_text("lr: 1.0")
        >>> schema = config_schema(d)
        >>> sorted(schema["main"]), schema["groups"]["algo"]["grpo"][1]
        (['algo', 'seed'], {'lr': None})
        >>> config_schema(d) == schema
        True
    """
    root = Path(config_dir)
    files = sorted(root.rglob("*.yaml"))
    state = (str(root.resolve()), tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files))
    if state not in _SCHEMA_CACHE:
        if len(_SCHEMA_CACHE) >= 16:  # bounded: drop the oldest folder state
            _SCHEMA_CACHE.pop(next(iter(_SCHEMA_CACHE)))
        _SCHEMA_CACHE[state] = _parse_schema(root)
    return copy.deepcopy(_SCHEMA_CACHE[state])


#: parsed schemas of :func:`config_schema` by folder state (the 16 most recent)
_SCHEMA_CACHE: dict[tuple, dict[str, Any]] = {}


def _parse_schema(root: Path) -> dict[str, Any]:
    import yaml

    load = functools.partial(yaml.load, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    main = _tree(load((root / "config.yaml").read_text()) or {})
    groups: dict[str, dict[str, tuple[Any, Any]]] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        opts = {}
        for f in sorted(d.glob("*.yaml")):
            text = f.read_text()
            data = load(text) or {}
            if isinstance(data, dict) and GLOBAL_PACKAGE in text.split("\n", 1)[0]:
                # a preset that also pins keys outside its group (e.g. env=guess_numbers_small sets
                # the warm start its task needs): its group's keys are under the group's name
                data = dict(data)
                own = data.pop(d.name, None) or {}
                main = _union(main, _tree(data))
                data = own
            name, tree = _inherited(d, data)
            own_name = data.get("name") if isinstance(data, dict) else None
            opts[f.stem] = (own_name if own_name is not None else name, _union(tree, _tree(data)))
        if opts:
            groups[d.name] = opts
    return {"main": main, "groups": groups}


def allowed_keys(cfg: DictConfig, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The key tree ``cfg`` may have: config.yaml, plus per group the union of the options
    whose ``name`` matches the composed node's (all options when none matches; e.g.
    ``algo=dapo_ragen`` has ``name: ppo`` and shares PPO's keys), plus :data:`OPTIONAL_KEYS`."""
    allowed = dict(schema["main"] or {})
    allowed.pop("hydra", None)
    for group, opts in schema["groups"].items():
        node = _get(cfg, group)
        name = node.get("name") if isinstance(node, DictConfig) else None
        chosen = [t for n, t in opts.values() if n is None or n == name] or [t for _, t in opts.values()]
        tree: Any = {}
        for t in chosen:
            tree = _union(tree, t)
        allowed[group] = _union(allowed.get(group), tree)
    for key in OPTIONAL_KEYS:
        parts = key.split(".")
        node = allowed
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if node is None:
                break
        else:
            node.setdefault(parts[-1], None)
    return allowed


def unknown_keys(cfg: DictConfig, allowed: Mapping[str, Any]) -> list[str]:
    """Dotted keys of ``cfg`` that ``allowed`` (a key tree) does not have.

    Example:
        >>> from omegaconf import OmegaConf
        >>> unknown_keys(OmegaConf.create({"a": {"b": 1, "c": 2}, "foo": 1}), {"a": {"b": None}})
        ['a.c', 'foo']
    """
    out: list[str] = []

    def walk(node: Any, tree: Any, prefix: str) -> None:
        if not isinstance(node, Mapping) or not isinstance(tree, dict):
            return
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if prefix == "" and k == "hydra":
                continue
            if k not in tree:
                out.append(key)
            else:
                walk(v, tree[k], key)

    walk(
        OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False) if OmegaConf.is_config(cfg) else cfg,
        allowed,
        "",
    )
    return out


def check_unknown_keys(cfg: DictConfig, config_dir: str | os.PathLike | None = None) -> None:
    """Reject keys no config file defines (``+foo=1``, ``+algo.lrr=0.1``), with close matches.

    Skipped when ``config_dir`` (default: the CLI's ``RAGEN_CONFIG_DIR`` / the shipped ``configs/``) has
    no ``config.yaml``.
    """
    if config_dir is None:
        from .config_paths import CONFIG_DIR as config_dir
    if not (Path(config_dir) / "config.yaml").is_file():
        return
    allowed = allowed_keys(cfg, config_schema(config_dir))
    bad = unknown_keys(cfg, allowed)
    if not bad:
        return
    hints = []
    for key in bad:
        parent, _, leaf = key.rpartition(".")
        tree: Any = allowed
        for part in parent.split(".") if parent else []:
            tree = tree.get(part) if isinstance(tree, dict) else None
        close = difflib.get_close_matches(leaf, list(tree) if isinstance(tree, dict) else [], n=1)
        hints.append(f"{key} (did you mean {parent + '.' if parent else ''}{close[0]}?)" if close else key)
    raise ConfigError(
        f"unknown config key(s): {', '.join(hints)}; no file in {config_dir} defines "
        f"{'it' if len(bad) == 1 else 'them'} (the code would silently ignore "
        f"{'it' if len(bad) == 1 else 'them'})"
    )
