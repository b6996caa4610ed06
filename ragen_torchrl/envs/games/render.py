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

``coord_frames=True`` also frames every tile in a colour that encodes where it is: red grows with
the row and blue with the column, from 0 on the first to 255 on the last (green 0), in a border of
``max(1, tile_px // 7)`` pixels (4 at 28 px, inside the tile and clear of the marker). A small
vision-language model cannot tell one tile's position from another's by its multimodal rope
alone (a tiny text tower's height and width rope sections turn by almost nothing per tile), so
the frame puts each tile's row and column into its own pixels.

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


def render_board(
    board: Sequence[str], palette: Mapping[str, Tile], tile_px: int = DEFAULT_TILE_PX, *, coord_frames: bool = False
) -> np.ndarray:
    """The uint8 ``[3, rows * tile_px, cols * tile_px]`` image of ``board`` (channels first, RGB);
    ``coord_frames``: each tile framed in its position colour (see the module docstring).

    Raises ``ValueError`` for an empty or ragged board, a symbol not in ``palette`` or a
    ``tile_px`` below 1.

    Example:
        >>> img = render_board(["_P"], FROZENLAKE_PALETTE, tile_px=4)
        >>> img[0].tolist()  # red channel: ice, then the player's square inside ice
        [[200, 200, 200, 200, 200, 200, 200, 200], [200, 200, 200, 200, 200, 220, 220, 200], \
[200, 200, 200, 200, 200, 220, 220, 200], [200, 200, 200, 200, 200, 200, 200, 200]]
        >>> framed = render_board(["__", "__"], FROZENLAKE_PALETTE, tile_px=7, coord_frames=True)
        >>> framed[:, 0, 0].tolist(), framed[:, 7, 13].tolist(), framed[:, 3, 3].tolist()  # (0, 0), (1, 1), inside
        ([0, 0, 0], [255, 0, 255], [200, 230, 255])
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
    img = np.ascontiguousarray(np.block(grid))
    if coord_frames:
        _frame_tiles(img, len(board), width, tile_px)
    return img


def _position_colour(index: int, count: int) -> int:
    return round(255 * index / (count - 1)) if count > 1 else 0


def _frame_tiles(img: np.ndarray, rows: int, cols: int, tile_px: int) -> None:
    """Paint each tile's border (in place) red by its row and blue by its column."""
    b = max(1, tile_px // 7)
    for r in range(rows):
        for c in range(cols):
            colour = np.array([_position_colour(r, rows), 0, _position_colour(c, cols)], dtype=np.uint8)[:, None, None]
            tile = img[:, r * tile_px : (r + 1) * tile_px, c * tile_px : (c + 1) * tile_px]
            tile[:, :b, :] = colour
            tile[:, -b:, :] = colour
            tile[:, :, :b] = colour
            tile[:, :, -b:] = colour


def _tile(tile: Tile, tile_px: int) -> np.ndarray:
    img = np.empty((3, tile_px, tile_px), dtype=np.uint8)
    img[:] = np.asarray(tile.background, dtype=np.uint8)[:, None, None]
    if tile.marker is not None:
        m = tile_px // 4
        img[:, m : tile_px - m, m : tile_px - m] = np.asarray(tile.marker, dtype=np.uint8)[:, None, None]
    return img
