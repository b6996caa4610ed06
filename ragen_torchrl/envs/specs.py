"""The TensorDict specs of a :class:`~ragen_torchrl.envs.text_env.TextGameEnv`: exactly what its data holds.

Starting from :class:`torchrl.envs.llm.ChatEnv`'s specs, :func:`declare_text_env_specs` drops the
History fields the env's messages never carry (tool calls), adds the per-row observations, declares
the level selection as state, and gives reward and done flags torchrl's LLM-env shapes: reward
``(B, 1, 1)``, done/terminated/truncated ``(B, 1)``, every other per-row key ``(B,)``. The key
names and their meaning are in :mod:`ragen_torchrl.keys`; ``check_env_specs`` passes for every
registered env.

Example:
    >>> from ragen_torchrl.envs import make_env
    >>> env = make_env("frozenlake", num_envs=3)
    >>> env.full_reward_spec["reward"].shape, env.full_done_spec["done"].shape
    (torch.Size([3, 1, 1]), torch.Size([3, 1]))
    >>> sorted(env.full_state_spec.keys())
    ['group_id', 'level_seed', 'sample_seed']
"""

from __future__ import annotations

from typing import Any

import torch
from torchrl.data import Bounded, Composite, Unbounded

from ..keys import (
    ACTION_IS_EFFECTIVE,
    ACTION_IS_VALID,
    DONE,
    ENV_INDEX,
    LEVEL_KEYS,
    PROGRESS,
    REWARD,
    SUCCESS,
    TERMINATED,
    TRUNCATED,
    TURN,
)

__all__ = ["declare_text_env_specs"]


def declare_text_env_specs(env: Any) -> None:
    """Replace a ``ChatEnv``'s specs (already built by ``ChatEnv._make_specs``) by the text env's."""
    shape = env.batch_size
    # the env's messages have a role and a content (and History's is_complete), never
    # tool calls: the prompt spec declares only what the data holds
    prompt_spec = env.full_observation_spec["history", "prompt"]
    for key in ("tool_calls", "tool_responses"):
        del prompt_spec[key]
    # rows are lazily stacked (ragged conversations), so "history" reads back as a lazy
    # stack of ChatHistory rows, not one ChatHistory: a ChatHistory data_cls on the
    # container spec would reject the env's own data (the History leaves keep theirs)
    env.full_observation_spec["history"].data_cls = None
    env.full_action_spec["history"].data_cls = None
    env.full_observation_spec.update(
        Composite(
            {
                ENV_INDEX: Unbounded(shape=shape, dtype=torch.long),
                TURN: Unbounded(shape=shape, dtype=torch.long),
                PROGRESS: Unbounded(shape=shape, dtype=torch.float32),
                SUCCESS: Bounded(0, 1, shape=shape, dtype=torch.bool),
                ACTION_IS_VALID: Bounded(0, 1, shape=shape, dtype=torch.bool),
                ACTION_IS_EFFECTIVE: Bounded(0, 1, shape=shape, dtype=torch.bool),
            },
            shape=shape,
        )
    )
    # The level selection is state: reset reads it (when given) and every reset and step
    # writes it back, so TransformedEnv.reset (which keeps only reset and state keys of
    # its input) passes it through. ChatEnv's "query" state (its reset input) is unused.
    env.full_state_spec = Composite(
        {key: Unbounded(shape=shape, dtype=torch.long) for key in LEVEL_KEYS},
        shape=shape,
    )
    # torchrl's LLM convention: reward has two more dims than the batch
    env.full_reward_spec = Composite({REWARD: Unbounded(shape=shape + (1, 1))}, shape=shape)
    env.full_done_spec = Composite(
        {key: Bounded(0, 1, shape=shape + (1,), dtype=torch.bool) for key in (DONE, TERMINATED, TRUNCATED)},
        shape=shape,
    )
