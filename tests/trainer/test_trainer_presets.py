"""Shipped trainer/model presets and validation scheduling.

* Periodic validation is the default (RAGEN-2's reference validates every 10 iterations), every
  validation feeds the sustained-low-validation-success stop, and the peak validation success
  (the paper's table metric) is recorded with its iteration.
* ``trainer=paper model=qwen2.5-3b`` is the paper's setting; ``trainer.dry_run=true`` sizes it on
  the meta device without touching the hub.
* ``trainer=smoke`` keeps every env's warm start small.
"""

from __future__ import annotations

import glob
import os

import pytest
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import ragen_torchrl.trainer.loop as loop_mod
from ragen_torchrl.envs import make_env
from ragen_torchrl.trainer.cli import _train
from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.demonstrations import make_demonstrations
from ragen_torchrl.trainer.iteration import IterationOutcome
from ragen_torchrl.trainer.loop import Trainer
from ragen_torchrl.trainer.model_setup import env_kwargs, training_memory
from ragen_torchrl.trainer.run_log import ValidationPeak
from ragen_torchrl.trainer.summary import read_summary


def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


def presets(group: str) -> list[str]:
    return sorted(os.path.basename(p)[: -len(".yaml")] for p in glob.glob(os.path.join(CONFIG_DIR, group, "*.yaml")))


# ------------------------------------------------------------------------ validation scheduling
@pytest.mark.parametrize("preset", [f"trainer={t}" for t in presets("trainer")] + [f"env={e}" for e in presets("env")])
def test_every_preset_validates_periodically(preset):
    # with val_every 0 the low-validation stop only ever saw the first validation
    assert compose_cfg(preset).trainer.val_every > 0


@pytest.mark.parametrize("experiment", presets("experiment"))
def test_experiment_presets_validate_periodically(experiment):
    trainer = compose_cfg(f"+experiment={experiment}").trainer
    # a diagnostics-only experiment shorter than the collapse stop's warm-up (smollm2_mi_fit: 1 iteration,
    # visual_mi: 5) validates at its start and end only: no stop is meant to end it early
    short = trainer.total_iterations <= trainer.early_stop.collapse_stop.warmup
    assert trainer.val_every > 0 or short


def test_default_run_validates_every_10_iterations_on_128_levels_start_and_end_on_512():
    t = compose_cfg().trainer
    assert (t.val_every, t.val_every_levels, t.val_levels) == (10, 128, 512)


def test_validation_peak_keeps_the_first_maximum_and_survives_a_checkpoint():
    peak = ValidationPeak(levels=128)
    assert peak.as_dict() is None
    for it, s in [(0, 0.9), (10, 0.4), (20, 0.4), (30, float("nan")), (40, 0.2)]:
        peak.update(it, {"success": s, "success_stderr": 0.05}, levels=128)
    assert peak.as_dict() == {"success": 0.4, "stderr": 0.05, "iteration": 10, "levels": 128}
    again = ValidationPeak(levels=128)
    again.load_state_dict(peak.state_dict())
    assert again.as_dict() == peak.as_dict()
    # a stored peak that cannot set it under this run's level set (the start, or fewer levels) is dropped
    for stored in ({**peak.as_dict(), "iteration": 0}, {**peak.as_dict(), "levels": 32}):
        again.load_state_dict(stored)
        assert again.as_dict() is None


def _scripted_trainer(cache_dir, tmp_path, monkeypatch, successes, *overrides):
    """A trainer whose iterations do nothing and whose validations return ``successes`` in order."""
    calls = []

    def fake_evaluate(env, policy, num_levels, *, seed, chunk_size=128, progress=True, desc="", frames=None):
        s = successes[len(calls)]
        calls.append(num_levels)
        assert env.batch_size[0] == num_levels  # an env with exactly the levels played
        stats = {"success": s, "success_stderr": 0.01, "reward_mean": s, "format_valid": 1.0}
        return {**stats, "num_trajectories": float(num_levels), "seconds": 0.0}, None

    def no_training(self):
        stats = {"rollout/reward_mean": 0.0, "rollout/success": 0.0, "rollout/tokens": 0.0, "timing/total": 0.0}
        return IterationOutcome(stats, stop=None)

    monkeypatch.setattr(loop_mod, "evaluate_policy", fake_evaluate)
    monkeypatch.setattr(Trainer, "run_iteration", no_training)
    cfg = compose_cfg(
        f"model.cache_dir={cache_dir}",
        *TINY_RUN,
        "trainer.log_text_samples=0",
        "trainer.save_every=0",
        "diagnostics.mi.enabled=false",
        *overrides,
    )
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    logged = []
    log_scalar = trainer.logger.log_scalar
    monkeypatch.setattr(
        trainer.logger, "log_scalar", lambda k, v, step: (logged.append((k, step, v)), log_scalar(k, v, step=step))
    )
    return trainer, calls, logged


