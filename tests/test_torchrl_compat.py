"""The envs inside torchrl's own machinery.

* ``check_env_specs`` passes for every registered env with no arguments (and with
  ``break_when_any_done=False``, which auto-resets finished rows);
* a reset without ``level_seed`` draws the levels from the env's generator, seeded by
  ``env.set_seed``; a reset with them behaves as before;
* partial resets (``"_reset"`` mask) restart only the finished rows, on new levels;
* ``env.rollout(..., break_when_any_done=False)`` and torchrl's ``LLMCollector`` run
  multi-turn batches with a tiny model through ``TransformersWrapper``.
"""

from __future__ import annotations

import random

import pytest
import tensordict
import torch
from tensordict import TensorDict
from torchrl.data.llm import History
from torchrl.envs.utils import check_env_specs

from ragen_torchrl.envs import available_envs, make_env
from ragen_torchrl.envs.splits import VAL_SEED_OFFSET
from ragen_torchrl.transforms.t3 import T3Truncation

# tests/conftest.py switches tensordict.set_list_to_stack(True) on (History needs it)

LEVEL_KEYS = {"level_seed", "group_id", "sample_seed"}


def _reply(td, texts):
    """``td`` with ``("history", "full")`` = prompt + one assistant message per row."""
    rows = []
    for h, text in zip(td.get(("history", "prompt")).unbind(0), texts):
        msg = History(role="assistant", content=text, batch_size=(1,))
        rows.append(h.extend(msg, inplace=False, dim=-1))
    td.set(("history", "full"), tensordict.lazy_stack(rows))
    return td


# ---------------------------------------------------------------------------- specs
@pytest.mark.parametrize("name", available_envs())
def test_check_env_specs_every_registered_env(name):
    # "check_env_specs(env) passes for every registered env with no arguments"
    env = make_env(name, num_envs=3)
    check_env_specs(env)
    # torchrl's auto-reset of finished rows (random replies end T3 episodes at once)
    check_env_specs(env, break_when_any_done=False, seed=1)


@pytest.mark.parametrize("name", available_envs())
def test_specs_declare_exactly_the_data(name):
    # "specs declare exactly what the data holds" (level_seed written but
    # undeclared, sample_seed declared but never written, ChatEnv's unused "query" state)
    env = make_env(name, num_envs=2)
    assert set(env.full_state_spec.keys()) == LEVEL_KEYS
    td = env.reset()
    nxt = env.step(env.rand_action(td))["next"]
    obs = set(env.full_observation_spec.keys())
    for data in (td, nxt):
        assert LEVEL_KEYS <= set(data.keys())
        assert obs <= set(data.keys())
    assert set(env.full_observation_spec["history", "prompt"].keys()) == {
        "role",
        "content",
        "is_complete",
    }


def test_step_accepts_the_random_history_action():
    # "_step accepts any History the spec can produce" (None role/content, no
    # tool fields): an unreadable reply is an empty one (FrozenLake: format penalty -0.1)
    env = make_env("frozenlake", num_envs=2)
    td = env.rand_action(env.reset())
    first = td.get(("history", "full"))[0]
    assert first.role is None or list(first.role) == [None]  # no readable message at all
    nxt = env.step(td)["next"]
    assert nxt["reward"].reshape(-1).tolist() == pytest.approx([-0.1, -0.1])
    assert nxt.get(("history", "prompt"))[0].role[-1] == "user"


# ----------------------------------------------------------------------- level draws
def test_reset_without_levels_draws_them_from_the_seeded_generator():
    # "a reset without level_seed/group_id draws them from an env-owned generator
    # seeded by env.set_seed" -- deterministic, training split, one new group per row
    env = make_env("frozenlake", num_envs=3)
    env.set_seed(7)
    first = env.reset()
    rng = random.Random(7)  # the generator: random.Random(seed).randrange(2**30) per row
    assert first["level_seed"].tolist() == [rng.randrange(VAL_SEED_OFFSET) for _ in range(3)]
    assert first["group_id"].tolist() == [0, 1, 2]
    assert first["sample_seed"].tolist() == [0, 1, 2]  # the row index, as before
    again = env.reset()
    assert again["group_id"].tolist() == [3, 4, 5]  # group ids never repeat
    assert again["level_seed"].tolist() != first["level_seed"].tolist()
    env.set_seed(7)
    assert env.reset()["level_seed"].tolist() == first["level_seed"].tolist()
    # same level seed -> same level as an explicit reset
    explicit = make_env("frozenlake", num_envs=3)
    explicit.reset(
        TensorDict(
            level_seed=first["level_seed"],
            group_id=torch.zeros(3, dtype=torch.long),
            batch_size=[3],
        )
    )
    assert [g.render_text() for g in explicit.games] == [g.render_text() for g in env.games]


