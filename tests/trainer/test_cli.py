"""The console scripts on tiny settings.

A training run and one config error go through ``ragen-train`` as a user runs it (a subprocess);
the other config errors run the same Hydra composition and preflight check in this process, and
``ragen-sft``'s Hydra app runs in this process too (a subprocess costs seconds of imports each).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from test_trainer import base_overrides, scalars

from ragen_torchrl.trainer.cli import PreflightCallback
from ragen_torchrl.trainer.config_paths import CONFIG_DIR


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
    # the CLI's error output: exit 2, one "config error: <key>..." line, no traceback, nothing written
    cache, run_dir = tmp_path / "cache", tmp_path / "bad"
    proc = run_cli(
        "ragen-train",
        "trainer.prompts_per_iter=-2",
        f"model.cache_dir={cache}",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "config error: trainer.prompts_per_iter must be a positive integer" in proc.stderr, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert not run_dir.exists() and not cache.exists()


# --------------------------------------------------------------------------- config errors: exit 2
#: (overrides, message); {tmp} is the test's tmp dir, holding a file "afile" and a run dir without a checkpoint
BAD_CASES = [
    (["algo.lr=nan"], "algo.lr must be a finite number, got nan"),
    (["env.format_penalty=nan"], "env.format_penalty must be a finite number"),
    (["seed=abc"], "seed must be an integer, got 'abc'"),
    (["filter=snr_top_p", "filter.value=1.5"], "filter.value must be in (0, 1] for strategy top_p"),
    (["algo.clip_epsilon=5"], "algo.clip_epsilon low must be < 1"),
    (["t3.enabled=true"], "t3.enabled=true needs an env with a T3 stall rule"),
    (["+foo=1"], "unknown config key(s): foo"),
    (["env.size=100000"], "env.size=100000 exceeds the limit 64"),
    (["model.name_or_path=/nonexistent"], "model.name_or_path=/nonexistent: the local path does not exist"),
    (["model.cache_dir={tmp}/afile/cache"], "model.cache_dir={tmp}/afile/cache cannot be created"),
    (["hydra.run.dir={tmp}/afile/run"], "hydra.run.dir={tmp}/afile/run cannot be created"),
    (["trainer.resume={tmp}/no_ckpt"], "trainer.resume={tmp}/no_ckpt: no checkpoint in"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_CASES, ids=[o[0].split("=")[0] for o, _ in BAD_CASES])
def test_ragen_train_config_errors_exit_2_naming_the_key_before_anything_is_built(overrides, message, tmp_path, capsys):
    # "config errors all exit 2 with a message naming the key ... before any model is built": the
    # check ragen-train's Hydra callback runs before the run dir exists, on the config Hydra composes
    # (test_ragen_train_bad_value_fails_before_training runs that callback through the real CLI)
    (tmp_path / "no_ckpt" / "checkpoints").mkdir(parents=True)
    (tmp_path / "afile").write_text("")
    overrides = [o.format(tmp=tmp_path) for o in overrides]
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[f"model.cache_dir={cache}", f"hydra.run.dir={run_dir}", *overrides],
            return_hydra_config=True,
        )
    with pytest.raises(SystemExit) as exit_info:
        PreflightCallback().on_run_start(cfg)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, (overrides, err)
    assert f"config error: {message.format(tmp=tmp_path)}" in err, (overrides, err)
    # validated before Hydra made the run dir: no run dir, no model or cache files
    assert not run_dir.exists(), overrides
    assert not cache.exists(), overrides


def test_ragen_sft_config_error_exits_2(tmp_path, monkeypatch, capsys):
    # ragen-sft's Hydra app in this process (its preflight is the one ragen-train's subprocess test runs)
    from hydra.core.global_hydra import GlobalHydra

    from ragen_torchrl.trainer.cli import sft_main

    args = ["algo.lr=nan", f"model.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]
    monkeypatch.setattr(sys, "argv", ["ragen-sft", *args])
    try:
        with pytest.raises(SystemExit) as exit_info:
            sft_main()
    finally:
        GlobalHydra.instance().clear()
    assert exit_info.value.code == 2
    assert "config error: algo.lr must be a finite number" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


# --------------------------------------------------------------------------- --help and --describe
def _run_train_main(monkeypatch, *args: str) -> int:
    from hydra.core.global_hydra import GlobalHydra

    from ragen_torchrl.trainer.cli import train_main

    monkeypatch.setattr(sys, "argv", ["ragen-train", *args])
    try:
        with pytest.raises(SystemExit) as exit_info:
            train_main()
    finally:
        GlobalHydra.instance().clear()
    return exit_info.value.code


def test_ragen_train_help_lists_the_groups_and_describe(monkeypatch, capsys):
    from ragen_torchrl.trainer.config_schema import GROUPS

    assert _run_train_main(monkeypatch, "--help") in (0, None)
    out = capsys.readouterr().out
    assert "algo: dapo, dapo_ragen, drgrpo, grpo, gspo, ppo" in out  # the groups and their presets
    assert "ragen-train --describe algo.clip_epsilon" in out
    for group in GROUPS:
        assert group in out, group


def test_ragen_train_describe_prints_type_default_and_help(monkeypatch, capsys):
    assert _run_train_main(monkeypatch, "--describe", "algo.clip_epsilon") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "algo.clip_epsilon: Any = null"
    assert "clip-higher" in out and "the algorithm's own" in out
    # a whole group: every field of the dataclass, the early-stop node included
    assert _run_train_main(monkeypatch, "--describe=trainer") == 0
    out = capsys.readouterr().out
    assert "trainer.total_iterations: int = 60" in out
    assert "trainer.early_stop.val_stop.patience: int = 5" in out
    # one option of a group chosen by name
    assert _run_train_main(monkeypatch, "--describe", "env.sokoban") == 0
    out = capsys.readouterr().out
    assert "env.dim: Any = " in out and "env.num_boxes: int = 1" in out and "env.size" not in out


def _every_preset() -> list[str]:
    root = Path(CONFIG_DIR)
    return sorted(
        f"{d.name}={f.stem}" for d in root.iterdir() if d.is_dir() and d.name != "experiment" for f in d.glob("*.yaml")
    )


@pytest.mark.parametrize("choice", _every_preset())
def test_describe_group_option_prints_what_that_preset_composes(choice):
    from omegaconf import OmegaConf

    from ragen_torchrl.trainer.cli import describe_preset
    from ragen_torchrl.trainer.config_describe import shown_value

    group = choice.split("=", 1)[0]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[choice])
    printed = {}
    for line in describe_preset(choice).splitlines():
        if line.startswith(f"{group}.") and ": " in line and " = " in line:
            key, rest = line.split(": ", 1)
            printed[key] = rest.split(" = ", 1)[1]
        elif " = " in line and not line.startswith((" ", "#")):
            key, value = line.split(" = ", 1)
            printed[key] = value
    composed = OmegaConf.to_container(cfg[group], resolve=False)

    def leaves(tree, prefix):
        for k, v in tree.items():
            if isinstance(v, dict) and k != "architecture":
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    # every composed key of the group is printed, with the composed value (the schema's fields are
    # all there: a preset cannot set a key the schema lacks)
    for key, value in leaves(composed, f"{group}."):
        assert key in printed, f"{choice}: {key} not printed"
        assert printed[key] == shown_value(value), (choice, key)
    if choice == "model=smollm2":  # a _global_ preset's pins outside its group are shown too
        assert printed["algo.lr"] == "1e-05" and printed["sft.steps"] == "100"
    if choice == "algo=dapo":  # the case: what algo=dapo runs, not the schema's defaults
        assert printed["algo.mini_batch_size"] == str(cfg.algo.mini_batch_size)
        assert printed["algo.lr"] == shown_value(cfg.algo.lr)


def test_describe_a_bad_preset_exits_2(monkeypatch, capsys):
    assert _run_train_main(monkeypatch, "--describe", "algo=nope") == 2
    assert "Could not find 'algo/nope'" in capsys.readouterr().err
    assert _run_train_main(monkeypatch, "--describe", "colour=red") == 2


def test_ragen_train_describe_an_unknown_key_exits_2_with_a_suggestion(monkeypatch, capsys):
    assert _run_train_main(monkeypatch, "--describe", "algo.clip_ratio") == 2
    assert "did you mean algo.clip_epsilon?" in capsys.readouterr().err


def test_ragen_train_moved_key_on_the_command_line_names_the_new_key(monkeypatch, capsys):
    # Hydra alone would answer "Could not override 'algo.ppo_epochs'" without saying where it went
    assert _run_train_main(monkeypatch, "algo.ppo_epochs=2") == 2
    err = capsys.readouterr().err
    assert "config error: algo.ppo_epochs=2 is now algo.update_epochs" in err
    assert _run_train_main(monkeypatch, "filter.val_stop.patience=3") == 2
    assert "trainer.early_stop.val_stop.patience=3" in capsys.readouterr().err


def test_ragen_train_job_is_named_after_the_app_and_config_dir_adds_presets(monkeypatch, tmp_path, capsys):
    """The run dir gets ``ragen-train.log`` (Hydra's job name is the app's, not the module's ``cli``), and
    ``--config-dir DIR`` adds DIR's presets: ``DIR/env/frozenlake3.yaml`` is ``env=frozenlake3``."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from ragen_torchrl.trainer.cli import train_main

    presets = tmp_path / "presets"
    (presets / "env").mkdir(parents=True)
    (presets / "env" / "frozenlake3.yaml").write_text("defaults:\n  - frozenlake\n  - _self_\nsize: 3\n")
    run = tmp_path / "run"
    argv = [
        "ragen-train",
        "--config-dir",
        str(presets),
        "env=frozenlake3",
        "trainer.dry_run=true",
        f"hydra.run.dir={run}",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    try:
        train_main()
    finally:
        GlobalHydra.instance().clear()
    assert (run / "ragen-train.log").is_file() and not (run / "cli.log").exists()
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    assert (cfg.env.name, cfg.env.size) == ("frozenlake", 3)
    assert OmegaConf.load(run / ".hydra" / "hydra.yaml").hydra.job.name == "ragen-train"
