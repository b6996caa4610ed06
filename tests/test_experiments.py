"""``ragen-experiment``: the registry of experiments, their plans and costs, and a tiny real run.

Every registered run composes and validates as ``ragen-train`` would run it (nothing is trained);
one tiny experiment (1 seed x 2 arms x 1 iteration, subprocess runs) goes end to end through the
report.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ragen_torchrl.experiments import EXPERIMENTS, Arm, Experiment, estimate_seconds, main, plan, run_experiment
from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_paths import CONFIG_DIR

#: the result sets of the repository (docs/results and the README's Results), each with its command
REPO_EXPERIMENTS = {
    "default_run",
    "snr_filter_frozenlake",
    "snr_filter_sokoban",
    "template_collapse",
    "mi_vs_entropy",
    "slip_sweep",
    "t3_cpu",
    "mechanism_rl",
}


def compose_run(overrides: list[str]):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=overrides)


def test_every_result_set_is_registered():
    assert set(EXPERIMENTS) == REPO_EXPERIMENTS


@pytest.mark.parametrize("name", sorted(REPO_EXPERIMENTS))
def test_dry_run_prints_the_plan_and_cost_and_runs_nothing(name, tmp_path, capsys):
    exp = EXPERIMENTS[name]
    out = tmp_path / "out"
    assert main([name, "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    runs = [line.split(":")[0].strip() for line in text.splitlines() if line.startswith("  ") and "ragen-train" in line]
    # arms interleaved by seed: every arm of seed s before any run of the next seed
    assert runs == [f"{a.name}_seed{s}" for s in exp.seeds for a in exp.arms]
    cost = estimate_seconds(exp)
    assert f"estimated cost: {cost['cpu_hours']:.1f} CPU-hours" in text
    assert "estimated from" in text
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(REPO_EXPERIMENTS))
def test_every_planned_run_composes_and_validates(name):
    exp = EXPERIMENTS[name]
    runs = plan(exp, seeds=[7])
    for i, (run, overrides) in enumerate(runs):
        cfg = compose_run(overrides)  # an unknown key fails here
        if i in (0, len(runs) - 1):  # validation takes seconds: the first and the last arm
            validate_config(cfg)  # a bad value would be a ConfigError here, not hours into the sweep
        assert cfg.seed == 7, run
        assert int(cfg.model.get("threads") or 0) == exp.threads, run


def test_arms_differ_only_in_their_own_overrides():
    exp = EXPERIMENTS["snr_filter_frozenlake"]
    cfgs = {run: OmegaConf.to_container(compose_run(o), resolve=True) for run, o in plan(exp, seeds=[0])}
    none, top_p, equal = cfgs["none_seed0"], cfgs["top_p_seed0"], cfgs["top_p_equal_steps_seed0"]
    assert none["filter"]["name"] == "none" and top_p["filter"]["name"] == "snr_top_p"
    assert {k for k in none if none[k] != top_p[k]} == {"filter"}
    # the equal-steps arm: the unfiltered arm's optimizer steps (60 iterations x 64 rows / 16 per step)
    steps = none["trainer"]["total_iterations"] * none["trainer"]["prompts_per_iter"] * none["trainer"]["group_size"]
    assert equal["trainer"]["max_optimizer_steps"] == steps // none["algo"]["mini_batch_size"] == 240
    assert none["trainer"]["max_optimizer_steps"] is None


def test_mechanism_experiment_meets_its_design():
    exp = EXPERIMENTS["mechanism_rl"]
    assert len(exp.seeds) >= 5 and [a.name for a in exp.arms] == ["none", "top_p"]
    for run, overrides in plan(exp, seeds=[0]):
        cfg = compose_run(overrides)
        assert cfg.trainer.total_iterations >= 200
        assert cfg.algo.kl_coeff > 0 and cfg.algo.entropy_coeff > 0
        assert cfg.diagnostics.mi.enabled and cfg.trainer.val_every > 0
        assert not cfg.trainer.early_stop.collapse_stop.enabled and not cfg.trainer.early_stop.val_stop.enabled
    assert compose_run(plan(exp, seeds=[0])[1][1]).filter.value == 0.9


def test_cost_of_the_frozenlake_snr_experiment_by_hand():
    # per seed: none 60 x 6.7 s + (256 + 256 + 5 x 128) levels x 0.05 s; top-p 60 x 4.4 s + the same;
    # equal steps: 162 iterations x 3.7 s + (512 + 16 x 128) levels x 0.05 s; one warm start 485 s
    per_seed = (402.0 + 57.6) + (264.0 + 57.6) + (599.4 + 128.0)
    cost = estimate_seconds(EXPERIMENTS["snr_filter_frozenlake"])
    assert cost["runs"] == pytest.approx(5 * per_seed)
    assert cost["total"] == pytest.approx(5 * per_seed + 485.0)
    assert cost["cpu_hours"] == pytest.approx((5 * per_seed + 485.0) / 3600)
    assert estimate_seconds(EXPERIMENTS["snr_filter_frozenlake"], seeds=[0])["runs"] == pytest.approx(per_seed)


def test_bad_arguments_are_clear_errors(capsys):
    assert main(["nope"]) == 2
    assert "unknown experiment 'nope' (known: default_run" in capsys.readouterr().err
    assert main(["t3_cpu", "--dry-run", "--seeds", "1", "1"]) == 2
    assert "--seeds must be distinct integers, got [1, 1]" in capsys.readouterr().err
    assert main(["t3_cpu", "--dry-run", "trainer.total_iterations"]) == 2
    assert "overrides are KEY=VALUE, got ['trainer.total_iterations']" in capsys.readouterr().err
    assert main(["t3_cpu", "--dry-run", "--config-dir", "/nonexistent/presets"]) == 2
    assert "--config-dir /nonexistent/presets: no such directory" in capsys.readouterr().err


def test_bare_overrides_and_the_deprecated_o_alias_give_the_same_plan(tmp_path, capsys):
    """``ragen-experiment NAME key=value`` (Hydra style, anywhere among the options) plans what ``-o`` did;
    ``-o`` still works, with a deprecation warning on stderr; ``--config-dir`` becomes every run's search path."""
    assert main(["t3_cpu", "trainer.total_iterations=3", "--dry-run", "--seeds", "0", "--out", str(tmp_path)]) == 0
    bare = capsys.readouterr()
    assert (
        main(["t3_cpu", "--dry-run", "--seeds", "0", "--out", str(tmp_path), "-o", "trainer.total_iterations=3"]) == 0
    )
    alias = capsys.readouterr()
    assert bare.out == alias.out and "trainer.total_iterations=3" in bare.out
    assert bare.err == "" and "-o/--override is deprecated" in alias.err
    presets = tmp_path / "presets"
    presets.mkdir()
    assert main(["t3_cpu", "--dry-run", "--seeds", "0", "--out", str(tmp_path), "--config-dir", str(presets)]) == 0
    assert f"hydra.searchpath=[{presets.resolve().as_uri()}]" in capsys.readouterr().out


