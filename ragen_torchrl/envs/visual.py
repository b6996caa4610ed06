"""Image-conditioned grid games: Sokoban and FrozenLake observed as rendered board images.

:class:`VisualSokobanEnv` and :class:`VisualFrozenLakeEnv` are the text envs (same game cores,
rules, rewards, level splits and reply format) whose observation is also a picture of the
board: every reset and step writes the uint8 ``[3, H, W]`` image of each row's board under
``"image"`` (:data:`ragen_torchrl.keys.IMAGE`, declared in the specs), drawn tile by tile by
:func:`ragen_torchrl.envs.games.render.render_board` (28 px per cell by default: one Qwen2-VL
image token per cell).

``observation`` chooses what the user message's text says:

* ``"image"``: only :data:`IMAGE_TEXT` (plus the feedback prefix after an invalid reply): the
  board is in the image alone;
* ``"image+text"``: the text env's observation (the grid as text) as well.

The chat history stays text (``("history", "prompt")`` is a plain ``History``); every user
message of a visual env's conversation is an observation and has exactly one image, the
``"image"`` of the step that wrote it. :func:`image_chat` turns such a conversation into the
message dicts Hugging Face vision-language chat templates take (a user message's content is
``[{"type": "image"}, {"type": "text", "text": ...}]``), with the images in order beside it.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> env = VisualFrozenLakeEnv(num_envs=2, tile_px=4)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([3, 3]), batch_size=[2]))
    >>> td["image"].shape, td["image"].dtype
    (torch.Size([2, 3, 16, 16]), torch.uint8)
    >>> td["history", "prompt"][0].content[-1]
    'The board is in the image.'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Composite

from ..checks import check_choice
from ..keys import ENV_INDEX, IMAGE
from .frozenlake import FrozenLakeEnv
from .games.base import TextGame
from .games.render import (
    DEFAULT_TILE_PX,
    FROZENLAKE_PALETTE,
    SOKOBAN_PALETTE,
    Tile,
    frozenlake_board,
    render_board,
)
from .sokoban import SokobanEnv

__all__ = ["IMAGE_TEXT", "VISUAL_OBSERVATIONS", "VisualFrozenLakeEnv", "VisualSokobanEnv", "image_chat"]

#: what ``observation=`` may be
VISUAL_OBSERVATIONS = ("image", "image+text")
#: the text of an ``observation="image"`` user message
IMAGE_TEXT = "The board is in the image."


def image_chat(messages: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """A visual env's conversation as vision-language chat-template messages: every user message
    gets one image placeholder before its text (the images are passed in the same order).

    Example:
        >>> image_chat([("system", "rules"), ("user", "board"), ("assistant", "Left")])[1]
        {'role': 'user', 'content': [{'type': 'image'}, {'type': 'text', 'text': 'board'}]}
    """
    out = []
    for role, content in messages:
        if role == "user":
            out.append({"role": role, "content": [{"type": "image"}, {"type": "text", "text": content}]})
        else:
            out.append({"role": role, "content": [{"type": "text", "text": content}]})
    return out


class _VisualBoard:
    """Mixin over a :class:`TextGameEnv` subclass: renders each row's board into ``"image"``.

    Subclasses set ``palette`` and implement ``board(game)``; ``tile_px`` and ``visual_observation``
    must be set before the text env's ``__init__`` (which builds the specs).
    """

    palette: dict[str, Tile]
    tile_px: int
    coord_frames: bool
    visual_observation: str

    def board(self, game: TextGame) -> list[str]:
        raise NotImplementedError

    def render(self, game: TextGame) -> torch.Tensor:
        """The uint8 ``[3, H, W]`` image of ``game``'s board."""
        return torch.from_numpy(
            render_board(self.board(game), self.palette, self.tile_px, coord_frames=self.coord_frames)
        )

    def observation_text(self, game: TextGame, prefix: str = "") -> str:
        if self.visual_observation == "image":
            return f"{prefix}{IMAGE_TEXT}"
        return super().observation_text(game, prefix)

    def _make_specs(self) -> None:
        super()._make_specs()
        shape = tuple(self.render(self.game_factory(0, 0)).shape)
        self.full_observation_spec.update(
            Composite({IMAGE: Bounded(0, 255, shape=self.batch_size + shape, dtype=torch.uint8)}, shape=self.batch_size)
        )

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        out = super()._reset(tensordict, **kwargs)
        out.set(IMAGE, torch.stack([self.render(g) for g in self.games]))
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = super()._step(tensordict)
        rows = out.get(ENV_INDEX).tolist()
        out.set(IMAGE, torch.stack([self.render(self.games[i]) for i in rows]))
        return out


