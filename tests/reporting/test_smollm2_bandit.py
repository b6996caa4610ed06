"""The numbers of ``docs/results/smollm2_bandit/README.md``, recomputed from its committed summary."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "smollm2_bandit"


def test_the_table_is_the_summary():
    s = read_summary(SET / "runs" / "smollm2_bandit_seed0" / "summary.json")
    text = (SET / "README.md").read_text()
    a, b = s["val_start"], s["val_end"]
    diff = b["success"] - a["success"]
    z = diff / math.hypot(a["success_stderr"], b["success_stderr"])
    assert z > 2 and a["num_trajectories"] == b["num_trajectories"] == 512
    for part in (
        f"success {a['success']:.3f} ± {a['success_stderr']:.3f}, format-valid {a['format_valid']:.3f}",
        f"success {b['success']:.3f} ± {b['success_stderr']:.3f}, format-valid {b['format_valid']:.3f}",
        f"+{diff:.3f}, {z:.1f} standard errors of the difference",
        f"{a['tokens']:.1f} at the start, {b['tokens']:.1f} at the end",
        f"| {s['phases']['warm_start']['wall']:.0f} s |",
        f"{statistics.median(h['timing/total'] for h in s['history']):.0f} s per iteration (median)",
        f"({s['phases']['total']['wall']:.0f} s of phases)",
    ):
        assert part in text, part
    first = s["history"][0]
    assert f"{16 - int(first['filter/zero_variance_groups'])} of the 16" in text
    assert f"mean in-group std {first['filter/in_group_std_mean']:.3f}" in text
    git = s["provenance"]["git"]
    assert git["commit"].startswith("285ab1d") and not git["dirty"]
    assert s["config"]["model"]["name"] == "smollm2" and s["config"]["env"]["name"] == "bandit"
