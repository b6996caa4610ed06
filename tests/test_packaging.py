"""Packaging: the configs ship in the wheel, so a non-editable install runs anywhere.

``pip install .`` (non-editable) and then ``ragen-train trainer=smoke`` from an unrelated directory
works, and ``RAGEN_CONFIG_DIR`` still overrides the shipped configs.

The wheel test builds the wheel offline (``--no-build-isolation``) and installs it with
``--no-deps`` into a fresh venv that also sees the packages of the interpreter running the suite
(a virtualenv's or the system's: see :func:`_venv_seeing_this_interpreter`), so torch etc. are not
downloaded, and runs the venv's own ``ragen-train`` from a temp dir. The venv must import the
installed copy, not the editable checkout: that is asserted first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from ragen_torchrl.trainer import config_paths
from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SHIPPED = Path(PACKAGE_CONFIG_DIR)
GROUPS = ("algo", "env", "filter", "model", "trainer")


def _yaml_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.yaml")}


def test_configs_live_at_the_top_level():
    # the checkout's presets are configs/ next to the package (the wheel maps them into it)
    assert SHIPPED == REPO / "configs"
    assert (SHIPPED / "config.yaml").is_file()
    for group in GROUPS:
        assert list((SHIPPED / group).glob("*.yaml")), group
    assert not (REPO / "ragen_torchrl" / "configs").exists(), "configs/ lives at the top level"


def test_config_dir_honours_ragen_config_dir(tmp_path):
    # "RAGEN_CONFIG_DIR still overrides"
    assert config_paths.config_dir({}) == PACKAGE_CONFIG_DIR
    assert config_paths.config_dir({"RAGEN_CONFIG_DIR": ""}) == PACKAGE_CONFIG_DIR  # unset-like
    assert config_paths.config_dir({"RAGEN_CONFIG_DIR": str(tmp_path)}) == str(tmp_path)
    # CONFIG_DIR is read at import: a fresh interpreter with the variable set uses it
    env = {**os.environ, "RAGEN_CONFIG_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", "from ragen_torchrl.trainer.config_paths import CONFIG_DIR; print(CONFIG_DIR)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert out.stdout.strip() == str(tmp_path)


def test_ragen_config_dir_override_reaches_hydra(tmp_path):
    """``ragen-train`` composes from RAGEN_CONFIG_DIR: a copy whose smoke preset sets
    ``total_iterations: 7`` is what Hydra hands the app (printed with ``--cfg job``)."""
    import shutil

    mine = tmp_path / "my_configs"
    shutil.copytree(SHIPPED, mine, ignore=shutil.ignore_patterns("__pycache__"))
    smoke = mine / "trainer" / "smoke.yaml"
    smoke.write_text(smoke.read_text().replace("total_iterations: 2", "total_iterations: 7"))
    code = "import sys; from ragen_torchrl.trainer.cli import train_main; sys.argv = ['ragen-train', *sys.argv[1:]]; train_main()"
    run = lambda env: subprocess.run(  # noqa: E731
        [sys.executable, "-c", code, "trainer=smoke", "--cfg", "job", "--package", "trainer"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    base = {k: v for k, v in os.environ.items() if k != "RAGEN_CONFIG_DIR"}
    shipped, custom = run(base), run({**base, "RAGEN_CONFIG_DIR": str(mine)})
    assert shipped.returncode == 0 and custom.returncode == 0, shipped.stderr + custom.stderr
    assert "total_iterations: 2" in shipped.stdout
    assert "total_iterations: 7" in custom.stdout


def test_wheel_lists_every_config():
    """The wheel holds every yaml of configs/ (setup.py's package_dir mapping), under ragen_torchrl/configs/."""
    wheel = _build_wheel()
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {
            n.removeprefix("ragen_torchrl/configs/")
            for n in zf.namelist()
            if n.startswith("ragen_torchrl/configs/") and n.endswith(".yaml")
        }
    assert in_wheel == _yaml_files(SHIPPED)
    # the SituationPuzzles data file ships too, and the experiments' Hydra sweeper (in hydra_plugins,
    # the only package Hydra instantiates sweepers from)
    with zipfile.ZipFile(wheel) as zf:
        assert "ragen_torchrl/envs/games/data/situation_puzzles.json" in zf.namelist()
        assert "hydra_plugins/ragen_torchrl_arms/arm_sweeper.py" in zf.namelist()
        assert "hydra_plugins/__init__.py" not in zf.namelist()  # a namespace package other plugins share


_WHEEL: list[Path] = []


def _build_wheel() -> Path:
    """Build the wheel once per session (offline: setuptools is already installed)."""
    if _WHEEL:
        return _WHEEL[0]
    import shutil
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="ragen_wheel_"))
    # build from a clean copy: setuptools reuses an in-tree build/ folder, whose stale
    # files (a module since moved or deleted) would ship in the wheel
    src = out / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", "__pycache__", "outputs", ".pytest_cache", ".hypothesis"
        ),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = out.glob("ragen_torchrl-*.whl")
    _WHEEL.append(wheel)
    return wheel


