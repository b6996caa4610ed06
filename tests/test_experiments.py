"""One experiment registry (``configs/experiment/*.yaml``) driving ``ragen-experiment`` and ``ragen-train -m``.

Every experiment's every run composes and validates as ``ragen-train`` would run it (nothing is
trained); a bad spec is a clear error; the plan, the cost and the flags of ``ragen-experiment``; and
one smoke-sized experiment run through both entry points gives the same runs, the same configs and the
same layout.
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

from ragen_torchrl.experiment_plan import (
    Arm,
    Experiment,
    ExperimentSpecError,
    estimate_seconds,
    experiment_from_spec,
    plan,
)
from ragen_torchrl.experiments import ExperimentNotFound, experiment_names, load_experiment, main, run_experiment
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
    "t3_ablation",
    "mechanism_rl",
    "mechanism_no_reg",
    "snr_controls",
    "smollm2_mi_fit",
    "visual_frozenlake",
    "visual_mi",
    "smollm2_mechanism",
}
#: experiment configs without arms: the pins others build on
BASES = {"snr_filter"}


def compose_run(overrides: list[str]):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=overrides)


EXPERIMENTS = {name: load_experiment(name) for name in sorted(REPO_EXPERIMENTS)}


def test_every_result_set_has_an_experiment_config_and_every_config_is_one_or_a_base():
    assert set(experiment_names()) == REPO_EXPERIMENTS | BASES
    assert {name: exp.name for name, exp in EXPERIMENTS.items()} == {n: n for n in REPO_EXPERIMENTS}
    with pytest.raises(ExperimentNotFound, match="snr_filter.yaml has no arms"):
        load_experiment("snr_filter")
    with pytest.raises(ExperimentNotFound, match="unknown experiment 'nope' \\(known: default_run"):
        load_experiment("nope")


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


def test_the_control_arms_differ_from_the_baseline_only_in_what_they_control():
    runs = {r: OmegaConf.to_container(compose_run(o), resolve=True) for r, o in plan(EXPERIMENTS["snr_controls"], [0])}
    none = runs["none_seed0"]
    changed = {run: {k for k in none if none[k] != cfg[k]} for run, cfg in runs.items()}
    assert changed == {
        "none_seed0": set(),
        "top_p_seed0": {"filter"},
        "random_keep_seed0": {"filter"},
        "nonzero_variance_seed0": {"filter"},
        "none_equal_steps_seed0": {"trainer"},
    }
    random_keep, nonzero = runs["random_keep_seed0"]["filter"], runs["nonzero_variance_seed0"]["filter"]
    assert (random_keep["strategy"], random_keep["value"], random_keep["include_zero"]) == ("random", 0.36, True)
    assert (nonzero["strategy"], nonzero["value"], nonzero["include_zero"]) == ("top_p", 1.0, False)
    trainer = runs["none_equal_steps_seed0"]["trainer"]
    assert {k for k in trainer if trainer[k] != none["trainer"][k]} == {"max_optimizer_steps"}
    assert trainer["max_optimizer_steps"] == 108


def test_the_t3_ablation_crosses_the_stall_rule_with_the_malformed_rule():
    exp = EXPERIMENTS["t3_ablation"]
    runs = {r: OmegaConf.to_container(compose_run(o), resolve=True) for r, o in plan(exp, [0])}
    base = runs["retry_no_t3_seed0"]
    # four arms, a full 2 x 2 of t3.enabled x env.malformed; nothing else differs
    cells = {run: (cfg["env"]["malformed"], cfg["t3"]["enabled"]) for run, cfg in runs.items()}
    assert sorted(cells.values()) == [("end", False), ("end", True), ("retry", False), ("retry", True)]
    for run, cfg in runs.items():
        assert {k for k in base if base[k] != cfg[k]} <= {"env", "t3"}, run
        assert {k for k in base["env"] if base["env"][k] != cfg["env"][k]} <= {"malformed"}, run
        assert {k for k in base["t3"] if base["t3"][k] != cfg["t3"][k]} <= {"enabled"}, run
    # on t3_cpu's GuessNumbers env, length and learning rate, plus a 1024-level final evaluation
    env = base["env"]
    assert (env["name"], env["num_digits"], env["num_symbols"], env["split_by"]) == ("guess_numbers", 2, 5, "level")
    t3_cpu_runs = [OmegaConf.to_container(compose_run(o), resolve=True) for _, o in plan(EXPERIMENTS["t3_cpu"], [0])]
    t3_cpu = t3_cpu_runs[0]
    (gn_cpu,) = [c for c in t3_cpu_runs if c["env"]["name"] == "guess_numbers" and not c["t3"]["enabled"]]
    assert {k for k in env if env[k] != gn_cpu["env"][k]} <= {"malformed"}
    for key in ("algo", "diagnostics", "rollout", "sft"):
        assert base[key] == t3_cpu[key], key
    final_eval = base["trainer"].pop("final_eval")
    assert (final_eval["levels"], final_eval["modes"]) == (1024, ["sampled"])
    assert {k: v for k, v in t3_cpu["trainer"].items() if k != "final_eval"} == base["trainer"]
    assert len(exp.seeds) >= 6
    # the report pairs T3 on vs off within each malformed rule, with the validation episodes' length
    assert exp.report_by == ("env.malformed", "t3.enabled") and exp.report_within == ("env.malformed",)
    assert {"final", "final_sampled", "tokens", "val_tokens"} <= set(exp.report_paired)
    # an arm's warm start is named for its malformed rule: the warm-start cache key holds the env config
    assert {a.name: a.warm_start for a in exp.arms} == {
        "retry_no_t3": "guess_numbers_small_retry",
        "retry_t3": "guess_numbers_small_retry",
        "end_no_t3": "guess_numbers_small_end",
        "end_t3": "guess_numbers_small_end",
    }


@pytest.mark.parametrize("name", sorted(REPO_EXPERIMENTS))
def test_every_report_compares_known_measures_of_grouping_keys(name):
    from ragen_torchrl.reporting.table import PAIRED_METRICS

    exp = EXPERIMENTS[name]
    assert set(exp.report_paired) <= set(PAIRED_METRICS)  # else the report fails after the runs
    assert set(exp.report_within) <= set(exp.report_by)


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


def test_the_no_regulariser_arm_differs_from_mechanism_rl_s_unfiltered_arm_in_the_two_coefficients_only():
    exp = EXPERIMENTS["mechanism_no_reg"]
    runs = {r: OmegaConf.to_container(compose_run(o), resolve=True) for r, o in plan(exp, [0])}
    reg, no_reg = runs["reg_seed0"], runs["no_reg_seed0"]
    assert {k for k in reg if reg[k] != no_reg[k]} == {"algo"}
    assert {k for k in reg["algo"] if reg["algo"][k] != no_reg["algo"][k]} == {"kl_coeff", "entropy_coeff"}
    assert (reg["algo"]["kl_coeff"], reg["algo"]["entropy_coeff"]) == (0.01, 0.01)
    assert (no_reg["algo"]["kl_coeff"], no_reg["algo"]["entropy_coeff"]) == (0.0, 0.0)
    mech = OmegaConf.to_container(compose_run(plan(EXPERIMENTS["mechanism_rl"], [0])[0][1]), resolve=True)
    assert mech == reg  # the same run as mechanism_rl's unfiltered arm, at this commit
    assert reg["filter"]["name"] == "none" and reg["trainer"]["total_iterations"] == 200


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


def test_bad_specs_are_clear_errors():
    arm = {"name": "a", "overrides": ["filter=none"], "iterations": 1, "seconds_per_iteration": 1.0}
    good = {"name": "x", "seeds": [0], "arms": [arm]}
    assert experiment_from_spec(good).overrides == ("+experiment=x",)
    cases = [
        ({**good, "arm": []}, "unknown keys \\['arm'\\]"),
        ({**good, "arms": [arm, arm]}, "arm names must be distinct"),
        ({**good, "arms": [{**arm, "overrides": ["seed=3"]}]}, "set seed: the seeds are the experiment's"),
        ({**good, "arms": [{**arm, "overrides": ["filter"]}]}, "overrides are KEY=VALUE"),
        ({**good, "arms": [{**arm, "iterations": -1}]}, "iterations must be >= 0"),
        ({**good, "arms": [{**arm, "name": "a/b"}]}, "name must be a name of letters"),
        ({**good, "seeds": [1, 1]}, "seeds must be distinct"),
        ({**good, "seeds": []}, "seeds must list at least one seed"),
        ({**good, "report": {"group": ["a"]}}, "report takes by, paired and within"),
        ({"seeds": [0], "arms": [arm]}, "name must be the experiment's name"),
    ]
    for spec, message in cases:
        with pytest.raises(ExperimentSpecError, match=message):
            experiment_from_spec(spec)
    with pytest.raises(ExperimentSpecError, match="pick others with --seeds"):
        plan(experiment_from_spec(good), extra=["seed=4"])


def tiny_experiment(cache_dir) -> str:
    """A smoke-sized experiment of the user's (``--config-dir``): 2 arms x 1 seed of 1 iteration, tiny model."""
    pins = OmegaConf.from_dotlist(
        [
            *TINY_RUN,
            f"model.cache_dir={cache_dir}",
            "trainer.total_iterations=1",
            "trainer.prompts_per_iter=2",  # snr_filter pins 16 x 4
            "trainer.group_size=2",
            "trainer.val_every=0",
            "trainer.val_levels=4",
            "trainer.log_text_samples=0",
            "rollout.max_new_tokens=8",
            "diagnostics.mi.enabled=false",
            "diagnostics.grad_snr.every=0",
        ]
    )
    return (
        "# @package _global_\n"
        "defaults:\n  - snr_filter\n  - override /trainer: smoke\n  - override /hydra/sweeper: ragen_arms\n"
        "  - _self_\n"
        + OmegaConf.to_yaml(pins)
        + """hydra:
  sweeper:
    name: tiny_pair
    seeds: [0]
    arms:
      - {name: none, overrides: [filter=none], iterations: 1, seconds_per_iteration: 1.0}
      - {name: top_p, overrides: [filter=snr_top_p], iterations: 1, seconds_per_iteration: 1.0}
    report: {by: [filter.name]}
"""
    )


