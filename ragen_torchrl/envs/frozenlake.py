"""FrozenLake as a TorchRL chat environment.

The rules live in :class:`~ragen_torchrl.envs.games.frozenlake.FrozenLakeGame` (pure
Python); :class:`FrozenLakeEnv` is the batched :class:`~ragen_torchrl.envs.text_env.TextGameEnv`
around it.

All G samples of a group share the level seed, slips included (REFERENCE rules of RAGEN-2,
arXiv 2604.06268): the slip RNG is seeded by the level seed, so samples that take the same
actions see the same slips and reward differences come from the policy, not from luck.
``slip_seeding="sample"`` gives each sample its own slips instead (an ablation).

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = FrozenLakeEnv(num_envs=1, desc=["SF", "HG"])
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> reply = History(role="assistant", content="<think>right</think><answer>Right || Down</answer>", batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> out["reward"].item(), out["success"].item()
    (1.0, True)
"""

from __future__ import annotations

from typing import Any

from ragen_torchrl.checks import check_choice

from .games.frozenlake import OBSERVATIONS, FrozenLakeGame
from .text_env import TextGameEnv, sample_seed

__all__ = ["FrozenLakeEnv", "FrozenLakeGame", "OBSERVATIONS", "SLIP_SEEDINGS"]

#: what seeds the slip RNG of a row: its level seed (shared by the group) or its sample seed
SLIP_SEEDINGS = ("level", "sample")


class FrozenLakeEnv(TextGameEnv):
    """Batched FrozenLake chat env.

    Args:
        num_envs: batch size.
        size: side of generated maps (default 4).
        p_frozen: frozen-tile probability of generated maps (default 0.9).
        success_rate: probability that the intended move happens (1.0 = not slippery).
        desc: a fixed map for every row (tests, demos); levels are generated per seed otherwise.
        observation: ``"annotated"`` (default: grid, coordinates, goal direction and what
            each move reaches; the tiny model learns from it) or ``"paper"`` (RAGEN-2's grid
            plus coordinate listing); see :mod:`ragen_torchrl.envs.games.frozenlake`.
        slip_seeding: ``"level"`` (default, reference: slips follow the level seed, shared
            by the group) or ``"sample"`` (slips follow the row's ``sample_seed``).
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv`.

    Example:
        >>> env = FrozenLakeEnv(num_envs=2, success_rate=0.5)
        >>> a, b = (env.game_factory(7, sample_seed(7, g)) for g in (0, 1))  # 2 samples of level 7
        >>> moves = [(a.step(m)[0], b.step(m)[0]) for m in ("Right", "Down", "Right")]
        >>> a.player == b.player  # same actions, same slips
        True
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        size: int = 4,
        p_frozen: float = 0.9,
        success_rate: float = 1.0,
        desc: list[str] | None = None,
        observation: str = "annotated",
        slip_seeding: str = "level",
        **kwargs: Any,
    ) -> None:
        check_choice("observation", observation, OBSERVATIONS)
        check_choice("slip_seeding", slip_seeding, SLIP_SEEDINGS)
        if not 0.0 <= success_rate <= 1.0:
            raise ValueError(f"success_rate must be in [0, 1], got {success_rate}")
        if not 0.0 < p_frozen <= 1.0:
            raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
        self.size, self.p_frozen, self.success_rate, self.desc = size, p_frozen, success_rate, desc
        self.observation, self.slip_seeding = observation, slip_seeding

        def factory(level_seed: int, sample: int) -> FrozenLakeGame:
            return FrozenLakeGame(
                desc=desc,
                seed=level_seed,
                size=size,
                p_frozen=p_frozen,
                success_rate=success_rate,
                # None: the game seeds its slip RNG with the level seed
                slip_seed=sample_seed(level_seed, sample) if slip_seeding == "sample" else None,
                observation=observation,
            )

        super().__init__(factory, num_envs=num_envs, **kwargs)