def _check_visual(observation: str, tile_px: int, coord_frames: bool) -> None:
    check_choice("observation", observation, VISUAL_OBSERVATIONS)
    if isinstance(tile_px, bool) or not isinstance(tile_px, int) or tile_px < 1:
        raise ValueError(f"tile_px must be a positive integer, got {tile_px!r}")
    if not isinstance(coord_frames, bool):
        raise ValueError(f"coord_frames must be true or false, got {coord_frames!r}")


class VisualSokobanEnv(_VisualBoard, SokobanEnv):
    """Sokoban observed as an image of the room (``env=sokoban_visual``).

    Args:
        observation: ``"image"`` (default: the user message says only :data:`IMAGE_TEXT`) or
            ``"image+text"`` (the text env's grid and coordinates as well).
        tile_px: pixels per cell side (default 28: one Qwen2-VL image token per cell).
        coord_frames: frame each tile in a colour that encodes its row and column (default; see
            :mod:`ragen_torchrl.envs.games.render`), so a small model can tell where a tile is.
        **kwargs: everything :class:`~ragen_torchrl.envs.sokoban.SokobanEnv` takes.

    Example:
        >>> env = VisualSokobanEnv(level="#####\\n#PXO#\\n#####", tile_px=2)
        >>> env.observation_spec["image"].shape
        torch.Size([1, 3, 6, 10])
    """

    palette = SOKOBAN_PALETTE

    def __init__(
        self, *, observation: str = "image", tile_px: int = DEFAULT_TILE_PX, coord_frames: bool = True, **kwargs: Any
    ) -> None:
        _check_visual(observation, tile_px, coord_frames)
        self.visual_observation, self.tile_px, self.coord_frames = observation, tile_px, coord_frames
        super().__init__(**kwargs)

    def board(self, game: TextGame) -> list[str]:
        return game.to_text().split("\n")


class VisualFrozenLakeEnv(_VisualBoard, FrozenLakeEnv):
    """FrozenLake observed as an image of the lake (``env=frozenlake_visual``).

    Args:
        observation: ``"image"`` (default) or ``"image+text"`` (the text observation as well, in
            the format ``text_observation`` names).
        text_observation: the text env's ``observation`` (``"annotated"`` or ``"paper"``), used by
            ``"image+text"``.
        tile_px: pixels per cell side (default 28: one Qwen2-VL image token per cell).
        coord_frames: frame each tile in a colour that encodes its row and column (default; see
            :mod:`ragen_torchrl.envs.games.render`), so a small model can tell where a tile is.
        **kwargs: everything :class:`~ragen_torchrl.envs.frozenlake.FrozenLakeEnv` takes.

    Example:
        >>> env = VisualFrozenLakeEnv(desc=["SF", "HG"], observation="image+text", tile_px=2)
        >>> print(env.observation_text(env.game_factory(0, 0)).splitlines()[0])
        P_
    """

    palette = FROZENLAKE_PALETTE

    def __init__(
        self,
        *,
        observation: str = "image",
        text_observation: str = "annotated",
        tile_px: int = DEFAULT_TILE_PX,
        coord_frames: bool = True,
        **kwargs: Any,
    ) -> None:
        _check_visual(observation, tile_px, coord_frames)
        self.visual_observation, self.tile_px, self.coord_frames = observation, tile_px, coord_frames
        super().__init__(observation=text_observation, **kwargs)

    def board(self, game: TextGame) -> list[str]:
        return frozenlake_board(game.desc, game.player)