def test_reset_with_levels_behaves_as_before():
    # the trainer's path: explicit level_seed/group_id/sample_seed are kept and echoed
    env = make_env("bandit", num_envs=2)
    td = env.reset(
        TensorDict(
            level_seed=torch.tensor([5, 5]),
            group_id=torch.tensor([4, 4]),
            sample_seed=torch.tensor([11, 12]),
            batch_size=[2],
        )
    )
    assert td["level_seed"].tolist() == [5, 5] and td["group_id"].tolist() == [4, 4]
    assert td["sample_seed"].tolist() == [11, 12]
    nxt = env.step(_reply(td, ["x", "y"]))["next"]
    assert nxt["level_seed"].tolist() == [5, 5] and nxt["group_id"].tolist() == [4, 4]
    assert nxt["sample_seed"].tolist() == [11, 12]
    # sub-batch of running rows addressed by env_index: the keys follow the rows
    env = make_env("frozenlake", num_envs=3)
    td = env.reset(
        TensorDict(
            level_seed=torch.tensor([1, 2, 3]),
            group_id=torch.tensor([0, 1, 2]),
            batch_size=[3],
        )
    )
    nxt = env.step(_reply(td[1:], ["a", "b"]))["next"]
    assert nxt["env_index"].tolist() == [1, 2] and nxt["level_seed"].tolist() == [2, 3]
    assert nxt["group_id"].tolist() == [1, 2] and nxt["sample_seed"].tolist() == [1, 2]


def test_partial_reset_restarts_only_the_masked_rows():
    # torchrl's auto-reset: reset(td with "_reset" (B, 1)) restarts the masked rows on new
    # levels; the others keep their game, turn count and conversation
    env = make_env("frozenlake", num_envs=2, max_turn=5)
    env.set_seed(0)
    td = env.reset()
    nxt = env.step(_reply(td, ["bad", "bad"]))["next"]
    assert nxt["turn"].tolist() == [1, 1]
    game1 = env.games[1]
    nxt.set("done", torch.tensor([[True], [False]]))
    out = env.maybe_reset(nxt.clone())  # what env.rollout / LLMCollector call
    assert out["turn"].tolist() == [0, 1]
    assert env.games[1] is game1 and env._turns == [0, 1]
    assert len(out.get(("history", "prompt"))[0].role) == 2  # system + first observation
    assert len(out.get(("history", "prompt"))[1].role) == 4  # unchanged: 2 + reply + feedback
    assert out["group_id"].tolist() == [2, 1]  # a new group for the restarted row
    assert out["level_seed"][1] == td["level_seed"][1]
    assert out["level_seed"][0] != td["level_seed"][0]
    # an explicit reset with a mask and level_seed entries restarts those levels
    nxt.set("_reset", torch.tensor([[False], [True]]))
    nxt.set("level_seed", torch.tensor([out["level_seed"][0].item(), 9]))
    level0 = env._level_seeds[0]
    out = env.reset(nxt)
    assert out["level_seed"].tolist() == [level0, 9] and env._turns == [0, 0]
    assert env._level_seeds == [level0, 9]


def test_partial_reset_keeps_t3_counters_of_running_rows():
    # T3Truncation restarts the stall rule only of the rows being reset
    env = make_env("guess_numbers", num_envs=2).append_transform(T3Truncation(k=2))
    env.set_seed(0)
    td = env.reset()
    q = "<think>q</think><interact>0123</interact>"
    nxt = env.step(_reply(td, [q, q]))["next"]
    rule1 = env.transform._rules[1]
    before = rule1.__dict__.copy()
    nxt.set("_reset", torch.tensor([[True], [False]]))
    env.reset(nxt)
    assert env.transform._rules[1].__dict__ == before


# ------------------------------------------------------------------- tiny model runs
@pytest.fixture
def generation_policy(tiny_model):
    from ragen_torchrl.collectors.grouped import make_generation_policy

    model, tok = tiny_model
    return make_generation_policy(model, tok, max_new_tokens=8)


