"""The table of ``docs/results/smollm2_mi/README.md``, recomputed from its committed summaries."""

from __future__ import annotations

from pathlib import Path

from ragen_torchrl.trainer.summary import read_summary

SET = Path(__file__).resolve().parents[2] / "docs" / "results" / "smollm2_mi"
COLUMNS = (
    "mi_zscore",
    "mi_estimate",
    "marginal_std",
    "retrieval_accuracy",
    "retrieval_chance",
    "reasoning_entropy",
    "reasoning_token_entropy_mean",
)


def test_the_table_is_the_summaries():
    text = (SET / "README.md").read_text()
    for arm in ("grounded", "shuffled"):
        s = read_summary(SET / "runs" / arm / "summary.json")
        assert s["config"]["sft"]["reasoning"] == arm and s["config"]["model"]["name"] == "smollm2"
        assert s["provenance"]["git"]["commit"].startswith("285ab1d") and not s["provenance"]["git"]["dirty"]
        first = s["history"][0]
        row = f"| {arm} | " + " | ".join(f"{first[f'collapse/trajectory/{c}']:.3f}" for c in COLUMNS) + " |"
        assert row in text, row
        assert f"{s['val_start']['format_valid']:.3f}" in text
