"""The console scripts, run as a user runs them (a subprocess), on tiny settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_trainer import base_overrides, scalars


def run_cli(script: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which(script)
    entry = {"ragen-train": "train_main", "ragen-sft": "sft_main"}[script]
    cmd = [exe] if exe else [sys.executable, "-c", f"from ragen_torchrl.trainer.cli import {entry}; {entry}()"]
    env = dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="1")
    return subprocess.run(cmd + list(overrides), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_ragen_train_guess_numbers_with_t3_end_to_end(ragen_cache_dir, tmp_path):
    run_dir = tmp_path / "gn"
    proc = run_cli("ragen-train", *base_overrides(ragen_cache_dir), "env=guess_numbers", "t3.enabled=true",
                   "sft.episodes=4", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "validation success: start" in proc.stdout
    tags = scalars(run_dir)
    for tag in ("t3/rollout_tokens", "t3/truncation_rate", "t3/tokens_per_success", "val/success"):
        assert tag in tags
    assert (run_dir / "checkpoints" / "last.pt").exists()


def test_ragen_train_bad_value_fails_before_training(tmp_path):
    proc = run_cli("ragen-train", "trainer.prompts_per_iter=-2", f"hydra.run.dir={tmp_path / 'bad'}", cwd=tmp_path)
    assert proc.returncode != 0
    assert "trainer.prompts_per_iter must be a positive integer" in proc.stdout + proc.stderr
    assert not (tmp_path / "bad" / "checkpoints").exists()
