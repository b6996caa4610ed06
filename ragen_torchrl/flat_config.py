"""Nested configs as flat dotted keys: what the resume check and the run reports compare.

Example:
    >>> flatten_config({"trainer": {"group_size": 8}})
    {'trainer.group_size': 8}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["flatten_config"]


def flatten_config(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key -> leaf value (lists are leaves).

    Example:
        >>> flatten_config({"algo": {"name": "grpo", "clip": [0.2, 0.3]}, "seed": 0})
        {'algo.name': 'grpo', 'algo.clip': [0.2, 0.3], 'seed': 0}
    """
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_config(v, key + "."))
        else:
            out[key] = v
    return out