@pytest.mark.slow
def test_default_schedule_stops_on_sustained_low_validation_success(ragen_cache_dir, tmp_path, monkeypatch):
    # the default preset (val_every 10, filter.val_stop: below 1% for 5 validations): every validation
    # reads 0; the one before training is not counted (as the reference), so the fifth low one is at
    # iteration 50
    trainer, calls, _ = _scripted_trainer(
        ragen_cache_dir, tmp_path, monkeypatch, [0.0] * 7, "trainer.val_levels=16", "trainer.val_every_levels=4"
    )
    summary = trainer.fit()
    assert trainer.stop_reason == "validation_success: below 0.01 for 5 consecutive validations"
    assert [h["iteration"] for h in trainer.history][-1] == 50 and len(trainer.history) == 50
    assert calls == [16, 4, 4, 4, 4, 4, 16]  # start and end on all levels, periodic ones on the first 4
    # the periodic validations play 4 of the 16 levels: only the final one can set the peak
    assert summary["val_peak"] == {"success": 0.0, "stderr": 0.01, "iteration": 50, "levels": 16}


@pytest.mark.slow
def test_scripted_validations_stop_and_peak(ragen_cache_dir, tmp_path, monkeypatch, capsys):
    # val_every 2, patience 3, threshold 0.01: validations at iterations 0, 2, 4, 6, 8, 10 read
    # 0.7, 0.0, 0.6, 0.0, 0.0, 0.0 -> low counts (iteration 0 not counted) 1, 0, 1, 2, 3: the stop fires
    # at iteration 10; the end validation (0.1) does not feed the stop; the peak is 0.6 at iteration 4
    # (the start's 0.7 is before training)
    successes = [0.7, 0.0, 0.6, 0.0, 0.0, 0.0, 0.1]
    trainer, calls, logged = _scripted_trainer(
        ragen_cache_dir,
        tmp_path,
        monkeypatch,
        successes,
        "trainer.total_iterations=20",
        "trainer.val_every=2",
        "trainer.val_levels=8",
        "trainer.val_every_levels=null",
        "trainer.early_stop.val_stop.patience=3",
    )
    summary = trainer.fit()
    assert trainer.stop_reason == "validation_success: below 0.01 for 3 consecutive validations"
    assert len(trainer.history) == 10 and calls == [8] * 7
    peak = {"success": 0.6, "stderr": 0.01, "iteration": 4, "levels": 8}
    assert summary["val_peak"] == peak and read_summary(trainer.run_dir)["val_peak"] == peak
    # TensorBoard: the running peak after each validation
    assert [(step, v) for k, step, v in logged if k == "val/peak_success"] == [
        (2, 0.0),
        (4, 0.6),
        (6, 0.6),
        (8, 0.6),
        (10, 0.6),
        (10, 0.6),
    ]
    assert trainer.checkpoint_state()["val_peak"] == peak  # a resumed run continues this peak
    assert capsys.readouterr().out.rstrip().endswith("peak 0.600 ± 0.010 at iteration 4")


@pytest.mark.slow
def test_summary_and_report_agree_on_the_peak(ragen_cache_dir, tmp_path, monkeypatch):
    # 0.60 before training (8 levels), 0.90 on the 4-level periodic validation at 10, 0.58 at the end (8 levels):
    # summary.json, val/peak_success and ragen-report all give 0.58 at iteration 20
    from ragen_torchrl.reporting.run_metrics import peak_success
    from ragen_torchrl.reporting.runs import load_run

    trainer, calls, logged = _scripted_trainer(
        ragen_cache_dir,
        tmp_path,
        monkeypatch,
        [0.60, 0.90, 0.58],
        "trainer.total_iterations=20",
        "trainer.val_every=10",
        "trainer.val_levels=8",
        "trainer.val_every_levels=4",
    )
    summary = trainer.fit()
    assert calls == [8, 4, 8]
    assert summary["val_peak"] == {"success": 0.58, "stderr": 0.01, "iteration": 20, "levels": 8}
    assert [(step, v) for k, step, v in logged if k == "val/peak_success"] == [(20, 0.58)]
    assert peak_success(load_run(trainer.run_dir)) == (20, 0.58)


# ------------------------------------------------------------------------------ trainer=paper
PAPER = ["trainer=paper", "model=qwen2.5-3b"]


