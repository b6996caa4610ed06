"""Crash-safe checkpoints and exact resume.

* the file logic of :mod:`ragen_torchrl.trainer.checkpoint` (keep two, fsync before the
  rename, verify before deleting, fall back on a damaged ``last.pt``, remove a stale ``.tmp``,
  refuse meaning-changing config edits on resume), on small hand-made states;
* the trainer: DAPO's refill counter survives a resume, TensorBoard shows each step once
  after a resume (``purge_step``), a skipped update says why;
* a ``ragen-train`` subprocess killed with SIGKILL while it writes a checkpoint, whose newest
  checkpoint is then damaged: the resume continues from the previous good checkpoint with
  its exact weights and ends bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from test_trainer import base_overrides, make_cfg, scalars, state_equal

import ragen_torchrl.trainer.checkpoint as ckpt_mod
import ragen_torchrl.trainer.iteration as iteration_mod
import ragen_torchrl.trainer.loop as loop_mod
from ragen_torchrl.trainer.checkpoint import (
    DamagedCheckpointError,
    NoCheckpointError,
    check_resume_config,
    load_latest,
    read_checkpoint,
    remove_stale_tmp,
    save_rotating,
)
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.loop import Trainer
from ragen_torchrl.trainer.run_log import iteration_line


def fake_state(it: int) -> dict:
    return {"iteration": it, "model": {"w": torch.full((4,), float(it))}, "optimizer": {}, "rng": {}}


def truncate(path: Path) -> None:
    """Damage a checkpoint as a full disk or a kill during a copy does: cut it in half."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# --------------------------------------------------------------------------- item 6: the file logic
def test_keeps_the_last_two_checkpoints(tmp_path):
    # "keep the last two checkpoints (the previous one survives a damaged newest one)"
    for it in range(4):
        assert save_rotating(fake_state(it), tmp_path) == tmp_path / "last.pt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "prev.pt"]
    assert read_checkpoint(tmp_path / "last.pt")["iteration"] == 3
    assert read_checkpoint(tmp_path / "prev.pt")["iteration"] == 2
    assert torch.equal(read_checkpoint(tmp_path / "prev.pt")["model"]["w"], torch.full((4,), 2.0))


def test_write_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    # "write with fsync before the rename"
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", fd)), real_fsync(fd))[1])
    monkeypatch.setattr(
        os, "replace", lambda a, b: (events.append(("replace", Path(a).name, Path(b).name)), real_replace(a, b))[1]
    )
    save_rotating(fake_state(0), tmp_path)
    save_rotating(fake_state(1), tmp_path)
    renames = [e[1:] for e in events if e[0] == "replace"]
    assert renames == [("last.tmp", "last.pt"), ("last.pt", "prev.pt"), ("last.tmp", "last.pt")]
    first_rename = next(i for i, e in enumerate(events) if e[0] == "replace")
    assert any(e[0] == "fsync" for e in events[:first_rename]), events


def test_a_new_checkpoint_that_does_not_load_deletes_nothing(tmp_path, monkeypatch):
    # "verify a checkpoint loads before deleting the older one"
    save_rotating(fake_state(0), tmp_path)
    save_rotating(fake_state(1), tmp_path)

    def broken_write(state, path):  # e.g. a full disk that still reports success
        Path(path).write_bytes(b"PK\x03\x04 not a whole archive")
        return Path(path)

    monkeypatch.setattr(ckpt_mod, "write_synced", broken_write)
    with pytest.raises(DamagedCheckpointError, match="last.tmp"):
        save_rotating(fake_state(2), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "prev.pt"]
    assert read_checkpoint(tmp_path / "last.pt")["iteration"] == 1
    assert read_checkpoint(tmp_path / "prev.pt")["iteration"] == 0


def test_a_damaged_last_never_replaces_a_good_prev(tmp_path, monkeypatch):
    # the previous checkpoint survives a damaged newest one (also across the next save)
    save_rotating(fake_state(0), tmp_path)
    save_rotating(fake_state(1), tmp_path)
    truncate(tmp_path / "last.pt")
    # read the error from the module's logger itself: what other tests did to logging's global
    # configuration in the same process must not decide whether it is seen
    errors = []
    monkeypatch.setattr(ckpt_mod.log, "error", lambda msg, *args: errors.append(msg % args))
    save_rotating(fake_state(2), tmp_path)
    assert any(str(tmp_path / "last.pt") in e for e in errors)
    assert read_checkpoint(tmp_path / "last.pt")["iteration"] == 2
    assert read_checkpoint(tmp_path / "prev.pt")["iteration"] == 0  # the good one, not the damaged 1


