"""The README and the docs site: short README with the sections other docs link to, a docs site
whose navigation, generated configuration reference and code examples match the repository."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = REPO / "docs"


def _hook():
    spec = importlib.util.spec_from_file_location("config_reference", DOCS / "_hooks" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_short_and_keeps_its_sections():
    assert len(README.splitlines()) <= 250
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    for section in ("Install", "Run", "Configuration", "Paper text vs reference code", "Results", "Benchmarks"):
        assert section in headings, section


def test_readme_paper_vs_reference_table_has_the_three_sides():
    section = README[README.index("## Paper text vs reference code") :].split("\n## ", 1)[0]
    assert "| behaviour | paper's text | reference code | default (switch) |" in section
    assert section.count("\n| ") >= 20  # one row per behaviour where text and code can differ


def test_readme_code_is_the_example_files_code():
    # the README's pipeline excerpt is cut from examples/env_rollout.py (the suite runs that file)
    block = README.split("From `examples/env_rollout.py`:\n\n```python\n", 1)[1].split("```", 1)[0]
    example = (REPO / "examples" / "env_rollout.py").read_text(encoding="utf-8")
    body = example.split("def main(model_path: str):\n", 1)[1].split("\n\n\nif __name__", 1)[0]
    assert block.strip() and block in textwrap.dedent(body)


def test_readme_and_docs_links_resolve():
    for source in [REPO / "README.md", *(p for p in DOCS.rglob("*.md") if "results" not in p.parts)]:
        text = source.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            assert (source.parent / target).exists(), f"{source.relative_to(REPO)} links to missing {target}"


def test_no_work_item_numbers_or_commit_hashes_in_readme_and_docs():
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md"]
    pages += [p for p in DOCS.rglob("*.md") if "results" not in p.parts]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\b[Ii]ssue \d+", text), page
        assert not re.search(r"\bcommit `?[0-9a-f]{7,40}\b", text), page


def test_every_docs_page_is_in_the_navigation():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)

    listed = set(pages(nav))
    for page in listed:
        assert (DOCS / page).is_file(), page
    own = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if p.parts[len(DOCS.parts)] != "results"}
    assert own <= listed, sorted(own - listed)


def test_configuration_reference_lists_every_key():
    # every field of every option's dataclass is a row of the generated reference, with its
    # type and default, and every preset file has its table
    from ragen_torchrl.trainer import config_schema as schema

    hook = _hook()
    text = hook.render(Path(PACKAGE_CONFIG_DIR), REPO)
    rows = set(re.findall(r"^\| `([^`]+)` \| `([^`]*)` \|", text, flags=re.M))
    expected = set()
    for group in ("seed", *schema.GROUPS):
        names = {"env": schema.ENV_SCHEMAS, "algo": schema.ALGO_SCHEMAS, "model": schema.MODEL_SCHEMAS}.get(group)
        for name in names or [None]:
            expected |= {(key, tp) for key, tp, _, _ in schema.schema_fields(group, name)}
    assert expected - rows == set()
    assert "| `trainer.early_stop.val_stop.patience` | `int` | `5` | consecutive low validations" in text
    for f in Path(PACKAGE_CONFIG_DIR).glob("*/*.yaml"):
        select = "+experiment=" if f.parent.name == "experiment" else f"{f.parent.name}="
        assert f"#### `{select}{f.stem}`" in text, f


def test_configuration_reference_reads_the_yaml_comments():
    hook = _hook()
    header, comments = hook.parse_comments(
        "# @package _global_\n# Header line one\n# line two\nname: x\n"
        "# block above\nlr: 2.0e-4  # step size\n            # (continued, aligned under the comment)\n"
        "url: 'a # not a comment'  # real\n"
        "net:\n  width: 4  # units | per layer\n"
    )
    assert header == "Header line one line two"
    assert comments["lr"] == "block above step size (continued, aligned under the comment)"
    assert comments["url"] == "real"
    assert comments["net.width"] == "units | per layer"
    table = hook.preset_table(Path(PACKAGE_CONFIG_DIR) / "algo" / "grpo.yaml", "algo.")
    assert "| `algo.kl_coeff` | `0.0` | off by default |" in table  # the file's own comment
    # a key the file does not comment on: the schema's help (the one definition of what a key means)
    helps = hook._helps("algo", Path(PACKAGE_CONFIG_DIR) / "algo" / "grpo.yaml", REPO)
    table = hook.preset_table(Path(PACKAGE_CONFIG_DIR) / "algo" / "grpo.yaml", "algo.", helps)
    assert "| `algo.mini_batch_size` | `16` | trajectories per optimizer step |" in table


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("pymdownx")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    page = (tmp_path / "site" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "algo.clip_epsilon" in page  # the generated reference made it into the page
    assert "tiny_model_path" in (tmp_path / "site" / "pipeline" / "index.html").read_text(encoding="utf-8")
