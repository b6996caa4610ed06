"""Run dirs, checkpoints and model dirs from elsewhere cannot write outside, hang, or reach the hub;
a run dir is never silently shared.

Each test builds one hostile input: symlinks planted where the CLIs write their temp files, a
checkpoint whose config shares one sub-dict under many keys, checkpoints with ``rng: {}``,
``iteration: "two"`` or weights of the wrong shape, a chat template with a 10^10-step loop, a
checkpoint naming a hub id, a ``hydra.run.dir`` that holds a finished run, two processes on one
run dir, a sampling temperature that overflows ``logits / T``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ragen_torchrl.trainer.checkpoint import (
    InvalidCheckpointError,
    check_checkpoint_state,
    rng_state,
    save_rotating,
    write_synced,
)
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.eval_cli import main as eval_main
from ragen_torchrl.trainer.eval_cli import resolve_target
from ragen_torchrl.trainer.policy_eval import EvalError, export_policy
from ragen_torchrl.trainer.run_dir import RunDirInUseError, check_new_run_dir, lock_run_dir
from ragen_torchrl.trainer.run_log import write_scalars_csv
from ragen_torchrl.trainer.summary import write_json_atomic, write_summary

CONFIG = {
    "seed": 0,
    "env": {"name": "frozenlake"},
    "trainer": {"val_levels": 1, "val_temperature": 0.5, "total_iterations": 1},
    "rollout": {"max_new_tokens": 4, "chunk_size": 4},
    "model": {"device": "cpu", "dtype": "float32", "threads": 1},
}


@contextmanager
def deadline(seconds: float):
    """Turn a hang into a failure: ``TimeoutError`` in the main thread after ``seconds``."""

    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def plant_links(directory: Path, name: str, victim: Path) -> None:
    """Symlinks to ``victim`` at every temp name the old writers used (``.<name>.<pid>.tmp``, ``-tmp``)."""
    directory.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    for link in (f".{name}.{pid}.tmp", f".{name}.tmp-{pid}"):
        os.symlink(victim, directory / link)


# ------------------------------------------------------------------------------------ E1: writes
@pytest.mark.parametrize("name", ["eval.json", "summary.json", "scalars.csv"])
def test_the_json_and_csv_writers_never_write_through_a_planted_symlink(tmp_path, name):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    plant_links(run, name, victim)
    if name == "eval.json":
        write_json_atomic(run / name, {"stats": {"success": 1.0}})
    elif name == "summary.json":
        write_summary(
            run / name, config={}, val_start=None, val_end=None, history=[], seconds=0.0, iterations=0,
            stop_reason=None, run_dir=run, final_policy=None,
        )  # fmt: skip
    else:
        write_scalars_csv(run / name, {1: {"train/loss": 0.5}})
    assert victim.read_text() == "precious"  # main: the victim is replaced by the JSON / CSV
    assert (run / name).is_file() and not (run / name).is_symlink()
    assert json.loads((run / name).read_text()) if name.endswith(".json") else (run / name).read_text()


def test_ragen_eval_json_into_a_run_dir_with_planted_links_leaves_the_victim(tmp_path):
    """``ragen-eval RUN_DIR`` writes ``<run>/eval.json`` through :func:`write_json_atomic`; one link per
    possible pid: whichever pid the writer has, no temp name leads to the victim."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    for pid in range(max(1, os.getpid() - 50), os.getpid() + 50):
        os.symlink(victim, run / f".eval.json.{pid}.tmp")
    write_json_atomic(run / "eval.json", {"ok": True})
    assert victim.read_text() == "precious"


def test_a_planted_checkpoint_temp_link_is_not_written_through(tmp_path):
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"precious")
    ckpt = tmp_path / "run" / "checkpoints"
    ckpt.mkdir(parents=True)
    os.symlink(victim, ckpt / "last.tmp")
    save_rotating({"iteration": 0, "model": {}, "optimizer": {}, "rng": {}}, ckpt)
    assert victim.read_bytes() == b"precious"  # main: torch.save wrote the checkpoint into the victim
    assert (ckpt / "last.pt").is_file() and not (ckpt / "last.pt").is_symlink()
    write_synced({"x": 1}, ckpt / "other.tmp")
    assert torch.load(ckpt / "other.tmp", weights_only=True) == {"x": 1}