def test_a_damaged_last_is_named_and_prev_is_used(tmp_path, caplog):
    # "a damaged last.pt gives an error naming the file and falls back to the previous checkpoint"
    save_rotating(fake_state(4), tmp_path)
    save_rotating(fake_state(5), tmp_path)
    truncate(tmp_path / "last.pt")
    with pytest.raises(DamagedCheckpointError, match=f"damaged checkpoint {tmp_path / 'last.pt'}"):
        read_checkpoint(tmp_path / "last.pt")
    with caplog.at_level(logging.ERROR, logger=ckpt_mod.__name__):
        state, path = load_latest(tmp_path)
    assert path == tmp_path / "prev.pt" and state["iteration"] == 4
    assert f"damaged checkpoint {tmp_path / 'last.pt'}" in caplog.text


def test_a_stale_tmp_from_a_kill_is_removed(tmp_path):
    # "remove the stale .tmp left by a kill"
    save_rotating(fake_state(0), tmp_path)
    (tmp_path / "last.tmp").write_bytes(b"PK\x03\x04 half written")
    state, path = load_latest(tmp_path)
    assert state["iteration"] == 0 and path.name == "last.pt"
    assert not (tmp_path / "last.tmp").exists()
    assert remove_stale_tmp(tmp_path / "missing") == []


def test_no_loadable_checkpoint_is_a_config_error_naming_every_file(tmp_path):
    # a resume dir without a usable checkpoint is a config error (exit 2), naming the files
    with pytest.raises(NoCheckpointError, match="no checkpoint in"):
        load_latest(tmp_path / "nothing", what="trainer.resume=x")
    save_rotating(fake_state(0), tmp_path)
    save_rotating(fake_state(1), tmp_path)
    truncate(tmp_path / "last.pt")
    truncate(tmp_path / "prev.pt")
    with pytest.raises(ConfigError) as err:
        load_latest(tmp_path, what="trainer.resume=x")
    assert str(err.value).startswith("trainer.resume=x: no loadable checkpoint")
    assert str(tmp_path / "last.pt") in str(err.value) and str(tmp_path / "prev.pt") in str(err.value)
    assert isinstance(err.value, FileNotFoundError)


# --------------------------------------------------------------------------- item 6: config on resume
STORED = {
    "seed": 0,
    "algo": {"name": "grpo", "lr": 1e-5},
    "env": {"name": "frozenlake", "size": 4},
    "trainer": {"total_iterations": 10, "prompts_per_iter": 16, "group_size": 4, "save_every": 5},
    "filter": {"enabled": False, "value": 1.0},
    "model": {"hidden_size": 32, "device": "cpu"},
}


def with_change(key: str, value):
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in STORED.items()}
    *parents, leaf = key.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[leaf] = value
    return cfg


@pytest.mark.parametrize(
    "key,value",
    [
        ("algo.name", "dapo"),
        ("algo.lr", 2e-5),
        ("env.name", "sokoban"),
        ("env.size", 6),
        ("trainer.prompts_per_iter", 8),
        ("trainer.group_size", 8),
        ("filter.enabled", True),
        ("filter.value", 0.9),
        ("seed", 1),
        ("model.hidden_size", 64),
    ],
)
def test_resume_refuses_a_change_that_alters_the_run(key, value, caplog):
    # "refuse a change that alters the run's meaning (algo, env, batch shape) unless ... explicit flag"
    given = with_change(key, value)
    with pytest.raises(ConfigError, match=re.escape(f"{key}: {stored_value(key)} -> {value}")) as err:
        check_resume_config(STORED, given)
    assert "trainer.resume_allow_changes=true" in str(err.value)
    with caplog.at_level(logging.WARNING, logger=ckpt_mod.__name__):
        assert check_resume_config(STORED, given, allow_changes=True) == [(key, stored_value(key), value)]
    assert key in caplog.text  # an allowed change is still logged


def stored_value(key: str):
    node = STORED
    for p in key.split("."):
        node = node[p]
    return node


@pytest.mark.parametrize(
    "key,value", [("trainer.total_iterations", 20), ("trainer.save_every", 1), ("model.device", "cuda")]
)
def test_resume_accepts_and_logs_harmless_changes(key, value, caplog):
    # "log what changed" (harmless: more iterations, another save period, another device)
    with caplog.at_level(logging.INFO, logger=ckpt_mod.__name__):
        assert check_resume_config(STORED, with_change(key, value)) == [(key, stored_value(key), value)]
    assert f"{key}: {stored_value(key)!r} -> {value!r}" in caplog.text


