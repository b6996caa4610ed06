"""Fidelity of the RAGEN environments to the reference rules (RAGEN-2, arXiv 2604.06268).

Reply parsing inside the env (first ``max_actions_per_turn`` tokens, valid ones run, one
-0.1 penalty when any is invalid), Bandit arm names, FrozenLake group-shared slips and the
paper/annotated observation switch. Coordinates are (row, col); Down increases the row.
"""

from __future__ import annotations

import tensordict

tensordict.set_list_to_stack(True).set()

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

from ragen_torchrl.envs import FrozenLakeEnv, make_env  # noqa: E402
from ragen_torchrl.envs.text_env import TextGameEnv, sample_seed  # noqa: E402
from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR  # noqa: E402

OPEN4 = ["SFFF", "FFFF", "FFFF", "FFFG"]


def ok(answer: str) -> str:
    return f"<think>plan</think><answer>{answer}</answer>"


def reset(env: TextGameEnv, level_seeds, sample_seeds=None) -> TensorDict:
    data = {"level_seed": torch.tensor(level_seeds), "group_id": torch.zeros(len(level_seeds), dtype=torch.long)}
    if sample_seeds is not None:
        data["sample_seed"] = torch.tensor(sample_seeds)
    return env.reset(TensorDict(data, batch_size=[len(level_seeds)]))


def step(env: TextGameEnv, td, replies: list[str]):
    n = td.batch_size[0]
    msg = History(role=["assistant"] * n, content=list(replies), batch_size=(n,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    return env.step(td)["next"]


# --------------------------------------------------------------------------- reply parsing in the env
def test_invalid_token_runs_the_valid_ones_with_one_penalty():
    # REFERENCE §4: "takes the first max_actions_per_turn action tokens, executes the valid
    # ones in order, and adds the -0.1 format penalty when any of them is invalid"
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)
    td = step(env, reset(env, [0]), [ok("Down || Right")])  # (0,0) -> (1,1)
    assert env.games[0].player == (1, 1) and td["reward"].item() == 0.0
    td = step(env, td, [ok("Fly || Up || Left")])
    # read [Fly, Up]: Up runs -> (0, 1); Left (third token) is never read; reward 0 - 0.1
    assert env.games[0].player == (0, 1)
    assert td["reward"].item() == pytest.approx(-0.1)
    assert not td["action_is_valid"].item() and td["action_is_effective"].item()
    assert not td["done"].item() and td["turn"].item() == 2


def test_penalty_adds_to_the_goal_reward_and_counts_once_per_turn():
    # ["SF", "HG"]: Right -> (0, 1), then "Down || Fly" reaches the goal: 1.0 - 0.1 = 0.9
    env = FrozenLakeEnv(num_envs=2, desc=["SF", "HG"], max_actions_per_turn=3)
    td = step(env, reset(env, [0, 0]), [ok("Right"), ok("Fly || Jump || Right")])
    # row 1: two invalid tokens, one penalty (-0.1, not -0.2); Right runs -> (0, 1)
    assert td["reward"].flatten().tolist() == pytest.approx([0.0, -0.1])
    assert [g.player for g in env.games] == [(0, 1), (0, 1)]
    td = step(env, td, [ok("Down || Fly"), ok("Down")])
    assert td["reward"].flatten().tolist() == pytest.approx([0.9, 1.0])
    assert td["success"].tolist() == [True, True] and td["terminated"].all()
    assert td["action_is_valid"].tolist() == [False, True]


def test_no_valid_action_leaves_state_unchanged_and_traj_cap_still_applies():
    # REFERENCE §4: "a turn with no valid action leaves the state unchanged"; budget
    # max_actions_per_traj=3: turn 1 Right, Right (2 used); turn 2 "Fly || Jump" -> nothing,
    # -0.1; turn 3 "Fly || Down": Down runs (the last budgeted action) with -0.1 -> truncated
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4, max_actions_per_traj=3)
    td = step(env, reset(env, [0]), [ok("Right || Right")])
    td = step(env, td, [ok("Fly || Jump")])
    assert env.games[0].player == (0, 2) and td["reward"].item() == pytest.approx(-0.1)
    assert not td["action_is_effective"].item() and not td["done"].item()
    td = step(env, td, [ok("Fly || Down")])
    assert env.games[0].player == (1, 2) and td["reward"].item() == pytest.approx(-0.1)
    assert td["truncated"].item() and td["done"].item() and not td["terminated"].item()