class _FakeModel:
    """``save_pretrained`` as transformers' writes a model dir: files into the given folder."""

    def save_pretrained(self, path, **_):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "config.json").write_text("{}")
        return [str(Path(path) / "config.json")]


def test_export_never_writes_into_a_planted_temp_dir_link(tmp_path):
    victim = tmp_path / "victim_dir"
    victim.mkdir()
    out = tmp_path / "exports"
    plant_links(out, "policy", victim)
    export_policy(_FakeModel(), _FakeModel(), out / "policy")
    assert list(victim.iterdir()) == []  # main: the model's files went into the victim dir
    assert (out / "policy" / "config.json").is_file()
    with pytest.raises(EvalError, match="a symlink"):
        os.symlink(victim, out / "linked")
        export_policy(_FakeModel(), _FakeModel(), out / "linked")


# ------------------------------------------------------------------------ C1: shared sub-dicts
def _laughs(levels: int) -> dict:
    node: dict = {"x": 1}
    for _ in range(levels):
        node = {"a": node, "b": node}
    return node


def test_a_checkpoint_config_that_walks_as_a_million_paths_is_refused(tmp_path):
    # 2^20 paths in 20 dicts: main walks (and then OmegaConf-copies) every one of them
    state = {**_valid_state(), "config": {**CONFIG, "bomb": _laughs(20)}}
    torch.save(state, tmp_path / "last.pt")
    with deadline(20), pytest.raises(EvalError, match=r"last.pt: the stored config: more than 100000 nodes"):
        resolve_target(tmp_path / "last.pt")


def test_a_resume_with_such_a_config_exits_before_any_work(tmp_path, monkeypatch):
    from test_trainer import make_cfg

    from ragen_torchrl.trainer import loop

    run = tmp_path / "run"
    torch.save({**_valid_state(), "config": {"bomb": _laughs(20)}}, _ckpt(run))
    monkeypatch.setattr(loop, "load_policy", _no_model)
    with deadline(20), pytest.raises(ConfigError, match="more than 100000 nodes"):
        loop.Trainer(make_cfg(str(tmp_path / "cache"), f"trainer.resume={run}"), run_dir=tmp_path / "x")


# ------------------------------------------------------------------------ T1: checkpoint contents
def _valid_state() -> dict:
    return {"iteration": 0, "model": {"w": torch.zeros(2)}, "optimizer": {}, "rng": rng_state(), "config": CONFIG}


def _ckpt(run: Path) -> Path:
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    return run / "checkpoints" / "last.pt"


def _no_model(*_a, **_k):
    raise AssertionError("a model was loaded before the checkpoint was checked")


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"rng": {}}, "rng.python"),
        ({"iteration": "two"}, "iteration"),
        ({"iteration": -1}, "iteration"),
        ({"rng": {**rng_state(), "torch": torch.zeros(3)}}, "rng.torch"),
        ({"rng": {**rng_state(), "numpy": {"bit_generator": "MT19937"}}}, "rng.numpy"),
        ({"model": {"w": "weights"}}, "model.w"),
        ({"optimizer": {"state": [], "param_groups": []}}, "optimizer.state"),
        ({"refills": "3"}, "refills"),
    ],
)
def test_checkpoint_contents_of_the_wrong_type_name_the_file_and_field(tmp_path, bad, field):
    with pytest.raises(InvalidCheckpointError, match=rf"invalid checkpoint .*last.pt: field '{field}'"):
        check_checkpoint_state({**_valid_state(), **bad}, tmp_path / "last.pt")


@pytest.mark.parametrize("bad", [{"rng": {}}, {"iteration": "two"}], ids=["rng", "iteration"])
def test_resume_of_a_checkpoint_with_bad_contents_is_a_config_error_before_any_model(tmp_path, monkeypatch, bad):
    """main: the warm start and the model are built, then restore_rng_state / int() raise (exit 1)."""
    from test_trainer import make_cfg

    from ragen_torchrl.trainer import loop

    run = tmp_path / "run"
    torch.save(_valid_state(), _ckpt(run))
    cfg = make_cfg(str(tmp_path / "cache"), f"trainer.resume={run}")
    stored = OmegaConf.to_container(loop.validate_config(cfg), resolve=True)
    torch.save({**_valid_state(), "config": stored, **bad}, _ckpt(run))
    monkeypatch.setattr(loop, "load_policy", _no_model)
    monkeypatch.setattr(loop.Trainer, "_prepare_model", _no_model)
    with pytest.raises(InvalidCheckpointError, match=rf"last.pt: field '{next(iter(bad))}"):
        loop.Trainer(cfg, run_dir=tmp_path / "x")


