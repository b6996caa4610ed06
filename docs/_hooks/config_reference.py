"""mkdocs hook: the configuration reference, generated from the config dataclasses and the presets.

``docs/configuration.md`` holds the marker ``<!-- config-reference -->``; at build time it is
replaced by

* one table per config node of :mod:`ragen_torchrl.trainer.config_schema` (the typed config):
  every key with its type, default and help text, the dataclasses being the one place a default
  and its meaning are written (env, algo and model: one table per option's own keys);
* the presets of every group: each file's description and a table of what it sets (the values and
  the comments the file gives them).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

MARKER = "<!-- config-reference -->"
GROUPS = ("algo", "env", "filter", "model", "trainer", "experiment")
_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.\-]+):(.*)$")


def find_config_dir(root: Path) -> Path:
    """The repository's ``configs/``, else the in-package copy (``ragen_torchrl/configs``)."""
    for candidate in (root / "configs", root / "ragen_torchrl" / "configs"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"no config.yaml under {root}/configs or {root}/ragen_torchrl/configs")


def _split_comment(rest: str) -> tuple[str, str | None, int]:
    """``value  # comment`` -> (value, comment, offset of '#'); a '#' inside quotes is not a comment."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1] in " \t"):
            return rest[:i].rstrip(), rest[i + 1 :].strip(), i
    return rest.rstrip(), None, -1


def parse_comments(text: str) -> tuple[str, dict[str, str]]:
    """A preset file's header comment and each key path's comment.

    A key's comment is the comment block right above it (no blank line between) plus its inline
    comment and the comment lines aligned under that inline comment.

    Example:
        >>> header, c = parse_comments("# A preset.\\nname: x\\nlr: 1.0  # step size\\n"
        ...                            "             # (per update)\\n# the net\\nnet:\\n  width: 4\\n")
        >>> header, c["lr"], c["net"], c["net.width"]
        ('A preset.', 'step size (per update)', 'the net', '')
    """
    header: list[str] = []
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    seen_key = False
    last: tuple[str, int] | None = None  # (path, column of its inline comment)
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped:
            pending, last = [], None
            continue
        if stripped.startswith("#"):
            body = stripped[1:].strip()
            if body.startswith("@package"):
                continue
            if last is not None and indent >= last[1] - 1:
                comments[last[0]] = f"{comments[last[0]]} {body}".strip()
            elif not seen_key:
                header.append(body)
            else:
                pending.append(body)
            continue
        m = _KEY.match(line)
        if not m:  # a list item (defaults: - x)
            last = None
            continue
        seen_key = True
        key, rest = m.group(2), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        value, inline, col = _split_comment(rest)
        comments[path] = " ".join(pending + ([inline] if inline else []))
        pending = []
        last = (path, indent + len(key) + 1 + col) if inline is not None else None
        if not value.strip():
            stack.append((indent, key))
    return " ".join(h for h in header if h), comments


def _leaves(node, prefix: str = ""):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


def _fmt(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    text = text.removesuffix("...").strip()
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(data: dict, comments: dict[str, str], prefix: str = "") -> str:
    rows = ["| key | value | meaning |", "|---|---|---|"]
    for key, value in _leaves(data, prefix):
        rows.append(f"| `{key}` | {_fmt(value)} | {_cell(comments.get(key, ''))} |")
    return "\n".join(rows)


def preset_table(path: Path, prefix: str = "", helps: dict[str, str] | None = None) -> str:
    """A Markdown table of one preset file: key (with ``prefix``), value, and its comment in the file or,
    where the file has none, the schema's help text of the key (``helps``: dotted key -> help)."""
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    _, comments = parse_comments(text)
    if prefix:
        comments = {f"{prefix}{k}": v for k, v in comments.items()}
    comments = {**(helps or {}), **{k: v for k, v in comments.items() if v}}
    body = {k: v for k, v in data.items() if k not in ("defaults", "hydra")}
    inherits = [d for d in data.get("defaults", []) if isinstance(d, str) and d != "_self_"]
    note = f"Inherits `{'`, `'.join(inherits)}`; the keys below are what this file sets.\n\n" if inherits else ""
    return note + _table(body, comments, prefix.rstrip("."))