# --------------------------------------------------------------------------- FrozenLake
def test_frozenlake_group_samples_share_slips():
    # REFERENCE §4: "All samples of a group share the level seed, slips included".
    # Level 42, success_rate 0.5: the slip RNG is random.Random(42); its first draw 0.639 is
    # in [0.5, 0.75) -> Down slips to its first perpendicular, Left, into the wall: every
    # sample stays at (0, 0). Second draw 0.025 < 0.5 -> Right happens: (0, 1) for all.
    env = FrozenLakeEnv(num_envs=4, desc=OPEN4, success_rate=0.5)
    td = reset(env, [42] * 4, sample_seeds=[sample_seed(42, g) for g in range(4)])
    td = step(env, td, [ok("Down")] * 4)
    assert [g.player for g in env.games] == [(0, 0)] * 4
    assert not td["action_is_effective"].any() and td["action_is_valid"].all()
    step(env, td, [ok("Right")] * 4)
    assert [g.player for g in env.games] == [(0, 1)] * 4


def walk(game, actions):
    for action in actions:
        game.step(action)
        yield game.player


def test_frozenlake_slips_do_not_depend_on_the_sample_seed():
    # same level, any sample seed: the same action sequence gives the same trajectory
    env = FrozenLakeEnv(num_envs=1, success_rate=0.34)
    paths = set()
    for sample in range(6):
        game = env.game_factory(5, sample_seed(5, sample))
        paths.add(tuple(walk(game, ("Right", "Down", "Down", "Left"))))
    assert len(paths) == 1
    # the ablation switch gives each sample its own slips
    env = FrozenLakeEnv(num_envs=1, success_rate=0.34, slip_seeding="sample")
    paths = set()
    for sample in range(6):
        game = env.game_factory(5, sample_seed(5, sample))
        paths.add(tuple(walk(game, ("Right", "Down", "Down", "Left"))))
    assert len(paths) > 1


PAPER_SF_HG = (
    "P_\nOG\nBoard size: 2 rows x 2 cols (zero-indexed).\nStart: (0, 0)\nGoal: (1, 1)\nPlayer: (0, 0)\nHoles: (1, 0)"
)


def test_frozenlake_paper_observation_is_grid_plus_coordinates():
    # REFERENCE §4 (FrozenLake): "Observation: the grid and coordinates"
    env = FrozenLakeEnv(num_envs=1, desc=["SF", "HG"], observation="paper")
    td = reset(env, [0])
    assert td["history", "prompt"][0].content[-1] == PAPER_SF_HG
    nxt = step(env, td, [ok("Right")])
    assert nxt["history", "prompt"][0].content[-1] == PAPER_SF_HG.replace("P_", "_P").replace(
        "Player: (0, 0)", "Player: (0, 1)"
    )
    # no per-move annotations in the paper format
    assert "ice" not in PAPER_SF_HG and "Goal is" not in PAPER_SF_HG


def test_frozenlake_paper_observation_on_goal_and_in_hole():
    game = FrozenLakeEnv(num_envs=1, desc=["SF", "HG"], observation="paper").game_factory(0, 0)
    game.step("Down")  # into the hole (1, 0)
    assert game.render_text() == (
        "__\nPG\nBoard size: 2 rows x 2 cols (zero-indexed).\nStart: (0, 0)\nGoal: (1, 1)\n"
        "Player in hole: (1, 0)\nHoles: (1, 0)"
    )
    game = FrozenLakeEnv(num_envs=1, desc=["SG"], observation="paper").game_factory(0, 0)
    game.step("Right")
    assert game.render_text() == (
        "_P\nBoard size: 1 rows x 2 cols (zero-indexed).\nStart: (0, 0)\nGoal: (0, 1)\nPlayer on goal: (0, 1)"
    )


def test_frozenlake_default_observation_is_annotated():
    # the shipped preset keeps the annotated observation (the tiny model's format)
    from pathlib import Path

    import yaml

    cfg = yaml.safe_load((Path(PACKAGE_CONFIG_DIR) / "env" / "frozenlake.yaml").read_text())
    assert cfg["observation"] == "annotated" and cfg["slip_seeding"] == "level"
    for env in (FrozenLakeEnv(num_envs=1, desc=["SF", "HG"]), make_env("frozenlake", num_envs=1, desc=["SF", "HG"])):
        td = reset(env, [0])
        assert td["history", "prompt"][0].content[-1] == (
            "P_\nOG\nPlayer (0,0) Goal (1,1). Goal is down right. Left wall, Down hole, Right ice, Up wall."
        )


