"""Vision-language policies through the trainer: ``model=hf`` with a local Qwen2.5-VL checkpoint, ``model=tiny_vl``.

* a tiny RANDOM Qwen2.5-VL-architecture checkpoint (``Qwen2_5_VLConfig`` +
  ``Qwen2_5_VLForConditionalGeneration``, our trained tokenizer with Qwen2-VL's special tokens and
  Qwen2-VL's image processor, saved with ``save_pretrained``) is detected as vision-language from its
  ``config.json``, warm-starts on demonstrations with their board images and trains for 2 iterations
  through ``model=hf model.name_or_path=DIR env=frozenlake_visual``; the weights change, the MI
  diagnostics are skipped with a warning, and the exported policy loads again with its image processor;
* the oracle demonstrations of a visual env come with one image per user message, the env's render
  of the state that message shows, and the warm-start batch lays them out as the rollouts do;
* ``model=tiny_vl`` is a config the checks accept (its vision sizes are known keys).
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from PIL import Image

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.visual import IMAGE_TEXT
from ragen_torchrl.models.tiny import train_tokenizer
from ragen_torchrl.models.tiny_vl import VL_SPECIAL_TOKENS, tiny_image_processor
from ragen_torchrl.models.vision import is_vision_language, load_policy
from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.demonstrations import make_demonstrations, tokenizer_corpus
from ragen_torchrl.trainer.evaluate import main as eval_main
from ragen_torchrl.trainer.loop import Trainer

pytestmark = pytest.mark.slow

RUN = [
    *TINY_RUN,
    "env=frozenlake_visual",
    "env.size=3",
    "env.max_turn=2",
    "trainer.total_iterations=2",
    "trainer.prompts_per_iter=2",
    "trainer.group_size=2",
    "trainer.val_levels=2",
    "trainer.val_every=0",
    "trainer.log_text_samples=0",
    "rollout.max_new_tokens=6",
    "diagnostics.mi.every=1",
]


def save_random_qwen2_5_vl(path, env) -> None:
    """A tiny random Qwen2.5-VL checkpoint: our trained tokenizer (+ Qwen2-VL's special tokens), Qwen2-VL's
    image processor, ``save_pretrained`` (safetensors)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok = train_tokenizer(tokenizer_corpus(env, num_episodes=20), 300)
    tok.add_special_tokens({"additional_special_tokens": VL_SPECIAL_TOKENS})
    ids = {t: tok.convert_tokens_to_ids(t) for t in VL_SPECIAL_TOKENS}
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            bos_token_id=None,
        ),
        vision_config=dict(
            depth=1,
            hidden_size=16,
            intermediate_size=32,
            num_heads=2,
            out_hidden_size=32,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=56,
            fullatt_block_indexes=[0],
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(path)
    tok.save_pretrained(path)  # the text chat template: the loader swaps in the vision-language one
    tiny_image_processor(64).save_pretrained(path)


def test_random_qwen2_5_vl_checkpoint_trains_two_iterations_through_model_hf(ragen_cache_dir, tmp_path):
    ckpt = tmp_path / "qwen2_5_vl"
    save_random_qwen2_5_vl(ckpt, make_env("frozenlake_visual", num_envs=1, size=3))
    assert is_vision_language(ckpt)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "model=hf",
                f"model.name_or_path={ckpt}",
                f"model.cache_dir={ragen_cache_dir}",
                *[o for o in RUN if not o.startswith(("model.hidden", "model.inter", "model.num", "model.vocab"))],
            ],
        )
    validate_config(cfg)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    assert trainer.collapse is not None and trainer.collapse.processor is trainer.processor
    assert type(trainer.model).__name__ == "Qwen2_5_VLForConditionalGeneration" and trainer.processor is not None
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    summary = trainer.fit()
    assert summary["iterations"] == 2 and trainer.iteration == 2
    # the MI proxies scored the reasonings against contexts that hold their images
    assert all(any(k.startswith("collapse/") for k in row) for row in trainer.history), trainer.history[0].keys()
    assert summary["val_end"]["num_trajectories"] == 2.0
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("model.visual"))
    exported = tmp_path / "run" / "policy"
    assert (exported / "preprocessor_config.json").is_file()
    model, _, processor = load_policy(str(exported), "cpu", "float32")
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration" and processor is not None
    # ragen-eval rolls the run's vision-language policy out on the env's images and dumps an episode
    dump, result = tmp_path / "episode.gif", tmp_path / "eval.json"
    argv = [str(tmp_path / "run"), "--levels", "2", "--dump", str(dump), "--json", str(result), "--no-progress"]
    assert eval_main(argv) == 0
    assert json.loads(result.read_text())["stats"]["num_trajectories"] == 2.0
    with Image.open(dump) as gif:
        assert gif.n_frames >= 2  # the start board and one frame per turn


def test_visual_demonstrations_carry_the_board_of_each_user_message():
    env = make_env("frozenlake_visual", num_envs=1, size=3, tile_px=4)
    shown: list = []
    demos = make_demonstrations(env, 5, noise=0.0, seed=3, images=shown)
    assert demos == make_demonstrations(env, 5, noise=0.0, seed=3)  # the same episodes as without images
    for chat, images in zip(demos, shown):
        assert len(images) == sum(m["role"] == "user" for m in chat)
        assert all(m["content"].endswith(IMAGE_TEXT) for m in chat if m["role"] == "user")
    # the first image is the start board of the first demonstration's level
    game = env.game_factory(*_first_level(seed=3))
    assert torch.equal(shown[0][0], env.render(game))
    with pytest.raises(ValueError, match="renders no board images"):
        make_demonstrations(make_env("frozenlake", num_envs=1), 1, images=[])


def _first_level(seed: int) -> tuple[int, int]:
    import random

    from ragen_torchrl.envs.text_env import sample_seed

    level = (1 << 31) + random.Random(seed).randrange(1 << 30)
    return level, sample_seed(level, 0)


def test_tiny_vl_preset_passes_the_config_checks():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["env=frozenlake_visual", "model=tiny_vl", "model.device=cpu"])
        bad = compose("config", overrides=["env=frozenlake_visual", "model=tiny_vl", "model.vision_depth=0"])
    validate_config(cfg)
    with pytest.raises(Exception, match="model.vision_depth"):
        validate_config(bad)
