"""The two-armed bandit as a TorchRL chat environment.

The rules live in :class:`~ragen_torchrl.envs.games.bandit.BanditGame` (pure Python);
:class:`BanditEnv` is the batched :class:`~ragen_torchrl.envs.text_env.TextGameEnv`
around it. One turn, one pull: the answer must be one of the two arm names of the row's
level (``game.action_names`` differs per level, and the base env parses each reply
against its own row's names); any other text is a format error.

Levels come from ``level_seed`` (the name pair, and so which arm is risky, and the
display order). The names carry the meaning (``Teacher`` vs ``Trader``); the prompt never
says which arm is risky. Validation seeds (``[2**30, 2**31)``) use the held-out name pairs
(``split="val"``), every other seed (training and demonstrations) the training pairs, so
no arm name is shared between training and validation.

Payouts: with ``payout_seeding="level"`` (default, as the reference, where a group's
samples share the level seed) the G samples of a group share the payout draw, so samples
pulling the same arm get the same reward and the group's reward spread comes from the
choices; ``payout_seeding="sample"`` draws each sample's payout from its ``sample_seed``.

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

from ragen_torchrl.checks import check_choice

from .games.bandit import BanditGame
from .splits import level_split
from .text_env import TextGameEnv, sample_seed

__all__ = ["BanditEnv", "BanditGame", "PAYOUT_SEEDINGS"]

#: what seeds a row's payout draw: its level seed (shared by the group) or its sample seed
PAYOUT_SEEDINGS = ("level", "sample")

SYSTEM_FORMAT = "Reply <think>reasoning</think><answer>arm name</answer>, with exactly one arm name."


class BanditEnv(TextGameEnv):
    """Batched two-armed bandit chat env (one turn).

    Args:
        num_envs: batch size.
        payout_seeding: ``"level"`` (default: payouts drawn from the level seed, shared by
            a group) or ``"sample"`` (each row's ``sample_seed``).
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

    def __init__(self, *, num_envs: int = 1, payout_seeding: str = "level", **kwargs: Any) -> None:
        check_choice("payout_seeding", payout_seeding, PAYOUT_SEEDINGS)
        self.payout_seeding = payout_seeding
        kwargs.setdefault("max_turn", 1)
        kwargs.setdefault("max_actions_per_turn", 1)
        kwargs.setdefault("max_actions_per_traj", 1)
        kwargs.setdefault("system_prompt", f"{BanditGame.instructions} {SYSTEM_FORMAT}")

        def factory(level_seed: int, sample: int) -> BanditGame:
            # payout_seed None: the game draws payouts from the level seed
            payout = sample_seed(level_seed, sample) if payout_seeding == "sample" else None
            return BanditGame.generate(level_seed, split=level_split(level_seed), payout_seed=payout)

        super().__init__(factory, num_envs=num_envs, **kwargs)