def _ragen_train(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("ragen-train", path=os.path.dirname(sys.executable))  # this interpreter's script
    cmd = [exe] if exe else [sys.executable, "-c", "from ragen_torchrl.trainer.cli import train_main; train_main()"]
    env = dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="1")
    return subprocess.run(cmd + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _run_configs(out: Path) -> dict[str, dict]:
    """Each run's config as it ran (``summary.json``), by run name."""
    return {p.parent.name: json.loads(p.read_text())["config"] for p in sorted((out / "runs").glob("*/summary.json"))}


@pytest.mark.slow
def test_one_registry_drives_ragen_experiment_and_ragen_train_multirun_alike(ragen_cache_dir, tmp_path):
    presets = tmp_path / "presets" / "experiment"
    presets.mkdir(parents=True)
    (presets / "tiny_pair.yaml").write_text(tiny_experiment(ragen_cache_dir))
    assert "tiny_pair" in experiment_names(presets.parent)

    by_experiment = tmp_path / "by_experiment"
    status = main(["tiny_pair", "--config-dir", str(presets.parent), "--out", str(by_experiment)])
    assert status in (0, 1)  # 1: no matplotlib, report.md still written
    sweep = tmp_path / "by_multirun"
    proc = _ragen_train(
        ["-m", "--config-dir", str(presets.parent), "+experiment=tiny_pair", f"hydra.sweep.dir={sweep}"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    # the same runs in the same layout: <out>/runs/<arm>_seed<k>/ and the report in <out>
    ran = _run_configs(by_experiment)
    assert sorted(ran) == ["none_seed0", "top_p_seed0"]
    assert _run_configs(sweep) == ran  # every key of every run's config, the same
    assert ran["none_seed0"]["filter"]["name"] == "none" and ran["top_p_seed0"]["filter"]["name"] == "snr_top_p"
    assert ran["none_seed0"]["trainer"]["total_iterations"] == 1 and ran["none_seed0"]["env"]["success_rate"] == 0.98
    for out in (by_experiment, sweep):
        assert (out / "report.md").is_file()
        for run in ran:
            assert (out / "runs" / run / "scalars.csv").read_text().startswith("iteration,")

    # started again, each entry point finds the runs finished and only writes the report again
    mtime = (sweep / "runs" / "none_seed0" / "summary.json").stat().st_mtime
    proc = _ragen_train(
        ["-m", "--config-dir", str(presets.parent), "+experiment=tiny_pair", f"hydra.sweep.dir={sweep}"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "finished earlier" in proc.stderr + proc.stdout
    assert (sweep / "runs" / "none_seed0" / "summary.json").stat().st_mtime == mtime


@pytest.mark.slow
def test_a_multirun_of_an_experiment_refuses_other_sweeps_and_bad_arms_before_any_run(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _ragen_train(["-m", "+experiment=t3_cpu", "t3.enabled=false,true", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode != 0
    assert "an experiment's runs are its arms x seeds: the sweep 't3.enabled=false,true'" in proc.stderr
    proc = _ragen_train(
        ["-m", "+experiment=snr_filter_frozenlake", "filter.value=1.5", f"hydra.sweep.dir={sweep}"], tmp_path
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "config error: filter.value must be in (0, 1] for strategy top_p" in proc.stderr
    assert not sweep.exists()


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


def test_a_warm_start_per_seed_is_costed_once_per_seed():
    exp = EXPERIMENTS["smollm2_mi_fit"]
    assert exp.warm_start_per_seed and len(exp.seeds) == 2
    # 2 arms x 2 seeds, each its own warm start of 720 s
    assert estimate_seconds(exp)["warm_starts"] == 4 * 720.0
    assert estimate_seconds(exp, done={"grounded_seed0"})["warm_starts"] == 3 * 720.0
    with pytest.raises(ExperimentSpecError, match="warm_start_per_seed must be true or false"):
        experiment_from_spec({"name": "x", "seeds": [0], "arms": [{"name": "a"}], "warm_start_per_seed": "yes"})
