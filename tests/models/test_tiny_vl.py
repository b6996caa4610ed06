"""The tiny vision-language policy (``model=tiny_vl``) and image-conditioned rollouts and scoring.

* the tiny Qwen2-VL builds offline, saves and reloads through ``from_pretrained`` (the reloaded
  model gives the same logits), runs one forward with pixel inputs and one ``generate``;
* its chat template renders image parts as Qwen2-VL's vision block and keeps the reply and its
  end-of-turn token in the assistant mask; the processor expands each image to its token count;
* a cached multi-turn rollout on visual FrozenLake (each image through the vision tower once)
  has the log-probs of one teacher-forced pass over the whole conversation with all its images,
  within 1e-4, and the images change them;
* a GRPO loss on those log-probs has the gradient that central finite differences (float64) give;
* bad sizes raise errors naming the key.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from tensordict import TensorDict

from ragen_torchrl.envs.visual import IMAGE_TEXT, VisualFrozenLakeEnv, image_chat
from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl, tiny_image_processor
from ragen_torchrl.models.vision import VLConversation, VLProcessor, score_conversation
from ragen_torchrl.trainer.config_paths import CONFIG_DIR

SIZES = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
VISION = dict(vision_depth=1, vision_embed_dim=16, vision_num_heads=2, max_image_tokens=64)
CORPUS = [IMAGE_TEXT, "<think>Goal is down right. Right is ice.</think><answer>Right || Down</answer>"] * 20
DESC = ["SFF", "FHF", "FFG"]


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    return build_tiny_vl_model(CORPUS, TinyVLConfig(**SIZES, **VISION), tmp_path_factory.mktemp("vl"))


@pytest.fixture(scope="module")
def vl(vl_dir):
    return load_tiny_vl(vl_dir)


def _board_images(n_turns: int) -> list[torch.Tensor]:
    env = VisualFrozenLakeEnv(desc=DESC)
    game = env.game_factory(0, 0)
    images = [env.render(game)]
    for action in ["Right", "Down", "Right"][: n_turns - 1]:
        game.step(action)
        images.append(env.render(game))
    return images


def test_build_save_reload_forward_and_generate(vl_dir, vl):
    model, processor = vl
    assert build_tiny_vl_model(CORPUS, TinyVLConfig(**SIZES, **VISION), vl_dir.rsplit("/", 1)[0]) == vl_dir
    again, _ = load_tiny_vl(vl_dir)
    image = _board_images(1)[0]
    assert image.shape == (3, 84, 84)
    vision = processor.images([image])
    assert vision["image_grid_thw"].tolist() == [[1, 6, 6]]  # 84 px = 6 patches of 14: 3 x 3 = 9 image tokens
    ids = processor.encode_segment(image_chat([("user", IMAGE_TEXT)]), vision["image_grid_thw"], first=True)
    assert ids.count(model.config.image_token_id) == 9
    input_ids = torch.tensor([ids])
    inputs = dict(
        input_ids=input_ids,
        pixel_values=vision["pixel_values"],
        image_grid_thw=vision["image_grid_thw"],
        mm_token_type_ids=(input_ids == model.config.image_token_id).int(),
    )
    with torch.no_grad():
        logits = model(**inputs).logits
        assert torch.equal(logits, again(**inputs).logits)
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert logits.shape == (1, len(ids), len(processor.tokenizer))
    assert out.shape[1] > len(ids) and torch.equal(out[0, : len(ids)], input_ids[0])


def test_chat_template_renders_images_and_masks_the_reply(vl):
    _, processor = vl
    tok = processor.tokenizer
    chat = image_chat([("system", "rules"), ("user", "look"), ("assistant", "<answer>Left</answer>")])
    text = tok.apply_chat_template(chat, tokenize=False)
    assert text == (
        "<|im_start|>system\nrules<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>look"
        "<|im_end|>\n<|im_start|>assistant\n<answer>Left</answer><|im_end|>\n"
    )
    out = tok.apply_chat_template(chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    trained = [i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tok.decode(trained) == "<answer>Left</answer><|im_end|>"
    # plain string contents render as the text template does
    assert (
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
        == "<|im_start|>user\nhi<|im_end|>\n"
    )


def test_image_processor_keeps_28px_multiples_and_bounds_tokens():
    proc = tiny_image_processor(max_image_tokens=16)
    out = proc(images=[np.full((3, 112, 112), 7, dtype=np.uint8)], return_tensors="pt")
    assert out["image_grid_thw"].tolist() == [[1, 8, 8]]  # 4 x 4 tokens, no resize
    big = proc(images=[np.zeros((3, 280, 280), dtype=np.uint8)], return_tensors="pt")
    assert int(big["image_grid_thw"].prod()) // 4 <= 16


def test_processed_images_are_cached_by_content_and_equal_one_processor_call(vl):
    _, processor = vl
    boards = _board_images(3)
    images = [boards[0], boards[1], boards[0], boards[2], boards[1].clone()]
    direct = processor.image_processor(images=[i.numpy() for i in images], return_tensors="pt")
    cached = VLProcessor(processor.tokenizer, processor.image_processor)
    for _ in range(2):  # the first call fills the cache (3 distinct boards), the second reads it
        out = cached.images(images)
        assert torch.equal(out["pixel_values"], direct["pixel_values"])
        assert torch.equal(out["image_grid_thw"], direct["image_grid_thw"].long())
        assert len(cached._cache) == 3
    # the returned tensors are copies: writing into them leaves the cache intact
    out["pixel_values"].zero_()
    assert torch.equal(cached.images(images)["pixel_values"], direct["pixel_values"])
    # a bound of one board's bytes keeps only the most recent board; 0 keeps none
    one = direct["pixel_values"][: int(direct["image_grid_thw"][0].prod())]
    small = VLProcessor(processor.tokenizer, processor.image_processor, cache_mb=one.numel() * 4 / 2**20)
    assert torch.equal(small.images(images)["pixel_values"], direct["pixel_values"])
    assert len(small._cache) == 1
    off = VLProcessor(processor.tokenizer, processor.image_processor, cache_mb=0)
    assert torch.equal(off.images(images)["pixel_values"], direct["pixel_values"]) and not off._cache
    with pytest.raises(ValueError, match="cache_mb must be >= 0"):
        VLProcessor(processor.tokenizer, processor.image_processor, cache_mb=-1)


def _play(model, processor, n_turns: int, seed: int = 0) -> VLConversation:
    row = VLConversation(model, processor, generator=torch.Generator().manual_seed(seed))
    images = _board_images(n_turns)
    messages = [("system", "Play FrozenLake."), ("user", IMAGE_TEXT)]
    for turn in range(n_turns):
        row.play(messages, [images[turn]], max_new_tokens=6)
        messages = [("user", IMAGE_TEXT)]
    return row


def test_cached_rollout_log_probs_equal_the_teacher_forced_pass(vl):
    model, processor = vl
    row = _play(model, processor, n_turns=3)
    assert row.image_encodings == 3 and len(row.image_grid_thw()) == 3
    mask = row.sampled_mask()
    assert int(mask.sum()) >= 3
    with torch.no_grad():
        scored = score_conversation(model, row.input_ids(), row.pixel_values(), row.image_grid_thw())
    torch.testing.assert_close(scored[mask], row.log_probs()[mask], atol=1e-4, rtol=0)
    # the images are read: other pixels give other log-probs
    with torch.no_grad():
        blank = score_conversation(model, row.input_ids(), torch.zeros_like(row.pixel_values()), row.image_grid_thw())
    assert (blank[mask] - scored[mask]).abs().max() > 1e-4


def test_grpo_loss_gradient_on_image_inputs_matches_finite_differences(vl_dir):
    model, processor = load_tiny_vl(vl_dir, dtype="float64")
    row = _play(model, processor, n_turns=2, seed=1)
    mask, old = row.sampled_mask(), row.log_probs().double()
    advantage, eps = 0.7, 0.2
    ids, pixels, grids = row.input_ids(), row.pixel_values().double(), row.image_grid_thw()

    def loss() -> torch.Tensor:
        # GRPO's clipped surrogate, token mean over the sampled tokens (hand-written, one row)
        new = score_conversation(model, ids, pixels, grids)[mask]
        ratio = torch.exp(new - old[mask])
        return -torch.minimum(ratio * advantage, ratio.clamp(1 - eps, 1 + eps) * advantage).mean()

    # at the behaviour policy the ratio is 1 and the loss is -advantage
    value = loss()
    assert value.item() == pytest.approx(-advantage, abs=1e-6)
    value.backward()
    for name in ("model.visual.patch_embed.proj.weight", "model.language_model.layers.0.mlp.up_proj.weight"):
        param = dict(model.named_parameters())[name]
        direction = torch.randn(param.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        # Qwen2-VL computes rotary embeddings and attention softmax in float32 even in a float64 model,
        # so the step cannot be tiny; the loss is curved enough that a central difference at a usable
        # step is off by its h^2 term: Richardson extrapolation of steps h and h/2 cancels it

        def central(h: float) -> float:
            with torch.no_grad():
                param.add_(h * direction)
                up = loss().item()
                param.sub_(2 * h * direction)
                down = loss().item()
                param.add_(h * direction)
            return (up - down) / (2 * h)

        h = 4e-3
        numeric = (4 * central(h / 2) - central(h)) / 3
        assert (param.grad * direction).sum().item() == pytest.approx(numeric, rel=2e-3, abs=1e-6), name
        assert param.grad.abs().sum() > 0, name


def test_rollout_runs_on_the_env_images():
    env = VisualFrozenLakeEnv(num_envs=2, desc=DESC)
    td = env.reset(TensorDict(level_seed=torch.tensor([0, 0]), batch_size=[2]))
    assert torch.equal(td["image"][0], _board_images(1)[0])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"hidden_size": 30}, "model.hidden_size"),
        ({"vision_embed_dim": 10, "vision_num_heads": 4}, "model.vision_embed_dim"),
        ({"num_layers": 0}, "model.num_layers"),
        ({"hidden_size": 16, "num_heads": 4}, "even and >= 6"),
    ],
)
def test_bad_sizes_name_the_key(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TinyVLConfig(**kwargs)


def test_preset_sizes_build_a_config():
    preset = yaml.safe_load(open(f"{CONFIG_DIR}/model/tiny_vl.yaml"))
    cfg = TinyVLConfig.from_model_config(preset)
    assert cfg.rope_sections() == [6, 5, 5] and preset["name"] == "tiny_vl"
