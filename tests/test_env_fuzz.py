"""Property-based: random model output never crashes any registered environment.

Every env of the registry gets arbitrary text (unicode, tag fragments, action names,
separators, thousands of characters) as the assistant reply; a step must return finite
rewards of shape (1, 1, 1) and the contract flags, never raise.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.envs import available_envs, make_env

FRAGMENTS = ["<think>", "</think>", "<answer>", "</answer>", "<interact>", "</interact>", "||", "Left", "Up",
             "Right", "Down", "1234", "(1,0,1)", "A = x1 AND x2", "compare 1 2", "=", "+", "(", ")", "\n", " "]
replies = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=40).map("".join),
    st.builds(lambda s, n: s * n, st.sampled_from(FRAGMENTS), st.integers(100, 2000)),
)

_ENVS: dict[str, object] = {}


def _env(name: str):
    if name not in _ENVS:
        _ENVS[name] = make_env(name, num_envs=1)
    return _ENVS[name]


@pytest.mark.parametrize("name", available_envs())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=replies)
def test_random_replies_never_crash(name, reply):
    env = _env(name)
    td = env.reset(TensorDict(level_seed=torch.tensor([5]), group_id=torch.tensor([0]), batch_size=[1]))
    msg = History(role="assistant", content=reply, batch_size=(1,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(0), inplace=False, dim=-1))
    nxt = env.step(td)["next"]
    reward = nxt["reward"]
    assert reward.shape == (1, 1, 1) and math.isfinite(float(reward))
    assert nxt["done"].shape == (1, 1) and nxt["done"].dtype == torch.bool
    assert nxt["action_is_valid"].dtype == torch.bool
    # the next prompt is the conversation plus one user message
    assert nxt["history", "prompt"][0].role[-1] == "user"
