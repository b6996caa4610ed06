"""The console scripts, run as a user runs them (a subprocess), on tiny settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from test_trainer import base_overrides, scalars


def run_cli(script: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which(script, path=os.path.dirname(sys.executable))  # this interpreter's script, not PATH's
    entry = {"ragen-train": "train_main", "ragen-sft": "sft_main"}[script]
    cmd = [exe] if exe else [sys.executable, "-c", f"from ragen_torchrl.trainer.cli import {entry}; {entry}()"]
    env = dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="1")
    return subprocess.run(cmd + list(overrides), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_ragen_train_guess_numbers_with_t3_end_to_end(ragen_cache_dir, tmp_path):
    run_dir = tmp_path / "gn"
    proc = run_cli(
        "ragen-train",
        *base_overrides(ragen_cache_dir),
        "env=guess_numbers",
        "t3.enabled=true",
        "sft.episodes=4",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "validation success: start" in proc.stdout
    tags = scalars(run_dir)
    for tag in ("t3/rollout_tokens", "t3/truncation_rate", "t3/tokens_per_success", "val/success"):
        assert tag in tags
    assert (run_dir / "checkpoints" / "last.pt").exists()


def test_ragen_train_bad_value_fails_before_training(tmp_path):
    proc = run_cli("ragen-train", "trainer.prompts_per_iter=-2", f"hydra.run.dir={tmp_path / 'bad'}", cwd=tmp_path)
    assert proc.returncode == 2
    assert "trainer.prompts_per_iter must be a positive integer" in proc.stdout + proc.stderr
    assert not (tmp_path / "bad").exists()


# --------------------------------------------------------------------------- config errors: exit 2
def _bad_cases(tmp: Path) -> list[tuple[list[str], str]]:
    afile = tmp / "afile"
    (tmp / "no_ckpt" / "checkpoints").mkdir(parents=True, exist_ok=True)
    afile.write_text("")
    return [
        (["algo.lr=nan"], "algo.lr must be a finite number, got nan"),
        (["env.format_penalty=nan"], "env.format_penalty must be a finite number"),
        (["seed=abc"], "seed must be an integer, got 'abc'"),
        (["trainer.group_size=1"], "trainer.group_size=1 with algo.name=grpo"),
        (["filter=snr_top_p", "filter.value=1.5"], "filter.value must be in (0, 1] for strategy top_p"),
        (["algo.clip_epsilon=5"], "algo.clip_epsilon low must be < 1"),
        (["t3.enabled=true"], "t3.enabled=true needs an env with a T3 stall rule"),
        (["+foo=1"], "unknown config key(s): foo"),
        (["env.size=100000"], "env.size=100000 exceeds the limit 64"),
        (["model.name_or_path=/nonexistent"], "model.name_or_path=/nonexistent: the local path does not exist"),
        ([f"model.cache_dir={afile}/cache"], f"model.cache_dir={afile}/cache cannot be created"),
        ([f"hydra.run.dir={afile}/run"], f"hydra.run.dir={afile}/run cannot be created"),
        ([f"trainer.resume={tmp / 'no_ckpt'}"], f"trainer.resume={tmp / 'no_ckpt'}: no checkpoint in"),
    ]


def test_ragen_train_config_errors_exit_2_naming_the_key_before_anything_is_built(tmp_path):
    # "config errors all exit 2 with a message naming the key ... before any model is built"
    cache = tmp_path / "cache"
    for i, (overrides, message) in enumerate(_bad_cases(tmp_path)):
        run_dir = tmp_path / f"run{i}"
        args = [f"model.cache_dir={cache}", f"hydra.run.dir={run_dir}", *overrides]
        proc = run_cli("ragen-train", *args, cwd=tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, (overrides, out[-3000:])
        assert f"config error: {message}" in proc.stderr, (overrides, out[-3000:])
        assert "Traceback" not in out, (overrides, out[-3000:])
        # validated before Hydra made the run dir: no run dir, no model or cache files
        assert not run_dir.exists(), overrides
        assert not cache.exists(), overrides


def test_ragen_sft_config_error_exits_2(tmp_path):
    proc = run_cli(
        "ragen-sft",
        "algo.lr=nan",
        f"model.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "config error: algo.lr must be a finite number" in proc.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()
