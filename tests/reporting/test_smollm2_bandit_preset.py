"""The numbers of ``docs/results/smollm2_bandit_preset/README.md``, recomputed from its committed files."""

from __future__ import annotations

import csv
import importlib.util
import math
import statistics
from pathlib import Path

import pytest

from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "smollm2_bandit_preset"


def _gradient_module():
    spec = importlib.util.spec_from_file_location("bandit_gradient", SET / "bandit_gradient.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_is_the_summary():
    s = read_summary(SET / "runs" / "grpo_seed0" / "summary.json")
    text = (SET / "README.md").read_text()
    a, b = s["val_start"], s["val_end"]
    diff = b["success"] - a["success"]
    z = diff / math.hypot(a["success_stderr"], b["success_stderr"])
    assert z < 2 and a["num_trajectories"] == b["num_trajectories"] == 512  # the page says: not met
    for part in (
        f"success {a['success']:.3f} ± {a['success_stderr']:.3f}, format-valid {a['format_valid']:.3f}",
        f"success {b['success']:.3f} ± {b['success_stderr']:.3f}, format-valid {b['format_valid']:.3f}",
        f"+{diff:.3f}, {z:.1f} standard errors of the difference",
        f"{a['tokens']:.1f} at the start, {b['tokens']:.1f} at the end",
        f"| {s['phases']['warm_start']['wall']:.0f} s |",
        f"{statistics.median(h['timing/total'] for h in s['history']):.0f} s per iteration (median)",
        f"({s['phases']['total']['wall']:.0f} s of phases)",
        f"iteration {s['history'][-1]['iteration']} of 60",
    ):
        assert part in text, part
    assert s["stop_reason"].startswith("reward_variance_collapse")
    periodic = [f"{v['success']:.3f}" for it, v in sorted(_periodic(s).items())]
    assert ", ".join(periodic) in text
    git = s["provenance"]["git"]
    assert git["commit"].startswith("0760bc9") and not git["dirty"]
    cfg = s["config"]
    assert cfg["model"]["name"] == "smollm2" and cfg["env"]["name"] == "bandit" and cfg["algo"]["name"] == "grpo"
    # the bare command: the preset's pins, the default run's shapes
    assert (cfg["sft"]["steps"], cfg["sft"]["lr"], cfg["algo"]["lr"]) == (100, 1e-4, 1e-5)
    assert (cfg["trainer"]["total_iterations"], cfg["trainer"]["prompts_per_iter"]) == (60, 16)


def _periodic(s) -> dict[int, dict]:
    rows = list(csv.DictReader((SET / "runs" / "grpo_seed0" / "scalars.csv").open()))
    out = {}
    for r in rows:
        if r.get("val/success") not in (None, "") and 0 < int(float(r["iteration"])) < s["history"][-1]["iteration"]:
            out[int(float(r["iteration"]))] = {"success": float(r["val/success"])}
    return out


def _success_windows(run: str) -> str:
    """Mean training-rollout success over iterations 1-10, 11-20, ... of ``run``, as the page prints it."""
    rows = list(csv.DictReader((SET / "runs" / run / "scalars.csv").open()))
    means = []
    for lo in range(0, 60, 10):
        vals = [
            float(r["rollout/success"])
            for r in rows
            if r.get("rollout/success") not in (None, "") and lo < int(float(r["iteration"])) <= lo + 10
        ]
        means.append(f"{statistics.mean(vals):.3f}")
    return ", ".join(means)


def test_the_training_success_windows():
    assert _success_windows("grpo_seed0") in (SET / "README.md").read_text()


@pytest.mark.parametrize("q", [0.1, 0.3, 0.5])
def test_the_gradient_table(q):
    g = _gradient_module()
    text = (SET / "README.md").read_text()
    level, sample, centred = (
        g.risky_logit_signal(q, std=True, shared=True),
        g.risky_logit_signal(q, std=True, shared=False),
        g.risky_logit_signal(q, std=False, shared=True),
    )
    assert f"| {q} | {level:+.4f} | {sample:+.4f} | {centred:+.4f} |" in text
    assert level < 0 and sample < 0 < centred
    # an independent check of the centred case: E[A (1[risky] - q)] summed over the group is
    # G * q (1 - q) * (1 - 1/G) * (E[risky] - steady) for centred rewards
    assert centred == pytest.approx(4 * q * (1 - q) * 0.75 * (0.25 - 0.1), rel=1e-9)


def test_the_drgrpo_column_is_its_summary():
    s = read_summary(SET / "runs" / "drgrpo_seed0" / "summary.json")
    text = (SET / "README.md").read_text()
    a, b = s["val_start"], s["val_end"]
    diff = b["success"] - a["success"]
    z = diff / math.hypot(a["success_stderr"], b["success_stderr"])
    assert z > 2 and b["num_trajectories"] == 512
    assert (
        f"| {a['success']:.3f} ± {a['success_stderr']:.3f} | {a['success']:.3f} ± {a['success_stderr']:.3f} |" in text
    )
    assert f"| {b['success']:.3f} ± {b['success_stderr']:.3f} |" in text
    assert f"+{diff:.3f} ({z:.1f} SE)" in text
    assert f"| {b['tokens']:.1f} |" in text
    assert s["config"]["algo"]["name"] == "drgrpo" and s["phases"]["warm_start"]["wall"] < 1
    assert s["provenance"]["git"]["commit"].startswith("0760bc9") and not s["provenance"]["git"]["dirty"]
    assert _success_windows("drgrpo_seed0") in text