def test_resume_logs_but_accepts_a_key_only_one_config_has(caplog):
    # a checkpoint from an older code version lacks a newer key: compared keys only, the rest is logged
    given = with_change("algo.new_option", 1)
    with caplog.at_level(logging.WARNING, logger=ckpt_mod.__name__):
        assert check_resume_config(STORED, given) == [("algo.new_option", "<absent>", 1)]
    assert "algo.new_option only in the given config" in caplog.text


# --------------------------------------------------------------------------- item 8: the iteration line
STATS = {"rollout/reward_mean": -0.5, "rollout/success": 0.0, "rollout/tokens": 38.0, "timing/total": 1.25}


@pytest.mark.parametrize(
    "extra,expected",
    [
        (
            {
                "filter/skipped_update": 1.0,
                "filter/num_groups": 2.0,
                "filter/zero_variance_groups": 2.0,
                "filter/kept_ratio": 0.0,
            },
            "update skipped: the filter kept none of the 2 groups (2 with zero reward variance) 1.2s kept 0.00",
        ),
        (
            {"dapo/skipped_update": 1.0, "dynamic_sampling/extra_rollouts": 3.0},
            "update skipped: no group carries signal after 3 refill rollouts (DAPO dynamic sampling) 1.2s",
        ),
        (
            {"train/optimizer_steps": 0.0, "train/skipped_nonfinite": 2.0},
            "update skipped: non-finite loss or gradient in all 2 mini-batches 1.2s",
        ),
        ({"train/optimizer_steps": 1.0, "train/loss": 0.03125}, "loss +0.0312 1.2s"),
    ],
)
def test_iteration_line_says_why_an_update_was_skipped(extra, expected):
    # "when the filter keeps no group the iteration line prints `loss +nan`: print that the update
    # was skipped and why"
    line = iteration_line(2, 5, {**STATS, **extra})
    assert line == "[iter    2/5] reward -0.500 success 0.000 tokens 38 " + expected
    assert "nan" not in line


# --------------------------------------------------------------------------- the trainer
@pytest.mark.slow
def test_filter_keeping_nothing_prints_skipped_update(ragen_cache_dir, tmp_path, capsys):
    # the printed line of a real run whose filter keeps no group
    trainer = Trainer(
        make_cfg(ragen_cache_dir, "filter=snr_top_p", "trainer.total_iterations=1", "trainer.val_every=0"),
        run_dir=tmp_path / "run",
    )
    real = trainer.snr

    class KeepsNothing:
        def row_mask(self, records, groups=None, step=None):
            mask, stats = real.row_mask(records, groups, step=step)
            return torch.zeros_like(mask), stats

    trainer.snr = KeepsNothing()
    trainer.fit()
    out = capsys.readouterr().out
    assert "[iter    1/1]" in out and "update skipped: the filter kept none of the 2 groups" in out
    assert "loss +nan" not in out


@pytest.mark.slow
def test_resumed_dapo_run_draws_the_same_refill_levels(ragen_cache_dir, tmp_path, monkeypatch):
    # "Store what resume needs to be exact, including DAPO's refill counter (today a resumed DAPO
    # run draws other refill levels)"; refill k of a run draws levels from seed + 7919 * k (iteration._collect_more)
    calls = []
    real = iteration_mod.train_level_seeds

    def recorded(seed, it, n):
        calls.append((seed, it, n))
        return real(seed, it, n)

    monkeypatch.setattr(iteration_mod, "train_level_seeds", recorded)
    extra = ("algo=dapo", "trainer.val_every=0", "sft.episodes=4")
    straight = Trainer(make_cfg(ragen_cache_dir, *extra, "trainer.total_iterations=2"), run_dir=tmp_path / "s")
    straight.fit()
    straight_calls, calls[:] = list(calls), []
    first = Trainer(make_cfg(ragen_cache_dir, *extra, "trainer.total_iterations=1"), run_dir=tmp_path / "f")
    first.fit()
    # the 3-step warm start never succeeds: every group is dropped and all 3 refills run per iteration
    assert first.history[-1]["dynamic_sampling/extra_rollouts"] == 3.0 and first._refills == 3
    calls[:] = []
    resumed = Trainer(
        make_cfg(ragen_cache_dir, *extra, "trainer.total_iterations=2", f"trainer.resume={tmp_path / 'f'}"),
        run_dir=tmp_path / "r",
    )
    resumed.fit()
    # iteration index 1: the main batch (seed 0), then refills 4, 5, 6 -> seeds 7919 * 4, 7919 * 5, 7919 * 6
    assert calls == [(0, 1, 2), (31676, 1, 2), (39595, 1, 2), (47514, 1, 2)]
    assert calls == straight_calls[4:]
    assert resumed._refills == straight._refills == 6
    assert state_equal(resumed.model.state_dict(), straight.model.state_dict())


