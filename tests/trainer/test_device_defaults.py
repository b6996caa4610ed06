"""The settings tuned on a CPU only (``rollout.sampler``, ``rollout.attention``) default per device.

``ragen-train --cfg job model.device=cuda`` prints them as Hydra composes them (``--resolve``: the values
a CUDA run gets), with no GPU needed; ``model.device=auto`` follows ``torch.cuda.is_available()``; the
hf rollout policy built without a setting picks by its model's device.
"""

from __future__ import annotations

import sys

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from ragen_torchrl.rollout_options import per_device
from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_paths import CONFIG_DIR


def _cfg_job(monkeypatch, capsys, *args: str) -> dict[str, str]:
    """``ragen-train --cfg job ARGS`` in this process: the printed rollout keys ``sampler`` and ``attention``."""
    from ragen_torchrl.trainer.cli import train_main

    monkeypatch.setattr(sys, "argv", ["ragen-train", "--cfg", "job", *args])
    try:
        train_main()  # Hydra prints the config and returns
    except SystemExit as e:
        assert e.code in (0, None)
    finally:
        GlobalHydra.instance().clear()
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    return dict(line.split(": ", 1) for line in lines if line.startswith(("sampler: ", "attention: ")))


def test_cfg_job_shows_the_defaults_per_device(monkeypatch, capsys):
    assert _cfg_job(monkeypatch, capsys, "--resolve", "model.device=cuda") == {
        "sampler": "multinomial",
        "attention": "sdpa",
    }
    assert _cfg_job(monkeypatch, capsys, "--resolve", "model.device=cpu") == {
        "sampler": "inverse_cdf",
        "attention": "cascade",
    }
    # unresolved, the config shows the rule: the CPU value first, the accelerator's second
    assert _cfg_job(monkeypatch, capsys, "model.device=cuda") == {
        "sampler": "${per_device:${model.device},inverse_cdf,multinomial}",
        "attention": "${per_device:${model.device},cascade,sdpa}",
    }
    # the command line still wins
    chosen = _cfg_job(monkeypatch, capsys, "--resolve", "model.device=cuda", "rollout.sampler=inverse_cdf")
    assert chosen["sampler"] == "inverse_cdf"
    # the spelling, the flag after the overrides (the app's job-name overrides must not follow it)
    assert _cfg_job(monkeypatch, capsys, "model.device=cuda", "--resolve") == {
        "sampler": "multinomial",
        "attention": "sdpa",
    }


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("cuda", [True, False])
def test_auto_device_follows_cuda_availability(monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    cfg = _compose("model.device=auto")
    expected = ("multinomial", "sdpa") if cuda else ("inverse_cdf", "cascade")
    assert (cfg.rollout.sampler, cfg.rollout.attention) == expected
    assert per_device("auto", "cpu value", "cuda value") == ("cuda value" if cuda else "cpu value")
    assert per_device("cuda:1", 1, 2) == 2 and per_device("cpu", 1, 2) == 1


def test_a_bad_attention_is_a_config_error_naming_the_key(tmp_path):
    cfg = _compose("rollout.attention=flash", "sft.enabled=false", f"model.cache_dir={tmp_path}")
    with pytest.raises(ConfigError, match="rollout.attention"):
        validate_config(cfg)
    # on this CPU the composed defaults validate and resolve to the CPU's values
    typed = validate_config(_compose("model.device=cpu", "sft.enabled=false", f"model.cache_dir={tmp_path}"))
    assert (typed.rollout.sampler, typed.rollout.attention) == ("inverse_cdf", "cascade")


def test_the_hf_policy_picks_by_its_models_device_unless_told(tiny_model):
    from ragen_torchrl.collectors import make_generation_policy

    model, tokenizer = tiny_model
    policy = make_generation_policy(model, tokenizer, max_new_tokens=4)
    assert (policy.sampler, policy.turn_cache.sampler, policy.turn_cache.cascade) == ("inverse_cdf",) * 2 + (True,)
    policy = make_generation_policy(model, tokenizer, max_new_tokens=4, sampler="multinomial", attention="sdpa")
    assert (policy.sampler, policy.turn_cache.cascade) == ("multinomial", False)
    with pytest.raises(ValueError, match="rollout.attention must be one of cascade, sdpa"):
        make_generation_policy(model, tokenizer, max_new_tokens=4, attention="flash")


@pytest.mark.parametrize("attention", ["sdpa", "cascade"])
def test_the_trainer_passes_rollout_attention_to_its_rollout_policy(ragen_cache_dir, tmp_path, attention):
    from helpers import SMALL

    from ragen_torchrl.trainer.loop import Trainer

    cfg = _compose(*SMALL, f"model.cache_dir={ragen_cache_dir}", "model.device=cpu", f"rollout.attention={attention}")
    trainer = Trainer(cfg, run_dir=str(tmp_path / "run"))
    # rollout.attention=sdpa on a CPU turns the CPU default (cascade) off, and cascade keeps it
    assert trainer.policy.turn_cache.cascade is (attention == "cascade")
