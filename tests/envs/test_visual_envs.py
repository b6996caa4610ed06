"""Visual Sokoban and FrozenLake: the board images and the envs around them.

* ``render_board`` draws each cell as a flat tile with an optional centred square, pixel for
  pixel (expectations written out by hand on 1 x 2 and 2 x 2 boards), and rejects bad boards;
* the visual envs write the image of every row's board on reset and step, declare it in the
  specs (``check_env_specs`` passes), keep the text envs' rewards and successes on the same
  replies, and put the right text in the user message for ``observation=image|image+text``;
* ``image_chat`` gives every user message one image placeholder, as HF VLM chat templates take;
* the presets compose and build.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensordict
import torch
from hydra import compose, initialize_config_dir
from tensordict import TensorDict
from torchrl.data.llm import History
from torchrl.envs.utils import check_env_specs

from ragen_torchrl import keys as K
from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.games.render import FROZENLAKE_PALETTE, SOKOBAN_PALETTE, Tile, frozenlake_board, render_board
from ragen_torchrl.envs.visual import IMAGE_TEXT, VisualFrozenLakeEnv, VisualSokobanEnv, image_chat
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.model_setup import env_kwargs

ICE, HOLE, GOAL, RED = (200, 230, 255), (20, 40, 90), (80, 200, 80), (220, 40, 40)
ROOM = "#####\n#PXO#\n#####"


def _reply(td, texts):
    rows = []
    for h, text in zip(td.get(K.HISTORY_PROMPT).unbind(0), texts):
        rows.append(h.extend(History(role="assistant", content=text, batch_size=(1,)), inplace=False, dim=-1))
    td.set(K.HISTORY_FULL, tensordict.lazy_stack(rows))
    return td


# ---------------------------------------------------------------------------- rendering
def test_render_board_pixels_by_hand():
    # a 2 x 2 lake, 4 px tiles: the marker is the square [1, 3) x [1, 3) of its tile
    img = render_board(["P_", "OG"], FROZENLAKE_PALETTE, tile_px=4)
    want = np.zeros((3, 8, 8), dtype=np.uint8)
    for ch in range(3):
        want[ch, 0:4, 0:4] = ICE[ch]
        want[ch, 1:3, 1:3] = RED[ch]
        want[ch, 0:4, 4:8] = ICE[ch]
        want[ch, 4:8, 0:4] = HOLE[ch]
        want[ch, 4:8, 4:8] = GOAL[ch]
    assert img.dtype == np.uint8 and img.shape == (3, 8, 8)
    np.testing.assert_array_equal(img, want)


def test_render_board_odd_tile_and_custom_palette():
    # 5 px tiles: margin 5 // 4 = 1, so the marker covers pixels 1..3 of the tile
    palette = {"a": Tile((1, 2, 3)), "b": Tile((10, 20, 30), (7, 8, 9))}
    img = render_board(["ab"], palette, tile_px=5)
    assert img.shape == (3, 5, 10)
    assert img[:, :, :5].reshape(3, -1).T.tolist() == [[1, 2, 3]] * 25
    marker = np.zeros((5, 5), dtype=bool)
    marker[1:4, 1:4] = True
    second = img[:, :, 5:]
    assert (second[:, marker].T == [7, 8, 9]).all() and (second[:, ~marker].T == [10, 20, 30]).all()


def test_coord_frames_by_hand():
    # a 3 x 2 board of 14 px tiles: border max(1, 14 // 7) = 2 px, red = 255 * row / 2, blue = 255 * col / 1
    plain = render_board(["__", "__", "_P"], FROZENLAKE_PALETTE, tile_px=14)
    img = render_board(["__", "__", "_P"], FROZENLAKE_PALETTE, tile_px=14, coord_frames=True)
    border = np.zeros((14, 14), dtype=bool)
    border[:2, :] = border[-2:, :] = border[:, :2] = border[:, -2:] = True
    for r, red in enumerate([0, 128, 255]):
        for c, blue in enumerate([0, 255]):
            tile = img[:, 14 * r : 14 * (r + 1), 14 * c : 14 * (c + 1)]
            assert (tile[:, border].T == [red, 0, blue]).all(), (r, c)
            inner = plain[:, 14 * r : 14 * (r + 1), 14 * c : 14 * (c + 1)]
            np.testing.assert_array_equal(tile[:, ~border], inner[:, ~border])
    assert img[:, 35, 21].tolist() == list(RED)  # the player's marker is clear of the frame


def test_visual_env_coord_frames_switch():
    framed = make_env("frozenlake_visual", num_envs=1, desc=["SF", "FG"], tile_px=7).reset()[K.IMAGE][0]
    plain = make_env("frozenlake_visual", num_envs=1, desc=["SF", "FG"], tile_px=7, coord_frames=False).reset()[
        K.IMAGE
    ][0]
    assert framed[:, 7, 13].tolist() == [255, 0, 255] and plain[:, 7, 13].tolist() == list(GOAL)
    board = frozenlake_board(["SF", "FG"], (0, 0))
    assert torch.equal(plain, torch.from_numpy(render_board(board, FROZENLAKE_PALETTE, 7)))


def test_render_board_sokoban_box_on_target_keeps_the_target_colour():
    img = render_board(["√"], SOKOBAN_PALETTE, tile_px=4)
    assert img[:, 0, 0].tolist() == [150, 220, 150] and img[:, 1, 1].tolist() == [170, 110, 40]


def test_frozenlake_board_keeps_the_tile_under_the_player():
    assert frozenlake_board(["SFH", "FFG"], (0, 0)) == ["P_O", "__G"]
    assert frozenlake_board(["SFH", "FFG"], (0, 2)) == ["__Q", "__G"]
    assert frozenlake_board(["SFH", "FFG"], (1, 2)) == ["__O", "__W"]


@pytest.mark.parametrize(
    "board,tile_px,match",
    [([], 4, "empty"), (["ab", "a"], 4, "different lengths"), (["_Z"], 4, "'Z'"), (["_"], 0, "tile_px")],
)
def test_render_board_rejects_bad_input(board, tile_px, match):
    palette = {**FROZENLAKE_PALETTE, "a": Tile((0, 0, 0)), "b": Tile((0, 0, 0))}
    with pytest.raises(ValueError, match=match):
        render_board(board, palette, tile_px=tile_px)


# ---------------------------------------------------------------------------- envs
@pytest.mark.parametrize("name", ["sokoban_visual", "frozenlake_visual"])
def test_check_env_specs(name):
    env = make_env(name, num_envs=3, tile_px=4)
    check_env_specs(env)
    check_env_specs(env, break_when_any_done=False, seed=1)
    assert env.full_observation_spec[K.IMAGE].dtype == torch.uint8


def test_frozenlake_images_follow_the_player_and_rewards_match_the_text_env():
    desc = ["SF", "HG"]
    visual = VisualFrozenLakeEnv(num_envs=2, desc=desc, tile_px=4)
    text = make_env("frozenlake", num_envs=2, desc=desc)
    seeds = TensorDict(level_seed=torch.tensor([0, 0]), batch_size=[2])
    td, td_text = visual.reset(seeds.clone()), text.reset(seeds.clone())
    start = torch.from_numpy(render_board(frozenlake_board(desc, (0, 0)), FROZENLAKE_PALETTE, 4, coord_frames=True))
    assert torch.equal(td[K.IMAGE][0], start) and torch.equal(td[K.IMAGE][1], start)
    replies = ["<think>r</think><answer>Right</answer>", "<think>d</think><answer>Down</answer>"]
    nxt = visual.step(_reply(td, replies))["next"]
    nxt_text = text.step(_reply(td_text, replies))["next"]
    for key in (K.REWARD, K.DONE, K.SUCCESS, K.ACTION_IS_VALID):
        assert torch.equal(nxt[key], nxt_text[key]), key
    for row, player in enumerate([(0, 1), (1, 0)]):  # Right onto ice, Down into the hole
        want = torch.from_numpy(render_board(frozenlake_board(desc, player), FROZENLAKE_PALETTE, 4, coord_frames=True))
        assert torch.equal(nxt[K.IMAGE][row], want)
    assert nxt[K.HISTORY_PROMPT][0].content[-1] == IMAGE_TEXT


def test_sokoban_image_and_solve_match_the_text_env():
    visual = VisualSokobanEnv(level=ROOM, tile_px=2, observation="image+text")
    text = make_env("sokoban", level=ROOM)
    seeds = TensorDict(level_seed=torch.tensor([0]), batch_size=[1])
    td, td_text = visual.reset(seeds.clone()), text.reset(seeds.clone())
    assert list(td[K.HISTORY_PROMPT][0].content) == list(td_text[K.HISTORY_PROMPT][0].content)
    assert td[K.IMAGE].shape == (1, 3, 6, 10)
    reply = ["<think>push</think><answer>Right</answer>"]
    nxt = visual.step(_reply(td, reply))["next"]
    nxt_text = text.step(_reply(td_text, reply))["next"]
    assert nxt[K.REWARD].item() == pytest.approx(nxt_text[K.REWARD].item()) and nxt[K.SUCCESS].item()
    want = torch.from_numpy(render_board(["#####", "#_P√#", "#####"], SOKOBAN_PALETTE, 2, coord_frames=True))
    assert torch.equal(nxt[K.IMAGE][0], want)


def test_step_of_a_sub_batch_writes_its_rows_images():
    env = VisualFrozenLakeEnv(num_envs=3, desc=["SF", "FG"], tile_px=2)
    td = env.reset(TensorDict(level_seed=torch.tensor([0, 0, 0]), batch_size=[3]))
    sub = _reply(td[1:2].clone(), ["<think>r</think><answer>Right</answer>"])
    nxt = env.step(sub)["next"]
    assert nxt[K.IMAGE].shape == (1, 3, 4, 4)
    want = torch.from_numpy(
        render_board(frozenlake_board(["SF", "FG"], (0, 1)), FROZENLAKE_PALETTE, 2, coord_frames=True)
    )
    assert torch.equal(nxt[K.IMAGE][0], want)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"observation": "text"}, "observation"),
        ({"tile_px": 0}, "tile_px"),
        ({"tile_px": True}, "tile_px"),
        ({"coord_frames": "yes"}, "coord_frames"),
    ],
)
@pytest.mark.parametrize("cls", [VisualSokobanEnv, VisualFrozenLakeEnv])
def test_bad_arguments_name_the_key(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_image_chat_puts_one_image_before_each_user_text():
    chat = image_chat([("system", "rules"), ("user", "a"), ("assistant", "b"), ("user", "c")])
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user"]
    assert chat[0]["content"] == [{"type": "text", "text": "rules"}]
    assert chat[3]["content"] == [{"type": "image"}, {"type": "text", "text": "c"}]
    assert sum(part["type"] == "image" for m in chat for part in m["content"]) == 2


@pytest.mark.parametrize("name", ["sokoban_visual", "frozenlake_visual"])
def test_preset_composes_and_builds(name):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"env={name}", "env.observation=image+text"])
    env = make_env(cfg.env.name, num_envs=2, **env_kwargs(cfg.env))
    td = env.reset()
    assert td[K.IMAGE].shape[-3:] == env.full_observation_spec[K.IMAGE].shape[-3:]
    assert td[K.IMAGE].shape[-1] % 28 == 0


def test_visual_env_step_holds_the_env_and_visual_keys():
    env = make_env("frozenlake_visual", num_envs=2, tile_px=2)
    td = env.reset()
    out = env.step(_reply(td, ["<think>x</think><answer>Left</answer>", "nonsense"]))
    want = (set(K.keys_in("env")) | set(K.keys_in("visual"))) - {K.RESET, K.HISTORY_FULL}  # full: the action
    assert want - {K.REWARD} <= set(td.keys(include_nested=True))  # a reset has no reward
    assert want <= set(out["next"].keys(include_nested=True))
