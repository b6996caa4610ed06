"""The T3 experiment script (experiments/t3_truncation.py): its summary numbers against hand
computations, its table and plots, and a seconds-long end-to-end run of both arms."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from helpers import TINY_RUN

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("t3_truncation", ROOT / "experiments" / "t3_truncation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


exp = _load()


def fake_run(task, arm, seed, val_end, successes, tokens, truncation=0.0, saved=0.0, n=8):
    """A result dict as run_one writes it: ``n`` trajectories per iteration."""
    history = []
    for i, (s, t) in enumerate(zip(successes, tokens)):
        history.append(
            {
                "iteration": i + 1,
                "rollout/success": s,
                "rollout/tokens": t / n,  # mean tokens per trajectory
                "rollout/turns": 4.0,
                "t3/rollout_tokens": t,
                "t3/truncation_rate": truncation,
                "t3/rule_fire_rate": truncation,
                "t3/mean_turns_saved": saved,
                "timing/total": 2.0,
            }
        )
    return {
        "task": task,
        "arm": arm,
        "seed": seed,
        "val_start": {"success": 0.2},
        "val_end": {"success": val_end},
        "history": history,
    }


def test_mean_se_by_hand():
    assert exp.mean_se([0.5, 0.7, 0.9]) == pytest.approx((0.7, 0.2 / math.sqrt(3)))
    assert exp.mean_se([0.4]) == (0.4, 0.0)
    m, se = exp.mean_se([float("nan")])
    assert m != m and se != se


def test_run_metrics_pool_tokens_over_successes():
    # iteration 1: 8 trajectories, 800 tokens, 2 successes; iteration 2: 600 tokens, 4 successes
    r = fake_run("g", "t3", 0, 0.5, successes=[0.25, 0.5], tokens=[800.0, 600.0], truncation=0.5, saved=3.0)
    m = exp.run_metrics(r)
    assert m["tokens_per_iteration"] == pytest.approx(700.0)
    assert m["tokens_per_success"] == pytest.approx(1400.0 / 6)
    assert m["train_success"] == pytest.approx(0.375)
    assert m["truncation_rate"] == pytest.approx(0.5) and m["turns_saved"] == pytest.approx(3.0)
    assert m["val_gain"] == pytest.approx(0.3)
    # no success at all: tokens per success is undefined, not a division error
    r = fake_run("g", "t3", 0, 0.0, successes=[0.0], tokens=[100.0])
    assert math.isnan(exp.run_metrics(r)["tokens_per_success"])


def fake_results():
    return [
        fake_run("guess_numbers_small", "no_t3", 0, 0.30, [0.25, 0.25], [1000.0, 1000.0]),
        fake_run("guess_numbers_small", "no_t3", 1, 0.40, [0.25, 0.25], [1200.0, 1200.0]),
        fake_run("guess_numbers_small", "t3", 0, 0.35, [0.25, 0.25], [800.0, 800.0], truncation=0.5, saved=4.0),
        fake_run("guess_numbers_small", "t3", 1, 0.45, [0.25, 0.25], [900.0, 900.0], truncation=0.3, saved=2.0),
    ]


def test_summary_and_table_by_hand():
    summary = exp.summarize_results(fake_results())
    base, t3 = summary["guess_numbers_small"]["no_t3"], summary["guess_numbers_small"]["t3"]
    assert base["n"] == t3["n"] == 2
    assert base["val_success_end"] == pytest.approx((0.35, 0.05))
    assert base["tokens_per_iteration"] == pytest.approx((1100.0, 100.0))
    assert t3["tokens_per_iteration"] == pytest.approx((850.0, 50.0))
    assert t3["truncation_rate"][0] == pytest.approx(0.4)
    table = exp.markdown_table(summary)
    assert "| guess_numbers_small | no_t3 | 2 | 0.200 ± 0.000 | 0.350 ± 0.050 |" in table
    # tokens per iteration: (850 - 1100) / 1100 = -22.7 %; validation difference +0.050 ± hypot(0.05, 0.05)
    assert "by -22.7%" in table and "+0.050 ± 0.071" in table


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    paths = exp.plot_results(fake_results(), tmp_path)
    names = {p.name for p in paths}
    assert names == {"train_success.png", "rollout_tokens.png", "truncation_rate.png", "val_success.png"}
    assert all(p.stat().st_size > 5_000 for p in paths)


def test_unknown_arm_is_a_clear_error():
    with pytest.raises(ValueError, match="arm must be one of"):
        exp.compose_config("guess_numbers_small", "maybe", 0, [])


@pytest.mark.slow
def test_both_arms_run_end_to_end_on_smoke(tmp_path, ragen_cache_dir):
    small = ["trainer=smoke", "trainer.val_levels=4", *TINY_RUN, f"model.cache_dir={ragen_cache_dir}"]
    results = exp.run_experiment(
        ["guess_numbers_small"], seeds=[0], iterations=1, out=tmp_path, overrides=small, plots=False
    )
    assert [(r["arm"], r["iterations"]) for r in results] == [("no_t3", 1), ("t3", 1)]
    stored = json.loads((tmp_path / "results.json").read_text())
    assert set(stored["summary"]["guess_numbers_small"]) == {"no_t3", "t3"}
    assert (tmp_path / "results.md").read_text().count("| guess_numbers_small |") == 2
    # a finished run is read back, not run again
    again = exp.run_experiment(["guess_numbers_small"], seeds=[0], iterations=1, out=tmp_path, overrides=small)
    assert [r["seconds_train"] for r in again] == [r["seconds_train"] for r in results]
