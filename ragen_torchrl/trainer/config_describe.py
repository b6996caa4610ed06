"""What ``ragen-train --describe KEY`` prints: each config field under a key with its type, default and
help text, read from the schema's dataclasses (:mod:`.config_schema`)."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from .config_checks import ConfigError
from .config_schema import ALGO_SCHEMAS, ENV_SCHEMAS, GROUPS, MODEL_SCHEMAS, RagenConfig, group_schema

__all__ = ["describe", "schema_fields", "shown_value"]


def _type_name(tp: Any) -> str:
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", str(tp))
    return str(text).replace("typing.", "")


def schema_fields(key: str = "", name: str | None = None) -> list[tuple[str, str, Any, str]]:
    """``(dotted key, type, default, help)`` of every leaf field under ``key`` (``""``: all).

    ``name`` picks the option of the env/algo/model group (default: the default run's).

    Example:
        >>> schema_fields("trainer.early_stop.val_stop.patience")
        [('trainer.early_stop.val_stop.patience', 'int', 5, 'consecutive low validations that stop the run')]
    """
    root = RagenConfig()
    group = key.split(".", 1)[0]
    if name is not None and group in ("algo", "env", "model"):
        cls = group_schema(group, name)
        if cls is None:
            raise ConfigError(f"{group} has no option named {name!r}")
        setattr(root, group, cls())
    out: list[tuple[str, str, Any, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            path = f"{prefix}{f.name}"
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{path}.")
            else:
                out.append((path, _type_name(f.type), value, f.metadata.get("help", "")))

    walk(root, "")
    if not key:
        return out
    chosen = [row for row in out if row[0] == key or row[0].startswith(key + ".")]
    if not chosen:
        close = difflib.get_close_matches(key, [row[0] for row in out], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"no config key {key}{hint}; groups: {', '.join(GROUPS)}")
    return chosen


def describe(key: str) -> str:
    """The text ``ragen-train --describe KEY`` prints: each field under ``key`` with type, default and help.

    ``env.<name>`` / ``algo.<name>`` / ``model.<name>`` (e.g. ``env.sokoban``, ``algo.ppo``)
    describe that option's fields.

    Example:
        >>> print(describe("algo.ppo.critic"))
        algo.critic: str = separate
            separate: own trunk (verl/RAGEN) | head: Linear on the policy's last hidden states
    """
    group, _, rest = key.partition(".")
    name = None
    head = rest.split(".", 1)[0]
    if group in ("algo", "env", "model") and head and group_schema(group, head) is not None:
        probe = {"env": ENV_SCHEMAS, "algo": ALGO_SCHEMAS, "model": MODEL_SCHEMAS}[group]
        if head in probe and not any(f.name == head for f in dataclasses.fields(probe[head])):
            name, key = head, group + (("." + rest.split(".", 1)[1]) if "." in rest else "")
    lines = []
    for path, tp, default, help_text in schema_fields(key, name):
        lines.append(f"{path}: {tp} = {shown_value(default, tp)}")
        if help_text:
            lines.append(f"    {help_text}")
    return "\n".join(lines)


def shown_value(value: Any, tp: str = "") -> str:
    """How ``--describe`` prints a value: YAML's spelling (``null``, ``true``, ``[a, b]``), ``???`` unset.

    Example:
        >>> shown_value(None), shown_value(True), shown_value(1e-05, "float"), shown_value("grpo", "str")
        ('null', 'true', '1e-05', 'grpo')
        >>> shown_value([0.2, 0.28]), shown_value(["q_proj", "v_proj"])
        ('[0.2, 0.28]', '[q_proj, v_proj]')
    """
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=False)
    if isinstance(value, list):
        return "[" + ", ".join(shown_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown_value(v)}" for k, v in value.items()) + "}"
    if value is MISSING:
        return "???"
    if isinstance(value, str):
        return value
    shown = repr(value)
    return {"None": "null", "True": "true", "False": "false"}.get(shown, shown)
