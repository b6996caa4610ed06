"""``ragen-eval``, the run's ``summary.json`` and its final ``policy/`` export."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir

from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.eval_cli import main as eval_main
from ragen_torchrl.trainer.loop import Trainer
from ragen_torchrl.trainer.summary import OPTIONAL_KEYS, SUMMARY_KEYS, read_summary, write_summary

# tests/test_presets.py's SMALL overrides (a seconds-long trainer=smoke run), with 4 validation levels
SMALL = [
    "trainer=smoke",
    "trainer.total_iterations=1",
    "trainer.val_levels=4",
    "trainer.log_text_samples=0",
    *TINY_RUN,
    "rollout.max_new_tokens=16",
    "diagnostics.mi.enabled=false",
]
#: validation stats that must match exactly (``seconds`` is wall time)
STAT_KEYS = ("success", "success_stderr", "reward_mean", "reward_std", "turns", "tokens", "format_valid")


def make_cfg(cache_dir: str, *extra: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=[f"model.cache_dir={cache_dir}", *SMALL, *extra])


@pytest.fixture(scope="module")
def smoke_run(ragen_cache_dir, tmp_path_factory) -> tuple[Path, dict]:
    """A finished trainer=smoke run: its dir and what fit() returned."""
    run_dir = tmp_path_factory.mktemp("eval") / "run"
    torch.manual_seed(0)
    summary = Trainer(make_cfg(ragen_cache_dir), run_dir=run_dir).fit()
    return run_dir, summary


def stats_of(path: Path) -> dict:
    return json.loads(path.read_text())["stats"]


# --------------------------------------------------------------------------- summary helper
def test_summary_nan_and_inf_round_trip_as_null(tmp_path):
    path = write_summary(
        tmp_path / "summary.json",
        config={"seed": 0, "algo": {"lr": 1e-3}},
        val_start={"success": float("nan")},
        val_end={"success": 0.25, "tokens": float("inf")},
        history=[{"iteration": 1, "train/loss": float("nan"), "train/grad_norm": torch.tensor(2.0)}],
        seconds=3.5,
        iterations=1,
        stop_reason=None,
        run_dir=tmp_path,
        final_policy=None,
    )
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text)  # strict JSON
    s = read_summary(tmp_path)  # a run dir is accepted too
    assert tuple(s) == SUMMARY_KEYS  # the optional keys only when given
    assert s["val_start"] == {"success": None}
    assert s["val_end"] == {"success": 0.25, "tokens": None}
    assert s["history"] == [{"iteration": 1, "train/loss": None, "train/grad_norm": 2.0}]
    assert s["run_dir"] == str(tmp_path) and s["iterations"] == 1 and s["seconds"] == 3.5
    assert not list(tmp_path.glob("*.tmp"))  # the temp file was renamed away


def test_read_summary_refuses_other_json(tmp_path):
    (tmp_path / "summary.json").write_text('{"config": {}}')
    with pytest.raises(ValueError, match="not a run summary"):
        read_summary(tmp_path / "summary.json")


# --------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_smoke_run_writes_summary_and_a_loadable_policy(smoke_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir, returned = smoke_run
    s = read_summary(run_dir / "summary.json")
    assert tuple(s) == SUMMARY_KEYS + OPTIONAL_KEYS  # a run writes its provenance, phases and totals
    assert s["config"]["trainer"]["val_levels"] == 4 and s["config"]["seed"] == 0
    assert s["iterations"] == 1 and s["stop_reason"] is None and s["run_dir"] == str(run_dir)
    assert s["final_policy"] == str(run_dir / "policy")
    assert s["val_start"]["num_trajectories"] == 4.0 and s["val_end"]["num_trajectories"] == 4.0
    assert [h["iteration"] for h in s["history"]] == [1]
    first = s["history"][0]
    assert "rollout/success" in first and "train/loss" in first and "timing/total" in first
    assert first["val/success"] == s["val_end"]["success"]  # the final validation is logged at the last step
    assert all(v is None or isinstance(v, (int, float)) for v in first.values())
    assert returned["val_end"] == s["val_end"] and s["seconds"] > 0

    model = AutoModelForCausalLM.from_pretrained(run_dir / "policy")
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "policy")
    assert "{% generation %}" in tokenizer.chat_template  # the chat template travels with the export
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.slow
def test_policy_dir_trains_as_model_name_or_path(smoke_run, ragen_cache_dir, tmp_path):
    run_dir, _ = smoke_run
    cfg = make_cfg(ragen_cache_dir, f"model.name_or_path={run_dir / 'policy'}", "sft.enabled=false")
    trainer = Trainer(cfg, run_dir=tmp_path / "again")
    assert trainer.model_path == str(run_dir / "policy")
    summary = trainer.fit()
    assert summary["iterations"] == 1 and trainer.history[-1]["train/optimizer_steps"] >= 1
    # it starts where the first run ended: same weights, same validation levels and seed
    assert summary["val_start"] == {**read_summary(run_dir)["val_end"], "seconds": summary["val_start"]["seconds"]}


@pytest.mark.slow
def test_an_early_stop_still_writes_the_summary_and_policy(ragen_cache_dir, tmp_path):
    # every validation below 100% is "low"; patience 1: the start validation already stops the run
    cfg = make_cfg(
        ragen_cache_dir,
        "trainer.total_iterations=3",
        "trainer.early_stop.val_stop.threshold=1.0",
        "trainer.early_stop.val_stop.patience=1",
    )
    Trainer(cfg, run_dir=tmp_path / "stopped").fit()
    s = read_summary(tmp_path / "stopped")
    assert s["stop_reason"] and "validation" in s["stop_reason"]
    assert len(s["history"]) == 1 and s["val_end"] is not None
    assert (tmp_path / "stopped" / "policy" / "config.json").is_file() and s["final_policy"]


@pytest.mark.slow
def test_ragen_eval_run_dir_reproduces_the_final_validation_exactly(smoke_run, capsys):
    run_dir, _ = smoke_run
    val_end = read_summary(run_dir)["val_end"]
    assert eval_main([str(run_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    got = stats_of(run_dir / "eval.json")  # the default JSON path of a run dir
    print("val_end:", {k: val_end[k] for k in STAT_KEYS}, "\nragen-eval:", {k: got[k] for k in STAT_KEYS})
    assert {k: got[k] for k in STAT_KEYS} == {k: val_end[k] for k in STAT_KEYS}
    assert got["num_trajectories"] == 4.0
    assert f"success {val_end['success']:.3f} ± {val_end['success_stderr']:.3f}" in out

    # the checkpoint holds the same final weights and config
    ckpt_json = run_dir / "ckpt_eval.json"
    assert eval_main([str(run_dir / "checkpoints" / "last.pt"), "--json", str(ckpt_json), "--no-progress"]) == 0
    assert {k: stats_of(ckpt_json)[k] for k in STAT_KEYS} == {k: val_end[k] for k in STAT_KEYS}

    # the match is not a coincidence: another seed samples other replies
    other = run_dir / "seed1.json"
    assert eval_main([str(run_dir), "--seed", "1", "--json", str(other), "--no-progress"]) == 0
    assert stats_of(other)["tokens"] != val_end["tokens"]


@pytest.mark.slow
def test_ragen_eval_model_dir_with_env_levels_and_export(smoke_run, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    run_dir, _ = smoke_run
    export = tmp_path / "exported"
    argv = [str(run_dir / "policy"), "--env", "frozenlake", "--levels", "4", "--temperature", "0"]
    assert eval_main([*argv, "--export", str(export), "--no-progress"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{") : out.rindex("}") + 1])  # no --json: the JSON goes to stdout
    assert result["kind"] == "model" and result["env"] == "frozenlake" and result["levels"] == 4
    stats = result["stats"]
    assert stats["num_trajectories"] == 4.0 and 0.0 <= stats["success"] <= 1.0
    assert math.isfinite(stats["tokens"]) and stats["turns"] >= 1
    assert AutoModelForCausalLM.from_pretrained(export) is not None
    # greedy decoding of the exported copy gives the same numbers
    again = tmp_path / "again.json"
    assert eval_main([str(export), *argv[1:], "--json", str(again), "--no-progress"]) == 0
    assert {k: stats_of(again)[k] for k in STAT_KEYS} == {k: stats[k] for k in STAT_KEYS}


# --------------------------------------------------------------------------- bad input: exit 2, one line
def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    model_like = tmp / "model_like"
    model_like.mkdir()
    (model_like / "config.json").write_text("{}")
    (tmp / "empty").mkdir()
    (tmp / "broken.pt").write_bytes(b"PK\x03\x04 cut short")
    (tmp / "run" / "checkpoints").mkdir(parents=True)
    config = {
        "seed": 0,
        "env": {"name": "frozenlake"},
        "trainer": {"val_levels": 2, "val_temperature": 0.5},
        "rollout": {"max_new_tokens": 8, "chunk_size": 8},
        "model": {"device": "cpu", "dtype": "float32"},
    }
    state = {"iteration": 0, "model": {}, "optimizer": {}, "rng": {}, "config": config}
    torch.save({**state, "model_path": str(tmp / "gone")}, tmp / "orphan.pt")
    return [
        ([str(tmp / "missing")], "no such file or directory"),
        ([str(tmp / "empty")], "not a run dir"),
        ([str(model_like), "--env", "no_such_env"], "unknown env preset 'no_such_env'"),
        ([str(model_like)], "cannot load the model"),
        ([str(tmp / "broken.pt")], "not a training checkpoint"),
        ([str(tmp / "run")], "no config found"),
        ([str(model_like), "-o", "no.such.key=1"], "no such config key"),
        ([str(model_like), "no.such.key=1"], "no such config key"),
        ([str(model_like), "seed=0,1"], "one value per key"),
        ([str(model_like), "~seed"], "it deletes none"),
        ([str(model_like), "algo=ppo"], "only env=NAME picks a preset"),
        ([str(model_like), "env=no_such_env"], "unknown env preset 'no_such_env'"),
        ([str(model_like), "--which", "best"], "--which best needs a run dir"),
        ([str(tmp / "run"), "--which", "best"], "no config found"),
        ([str(model_like), "--config-dir", str(tmp / "missing")], "--config-dir"),
        ([str(tmp / "orphan.pt")], "cannot load the checkpoint's starting model"),
        ([str(model_like), "--levels", "0"], "--levels must be >= 1"),
    ]


def test_ragen_eval_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    for argv, message in _bad_inputs(tmp_path):
        assert eval_main(argv) == 2, argv
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("ragen-eval: error: ")]
        assert len(lines) == 1 and message in lines[0], (argv, err)
        assert "Traceback" not in err


def test_a_stored_config_is_merged_onto_the_schema_once(tmp_path):
    """A run's stored config (here one with a few keys) is merged onto the schema: every key it lacks
    reads its schema default."""
    from ragen_torchrl.trainer.eval_cli import _set, _typed, resolve_target
    from ragen_torchrl.trainer.policy_eval import EvalError

    config = {"seed": 3, "env": {"name": "frozenlake"}, "rollout": {"max_new_tokens": 8}}
    state = {"iteration": 0, "model": {}, "optimizer": {}, "rng": {}, "config": config, "model_path": "x"}
    torch.save(state, tmp_path / "last.pt")
    cfg = resolve_target(tmp_path / "last.pt")["config"]
    assert cfg.seed == 3 and cfg.rollout.max_new_tokens == 8
    assert (cfg.rollout.chunk_size, cfg.rollout.kv_cache, cfg.rollout.kv_cache_max_tokens) == (128, True, 262144)
    assert (cfg.rollout.trajectory, cfg.rollout.prime_think, cfg.model.device, cfg.model.threads) == (
        "tokens",
        True,
        "auto",
        2,
    )
    with pytest.raises(EvalError, match=r"no.such.key=...: no such config key"):
        _set(cfg, "no.such.key", 1)
    # an override is checked like the run's own values when the config is typed again
    with pytest.raises(EvalError, match=r"^rollout.kv_cache must be true or false, got 'maybe'$"):
        _typed({"rollout": {"kv_cache": "maybe"}})


@pytest.mark.slow
def test_keep_best_policy_reproduces_the_peak_validation_exactly(ragen_cache_dir, tmp_path, capsys):
    """``trainer.keep_best=true``: ``policy_best/`` and ``checkpoints/best.pt`` are the policy of the validation
    that set the peak (here an intermediate one), and ``ragen-eval RUN --which best`` plays that validation's
    numbers again, exactly; ``--which last`` (the default) still evaluates the final policy."""
    run_dir = tmp_path / "run"
    torch.manual_seed(0)
    overrides = ["trainer.total_iterations=4", "trainer.val_every_levels=null", "trainer.keep_best=true"]
    summary = Trainer(make_cfg(ragen_cache_dir, *overrides, "algo.lr=5e-2"), run_dir=run_dir).fit()
    peak = summary["val_peak"]
    vals = {h["iteration"]: h["val/success"] for h in summary["history"] if "val/success" in h}
    print("validation success per iteration:", vals, "peak:", peak)
    assert 0 < peak["iteration"] < 4, "the peak should be an intermediate validation"
    assert peak["success"] == max(vals.values()) and vals[peak["iteration"]] == peak["success"]
    at_peak = next(h for h in summary["history"] if h["iteration"] == peak["iteration"])
    assert (run_dir / "policy_best" / "config.json").is_file()
    best = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)
    assert best["val_peak"] == peak and best["iteration"] == peak["iteration"] - 1

    assert eval_main([str(run_dir), "--which", "best", "--no-progress"]) == 0
    got = stats_of(run_dir / "eval_best.json")
    print(
        "peak validation:",
        {k: at_peak[f"val/{k}"] for k in STAT_KEYS},
        "\n--which best:",
        {k: got[k] for k in STAT_KEYS},
    )
    assert {k: got[k] for k in STAT_KEYS} == {k: at_peak[f"val/{k}"] for k in STAT_KEYS}
    assert json.loads((run_dir / "eval_best.json").read_text())["which"] == "best"

    # with policy_best/ gone, checkpoints/best.pt gives the same numbers
    import shutil

    shutil.rmtree(run_dir / "policy_best")
    assert eval_main([str(run_dir), "--which", "best", "--json", str(tmp_path / "ckpt.json"), "--no-progress"]) == 0
    assert {k: stats_of(tmp_path / "ckpt.json")[k] for k in STAT_KEYS} == {k: got[k] for k in STAT_KEYS}
    assert eval_main([str(run_dir), "--no-progress"]) == 0
    last = stats_of(run_dir / "eval.json")
    assert {k: last[k] for k in STAT_KEYS} == {k: summary["val_end"][k] for k in STAT_KEYS}
    assert last["tokens"] != got["tokens"]  # the peak's policy is not the final one (73 vs 80 tokens here)


@pytest.mark.slow
def test_ragen_eval_takes_bare_overrides_and_the_o_alias_alike(smoke_run, tmp_path, capsys):
    """``ragen-eval RUN key=value`` (Hydra style) sets what ``-o key=value`` set; ``-o`` warns it is deprecated."""
    run_dir, _ = smoke_run
    bare, alias = tmp_path / "bare.json", tmp_path / "alias.json"
    assert eval_main([str(run_dir), "rollout.max_new_tokens=4", "--json", str(bare), "--no-progress"]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert eval_main([str(run_dir), "-o", "rollout.max_new_tokens=4", "--json", str(alias), "--no-progress"]) == 0
    assert "-o/--override is deprecated" in capsys.readouterr().err
    assert json.loads(bare.read_text())["max_new_tokens"] == 4
    assert stats_of(bare) | {"seconds": 0} == stats_of(alias) | {"seconds": 0}


def test_ragen_eval_config_dir_adds_an_env_preset(tmp_path):
    """``--config-dir DIR`` adds DIR's presets to the shipped ones (a shipped preset of the same name still wins);
    ``env=NAME`` picks one as ``--env NAME`` does."""
    from ragen_torchrl.trainer.eval_cli import _env_node, env_presets

    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "frozenlake3.yaml").write_text("defaults:\n  - frozenlake\n  - _self_\nsize: 3\n")
    (tmp_path / "env" / "frozenlake.yaml").write_text("name: frozenlake\nsize: 7\n")
    assert "frozenlake3" in env_presets(str(tmp_path)) and "frozenlake3" not in env_presets()
    node = _env_node("frozenlake3", str(tmp_path))
    assert (node.name, node.size, node.max_turn) == ("frozenlake", 3, 5)
    assert _env_node("frozenlake", str(tmp_path)).size == 4  # the shipped preset of that name
