"""FrozenLake as a TorchRL chat environment.

The rules live in :class:`~ragen_torchrl.envs.games.frozenlake.FrozenLakeGame` (pure
Python); :class:`FrozenLakeEnv` is the batched :class:`~ragen_torchrl.envs.text_env.TextGameEnv`
around it.

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

from .games.frozenlake import FrozenLakeGame
from .text_env import TextGameEnv, sample_seed

__all__ = ["FrozenLakeEnv", "FrozenLakeGame"]


class FrozenLakeEnv(TextGameEnv):
    """Batched FrozenLake chat env.

    Args:
        num_envs: batch size.
        size: side of generated maps (default 4).
        p_frozen: frozen-tile probability of generated maps (default 0.9).
        success_rate: probability that the intended move happens (1.0 = not slippery).
        desc: a fixed map for every row (tests, demos); levels are generated per seed otherwise.
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv`.
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        size: int = 4,
        p_frozen: float = 0.9,
        success_rate: float = 1.0,
        desc: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= success_rate <= 1.0:
            raise ValueError(f"success_rate must be in [0, 1], got {success_rate}")
        if not 0.0 < p_frozen <= 1.0:
            raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
        self.size, self.p_frozen, self.success_rate, self.desc = size, p_frozen, success_rate, desc

        def factory(level_seed: int, sample: int) -> FrozenLakeGame:
            return FrozenLakeGame(
                desc=desc,
                seed=level_seed,
                size=size,
                p_frozen=p_frozen,
                success_rate=success_rate,
                slip_seed=sample_seed(level_seed, sample),
            )

        super().__init__(factory, num_envs=num_envs, **kwargs)
