"""Behaviour tests of the batched TorchRL chat env (``TextGameEnv`` / ``FrozenLakeEnv``).

Coordinates are (row, col); Down increases the row, Right the column.
"""

from __future__ import annotations

import copy

import tensordict

tensordict.set_list_to_stack(True).set()

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

import ragen_torchrl.envs as envs_mod  # noqa: E402
from ragen_torchrl.envs import FrozenLakeEnv, TextGameEnv, available_envs, make_env, register_env  # noqa: E402
from ragen_torchrl.envs.games.frozenlake import FrozenLakeGame  # noqa: E402
from ragen_torchrl.envs.text_env import FORMAT_INSTRUCTIONS, sample_seed  # noqa: E402

# 4x4 map without holes: start (0, 0), goal (3, 3)
OPEN4 = ["SFFF", "FFFF", "FFFF", "FFFG"]
INVALID_PREFIX = "Invalid reply.\n"


def ok(answer: str) -> str:
    return f"<think>plan</think><answer>{answer}</answer>"


def reset(env: TextGameEnv, level_seeds, group_ids=None, sample_seeds=None) -> TensorDict:
    n = len(level_seeds)
    data = {"level_seed": torch.tensor(level_seeds)}
    if group_ids is not None:
        data["group_id"] = torch.tensor(group_ids)
    if sample_seeds is not None:
        data["sample_seed"] = torch.tensor(sample_seeds)
    return env.reset(TensorDict(data, batch_size=[n]))


def with_replies(td, replies: list[str]):
    """Set ("history", "full") = prompt + one assistant message per row (as a policy would)."""
    n = td.batch_size[0]
    assert len(replies) == n
    msg = History(role=["assistant"] * n, content=list(replies), batch_size=(n,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    return td


def step(env: TextGameEnv, td, replies: list[str]):
    """One turn: returns the ``next`` TensorDict."""
    return env.step(with_replies(td, replies))["next"]


def roles(td, row: int) -> list[str]:
    return list(td["history", "prompt"][row].role)


def contents(td, row: int, key: str = "prompt") -> list[str]:
    return list(td["history", key][row].content)


def last_user(td, row: int) -> str:
    assert roles(td, row)[-1] == "user"
    return contents(td, row)[-1]


# --------------------------------------------------------------------------- registry / construction
def test_make_env_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="frozenlake"):
        make_env("nope")
    assert "frozenlake" in available_envs()


def test_make_env_builds_frozenlake_with_config():
    env = make_env("frozenlake", num_envs=4, success_rate=0.98, max_turn=3)
    assert isinstance(env, FrozenLakeEnv) and isinstance(env, TextGameEnv)
    assert env.batch_size == torch.Size([4])
    assert env.success_rate == 0.98 and env.max_turn == 3
    assert not env.batch_locked


def test_register_env(monkeypatch):
    monkeypatch.setattr(envs_mod, "_REGISTRY", dict(envs_mod._REGISTRY))
    register_env("tiny_lake", lambda **cfg: FrozenLakeEnv(desc=["SG"], **cfg))
    assert "tiny_lake" in available_envs()
    env = make_env("tiny_lake", num_envs=2)
    td = reset(env, [0, 0])
    assert last_user(td, 0) == "PG\nPlayer (0,0) Goal (0,1). Goal is right. Left wall, Down wall, Right goal, Up wall."


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_envs": 0},
        {"num_envs": 1.5},
        {"max_turn": 0},
        {"max_actions_per_turn": 0},
        {"max_actions_per_traj": -1},
        {"success_rate": 1.5},
        {"success_rate": -0.1},
        {"p_frozen": 0.0},
        {"reply_format": "loose"},
    ],
)
def test_invalid_config_raises(kwargs):
    with pytest.raises(ValueError):
        FrozenLakeEnv(**kwargs)


