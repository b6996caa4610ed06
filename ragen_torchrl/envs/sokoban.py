"""Sokoban as a TorchRL chat environment.

The rules and the reverse-play level generator live in
:class:`~ragen_torchrl.envs.games.sokoban.SokobanGame` (pure Python);
:class:`SokobanEnv` is the batched :class:`~ragen_torchrl.envs.text_env.TextGameEnv`
around it. Sokoban is deterministic, so ``sample_seed`` does not change anything: every
sample of a prompt group plays the same room.

Validation rooms are disjoint from training rooms by content (see
:mod:`ragen_torchrl.envs.splits`): a generated room is a validation room when the hash
of its text falls in the lowest ``val_fraction`` of the hash range; validation seeds
(``[2**30, 2**31)``) only get such rooms and all other seeds only the others.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = SokobanEnv(num_envs=1, level="######\\n#PX_O#\\n######")
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> reply = History(role="assistant", content="<think>push</think><answer>Right || Right</answer>", batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> round(out["reward"].item(), 4), out["success"].item()
    (10.8, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..checks import check_int
from .games.sokoban import SokobanGame
from .splits import draw_in_split
from .text_env import TextGameEnv

__all__ = ["SokobanEnv", "SokobanGame"]


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    return check_int(name, value, minimum=minimum, noun="an integer")


class SokobanEnv(TextGameEnv):
    """Batched Sokoban chat env (RAGEN: 6x6 with 1 box, or 8x8 with 2 boxes).

    Args:
        num_envs: batch size.
        dim: ``(height, width)`` of generated rooms, wall border included (>= 3 each).
        num_boxes: boxes (= targets) per room.
        num_steps: random-walk steps of the room topology (default ``1.7 * (h + w)``).
        search_depth: maximum pulls on one reverse-play path of the generator.
        max_nodes: node budget of the reverse-play search per room.
        level: a fixed room in the text format of ``SokobanGame.from_text`` for every
            row (tests, demos); rooms are generated per seed otherwise.
        val_fraction: share of the room space held out for validation (0 = split by seed
            only, as the paper; generated rooms may then repeat across splits).
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv`.

    Example:
        >>> env = SokobanEnv(num_envs=2, dim=(8, 8), num_boxes=2)
        >>> len(env.game_factory(7, 0).boxes)
        2
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        dim: Sequence[int] = (6, 6),
        num_boxes: int = 1,
        num_steps: int | None = None,
        search_depth: int = 100,
        max_nodes: int = 3000,
        level: str | None = None,
        val_fraction: float = 0.1,
        **kwargs: Any,
    ) -> None:
        if isinstance(dim, (str, bytes)) or not isinstance(dim, Sequence) or len(dim) != 2:
            raise ValueError(f"dim must be a pair (height, width), got {dim!r}")
        height = _positive_int("dim[0] (height)", dim[0], 3)
        width = _positive_int("dim[1] (width)", dim[1], 3)
        num_boxes = _positive_int("num_boxes", num_boxes)
        # the player and every box need their own interior cell
        if num_boxes + 1 > (height - 2) * (width - 2):
            raise ValueError(
                f"num_boxes={num_boxes} does not fit a {height}x{width} room (interior {height - 2}x{width - 2})"
            )
        if num_steps is not None:
            num_steps = _positive_int("num_steps", num_steps)
        search_depth = _positive_int("search_depth", search_depth)
        max_nodes = _positive_int("max_nodes", max_nodes)
        if (
            isinstance(val_fraction, bool)
            or not isinstance(val_fraction, (int, float))
            or not 0.0 <= val_fraction < 1.0
        ):
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
        if level is not None:
            SokobanGame.from_text(level)  # fail now (ValueError naming the problem), not at reset
        self.dim, self.num_boxes, self.level, self.val_fraction = (height, width), num_boxes, level, float(val_fraction)

        def generate(seed: int) -> SokobanGame:
            return SokobanGame.generate(
                seed,
                dim=(height, width),
                num_boxes=num_boxes,
                num_steps=num_steps,
                search_depth=search_depth,
                max_nodes=max_nodes,
            )

        def factory(level_seed: int, sample: int) -> SokobanGame:
            # deterministic dynamics: the sample seed is not needed
            if level is not None:
                return SokobanGame.from_text(level)
            return draw_in_split(generate, SokobanGame.to_text, level_seed, self.val_fraction)

        super().__init__(factory, num_envs=num_envs, **kwargs)