def test_user_overrides_replace_the_experiments(capsys):
    runs = plan(EXPERIMENTS["t3_cpu"], seeds=[0], extra=["trainer.total_iterations=3", "t3.enabled=true"])
    assert all(o.count("trainer.total_iterations=3") == 1 and "t3.enabled=true" in o for _, o in runs)
    assert all(sum(x.startswith("t3.enabled=") for x in o) == 1 for _, o in runs)


@pytest.mark.slow
def test_tiny_experiment_runs_both_arms_then_reports(ragen_cache_dir, tmp_path):
    exp = replace(EXPERIMENTS["snr_filter_frozenlake"], arms=EXPERIMENTS["snr_filter_frozenlake"].arms[:2])
    tiny = [
        "trainer=smoke",
        "trainer.total_iterations=1",
        "trainer.prompts_per_iter=2",  # the experiment pins 16 x 4
        "trainer.group_size=2",
        "trainer.val_every=0",
        "trainer.val_levels=4",
        "trainer.log_text_samples=0",
        "rollout.max_new_tokens=8",
        "diagnostics.mi.enabled=false",
        "diagnostics.grad_snr.every=0",
        *TINY_RUN,
        f"model.cache_dir={ragen_cache_dir}",
    ]
    out = tmp_path / "exp"
    assert run_experiment(exp, out, seeds=[0], extra=tiny) in (0, 1)  # 1: no matplotlib, report.md written
    for arm, filt in (("none", "none"), ("top_p", "snr_top_p")):
        run = out / "runs" / f"{arm}_seed0"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["config"]["filter"]["name"] == filt and summary["config"]["seed"] == 0
        assert summary["provenance"]["versions"]["torch"] and "totals" in summary
        assert (run / "scalars.csv").read_text().startswith("iteration,")
    assert (out / "report.md").is_file()
    # a second call finds both runs finished and only writes the report again
    mtime = (out / "runs" / "none_seed0" / "summary.json").stat().st_mtime
    assert run_experiment(exp, out, seeds=[0], extra=tiny) in (0, 1)
    assert (out / "runs" / "none_seed0" / "summary.json").stat().st_mtime == mtime


def test_a_failed_run_stops_the_experiment(tmp_path, capsys):
    exp = Experiment("x", "claim", (), (Arm("a", ("trainer.total_iterations=-1",), 1, 1.0, 0),), (0,))
    status = run_experiment(exp, tmp_path / "exp", extra=["trainer=smoke"])
    assert status == 2  # ragen-train's config error
    assert "run a_seed0 failed with exit status 2" in capsys.readouterr().err
    assert not (tmp_path / "exp" / "report.md").exists()


