"""The gradient-SNR probes in a report: bucket means and trends by hand on a tiny ``scalars.csv``, missing and
NaN buckets skipped and counted, the report section and ``grad_snr.png`` only where runs have probes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragen_torchrl.reporting.cli import write_report
from ragen_torchrl.reporting.grad_snr import group_probes, has_probes, probe_points, probe_section, run_probes
from ragen_torchrl.reporting.plots import plot_names
from ragen_torchrl.reporting.run_metrics import Group, group_runs
from ragen_torchrl.reporting.runs import Run, load_run, load_runs

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
FIXTURE = Path(__file__).parent / "data" / "result_set"
PROBE_SETS = ("mechanism_rl", "snr_controls", "snr_filter_frozenlake", "snr_filter_sokoban")
T_975_DF1 = 12.706204736174707  # Student's t quantile 0.975 with 1 degree of freedom
NAN = float("nan")

# two probes of 3 buckets: (iteration, bucket) -> (RV, task, KL, entropy); bucket 1 empty at the second probe,
# bucket 2's entropy NaN there
PROBES = {
    (1, 0): (0.0, 0.0, 0.01, 0.02),
    (1, 1): (0.25, 0.5, 0.03, 0.01),
    (1, 2): (1.0, 0.8, 0.01, 0.03),
    (11, 0): (0.0, 0.0, 0.02, 0.04),
    (11, 2): (0.64, 0.4, 0.01, NAN),
}
NAMES = ("reward_variance", "task_grad_norm", "kl_grad_norm", "entropy_grad_norm")


def _write_run(root: Path, name: str, seed: int, probes=PROBES, task_scale: float = 1.0) -> Path:
    """A run dir: summary.json and a scalars.csv with the probe columns at iterations 1 and 11 only."""
    run = root / name
    run.mkdir(parents=True)
    config = {"seed": seed, "filter": {"name": "none"}, "diagnostics": {"grad_snr": {"buckets": 3, "every": 10}}}
    summary = {"config": config, "val_start": {"success": 0.5}, "val_end": {"success": 0.6}, "iterations": 12}
    (run / "summary.json").write_text(json.dumps(summary))
    tags = sorted({f"grad_snr/bucket{b}/{n}" for (_, b) in probes for n in NAMES} | {"rollout/success"})
    lines = ["iteration," + ",".join(tags)]
    for it in range(1, 13):
        row = {"rollout/success": "0.5"}
        for (pit, b), values in probes.items():
            if pit == it:
                for n, v in zip(NAMES, values):
                    v = v * task_scale if n == "task_grad_norm" else v
                    row[f"grad_snr/bucket{b}/{n}"] = "nan" if math.isnan(v) else repr(v)
        lines.append(",".join([str(it)] + [row.get(t, "") for t in tags]))
    (run / "scalars.csv").write_text("\n".join(lines) + "\n")
    return run


def _no_probe_run(root: Path, name: str, seed: int) -> Path:
    run = root / name
    run.mkdir(parents=True)
    summary = {
        "config": {"seed": seed, "filter": {"name": "none"}},
        "val_start": {"success": 0.5},
        "val_end": {"success": 0.7},
        "history": [{"iteration": 1, "rollout/success": 0.5}],
        "iterations": 1,
    }
    (run / "summary.json").write_text(json.dumps(summary))
    return run


# --------------------------------------------------------------------------- one run, by hand
def test_a_runs_bucket_means_by_hand(tmp_path):
    p = run_probes(load_run(_write_run(tmp_path, "a", 0)))
    assert p.iterations == [1, 11] and p.num_buckets == 3 and p.terms == ("kl", "entropy")
    assert p.empty == {0: 0, 1: 1, 2: 0} and p.skipped == 0
    b0, b1, b2 = (p.buckets[b].values for b in range(3))
    assert [p.buckets[b].probes for b in range(3)] == [2, 1, 2]
    # bucket 0 (RV 0): task 0, KL (0.01 + 0.02) / 2, entropy (0.02 + 0.04) / 2, no task / sqrt(RV), ratio 0
    assert b0["reward_variance"] == 0.0 and b0["task"] == 0.0 and b0["task_per_sqrt_rv"] is None
    assert b0["kl"] == pytest.approx(0.015) and b0["entropy"] == pytest.approx(0.03) and b0["task_over_reg"] == 0.0
    # bucket 1, one probe: 0.5 / sqrt(0.25) = 1; 0.5 / (0.03 + 0.01) = 12.5
    assert b1["task_per_sqrt_rv"] == pytest.approx(1.0) and b1["task_over_reg"] == pytest.approx(12.5)
    # bucket 2: RV (1 + 0.64) / 2, task (0.8 + 0.4) / 2, entropy 0.03 (the NaN left out),
    # task / sqrt(RV) (0.8 / 1 + 0.4 / 0.8) / 2, ratio 0.6 / (0.01 + 0.03)
    assert b2["reward_variance"] == pytest.approx(0.82) and b2["task"] == pytest.approx(0.6)
    assert b2["entropy"] == pytest.approx(0.03) and b2["kl"] == pytest.approx(0.01)
    assert b2["task_per_sqrt_rv"] == pytest.approx(0.65) and b2["task_over_reg"] == pytest.approx(15.0)
    assert p.zero_points == 2 and p.zero_task_max == 0.0


def test_a_runs_trends_by_hand(tmp_path):
    t = run_probes(load_run(_write_run(tmp_path, "a", 0))).trends
    # RV > 0 points: (0.25, 0.5), (1.0, 0.8), (0.64, 0.4); RV ranks 1 3 2, task ranks 2 3 1 -> rho 1 - 6*2/24
    assert t["task_rho"] == pytest.approx(0.5)
    # x mean 0.63, y mean 0.5667: Sxy = 0.11, Sxx = 0.2814
    assert t["task_slope"] == pytest.approx(0.11 / 0.2814)
    # task / sqrt(RV): 1.0, 0.8, 0.5 -> ranks 3 2 1 against 1 3 2: rho 1 - 6*6/24
    assert t["scaled_rho"] == pytest.approx(-0.5)
    # KL 0.03, 0.01, 0.01: ranks 3, 1.5, 1.5 -> Pearson of the ranks -1.5 / sqrt(2 * 1.5)
    assert t["kl_rho"] == pytest.approx(-1.5 / math.sqrt(3.0))
    # entropy at two points only (the NaN left out): no rho, slope (0.03 - 0.01) / (1.0 - 0.25)
    assert t["entropy_rho"] is None and t["entropy_slope"] == pytest.approx(0.02 / 0.75)


# --------------------------------------------------------------------------- over runs
def test_the_groups_interval_is_students_t_over_the_runs(tmp_path):
    runs = [load_run(_write_run(tmp_path, "a", 0)), load_run(_write_run(tmp_path, "b", 1, task_scale=2.0))]
    runs.append(load_run(_no_probe_run(tmp_path, "c", 2)))
    g = group_probes(Group({}, runs))
    assert len(g.runs) == 2 and [p.name for p in g.without] == ["c"]
    # bucket 1's task norm: 0.5 and 1.0 -> mean 0.75, sd sqrt(0.125), half-width t_{0.975,1} * 0.25
    e = g.buckets[1]["task"]
    assert (e.mean, e.n) == (0.75, 2)
    assert (e.lo, e.hi) == pytest.approx((0.75 - T_975_DF1 * 0.25, 0.75 + T_975_DF1 * 0.25))
    # the same RV in both runs: a zero-width interval
    rv = g.buckets[1]["reward_variance"]
    assert (rv.mean, rv.lo, rv.hi) == pytest.approx((0.25, 0.25, 0.25))
    # scaling the task norms by 2 scales the slope by 2 and leaves rho: both runs above 0
    slope = g.trends["task_slope"]
    assert slope.mean == pytest.approx(1.5 * 0.11 / 0.2814) and (slope.above, slope.below) == (2, 0)
    assert g.trends["task_rho"].mean == pytest.approx(0.5) and g.trends["entropy_rho"] is None


# --------------------------------------------------------------------------- missing and NaN
def test_nan_and_missing_buckets_are_skipped_and_counted():
    h = [
        {
            "iteration": 1,
            "grad_snr/bucket0/reward_variance": NAN,
            "grad_snr/bucket0/task_grad_norm": 0.1,
            "grad_snr/bucket1/reward_variance": 0.5,
        },  # bucket 0: NaN RV; bucket 1: no task norm
        {"iteration": 2, "grad_snr/bucket1/reward_variance": 0.5, "grad_snr/bucket1/task_grad_norm": NAN},
        {
            "iteration": 3,
            "grad_snr/bucket1/reward_variance": 0.5,
            "grad_snr/bucket1/task_grad_norm": 0.2,
            "grad_snr/bucket1/entropy_grad_norm": NAN,
        },
    ]
    points, iterations, skipped = probe_points(Run(Path("r"), {}, h))
    assert iterations == [1, 2, 3] and skipped == 3 and len(points) == 1 and points[0].entropy is None
    p = run_probes(Run(Path("r"), {}, h))
    assert p.num_buckets == 2 and p.empty == {0: 2, 1: 0} and p.terms == ()
    assert p.buckets[1].values["task"] == 0.2 and p.buckets[1].values["task_over_reg"] is None
    assert all(v is None for v in p.trends.values())  # one point: no rho, no slope


def test_a_run_whose_every_probe_value_is_nan_gives_dashes_not_an_error():
    h = [{"iteration": 1, "grad_snr/bucket0/reward_variance": NAN, "grad_snr/bucket0/task_grad_norm": NAN}]
    lines = probe_section([Group({"arm": "a"}, [Run(Path("r"), {}, h)])])
    assert "| arm=a | 0 | 0 | 0 / 0 | — | — | — | — |" in lines
    assert any("1 bucket-probes skipped (RV or task norm missing or NaN)" in line for line in lines)


def test_runs_without_probe_columns_say_no_probes():
    assert run_probes(Run(Path("r"), {}, [{"iteration": 1, "rollout/success": 0.5}])) is None
    probed = Run(
        Path("p"),
        {},
        [{"iteration": 1, "grad_snr/bucket0/reward_variance": 0.0, "grad_snr/bucket0/task_grad_norm": 0.0}],
    )
    lines = probe_section(
        [Group({"arm": "a"}, [probed, Run(Path("q"), {})]), Group({"arm": "b"}, [Run(Path("s"), {})])]
    )
    assert "| arm=b | no probes | — | — | — | — | — | — |" in lines
    assert any(line.startswith("- arm=a: 1 probes in 1 runs") and "no probes in `q`" in line for line in lines)


# --------------------------------------------------------------------------- the report
def test_a_report_without_probe_columns_has_no_section_and_no_plot(tmp_path):
    runs = load_runs([FIXTURE])
    _, groups = group_runs(runs)
    assert not has_probes(groups) and "grad_snr.png" not in plot_names(groups, [])
    write_report([FIXTURE], tmp_path, base=FIXTURE, plots=False)
    text = (tmp_path / "report.md").read_text()
    assert "Gradient SNR" not in text and "grad_snr" not in text
    assert text == (FIXTURE / "report.md").read_text()


def test_a_report_with_probes_has_the_section_and_the_plot(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [_write_run(tmp_path / "runs", "a", 0), _write_run(tmp_path / "runs", "b", 1, task_scale=2.0)]
    paths = write_report(runs, tmp_path / "out")
    assert (tmp_path / "out" / "grad_snr.png") in paths
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Gradient SNR probes (RAGEN-2 §3.1)" in text and "![grad_snr.png](grad_snr.png)" in text
    lines = text.splitlines()
    header = "| group | bucket | runs | filled / empty probes | reward variance | task norm | KL norm | entropy norm "
    assert header + "| task / sqrt(RV) | task / (KL + entropy) |" in lines
    # bucket 1: filled at 1 probe in each run, empty at 1; task 0.75 +- 12.706 * 0.25 = [-2.43, 3.93]
    row = next(line for line in lines if line.startswith("| all runs | 1 |"))
    assert row.startswith("| all runs | 1 | 2 | 2 / 2 | 0.25 [0.25, 0.25] | 0.75 [-2.43, 3.93] | 0.03 [0.03, 0.03] |")
    assert "| all runs | Spearman rho, task norm vs RV | 2 | +0.500 | [+0.500, +0.500] | 2 / 0 |" in lines
    # the same runs give the same bytes
    write_report(runs, tmp_path / "again", plots=False)
    assert (tmp_path / "again" / "report.md").read_text() == text


def test_the_plot_draws_each_terms_bucket_means_with_the_band(figures, tmp_path):
    from ragen_torchrl.reporting.grad_snr import plot_grad_snr

    runs = [load_run(_write_run(tmp_path, "a", 0)), load_run(_write_run(tmp_path, "b", 1, task_scale=2.0))]
    plot_grad_snr([Group({}, runs)], tmp_path / "grad_snr.png")
    fig = figures["grad_snr.png"]
    # the task norm's 2-run band reaches 3.93 (t_{0.975, 1} = 12.7): the axis is cut at twice the largest mean 0.9;
    # the regularisers are the same in both runs (a zero-width band), so theirs is not
    cut = ", y axis cut at twice the largest mean"
    assert [ax.get_title() for ax in fig.axes] == [
        f"{term}-gradient norm per RV bucket: n = 2 runs with probes{note}"
        for term, note in (("task", cut), ("KL", ""), ("entropy", ""))
    ]
    assert fig.axes[0].get_ylim() == pytest.approx((0.0, 1.8)) and fig.axes[1].get_ylim()[0] == 0.0
    assert "95% Student-t interval" in fig._suptitle.get_text()
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == pytest.approx([0.0, 0.25, 0.82])  # the buckets' mean RV, sorted
    assert list(line.get_ydata()) == pytest.approx([0.0, 0.75, 0.9])  # task: (0.6 + 1.2) / 2 in bucket 2
    assert fig.axes[0].collections  # the band (2 runs)
    assert fig.axes[0].get_legend_handles_labels()[1] == ["all runs (n=2)"]


# --------------------------------------------------------------------------- the committed runs
@pytest.mark.parametrize("name", PROBE_SETS)
def test_committed_probes_have_a_zero_task_norm_at_zero_variance(name):
    """A zero-variance bucket's advantages are all 0, so its task norm must be exactly 0 (the probe's sanity)."""
    for run in load_runs([RESULTS / name]):
        points, iterations, skipped = probe_points(run)
        assert iterations and skipped == 0
        assert all(p.task == 0.0 for p in points if p.reward_variance == 0.0)
    assert "## Gradient SNR probes (RAGEN-2 §3.1)" in (RESULTS / name / "report.md").read_text()