def test_resume_with_weights_of_the_wrong_shape_names_the_tensor(ragen_cache_dir, tmp_path):
    from test_trainer import make_cfg

    from ragen_torchrl.trainer.loop import Trainer

    run = tmp_path / "run"
    first = Trainer(make_cfg(ragen_cache_dir, "trainer.total_iterations=0"), run_dir=run)
    state = first.checkpoint_state()
    name = next(k for k, v in state["model"].items() if v.dim() == 2)
    state["model"] = {**state["model"], name: torch.zeros(3, 3)}
    save_rotating(state, run / "checkpoints")
    del first
    with pytest.raises(InvalidCheckpointError, match=rf"field 'model.{name}': shape \(3, 3\), the model's is"):
        Trainer(make_cfg(ragen_cache_dir, "trainer.total_iterations=0", f"trainer.resume={run}"), run_dir=run)


# ------------------------------------------------------------------------ N1: no hub for a file's name
def test_ragen_eval_never_looks_up_a_checkpoint_model_path_on_the_hub(tmp_path, capsys, monkeypatch):
    from ragen_torchrl.trainer import eval_cli

    calls = []
    monkeypatch.setattr(eval_cli, "load_policy", lambda *a, **k: calls.append(a) or _no_model())
    torch.save({**_valid_state(), "model_path": "some-org/some-model"}, tmp_path / "last.pt")
    assert eval_main([str(tmp_path / "last.pt"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "never looked up on the hub" in err and "--base-model" in err, err
    assert calls == []  # main: load_policy("some-org/some-model") contacts the hub


def test_ragen_eval_base_model_named_on_the_command_line_is_used(tmp_path, capsys, monkeypatch):
    from ragen_torchrl.model_source import ModelSourceError
    from ragen_torchrl.trainer import eval_cli

    calls = []

    def fake_load(name, *a, **k):
        calls.append(name)
        raise ModelSourceError(f"{name}: not reachable here")

    monkeypatch.setattr(eval_cli, "load_policy", fake_load)
    torch.save({**_valid_state(), "model_path": "some-org/some-model"}, tmp_path / "last.pt")
    assert eval_main([str(tmp_path / "last.pt"), "--base-model", "my-org/base", "--no-progress"]) == 2
    assert calls == ["my-org/base"]
    assert "cannot load the checkpoint's starting model" in capsys.readouterr().err


# ------------------------------------------------------------------------ M2: chat template steps
def _tiny_model_dir(root: Path, template: str) -> Path:
    from helpers import TINY_SIZES

    from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model

    built = Path(build_tiny_model(["go right", "go left", "<answer>Right</answer>"] * 4,
                                  TinyModelConfig(**TINY_SIZES), cache_dir=root))  # fmt: skip
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(built)
    return built


def test_ragen_eval_refuses_a_chat_template_that_never_finishes(tmp_path, capsys, monkeypatch):
    from ragen_torchrl.models import template_guard

    monkeypatch.setattr(template_guard, "PROBE_TIMEOUT", 0.5)
    loop10 = "{% for i in range(99999) %}{% for j in range(99999) %}.{% endfor %}{% endfor %}"
    model = _tiny_model_dir(tmp_path, loop10)
    with deadline(60):  # main: renders 10^10 steps at the first rollout
        code = eval_main([str(model), "--levels", "1", "--no-progress", "-o", "model.device=cpu"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "did not finish rendering a 1-turn probe conversation within 0.5 s" in err, err


def test_a_normal_chat_template_passes_the_probe(tmp_path):
    from transformers import AutoTokenizer

    from ragen_torchrl.models.template_guard import check_chat_template

    model = _tiny_model_dir(tmp_path, "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}")
    check_chat_template(AutoTokenizer.from_pretrained(model), str(model), timeout=2.0)


# ------------------------------------------------------------------------ H1: run dirs
def test_a_run_dir_holding_a_run_is_refused_unless_resumed(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / ".hydra").mkdir()
    (run / "tb").mkdir()
    check_new_run_dir(run, resume=None)  # logs of a run that never checkpointed: run again from scratch
    (run / "checkpoints" / "prev.pt").write_bytes(b"")
    (run / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"already holds a run \(summary.json, checkpoints/prev.pt\)"):
        check_new_run_dir(run, resume=None)
    check_new_run_dir(run, resume=str(run))
    check_new_run_dir(tmp_path / "fresh", resume=None)


def test_ragen_train_refuses_a_hydra_run_dir_that_holds_another_run(tmp_path):
    from test_cli import run_cli

    run = tmp_path / "finished"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"the other run's")
    (run / "summary.json").write_text('{"config": {}}')
    proc = run_cli("ragen-train", "model.device=cpu", f"hydra.run.dir={run}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]  # main: trains and replaces the checkpoint and summary
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("config error: hydra.run.dir=") and "already holds a run" in lines[-1], proc.stderr
    assert (run / "checkpoints" / "last.pt").read_bytes() == b"the other run's"
    assert not (run / ".hydra").exists()


def test_the_default_run_dir_name_has_microseconds():
    from ragen_torchrl.trainer.config_paths import CONFIG_DIR

    text = (Path(CONFIG_DIR) / "config.yaml").read_text()
    assert "dir: outputs/${now:%Y-%m-%d}/${now:%H-%M-%S-%f}" in text  # main: 1-second resolution


def test_a_second_process_on_a_locked_run_dir_gets_a_config_error(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from ragen_torchrl.trainer.run_dir import lock_run_dir
            lock = lock_run_dir({str(run)!r})
            print("locked", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirInUseError, match=rf"run dir {run} is in use by another process \(pid {holder.pid}\)"):
            lock_run_dir(run)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    lock_run_dir(run).release()  # free once the holder exited


def test_two_resumes_of_one_run_dir_the_second_exits_before_reading(tmp_path, monkeypatch):
    """A resume while another process holds the dir: a config error before the checkpoint is read or
    its temp files are cleaned (main: both run and write the same checkpoints)."""
    from test_trainer import make_cfg

    from ragen_torchrl.trainer import loop

    run = tmp_path / "run"
    torch.save(_valid_state(), _ckpt(run))
    (run / "checkpoints" / "last.tmp").write_bytes(b"the other resume's half-written checkpoint")
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from ragen_torchrl.trainer.run_dir import lock_run_dir as l; x = l({str(run)!r}); "
         "print('locked', flush=True); import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setattr(loop, "load_policy", _no_model)
        with pytest.raises(RunDirInUseError):
            loop.Trainer(make_cfg(str(tmp_path / "cache"), f"trainer.resume={run}"), run_dir=tmp_path / "x")
        assert (run / "checkpoints" / "last.tmp").exists()  # the holder's file was left alone
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


# ------------------------------------------------------------------------ the temperature bound
@pytest.mark.parametrize("key", ["rollout.temperature", "trainer.val_temperature"])
def test_a_temperature_that_overflows_logits_is_a_config_error(tmp_path, key):
    from test_trainer import make_cfg

    from ragen_torchrl.trainer.config import validate_config

    with pytest.raises(ConfigError, match=rf"{key}=1e-40 is below 0.001"):  # main: passes, dies at the first rollout
        validate_config(make_cfg(str(tmp_path), f"{key}=1e-40"))
    validate_config(make_cfg(str(tmp_path), f"{key}=0"))  # greedy


def test_ragen_eval_leaves_the_temp_checkpoint_of_a_run_in_progress(tmp_path):
    run = tmp_path / "run"
    torch.save({**_valid_state(), "model_path": str(tmp_path / "base")}, _ckpt(run))
    (run / "checkpoints" / "last.tmp").write_bytes(b"being written by the training process")
    assert resolve_target(run)["checkpoint"][1] == run / "checkpoints" / "last.pt"
    assert (run / "checkpoints" / "last.tmp").exists()  # main: removed as "stale"


def test_a_checkpoint_symlinked_out_of_the_run_dir_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere.pt"
    torch.save(_valid_state(), elsewhere)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    os.symlink(elsewhere, run / "checkpoints" / "last.pt")
    with pytest.raises(EvalError, match=r"last.pt: a symlink leading outside"):  # main: loaded
        resolve_target(run)


def test_an_exported_dir_has_the_mode_of_a_plain_mkdir(tmp_path):
    export_policy(_FakeModel(), _FakeModel(), tmp_path / "policy")
    (tmp_path / "plain").mkdir()
    assert (tmp_path / "policy").stat().st_mode == (tmp_path / "plain").stat().st_mode
