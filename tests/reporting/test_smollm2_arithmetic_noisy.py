"""The numbers of ``docs/results/smollm2_arithmetic_noisy/README.md``, recomputed from its committed files."""

from __future__ import annotations

import statistics
from pathlib import Path

from helpers import reward_variance_at_start, success_windows, validation_change

from ragen_torchrl.reporting.runs import load_run
from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "smollm2_arithmetic_noisy"
RUN = SET / "runs" / "grpo_seed0"


def test_the_table_is_the_summary():
    s = read_summary(RUN / "summary.json")
    text = (SET / "README.md").read_text()
    a, b, diff, se = validation_change(s)
    assert diff / se > 2 and a["num_trajectories"] == b["num_trajectories"] == 512  # the page says: learned
    wall = s["phases"]["total"]["wall"]
    for part in (
        f"success {a['success']:.3f} ± {a['success_stderr']:.3f}, format-valid {a['format_valid']:.3f}",
        f"success {b['success']:.3f} ± {b['success_stderr']:.3f}, format-valid {b['format_valid']:.3f}",
        f"+{diff:.3f}, {diff / se:.1f} standard errors of the difference",
        f"| {s['phases']['warm_start']['wall']:.0f} s |",
        f"{statistics.median(h['timing/total'] for h in s['history']):.0f} s per iteration (median)",
        f"({wall:.0f} s of phases)",
        f"| {int(sum(h['train/optimizer_steps'] for h in s['history']))} |",
        f"The update took {s['phases']['update']['wall']:.0f} s "
        f"({statistics.median(h['timing/update'] for h in s['history']):.0f} s per iteration",
        f"rollouts ({s['phases']['rollout']['wall']:.0f} s)",
        f"validations ({s['phases']['validation']['wall']:.0f} s)",
        f"MI diagnostics ({s['phases']['diagnostics']['wall']:.0f} s)",
        f"warm start ({s['phases']['warm_start']['wall']:.0f} s)",
    ):
        assert part in text, part
    assert s["iterations"] == 60 and wall > 3600  # the page says: over the hour
    periodic = [f"{v:.3f}" for it, v in load_run(RUN).val_series() if 0 < it < 60]
    assert ", ".join(periodic) in text
    git = s["provenance"]["git"]
    assert git["commit"].startswith("09dbc6b") and not git["dirty"]
    cfg = s["config"]
    assert cfg["model"]["name"] == "smollm2" and cfg["algo"]["name"] == "grpo" and cfg["algo"]["lr"] == 1e-5
    assert (cfg["env"]["name"], cfg["env"]["max_turn"], cfg["env"]["data_path"]) == ("metamathqa", 1, None)
    assert (cfg["trainer"]["total_iterations"], cfg["trainer"]["prompts_per_iter"]) == (60, 16)
    assert cfg["sft"]["noise"] == 0.6 and cfg["rollout"]["max_new_tokens"] == 48


def test_the_reward_variance_at_the_start_and_the_training_success():
    text = (SET / "README.md").read_text()
    run = load_run(RUN)
    early, std = reward_variance_at_start(run)
    assert f"{early:.1f} of the 16 groups had zero reward" in text
    assert f"mean in-group reward std {std:.3f}" in text
    assert success_windows(run, 60) in text


def test_mi_rose_as_the_guessing_went():
    text = (SET / "README.md").read_text()
    run = load_run(RUN)
    mi, acc = run.series("collapse/first_turn/mi_estimate"), run.series("collapse/first_turn/retrieval_accuracy")
    assert mi[0][0] == acc[0][0] == 1 and mi[-1][0] == acc[-1][0] == 56
    assert f"went from\n{mi[0][1]:.3f} nats at iteration 1 to {mi[-1][1]:.3f} at iteration 56" in text
    assert f"retrieval accuracy from {acc[0][1]:.3f} to {acc[-1][1]:.3f}" in text


def _guess_output(name: str) -> tuple[float, float, dict[int, float]]:
    lines = (SET / f"guess_share_{name}.txt").read_text().splitlines()
    kinds = {int(k): float(rate) for k, _, rate in (line.split() for line in lines[:4])}
    _, success, _, _, share = lines[4].split()
    return float(success), float(share), kinds


def test_the_guess_share_is_the_committed_output():
    text = " ".join((SET / "README.md").read_text().split())
    warm, warm_share, _ = _guess_output("warm_start")
    final, final_share, kinds = _guess_output("final")
    assert (
        f"the warm start guessed on {warm_share:.3f} of the questions and answered {warm:.3f} of them right; "
        f"the final policy guessed on {final_share:.3f} and answered {final:.3f} right" in text
    )
    assert f"the two-step pens problem: {kinds[3]:.3f}" in text
    s = read_summary(RUN / "summary.json")
    assert f"The end success on the validation set, {s['val_end']['success']:.3f}" in text
    clean = read_summary(SET.parent / "smollm2_arithmetic" / "runs" / "grpo_seed0" / "summary.json")
    assert f"the earlier run began ({clean['val_start']['success']:.3f})" in text
