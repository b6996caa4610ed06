"""Board images of the grid games: one flat tile per board cell (pure numpy, no torch).

A board is a list of equal-length strings, one symbol per cell (Sokoban's level text, or
:func:`frozenlake_board`). :func:`render_board` draws each symbol as a ``tile_px`` x ``tile_px``
tile of a :class:`Tile`: a background colour (the cell: floor, wall, hole, target, ...) and an
optional centred square marker (the object on it: player, box), the square spanning pixels
``[tile_px // 4, tile_px - tile_px // 4)`` of the tile in both directions. Nothing is
anti-aliased, so every pixel is one of the palette's colours.

The default ``tile_px`` is 28: Qwen2-VL cuts images into 14 px patches and merges 2 x 2 of them
into one language-model token, so a 28 px tile is exactly one image token and a small model
reads one cell per token.

Example:
    >>> img = render_board(["#P"], SOKOBAN_PALETTE, tile_px=4)
    >>> img.shape, img.dtype
    ((3, 4, 8), dtype('uint8'))
    >>> img[:, 0, 0].tolist(), img[:, 1, 5].tolist(), img[:, 0, 4].tolist()
    ([90, 90, 90], [40, 80, 220], [235, 235, 235])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEFAULT_TILE_PX",
    "FROZENLAKE_PALETTE",
    "SOKOBAN_PALETTE",
    "Tile",
    "frozenlake_board",
    "render_board",
]

#: pixels per tile side: one merged 2 x 2 group of Qwen2-VL's 14 px patches
DEFAULT_TILE_PX = 28

RGB = tuple[int, int, int]


@dataclass(frozen=True)
class Tile:
    """How one board symbol is drawn: ``background`` fills the tile, ``marker`` (if any) a centred square."""

    background: RGB
    marker: RGB | None = None


_FLOOR, _TARGET, _BOX, _PLAYER = (235, 235, 235), (150, 220, 150), (170, 110, 40), (40, 80, 220)
#: Sokoban's level-text symbols (``SokobanGame.to_text``): the cell is the background, a box or the
#: player the marker, so a box on a target keeps the target's colour around it
SOKOBAN_PALETTE: dict[str, Tile] = {
    "#": Tile((90, 90, 90)),
    "_": Tile(_FLOOR),
    "O": Tile(_TARGET),
    "X": Tile(_FLOOR, _BOX),
    "√": Tile(_TARGET, _BOX),
    "P": Tile(_FLOOR, _PLAYER),
    "S": Tile(_TARGET, _PLAYER),
}

_ICE, _HOLE, _GOAL, _AGENT = (200, 230, 255), (20, 40, 90), (80, 200, 80), (220, 40, 40)
#: :func:`frozenlake_board`'s symbols: ice, hole, goal, and the player (red square) on each of them
FROZENLAKE_PALETTE: dict[str, Tile] = {
    "_": Tile(_ICE),
    "O": Tile(_HOLE),
    "G": Tile(_GOAL),
    "P": Tile(_ICE, _AGENT),
    "Q": Tile(_HOLE, _AGENT),
    "W": Tile(_GOAL, _AGENT),
}


def frozenlake_board(desc: Sequence[str], player: tuple[int, int]) -> list[str]:
    """A FrozenLake map (gymnasium letters ``SFHG``) and the player's cell as board symbols.

    Unlike the text grid, the symbols keep the tile under the player (``P`` on ice, ``Q`` in a
    hole, ``W`` on the goal), so the image shows where the player stands.

    Example:
        >>> frozenlake_board(["SF", "HG"], (1, 1))
        ['__', 'OW']
    """
    rows = []
    for r, line in enumerate(desc):
        cells = []
        for c, letter in enumerate(line):
            tile = {"H": "O", "G": "G"}.get(letter, "_")
            if (r, c) == tuple(player):
                tile = {"_": "P", "O": "Q", "G": "W"}[tile]
            cells.append(tile)
        rows.append("".join(cells))
    return rows


def render_board(board: Sequence[str], palette: Mapping[str, Tile], tile_px: int = DEFAULT_TILE_PX) -> np.ndarray:
    """The uint8 ``[3, rows * tile_px, cols * tile_px]`` image of ``board`` (channels first, RGB).

    Raises ``ValueError`` for an empty or ragged board, a symbol not in ``palette`` or a
    ``tile_px`` below 1.

    Example:
        >>> img = render_board(["_P"], FROZENLAKE_PALETTE, tile_px=4)
        >>> img[0].tolist()  # red channel: ice, then the player's square inside ice
        [[200, 200, 200, 200, 200, 200, 200, 200], [200, 200, 200, 200, 200, 220, 220, 200], \
[200, 200, 200, 200, 200, 220, 220, 200], [200, 200, 200, 200, 200, 200, 200, 200]]
    """
    if isinstance(tile_px, bool) or not isinstance(tile_px, int) or tile_px < 1:
        raise ValueError(f"tile_px must be a positive integer, got {tile_px!r}")
    if not board or not board[0]:
        raise ValueError("render_board: the board is empty")
    width = len(board[0])
    if any(len(row) != width for row in board):
        raise ValueError(f"render_board: rows of different lengths {[len(row) for row in board]}")
    unknown = sorted({s for row in board for s in row} - set(palette))
    if unknown:
        raise ValueError(f"render_board: symbols {unknown} are not in the palette ({sorted(palette)})")
    tiles = {symbol: _tile(t, tile_px) for symbol, t in palette.items()}
    grid = [[tiles[s] for s in row] for row in board]
    return np.ascontiguousarray(np.block(grid))


def _tile(tile: Tile, tile_px: int) -> np.ndarray:
    img = np.empty((3, tile_px, tile_px), dtype=np.uint8)
    img[:] = np.asarray(tile.background, dtype=np.uint8)[:, None, None]
    if tile.marker is not None:
        m = tile_px // 4
        img[:, m : tile_px - m, m : tile_px - m] = np.asarray(tile.marker, dtype=np.uint8)[:, None, None]
    return img