def test_env_rollout_multi_turn_with_auto_reset(generation_policy):
    # env.rollout(break_when_any_done=False) on a multi-turn env with
    # a tiny model: 6 steps of 2 rows, episodes of at most 2 turns -> at least 2 auto-resets
    env = make_env("frozenlake", num_envs=2, max_turn=2)
    env.set_seed(0)
    torch.manual_seed(0)
    data = env.rollout(6, generation_policy, break_when_any_done=False)
    assert data.batch_size == (2, 6)
    turns = data.get(("next", "turn"))
    done = data.get(("next", "done")).reshape(2, 6)
    assert done.any(-1).all()  # every row finished at least one episode
    assert (turns <= 2).all()
    # after a done step the row restarts: the next step's turn is 1 and its level is new
    for row in range(2):
        for t in range(5):
            if done[row, t]:
                assert int(turns[row, t + 1]) == 1
                assert int(data[row, t + 1]["group_id"]) != int(data[row, t]["group_id"])


def test_llm_collector_multi_turn(generation_policy):
    # torchrl's LLMCollector on a multi-turn env with a tiny model
    from torchrl.collectors.llm import LLMCollector

    env = make_env("frozenlake", num_envs=2, max_turn=2)
    env.set_seed(0)
    torch.manual_seed(0)
    collector = LLMCollector(env, policy=generation_policy, dialog_turns_per_batch=4, total_dialog_turns=8)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2
    for batch in batches:
        assert batch.numel() == 4
        assert (batch.get(("next", "turn")) <= 2).all()
        assert batch.get(("next", "reward")).shape[-2:] == (1, 1)

    env = make_env("frozenlake", num_envs=2, max_turn=2)
    env.set_seed(0)
    collector = LLMCollector(
        env,
        policy=generation_policy,
        dialog_turns_per_batch=4,
        total_dialog_turns=8,
        yield_completed_trajectories=True,
    )
    batch = next(iter(collector))
    collector.shutdown()
    # whole trajectories: the last step of each is done, turns count up from 1
    done = batch.get(("next", "done")).reshape(-1)
    assert bool(done[-1])
    assert int(batch.get(("next", "turn")).reshape(-1)[0]) == 1


def test_env_rollout_ragged_rows_scripted_policy():
    # partial resets with rows of different conversation lengths: on ["SF", "HG"] row 0
    # wins in one turn (Right, Down: reward 1), row 1 replies badly until max_turn=3
    # (3 x format penalty -0.1); 6 steps -> row 0 plays 6 one-turn episodes, row 1 two
    win = "<think>go</think><answer>Right || Down</answer>"

    def policy(td):
        texts = [win if int(i) == 0 else "bad" for i in td["env_index"].reshape(-1)]
        return _reply(td, texts)

    env = make_env("frozenlake", num_envs=2, desc=["SF", "HG"], max_turn=3)
    env.set_seed(0)
    data = env.rollout(6, policy, break_when_any_done=False)
    reward = data.get(("next", "reward")).reshape(2, 6)
    assert reward[0].tolist() == pytest.approx([1.0] * 6)
    assert reward[1].tolist() == pytest.approx([-0.1] * 6)
    assert data.get(("next", "turn")).reshape(2, 6).tolist() == [
        [1] * 6,
        [1, 2, 3, 1, 2, 3],
    ]
    done = data.get(("next", "done")).reshape(2, 6)
    assert done.tolist() == [[True] * 6, [False, False, True, False, False, True]]
    # each restarted row takes the next group id, in row order within one reset: after
    # steps 0 and 1 row 0 takes 2 and 3; after step 2 rows 0 and 1 take 4 and 5; then 6, 7
    assert data["group_id"].tolist() == [[0, 2, 3, 4, 6, 7], [1, 1, 1, 5, 5, 5]]
    # conversation lengths: row 1 grows by 2 messages a turn, row 0 restarts at 2 every step
    lengths = [[len(data[r, t].get(("history", "prompt")).role) for t in range(6)] for r in range(2)]
    assert lengths == [[2] * 6, [2, 4, 6, 2, 4, 6]]


@pytest.mark.parametrize("name", ["guess_numbers", "circuit_decoding", "situation_puzzles"])
def test_check_env_specs_t3_transformed_env(name):
    # T3Truncation through a TransformedEnv: its keys are declared, partial resets keep the
    # running rows' stall counters (malformed="penalty" lets episodes run into the rule)
    env = make_env(name, num_envs=3, malformed="penalty").append_transform(T3Truncation(k=2))
    check_env_specs(env)
    check_env_specs(env, break_when_any_done=False, seed=3)