# --------------------------------------------------------------------------- reset
def test_reset_prompt_group_and_levels():
    env = make_env("frozenlake", num_envs=4)
    td = reset(env, [7, 7, 11, 11], group_ids=[0, 0, 1, 1])
    prompt = td["history", "prompt"]
    assert prompt.batch_size == torch.Size([4, 2])
    system = FrozenLakeGame.instructions + " " + FORMAT_INSTRUCTIONS.format(max_actions=2)
    for row in range(4):
        assert roles(td, row) == ["system", "user"]
        assert contents(td, row)[0] == system
    # level 7 = ["FSFF", "FFFF", "FGFF", "FFFF"]: S (0, 1), G (2, 1) -> 2 steps Down
    # level 11 = ["FFHF", "FFFG", "FFFF", "SFFF"]: S (3, 0), G (1, 3); the Manhattan path
    # (3,1) (3,2) (3,3) (2,3) (1,3) avoids the only hole (0, 2) -> 5 steps
    assert last_user(td, 0) == FrozenLakeGame(seed=7).render_text()
    # level 7 has no holes; level 11 shows its hole (0, 2) as O and P at the start (3, 0)
    assert (
        last_user(td, 0)
        == "_P__\n____\n_G__\n____\nPlayer (0,1) Goal (2,1). Goal is down. Left ice, Down ice, Right ice, Up wall."
    )
    assert last_user(td, 2) == FrozenLakeGame(seed=11).render_text()
    assert (
        last_user(td, 2)
        == "__O_\n___G\n____\nP___\nPlayer (3,0) Goal (1,3). Goal is up right. Left wall, Down wall, Right ice, Up ice."
    )
    # same level seed -> same map; different seeds -> different maps
    assert last_user(td, 0) == last_user(td, 1)
    assert last_user(td, 2) == last_user(td, 3)
    assert last_user(td, 0) != last_user(td, 2)
    assert td["progress"].tolist() == [2.0, 2.0, 5.0, 5.0]
    assert td["group_id"].tolist() == [0, 0, 1, 1]
    assert td["turn"].tolist() == [0, 0, 0, 0]
    assert td["env_index"].tolist() == [0, 1, 2, 3]
    assert td["done"].shape == td["terminated"].shape == td["truncated"].shape == (4, 1)
    assert not td["done"].any() and not td["terminated"].any() and not td["truncated"].any()
    assert not td["success"].any()


def test_reset_defaults_group_id_to_zero():
    env = FrozenLakeEnv(num_envs=2)
    td = reset(env, [1, 2])
    assert td["group_id"].tolist() == [0, 0] and td["group_id"].dtype == torch.long


def test_reset_twice_starts_fresh_episodes():
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)
    td = reset(env, [0])
    step(env, td, [ok("Right")])
    td = reset(env, [0])
    assert env.games[0].player == (0, 0) and td["turn"].item() == 0
    assert roles(td, 0) == ["system", "user"]


def test_reset_needs_one_level_seed_per_env_row():
    # a reset without level_seed draws the levels (tests/test_torchrl_compat.py); given
    # level seeds must cover every row
    env = FrozenLakeEnv(num_envs=2)
    with pytest.raises(RuntimeError, match="level_seed"):
        reset(env, [1])  # 1 row for 2 envs
    with pytest.raises(RuntimeError):
        reset(env, [1, 2, 3])  # 3 rows for 2 envs


# --------------------------------------------------------------------------- step
def test_scripted_step_outcomes():
    # ["SF", "HG"]: S (0, 0), hole (1, 0), goal (1, 1)
    env = FrozenLakeEnv(num_envs=4, desc=["SF", "HG"])
    td = reset(env, [0, 0, 0, 0])
    nxt = step(
        env,
        td,
        [
            ok("Right || Down"),  # (0,1) then goal: reward 1, success, terminated
            ok("Down"),  # hole (1,0): reward 0, terminated, not success
            ok("Left"),  # wall: valid, not effective, reward 0, running
            "garbage",  # no tags: format penalty -0.1, state unchanged
        ],
    )
    assert nxt["reward"].shape == (4, 1, 1)
    assert nxt["done"].shape == nxt["terminated"].shape == nxt["truncated"].shape == (4, 1)
    assert nxt["reward"].flatten().tolist() == pytest.approx([1.0, 0.0, 0.0, -0.1])
    assert nxt["terminated"].flatten().tolist() == [True, True, False, False]
    assert nxt["truncated"].flatten().tolist() == [False, False, False, False]
    assert nxt["done"].flatten().tolist() == [True, True, False, False]
    assert nxt["success"].tolist() == [True, False, False, False]
    assert nxt["action_is_valid"].tolist() == [True, True, True, False]
    assert nxt["action_is_effective"].tolist() == [True, True, False, False]
    assert nxt["turn"].tolist() == [1, 1, 1, 1]
    # progress: 0 at the goal, rows * cols = 4 in the hole (finite on purpose),
    # 2 at the start (Right, Down)
    assert nxt["progress"].tolist() == [0.0, 4.0, 2.0, 2.0]
    assert [g.player for g in env.games] == [(1, 1), (1, 0), (0, 0), (0, 0)]


