"""The numbers of ``docs/results/visual_frozenlake/README.md``, recomputed from its committed summaries."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "visual_frozenlake"
ARMS = ("none_lr2e-4", "snr_top_p_lr2e-4", "none_lr1e-4", "snr_top_p_lr1e-4")


@pytest.fixture(scope="module")
def runs():
    return {arm: read_summary(SET / "runs" / arm / "summary.json") for arm in ARMS}


def _change(summary: dict) -> tuple[float, float]:
    start, end = summary["val_start"], summary["val_end"]
    diff = end["success"] - start["success"]
    return diff, diff / math.hypot(start["success_stderr"], end["success_stderr"])


def test_the_runs_are_the_default_visual_run_at_one_commit(runs):
    for arm, s in runs.items():
        cfg = s["config"]
        assert cfg["env"]["name"] == "frozenlake_visual" and cfg["env"]["coord_frames"] is True, arm
        assert cfg["model"]["name"] == "tiny_vl" and cfg["sft"]["steps"] == 1500, arm
        assert cfg["filter"]["name"] == ("snr_top_p" if arm.startswith("snr") else "none"), arm
        assert cfg["algo"]["lr"] == (1e-4 if arm.endswith("1e-4") else 2e-4), arm
        assert s["provenance"]["git"]["commit"].startswith("4ce8fab") and s["provenance"]["git"]["dirty"] is False
        assert s["iterations"] == 60 and s["config"]["seed"] == 0


def test_success_table(runs):
    table = {
        # start, end, end SE, change, change in SE, peak, peak iteration, end format-valid
        "none_lr2e-4": (0.764, 0.699, 0.020, -0.064, -2.3, 0.867, 20, 0.985),
        "snr_top_p_lr2e-4": (0.764, 0.814, 0.017, +0.051, 2.0, 0.836, 40, 0.668),
        "none_lr1e-4": (0.764, 0.822, 0.017, +0.059, 2.3, 0.852, 40, 1.000),
        "snr_top_p_lr1e-4": (0.764, 0.836, 0.016, +0.072, 2.9, 0.852, 30, 1.000),
    }
    for arm, (start, end, end_se, diff, in_se, peak, at, valid) in table.items():
        s = runs[arm]
        got_diff, got_se = _change(s)
        assert round(s["val_start"]["success"], 3) == start and round(s["val_start"]["success_stderr"], 3) == 0.019
        assert (round(s["val_end"]["success"], 3), round(s["val_end"]["success_stderr"], 3)) == (end, end_se), arm
        assert (round(got_diff, 3), round(got_se, 1)) == (diff, in_se), arm
        assert (round(s["val_peak"]["success"], 3), s["val_peak"]["iteration"], s["val_peak"]["levels"]) == (
            peak,
            at,
            128,
        )
        assert round(s["val_end"]["format_valid"], 3) == valid, arm
        assert s["val_start"]["format_valid"] == 1.0


def test_the_warm_start_matches_the_text_models_success_by_coincidence(runs):
    start = runs["none_lr1e-4"]["val_start"]
    assert round(start["success"] * 512) == 391 and start["num_trajectories"] == 512
    assert (round(start["turns"], 2), round(start["tokens"], 1)) == (2.25, 33.9)
    text = read_summary(SET.parent / "default_run_speed" / "runs" / "after" / "summary.json")["val_start"]
    assert round(text["success"] * 512) == 391 and (round(text["turns"], 2), round(text["tokens"], 1)) == (2.35, 42.3)


def test_wall_time_of_the_fresh_cache_run(runs):
    phases = runs["none_lr2e-4"]["phases"]
    assert round(phases["warm_start"]["wall"]) == 600 and round(phases["total"]["wall"]) == 913
    for arm in ARMS[1:]:  # the later runs reused the first run's warm start
        assert runs[arm]["phases"]["warm_start"]["wall"] < 5


def test_the_drift_at_the_default_learning_rate(runs):
    def kl(arm: str, first: int, last: int) -> float:
        rows = runs[arm]["history"]
        return max(r["train/kl_approx"] for r in rows if first <= r["iteration"] <= last and "train/kl_approx" in r)

    assert round(kl("none_lr2e-4", 1, 40), 3) == 0.006 and round(kl("none_lr2e-4", 51, 60), 3) == 0.036
    assert kl("none_lr1e-4", 51, 60) < 0.004


def test_the_bare_command_at_the_preset_reproduces_the_lr_1e4_run(runs):
    bare = read_summary(SET / "bare_command" / "summary.json")
    assert bare["provenance"]["git"]["commit"].startswith("ba1fff1") and bare["provenance"]["git"]["dirty"] is False
    assert bare["config"]["algo"]["lr"] == 1e-4 and bare["config"]["sft"]["steps"] == 1500
    assert (round(bare["val_start"]["success"], 3), round(bare["val_end"]["success"], 3)) == (0.764, 0.822)
    assert round(bare["val_end"]["success_stderr"], 3) == 0.017
    assert (round(bare["phases"]["total"]["wall"]), round(bare["phases"]["warm_start"]["wall"])) == (914, 592)
    same = runs["none_lr1e-4"]["val_end"]
    assert {k: v for k, v in bare["val_end"].items() if k != "seconds"} == {
        k: v for k, v in same.items() if k != "seconds"
    }
