"""The curves' band (a 95% Student-t interval over seeds, by hand against scipy), their alignment by
iteration up to the shortest run, the optimizer-step and wall-clock x axes, and ``ragen-report --x``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragen_torchrl.reporting import main
from ragen_torchrl.reporting.plots import X_AXES, mean_band, x_positions
from ragen_torchrl.reporting.run_metrics import Group
from ragen_torchrl.reporting.runs import Run


def _run(seed: int, success: list[float], steps=None, seconds=None, val=()) -> Run:
    """A run with ``rollout/success`` at iterations 1.., its optimizer steps and seconds per iteration."""
    history = []
    for i, v in enumerate(success, start=1):
        h = {"iteration": i, "rollout/success": v}
        if steps is not None:
            h["train/optimizer_steps"] = steps[i - 1]
        if seconds is not None:
            h["timing/total"] = seconds[i - 1]
        history.append(h)
    return Run(Path(f"r{seed}"), {"seed": seed}, history, [(it, {"success": v}) for it, v in val])


# --------------------------------------------------------------------------- the band, by hand
def test_the_band_is_the_95_percent_t_interval_over_seeds():
    stats = pytest.importorskip("scipy.stats")
    # three seeds, at iteration 1: 0.2, 0.4, 0.9 -> mean 0.5, sd sqrt(0.13); at iteration 2 all 0.6
    series = [[(1, 0.2), (2, 0.6)], [(1, 0.4), (2, 0.6)], [(1, 0.9), (2, 0.6)]]
    band = mean_band(series)
    half = stats.t.ppf(0.975, 2) * math.sqrt(0.13) / math.sqrt(3)  # 4.3027 * 0.2082 = 0.8957
    assert band.x == [1, 2] and band.n == 3
    assert band.mean == pytest.approx([0.5, 0.6])
    assert band.half == pytest.approx([half, 0.0], abs=1e-9)
    assert half == pytest.approx(0.8957, abs=1e-4)


def test_one_run_has_no_band():
    band = mean_band([[(1, 0.2), (2, 0.4), (3, 0.5)]])
    assert band.n == 1 and band.mean == [0.2, 0.4, 0.5]
    assert all(math.isnan(h) for h in band.half)


def test_the_drawn_band_is_the_t_interval_and_the_title_says_so(figures, tmp_path):
    stats = pytest.importorskip("scipy.stats")
    from ragen_torchrl.reporting.plots import plot_train_success

    # window 1: each run's curve is its raw success; 3 seeds at 4 iterations
    values = [[0.2, 0.3, 0.4, 0.5], [0.4, 0.3, 0.6, 0.5], [0.9, 0.3, 0.8, 0.5]]
    group = Group({}, [_run(s, v) for s, v in enumerate(values)])
    plot_train_success([group], tmp_path / "train_success.png", window=1)
    ax = figures["train_success.png"].axes[0]
    assert "95% Student-t interval" in ax.get_title() and "n = 3 runs" in ax.get_title()
    assert ax.get_legend_handles_labels()[1] == ["all runs (n=3)"]
    [mean] = ax.lines
    assert list(mean.get_xdata()) == [1, 2, 3, 4]
    assert list(mean.get_ydata()) == pytest.approx([0.5, 0.3, 0.6, 0.5])
    # the band's outline: at iteration 1, 0.5 ± t_{0.975,2} sqrt(0.13) / sqrt(3)
    [band] = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    half = stats.t.ppf(0.975, 2) * math.sqrt(0.13) / math.sqrt(3)
    assert ys.max() == pytest.approx(0.5 + half) and ys.min() == pytest.approx(0.5 - half)


# --------------------------------------------------------------------------- alignment
def test_aligned_by_iteration_the_mean_ends_where_the_shortest_run_ends():
    series = [[(i, 1.0) for i in range(1, 4)], [(i, 2.0) for i in range(1, 6)], [(i, 3.0) for i in range(1, 6)]]
    band = mean_band(series)
    assert band.x == [1, 2, 3] and band.mean == [2.0, 2.0, 2.0] and band.n == 3
    assert band.ends == (3, 5)


def test_aligned_by_iteration_a_point_some_run_lacks_is_not_averaged():
    # validations every 10 iterations and at each run's own end (148, 160): the mean stops at 140
    a = [(it, 0.5) for it in range(0, 141, 10)] + [(148, 0.9)]
    b = [(it, 0.7) for it in range(0, 161, 10)]
    band = mean_band([a, b])
    assert band.x == list(range(0, 141, 10)) and band.ends == (148, 160)


def test_the_legend_marks_where_the_runs_end(figures, tmp_path):
    from ragen_torchrl.reporting.plots import plot_val_success

    runs = [_run(s, [0.5] * n, val=[(0, 0.1), (10, 0.2), (20, 0.3), (n, 0.4)]) for s, n in enumerate((25, 30, 30))]
    plot_val_success([Group({"filter.name": "snr"}, runs)], tmp_path / "val_success.png")
    ax = figures["val_success.png"].axes[0]
    assert ax.get_legend_handles_labels()[1] == ["filter.name=snr (n=3; runs end at 25–30, mean to 20)"]
    mean = [line for line in ax.lines if line.get_label().startswith("filter.name")]
    assert [list(line.get_xdata()) for line in mean] == [[0, 10, 20]]
    # each seed's own curve is drawn in full (thin), the longer ones past the mean's end
    thin = sorted(list(line.get_xdata()) for line in ax.lines if line not in mean)
    assert thin == [[0, 10, 20, 25], [0, 10, 20, 30], [0, 10, 20, 30]]


# --------------------------------------------------------------------------- x axes
def test_steps_and_seconds_positions_by_hand():
    history = [
        {"iteration": 1, "train/optimizer_steps": 4.0, "timing/total": 10.0, "timing/mi_seconds": 2.0},
        {"iteration": 2, "filter/skipped_update": 1.0, "timing/total": 3.0},  # no update: 0 steps
        {"iteration": 3, "train/optimizer_steps": 2.0, "timing/total": 9.0, "timing/grad_snr": 1.5},
    ]
    run = Run(Path("r"), {}, history, [(0, {"success": 0.1}), (3, {"success": 0.3})])
    assert x_positions(run, "iterations") == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}
    assert x_positions(run, "steps") == {0: 0.0, 1: 4.0, 2: 4.0, 3: 6.0}
    # timing/total less the measurement-only diagnostics: 10 - 2, + 3, + 9 - 1.5
    assert x_positions(run, "seconds") == {0: 0.0, 1: 8.0, 2: 11.0, 3: 18.5}
    assert x_positions(Run(Path("r"), {}, [{"iteration": 1}]), "seconds") is None
    with pytest.raises(ValueError, match="not one of iterations, steps, seconds"):
        x_positions(run, "tokens")


def test_on_seconds_each_run_is_interpolated_onto_the_range_every_run_covers():
    # run a at 0, 10, 20 s; run b at 0, 5, 15, 30 s: the range both cover is 0..20
    a = [(0.0, 0.0), (10.0, 1.0), (20.0, 1.0)]
    b = [(0.0, 0.2), (5.0, 0.4), (15.0, 0.4), (30.0, 1.0)]
    band = mean_band([a, b], interpolate=True)
    assert band.x == [0.0, 5.0, 10.0, 15.0, 20.0]
    # a at 5: 0.5, at 15: 1.0; b at 10: 0.4, at 20: 0.4 + 0.6 * 5 / 15 = 0.6
    assert band.mean == pytest.approx([0.1, 0.45, 0.7, 0.7, 0.8])
    assert band.ends == (20.0, 30.0)


def test_on_seconds_two_point_runs_are_not_interpolated():
    # before training (0 s) and the final validation, at different seconds: only 0 is shared
    band = mean_band([[(0.0, 0.1), (40.0, 0.5)], [(0.0, 0.3), (55.0, 0.9)]], interpolate=True)
    assert band.x == [0.0] and band.mean == pytest.approx([0.2])


def test_the_steps_axis_places_and_averages_runs_by_their_optimizer_steps(figures, tmp_path):
    from ragen_torchrl.reporting.plots import plot_train_success

    # run 0 takes 2 steps every iteration, run 1 takes 4 (it skips none): at 8 steps run 0 is at
    # iteration 4 (success 0.4), run 1 at iteration 2 (0.2)
    runs = [
        _run(0, [0.1, 0.2, 0.3, 0.4], steps=[2.0] * 4),
        _run(1, [0.1, 0.2, 0.3, 0.4], steps=[4.0] * 4),
        Run(Path("r2"), {"seed": 2}, [{"iteration": 1, "rollout/success": 0.5}]),  # no steps logged
    ]
    plot_train_success([Group({}, runs)], tmp_path / "train_success.png", window=1, x="steps")
    ax = figures["train_success.png"].axes[0]
    assert ax.get_xlabel() == X_AXES["steps"]
    assert "n = 2 runs (1 without train/optimizer_steps left out)" in ax.get_title()
    mean = next(line for line in ax.lines if line.get_label().startswith("all runs"))
    # the range both cover: 4 (run 1's first) to 8 (run 0's last); the union of their points in it
    assert list(mean.get_xdata()) == [4.0, 6.0, 8.0]
    assert list(mean.get_ydata()) == pytest.approx([(0.2 + 0.1) / 2, (0.3 + 0.15) / 2, (0.4 + 0.2) / 2])


def test_two_point_series_stay_markers_on_the_seconds_axis(figures, tmp_path):
    from ragen_torchrl.reporting.plots import plot_val_success

    runs = [_run(s, [0.5, 0.5], seconds=[10.0, 10.0 + s], val=[(0, 0.1), (2, 0.3 + s / 10)]) for s in range(3)]
    plot_val_success([Group({}, runs)], tmp_path / "val_success.png", x="seconds")
    ax = figures["val_success.png"].axes[0]
    assert ax.lines and all(line.get_linestyle() == "None" for line in ax.lines)
    assert "runs end at 20–22 s, mean to 0 s" in ax.get_legend_handles_labels()[1][0]


# --------------------------------------------------------------------------- ragen-report --x
def _run_dir(root: Path, name: str, seed: int, steps: float) -> Path:
    d = root / name
    d.mkdir()
    history = [
        {"iteration": i, "rollout/success": 0.1 * i, "timing/update": 1.0, "timing/total": 2.0,
         "train/optimizer_steps": steps}
        for i in range(1, 6)
    ]  # fmt: skip
    summary = {
        "config": {"seed": seed, "filter": {"name": name.rstrip("0123456789")}},
        "val_start": {"success": 0.2},
        "val_end": {"success": 0.5},
        "history": history,
        "iterations": 5,
    }
    (d / "summary.json").write_text(json.dumps(summary))
    return d


@pytest.mark.parametrize("x", ["steps", "seconds"])
def test_ragen_report_x_puts_the_curves_on_that_axis(figures, tmp_path, capsys, x):
    runs = [
        _run_dir(tmp_path, f"{arm}{s}", s, 4.0 if arm == "none" else 2.0) for arm in ("none", "snr") for s in (0, 1)
    ]
    assert main([*map(str, runs), "--out", str(tmp_path / "report"), "--x", x]) == 0
    assert "val_success.png" in capsys.readouterr().out
    for name in ("val_success.png", "update_time.png", "train_success.png"):
        assert figures[name].axes[0].get_xlabel().startswith(X_AXES[x]), name
    # the same report.md whatever the axis
    text = (tmp_path / "report" / "report.md").read_text()
    assert main([*map(str, runs), "--out", str(tmp_path / "default")]) == 0
    assert (tmp_path / "default" / "report.md").read_text() == text
    assert figures["val_success.png"].axes[0].get_xlabel() == "training iteration (0 = before training)"


def test_ragen_report_x_is_documented_and_checked(capsys):
    from ragen_torchrl.reporting.cli import _parser

    [action] = [a for a in _parser()._actions if a.dest == "x"]
    assert tuple(action.choices) == tuple(X_AXES) and action.default == "iterations"
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--x AXIS" in help_text and "train/optimizer_steps summed" in help_text
    assert "timing/total less the MI and gradient-SNR diagnostics" in help_text
    assert "95% Student-t band over seeds" in help_text
    with pytest.raises(SystemExit) as e:
        main(["r", "--x", "tokens"])
    assert e.value.code == 2