def test_doctest_flow_in_frozenlake_module():
    env = FrozenLakeEnv(num_envs=1, desc=["SF", "HG"])
    td = reset(env, [0], group_ids=[0])
    out = step(env, td, [ok("Right || Down")])
    assert (out["reward"].item(), out["success"].item()) == (1.0, True)


def test_actions_after_the_episode_ends_are_not_applied():
    # ["SGF", "FFF"]: Right reaches the goal (0, 1); the following Down is dropped
    env = FrozenLakeEnv(num_envs=1, desc=["SGF", "FFF"])
    td = reset(env, [0])
    nxt = step(env, td, [ok("Right || Down")])
    assert env.games[0].player == (0, 1)
    assert nxt["reward"].item() == 1.0 and nxt["terminated"].item()


def test_next_prompt_is_full_history_plus_one_user_message():
    env = FrozenLakeEnv(num_envs=2, desc=OPEN4)
    td = reset(env, [0, 0])
    replies = [ok("Right"), "bad"]
    with_replies(td, replies)
    full_roles = [list(td["history", "full"][r].role) for r in range(2)]
    full_contents = [contents(td, r, "full") for r in range(2)]
    nxt = env.step(td)["next"]
    for row in range(2):
        assert full_roles[row] == ["system", "user", "assistant"]
        assert full_contents[row][-1] == replies[row]
        assert roles(nxt, row) == full_roles[row] + ["user"]
        assert contents(nxt, row)[:-1] == full_contents[row]
    # row 0 moved Right: the new observation is the rendered game
    assert last_user(nxt, 0) == env.games[0].render_text()
    # OPEN4 after Right: P at (0, 1), no holes
    assert (
        last_user(nxt, 0)
        == "_P__\n____\n____\n___G\nPlayer (0,1) Goal (3,3). Goal is down right. Left ice, Down ice, Right ice, Up wall."
    )
    # a second turn keeps growing the conversation
    nxt2 = step(env, nxt, [ok("Down"), ok("Down")])
    assert roles(nxt2, 0) == ["system", "user", "assistant", "user", "assistant", "user"]
    assert nxt2["turn"].tolist() == [2, 2]
    assert [g.player for g in env.games] == [(1, 1), (1, 0)]


REPLY_CASES = {
    "plain-garbage": "garbage",
    "empty": "",
    "10k-garbage": "x7#<" * 2500,
    "non-ascii": "🚀 向右走 ñ ü " * 50,
    "no-think": "<answer>Right</answer>",
    "unknown-action": ok("Fly || Jump"),
    "no-answer": "<think>Right</think>Right",
}


@pytest.mark.parametrize("reply", list(REPLY_CASES.values()), ids=list(REPLY_CASES))
def test_format_penalty_leaves_state_unchanged(reply):
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)
    td = reset(env, [0])
    td = step(env, td, [ok("Right")])  # player (0, 1)
    before = last_user(td, 0)
    assert env.games[0].player == (0, 1)
    nxt = step(env, td, [reply])
    assert nxt["reward"].item() == pytest.approx(-0.1)
    assert not nxt["action_is_valid"].item() and not nxt["action_is_effective"].item()
    assert not nxt["done"].item() and nxt["turn"].item() == 2
    assert env.games[0].player == (0, 1)
    # the new user message is the same map behind the invalid-reply prefix
    assert last_user(nxt, 0) == INVALID_PREFIX + before
    # the game still works afterwards: Down -> (1, 1)
    step(env, nxt, [ok("Down")])
    assert env.games[0].player == (1, 1)


def test_non_ascii_reasoning_with_valid_answer_is_accepted():
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)
    td = reset(env, [0])
    nxt = step(env, td, ["<think>向右走 🚀</think><answer>Right</answer>"])
    assert nxt["action_is_valid"].item() and nxt["reward"].item() == 0.0
    assert env.games[0].player == (0, 1)


