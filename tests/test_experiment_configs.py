"""Named experiment configs (``configs/experiment/*.yaml``, ``+experiment=NAME``) and Hydra sweeps.

Every experiment composes, passes :func:`validate_config` and pins what its header says; the
command line still wins over it. The slow test runs a real two-job multirun of a config without
arms (Hydra's basic sweeper) through the CLI and reports it with ``ragen-report``; the experiments
with arms (the ``ragen_arms`` sweeper) are tested in ``tests/test_experiments.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_paths import CONFIG_DIR

GLOBAL_PACKAGE = "@package _global_"

EXPERIMENT_DIR = Path(CONFIG_DIR) / "experiment"
EXPERIMENTS = sorted(p.stem for p in EXPERIMENT_DIR.glob("*.yaml"))
#: experiment configs without arms (Hydra's basic sweeper): the pins others build on
BASES = {"snr_filter"}

#: what each experiment pins (dotted key -> value in the composed config); extra overrides it needs
PINNED: dict[str, tuple[list[str], dict[str, object]]] = {
    "snr_filter": (
        [],
        {
            "env.name": "frozenlake",
            "env.success_rate": 0.98,
            "trainer.total_iterations": 60,
            "trainer.val_levels": 256,
            "trainer.save_every": 0,
            "diagnostics.mi.enabled": True,
            "diagnostics.mi.every": 5,
        },
    ),
    "default_run": ([], {"env.name": "frozenlake", "trainer.total_iterations": 60, "model.threads": 1}),
    "snr_filter_frozenlake": (
        [],
        {
            "env.success_rate": 0.98,
            "trainer.total_iterations": 60,
            "diagnostics.grad_snr.every": 10,
            "model.threads": 1,
        },
    ),
    "mi_vs_entropy": (
        [],
        {
            "env.success_rate": 0.98,
            "trainer.total_iterations": 30,
            "diagnostics.mi.every": 2,
            "diagnostics.grad_snr.every": 0,
            "model.threads": 1,
        },
    ),
    "mechanism_rl": (
        [],
        {
            "env.success_rate": 0.98,
            "trainer.total_iterations": 200,
            "trainer.save_every": 50,
            "trainer.early_stop.val_stop.enabled": False,
            "trainer.early_stop.collapse_stop.enabled": False,
            "trainer.early_stop.max_consecutive_empty": 0,
            "algo.kl_coeff": 0.01,
            "algo.entropy_coeff": 0.01,
            "diagnostics.mi.every": 5,
            "diagnostics.grad_snr.every": 20,
            "model.threads": 1,
        },
    ),
    "mechanism_no_reg": (
        [],
        {
            "env.success_rate": 0.98,
            "trainer.total_iterations": 200,
            "trainer.early_stop.val_stop.enabled": False,
            "trainer.early_stop.collapse_stop.enabled": False,
            "algo.kl_coeff": 0.01,
            "algo.entropy_coeff": 0.01,
            "diagnostics.mi.every": 5,
            "diagnostics.grad_snr.every": 20,
            "model.threads": 1,
        },
    ),
    "smollm2_mi_fit": (
        [],
        {
            "model.name": "smollm2",
            "env.name": "bandit",
            "rollout.max_new_tokens": 64,
            "trainer.total_iterations": 1,
            "trainer.val_levels": 64,
            "sft.seed_from_run": True,
            "sft.reply_budget": "error",
            "model.threads": 1,
        },
    ),
    "smollm2_mechanism": (
        [],
        {
            "model.name": "smollm2",
            "env.name": "metamathqa",
            "env.max_turn": 1,
            "trainer.total_iterations": 60,
            "trainer.early_stop.val_stop.enabled": False,
            "trainer.early_stop.collapse_stop.enabled": False,
            "diagnostics.mi.every": 10,
            "sft.seed_from_run": True,
            "model.threads": 1,
        },
    ),
    "visual_frozenlake": (
        [],
        {
            "env.name": "frozenlake_visual",
            "model.name": "tiny_vl",
            "sft.steps": 1500,
            "sft.seed_from_run": True,
            "trainer.final_eval.levels": 2048,
            "model.threads": 1,
        },
    ),
    "visual_mi": (
        [],
        {
            "env.name": "frozenlake_visual",
            "model.name": "tiny_vl",
            "sft.steps": 1500,
            "sft.seed_from_run": True,
            "trainer.total_iterations": 5,
            "trainer.val_levels": 128,
            "trainer.val_every": 0,
            "diagnostics.mi.every": 1,
            "model.threads": 1,
        },
    ),
    "snr_controls": (
        [],
        {"env.success_rate": 0.98, "trainer.total_iterations": 60, "diagnostics.mi.every": 5, "model.threads": 1},
    ),
    "snr_filter_sokoban": (
        [],
        {
            "env.name": "sokoban",
            "trainer.total_iterations": 12,
            "trainer.val_levels": 128,
            "trainer.save_every": 0,
            "diagnostics.mi.enabled": True,
            "diagnostics.mi.every": 3,
            "model.threads": 1,
        },
    ),
    "slip_sweep": (
        [],
        {
            "env.name": "frozenlake",
            "env.success_rate": 0.98,
            "trainer.total_iterations": 30,
            "trainer.val_levels": 256,
            "trainer.save_every": 0,
            "diagnostics.mi.enabled": True,
            "diagnostics.mi.every": 5,
        },
    ),
    "template_collapse": (
        [],
        {
            "env.name": "frozenlake",
            "sft.reasoning": "grounded",
            "trainer.total_iterations": 30,
            "trainer.val_levels": 256,
            "trainer.save_every": 0,
            "diagnostics.mi.enabled": True,
            "diagnostics.mi.every": 2,
        },
    ),
    "t3_cpu": (
        ["env=guess_numbers_small"],
        {
            "env.name": "guess_numbers",
            "trainer.total_iterations": 20,
            "trainer.val_levels": 128,  # replaces the guess_numbers_small preset's 256
            "trainer.save_every": 0,
            "trainer.log_text_samples": 2,
            "diagnostics.mi.enabled": False,
            "algo.lr": 5e-5,
            "model.threads": 1,
            "sft.episodes": 2000,  # the env preset's warm start is kept
        },
    ),
    "t3_ablation": (
        [],
        {
            "env.name": "guess_numbers",
            "env.num_digits": 2,
            "env.num_symbols": 5,
            "env.split_by": "level",
            "trainer.total_iterations": 20,
            "trainer.val_levels": 128,  # replaces the guess_numbers_small preset's 256
            "trainer.final_eval.levels": 1024,
            "trainer.final_eval.modes": ["sampled"],
            "trainer.save_every": 0,
            "trainer.log_text_samples": 2,
            "diagnostics.mi.enabled": False,
            "algo.lr": 5e-5,
            "model.threads": 1,
            "sft.episodes": 2000,  # the env preset's warm start is kept
        },
    ),
}


def _compose(overrides: list[str], hydra: bool = False):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=hydra)


def _task(cfg):
    task = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    task.pop("hydra", None)
    return task


def test_every_experiment_is_listed_here():
    assert EXPERIMENTS == sorted(PINNED)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_file_header_says_claim_command_and_pins(name):
    text = (EXPERIMENT_DIR / f"{name}.yaml").read_text()
    assert text.split("\n", 1)[0] == f"# {GLOBAL_PACKAGE}"
    header = text.split("\n\n", 1)[0]
    words = ["Claim", "Reproduce", f"ragen-train -m +experiment={name}", "Pins"]
    if name in BASES:  # swept by hand: the report is a second command
        words.append("ragen-report")
    else:  # the ragen_arms sweeper writes the report; ragen-experiment runs the same
        words.append(f"ragen-experiment {name}")
    for word in words:
        assert word in header, (name, word)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_validates_and_pins(name):
    extra, pinned = PINNED[name]
    cfg = _compose([f"+experiment={name}", *extra], hydra=True)
    if name in BASES:
        assert str(cfg.hydra.sweep.dir).startswith(f"multirun/{name}/")
    else:  # ragen-experiment's default --out: the same layout from both entry points
        assert cfg.hydra.sweep.dir == f"outputs/experiments/{name}"
        assert cfg.hydra.sweeper._target_.endswith("ArmSweeper") and cfg.hydra.sweeper.name == name
    task = _task(cfg)
    validate_config(task)
    for key, value in pinned.items():
        assert OmegaConf.select(task, key) == value, (name, key)
    if name in BASES:  # a hand sweep's arms compose and validate too (the experiments' arms: test_experiments.py)
        validate_config(_compose([f"+experiment={name}", *extra, "filter=snr_top_p", "env.success_rate=0.2", "seed=2"]))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_command_line_overrides_win_over_the_experiment(name):
    extra, _ = PINNED[name]
    cfg = _compose(
        [
            f"+experiment={name}",
            *extra,
            "trainer.total_iterations=7",
            "trainer.val_levels=16",
            "diagnostics.mi.enabled=true",
            "hydra.sweep.dir=/tmp/elsewhere",
        ],
        hydra=True,
    )
    assert cfg.hydra.sweep.dir == "/tmp/elsewhere"
    task = _task(cfg)
    assert (task.trainer.total_iterations, task.trainer.val_levels, task.diagnostics.mi.enabled) == (7, 16, True)
    validate_config(task)


def test_command_line_env_wins_over_the_experiment_env():
    task = _task(_compose(["+experiment=snr_filter", "env=sokoban"]))
    assert task.env.name == "sokoban" and "success_rate" not in task.env
    validate_config(task)
    task = _task(_compose(["+experiment=slip_sweep", "env.success_rate=0.5"]))
    assert task.env.success_rate == 0.5


def test_experiments_leave_the_default_config_alone():
    plain = _task(_compose([]))
    assert "experiment" not in plain
    validate_config(plain)


# ------------------------------------------------------------------------------- a real sweep
def _run_train(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("ragen-train", path=os.path.dirname(sys.executable))  # this interpreter's script
    cmd = [exe] if exe else [sys.executable, "-c", "from ragen_torchrl.trainer.cli import train_main; train_main()"]
    env = dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="1")
    return subprocess.run(cmd + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


#: tests/test_presets.py's SMALL, with this test's validation size
SMALL = ["trainer.total_iterations=1", "trainer.log_text_samples=0", *TINY_RUN]


@pytest.mark.slow
def test_multirun_of_an_experiment_writes_one_run_dir_per_job_and_reports(ragen_cache_dir, tmp_path):
    from ragen_torchrl.reporting.cli import main as report_main

    sweep = tmp_path / "sweep"
    proc = _run_train(
        [
            "-m",
            "+experiment=snr_filter",
            "trainer=smoke",
            "filter=none,snr_top_p",
            *SMALL,
            "trainer.prompts_per_iter=2",
            "trainer.group_size=2",
            "trainer.val_every=0",
            "trainer.val_levels=4",
            "diagnostics.mi.enabled=false",
            "diagnostics.grad_snr.every=0",
            "rollout.max_new_tokens=8",  # seconds-long rollouts
            f"model.cache_dir={ragen_cache_dir}",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (sweep / "multirun.yaml").is_file()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1"]
    arms = []
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        assert Path(summary["run_dir"]).resolve() == job.resolve()  # the job's own dir, not a shared one
        assert any((job / "tb").rglob("events.out.tfevents.*"))
        cfg = summary["config"]
        assert cfg["trainer"]["total_iterations"] == 1 and cfg["trainer"]["val_levels"] == 4
        assert cfg["env"]["success_rate"] == 0.98 and cfg["env"]["name"] == "frozenlake"
        arms.append(cfg["filter"]["name"])
    assert arms == ["none", "snr_top_p"]
    assert not (tmp_path / "outputs").exists()  # nothing written to the single-run dir

    out = tmp_path / "report"
    assert report_main([str(sweep), "--out", str(out)]) in (0, 1)  # 1: no matplotlib, report.md still written
    report = (out / "report.md").read_text()
    lines = report.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| filter.name |"))  # the summary table
    rows = []
    for line in lines[head + 2 :]:  # after the header and its |---| line
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    assert [(r[0], r[1]) for r in rows] == [("none", "1"), ("snr_top_p", "1")], report  # one row per arm, 1 run each


@pytest.mark.slow
def test_multirun_with_a_bad_job_exits_2_before_any_job_runs(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _run_train(
        ["-m", "+experiment=snr_filter", "filter=none,snr_top_p", "filter.value=1.5", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "config error: filter.value must be in (0, 1] for strategy top_p" in proc.stderr
    assert not sweep.exists()