def _site_packages_of_this_interpreter() -> list[str]:
    """The site-packages folders the running interpreter imports from: a virtualenv's own (and the
    base's when it was made with ``--system-site-packages``), or the system install's."""
    return [p for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


def _venv_seeing_this_interpreter(env_dir: Path) -> Path:
    """Create a venv whose own site-packages comes first and that then sees this interpreter's packages.

    ``--system-site-packages`` would show the *base* interpreter's packages, which inside a virtualenv
    lack the dependencies (``ModuleNotFoundError: hydra``). A ``.pth`` file listing this interpreter's
    site-packages appends them after the venv's own; plain path lines in a ``.pth`` do not run the
    ``.pth`` files of those folders, so an editable install of the checkout stays out of the venv.
    Returns the venv's python.
    """
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    outer = _site_packages_of_this_interpreter()
    Path(purelib, "zz_suite_site_packages.pth").write_text("".join(f"{p}\n" for p in outer))
    return py


def test_the_venv_sees_this_interpreters_packages(tmp_path):
    """The helper venv imports the dependencies from wherever the suite runs (a venv or a system
    install), but not the package itself (it has not been installed there)."""
    py = _venv_seeing_this_interpreter(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("RAGEN_CONFIG_DIR", "PYTHONPATH")}
    code = "import hydra, tensordict, torchrl; import importlib.util as u; print(u.find_spec('ragen_torchrl'))"
    out = subprocess.run([str(py), "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # an editable install of the checkout is not visible there (a non-editable one may be)
    assert out.stdout.strip() == "None" or str(REPO) not in out.stdout


def test_wheel_install_runs_ragen_train_smoke_from_a_temp_dir(tmp_path, ragen_cache_dir):
    # "a wheel install into a fresh venv runs `ragen-train trainer=smoke` from a temp dir"
    wheel = _build_wheel()
    env_dir = tmp_path / "venv"
    py = _venv_seeing_this_interpreter(env_dir)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    work = tmp_path / "elsewhere"  # an unrelated directory: no configs/ and no checkout around
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAGEN_CONFIG_DIR", "PYTHONPATH")}
    where = subprocess.run(
        [str(py), "-c", "import ragen_torchrl.trainer.config_paths as c; print(c.__file__); print(c.CONFIG_DIR)"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # the venv imports its installed copy (not the editable checkout), and its shipped configs
    assert Path(where[0]).resolve().is_relative_to(env_dir.resolve()), where
    assert Path(where[1]).resolve().is_relative_to(env_dir.resolve()), where
    assert (Path(where[1]) / "trainer" / "smoke.yaml").is_file()
    # a wheel install: Hydra's own plugin scan finds the experiments' sweeper (no register() needed)
    found = subprocess.run(
        [
            str(py),
            "-c",
            "from hydra.core.plugins import Plugins; from hydra.plugins.sweeper import Sweeper; "
            "print([c.__name__ for c in Plugins.instance().discover(Sweeper)])",
        ],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "ArmSweeper" in found, found

    run_dir = tmp_path / "run"
    overrides = [
        "trainer=smoke",
        "trainer.total_iterations=1",
        "trainer.val_levels=2",
        "sft.steps=3",
        "sft.episodes=10",
        "model.hidden_size=32",
        "model.intermediate_size=64",
        "model.num_layers=1",
        "model.vocab_size=300",
        f"model.cache_dir={ragen_cache_dir}",
        "model.device=cpu",
        "model.threads=1",
        "rollout.max_new_tokens=8",
        "sft.reply_budget=warn",
        "trainer.log_text_samples=1",
        "diagnostics.mi.enabled=false",
        f"hydra.run.dir={run_dir}",
    ]
    res = subprocess.run(
        [str(env_dir / "bin" / "ragen-train"), *overrides],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert not (work / "outputs").exists()  # everything went to hydra.run.dir
