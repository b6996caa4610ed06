"""Adding a config key is one edit: a field in the schema.

A throwaway field is added to ``TrainerConfig`` in a copy of the package (nothing else changes: no
YAML preset, no docs page, no table of keys), and then ``ragen-train KEY=...`` accepts it and checks
its value, ``--describe`` prints its type, default and help, and the docs' configuration reference
lists it. Each runs in a subprocess on the copy (the package under test is already imported here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIELD = '    throwaway_key: int = setting(7, "a key only this test adds", check_positive_int)\n'


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("add_a_key") / "checkout"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("ragen_torchrl", "configs", "hydra_plugins", "docs/_hooks"):
        shutil.copytree(REPO / part, copy / part, ignore=skip)
    schema = copy / "ragen_torchrl" / "trainer" / "config_schema.py"
    text = schema.read_text()
    anchor = "class TrainerConfig:\n"
    assert anchor in text
    schema.write_text(text.replace(anchor, anchor + FIELD, 1))
    return copy


def _run(checkout: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RAGEN_CONFIG_DIR",)}
    env.update(PYTHONPATH=str(checkout), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


TRAIN = "import sys; from ragen_torchrl.trainer.cli import train_main; sys.argv[0] = 'ragen-train'; train_main()"


def test_the_copy_is_what_runs(checkout):
    out = _run(checkout, "import ragen_torchrl; print(ragen_torchrl.__file__)")
    assert Path(out.stdout.strip()).resolve().is_relative_to(checkout.resolve()), out.stdout + out.stderr


def test_ragen_train_takes_the_new_key_bare_and_checks_its_value(checkout, tmp_path):
    ok = _run(checkout, TRAIN, "trainer.throwaway_key=3", "trainer.dry_run=true", f"hydra.run.dir={tmp_path / 'a'}")
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = _run(checkout, TRAIN, "trainer.throwaway_key=0", "trainer.dry_run=true", f"hydra.run.dir={tmp_path / 'b'}")
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "trainer.throwaway_key must be a positive integer, got 0" in bad.stderr
    # the same key in the package as shipped is unknown (so the copy's field is what made it known)
    unknown = subprocess.run(
        [sys.executable, "-c", TRAIN, "trainer.throwaway_key=3", "trainer.dry_run=true", f"hydra.run.dir={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert unknown.returncode == 2 and "unknown config key(s): trainer.throwaway_key" in unknown.stderr


def test_describe_prints_the_new_key(checkout):
    out = _run(checkout, TRAIN, "--describe", "trainer.throwaway_key")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "trainer.throwaway_key: int = 7" in out.stdout and "a key only this test adds" in out.stdout


def test_the_docs_reference_lists_the_new_key(checkout):
    code = (
        "import importlib.util, sys; from pathlib import Path; root = Path.cwd(); "
        "spec = importlib.util.spec_from_file_location('h', root / 'docs/_hooks/config_reference.py'); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        "print(m.render(root / 'configs', root))"
    )
    out = _run(checkout, code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| `trainer.throwaway_key` | `int` | `7` | a key only this test adds |" in out.stdout
