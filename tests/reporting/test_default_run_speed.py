"""The numbers of ``docs/results/default_run_speed/README.md``, recomputed from its committed summaries."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "default_run_speed"


def _summary(arm: str) -> dict:
    return read_summary(SET / "runs" / arm / "summary.json")


def _timing(summary: dict, key: str) -> float:
    return sum(row[key] for row in summary["history"] if row.get(key) is not None)


@pytest.fixture(scope="module")
def arms():
    return _summary("before"), _summary("after")


def test_wall_times_and_their_ratios(arms):
    before, after = arms
    assert round(before["seconds"], 1) == 759.7 and round(after["seconds"], 1) == 595.2
    assert round(after["seconds"] / before["seconds"], 2) == 0.78
    expected = {"timing/total": (654.6, 534.9, 0.82), "timing/rollout": (295.5, 203.8, 0.69)}
    expected["timing/update"] = (338.9, 310.8, 0.92)
    for key, (b, a, ratio) in expected.items():
        tb, ta = _timing(before, key), _timing(after, key)
        assert (round(tb, 1), round(ta, 1), round(ta / tb, 2)) == (b, a, ratio), key
    assert after["iterations"] == before["iterations"] == 60


def test_validation_success_is_the_same_within_two_standard_errors(arms):
    before, after = arms
    assert before["val_start"]["success"] == after["val_start"]["success"]  # the same warm start
    b, a = before["val_end"], after["val_end"]
    assert (round(b["success"], 3), round(a["success"], 3)) == (0.818, 0.832)
    se = math.hypot(b["success_stderr"], a["success_stderr"])
    assert round((a["success"] - b["success"]) / se, 1) == 0.6
    assert (before["val_peak"]["iteration"], after["val_peak"]["iteration"]) == (20, 30)
    assert round(before["val_peak"]["success"], 3) == round(after["val_peak"]["success"], 3) == 0.836


def test_the_after_run_records_its_commit_and_settings(arms):
    _, after = arms
    git = after["provenance"]["git"]
    assert git["commit"].startswith("c784858") and git["dirty"] is False
    assert after["provenance"]["machine"]["torch_threads"] == 1
    rollout = after["config"]["rollout"]
    assert rollout["trajectory"] == "tokens" and rollout["kv_cache"] is True
    assert after["config"]["model"]["threads"] == 1
