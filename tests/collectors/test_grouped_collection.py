"""Grouped collection as a public component (:mod:`ragen_torchrl.collectors.grouped`).

Collecting G samples per level is the core data path: a public, documented module with a
stated policy contract and a clear error for a policy that does not produce tokens. The scripted policies here use no model, so
every number is known by hand.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import lazy_stack
from torchrl.data.llm import History

from ragen_torchrl.collectors import PolicyContractError, collect_rollouts
from ragen_torchrl.envs import make_env

INVALID = "<answer>fly</answer>"  # no FrozenLake action: every turn is malformed


def reply_history(td, text: str):
    """``("history", "prompt")`` of every row plus one assistant message ``text``."""
    msg = History(role="assistant", content=text).unsqueeze(0)
    return td["history", "prompt"].extend(lazy_stack([msg] * td.shape[0]), inplace=False, dim=-1)


def scripted(text: str, n_tokens: int, *, write_tokens: bool = True, write_history: bool = True):
    def policy(td):
        if write_history:
            td.set(("history", "full"), reply_history(td, text))
        if write_tokens:
            td.set(("tokens", "response"), [torch.arange(n_tokens)] * td.shape[0])
        return td

    return policy


def test_scripted_policy_numbers_by_hand():
    # text_env: a reply without a valid action ends the turn with format_penalty (-0.1) and
    # max_turn=3 truncates: return 3 x -0.1 = -0.3, 3 turns, 0 valid turns, 3 x 4 tokens
    P, G = 2, 3
    env = make_env("frozenlake", num_envs=P * G, max_turn=3)
    rec = collect_rollouts(env, scripted(INVALID, 4), level_seeds=[5, 9], group_size=G, group_offset=10)
    assert rec.batch_size == torch.Size([6])
    assert rec["group_id"].tolist() == [10, 10, 10, 11, 11, 11]
    assert rec["level_seed"].tolist() == [5, 5, 5, 9, 9, 9]
    assert rec["num_turns"].tolist() == [3] * 6
    assert rec["num_tokens"].tolist() == [12] * 6
    assert rec["episode_return"].tolist() == pytest.approx([-0.3] * 6)
    assert rec["format_valid"].tolist() == [0.0] * 6
    assert not rec["success"].any()
    assert rec["entropy"].tolist() == [0.0] * 6  # a scripted policy records no entropy
    # the whole conversation up to the last reply: system, first observation, (reply,
    # observation) per earlier turn, the last reply
    roles = rec.get(("history", "full"))[0].role
    assert list(roles) == ["system", "user"] + ["assistant", "user"] * 2 + ["assistant"]


def test_a_policy_that_writes_only_history_gets_a_clear_error():
    # "a scripted policy gets TypeError: 'NoneType' object is not iterable" before;
    # the contract error names the missing key and how to provide it
    env = make_env("frozenlake", num_envs=2)
    with pytest.raises(PolicyContractError, match=r"(?s)lacks \('tokens', 'response'\).*tokenizer\(reply\)\.input_ids"):
        collect_rollouts(env, scripted(INVALID, 4, write_tokens=False), [1], 2)
    with pytest.raises(ValueError, match=r"lacks \('history', 'full'\)"):  # PolicyContractError is a ValueError
        collect_rollouts(env, scripted(INVALID, 4, write_history=False), [1], 2)


def test_a_policy_that_drops_rows_or_returns_no_tensordict_is_rejected():
    env = make_env("frozenlake", num_envs=2)
    with pytest.raises(PolicyContractError, match="1 rows for 2 input rows"):
        collect_rollouts(env, lambda td: scripted(INVALID, 1)(td)[:1], [1], 2)
    with pytest.raises(PolicyContractError, match="returned dict"):
        collect_rollouts(env, lambda td: {}, [1], 2)


def test_bad_arguments_name_the_value():
    env = make_env("frozenlake", num_envs=2)
    with pytest.raises(ValueError, match="chunk_size must be >= 1, got 0"):
        collect_rollouts(env, scripted(INVALID, 1), [1], 2, chunk_size=0)
    with pytest.raises(ValueError, match="num_envs=4"):
        collect_rollouts(env, scripted(INVALID, 1), [1, 2], 2)
