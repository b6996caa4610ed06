"""Every shipped preset runs one training iteration at its default batch shape.

A preset that crashes only at the default P x G (e.g. DAPO's refill asking for more or fewer
groups than P) is still a crash, so these runs keep ``trainer.prompts_per_iter`` and
``trainer.group_size`` at their defaults (16 x 4), the default rollout length and the MI
diagnostic on; only the validation set, the warm start, the model width and (env presets) the
tiny tokenizer's training corpus are small.
The presets are read from ``configs/``, so a new preset file is covered without editing this test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import SMALL
from hydra import compose, initialize_config_dir

from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.loop import Trainer

pytestmark = pytest.mark.slow

ONE_STEP_WARM_START = ["sft.episodes=1", "sft.steps=1", "sft.batch_size=1"]
#: demonstrations the env presets' tiny tokenizers are trained on (the trainer's default is 300: minutes
#: of oracle play for the T3 tasks, and the corpus size does not change the batch shape under test)
TOKENIZER_EPISODES = 20


def env_tiny_model(cfg, cache_dir: str) -> str:
    """The tiny model ``model=tiny`` builds for ``cfg``'s env (its tokenizer trained on that env's text),
    from :data:`TOKENIZER_EPISODES` demonstrations."""
    from ragen_torchrl.envs import make_env
    from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model
    from ragen_torchrl.trainer.demonstrations import tokenizer_corpus
    from ragen_torchrl.trainer.model_setup import env_kwargs

    m = cfg.model
    sizes = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads")
    env = make_env(cfg.env.name, num_envs=1, **env_kwargs(cfg.env))
    corpus = tokenizer_corpus(env, num_episodes=TOKENIZER_EPISODES)
    return build_tiny_model(corpus, TinyModelConfig(**{k: m[k] for k in sizes}), cache_dir)


def presets(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


CASES = (
    [pytest.param("algo", name, id=f"algo={name}") for name in presets("algo")]
    + [pytest.param("filter", name, id=f"filter={name}") for name in presets("filter")]
    + [pytest.param("env", name, id=f"env={name}") for name in presets("env")]
)


def test_preset_lists_are_not_empty():
    for group in ("algo", "filter", "env"):
        assert len(presets(group)) >= 2, group


@pytest.mark.parametrize("group,name", CASES)
def test_preset_runs_one_iteration_at_default_shape(group, name, ragen_cache_dir, tmp_path):
    # the warm start is one step on one demonstration: every env's demonstrations still go through
    # it, at a small fraction of SMALL's two steps of 16 (the default batch is what this test is about)
    overrides = [f"{group}={name}", f"model.cache_dir={ragen_cache_dir}", *SMALL, *ONE_STEP_WARM_START]
    if group == "env" and "malformed:" in (Path(CONFIG_DIR) / "env" / f"{name}.yaml").read_text():
        # T3 tasks: an untrained policy's replies are malformed, and the default (the reference's
        # "Try again.") plays every row to the full turn budget: minutes per preset at 16 x 4. Ending
        # the episode keeps the default batch shape at seconds; the retry path has its own tests.
        overrides.append("env.malformed=end")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    if group == "env":
        cfg.model.name_or_path = env_tiny_model(cfg, ragen_cache_dir)
    torch.manual_seed(0)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    # the default batch shape, not a tiny one
    assert (trainer.prompts_per_iter, trainer.group_size) == (16, 4)
    stats = trainer.train_iteration()
    assert stats["rollout/num_trajectories"] == 64.0
    # explained variance is undefined (NaN) when every return of the batch is equal, as an
    # untrained policy's all-failure batch is; every other metric must be a number
    nans = [
        k for k, v in stats.items() if k.startswith(("rollout/", "train/")) and v != v and "explained_variance" not in k
    ]
    assert not nans, nans  # no NaN
    if not stats.get("filter/skipped_update") and not stats.get("dapo/skipped_update"):
        assert stats["train/optimizer_steps"] >= 1
