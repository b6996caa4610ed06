"""The report's final-evaluation measures (``final_greedy``, ``final_sampled``, ``best_*``): read from a run dir's
``final_eval.json``, else its ``summary.json``; missing, with a note, for a run without one."""

from __future__ import annotations

import json

import pytest

from ragen_torchrl.reporting import run_metrics
from ragen_torchrl.reporting.run_metrics import FINAL_EVAL_MEASURES, final_eval_note, final_eval_stats
from ragen_torchrl.reporting.runs import RunError, load_run
from ragen_torchrl.trainer.final_eval import FINAL_EVAL_FILE
from ragen_torchrl.trainer.summary import write_summary


def stats(success: float, n: int) -> dict:
    return {"success": success, "success_stderr": (success * (1 - success) / n) ** 0.5, "n": n}


def make_run(path, final_eval=None):
    write_summary(
        path / "summary.json",
        config={"seed": 0, "filter": {"name": "none"}},
        val_start={"success": 0.5},
        val_end={"success": 0.75},
        history=[{"iteration": 1, "rollout/success": 0.5}],
        seconds=1.0,
        iterations=1,
        stop_reason=None,
        run_dir=path,
        final_policy=None,
        final_eval=final_eval,
    )
    return path


def test_the_measures_read_the_summary_and_the_file_wins(tmp_path):
    fe = {"levels": 2048, "results": {"final": {"greedy": stats(0.8, 2048), "sampled": stats(0.7, 2048)}}}
    run_dir = make_run(tmp_path / "a", fe)
    run = load_run(run_dir)
    assert FINAL_EVAL_MEASURES["final_greedy"][1](run) == 0.8
    assert FINAL_EVAL_MEASURES["final_sampled"][1](run) == 0.7
    assert FINAL_EVAL_MEASURES["best_greedy"][1](run) is None  # no best policy kept
    # a re-evaluation (ragen-eval RUN --final-eval) rewrote final_eval.json: it is what the report reads
    again = {"levels": 4096, "results": {"final": {"greedy": stats(0.81, 4096)}}}
    (run_dir / FINAL_EVAL_FILE).write_text(json.dumps(again))
    assert FINAL_EVAL_MEASURES["final_greedy"][1](run) == 0.81
    assert final_eval_stats(run, "final", "greedy")["n"] == 4096


def test_a_run_without_a_final_evaluation_is_missing_with_a_note_not_an_error(tmp_path):
    with_fe = load_run(make_run(tmp_path / "a", {"results": {"final": {"greedy": stats(0.8, 512)}}}))
    without = load_run(make_run(tmp_path / "b"))
    assert FINAL_EVAL_MEASURES["final_greedy"][1](without) is None
    note = final_eval_note([with_fe, without], "final_greedy")
    assert note.startswith("final_greedy: 512 levels per run; missing for 1 of 2 runs (")
    assert str(tmp_path / "b") in note and "ragen-eval RUN --final-eval --levels N" in note
    assert final_eval_note([with_fe], "final_greedy") == "final_greedy: 512 levels per run"


def test_a_damaged_final_eval_file_is_an_error_naming_it(tmp_path):
    run_dir = make_run(tmp_path / "a")
    (run_dir / FINAL_EVAL_FILE).write_text("{not json")
    with pytest.raises(RunError, match="final_eval.json: unreadable final evaluation"):
        FINAL_EVAL_MEASURES["final_greedy"][1](load_run(run_dir))


def test_the_file_name_is_the_trainers():
    assert run_metrics.FINAL_EVAL_FILE == FINAL_EVAL_FILE
    assert sorted(FINAL_EVAL_MEASURES) == ["best_greedy", "best_sampled", "final_greedy", "final_sampled"]


def test_the_report_pairs_arms_on_a_final_evaluation_measure(tmp_path):
    from ragen_torchrl.reporting.cli import main as report_main

    for seed, (a, b) in enumerate([(0.70, 0.75), (0.72, 0.80)]):
        for name, success in (("none", a), ("top_p", b)):
            run = make_run(
                tmp_path / "runs" / f"{name}_seed{seed}", {"results": {"final": {"greedy": stats(success, 2048)}}}
            )
            summary = json.loads((run / "summary.json").read_text())
            summary["config"] = {"seed": seed, "filter": {"name": name}}
            (run / "summary.json").write_text(json.dumps(summary))
    assert (
        report_main(
            [
                *(str(p) for p in sorted((tmp_path / "runs").iterdir())),
                "--out",
                str(tmp_path),
                "--paired",
                "final_greedy",
            ]
        )
        == 0
    )
    report = (tmp_path / "report.md").read_text()
    # top_p - none on the same seed: +0.05 and +0.08, mean +0.065
    row = next(line for line in report.splitlines() if line.startswith("|") and "final policy, greedy" in line)
    assert "| 2 | +0.065 |" in row
