"""The numbers of ``docs/results/visual_frozenlake_seeds/README.md``, recomputed from its committed files."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from ragen_torchrl.reporting.statistics import t_interval

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "visual_frozenlake_seeds"
SEEDS = (0, 1, 2)


def _per_seed() -> list[dict]:
    rows = []
    for k in SEEDS:
        run = SET / "runs" / f"lr1e-4_seed{k}"
        s = json.loads((run / "summary.json").read_text())
        final = json.loads((run / "final_eval.json").read_text())
        start = json.loads((SET / "warm_start" / f"seed{k}.json").read_text())
        rows.append({"seed": k, "summary": s, "final": final, "start": start})
    return rows


def _gain(values: list[float]) -> tuple[float, float, float]:
    """Mean and its Student-t 95% interval (the report's own)."""
    return (statistics.mean(values), *t_interval(values))


def test_every_run_is_the_experiment_at_one_clean_commit_with_its_own_warm_start():
    rows = _per_seed()
    commits = {r["summary"]["provenance"]["git"]["commit"] for r in rows}
    assert len(commits) == 1 and not any(r["summary"]["provenance"]["git"]["dirty"] for r in rows)
    # sft.seed_from_run: each seed trained its own warm start, and the warm start evaluated is that one
    assert all(r["summary"]["config"]["sft"]["seed_from_run"] for r in rows)
    assert len({r["start"]["policies"]["final"] for r in rows}) == 3
    for r in rows:
        cfg = r["summary"]["config"]
        assert (cfg["env"]["name"], cfg["model"]["name"], cfg["algo"]["lr"]) == ("frozenlake_visual", "tiny_vl", 1e-4)
        # the final evaluation and the warm start's evaluation play the same held-out levels
        assert r["final"]["levels"] == r["start"]["levels"] == 2048
        assert r["final"]["first_level_seed"] == r["start"]["first_level_seed"]
        assert r["final"]["temperatures"] == r["start"]["temperatures"]


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_the_held_out_gains_are_the_files(mode):
    rows = _per_seed()
    text = (SET / "README.md").read_text()
    gains = []
    for r in rows:
        a, b = r["start"]["results"]["final"][mode], r["final"]["results"]["final"][mode]
        gains.append(b["success"] - a["success"])
        assert f"{a['success']:.3f} → {b['success']:.3f} ({b['success'] - a['success']:+.3f})" in text
    m, lo, hi = _gain(gains)
    assert f"{mode}: mean gain {m:+.3f}, 95% CI [{lo:+.3f}, {hi:+.3f}]" in text


def test_the_validation_gains_are_the_summaries():
    rows = _per_seed()
    text = (SET / "README.md").read_text()
    gains = []
    for r in rows:
        a, b = r["summary"]["val_start"], r["summary"]["val_end"]
        gains.append(b["success"] - a["success"])
        assert (
            f"{a['success']:.3f} ± {a['success_stderr']:.3f} → {b['success']:.3f} ± {b['success_stderr']:.3f}" in text
        )
    m, lo, hi = _gain(gains)
    assert f"validation: mean gain {m:+.3f}, 95% CI [{lo:+.3f}, {hi:+.3f}]" in text
