"""A warm start whose demonstrated replies do not fit ``rollout.max_new_tokens`` is refused before it trains.

With another tokenizer the same demonstration can need twice the tokens (SmolLM2's bandit replies are
56-62 tokens, over the default 48): every rollout reply would be cut before its end token and fail the
reply format, so RL would start from zero valid replies.
"""

from __future__ import annotations

import pytest
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir

from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.sft import check_replies_fit, reply_lengths


def test_reply_lengths_count_each_run_of_trained_tokens():
    mask = torch.tensor([1, 1, 0, 0, 1, 0, 1, 1, 1, 1], dtype=torch.bool)
    assert reply_lengths([(torch.zeros(10), mask), (torch.zeros(2), torch.zeros(2, dtype=torch.bool))]) == [2, 1, 4]


def test_a_reply_of_exactly_the_budget_fits_and_one_token_more_is_reported():
    assert check_replies_fit([48, 48, 10], 48) is None
    warning = check_replies_fit([49, 48, 10], 48)
    assert warning.startswith("1 of 3 demonstrated replies (33%)") and "rollout.max_new_tokens=49 or more" in warning
    with pytest.raises(ConfigError, match=r"2 of 3 .*longest 60 tokens"):
        check_replies_fit([49, 60, 10], 48)
    assert check_replies_fit([], 48) is None and check_replies_fit([100], None) is None


def test_the_trainer_refuses_a_warm_start_that_the_rollouts_cannot_finish(tmp_path):
    from ragen_torchrl.trainer.loop import Trainer

    cache = tmp_path / "cache"
    overrides = [
        *TINY_RUN,
        "env=bandit",
        f"model.cache_dir={cache}",
        "rollout.max_new_tokens=8",
        "sft.reply_budget=error",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with pytest.raises(
        ConfigError, match=r"4 of 4 demonstrated replies \(100%\) are longer than rollout\.max_new_tokens=8"
    ):
        Trainer(cfg, run_dir=tmp_path / "run")
    assert not list(cache.glob("sft-*/config.json"))  # nothing was trained or cached


def test_warn_is_the_default_and_trains_anyway(tmp_path, caplog):
    from ragen_torchrl.trainer.loop import Trainer

    cache = tmp_path / "cache"
    overrides = [o for o in TINY_RUN if not o.startswith("sft.reply_budget")]
    overrides += ["env=bandit", f"model.cache_dir={cache}", "rollout.max_new_tokens=8"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with caplog.at_level("WARNING"):
        Trainer(cfg, run_dir=tmp_path / "run")
    assert "4 of 4 demonstrated replies (100%)" in caplog.text
    assert len(list(cache.glob("sft-*/config.json"))) == 1


def test_the_budget_switch_is_not_part_of_the_warm_start_cache_key():
    from omegaconf import OmegaConf

    from ragen_torchrl.trainer.model_setup import warm_start_settings

    cfg = OmegaConf.create({"seed": 0, "sft": {"enabled": True, "steps": 5, "seed": 0, "reply_budget": "warn"}})
    assert warm_start_settings(cfg) == {"steps": 5, "seed": 0}


def test_the_smollm2_preset_refuses_replies_it_cannot_finish():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        assert compose("config", overrides=["model=smollm2"]).sft.reply_budget == "error"
        assert compose("config", overrides=[]).sft.reply_budget == "warn"
