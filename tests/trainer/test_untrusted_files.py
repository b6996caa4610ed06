"""Files from elsewhere cannot run code or read the environment.

A checkpoint whose pickle carries a payload (an object whose ``__reduce__`` writes a marker
file) is refused by every entry point that reads one, with the payload never run: ``ragen-eval``
on the file, on a run dir and on a symlink to it, ``ragen-train trainer.resume=RUN_DIR``;
``ragen-report`` never unpickles at all. Stored configs are read as written: ``${oc.env:...}``
is refused without being resolved, a list or ``val_levels=1e12`` exits 2 naming the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from test_cli import run_cli

from ragen_torchrl.reporting.cli import main as report_main
from ragen_torchrl.trainer.checkpoint import (
    NoCheckpointError,
    UnsafeCheckpointError,
    load_latest,
    read_checkpoint,
    restore_rng_state,
    rng_state,
    save_rotating,
)
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.evaluate import main as eval_main
from ragen_torchrl.trainer.summary import SUMMARY_KEYS

CONFIG = {
    "seed": 0,
    "env": {"name": "frozenlake"},
    "trainer": {"val_levels": 2, "val_temperature": 0.5, "total_iterations": 1},
    "rollout": {"max_new_tokens": 8, "chunk_size": 8},
    "model": {"device": "cpu", "dtype": "float32"},
}


class Payload:
    """Unpickling this runs code: it creates the file ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def evil_checkpoint(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"iteration": 0, "model": {}, "optimizer": {}, "rng": {}, "config": CONFIG, "extra": Payload(marker)}
    torch.save(state, path)
    return path


def evil_run(root: Path, marker: Path) -> Path:
    """A run dir without summary.json whose newest checkpoint carries the payload."""
    run = root / "run"
    evil_checkpoint(run / "checkpoints" / "last.pt", marker)
    return run


