"""The numbers of ``docs/results/smollm2_arithmetic/README.md``, recomputed from its committed files."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from ragen_torchrl.reporting.runs import read_scalars_csv
from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "smollm2_arithmetic"
RUN = SET / "runs" / "grpo_seed0"


def _series(key: str) -> list[tuple[int, float]]:
    """``(iteration, value)`` of one logged scalar, in iteration order."""
    return [(it, row[key]) for it, row in sorted(read_scalars_csv(RUN / "scalars.csv").items()) if key in row]


def test_the_table_is_the_summary():
    s = read_summary(RUN / "summary.json")
    text = (SET / "README.md").read_text()
    a, b = s["val_start"], s["val_end"]
    diff = b["success"] - a["success"]
    se = math.hypot(a["success_stderr"], b["success_stderr"])
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
    periodic = [f"{v:.3f}" for it, v in _series("val/success") if 0 < it < 60]
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
    early = [v for it, v in _series("filter/zero_variance_groups") if it <= 10]
    std = [v for it, v in _series("filter/in_group_std_mean") if it <= 10]
    assert f"{statistics.mean(early):.1f} of the 16 groups had zero reward" in text
    assert f"mean in-group reward std {statistics.mean(std):.3f}" in text
    success = _series("rollout/success")
    windows = [f"{statistics.mean(v for it, v in success if lo < it <= lo + 10):.3f}" for lo in range(0, 60, 10)]
    assert ", ".join(windows) in text