def test_primed_reply_without_opening_think_is_valid():
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)
    td = reset(env, [0])
    nxt = step(env, td, ["go down</think><answer>down</answer>"])
    assert nxt["action_is_valid"].item() and env.games[0].player == (1, 0)


def test_text_between_think_and_answer_is_penalised_unless_lenient():
    # RAGEN reference: only whitespace may join </think> and <answer>; the default follows it
    gap = "<think>go</think> I will go right. <answer>Right</answer>"
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)
    nxt = step(env, reset(env, [0]), [gap])
    assert nxt["reward"].item() == pytest.approx(-0.1) and not nxt["action_is_valid"].item()
    assert env.games[0].player == (0, 0) and last_user(nxt, 0).startswith(INVALID_PREFIX)
    # whitespace only between the blocks is valid
    nxt = step(env, nxt, ["<think>go</think>\n <answer>Right</answer>"])
    assert nxt["action_is_valid"].item() and env.games[0].player == (0, 1)
    lenient = FrozenLakeEnv(num_envs=1, desc=OPEN4, reply_format="lenient")
    nxt = step(lenient, reset(lenient, [0]), [gap])
    assert nxt["action_is_valid"].item() and nxt["reward"].item() == 0.0 and lenient.games[0].player == (0, 1)


def test_last_message_not_from_assistant_is_penalised():
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)
    td = reset(env, [0])
    td.set(("history", "full"), td["history", "prompt"])  # no assistant message appended
    nxt = env.step(td)["next"]
    assert nxt["reward"].item() == pytest.approx(-0.1) and not nxt["action_is_valid"].item()


def test_custom_format_penalty():
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4, format_penalty=-0.5)
    nxt = step(env, reset(env, [0]), ["bad"])
    assert nxt["reward"].item() == pytest.approx(-0.5)


def test_episode_return_sums_penalties_and_rewards():
    # turn 1 invalid (-0.1), turn 2 Right, Down -> goal (+1): return 0.9
    env = FrozenLakeEnv(num_envs=1, desc=["SF", "HG"])
    td = reset(env, [0])
    total = 0.0
    for reply in ["nonsense", ok("Right || Down")]:
        td = step(env, td, [reply])
        total += td["reward"].item()
    assert td["done"].item() and td["terminated"].item() and td["success"].item()
    assert total == pytest.approx(0.9)


# --------------------------------------------------------------------------- limits
def test_max_actions_per_turn_respected():
    # "Right" three times from (0, 0): 2 applied by default -> (0, 2)
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)
    step(env, reset(env, [0]), [ok("Right || Right || Right")])
    assert env.games[0].player == (0, 2)
    # with max_actions_per_turn=3 all three apply -> (0, 3), and the prompt says so
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4, max_actions_per_turn=3)
    td = reset(env, [0])
    assert "up to 3 actions" in contents(td, 0)[0]
    step(env, td, [ok("Right || Right || Right")])
    assert env.games[0].player == (0, 3)


def test_max_turn_truncation_after_invalid_turns():
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4)  # max_turn 5
    td = reset(env, [0])
    for turn in range(1, 6):
        td = step(env, td, ["invalid"])
        assert td["turn"].item() == turn
        assert td["reward"].item() == pytest.approx(-0.1)
        last = turn == 5
        assert td["done"].item() is last
        assert td["truncated"].item() is last
        assert not td["terminated"].item()
        assert not td["success"].item()


def test_max_turn_truncation_with_valid_moves():
    # max_turn 2, one Right per turn on OPEN4: never reaches the goal -> truncated at turn 2
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4, max_turn=2)
    td = step(env, reset(env, [0]), [ok("Right")])
    assert not td["done"].item()
    td = step(env, td, [ok("Right")])
    assert td["truncated"].item() and td["done"].item() and not td["terminated"].item()


def test_goal_on_the_last_turn_is_terminated_not_truncated():
    env = FrozenLakeEnv(num_envs=1, desc=["SG"], max_turn=1)
    td = step(env, reset(env, [0]), [ok("Right")])
    assert td["terminated"].item() and not td["truncated"].item() and td["done"].item()
    assert td["success"].item()


