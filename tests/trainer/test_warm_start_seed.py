"""``sft.seed_from_run``: one warm start per run seed (each its own cache entry), off by default."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ragen_torchrl.envs import make_env
from ragen_torchrl.reporting.run_metrics import swept_keys
from ragen_torchrl.reporting.runs import Run
from ragen_torchrl.trainer import sft
from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.model_setup import env_kwargs, prepare_model, warm_start_settings


def typed_cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return validate_config(compose("config", overrides=[*TINY_RUN, *overrides]))


@pytest.fixture
def warm_start_dir(ragen_cache_dir, monkeypatch):
    """The warm start's cache dir a config asks for (the cache lookup answers "built": nothing is trained)."""
    monkeypatch.setattr(sft, "has_config", lambda path: True)

    def find(*overrides: str) -> str:
        cfg = typed_cfg(f"model.cache_dir={ragen_cache_dir}", *overrides)
        return prepare_model(cfg, make_env(cfg.env.name, num_envs=1, **env_kwargs(cfg.env)))

    return find


def test_by_default_every_run_seed_shares_one_warm_start(warm_start_dir):
    assert warm_start_dir("seed=0") == warm_start_dir("seed=1")
    assert Path(warm_start_dir("seed=0")).name.startswith("sft-")
    assert warm_start_dir("seed=0", "sft.seed=1") != warm_start_dir("seed=0")  # sft.seed itself is in the key


def test_seed_from_run_gives_each_run_seed_its_own_warm_start(warm_start_dir):
    on = "++sft.seed_from_run=true"
    first, second = warm_start_dir("seed=0", on), warm_start_dir("seed=1", on)
    assert first != second
    assert warm_start_dir("seed=1", on) == second  # deterministic: the same key again
    # run seed 0 with the switch is the default warm start (sft.seed 0): its cache entry is shared
    assert first == warm_start_dir("seed=0")
    # the run seed replaces sft.seed: seed 1 with the switch is the warm start of sft.seed=1
    assert second == warm_start_dir("seed=7", "sft.seed=1")


def test_the_switch_stays_out_of_the_cache_key():
    """A warm start cached before the switch existed keeps its key: the settings hashed are the same keys."""
    settings = warm_start_settings(typed_cfg())
    assert set(settings) == {"episodes", "noise", "noise_kind", "reasoning", "steps", "batch_size", "lr", "seed"}
    assert warm_start_settings(typed_cfg("seed=3", "++sft.seed_from_run=true"))["seed"] == 3


def test_runs_of_one_arm_still_group_together_in_a_report():
    """The run's sft.seed stays as configured (the switch swaps it in for the warm start only), so runs of one
    arm differ in ``seed`` alone and a report keeps them in one group."""
    runs = [
        Run(Path(f"r{s}"), OmegaConf.to_container(typed_cfg(f"seed={s}", "++sft.seed_from_run=true"), resolve=True))
        for s in (0, 1)
    ]
    assert swept_keys(runs) == []