@pytest.mark.parametrize("key, value", [("observation", "grid"), ("slip_seeding", "row")])
def test_frozenlake_bad_switch_values_raise(key, value):
    with pytest.raises(ValueError, match=f"{key}.*{value}"):
        FrozenLakeEnv(num_envs=1, **{key: value})


# --------------------------------------------------------------------------- Bandit
def test_bandit_names_carry_the_meaning_and_validation_pairs_are_held_out():
    # REFERENCE §4 (Bandit): "two arms whose names carry the meaning (e.g. Teacher vs
    # Trader ...)"; "held-out name pairs for evaluation"
    from ragen_torchrl.envs.games.bandit import TRAIN_NAME_PAIRS, VAL_NAME_PAIRS, BanditGame
    from ragen_torchrl.envs.splits import VAL_SEED_OFFSET

    assert ("Teacher", "Trader") in TRAIN_NAME_PAIRS  # (low-risk, high-risk)
    train = {n.lower() for pair in TRAIN_NAME_PAIRS for n in pair}
    val = {n.lower() for pair in VAL_NAME_PAIRS for n in pair}
    assert not train & val
    env = make_env("bandit", num_envs=1)
    for seed in range(40):
        g = env.game_factory(seed, 0)
        assert (g.low_risk_arm, g.high_risk_arm) in TRAIN_NAME_PAIRS
        v = env.game_factory(VAL_SEED_OFFSET + seed, 0)
        assert (v.low_risk_arm, v.high_risk_arm) in VAL_NAME_PAIRS
    # the same name is always the same role, in every level
    assert BanditGame.generate(0).high_risk_arm in {hi for _, hi in TRAIN_NAME_PAIRS}


def test_bandit_prompt_never_says_which_arm_is_risky():
    # REFERENCE §4 (Bandit): "the agent must infer which is the steady and which the risky
    # arm from the names alone; the prompt never says": swapping the roles of the two names
    # (same display order) leaves the whole prompt unchanged
    from ragen_torchrl.envs.games.bandit import BanditGame

    a = BanditGame("Teacher", "Trader", low_first=True)  # shown: Teacher, Trader
    b = BanditGame("Trader", "Teacher", low_first=False)  # shown: Teacher, Trader, roles swapped
    assert a.action_names == b.action_names == ("Teacher", "Trader")
    assert a.render_text() == b.render_text() == "The arms are Teacher and Trader. Which arm do you pull?"
    env = make_env("bandit", num_envs=1)
    td = reset(env, [3])
    prompt = " ".join(td["history", "prompt"][0].content).lower()
    for word in ("risk", "steady", "safe", "0.1", "0.25"):
        assert word not in prompt, word


def test_bandit_rewards_success_and_group_shared_payout():
    # REFERENCE §4: low-risk arm pays 0.1, high-risk 1.0 with p = 0.25; success (reference
    # code: arm_name == hi_arm_name) = the higher expected reward, 0.25 > 0.1.
    # payout_seeding="level": the payout RNG is random.Random("bandit-payout:<level>");
    # level 2 draws 0.160 < 0.25 -> 1.0, level 7 draws 0.511 -> 0.0, for every sample
    env = make_env("bandit", num_envs=8)
    td = reset(env, [2] * 4 + [7] * 4, sample_seeds=[sample_seed(s, g) for s in (2, 7) for g in range(4)])
    replies = []
    for row, game in enumerate(env.games):
        arm = game.high_risk_arm if row % 4 < 3 else game.low_risk_arm
        replies.append(env.format_reply("x", [arm]))
    nxt = step(env, td, replies)
    assert nxt["reward"].flatten().tolist() == pytest.approx([1.0, 1.0, 1.0, 0.1, 0.0, 0.0, 0.0, 0.1])
    assert nxt["success"].tolist() == [True, True, True, False] * 2
    assert all(g.oracle_action() == g.high_risk_arm for g in env.games)


def test_bandit_payout_seeding_sample_and_bad_value():
    env = make_env("bandit", num_envs=32, payout_seeding="sample")
    td = reset(env, [7] * 32, sample_seeds=[sample_seed(7, g) for g in range(32)])
    nxt = step(env, td, [env.format_reply("x", [g.high_risk_arm]) for g in env.games])
    assert set(nxt["reward"].flatten().tolist()) == {0.0, 1.0}
    with pytest.raises(ValueError, match="payout_seeding.*row"):
        make_env("bandit", num_envs=1, payout_seeding="row")