def test_max_actions_per_traj_truncation():
    # budget 3: turn 1 Right, Right -> (0, 2) (2 used); turn 2 Down, Down -> only one
    # more action is allowed -> (1, 2), budget spent -> truncated
    env = FrozenLakeEnv(num_envs=1, desc=OPEN4, max_actions_per_traj=3)
    td = step(env, reset(env, [0]), [ok("Right || Right")])
    assert env.games[0].player == (0, 2) and not td["done"].item()
    td = step(env, td, [ok("Down || Down")])
    assert env.games[0].player == (1, 2)
    assert td["truncated"].item() and td["done"].item() and not td["terminated"].item()
    assert td["turn"].item() == 2


def test_goal_with_the_last_budgeted_action_is_terminated():
    # ["SFG"], budget 2: Right, Right reaches the goal with the 2nd (last) action
    env = FrozenLakeEnv(num_envs=1, desc=["SFG"], max_actions_per_traj=2)
    td = step(env, reset(env, [0]), [ok("Right || Right")])
    assert td["terminated"].item() and not td["truncated"].item() and td["success"].item()
    assert td["reward"].item() == 1.0


# --------------------------------------------------------------------------- sub-batches
def test_stepping_a_sub_batch_updates_only_those_games():
    env = FrozenLakeEnv(num_envs=3, desc=OPEN4)
    td = reset(env, [0, 0, 0], group_ids=[4, 5, 6])
    nxt = step(env, td, [ok("Right")] * 3)  # all at (0, 1), turn 1
    # rows 0 and 2 only
    sub = nxt[torch.tensor([True, False, True])]
    assert sub["env_index"].tolist() == [0, 2]
    out = step(env, sub, [ok("Down"), ok("Right")])
    assert out["env_index"].tolist() == [0, 2]
    assert out["group_id"].tolist() == [4, 6]
    assert out["turn"].tolist() == [2, 2]
    assert out["reward"].shape == (2, 1, 1) and out["done"].shape == (2, 1)
    assert [g.player for g in env.games] == [(1, 1), (0, 1), (0, 2)]
    assert last_user(out, 0) == env.games[0].render_text()
    assert last_user(out, 1) == env.games[2].render_text()
    # rows out of order: the reply goes to the game named by env_index, not the position
    sub = out[torch.tensor([1, 0])]
    assert sub["env_index"].tolist() == [2, 0]
    out2 = step(env, sub, [ok("Down"), ok("Right")])  # game 2 Down, game 0 Right
    assert [g.player for g in env.games] == [(1, 2), (0, 1), (1, 2)]
    assert out2["turn"].tolist() == [3, 3]
    # the row left behind keeps its own turn counter
    row1 = step(env, nxt[1:2], [ok("Down")])
    assert row1["env_index"].tolist() == [1] and row1["turn"].tolist() == [2]
    assert env.games[1].player == (1, 1)


def test_too_many_rows_rejected():
    env = FrozenLakeEnv(num_envs=2, desc=OPEN4)
    reset(env, [0, 0])
    # a sub-batch may hold at most num_envs rows
    with pytest.raises(RuntimeError):
        env.step(TensorDict({"env_index": torch.arange(3)}, batch_size=[3]))


def test_oracle_rollout_with_running_rows_only():
    # 6 generated levels (success_rate 1): reply with the oracle's next two moves and step
    # only the rows still running; every row must reach the goal with return 1
    seeds = [0, 1, 2, 3, 4, 5]
    env = make_env("frozenlake", num_envs=len(seeds))
    td = reset(env, seeds, group_ids=list(range(len(seeds))))
    returns = [0.0] * len(seeds)
    success = [False] * len(seeds)
    running = td
    for _ in range(env.max_turn):
        replies = []
        for idx in running["env_index"].tolist():
            sim = copy.deepcopy(env.games[idx])
            plan = []
            for _ in range(2):
                if sim.done:
                    break
                plan.append(sim.oracle_action())
                sim.step(plan[-1])
            replies.append(ok(" || ".join(plan)))
        out = step(env, running, replies)
        for row, idx in enumerate(out["env_index"].tolist()):
            returns[idx] += out["reward"][row].item()
            success[idx] = bool(out["success"][row])
        keep = ~out["done"].reshape(-1)
        if not keep.any():
            break
        running = out[keep]
    assert success == [True] * len(seeds)
    assert returns == [1.0] * len(seeds)


