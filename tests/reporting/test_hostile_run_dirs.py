"""``ragen-report`` on run dirs from elsewhere: malformed summaries, aliases, links out, raw HTML.

Each case exits 2 with one ``ragen-report: error:`` line naming the file (and the field), or is
skipped with a warning; nothing is read from outside the run dir and nothing in a config value
reaches ``report.md`` as Markdown structure or HTML.
"""

from __future__ import annotations

import json
import os
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from ragen_torchrl.reporting.cli import main as report_main

SUMMARY = {
    "config": {"seed": 0, "filter": {"name": "none"}},
    "val_start": {"success": 0.5},
    "val_end": {"success": 0.75},
    "history": [{"iteration": 1, "timing/update": 1.0}],
    "iterations": 1,
}


@contextmanager
def deadline(seconds: float):
    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ragen-report: error: "), err
    assert "Traceback" not in err
    return lines[0]


def run_with(tmp_path: Path, **fields) -> Path:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "summary.json").write_text(json.dumps({**SUMMARY, **fields}))
    return run


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"val_end": "x"}, "val_end"),  # main: ValueError in dict("x")
        ({"val_start": [1, 2]}, "val_start"),  # main: TypeError
        ({"history": [{"iteration": "one", "timing/update": 1.0}]}, "history[0].iteration"),  # main: int("one")
        ({"history": {"iteration": 1}}, "history"),
        ({"seconds": "long", "provenance": {"git": None}}, "seconds"),  # main: float("long")
        ({"provenance": 3}, "provenance"),  # main: AttributeError
        ({"provenance": {"git": {"commit": 7}}}, "provenance.git.commit"),  # main: TypeError on [:12]
        ({"provenance": {"git": None, "load_start": "abc", "load_end": "xyz"}}, "provenance.load_start"),
        ({"provenance": {"git": None}, "phases": {"total": 5}}, "phases.total"),  # main: AttributeError
        ({"provenance": {"git": None}, "phases": {"total": {"cpu": "lots"}}}, "phases.total.cpu"),
        ({"iterations": "ten"}, "iterations"),
    ],
)
def test_a_malformed_summary_field_exits_2_naming_it(tmp_path, capsys, fields, field):
    run = run_with(tmp_path, **fields)
    assert report_main([str(run), "--out", str(tmp_path / "out")]) == 2
    line = one_error(capsys)
    assert f"{run / 'summary.json'}: field '{field}'" in line, line


def test_a_directory_named_like_an_event_file_is_skipped(tmp_path, capsys, caplog):
    run = run_with(tmp_path)
    (run / "tb" / "events.out.tfevents.123.host.1").mkdir(parents=True)  # main: IsADirectoryError traceback
    assert report_main([str(run), "--out", str(tmp_path / "out")]) == 0
    assert "not a file; skipped" in caplog.text
    lonely = tmp_path / "tb_only"
    (lonely / "tb" / "events.out.tfevents.1.h.2").mkdir(parents=True)
    assert report_main([str(lonely), "--out", str(tmp_path / "out2")]) == 2  # no readable events: not a run
    one_error(capsys)


def test_a_hydra_config_symlinked_outside_the_run_dir_is_never_read(tmp_path, capsys):
    secret = tmp_path / "secret.yaml"
    secret.write_text("password: hunter2-do-not-print\n")
    run = tmp_path / "runs" / "r"
    (run / ".hydra").mkdir(parents=True)
    os.symlink(secret, run / ".hydra" / "config.yaml")  # absolute, to a file on the reader's machine
    (run / "tb").mkdir()
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(run / "tb")) as w:
        w.add_scalar("val/success", 0.5, 0)
    out = tmp_path / "out"
    assert report_main([str(run), "--out", str(out)]) == 2
    line = one_error(capsys)
    assert "a symlink leading outside" in line and "hunter2" not in line
    assert not (out / "report.md").exists() or "hunter2" not in (out / "report.md").read_text()


def test_a_summary_symlinked_outside_the_run_dir_is_refused(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(SUMMARY))
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(elsewhere, run / "summary.json")
    assert report_main([str(run), "--out", str(tmp_path / "out")]) == 2
    assert "a symlink leading outside" in one_error(capsys)


def test_yaml_aliases_in_a_hydra_config_are_refused(tmp_path, capsys):
    # 10^6 leaves when expanded (main: expanded and flattened into the report; 10 levels exhaust memory)
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join(['*a' + str(i - 1)] * 10)}]" for i in range(1, 6)]
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n" + "\n".join(lines) + "\n")
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(run / "tb")) as w:
        w.add_scalar("val/success", 0.5, 0)
    with deadline(60):
        assert report_main([str(run), "--out", str(tmp_path / "out")]) == 2
    line = one_error(capsys)
    assert f"{run / '.hydra' / 'config.yaml'}, line 3: a YAML alias (*name) is refused" in line, line


def test_config_values_reach_report_md_as_inert_text(tmp_path):
    hostile = "x\n# Fake heading\n<script>alert(1)</script><img src=x onerror=alert(2)> [a](javascript:alert(3))"
    root = tmp_path / "runs"
    for i, name in enumerate(["none", hostile]):
        run = root / f"r{i}"
        run.mkdir(parents=True)
        summary = {**SUMMARY, "config": {"seed": 0, "filter": {"name": name}},
                   "provenance": {"git": {"commit": "`<b>x</b>"}, "versions": {"torch<i>": "2\n# v"}}}  # fmt: skip
        (run / "summary.json").write_text(json.dumps(summary))
    out = tmp_path / "out"
    assert report_main([str(root / "r0"), str(root / "r1"), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "<script" not in text and "<img" not in text and "<b>" not in text and "<i>" not in text  # main: raw HTML
    assert not any(line.startswith(("# Fake", "# v")) for line in text.splitlines())  # main: a fake heading
    assert "\\[a\\](javascript:alert(3))" in text  # no link
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text  # shown, as text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    header_cells = table[0].count(" | ")
    assert all(line.count(" | ") - line.count("\\|") >= 1 for line in table[:3])
    assert header_cells > 1


def test_report_md_and_plots_are_not_written_through_planted_links(tmp_path):
    pytest.importorskip("matplotlib")
    run = run_with(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "report.md")
    os.symlink(victim, out / "val_success.png")
    assert report_main([str(run), "--out", str(out)]) == 0
    assert victim.read_text() == "precious"  # main: report.md (and the plot) written into the victim
    assert not (out / "report.md").is_symlink() and (out / "report.md").read_text().startswith("# Run report")