@pytest.mark.slow
def test_resume_refuses_another_algorithm_before_building_a_model(ragen_cache_dir, tmp_path, monkeypatch):
    # "refuse a change that alters the run's meaning (algo, env, batch shape) unless ... flag"
    run_dir = tmp_path / "run"
    Trainer(make_cfg(ragen_cache_dir, "trainer.total_iterations=1", "trainer.val_every=0"), run_dir=run_dir).fit()

    def no_model(*a, **k):
        raise AssertionError("a model was built before the config check")

    with monkeypatch.context() as m:
        m.setattr(loop_mod, "load_policy", no_model)
        for change in ("algo=drgrpo", "trainer.group_size=4", "env=sokoban"):
            with pytest.raises(ConfigError, match="resuming with a config that changes the run") as err:
                Trainer(make_cfg(ragen_cache_dir, change, f"trainer.resume={run_dir}"), run_dir=tmp_path / "x")
            assert "trainer.resume_allow_changes=true" in str(err.value)
    resumed = Trainer(
        make_cfg(
            ragen_cache_dir,
            "seed=1",
            "trainer.total_iterations=2",
            f"trainer.resume={run_dir}",
            "trainer.resume_allow_changes=true",
        ),
        run_dir=tmp_path / "x",
    )
    assert resumed.iteration == 1


@pytest.mark.slow
def test_tensorboard_shows_a_re_run_iteration_once(ragen_cache_dir, tmp_path, monkeypatch):
    # "the re-run iteration is logged twice (21 duplicate points at step 2): open the writer with
    # purge_step at the resumed iteration"
    run_dir = tmp_path / "run"
    first = Trainer(make_cfg(ragen_cache_dir, "trainer.total_iterations=2", "trainer.save_every=1"), run_dir=run_dir)
    saves = []
    real_save = first.save_checkpoint
    # killed after logging iteration 2, before its checkpoint: only the iteration-1 checkpoint exists
    monkeypatch.setattr(first, "save_checkpoint", lambda: saves.append(1) or (real_save() if len(saves) == 1 else None))
    first.fit()
    assert torch.load(run_dir / "checkpoints/last.pt", weights_only=True)["iteration"] == 0
    logged = scalars(run_dir)
    assert [s for s, _ in logged["train/loss"]] == [1, 2]

    resumed = Trainer(
        make_cfg(ragen_cache_dir, "trainer.total_iterations=2", f"trainer.resume={run_dir}"),
        run_dir=tmp_path / "ignored",
    )
    assert resumed.iteration == 1
    resumed.fit()
    logged = scalars(run_dir)
    assert [s for s, _ in logged["train/loss"]] == [1, 2]  # not [1, 2, 2]
    assert [s for s, _ in logged["val/success"]] == [0, 1, 2]  # start, val_every=1, end; not [0, 1, 2, 2]
    assert [v for _, v in logged["train/loss"]] == [h["train/loss"] for h in resumed.history]
    assert all(len(points) == len({s for s, _ in points}) for points in logged.values())  # no step twice, any tag
    assert resumed.logger.purge_step == 2  # the first step the resumed run logs