def one_error_line(err: str, prefix: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    assert "Traceback" not in err
    return lines[0]


def test_our_checkpoints_hold_only_plain_types_and_load_weights_only(tmp_path):
    state = {"iteration": 3, "model": {"w": torch.ones(2)}, "optimizer": {}, "rng": rng_state(), "config": CONFIG}
    state["history"] = [{"rollout/success": np.float64(0.5)}]  # a NumPy scalar from a metric
    path = save_rotating(state, tmp_path)
    assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []  # main: numpy's _reconstruct etc.
    loaded = read_checkpoint(path)
    assert loaded["history"] == [{"rollout/success": 0.5}] and type(loaded["history"][0]["rollout/success"]) is float
    restore_rng_state(loaded["rng"])


def test_read_checkpoint_refuses_a_payload_without_running_it(tmp_path):
    marker = tmp_path / "PWNED"
    path = evil_checkpoint(tmp_path / "ckpt" / "last.pt", marker)
    with pytest.raises(
        UnsafeCheckpointError, match=r"refused checkpoint .*last.pt: it holds exec \(a global that would run on load\)"
    ):
        read_checkpoint(path)
    assert not marker.exists()
    # never a silent fallback to prev.pt: a tampered run dir is a config error (exit 2)
    torch.save({"iteration": 0, "model": {}, "optimizer": {}, "rng": {}}, tmp_path / "ckpt" / "prev.pt")
    with pytest.raises(NoCheckpointError, match="refused checkpoint"):
        load_latest(tmp_path / "ckpt")
    assert not marker.exists()


def test_ragen_eval_refuses_a_payload_in_a_checkpoint_file_a_run_dir_and_a_symlink(tmp_path, capsys):
    marker = tmp_path / "PWNED"
    run = evil_run(tmp_path, marker)
    link = tmp_path / "link"
    link.symlink_to(run, target_is_directory=True)
    for target in (run / "checkpoints" / "last.pt", run, link):
        assert eval_main([str(target)]) == 2, target
        line = one_error_line(capsys.readouterr().err, "ragen-eval: error: ")
        assert "refused checkpoint" in line and "last.pt" in line, line
        assert not marker.exists(), target


def test_ragen_report_never_unpickles_a_checkpoint(tmp_path, capsys):
    from torch.utils.tensorboard import SummaryWriter

    marker = tmp_path / "PWNED"
    run = evil_run(tmp_path, marker)
    writer = SummaryWriter(log_dir=str(run / "tb"))
    writer.add_scalar("val/success", 0.5, 0)
    writer.add_scalar("timing/update", 1.0, 1)
    writer.close()
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("seed: 0\nmodel:\n  cache_dir: ${oc.env:RAGEN_TEST_SECRET}\n")
    os.environ["RAGEN_TEST_SECRET"] = "s3cr3t-value"
    try:
        code = report_main([str(run), "--out", str(tmp_path / "report")])
    finally:
        del os.environ["RAGEN_TEST_SECRET"]
    out = capsys.readouterr()
    assert code in (0, 1), out.err  # 1: no matplotlib for the plots; the table is written either way
    assert not marker.exists()
    assert "s3cr3t-value" not in out.out + out.err + (tmp_path / "report" / "report.md").read_text()


def test_ragen_train_resume_refuses_a_payload_and_exits_2(tmp_path):
    marker = tmp_path / "PWNED"
    run = evil_run(tmp_path, marker)
    proc = run_cli(
        "ragen-train", "model.device=cpu", f"trainer.resume={run}", f"hydra.run.dir={tmp_path / 'new'}", cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("config error: ")]
    assert len(errors) == 1 and "refused checkpoint" in errors[0] and "Traceback" not in proc.stderr
    assert not marker.exists()


# --------------------------------------------------------------------------- stored configs
def write_summary_run(root: Path, config) -> Path:
    run = root / "run"
    (run / "policy").mkdir(parents=True)
    (run / "policy" / "config.json").write_text("{}")
    summary = {k: None for k in SUMMARY_KEYS} | {"config": config, "history": []}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_ragen_eval_refuses_an_interpolation_without_resolving_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAGEN_TEST_SECRET", "s3cr3t-value")
    config = json.loads(json.dumps(CONFIG))
    config["env"]["name"] = "${oc.env:RAGEN_TEST_SECRET}"
    torch.save({"iteration": 0, "model": {}, "optimizer": {}, "rng": {}, "config": config}, tmp_path / "c.pt")
    run = write_summary_run(tmp_path, config)
    for target in (tmp_path / "c.pt", run):
        assert eval_main([str(target)]) == 2
        line = one_error_line(capsys.readouterr().err, "ragen-eval: error: ")
        assert "env.name holds an interpolation" in line, line  # main: "env=s3cr3t-value: ..."
        assert "s3cr3t-value" not in line


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ([1, 2], "the stored config is a list, not a mapping"),
        ({**CONFIG, "trainer": {**CONFIG["trainer"], "val_levels": 1e12}}, "trainer.val_levels must be an integer"),
        ({**CONFIG, "trainer": {**CONFIG["trainer"], "val_levels": "many"}}, "trainer.val_levels must be an integer"),
    ],
)
def test_ragen_eval_malformed_stored_config_exits_2(tmp_path, capsys, config, message):
    run = write_summary_run(tmp_path, config)
    assert eval_main([str(run)]) == 2
    line = one_error_line(capsys.readouterr().err, "ragen-eval: error: ")
    assert message in line, line
    if isinstance(config, list):
        assert str(run / "summary.json") in line


def test_resume_with_a_list_as_stored_config_is_a_config_error(tmp_path):
    from test_trainer import make_cfg

    from ragen_torchrl.trainer.loop import Trainer
    from ragen_torchrl.trainer.stored_config import check_stored_config

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"iteration": 0, "model": {}, "optimizer": {}, "rng": {}, "config": [1, 2]}, run / "checkpoints/last.pt")
    cfg = make_cfg(str(tmp_path / "cache"), f"trainer.resume={run}")
    with pytest.raises(ConfigError, match=r"last.pt: the stored config is a list"):  # main: AttributeError
        Trainer(cfg, run_dir=tmp_path / "ignored")
    with pytest.raises(ConfigError, match=r"x.yaml: a.b\[1\] holds an interpolation"):
        check_stored_config({"a": {"b": ["ok", "${oc.env:HOME}"]}}, "x.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"config": [1, 2], "history": []}', "its config is a list, not a mapping"),  # main: TypeError traceback
        ('{"config": ' + "[" * 100_000 + "]" * 100_000 + "}", "unreadable summary"),  # main: RecursionError
    ],
    ids=["config_list", "deep_nesting"],
)
def test_ragen_report_malformed_summary_exits_2_naming_the_file(tmp_path, capsys, text, message):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(text)
    assert report_main([str(run), "--out", str(tmp_path / "report")]) == 2
    line = one_error_line(capsys.readouterr().err, "ragen-report: error: ")
    assert f"{run / 'summary.json'}: {message}" in line, line
