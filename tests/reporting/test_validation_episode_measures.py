"""The paired measures of the final validation's episodes (``val_turns``, ``val_tokens``): how long the trained
policy plays, next to the training rollouts' ``turns`` / ``tokens``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragen_torchrl.reporting.run_metrics import Group, final_point
from ragen_torchrl.reporting.runs import Run, load_run
from ragen_torchrl.reporting.table import PAIRED_METRICS, paired_table

T3_RUNS = Path(__file__).resolve().parents[2] / "docs" / "results" / "t3_cpu" / "runs"


def _run(seed: int, arm: str, val_tokens: list[float], train_tokens: float) -> Run:
    val = [(it, {"success": 0.5, "tokens": t, "turns": t / 20}) for it, t in zip((0, 10, 20), val_tokens)]
    return Run(Path(f"{arm}{seed}"), {"seed": seed}, [{"iteration": 1, "rollout/tokens": train_tokens}], val)


def test_the_final_validation_gives_the_value_not_the_training_rollouts():
    run = _run(0, "a", [100.0, 90.0, 80.0], train_tokens=120.0)
    assert final_point(run, "tokens") == (20, 80.0) and final_point(run, "turns") == (20, 4.0)
    _, tokens, digits = PAIRED_METRICS["val_tokens"]
    assert (tokens(run), digits) == (80.0, 1)
    assert PAIRED_METRICS["val_turns"][1](run) == 4.0
    assert PAIRED_METRICS["tokens"][1](run) == 120.0  # the training rollouts' measure is another number
    assert PAIRED_METRICS["val_tokens"][1](Run(Path("r"), {"seed": 0})) is None  # never validated: no value


def test_paired_table_compares_validation_tokens_by_seed():
    a = Group({"t3.enabled": False}, [_run(s, "a", [100.0, 90.0, 80.0 + s], 120.0) for s in range(3)])
    b = Group({"t3.enabled": True}, [_run(s, "b", [100.0, 90.0, 78.0 + s], 90.0) for s in range(3)])
    lines = paired_table([a, b], ["tokens", "val_tokens"])
    rows = {line.split(" | ")[2]: line.split(" | ")[3:5] for line in lines[2:] if line.startswith("| ")}
    assert rows["generated tokens / episode"] == ["3", "-30.0"]
    assert rows["final validation generated tokens / episode"] == ["3", "-2.0"]


@pytest.mark.skipif(not T3_RUNS.is_dir(), reason="the t3_cpu result set is not in this checkout")
def test_t3_cpu_validation_episodes_are_not_shorter_with_t3():
    # the committed t3_cpu runs: the training episodes are ~25 tokens shorter with T3, the validation ones ~2
    runs = {p.name: load_run(p) for p in sorted(T3_RUNS.glob("gn_*"))}
    groups = [
        Group({"t3.enabled": t3}, [r for name, r in runs.items() if name.startswith(arm)])
        for t3, arm in ((False, "gn_no_t3_"), (True, "gn_t3_"))
    ]
    lines = paired_table(groups, ["tokens", "val_tokens"])
    rows = {line.split(" | ")[2]: line.split(" | ")[3:6] for line in lines[2:] if line.startswith("| ")}
    assert rows["generated tokens / episode"] == ["5", "-25.3", "[-29.6, -21.0]"]
    assert rows["final validation generated tokens / episode"] == ["5", "-2.0", "[-4.2, +0.2]"]