def test_dry_run_marks_finished_runs_and_costs_only_the_rest(tmp_path, capsys):
    exp = EXPERIMENTS["t3_cpu"]
    out = tmp_path / "out"
    (out / "runs" / "gn_no_t3_seed0").mkdir(parents=True)
    (out / "runs" / "gn_no_t3_seed0" / "summary.json").write_text("{}")
    (out / "runs" / "gn_t3_seed0").mkdir()  # started, not finished: still to run
    assert main(["t3_cpu", "--dry-run", "--seeds", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "  gn_no_t3_seed0: ragen-train" in text and text.count("[finished earlier: skipped]") == 1
    # by hand: the 3 runs left, and only the warm start no finished run has built yet
    left = [a for a in exp.arms if a.name != "gn_no_t3"]
    seconds = sum(a.iterations * a.seconds_per_iteration + a.validation_levels * a.seconds_per_level for a in left)
    seconds += exp.warm_starts["circuit_decoding_small"]  # guess_numbers_small's warm start exists already
    assert f"estimated cost: {seconds / 3600:.1f} CPU-hours" in text and "for the 3 runs still to run" in text


# a stand-in for `python -m ragen_torchrl.train OVERRIDES hydra.run.dir=DIR`: records when it ran,
# sleeps, writes a minimal summary.json; `trainer.total_iterations=-1` makes it fail like a config error
FAKE_TRAIN = """
import json, sys, time
from pathlib import Path
args = sys.argv[3:]
run = Path(next(a.split("=", 1)[1] for a in args if a.startswith("hydra.run.dir=")))
run.mkdir(parents=True, exist_ok=True)
if "trainer.total_iterations=-1" in args:
    print("config error"); sys.exit(2)
start = time.time(); time.sleep(1.5)
print("training", run.name)
seed = int(next(a.split("=", 1)[1] for a in args if a.startswith("seed=")))
name = next(a.split("=", 1)[1] for a in args if a.startswith("filter="))
(run / "span").write_text(f"{start} {time.time()}")
summary = {"config": {"seed": seed, "filter": {"name": name}}, "val_start": {"success": 0.5},
           "val_end": {"success": 0.6}, "history": [], "iterations": 1}
(run / "summary.json").write_text(json.dumps(summary))
"""


def _fake_python(tmp_path):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    exe = tmp_path / "fake_python"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def _two_arms(*extra_arm_overrides):
    arms = (
        Arm("none", ("filter=none", *extra_arm_overrides), 1, 1.0, 0),
        Arm("top_p", ("filter=snr_top_p",), 1, 1.0, 0),
    )
    return Experiment("x", "claim", (), arms, (0, 1), report_by=("filter.name",))


def test_jobs_runs_that_many_at_a_time_each_logging_to_its_run_dir(tmp_path, capsys):
    out = tmp_path / "exp"
    assert run_experiment(_two_arms(), out, python=_fake_python(tmp_path), jobs=2) in (0, 1)  # 1: no matplotlib
    spans = {p.parent.name: tuple(map(float, p.read_text().split())) for p in sorted((out / "runs").glob("*/span"))}
    assert sorted(spans) == ["none_seed0", "none_seed1", "top_p_seed0", "top_p_seed1"]
    # the two runs of seed 0 started together (plan order), and never more than 2 ran at once
    assert spans["none_seed0"][0] < spans["top_p_seed0"][1] and spans["top_p_seed0"][0] < spans["none_seed0"][1]
    for t, _ in spans.values():
        assert sum(a <= t < b for a, b in spans.values()) <= 2
    assert (out / "runs" / "none_seed1" / "console.log").read_text() == "training none_seed1\n"
    assert (out / "report.md").is_file()
    text = capsys.readouterr().out
    assert "[none_seed0] exit status 0 after " in text and "[top_p_seed1] output: " in text


def test_a_failed_run_among_parallel_ones_stops_new_runs_and_the_report(tmp_path, capsys):
    out = tmp_path / "exp"
    status = run_experiment(_two_arms("trainer.total_iterations=-1"), out, python=_fake_python(tmp_path), jobs=2)
    assert status == 2
    assert "run none_seed0 failed with exit status 2" in capsys.readouterr().err
    # top_p_seed0 was already running and finished; nothing of seed 1 started
    assert (out / "runs" / "top_p_seed0" / "summary.json").is_file()
    assert not (out / "runs" / "none_seed1").exists() and not (out / "report.md").exists()


def test_jobs_must_be_positive_and_the_dry_run_gives_the_wall_time(capsys):
    assert main(["t3_cpu", "--dry-run", "--jobs", "0"]) == 2
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err
    assert main(["t3_cpu", "--dry-run", "--jobs", "2"]) == 0
    text = capsys.readouterr().out
    total = estimate_seconds(EXPERIMENTS["t3_cpu"])["total"]
    assert "20 runs, 2 at a time, into" in text
    assert f"; about {total / 2 / 3600:.1f} h wall with 2 runs at a time" in text