def _schema_module(root: Path | None = None):
    """:mod:`ragen_torchrl.trainer.config_schema` of the checkout being built (not another installed copy)."""
    import importlib
    import sys

    if root is not None and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("ragen_torchrl.trainer.config_schema")


def _schema_table(rows) -> str:
    out = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, tp, default, help_text in rows:
        shown = "`???`" if repr(default) == "'???'" else _fmt(default)
        out.append(f"| `{key}` | `{_cell(tp)}` | {shown} | {_cell(help_text)} |")
    return "\n".join(out)


def schema_reference(root: Path | None = None) -> list[str]:
    """The typed config's keys: one table per node, and per option of env / algo / model its own keys."""
    schema = _schema_module(root)
    out = [
        "## Keys",
        "",
        "Every key of the composed config, from the dataclasses of `ragen_torchrl.trainer.config_schema` "
        "(`ragen-train --describe KEY` prints the same). A preset may set a key to another value; "
        "the tables under [Presets](#presets) list what each file sets.",
        "",
    ]
    seed = schema.schema_fields("seed")
    out += ["### `seed`", "", _schema_table(seed), ""]
    options = {"env": schema.ENV_SCHEMAS, "algo": schema.ALGO_SCHEMAS, "model": schema.MODEL_SCHEMAS}
    for group in schema.GROUPS:
        if group not in options:
            out += [f"### `{group}`", "", _schema_table(schema.schema_fields(group)), ""]
            continue
        names = list(options[group])
        # the keys every option has, then each option's own
        per_name = {n: schema.schema_fields(group, n) for n in names}
        common = [r for r in per_name[names[0]] if all(r[0] in {x[0] for x in per_name[n]} for n in names)]
        common_keys = {r[0] for r in common}
        out += [f"### `{group}`", "", f"Keys every `{group}` option has (defaults of `{group}.name={names[0]}`):", ""]
        out += [_schema_table(common), ""]
        for n in names:
            # the option's own keys and the defaults it changes (an option without either shares the first's)
            own = [r for r in per_name[n] if r[0] not in common_keys or r not in common]
            if any(r[0] != f"{group}.name" for r in own):
                out += [f"#### `{group}.name: {n}`", "", _schema_table(own), ""]
    return out


def _helps(group: str, path: Path, root: Path | None) -> dict[str, str]:
    """The schema's help text of every key of ``group`` (for env / algo / model: of the option ``path`` names)."""
    if group == "experiment":
        return {}
    schema = _schema_module(root)
    name = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("name")
    try:
        rows = schema.schema_fields(group, str(name) if group in ("env", "algo", "model") and name else None)
    except Exception:  # noqa: BLE001 - an option the schema does not know (a registered env): no help texts
        return {}
    return {key: help_text for key, _, _, help_text in rows}


def render(config_dir: Path, root: Path | None = None) -> str:
    """The whole reference: the typed config's keys, then every preset of every group."""
    config_dir = Path(config_dir)
    out = schema_reference(root) + ["## Presets", ""]
    for group in GROUPS:
        files = sorted((config_dir / group).glob("*.yaml"))
        if not files:
            continue
        select = "+experiment=" if group == "experiment" else f"{group}="
        out += [f"### Presets of `{group}`", ""]
        for f in files:
            desc, _ = parse_comments(f.read_text(encoding="utf-8"))
            out.append(f"- `{select}{f.stem}`" + (f": {_cell(desc)}" if desc else ""))
        out.append("")
        for f in files:
            # a `# @package _global_` file writes full key paths (its group's keys under the group name)
            is_global = "@package _global_" in f.read_text(encoding="utf-8").split("\n", 1)[0]
            prefix = "" if is_global else f"{group}."
            out += [f"#### `{select}{f.stem}`", "", preset_table(f, prefix, _helps(group, f, root)), ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:  # mkdocs hook
    if MARKER not in markdown:
        return markdown
    root = Path(config["config_file_path"]).resolve().parent
    return markdown.replace(MARKER, render(find_config_dir(root), root))
