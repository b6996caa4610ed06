"""Committed result sets: ``report.md`` regenerates byte for byte from the committed runs, and the plots
say what they show (inspected on the matplotlib figures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragen_torchrl.reporting import main
from ragen_torchrl.reporting.cli import check_result_set, grouping_keys, write_report
from ragen_torchrl.reporting.run_metrics import Group, group_runs
from ragen_torchrl.reporting.runs import Run, RunError, is_result_set, is_run_dir, load_run, read_scalars_csv

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
FIXTURE = Path(__file__).parent / "data" / "result_set"
NOT_RECOMPUTABLE = "> **Not recomputable from committed data.**"


def _with_raw_data() -> list[Path]:
    return sorted(d for d in RESULTS.iterdir() if (d / "report.md").is_file() and (is_result_set(d) or is_run_dir(d)))


# --------------------------------------------------------------------------- byte-for-byte
def test_the_fixture_result_set_regenerates_byte_for_byte(tmp_path):
    assert check_result_set(FIXTURE) == ""
    # a second regeneration elsewhere gives the same bytes (no timestamps, paths relative to the set)
    write_report([FIXTURE], tmp_path, base=FIXTURE, plots=False)
    assert (tmp_path / "report.md").read_bytes() == (FIXTURE / "report.md").read_bytes()


@pytest.mark.parametrize("folder", _with_raw_data(), ids=lambda p: p.name)
def test_every_committed_result_set_with_raw_data_regenerates_byte_for_byte(folder):
    assert check_result_set(folder) == ""


def test_check_regenerates_with_the_keys_the_report_was_grouped_by(tmp_path):
    # ragen-experiment writes its report with --by; --check reads the keys back from report.md
    copy = tmp_path / "set"
    shutil.copytree(FIXTURE, copy)
    write_report([copy], copy, by=["filter.name", "seed"], plots=False)
    assert "grouped by `filter.name`, `seed`." in (copy / "report.md").read_text()
    assert check_result_set(copy) == ""
    assert grouping_keys((FIXTURE / "report.md").read_text()) == ["filter.name"]


def test_committed_result_sets_are_recomputable_or_marked():
    with_data = set(_with_raw_data())
    assert RESULTS / "default_run" in with_data
    for page in sorted(RESULTS.glob("*/report.md")):
        if page.parent not in with_data:
            assert page.read_text().splitlines()[2].startswith(NOT_RECOMPUTABLE), page


def test_check_reports_a_stale_report_and_exits_1(tmp_path, capsys):
    copy = tmp_path / "set"
    shutil.copytree(FIXTURE, copy)
    report = copy / "report.md"
    report.write_text(report.read_text().replace("| 0.600 ± 0.035 |", "| 0.700 ± 0.035 |", 1))
    assert main(["--check", str(copy)]) == 1
    captured = capsys.readouterr()
    assert "-| none | 5 | 6 | 0.700 ± 0.035 |" in captured.out and "+| none | 5 | 6 | 0.600 ± 0.035 |" in captured.out
    assert captured.err.startswith("ragen-report: error: report.md differs from its runs in ")
    assert main(["--check", str(FIXTURE)]) == 0
    assert main(["--check", str(tmp_path)]) == 2  # neither a result set nor a run dir


def test_the_fixture_report_numbers_by_hand():
    lines = (FIXTURE / "report.md").read_text().splitlines()
    # none_s0_rerun repeats none_s0 (same config and seed; only the folder differs): dropped and listed
    assert any("`runs/none_s0_rerun` (repeats `runs/none_s0`)" in line for line in lines)
    # final success: none 0.5 0.6 0.55 0.7 0.65 (mean 0.6), snr_top_p 0.55 0.6 0.65 0.75 0.6 (mean 0.63)
    assert any(line.startswith("| none | 5 | 6 | 0.600 ± 0.035 |") for line in lines)
    # B - A per seed: 0.05 0 0.1 0.05 -0.05; sign flips with |sum| >= 0.15: 16 of 32 -> p 0.5
    row = next(line for line in lines if "| final validation success |" in line)
    assert "| 5 | +0.030 |" in row and "| 0.500 | 3 / 1 |" in row
    # 24 optimizer steps and 384 trained samples (4 and 64 per iteration x 6) per unfiltered run
    row = "| `runs/none_s0` | 0 | summary.json + scalars.csv | 6 | 0.400 | 0.500 (6) | 0.500 (6) | 24 | 384 |"
    assert any(line.endswith(row) for line in lines)
    assert not any("| n too small |" in line for line in lines)  # 10 runs in the pool, 5 per group


# --------------------------------------------------------------------------- scalars.csv
def test_scalars_csv_is_the_runs_per_iteration_record():
    run = load_run(FIXTURE / "runs" / "none_s1")
    assert run.source == "summary.json + scalars.csv"
    assert run.series("timing/update") == [(i, 3.5) for i in range(1, 7)]
    assert run.val_series("success") == [(0, 0.4), (3, 0.65), (6, 0.6)]  # val/* tags; iteration 0 is validation only
    assert [h["iteration"] for h in run.history] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("step,a\n1,2\n", "line 1: the header must start with 'iteration'"),
        ("iteration,a\n1,2,3\n", "line 2: 3 cells, the header has 2"),
        ("iteration,a\nx,2\n", "line 2: iteration 'x' is not an integer"),
        ("iteration,a\n1,abc\n", "line 2: a = 'abc' is not a number"),
    ],
)
def test_a_bad_scalars_csv_names_the_file_and_line(tmp_path, text, message):
    f = tmp_path / "scalars.csv"
    f.write_text(text)
    with pytest.raises(RunError, match=f"^{f}: {message}"):
        read_scalars_csv(f)


# --------------------------------------------------------------------------- plots


def _run(name, seed, arm, lr, points, length=None):
    config = {"seed": seed, "filter": {"name": arm}, "algo": {"lr": lr}}
    history = [{"iteration": i, "rollout/success": 0.5} for i in range(1, (length or points[-1][0]) + 1)]
    return Run(Path(name), config, history, [(it, {"success": v}) for it, v in points])


def test_two_point_series_are_markers_without_a_line_and_legends_name_every_differing_key(figures, tmp_path):
    from ragen_torchrl.reporting.plots import write_plots
    from ragen_torchrl.reporting.run_metrics import differing_keys

    # algo.lr splits the runs exactly as filter.name does: the table groups by filter.name only,
    # the legend must still name algo.lr
    runs = [
        _run(f"{arm}{s}", s, arm, lr, [(0, 0.4), (10, 0.5 + s / 10)])
        for arm, lr in (("none", 1e-5), ("snr_top_p", 2e-5))
        for s in range(3)
    ]
    keys, groups = group_runs(runs)
    assert keys == ["filter.name"]
    write_plots(groups, [], tmp_path, keys=differing_keys(runs))
    ax = figures["val_success.png"].axes[0]
    assert "n = 6 runs" in ax.get_title()
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["filter.name=none, algo.lr=1e-05 (n=3)", "filter.name=snr_top_p, algo.lr=2e-05 (n=3)"]
    # every drawn line (the per-seed ones and the means) has two points: none is joined
    assert ax.lines and all(line.get_linestyle() == "None" for line in ax.lines)


def test_runs_of_different_lengths_are_averaged_only_up_to_the_shortest(figures, tmp_path):
    from ragen_torchrl.reporting.plots import plot_train_success

    short = [_run(f"s{s}", s, "none", 1e-5, [(0, 0.4), (5, 0.5)]) for s in range(2)]
    long = [_run(f"l{s}", s + 10, "none", 1e-5, [(0, 0.4), (5, 0.5), (10, 0.6)]) for s in range(3)]
    group = Group({"filter.name": "none"}, short + long)
    plot_train_success([group], tmp_path / "train_success.png")
    ax = figures["train_success.png"].axes[0]
    # one arm, one curve: the mean over all 5 runs ends where the shortest ends, the legend says so
    assert ax.get_legend_handles_labels()[1] == ["filter.name=none (n=5; runs end at 5–10, mean to 5)"]
    assert "n = 5 runs" in ax.get_title()
    solid = [list(line.get_xdata()) for line in ax.lines if line.get_linestyle() == "-"]
    dotted = [list(line.get_xdata()) for line in ax.lines if line.get_linestyle() == ":"]
    assert solid == [[1, 2, 3, 4, 5]]  # nothing past the shortest run is averaged
    assert dotted == [list(range(5, 11))] * 3  # the longer runs go on, thin and dotted, unaveraged


def test_every_diagnostics_panel_gives_its_n(figures, tmp_path):
    from ragen_torchrl.reporting.plots import plot_diagnostics
    from ragen_torchrl.reporting.run_metrics import DIAGNOSTICS

    runs = [
        Run(Path(f"r{s}"), {"seed": s}, [{"iteration": i, "collapse/trajectory/mi_zscore": 1.0 + s} for i in (1, 2, 3)])
        for s in range(4)
    ]
    plot_diagnostics(group_runs(runs)[1], DIAGNOSTICS[:2], tmp_path / "diagnostics.png")
    titles = [ax.get_title() for ax in figures["diagnostics.png"].axes]
    assert titles == ["trajectory MI z-score: n = 4 runs", "trajectory MI estimate: n = 0 runs"]


def test_scatter_shows_the_correlation_test_or_no_plot_below_five(figures, tmp_path):
    from ragen_torchrl.reporting.plots import plot_names, write_plots
    from ragen_torchrl.reporting.run_metrics import diagnostic_points

    def run(s, mi, success):
        return Run(
            Path(f"r{s}"),
            {"seed": s},
            [{"iteration": 1, "collapse/trajectory/mi_zscore": mi}],
            [(1, {"success": success})],
        )

    groups = group_runs([run(s, 0.1 * s, 0.1 * s) for s in range(4)])[1]
    assert "success_vs_mi_zscore.png" not in plot_names(groups, diagnostic_points(groups))
    groups = group_runs([run(s, 0.1 * s, 0.1 * s) for s in range(5)])[1]
    write_plots(groups, diagnostic_points(groups), tmp_path)
    ax = figures["success_vs_mi_zscore.png"].axes[0]
    assert "n = 5 runs" in ax.get_title()
    assert any(
        t.get_text().startswith("Spearman ρ = +1.00, 95% CI [") and "permutation p = 0.017" in t.get_text()
        for t in ax.texts
    )  # 2 of 120 permutations reach |rho| = 1


def test_the_fixture_diagnostic_change_by_hand():
    # 6 iterations, 20%: early = iterations 1-2, late = iterations 5-6, read straight from each run's CSV
    import csv

    lines = (FIXTURE / "report.md").read_text().splitlines()
    for arm in ("none", "snr_top_p"):
        early, late = [], []
        for path in sorted((FIXTURE / "runs").glob("*/scalars.csv")):
            summary = json.loads((path.parent / "summary.json").read_text())
            if summary["config"]["filter"]["name"] != arm or path.parent.name == "none_s0_rerun":
                continue
            mi = {
                int(r["iteration"]): float(r["collapse/trajectory/mi_zscore"])
                for r in csv.DictReader(path.open())
                if r["collapse/trajectory/mi_zscore"]
            }
            early.append((mi[1] + mi[2]) / 2)
            late.append((mi[5] + mi[6]) / 2)
        row = next(
            line
            for line in lines
            if line.startswith(f"| trajectory MI z-score (z, dimensionless) | filter.name={arm} |")
        )
        change = sum(late) / len(late) - sum(early) / len(early)
        assert f"| {len(early)} | {sum(early) / len(early):.3f} ± " in row and f"| {change:+.3f} |" in row
        assert f"| {sum(late) / len(late):.3f} ± " in row


@pytest.mark.parametrize("folder", _with_raw_data(), ids=lambda p: p.name)
def test_the_report_names_the_commit_each_run_recorded(folder):
    text = (folder / "report.md").read_text()
    for path in sorted(folder.glob("runs/*/summary.json")) or [folder / "summary.json"]:
        commit = (json.loads(path.read_text()).get("provenance") or {}).get("git", {}).get("commit")
        if commit:
            assert f"commit `{commit[:12]}`" in text, path


def test_the_snr_filter_frozenlake_runs_share_one_clean_commit():
    commits = {
        (s["provenance"]["git"]["commit"], s["provenance"]["git"]["dirty"])
        for s in (json.loads(p.read_text()) for p in (RESULTS / "snr_filter_frozenlake").glob("runs/*/summary.json"))
    }
    assert len(commits) == 1 and not next(iter(commits))[1]


# --------------------------------------------------------------------------- episode metrics
def _episode_set(root: Path) -> Path:
    """Two arms x 3 seeds; per iteration each run logs turns and generated tokens per episode."""
    for arm, turns, tokens in (("no_t3", (6.0, 5.0), (300.0, 280.0)), ("t3", (4.0, 3.0), (200.0, 150.0))):
        for seed in range(3):
            run = root / "runs" / f"{arm}_seed{seed}"
            run.mkdir(parents=True)
            history = [
                {"iteration": i + 1, "rollout/turns": turns[i] + seed, "rollout/tokens": tokens[i] + 10 * seed}
                for i in range(2)
            ]
            summary = {
                "config": {"seed": seed, "t3": {"enabled": arm == "t3"}},
                "val_start": {"success": 0.2},
                "val_end": {"success": 0.3 + 0.1 * (arm == "t3") + 0.01 * seed},
                "history": history,
                "iterations": 2,
            }
            (run / "summary.json").write_text(json.dumps(summary))
    return root


def test_paired_episode_metrics_by_hand_and_check_compares_the_same_ones(tmp_path):
    folder = _episode_set(tmp_path / "set")
    write_report([folder], folder, paired=["final", "turns", "tokens"], plots=False)
    text = (folder / "report.md").read_text()
    assert "Metrics compared: `final` (final validation success), `turns` (turns / episode), `tokens`" in text
    # per run: turns no_t3 5.5 + seed, t3 3.5 + seed -> t3 − no_t3 = -2.00 on every seed;
    # tokens no_t3 290 + 10 seed, t3 175 + 10 seed -> -115.0
    row = next(line for line in text.splitlines() if "| turns / episode | 3 |" in line)
    assert "| 3 | -2.00 | [-2.00, -2.00] |" in row and "| 0 / 3 |" in row
    row = next(line for line in text.splitlines() if "| generated tokens / episode | 3 |" in line)
    assert "| 3 | -115.0 |" in row
    assert not any("| peak validation success |" in line for line in text.splitlines())
    # the group table shows the compared episode metrics: no_t3 turns 5.5, 6.5, 7.5 -> 6.500 ± 0.577
    header = next(line for line in text.splitlines() if line.startswith("| t3.enabled |"))
    assert header.endswith("| turns / episode | tokens / episode |")
    assert next(line for line in text.splitlines() if line.startswith("| false |")).endswith(
        "| 6.500 ± 0.577 | 300.000 ± 5.774 |"
    )
    assert check_result_set(folder) == ""
    assert grouping_keys(text) == ["t3.enabled"]


def test_paired_rejects_an_unknown_metric(tmp_path, capsys):
    folder = _episode_set(tmp_path / "set")
    with pytest.raises(SystemExit):
        main([str(folder), "--paired", "speed"])
    assert "invalid choice: 'speed'" in capsys.readouterr().err


def test_within_pairs_each_tasks_arms_only_and_check_reads_it_back(tmp_path, capsys):
    # two tasks x two arms x 2 seeds; final success: task x 0.5 / 0.6, task y 0.1 / 0.4 (+0.01 seed)
    root = tmp_path / "set"
    for task, finals in (("x", (0.5, 0.6)), ("y", (0.1, 0.4))):
        for enabled, final in zip((False, True), finals):
            for seed in range(2):
                run = root / "runs" / f"{task}_{enabled}_seed{seed}"
                run.mkdir(parents=True)
                summary = {
                    "config": {"seed": seed, "env": {"name": task}, "t3": {"enabled": enabled}},
                    "val_start": {"success": 0.2},
                    "val_end": {"success": final + 0.01 * seed},
                    "history": [],
                    "iterations": 2,
                }
                (run / "summary.json").write_text(json.dumps(summary))
    write_report([root], root, by=["env.name", "t3.enabled"], paired=["final"], within=["env.name"], plots=False)
    text = (root / "report.md").read_text()
    rows = [line for line in text.splitlines() if "| final validation success |" in line]
    # 2 of the 6 pairs of groups share env.name: true − false is +0.1 on x and +0.3 on y, on both seeds
    assert [r.split(" | ")[:5] for r in rows] == [
        ["| env.name=x, t3.enabled=false", "env.name=x, t3.enabled=true", "final validation success", "2", "+0.100"],
        ["| env.name=y, t3.enabled=false", "env.name=y, t3.enabled=true", "final validation success", "2", "+0.300"],
    ]
    assert "For every pair of groups with the same `env.name`, each metric's" in text
    assert check_result_set(root) == ""
    # without --within the cross-task pairs come back: a stale report by --check's regeneration
    write_report([root], root, by=["env.name", "t3.enabled"], paired=["final"], plots=False)
    assert len([line for line in (root / "report.md").read_text().splitlines() if "| final validation" in line]) == 6
    # a key the report is not grouped by is bad input
    assert main([str(root), "--out", str(tmp_path / "o"), "--by", "t3.enabled", "--within", "env.name"]) == 2
    assert "--within env.name: not a grouping key (grouped by t3.enabled)" in capsys.readouterr().err


def test_paired_diagnostic_change_by_hand(tmp_path):
    # 10 iterations, 20%: early = iterations 1-2, late = 9-10. arm a: MI 3 -> 1 (change -2) on every seed;
    # arm b: MI 3 -> 3 (change 0) -> b − a = +2; late MI 1 vs 3 -> +2
    for arm, late in (("a", 1.0), ("b", 3.0)):
        for seed in range(3):
            run = tmp_path / "set" / "runs" / f"{arm}{seed}"
            run.mkdir(parents=True)
            # reasoning length: a 12 -> 10 tokens, b 12 -> 12 -> length change b − a = +2
            history = [
                {
                    "iteration": i,
                    "collapse/trajectory/mi_zscore": 3.0 if i <= 2 else late + 0.1 * seed,
                    "collapse/trajectory/reasoning_length": 12.0 if i <= 2 else 9.0 + late,
                }
                for i in range(1, 11)
            ]
            summary = {
                "config": {"seed": seed, "arm": arm},
                "val_start": {"success": 0.5},
                "val_end": {"success": 0.5},
                "history": history,
                "iterations": 10,
            }
            (run / "summary.json").write_text(json.dumps(summary))
    folder = tmp_path / "set"
    write_report([folder], folder, paired=["mi_change", "mi_late", "length_change"], plots=False)
    lines = (folder / "report.md").read_text().splitlines()
    change = next(line for line in lines if "| MI z-score change, late − early | 3 |" in line)
    assert "| 3 | +2.000 | [+2.000, +2.000] |" in change and "| 3 / 0 |" in change
    late = next(line for line in lines if "| MI z-score, last 20% of iterations | 3 |" in line)
    assert "| 3 | +2.000 |" in late
    length = next(line for line in lines if "| reasoning length change, late − early | 3 |" in line)
    assert "| 3 | +2.0 | [+2.0, +2.0] |" in length
    over_training = next(line for line in lines if line.startswith("| reasoning length (tokens) | arm=a |"))
    assert "| 3 | 12.000 ± 0.000 | 10.000 ± 0.000 | -2.000 |" in over_training
    assert check_result_set(folder) == ""


def test_help_prints_every_paired_metric(capsys):
    # argparse %-formats help strings: a metric described with "20%" once crashed --help
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "mi_late (MI z-score, last 20% of iterations)" in " ".join(out.split())
