"""The numbers of ``docs/results/visual_mi/README.md``, recomputed from its committed summaries."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "visual_mi"


@pytest.fixture(scope="module")
def runs():
    return {arm: read_summary(SET / "runs" / arm / "summary.json") for arm in ("grounded", "shuffled")}


def _mean(summary: dict, key: str) -> float:
    values = [row[key] for row in summary["history"] if row.get(key) is not None]
    assert len(values) == 5, key  # the MI diagnostics ran at every one of the 5 iterations
    return round(statistics.mean(values), 3)


def test_the_runs_differ_only_in_the_warm_starts_reasoning(runs):
    grounded, shuffled = runs["grounded"]["config"], runs["shuffled"]["config"]
    assert (grounded["sft"]["reasoning"], shuffled["sft"]["reasoning"]) == ("grounded", "shuffled")
    for cfg in (grounded, shuffled):
        assert cfg["env"]["name"] == "frozenlake_visual" and cfg["model"]["name"] == "tiny_vl"
        assert cfg["diagnostics"]["mi"]["every"] == 1 and cfg["diagnostics"]["mi"]["num_pairs"] == 64
    strip = {"sft", "trainer"}
    assert {k: v for k, v in grounded.items() if k not in strip | {"model"}} == {
        k: v for k, v in shuffled.items() if k not in strip | {"model"}
    }
    assert runs["shuffled"]["provenance"]["git"]["commit"].startswith("91f2936")
    assert runs["grounded"]["provenance"]["git"]["commit"].startswith("ec41cda")


@pytest.mark.parametrize(
    "arm,expected",
    [
        ("grounded", (3.417, 0.467, 0.062, 3.672, 0.237, 0.036, 1.127)),
        ("shuffled", (0.004, 0.066, 0.062, 0.017, 0.016, 0.029, 0.632)),
    ],
)
def test_mi_table(runs, arm, expected):
    keys = [
        "first_turn/mi_zscore",
        "first_turn/retrieval_accuracy",
        "first_turn/retrieval_chance",
        "trajectory/mi_zscore",
        "trajectory/retrieval_accuracy",
        "trajectory/retrieval_chance",
        "first_turn/reasoning_entropy",
    ]
    assert tuple(_mean(runs[arm], f"collapse/{k}") for k in keys) == expected


def test_start_validation(runs):
    got = {
        a: (round(s["val_start"]["success"], 3), round(s["val_start"]["success_stderr"], 3)) for a, s in runs.items()
    }
    assert got == {"grounded": (0.766, 0.037), "shuffled": (0.320, 0.041)}