@pytest.mark.slow
def test_damaged_last_resumes_from_prev_with_its_weights(ragen_cache_dir, tmp_path, caplog):
    # "a damaged last.pt gives an error naming the file and falls back to the previous checkpoint"
    run_dir = tmp_path / "run"
    first = Trainer(make_cfg(ragen_cache_dir, "trainer.total_iterations=2", "trainer.save_every=1"), run_dir=run_dir)
    first.fit()
    prev = torch.load(run_dir / "checkpoints/prev.pt", weights_only=True)
    assert prev["iteration"] == 0
    assert sorted(s for s, _ in scalars(run_dir)["train/loss"]) == [1, 2]
    truncate(run_dir / "checkpoints/last.pt")

    with caplog.at_level(logging.ERROR):
        resumed = Trainer(
            make_cfg(ragen_cache_dir, "trainer.total_iterations=2", f"trainer.resume={run_dir}"),
            run_dir=tmp_path / "ignored",
        )
    assert f"damaged checkpoint {run_dir / 'checkpoints/last.pt'}" in caplog.text
    assert resumed.resumed_from == run_dir / "checkpoints/prev.pt"
    assert resumed.iteration == 1 and resumed.logger.purge_step == 2
    assert state_equal(resumed.model.state_dict(), prev["model"])
    resumed.fit()
    assert state_equal(resumed.model.state_dict(), first.model.state_dict())  # re-ran iteration 2 exactly
    logged = scalars(run_dir)
    assert [s for s, _ in logged["train/loss"]] == [1, 2]  # not [1, 2, 2]
    assert [s for s, _ in logged["val/success"]] == [0, 1, 2]
    assert [v for _, v in logged["train/loss"]] == [h["train/loss"] for h in first.history]


# --------------------------------------------------------------------------- kill -9 while writing
CHILD = textwrap.dedent("""
    import io, os, sys, time, torch
    real_save = torch.save
    writes = []

    def save(obj, f, *args, **kwargs):
        # the N-th checkpoint write stops half-way and waits to be killed
        # the checkpoint's temp file is opened by descriptor (O_EXCL | O_NOFOLLOW): its path via /proc
        name = getattr(f, "name", f)
        if isinstance(name, int):
            name = os.readlink(f"/proc/self/fd/{f.fileno()}")
        if str(name).endswith(".tmp"):
            writes.append(1)
            if len(writes) == int(os.environ["KILL_AT_WRITE"]):
                buf = io.BytesIO()
                real_save(obj, buf, *args, **kwargs)
                f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                f.flush()
                open(os.environ["KILL_MARKER"], "w").close()
                time.sleep(300)
        return real_save(obj, f, *args, **kwargs)

    torch.save = save
    from ragen_torchrl.trainer.cli import train_main
    train_main()
""")


@pytest.mark.slow
def test_kill_during_checkpoint_write_then_damaged_last_resumes_from_prev(ragen_cache_dir, tmp_path, caplog):
    # "A test kills a training subprocess while it writes a checkpoint and after a damaged newest
    # checkpoint, then resumes: the run continues from the previous good checkpoint with identical weights"
    run_dir, marker = tmp_path / "killed", tmp_path / "writing"
    overrides = [
        *base_overrides(ragen_cache_dir),
        "trainer.total_iterations=3",
        "trainer.save_every=1",
        "trainer.val_every=0",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", KILL_AT_WRITE="3", KILL_MARKER=str(marker))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *overrides, f"hydra.run.dir={run_dir}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 240
        while not marker.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert marker.exists(), proc.communicate(timeout=30)[0][-3000:] if proc.poll() is not None else "no write"
        proc.send_signal(signal.SIGKILL)  # while the third checkpoint (iteration index 2) is half written
        out = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert "[iter    3/3]" in out
    ckpts = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["last.pt", "last.tmp", "prev.pt"]
    assert read_checkpoint(ckpts / "last.pt")["iteration"] == 1
    prev = read_checkpoint(ckpts / "prev.pt")
    assert prev["iteration"] == 0
    truncate(ckpts / "last.pt")  # and then the newest checkpoint is damaged too

    with caplog.at_level(logging.WARNING):
        resumed = Trainer(
            make_cfg(ragen_cache_dir, "trainer.total_iterations=3", "trainer.val_every=0", f"trainer.resume={run_dir}"),
            run_dir=tmp_path / "ignored",
        )
    assert not (ckpts / "last.tmp").exists()
    assert f"damaged checkpoint {ckpts / 'last.pt'}" in caplog.text
    assert resumed.resumed_from == ckpts / "prev.pt" and resumed.iteration == 1
    assert state_equal(resumed.model.state_dict(), prev["model"])
    opt = resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(opt[i]["exp_avg"], s["exp_avg"]) for i, s in prev["optimizer"]["state"].items())
    resumed.fit()
    assert resumed.iteration == 3 and [h["iteration"] for h in resumed.history] == [1, 2, 3]

    straight = Trainer(
        make_cfg(ragen_cache_dir, "trainer.total_iterations=3", "trainer.val_every=0"), run_dir=tmp_path / "straight"
    )
    straight.fit()
    assert state_equal(resumed.model.state_dict(), straight.model.state_dict())
