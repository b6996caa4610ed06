"""``ragen-report``: tables and plots from a set of runs.

The fake sweep (two filter arms x 3 / 2 seeds, made-up numbers) is built so that every number
of the report can be computed by hand; see ``ARMS``.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ragen_torchrl.reporting import (
    group_runs,
    load_run,
    load_runs,
    main,
    rank_correlation,
    spearman,
    swept_keys,
    write_report,
)
from ragen_torchrl.reporting.plots import PlotDependencyError, pyplot
from ragen_torchrl.reporting.run_metrics import diagnostic_points, early_mean
from ragen_torchrl.reporting.table import group_row

TOTAL = 10  # iterations per fake run; "early" = the first 20% = iterations 1 and 2
# per arm, per seed: (final success, update time per iteration, kept ratio or None,
#                     early MI z-score, early reasoning entropy, early retrieval accuracy)
ARMS = {
    "none": [
        (0.5, 3.0, None, 0.1, 0.9, 0.2),
        (0.6, 4.0, None, 0.3, 1.0, 0.4),
        (0.7, 5.0, None, 0.2, 0.8, 0.6),
    ],
    "snr_top_p": [
        (0.8, 1.0, 0.5, 0.5, 0.6, 0.8),
        (0.9, 2.0, 0.7, 0.4, 0.7, 1.0),
    ],
}
FILTER_VALUE = {"none": 1.0, "snr_top_p": 0.9}


def _history(update: float, kept: float | None, mi: float, ent: float, acc: float) -> list[dict]:
    history = []
    for it in range(1, TOTAL + 1):
        h = {"iteration": it, "rollout/success": 0.5, "timing/update": update, "train/explained_variance": None}
        if kept is not None:
            h["filter/kept_ratio"] = kept
        if it in (1, 6):  # the MI monitor every 5 iterations; the late value must not count as early
            sign = 1.0 if it == 1 else -10.0
            h["collapse/trajectory/mi_zscore"] = sign * mi
            h["collapse/trajectory/reasoning_token_entropy_mean"] = sign * ent
            h["collapse/trajectory/retrieval_accuracy"] = sign * acc
        history.append(h)
    return history


def make_sweep(root: Path) -> list[Path]:
    dirs = []
    for arm, seeds in ARMS.items():
        for seed, (final, update, kept, mi, ent, acc) in enumerate(seeds):
            d = root / f"{arm}_s{seed}"
            d.mkdir(parents=True)
            config = {
                "seed": seed,
                "env": {"name": "frozenlake"},
                "filter": {"name": arm, "value": FILTER_VALUE[arm]},
                "trainer": {"total_iterations": TOTAL, "val_every": 5},
                "model": {"cache_dir": f"/cache/{seed}"},
            }
            history = _history(update, kept, mi, ent, acc)
            history[4].update({"val/success": 0.45, "val/success_stderr": 0.1})  # a val_every point at iteration 5
            summary = {
                "config": config,
                "val_start": {"success": 0.4, "success_stderr": 0.1},
                "val_end": {"success": final, "success_stderr": 0.1},
                "history": history,
                "seconds": 12.0,
                "iterations": TOTAL,
                "stop_reason": None,
                "run_dir": str(d),
                "final_policy": None,
            }
            (d / "summary.json").write_text(json.dumps(summary))
            dirs.append(d)
    return dirs


# --------------------------------------------------------------------------- statistics
def test_rank_correlation_matches_hand_computed_examples():
    # no ties: d = (-1, 1, -1, 1, 0), rho = 1 - 6 * 4 / (5 * (25 - 1)) = 0.8
    assert rank_correlation([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # a tie: ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4): Pearson of ranks = 4.5 / sqrt(4.5 * 5) = 3 / sqrt(10)
    assert rank_correlation([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(3 / math.sqrt(10))
    assert rank_correlation([5, 4, 3], [1, 2, 3]) == pytest.approx(-1.0)
    assert math.isnan(rank_correlation([1, 1, 1], [1, 2, 3]))  # constant: undefined


def test_spearman_uses_scipy_when_installed_and_the_own_rank_correlation_without(monkeypatch):
    x, y = [1, 2, 2, 3, 7], [1, 2, 3, 4, 0]
    expected = rank_correlation(x, y)
    assert spearman(x, y) == pytest.approx(expected)
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # `from scipy.stats import ...` now fails
    assert spearman(x, y) == expected
    assert math.isnan(spearman([1, 2], [2, 1]))  # fewer than 3 points


def test_swept_keys_drop_seed_paths_and_keys_that_split_the_runs_alike(tmp_path):
    runs = load_runs(make_sweep(tmp_path))
    # filter.value splits the runs exactly as filter.name does; seed and model.cache_dir are not swept
    assert swept_keys(runs) == ["filter.name"]
    keys, groups = group_runs(runs)
    assert [(g.label, len(g.runs)) for g in groups] == [("filter.name=none", 3), ("filter.name=snr_top_p", 2)]
    keys, groups = group_runs(runs, by=["env.name", "filter.value"])
    assert keys == ["env.name", "filter.value"]
    assert [g.label for g in groups] == [
        "env.name=frozenlake, filter.value=1.0",
        "env.name=frozenlake, filter.value=0.9",
    ]


def test_group_numbers_are_mean_and_standard_error_over_seeds(tmp_path):
    _, (none, snr) = group_runs(load_runs(make_sweep(tmp_path)))
    row = group_row(none)
    # final success 0.5, 0.6, 0.7: mean 0.6, sample std 0.1, SE 0.1 / sqrt(3)
    assert row["final"] == pytest.approx((0.6, 0.1 / math.sqrt(3), 3))
    assert row["start"] == pytest.approx((0.4, 0.0, 3))
    assert row["update"] == pytest.approx((4.0, 1.0 / math.sqrt(3), 3))  # per-run means 3, 4, 5
    assert row["filter/kept_ratio"][2] == 0  # not logged without a filter
    row = group_row(snr)
    assert row["final"] == pytest.approx((0.85, 0.05, 2))
    assert row["update"] == pytest.approx((1.5, 0.5, 2))
    assert row["filter/kept_ratio"] == pytest.approx((0.6, 0.1, 2))


def test_a_skipped_update_counts_as_zero_update_time(tmp_path):
    d = make_sweep(tmp_path)[3]  # snr_top_p, seed 0: update 1.0 s in each of 10 iterations
    summary = json.loads((d / "summary.json").read_text())
    for h in summary["history"][:5]:
        del h["timing/update"]
        h["filter/skipped_update"] = 1.0
    (d / "summary.json").write_text(json.dumps(summary))
    assert group_row(group_runs([load_run(d)])[1][0])["update"] == pytest.approx((0.5, 0.0, 1))


def test_validation_curve_has_start_val_every_and_end_points(tmp_path):
    run = load_run(make_sweep(tmp_path)[0])
    assert run.val_series("success") == [(0, 0.4), (5, 0.45), (TOTAL, 0.5)]
    assert run.start_success == 0.4 and run.final_success == 0.5
    # the diagnostic measured early: iterations <= 20% of 10 = 2, so the iteration-6 value is left out
    assert early_mean(run, "collapse/trajectory/mi_zscore") == pytest.approx(0.1)


def test_spearman_of_early_diagnostics_with_final_success(tmp_path):
    _, groups = group_runs(load_runs(make_sweep(tmp_path)))
    rho = {d.diagnostic.slug: d.rho for d in diagnostic_points(groups)}
    # final success ranks 1..5; MI ranks (1, 3, 2, 5, 4): sum d^2 = 4, rho = 1 - 24 / 120 = 0.8
    # entropy ranks (4, 5, 3, 1, 2): sum d^2 = 36, rho = 1 - 216 / 120 = -0.8; accuracy ranks 1..5: rho = 1
    assert rho == pytest.approx({"mi_zscore": 0.8, "reasoning_entropy": -0.8, "retrieval_accuracy": 1.0})


# --------------------------------------------------------------------------- the report
def test_report_writes_the_table_and_every_plot(tmp_path, capsys):
    dirs = make_sweep(tmp_path / "runs")
    out = tmp_path / "report"
    assert main([*map(str, dirs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = (out / "report.md").read_text()
    lines = report.splitlines()
    header = next(line for line in lines if line.startswith("| filter.name |"))
    assert header == (
        "| filter.name | runs | iterations | final success | peak success | start success "
        "| update time / iteration (s) | kept ratio |"
    )  # no T3 column: no run logged t3/truncation_rate; no totals: no run logged steps or samples
    # peak = the best validation after iteration 0 = the final one here (the iteration-5 value is 0.45)
    assert "| none | 3 | 10 | 0.600 ± 0.058 | 0.600 ± 0.058 | 0.400 ± 0.000 | 4.00 ± 0.58 | — |" in lines
    assert (
        "| snr_top_p | 2 | 10 | 0.850 ± 0.050 | 0.850 ± 0.050 | 0.400 ± 0.000 | 1.50 ± 0.50 | 0.600 ± 0.100 |" in lines
    )
    mi = "| trajectory MI z-score (z, dimensionless) | `collapse/trajectory/mi_zscore` | all runs | 5 | +0.800 | ["
    assert any(line.startswith(mi) for line in lines)
    assert any(line.startswith("| reasoning token entropy") and "| all runs | 5 | -0.800 |" in line for line in lines)
    # the per-group pools (3 and 2 runs) are listed, not computed
    assert sum(line.endswith("| n too small | — | — |") for line in lines) == 6
    pngs = [
        "val_success.png",
        "update_time.png",
        "success_vs_mi_zscore.png",
        "success_vs_retrieval_accuracy.png",
        "success_vs_reasoning_entropy.png",
        "diagnostics.png",
    ]
    for name in pngs:
        path = out / name
        assert path.is_file() and path.stat().st_size > 1000, name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"![{name}]({name})" in report
        assert str(path) in printed
    assert str(out / "report.md") in printed


def test_report_groups_by_the_keys_given(tmp_path):
    dirs = make_sweep(tmp_path / "runs")
    paths = write_report(dirs, tmp_path / "report", by=["env.name", "filter.name"])
    lines = paths[0].read_text().splitlines()
    assert "| frozenlake | none | 3 | 10 | 0.600 ± 0.058 | 0.600 ± 0.058 | 0.400 ± 0.000 | 4.00 ± 0.58 | — |" in lines


def test_a_run_with_only_tensorboard_events_loads(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    for name, config_in in (("with_ckpt", "checkpoint"), ("with_hydra", "hydra")):
        run_dir = tmp_path / name
        writer = SummaryWriter(log_dir=str(run_dir / "tb"))
        for step, success in ((0, 0.25), (1, 0.5), (2, 0.75)):
            writer.add_scalar("val/success", success, step)
            writer.add_scalar("stop/consecutive_low", 0.0, step)
        for step in (1, 2):
            writer.add_scalar("timing/update", 0.5 * step, step)
            writer.add_scalar("collapse/trajectory/mi_zscore", 2.0 * step, step)
        writer.close()
        config = {"seed": 1, "filter": {"name": "snr_top_p"}, "trainer": {"total_iterations": 2}}
        if config_in == "checkpoint":
            (run_dir / "checkpoints").mkdir()
            torch.save(
                {"iteration": 1, "config": config, "model": {"w": torch.zeros(2)}}, run_dir / "checkpoints/last.pt"
            )
        else:
            (run_dir / ".hydra").mkdir()
            (run_dir / ".hydra/config.yaml").write_text(
                "seed: 1\nfilter:\n  name: snr_top_p\ntrainer:\n  total_iterations: 2\n"
            )
        run = load_run(run_dir)
        assert run.source == "tensorboard"
        # a checkpoint is never unpickled by a report: its config is not read
        assert run.config == (config if config_in == "hydra" else {})
        assert run.val_series("success") == [(0, 0.25), (1, 0.5), (2, 0.75)]
        assert run.series("timing/update") == [(1, 0.5), (2, 1.0)]
        assert run.start_success == 0.25 and run.final_success == 0.75
        assert "stop/consecutive_low" not in run.history[0]
    # a TensorBoard-only run and summary runs in one report
    dirs = make_sweep(tmp_path / "runs")
    assert (
        main([*map(str, dirs), str(tmp_path / "with_hydra"), "--by", "filter.name", "--out", str(tmp_path / "report")])
        == 0
    )
    assert "| snr_top_p | 3 |" in (tmp_path / "report" / "report.md").read_text()


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("x")
    good = str(make_sweep(tmp_path / "runs")[0])
    cases = [
        ([], "no run dirs given"),
        ([str(tmp_path / "empty")], f"{tmp_path / 'empty'} is not a run dir"),
        ([str(tmp_path / "afile")], f"{tmp_path / 'afile'} is not a run dir"),
        ([str(tmp_path / "missing")], f"{tmp_path / 'missing'} does not exist"),
        ([good, "--by", "filter.nme"], "--by filter.nme: not a config key of any run"),
    ]
    for argv, message in cases:
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"ragen-report: error: {message}"), (argv, err)
        assert err.count("\n") == 1, err


def test_the_console_script_exits_2_on_bad_input(tmp_path):
    exe = shutil.which("ragen-report", path=str(Path(sys.executable).parent))  # this interpreter's script
    script = [exe] if exe else None  # not before a reinstall
    proc = subprocess.run(
        [*(script or [sys.executable, "-m", "ragen_torchrl.reporting"]), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"ragen-report: error: {tmp_path} is not a run dir (no summary.json, no TensorBoard events under "
        f"{tmp_path / 'tb'})\n"
    )


def test_without_matplotlib_the_error_names_the_plot_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotDependencyError, match=r"ragen-torchrl\[plot\]"):
        pyplot()
    dirs = make_sweep(tmp_path / "runs")
    assert main([*map(str, dirs), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ragen-report: error: the plots need matplotlib: pip install 'ragen-torchrl[plot]'")
    assert (tmp_path / "out" / "report.md").is_file()  # the table is still written


# --------------------------------------------------------------------------- real runs
@pytest.mark.slow
def test_report_on_two_real_smoke_runs(ragen_cache_dir, tmp_path):
    from helpers import SMALL
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config_paths import CONFIG_DIR
    from ragen_torchrl.trainer.loop import Trainer

    dirs = []
    for arm in ("none", "snr_top_p"):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose(
                "config",
                overrides=["trainer=smoke", f"filter={arm}", f"model.cache_dir={ragen_cache_dir}", *SMALL],
            )
        torch.manual_seed(0)
        Trainer(cfg, run_dir=tmp_path / arm).fit()
        dirs.append(tmp_path / arm)
    out = tmp_path / "report"
    assert main([*map(str, dirs), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "| filter.name | runs |" in report
    for arm in ("none", "snr_top_p"):
        assert any(line.startswith(f"| {arm} | 1 | ") for line in report.splitlines()), report
    runs = load_runs(dirs)
    assert all(r.final_success is not None and r.start_success is not None for r in runs)
    # the filter may keep no group of an untrained policy's all-failure batch: that update is skipped
    # (no timing/update), and the table counts it as 0 s
    for run in runs:
        assert run.series("timing/update") or run.series("filter/skipped_update") == [(1, 1.0)]
    rows = [line.split(" | ") for line in report.splitlines() if line.startswith(("| none | 1 |", "| snr_top_p | 1 |"))]
    assert len(rows) == 2 and all(row[6] != "—" for row in rows), rows  # update time / iteration
    for name in ("val_success.png", "update_time.png"):
        assert (out / name).stat().st_size > 1000
