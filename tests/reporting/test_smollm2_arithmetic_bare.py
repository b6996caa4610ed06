"""The numbers of ``docs/results/smollm2_arithmetic_bare/README.md``, recomputed from its committed files."""

from __future__ import annotations

import statistics
from pathlib import Path

from helpers import reward_variance_at_start, success_windows, validation_change

from ragen_torchrl.reporting.runs import load_run
from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "smollm2_arithmetic_bare"
RUN = SET / "runs" / "grpo_seed0"
NOISY = SET.parent / "smollm2_arithmetic_noisy" / "runs" / "grpo_seed0"


def test_the_table_is_the_summary():
    s = read_summary(RUN / "summary.json")
    text = (SET / "README.md").read_text()
    a, b, diff, se = validation_change(s)
    assert diff / se > 2 and a["num_trajectories"] == b["num_trajectories"] == 512  # the page says: learned
    wall = s["phases"]["total"]["wall"]
    assert wall < 3600  # the page says: within the hour
    for part in (
        f"success {a['success']:.3f} ± {a['success_stderr']:.3f}, format-valid {a['format_valid']:.3f}",
        f"success {b['success']:.3f} ± {b['success_stderr']:.3f}, format-valid {b['format_valid']:.3f}",
        f"+{diff:.3f}, {diff / se:.1f} standard errors of the difference",
        f"| {s['phases']['warm_start']['wall']:.0f} s |",
        f"{statistics.median(h['timing/total'] for h in s['history']):.0f} s per iteration (median)",
        f"{wall:.0f} s of phases",
        f"learns in {wall / 60:.0f} minutes",
        f"| {int(sum(h['train/optimizer_steps'] for h in s['history']))} |",
        f"The update took {s['phases']['update']['wall']:.0f} s "
        f"({statistics.median(h['timing/update'] for h in s['history']):.0f} s per iteration)",
        f"the rollouts {s['phases']['rollout']['wall']:.0f} s",
        f"validations\n{s['phases']['validation']['wall']:.0f} s",
        f"MI diagnostics {s['phases']['diagnostics']['wall']:.0f} s",
        f"warm start {s['phases']['warm_start']['wall']:.0f} s",
    ):
        assert part in text, part
    periodic = [f"{v:.3f}" for it, v in load_run(RUN).val_series() if 0 < it < 30]
    assert ", ".join(periodic) in text
    git = s["provenance"]["git"]
    assert git["commit"].startswith("a0a79d4") and not git["dirty"]
    cfg = s["config"]
    assert cfg["model"]["name"] == "smollm2" and cfg["algo"]["name"] == "grpo" and cfg["algo"]["lr"] == 1e-5
    assert (cfg["env"]["name"], cfg["env"]["max_turn"], cfg["env"]["data_path"]) == ("metamathqa", 1, None)
    assert (cfg["trainer"]["total_iterations"], cfg["trainer"]["prompts_per_iter"], s["iterations"]) == (30, 16, 30)
    assert cfg["sft"]["noise"] == 0.6 and cfg["rollout"]["max_new_tokens"] == 48


def test_it_repeats_the_first_twenty_iterations_of_the_sixty_iteration_run():
    text = (SET / "README.md").read_text()
    ours, theirs = (dict(load_run(r).val_series()) for r in (RUN, NOISY))
    assert ours[0] == theirs[0] and ours[10] == theirs[10] and ours[20] == theirs[20]
    assert f"iteration 10: {ours[10]:.3f}, iteration 20: {ours[20]:.3f}" in text
    end, other = read_summary(RUN / "summary.json")["val_end"], read_summary(NOISY / "summary.json")["val_end"]
    assert f"The end ({end['success']:.3f}) is lower than the 60-iteration run's ({other['success']:.3f})" in text
    assert f"difference of\n{other['success'] - end['success']:.3f}" in text
    assert other["success"] - end["success"] < min(end["success_stderr"], other["success_stderr"])


def test_the_reward_variance_at_the_start_the_training_success_and_mi():
    text = (SET / "README.md").read_text()
    run = load_run(RUN)
    early, std = reward_variance_at_start(run)
    assert f"{early:.1f} of the 16 groups had zero reward variance" in text
    assert f"mean in-group reward std {std:.3f}" in text
    assert success_windows(run, 30) in text
    mi, acc = run.series("collapse/first_turn/mi_estimate"), run.series("collapse/first_turn/retrieval_accuracy")
    assert (mi[0][0], mi[-1][0]) == (1, 26)
    assert f"{mi[0][1]:.3f} nats at iteration 1 to {mi[-1][1]:.3f} at\niteration 26" in text
    assert f"retrieval accuracy from {acc[0][1]:.3f} to {acc[-1][1]:.3f}" in text