@pytest.mark.parametrize("algo", presets("algo"))
def test_paper_preset_is_the_papers_setting_and_validates_offline(algo, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never touch the hub
    cfg = compose_cfg(*PAPER, f"algo={algo}", "trainer.dry_run=true")
    validate_config(cfg)
    t = cfg.trainer
    assert (t.prompts_per_iter, t.group_size, t.total_iterations) == (8, 16, 400)
    assert (t.val_every, t.val_levels, t.val_every_levels, t.val_temperature) == (10, 512, None, 0.5)
    assert (cfg.algo.mini_batch_size, cfg.rollout.temperature, cfg.rollout.max_new_tokens) == (32, 1.0, 400)
    assert cfg.sft.enabled is False  # the paper trains the instruct model itself
    assert (cfg.model.name_or_path, cfg.model.dtype) == ("Qwen/Qwen2.5-3B-Instruct", "bfloat16")


def test_paper_dry_run_counts_qwen25_3b_on_the_meta_device(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose_cfg(*PAPER, "trainer.dry_run=true")
    mem = training_memory(cfg)
    # embeddings 151936 x 2048 (tied) + 36 layers x (q 2048^2 + 2048, k and v 2048 x 256 + 256,
    # o 2048^2, MLP 3 x 2048 x 11008, 2 norms x 2048) + final norm 2048
    layer = (2048 * 2048 + 2048) + 2 * (2048 * 256 + 256) + 2048 * 2048 + 3 * 2048 * 11008 + 2 * 2048
    params = 151936 * 2048 + 36 * layer + 2048
    assert mem["parameters"] == params == 3_085_938_688
    assert mem["dtype"] == "bfloat16"
    assert mem["source"] in ("model.architecture", "Qwen/Qwen2.5-3B-Instruct (Hugging Face cache)")
    # model.precision=mixed: bf16 weights (2 bytes), fp32 master weights, gradients and AdamW's two moments (16)
    state = ("weights", "master", "gradients", "optimizer")
    assert sum(mem[k] for k in state) == 18 * params and mem["reference"] == mem["critic"] == 0
    _train(cfg)  # ragen-train trainer=paper model=qwen2.5-3b trainer.dry_run=true
    out = capsys.readouterr().out
    assert "parameters: 3,085,938,688 (3.09 B), bfloat16" in out and "22.99 GiB" in out  # the AdamW moments
    for row in ("weights", "master weights", "gradients", "AdamW moments", "activations", "logits", "KV cache"):
        assert f"\n  {row} " in out, row


def test_dry_run_reads_a_local_config_dir_and_counts_the_critic(tmp_path, monkeypatch):
    from transformers import AutoConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    arch = dict(compose_cfg(*PAPER).model.architecture)
    AutoConfig.for_model(arch.pop("model_type"), **{**arch, "num_hidden_layers": 2}).save_pretrained(tmp_path)
    cfg = compose_cfg(*PAPER, "algo=ppo", "trainer.dry_run=true", f"model.name_or_path={tmp_path}", "model.dtype=fp32")
    validate_config(cfg)
    mem = training_memory(cfg)
    layer = (2048 * 2048 + 2048) + 2 * (2048 * 256 + 256) + 2048 * 2048 + 3 * 2048 * 11008 + 2 * 2048
    assert mem["parameters"] == 151936 * 2048 + 2 * layer + 2048 and mem["source"].endswith("config.json")
    # fp32: weights, grads, 2 AdamW states (16 bytes per parameter), no master copy, the separate critic as much again
    state = ("weights", "master", "gradients", "optimizer", "critic")
    assert sum(mem[k] for k in state) == 2 * 16 * mem["parameters"] and mem["master"] == 0


# ------------------------------------------------------------------------------ trainer=smoke
#: bound on sft.steps x sft.batch_size x bytes per demonstration (a byte-level BPE token is at
#: least one byte, so bytes bound the tokens): 1.4 x the default FrozenLake warm start
#: (500 x 16 x ~900 bytes, minutes on a laptop CPU); env=searchqa's 500 x 16 x ~1900 was an hour
SMOKE_SFT_BYTES = 10_000_000


@pytest.mark.parametrize("env", presets("env"))
def test_smoke_warm_start_fits_every_env(env, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path))  # searchqa / webshop index caches
    cfg = compose_cfg("trainer=smoke", f"env={env}")
    game = make_env(cfg.env.name, num_envs=1, **env_kwargs(cfg.env))
    demos = make_demonstrations(game, 4, noise=float(cfg.sft.noise), seed=0)
    per_example = sum(len(m["content"].encode()) for chat in demos for m in chat) / len(demos)
    budget = cfg.sft.steps * cfg.sft.batch_size * per_example
    assert budget <= SMOKE_SFT_BYTES, OmegaConf.to_container(cfg.sft)
