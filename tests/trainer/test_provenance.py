"""A run's provenance (summary.json), its scalars.csv and its TensorBoard HParams session.

One tiny smoke run (the settings of test_trainer.py: 1-layer hidden-32 model, 3-step warm start,
2 iterations of 2 x 2 rollouts) is shared by the tests of this file.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from test_trainer import make_cfg, scalars

from ragen_torchrl.trainer.loop import Trainer
from ragen_torchrl.trainer.provenance import PhaseClock, git_state, run_totals
from ragen_torchrl.trainer.run_log import read_scalars_csv, write_scalars_csv
from ragen_torchrl.trainer.summary import read_summary

pytestmark = pytest.mark.slow

PHASES = {"setup", "warm_start", "validation", "rollout", "filter", "update", "checkpoint", "export", "other"}


@pytest.fixture(scope="module")
def run(ragen_cache_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("prov") / "run"
    trainer = Trainer(make_cfg(ragen_cache_dir), run_dir=run_dir)
    returned = trainer.fit()
    return run_dir, returned, trainer


def test_summary_records_provenance_phases_and_totals(run):
    run_dir, returned, trainer = run
    s = read_summary(run_dir)
    assert s["provenance"] == returned["provenance"]
    p = s["provenance"]
    assert set(p["versions"]) == {"python", "ragen-torchrl", "torch", "torchrl", "tensordict", "transformers"}
    assert p["versions"]["torch"] == torch.__version__
    m = p["machine"]
    assert m["torch_threads"] == 1  # model.threads=1
    assert m["torch_interop_threads"] >= 1 and 1 <= m["affinity_count"] <= m["cpu_count"]
    assert len(p["load_start"]) == 3 and len(p["load_end"]) == 3
    git = git_state()
    if git is None:  # an installed wheel: nothing to record
        assert p["git"] is None
    else:
        assert p["git"]["commit"] == git["commit"] and len(p["git"]["commit"]) == 40
        assert (p["git"]["diff_hash"] is None) == (not p["git"]["dirty"])

    phases = s["phases"]
    assert PHASES <= set(phases), sorted(phases)
    assert all(v["wall"] >= 0 and v["cpu"] >= 0 for v in phases.values())
    parts = sum(v["wall"] for k, v in phases.items() if k != "total")
    assert math.isclose(parts, phases["total"]["wall"], rel_tol=1e-9)
    # the phases cover the whole Trainer's life, fit() included
    assert phases["total"]["wall"] >= s["seconds"]

    # 2 iterations, one optimizer step each on all 2 x 2 trajectories (no filter)
    hist = s["history"]
    assert s["totals"]["optimizer_steps"] == 2.0 == sum(h["train/optimizer_steps"] for h in hist)
    assert s["totals"]["trained_samples"] == 8.0
    assert s["totals"]["trained_tokens"] == sum(h["train/assistant_tokens"] for h in hist) > 0


def test_scalars_csv_is_every_logged_scalar(run):
    run_dir, _, _ = run
    table = read_scalars_csv(run_dir / "scalars.csv")
    header = (run_dir / "scalars.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "iteration" and header[1:] == sorted(header[1:])
    logged = scalars(run_dir)  # what TensorBoard holds (float32 there)
    hparam_tags = {t for t in logged if t.startswith("hparams/")}
    assert set(header[1:]) == set(logged) - hparam_tags
    for tag, points in logged.items():
        if tag in hparam_tags:
            continue
        assert sorted(s for s in table if tag in table[s]) == [s for s, _ in points], tag
        got = [table[s][tag] for s, _ in points]
        assert got == pytest.approx([v for _, v in points], rel=1e-6, nan_ok=True), tag
    assert sorted(table) == [0, 1, 2]  # validation at the start, then each iteration
    assert set(table[0]) == {t for t, pts in logged.items() if any(s == 0 for s, _ in pts)} - hparam_tags


def test_hparams_session_lands_in_the_run_event_dir(run):
    run_dir, returned, _ = run
    assert not [p for p in (run_dir / "tb").iterdir() if p.is_dir()]  # no timestamped sub-run
    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    assert set(content) == {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    hp = start.hparams
    assert hp["algo.lr"].number_value == pytest.approx(float(returned["config"]["algo"]["lr"]))
    assert hp["filter.name"].string_value == "none"
    assert hp["provenance.versions.torch"].string_value == torch.__version__
    exp = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    metrics = {m.name.tag for m in exp.metric_infos}
    assert {"hparams/val_success_end", "hparams/val_success_peak", "hparams/optimizer_steps"} <= metrics
    logged = scalars(run_dir)
    assert logged["hparams/val_success_end"] == [(2, pytest.approx(returned["val_end"]["success"]))]
    assert logged["hparams/val_success_peak"][0][1] == pytest.approx(returned["val_peak"]["success"])
    assert logged["hparams/optimizer_steps"][0][1] == 2.0


def test_resumed_run_keeps_the_earlier_scalars_and_seconds(ragen_cache_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    cfg = make_cfg(ragen_cache_dir, "trainer.total_iterations=2", "trainer.save_every=1")
    first = Trainer(cfg, run_dir=run_dir)
    real_save = first.save_checkpoint
    saves = []
    # killed after logging iteration 2, before its checkpoint: only the iteration-1 checkpoint exists
    monkeypatch.setattr(first, "save_checkpoint", lambda: saves.append(1) or (real_save() if len(saves) == 1 else None))
    first.fit()
    before = read_summary(run_dir)
    kept = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["clock"]["seconds"]
    resumed = Trainer(
        make_cfg(ragen_cache_dir, "trainer.total_iterations=2", f"trainer.resume={run_dir}"),
        run_dir=tmp_path / "ignored",
    )
    resumed.fit()
    table = read_scalars_csv(run_dir / "scalars.csv")
    assert sorted(table) == [0, 1, 2]  # step 0 (the start validation) came from the first process
    # iteration 2 as the resumed run logged it, not as the interrupted one did
    assert table[2]["train/loss"] == resumed.history[-1]["train/loss"]
    assert table[1]["train/loss"] == before["history"][0]["train/loss"]
    after = read_summary(run_dir)
    assert after["totals"]["optimizer_steps"] == 2.0
    # the checkpointed part's seconds are carried over, and the resumed part's added to them
    assert after["phases"]["rollout"]["wall"] > kept["rollout"][0] > 0
    assert after["phases"]["validation"]["wall"] > kept["validation"][0] > 0  # the start validation was in part 1
    assert set(after["phases"]) >= {"rollout", "update", "validation", "warm_start"}


# --------------------------------------------------------------------------- pure parts
def test_scalars_csv_round_trips_floats_exactly(tmp_path):
    values = [0.1 + 0.2, 1e-320, -0.0, 2.0**60 + 1, float("inf"), -float("inf"), 1 / 3, 123456789.12345678]
    table = {0: {"val/success": 0.25}, 3: {f"t/{i}": v for i, v in enumerate(values)}, 7: {"a,b": 1.5}}
    path = write_scalars_csv(tmp_path / "scalars.csv", table)
    back = read_scalars_csv(path)
    assert back == table
    assert all(math.copysign(1, back[3][f"t/{i}"]) == math.copysign(1, v) for i, v in enumerate(values))
    nan = read_scalars_csv(write_scalars_csv(tmp_path / "n.csv", {1: {"x": float("nan")}}))
    assert math.isnan(nan[1]["x"])
    lines = path.read_text().splitlines()
    assert lines[0] == 'iteration,"a,b",t/0,t/1,t/2,t/3,t/4,t/5,t/6,t/7,val/success'
    assert lines[1] == "0,,,,,,,,,,0.25"


def test_scalars_csv_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("step,a\n1,2\n")
    with pytest.raises(ValueError, match=r"bad.csv: line 1: the header must start with 'iteration'"):
        read_scalars_csv(bad)
    bad.write_text("iteration,a\n1,2\n2,x\n")
    with pytest.raises(ValueError, match=r"bad.csv: line 3: not a row of numbers"):
        read_scalars_csv(bad)


def test_run_totals_by_hand():
    history = [
        {"train/optimizer_steps": 4.0, "train/trajectories": 64.0, "train/assistant_tokens": 1000.0},
        {"filter/skipped_update": 1.0},  # nothing trained
        {"train/optimizer_steps": 2.0, "train/trajectories": 16.0, "train/assistant_tokens": 250.0},
    ]
    assert run_totals(history) == {
        "optimizer_steps": 6.0,
        "trained_samples": 80.0,
        "trained_tokens": 1250.0,
        "updates": 2.0,
    }


def test_phase_clock_charges_each_moment_to_one_phase(monkeypatch):
    import ragen_torchrl.trainer.provenance as prov

    now = iter([0.0, 1.0, 3.0, 6.0, 10.0, 15.0])
    cpu = iter([0.0, 0.5, 1.0, 4.0, 4.0, 9.0])
    monkeypatch.setattr(prov.time, "perf_counter", lambda: next(now))
    monkeypatch.setattr(prov, "cpu_seconds", lambda: next(cpu))
    clock = PhaseClock(phase="setup")  # t=0
    clock.enter("rollout")  # t=1: setup 1 s wall, 0.5 cpu
    outer = clock.enter("validation")  # t=3: rollout 2 s, 0.5 cpu
    clock.enter(outer)  # t=6: validation 3 s, 3 cpu
    clock.enter("update")  # t=10: rollout +4 s, 0 cpu
    assert clock.phases() == {  # t=15: update 5 s, 5 cpu
        "setup": {"wall": 1.0, "cpu": 0.5},
        "rollout": {"wall": 6.0, "cpu": 0.5},
        "validation": {"wall": 3.0, "cpu": 3.0},
        "update": {"wall": 5.0, "cpu": 5.0},
        "total": {"wall": 15.0, "cpu": 9.0},
    }


def test_git_state_of_a_repo_clean_dirty_and_untracked(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    try:
        git("init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not available")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "pkg").mkdir()
    src = tmp_path / "pkg" / "mod.py"
    src.write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-q", "-m", "c")
    clean = git_state(src)
    assert clean["dirty"] is False and clean["diff_hash"] is None and len(clean["commit"]) == 40
    src.write_text("x = 2\n")
    dirty = git_state(src)
    assert dirty["dirty"] is True and len(dirty["diff_hash"]) == 12 and dirty["commit"] == clean["commit"]
    (tmp_path / "pkg" / "new.py").write_text("y = 1\n")
    assert git_state(src)["diff_hash"] != dirty["diff_hash"]  # an untracked file is part of the code
    assert git_state(tmp_path / "pkg" / "new.py") is None  # not tracked: not this checkout's code
    assert git_state(Path(tmp_path).parent / "elsewhere") is None


# --------------------------------------------------------------------------- the optimizer-step cap
def test_max_optimizer_steps_stops_the_run_at_the_cap(ragen_cache_dir, tmp_path):
    # 2 x 2 rows in one mini-batch of 16: one optimizer step per iteration, so the cap ends iteration 2
    cfg = make_cfg(
        ragen_cache_dir, "trainer.total_iterations=5", "trainer.max_optimizer_steps=2", "trainer.val_every=0"
    )
    summary = Trainer(cfg, run_dir=tmp_path / "run").fit()
    assert summary["stop_reason"] == "trainer.max_optimizer_steps=2 reached"
    assert [h["iteration"] for h in summary["history"]] == [1, 2]
    assert summary["totals"]["optimizer_steps"] == 2.0
    assert summary["val_end"] is not None  # the final validation still runs


@pytest.mark.parametrize("value", [0, -3, 1.5, "many"])
def test_max_optimizer_steps_must_be_a_positive_integer(value, tmp_path):
    from ragen_torchrl.trainer.config import validate_config
    from ragen_torchrl.trainer.config_checks import ConfigError

    cfg = make_cfg(str(tmp_path), f"trainer.max_optimizer_steps={value}")
    # a non-integer is caught by the typed field, a non-positive integer by the field's check
    kind = "a positive integer" if isinstance(value, int) else "an integer"
    with pytest.raises(ConfigError, match=rf"trainer.max_optimizer_steps must be {kind}, got {value!r}"):
        validate_config(cfg)
