"""Looking at visual episodes: the observed images recorded during evaluation, TensorBoard images next to
the replies, and ``ragen-eval --dump`` as an animated GIF or a PNG strip.

* :func:`evaluate_policy` with :class:`EpisodeFrames` keeps, per kept level, the board the policy saw
  at each turn and the final board (``turns + 1`` frames), equal to the boards re-rendered by
  replaying the episode's moves on a fresh game core; a text env records nothing;
* the GIF decodes (Pillow) to ``turns + 1`` frames whose board pixels are the env images (a move into
  a wall, which repeats the board, keeps its own frame), the PNG strip to the frames side by side;
* ``log_episode_images`` writes each turn's image and reply, the final board and the strip to a real
  TensorBoard event file (read back with TensorBoard's ``EventAccumulator``);
* ``ragen-eval --dump`` writes the GIF / PNG of the chosen level; bad options exit 2 with a message.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image
from tensordict import lazy_stack
from torchrl.data.llm import History

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.splits import val_level_seeds
from ragen_torchrl.envs.visual import VisualFrozenLakeEnv
from ragen_torchrl.trainer.episode_frames import EpisodeFrames, frame_strip, save_episode
from ragen_torchrl.trainer.evaluate import evaluate_policy
from ragen_torchrl.trainer.evaluate import main as eval_main
from ragen_torchrl.trainer.run_log import log_episode_images

# from the top-left start: Left bumps into the wall (the board repeats), then on to the goal in 4 moves
DESC = ["SFF", "FHF", "FFG"]
MOVES = ["Left", "Right", "Right", "Down", "Down"]


def scripted(td):
    """Turn t of every row answers MOVES[t] (t = assistant messages so far)."""
    replies = []
    for h in td["history", "prompt"].unbind(0):
        turn = sum(r == "assistant" for r in h.role)
        move = MOVES[turn % len(MOVES)]
        replies.append(
            History(role="assistant", content=f"<think>go {move}</think><answer>{move}</answer>").unsqueeze(0)
        )
    full = td["history", "prompt"].extend(lazy_stack(replies), inplace=False, dim=-1)
    return td.set(("history", "full"), full).set(("tokens", "response"), [torch.tensor([1])] * td.shape[0])


def replayed_boards(env: VisualFrozenLakeEnv, level_seed: int, history) -> list[torch.Tensor]:
    """The boards of an episode rebuilt from its replies on a fresh game core (not the env's own images)."""
    game = env.game_factory(level_seed, 0)
    boards = [env.render(game)]
    for role, content in zip(history.role, history.content):
        if role == "assistant":
            game.step(content.split("<answer>")[1].split("</answer>")[0])
            boards.append(env.render(game))
    return boards


@pytest.fixture(scope="module")
def visual_episodes():
    levels = 3
    env = make_env("frozenlake_visual", num_envs=levels, desc=DESC, max_turn=6)
    frames = EpisodeFrames([0, 2])
    stats, records = evaluate_policy(env, scripted, levels, seed=0, progress=False, frames=frames)
    return env, frames, records


def test_evaluation_keeps_each_turns_board_and_the_final_one(visual_episodes):
    env, frames, records = visual_episodes
    assert sorted(frames.frames) == [0, 2]  # only the kept rows
    seeds = val_level_seeds(3)
    for row, images in frames.frames.items():
        turns = int(records[row]["num_turns"])
        assert len(images) == turns + 1
        expected = replayed_boards(env, seeds[row], records[row]["history", "full"])
        assert len(expected) == turns + 1
        for got, want in zip(images, expected):
            assert got.dtype == torch.uint8 and torch.equal(got, want)
    assert len(frames.frames[0]) == 6 and bool(records[0]["success"])  # 5 turns, the goal reached
    assert torch.equal(frames.frames[0][0], frames.frames[0][1])  # Left into the wall: the same board


def test_text_envs_record_nothing():
    frames = EpisodeFrames(2)
    evaluate_policy(make_env("frozenlake", num_envs=2, max_turn=2), scripted, 2, seed=0, progress=False, frames=frames)
    assert frames.frames == {}


def gif_frames(path) -> list[np.ndarray]:
    gif = Image.open(path)
    out = []
    for k in range(gif.n_frames):
        gif.seek(k)
        out.append(np.asarray(gif.convert("RGB")))
    return out


def test_gif_has_one_frame_per_observation_with_the_env_pixels(visual_episodes, tmp_path):
    _, frames, _ = visual_episodes
    images = frames.frames[0]
    path = save_episode(images, tmp_path / "episode.gif", turn_bar_px=4)
    decoded = gif_frames(path)
    assert len(decoded) == len(images)  # turns + 1, the repeated board included
    h, w = images[0].shape[1:]
    for got, want in zip(decoded, images):
        assert got.shape == (h + 4, w, 3)
        assert np.array_equal(got[:h], want.permute(1, 2, 0).numpy())
    # the turn bar fills up: the last frame's bar is filled across the whole width
    assert (decoded[-1][h:] == (255, 160, 0)).all() and not (decoded[0][h:] == (255, 160, 0)).all()
    # without the bar the GIF writer merges the repeated board into one frame
    assert len(gif_frames(save_episode(images, tmp_path / "nobar.gif", turn_bar_px=0))) == len(images) - 1


def test_png_strip_holds_the_frames_side_by_side(visual_episodes, tmp_path):
    _, frames, _ = visual_episodes
    images = frames.frames[2]
    path = save_episode(images, tmp_path / "strip.png", gap=3)
    strip = np.array(Image.open(path).convert("RGB"))
    h, w = images[0].shape[1:]
    assert strip.shape == (h, len(images) * w + 3 * (len(images) - 1), 3)
    for k, image in enumerate(images):
        assert np.array_equal(strip[:, k * (w + 3) : k * (w + 3) + w], image.permute(1, 2, 0).numpy())
        if k:
            assert (strip[:, k * (w + 3) - 3 : k * (w + 3)] == 255).all()  # the white gap
    assert torch.equal(torch.from_numpy(strip).permute(2, 0, 1), frame_strip(images, gap=3))


def test_bad_dump_arguments_are_clear_errors(tmp_path):
    image = torch.zeros(3, 4, 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match="must end with one of .gif, .png"):
        save_episode([image], tmp_path / "episode.mp4")
    with pytest.raises(ValueError, match="at least one frame"):
        save_episode([], tmp_path / "episode.gif")
    with pytest.raises(ValueError, match=r"frame 1 must be a uint8 \[3, H, W\] image"):
        save_episode([image, image.float()], tmp_path / "episode.gif")
    with pytest.raises(ValueError, match="share one size"):
        save_episode([image, torch.zeros(3, 4, 8, dtype=torch.uint8)], tmp_path / "episode.gif")
    with pytest.raises(ValueError, match="frame_ms"):
        save_episode([image], tmp_path / "episode.gif", frame_ms=0)
    with pytest.raises(ValueError, match="rows must be a count"):
        EpisodeFrames(-1)
    with pytest.raises(ValueError, match="rows must be a count"):
        EpisodeFrames(["a"])


# --------------------------------------------------------------------------- TensorBoard
def test_tensorboard_gets_each_turns_image_next_to_the_reply(visual_episodes, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    _, frames, records = visual_episodes
    writer = SummaryWriter(log_dir=str(tmp_path))
    written = log_episode_images(writer, records, frames.frames, step=7)
    writer.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    images = set(acc.Tags()["images"])
    turns = int(records[0]["num_turns"])
    expected = {f"val/episode_0/turn_{k}" for k in range(turns)} | {"val/episode_0/final", "val/episode_0/strip"}
    assert expected <= images
    assert written == sum(len(v) + 1 for v in frames.frames.values()) == len(images)
    # the image TensorBoard stored is the observed board, pixel for pixel, at the validation's step
    event = acc.Images("val/episode_0/turn_1")[0]
    assert event.step == 7
    stored = np.asarray(Image.open(io.BytesIO(event.encoded_image_string)).convert("RGB"))
    assert np.array_equal(stored, frames.frames[0][1].permute(1, 2, 0).numpy())
    # the reply of that turn is logged under the same tag (the text plugin keeps it as a string tensor)
    text = acc.Tensors("val/episode_0/turn_1/text_summary")[0].tensor_proto.string_val[0].decode()
    reply = [
        c for r, c in zip(records[0]["history", "full"].role, records[0]["history", "full"].content) if r == "assistant"
    ][1]
    assert reply in text and reply.endswith("<answer>Right</answer>")


# --------------------------------------------------------------------------- ragen-eval --dump
@pytest.mark.parametrize("suffix", [".gif"])  # .png: the same path, save_episode's suffix (tested above)
def test_ragen_eval_dumps_the_chosen_levels_episode(tiny_model_dir, tmp_path, suffix):
    out = tmp_path / f"episode{suffix}"
    argv = [tiny_model_dir, "--env", "frozenlake_visual", "--levels", "2", "--dump-level", "1", "--dump", str(out)]
    argv += ["-o", "rollout.max_new_tokens=8", "-o", "env.max_turn=3", "--json", str(tmp_path / "eval.json")]
    assert eval_main([*argv, "--no-progress"]) == 0
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["dump"] == str(out)
    # level 1's first frame is its start board, rendered independently here
    env = make_env("frozenlake_visual", num_envs=1)
    start = env.render(env.game_factory(val_level_seeds(2)[1], 0)).permute(1, 2, 0).numpy()
    h, w = start.shape[:2]
    if suffix == ".gif":
        decoded = gif_frames(out)
        assert 2 <= len(decoded) <= 4  # turns + 1, at most max_turn + 1
        assert np.array_equal(decoded[0][:h], start)
    else:
        strip = np.asarray(Image.open(out).convert("RGB"))
        assert strip.shape[0] == h and np.array_equal(strip[:, :w], start)


def test_ragen_eval_dump_errors_exit_2(tiny_model_dir, tmp_path, capsys):
    base = [tiny_model_dir, "--levels", "2", "--no-progress", "-o", "rollout.max_new_tokens=4"]
    assert eval_main([*base, "--env", "frozenlake_visual", "--dump", str(tmp_path / "x.mp4")]) == 2
    assert "--dump" in capsys.readouterr().err
    assert eval_main([*base, "--env", "frozenlake_visual", "--dump", str(tmp_path / "x.gif"), "--dump-level", "2"]) == 2
    assert "--dump-level must be in [0, 2)" in capsys.readouterr().err
    assert eval_main([*base, "--env", "frozenlake", "-o", "env.max_turn=1", "--dump", str(tmp_path / "x.gif")]) == 2
    assert "--dump needs a visual env" in capsys.readouterr().err


# --------------------------------------------------------------------------- the trainer's validation
def test_trainer_validation_logs_the_first_episodes_images(ragen_cache_dir, tmp_path):
    from hydra import compose, initialize_config_dir
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ragen_torchrl.trainer.config_paths import CONFIG_DIR
    from ragen_torchrl.trainer.loop import Trainer

    overrides = [
        "env=frozenlake_visual",
        "env.max_turn=2",
        "trainer=smoke",
        "trainer.val_levels=2",
        "trainer.log_text_samples=0",
        "trainer.log_image_samples=1",
        "sft.steps=1",
        "sft.episodes=2",
        *[
            f"model.{k}={v}"
            for k, v in dict(hidden_size=32, intermediate_size=64, num_layers=1, vocab_size=300).items()
        ],
        f"model.cache_dir={ragen_cache_dir}",
        "model.device=cpu",
        "model.threads=1",
        "rollout.max_new_tokens=8",
        "sft.reply_budget=warn",
        "diagnostics.mi.enabled=false",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    trainer.validate(5)
    trainer.logger.experiment.flush()
    acc = EventAccumulator(str(tmp_path / "run" / "tb"), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["images"])
    assert {"val/episode_0/turn_0", "val/episode_0/final", "val/episode_0/strip"} <= tags
    assert not any(t.startswith("val/episode_1") for t in tags)  # log_image_samples=1
    assert "val/episode_0/turn_0/text_summary" in acc.Tags()["tensors"]
    assert [e.step for e in acc.Images("val/episode_0/turn_0")] == [5]
