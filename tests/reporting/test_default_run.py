"""The numbers of ``docs/results/default_run/README.md``, recomputed from its committed summaries."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from scipy import stats

from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "default_run"


def _rows():
    for seed in range(4):
        s = read_summary(SET / "runs" / f"default_seed{seed}" / "summary.json")
        a, b = s["val_start"], s["val_end"]
        diff = b["success"] - a["success"]
        se = math.hypot(a["success_stderr"], b["success_stderr"])
        yield seed, a, b, diff, diff / se, s


def test_the_table_and_the_interval_are_the_summaries():
    text = (SET / "README.md").read_text()
    diffs = []
    for seed, a, b, diff, z, s in _rows():
        row = (
            f"| {seed} | {a['success']:.3f} ± {a['success_stderr']:.3f} | {b['success']:.3f} ± {b['success_stderr']:.3f} "
            f"| {diff:+.3f} | {z:.1f} | {s['seconds']:.0f} |"
        )
        assert row in text, row
        assert z > 2  # the claim: every seed ends above its start by more than 2 standard errors
        assert a["num_trajectories"] == b["num_trajectories"] == 512
        assert s["provenance"]["git"]["commit"].startswith("95382ba") and not s["provenance"]["git"]["dirty"]
        diffs.append(diff)
    mean, se = statistics.mean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    half = stats.t.ppf(0.975, len(diffs) - 1) * se
    assert f"+{mean:.3f}, 95% t interval [+{mean - half:.3f}, +{mean + half:.3f}]" in text