# --------------------------------------------------------------------------- slips across a group
def test_group_rows_share_level_and_slips():
    # REFERENCE §4: "All samples of a group share the level seed, slips included".
    # success_rate 0.5: 8 rows of one level with different sample seeds, same actions ->
    # same slips, same positions
    env = FrozenLakeEnv(num_envs=8, success_rate=0.5)
    td = reset(env, [42] * 8, sample_seeds=[sample_seed(42, s) for s in range(8)])
    assert len({last_user(td, r) for r in range(8)}) == 1
    for _ in range(3):
        td = step(env, td, [ok("Down || Right")] * 8)
    positions = [g.player for g in env.games]
    assert len(set(positions)) == 1


def test_slip_seeding_sample_lets_group_rows_slip_independently():
    # slip_seeding="sample" (ablation): slips follow each row's sample_seed
    env = FrozenLakeEnv(num_envs=8, success_rate=0.5, slip_seeding="sample")
    seeds = [sample_seed(42, s) for s in range(8)]
    td = reset(env, [42] * 8, sample_seeds=seeds)
    assert len({last_user(td, r) for r in range(8)}) == 1
    for _ in range(3):
        td = step(env, td, [ok("Down || Right")] * 8)
    positions = [g.player for g in env.games]
    assert len(set(positions)) > 1
    # reproducible: the same seeds give the same trajectories
    td = reset(env, [42] * 8, sample_seeds=seeds)
    for _ in range(3):
        td = step(env, td, [ok("Down || Right")] * 8)
    assert [g.player for g in env.games] == positions
    # an explicit shared sample_seed makes every row slip the same way
    td = reset(env, [42] * 8, sample_seeds=[3] * 8)
    for _ in range(3):
        td = step(env, td, [ok("Down || Right")] * 8)
    assert len({g.player for g in env.games}) == 1


# --------------------------------------------------------------------------- specs
def _assert_matches_spec(td, spec, keys):
    for key in keys:
        value = td.get(key)
        assert value.shape == spec[key].shape, key
        assert value.dtype == spec[key].dtype, key
        assert spec[key].is_in(value), key


def test_specs_shapes_and_dtypes():
    B = 3
    env = FrozenLakeEnv(num_envs=B, desc=OPEN4)
    assert env.full_reward_spec["reward"].shape == (B, 1, 1)
    assert env.full_reward_spec["reward"].dtype == torch.float32
    assert set(env.full_done_spec.keys()) == {"done", "terminated", "truncated"}
    for key in ("done", "terminated", "truncated"):
        assert env.full_done_spec[key].shape == (B, 1)
        assert env.full_done_spec[key].dtype == torch.bool
    obs_spec = env.full_observation_spec
    obs_keys = [k for k in obs_spec.keys() if k != "history"]
    assert set(obs_keys) == {"env_index", "turn", "progress", "success", "action_is_valid", "action_is_effective"}
    assert "history" in obs_spec.keys()
    # the level selection is state (reset reads it, reset and step write it)
    assert set(env.full_state_spec.keys()) == {"level_seed", "group_id", "sample_seed"}

    td = reset(env, [0, 1, 2], group_ids=[0, 0, 1])
    _assert_matches_spec(td, obs_spec, obs_keys)
    _assert_matches_spec(td, env.full_done_spec, ["done", "terminated", "truncated"])

    _assert_matches_spec(td, env.full_state_spec, list(env.full_state_spec.keys()))
    nxt = step(env, td, [ok("Right || Down"), "bad", ok("Up")])
    _assert_matches_spec(nxt, obs_spec, obs_keys)
    _assert_matches_spec(nxt, env.full_state_spec, list(env.full_state_spec.keys()))
    _assert_matches_spec(nxt, env.full_done_spec, ["done", "terminated", "truncated"])
    _assert_matches_spec(nxt, env.full_reward_spec, ["reward"])
    # a random draw from the specs has the same layout as real data
    for key in obs_keys:
        rand = obs_spec[key].rand()
        assert rand.shape == nxt[key].shape and rand.dtype == nxt[key].dtype
