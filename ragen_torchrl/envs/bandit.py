"""The two-armed bandit as a TorchRL chat environment.

The rules live in :class:`~ragen_torchrl.envs.games.bandit.BanditGame` (pure Python);
:class:`BanditEnv` is the batched :class:`~ragen_torchrl.envs.text_env.TextGameEnv`
around it. One turn, one pull: the answer must be one of the two arm names of the row's
level (``game.action_names`` differs per level, and the base env parses each reply
against its own row's names); any other text is a format error.

Levels come from ``level_seed`` (arm names, which one is risky, display order); payouts
come from ``sample_seed``, so the G samples of one group see the same arms but draw
independent payouts. Validation seeds (``[2**30, 2**31)``) use the held-out name pairs
(``split="val"``), every other seed (training and demonstrations) the training pairs, so
no arm name is shared between training and validation.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = BanditEnv(num_envs=1)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([3]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> arm = env.games[0].low_risk_arm
    >>> reply = History(role="assistant", content=f"<think>safe</think><answer>{arm}</answer>", batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> round(out["reward"].item(), 4), out["done"].item(), out["success"].item()
    (0.1, True, False)
"""

from __future__ import annotations

from typing import Any

from .games.bandit import BanditGame
from .splits import level_split
from .text_env import TextGameEnv, sample_seed

__all__ = ["BanditEnv", "BanditGame"]

SYSTEM_FORMAT = "Reply <think>reasoning</think><answer>arm name</answer>, with exactly one arm name."


class BanditEnv(TextGameEnv):
    """Batched two-armed bandit chat env (one turn).

    Args:
        num_envs: batch size.
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv`
            (defaults: ``max_turn=1``, ``max_actions_per_turn=1``,
            ``max_actions_per_traj=1``; the game ends after the first pull anyway).

    Example:
        >>> env = BanditEnv(num_envs=2)
        >>> from ragen_torchrl.envs.games.bandit import VAL_NAME_PAIRS
        >>> held_out = {name for pair in VAL_NAME_PAIRS for name in pair}
        >>> set(env.game_factory(2**30 + 1, 0).action_names) <= held_out  # a validation level
        True
    """

    def __init__(self, *, num_envs: int = 1, **kwargs: Any) -> None:
        kwargs.setdefault("max_turn", 1)
        kwargs.setdefault("max_actions_per_turn", 1)
        kwargs.setdefault("max_actions_per_traj", 1)
        kwargs.setdefault("system_prompt", f"{BanditGame.instructions} {SYSTEM_FORMAT}")

        def factory(level_seed: int, sample: int) -> BanditGame:
            return BanditGame.generate(
                level_seed, split=level_split(level_seed), payout_seed=sample_seed(level_seed, sample)
            )

        super().__init__(factory, num_envs=num_envs, **kwargs)
