"""Flat-grid geometry and search for Sokoban (pure Python, no torch).

Cells are flat integers ``row * width + col``. Here: the neighbour table of a room
(:func:`_neighbours`), the cells from which a lone box can still reach a target
(:func:`_live_mask`, used to prune dead pushes), the breadth-first push planner over
``(player, boxes)`` states (:func:`_bfs_plan`, behind :meth:`SokobanGame.solve
<ragen_torchrl.envs.games.sokoban.SokobanGame.solve>`) and the minimum-cost box-to-target
matching (:func:`_min_assignment`, the game's ``progress()``). Directions are indices into
:data:`ACTIONS` / :data:`_DELTAS`.

Example:
    >>> nbr = _neighbours(3, 4, bytes([1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1]))  # one row of 2 floor cells
    >>> nbr[5]   # Up, Down, Left (walls), Right -> cell 6
    (-1, -1, -1, 6)
    >>> _min_assignment([(1, 1)], [(1, 2)])
    (1, [((1, 1), (1, 2))])
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Iterable, Sequence

__all__ = ["ACTIONS"]


#: canonical action names, in the order of :data:`_DELTAS`
ACTIONS: tuple[str, ...] = ("Up", "Down", "Left", "Right")


_DELTAS = ((-1, 0), (1, 0), (0, -1), (0, 1))


_ACTION_INDEX = {name.lower(): i for i, name in enumerate(ACTIONS)}


@lru_cache(maxsize=4096)
def _neighbours(height: int, width: int, walls: bytes) -> tuple[tuple[int, int, int, int], ...]:
    """``nbr[p][d]``: the cell reached from ``p`` in direction ``d``, or -1 (wall / outside)."""
    out = []
    for p in range(height * width):
        r, c = divmod(p, width)
        row = []
        for dr, dc in _DELTAS:
            rr, cc = r + dr, c + dc
            if 0 <= rr < height and 0 <= cc < width and not walls[rr * width + cc]:
                row.append(rr * width + cc)
            else:
                row.append(-1)
        out.append(tuple(row))
    return tuple(out)


@lru_cache(maxsize=4096)
def _live_mask(height: int, width: int, walls: bytes, targets: frozenset[int]) -> int:
    """Bitmask of cells from which a lone box can still reach some target.

    Computed by pulling a box backwards from every target (the player needs two free cells
    behind the box). Boxes pushed onto other cells are dead, so the solver prunes them;
    this keeps BFS plans optimal.
    """
    nbr = _neighbours(height, width, walls)
    live = 0
    stack = list(targets)
    for t in targets:
        live |= 1 << t
    while stack:
        b = stack.pop()
        for d in range(4):
            p1 = nbr[b][d]
            if p1 < 0 or live >> p1 & 1:
                continue
            if nbr[p1][d] < 0:
                continue
            live |= 1 << p1
            stack.append(p1)
    return live


def _mask(cells: Iterable[int]) -> int:
    m = 0
    for c in cells:
        m |= 1 << c
    return m


def _bfs_plan(
    nbr: Sequence[Sequence[int]],
    ncells: int,
    player: int,
    boxmask: int,
    goalmask: int,
    live: int,
    max_nodes: int,
) -> list[int] | None:
    """Shortest move sequence (direction indices) from a state to ``goalmask``, or None."""
    if boxmask == goalmask:
        return []
    start = boxmask * ncells + player
    parent: dict[int, tuple[int, int] | None] = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for key in frontier:
            bm, p = divmod(key, ncells)
            row = nbr[p]
            for d in range(4):
                q = row[d]
                if q < 0:
                    continue
                if bm >> q & 1:
                    r = nbr[q][d]
                    if r < 0 or bm >> r & 1 or not live >> r & 1:
                        continue
                    nbm = bm ^ (1 << q) ^ (1 << r)
                else:
                    nbm = bm
                nk = nbm * ncells + q
                if nk in parent:
                    continue
                parent[nk] = (key, d)
                if nbm == goalmask:
                    plan = []
                    k: int | None = nk
                    while parent[k] is not None:
                        k, dd = parent[k]  # type: ignore[misc]
                        plan.append(dd)
                    plan.reverse()
                    return plan
                if len(parent) >= max_nodes:
                    return None
                nxt.append(nk)
        frontier = nxt
    return None


def _min_assignment(boxes: Sequence[tuple[int, int]], targets: Sequence[tuple[int, int]]):
    """``(cost, pairs)``: minimum total Manhattan distance matching of boxes to targets.

    Exact (over permutations) up to 6 boxes; beyond that each box takes its nearest target.
    """

    def dist(a, b):
        return abs(a[0] - b[0]) + abs(a[1] - b[1])

    if not boxes:
        return 0, []
    if len(boxes) <= 6 and len(boxes) == len(targets):
        best = None
        for perm in itertools.permutations(range(len(targets))):
            cost = sum(dist(b, targets[j]) for b, j in zip(boxes, perm))
            if best is None or cost < best[0]:
                best = (cost, perm)
        assert best is not None
        return best[0], [(b, targets[j]) for b, j in zip(boxes, best[1])]
    pairs = [(b, min(targets, key=lambda t: dist(b, t))) for b in boxes]
    return sum(dist(b, t) for b, t in pairs), pairs
