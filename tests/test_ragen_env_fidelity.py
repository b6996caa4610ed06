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
