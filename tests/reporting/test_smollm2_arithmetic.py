"""The numbers of ``docs/results/smollm2_arithmetic/README.md``, recomputed from its committed files."""

from __future__ import annotations

import statistics
from pathlib import Path

from helpers import reward_variance_at_start, success_windows, validation_change

from ragen_torchrl.reporting.runs import load_run
from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "smollm2_arithmetic"
RUN = SET / "runs" / "grpo_seed0"


def test_the_table_is_the_summary():
    s = read_summary(RUN / "summary.json")
    text = (SET / "README.md").read_text()
    a, b, diff, se = validation_change(s)
    assert diff / se < 2 and a["num_trajectories"] == b["num_trajectories"] == 512  # the page says: not met
    wall = s["phases"]["total"]["wall"]
    for part in (
        f"success {a['success']:.3f} ± {a['success_stderr']:.3f}, format-valid {a['format_valid']:.3f}",
        f"success {b['success']:.3f} ± {b['success_stderr']:.3f}, format-valid {b['format_valid']:.3f}",
        f"+{diff:.3f}, {diff / se:.1f} standard errors of the difference",
        f"a standard error of {se:.3f} for the difference",
        f"| {s['phases']['warm_start']['wall']:.0f} s |",
        f"{statistics.median(h['timing/total'] for h in s['history']):.0f} s per iteration (median)",
        f"({wall:.0f} s of phases)",
        f"update ({s['phases']['update']['wall']:.0f} s, {s['phases']['update']['wall'] / 60:.0f} s per iteration",
        f"rollouts ({s['phases']['rollout']['wall']:.0f} s)",
        f"validations ({s['phases']['validation']['wall']:.0f} s)",
        f"diagnostics ({s['phases']['diagnostics']['wall']:.0f} s)",
        f"| {int(sum(h['train/optimizer_steps'] for h in s['history']))} |",
    ):
        assert part in text, part
    assert s["iterations"] == 60 and wall < 3600
    periodic = [f"{v:.3f}" for it, v in load_run(RUN).val_series() if 0 < it < 60]
    assert ", ".join(periodic) in text
    git = s["provenance"]["git"]
    assert git["commit"].startswith("00ddfef") and not git["dirty"]
    cfg = s["config"]
    assert cfg["model"]["name"] == "smollm2" and cfg["algo"]["name"] == "grpo" and cfg["algo"]["lr"] == 1e-5
    # env=arithmetic: metamathqa's synthetic questions, one attempt
    assert (cfg["env"]["name"], cfg["env"]["max_turn"], cfg["env"]["data_path"]) == ("metamathqa", 1, None)
    assert (cfg["trainer"]["total_iterations"], cfg["trainer"]["prompts_per_iter"]) == (60, 16)
    assert cfg["rollout"]["max_new_tokens"] == 48


def test_the_reward_variance_at_the_start_and_the_training_success():
    text = (SET / "README.md").read_text()
    run = load_run(RUN)
    early, std = reward_variance_at_start(run)
    assert f"{early:.1f} of the 16 groups had zero reward" in text
    assert f"mean in-group reward std {std:.3f}" in text
    assert success_windows(run, 60) in text
