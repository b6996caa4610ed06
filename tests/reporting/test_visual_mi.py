"""The numbers of ``docs/results/visual_mi/README.md``, recomputed from its committed summaries."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "visual_mi"
RUNS = [(arm, seed) for arm in ("grounded", "shuffled") for seed in (0, 1)]
#: the table's columns after the arm and seed: (diagnostic, with the next one in parentheses)
COLUMNS = [
    ("first_turn/mi_zscore", None),
    ("first_turn/mi_estimate", None),
    ("first_turn/marginal_std", None),
    ("first_turn/retrieval_accuracy", "first_turn/retrieval_chance"),
    ("trajectory/mi_zscore", None),
    ("trajectory/mi_estimate", None),
    ("trajectory/retrieval_accuracy", "trajectory/retrieval_chance"),
    ("trajectory/reasoning_token_entropy_mean", None),
]


@pytest.fixture(scope="module")
def runs():
    return {run: read_summary(SET / "runs" / f"{run[0]}_seed{run[1]}" / "summary.json") for run in RUNS}


def _mean(summary: dict, key: str) -> float:
    values = [row[f"collapse/{key}"] for row in summary["history"] if row.get(f"collapse/{key}") is not None]
    assert len(values) == 5, key  # the MI diagnostics ran at every one of the 5 iterations
    return statistics.mean(values)


def row(arm: str, seed: int, summary: dict) -> str:
    """The table row of one run, as the README writes it."""
    cells = [arm, str(seed)]
    for key, paren in COLUMNS:
        cell = f"{_mean(summary, key):.3f}"
        cells.append(f"{cell} ({_mean(summary, paren):.3f})" if paren else cell)
    start = summary["val_start"]
    cells.append(f"{start['success']:.3f} ± {start['success_stderr']:.3f}")
    return "| " + " | ".join(cells) + " |"


def test_the_runs_are_one_experiment_at_one_clean_commit(runs):
    commits = {s["provenance"]["git"]["commit"] for s in runs.values()}
    assert len(commits) == 1 and not any(s["provenance"]["git"]["dirty"] for s in runs.values())
    (commit,) = commits
    assert f"`{commit[:7]}`" in (SET / "README.md").read_text()
    configs = {run: s["config"] for run, s in runs.items()}
    for (arm, seed), cfg in configs.items():
        assert (cfg["sft"]["reasoning"], cfg["seed"], cfg["sft"]["seed_from_run"]) == (arm, seed, True)
        assert cfg["env"]["name"] == "frozenlake_visual" and cfg["model"]["name"] == "tiny_vl"
        assert cfg["diagnostics"]["mi"]["every"] == 1 and cfg["diagnostics"]["mi"]["num_pairs"] == 64
        assert cfg["trainer"]["total_iterations"] == 5 and cfg["trainer"]["val_levels"] == 128
    # the arms differ in the warm start's reasoning only (and each seed in its seed)
    for seed in (0, 1):
        grounded, shuffled = configs["grounded", seed], configs["shuffled", seed]
        assert {k for k in grounded if grounded[k] != shuffled[k]} == {"sft"}
        assert {k for k in grounded["sft"] if grounded["sft"][k] != shuffled["sft"][k]} == {"reasoning"}


def test_the_table_is_the_runs(runs):
    text = (SET / "README.md").read_text()
    for (arm, seed), summary in runs.items():
        assert row(arm, seed, summary) in text, row(arm, seed, summary)


def test_the_reading_holds_on_both_seeds(runs):
    for seed in (0, 1):
        grounded, shuffled = runs["grounded", seed], runs["shuffled", seed]
        # grounded reasoning identifies its board image far above chance, shuffled reasoning at chance
        assert _mean(grounded, "first_turn/mi_zscore") > 2 > 0.2 > _mean(shuffled, "first_turn/mi_zscore")
        assert _mean(grounded, "first_turn/retrieval_accuracy") > 4 * _mean(grounded, "first_turn/retrieval_chance")
        # the z-scores' gap is the MI's: MI in nats far apart, the spreads within a factor of 2.2
        assert _mean(grounded, "first_turn/mi_estimate") > 0.5 > 0.05 > _mean(shuffled, "first_turn/mi_estimate")
        ratio = _mean(grounded, "first_turn/marginal_std") / _mean(shuffled, "first_turn/marginal_std")
        assert 0.45 < ratio < 2.2
    text = " ".join((SET / "README.md").read_text().split())
    g1, s1 = runs["grounded", 1], runs["shuffled", 1]
    spread = _mean(g1, "first_turn/marginal_std") / _mean(s1, "first_turn/marginal_std")
    assert (
        f"seed 1: {_mean(g1, 'first_turn/marginal_std'):.3f} against {_mean(s1, 'first_turn/marginal_std'):.3f}, a {spread:.1f}x gap"
        in text
    )
    most = max(
        _mean(runs["shuffled", k], key) for k in (0, 1) for key in ("first_turn/mi_estimate", "trajectory/mi_estimate")
    )
    assert f"MI at most {most:.3f} nats" in text
