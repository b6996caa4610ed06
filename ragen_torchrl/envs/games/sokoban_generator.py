"""The reverse-play Sokoban level generator (pure Python, no torch).

It follows gym-sokoban / RAGEN:

1. room topology: a random walk stamps small floor masks inside a walled border;
2. the player and the targets are put on random floor cells, boxes start on the targets
   (the solved state);
3. reverse play: the player *pulls* boxes backwards. A depth-first search over
   ``(player region, boxes)`` states (each search step walks the player inside its
   reachable region and pulls one box by one cell; ``search_depth`` bounds the pulls on
   a path and ``max_nodes`` the number of expanded states) keeps the state that
   maximises ``box_swaps x sum of box-to-own-target Manhattan distances`` among the
   states that are not solved (``box_swaps`` counts how often the pulled box changes);
4. one to three random player moves that do not touch a box.

Every pull is the reverse of a legal push, so a generated level is solvable by
construction; the tests check it with the BFS solver
:meth:`~ragen_torchrl.envs.games.sokoban.SokobanGame.solve`. A room that gives no unsolved
state is dropped and the generator retries with a derived seed. Generated levels are kept in
a small LRU pool (:data:`_LEVEL_POOL`) keyed by the generation arguments.
:meth:`SokobanGame.generate <ragen_torchrl.envs.games.sokoban.SokobanGame.generate>` is the
public entry point.

Example:
    >>> height, width, walls, targets, boxes, player = _generate_level_uncached(0, (6, 6), 1, 20, 100, 3000)
    >>> (height, width), len(targets), len(boxes), boxes != targets
    ((6, 6), 1, 1, True)
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Sequence

from ragen_torchrl.envs.games.sokoban_search import _DELTAS, _mask, _neighbours

# masks stamped by the random walk (offsets around the walker), as in gym-sokoban
_MASKS = (
    ((0, -1), (0, 0), (0, 1)),
    ((-1, 0), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, -1), (1, 0)),
    ((0, 0), (0, 1), (1, 0)),
)


_P_CHANGE_DIRECTION = 0.35


_MAX_GENERATION_ATTEMPTS = 1000


def _room_topology(rng: random.Random, height: int, width: int, num_steps: int) -> bytearray:
    """1 = floor, 0 = wall; the border is always wall."""
    level = bytearray(height * width)
    dirs = _DELTAS
    dr, dc = rng.choice(dirs)
    r = rng.randint(1, height - 2)
    c = rng.randint(1, width - 2)
    for _ in range(num_steps):
        if rng.random() < _P_CHANGE_DIRECTION:
            dr, dc = rng.choice(dirs)
        r = min(max(r + dr, 1), height - 2)
        c = min(max(c + dc, 1), width - 2)
        for mr, mc in rng.choice(_MASKS):
            level[(r + mr) * width + (c + mc)] = 1
    for cc in range(width):
        level[cc] = 0
        level[(height - 1) * width + cc] = 0
    for rr in range(height):
        level[rr * width] = 0
        level[rr * width + width - 1] = 0
    return level


def _reverse_play(
    rng: random.Random,
    nbr: Sequence[Sequence[int]],
    width: int,
    player: int,
    targets: tuple[int, ...],
    search_depth: int,
    max_nodes: int,
) -> tuple[int, tuple[int, ...]] | None:
    """Depth-first reverse play from the solved state; the best ``(player, boxes)`` or None."""
    tcoords = [divmod(t, width) for t in targets]
    goalmask = _mask(targets)
    n = len(targets)
    best: tuple[int, tuple[int, ...]] | None = None
    best_score = 0
    visited: set[tuple[int, int]] = set()
    # node: (player, boxes (indexed by own target), last pulled box, swaps, depth)
    stack: list[tuple[int, tuple[int, ...], int, int, int]] = [(player, targets, -1, 0, 0)]
    expanded = 0
    while stack and expanded < max_nodes:
        p, boxes, last, swaps, depth = stack.pop()
        boxmask = _mask(boxes)
        # player's reachable region (bitmask), boxes and walls block
        region = 1 << p
        todo = [p]
        while todo:
            x = todo.pop()
            for y in nbr[x]:
                if y >= 0 and not (region >> y & 1) and not (boxmask >> y & 1):
                    region |= 1 << y
                    todo.append(y)
        key = ((region & -region).bit_length() - 1, boxmask)
        if key in visited:
            continue
        visited.add(key)
        expanded += 1
        if swaps and boxmask != goalmask:
            disp = 0
            for i in range(n):
                br, bc = divmod(boxes[i], width)
                tr, tc = tcoords[i]
                disp += abs(br - tr) + abs(bc - tc)
            score = swaps * disp
            if score > best_score:
                best_score = score
                best = (p, boxes)
        if depth >= search_depth:
            continue
        children = []
        for i in range(n):
            b = boxes[i]
            row = nbr[b]
            for d in range(4):
                p1 = row[d]  # the player stands here, next to the box
                if p1 < 0 or not (region >> p1 & 1):
                    continue
                p2 = nbr[p1][d]  # ... and steps away, pulling the box onto p1
                if p2 < 0 or boxmask >> p2 & 1:
                    continue
                nb = boxes[:i] + (p1,) + boxes[i + 1 :]
                children.append((p2, nb, i, swaps + (i != last), depth + 1))
        rng.shuffle(children)
        stack.extend(children)
    return best


def _derived_seed(seed: int, attempt: int) -> int:
    return (seed * 0x9E3779B1 + attempt * 0x85EBCA77 + 0x27D4EB2F) & 0xFFFFFFFFFFFF


def _generate_level_uncached(
    seed: int,
    dim: tuple[int, int],
    num_boxes: int,
    num_steps: int,
    search_depth: int,
    max_nodes: int,
) -> tuple[int, int, bytes, frozenset[int], frozenset[int], int]:
    height, width = dim
    for attempt in range(_MAX_GENERATION_ATTEMPTS):
        rng = random.Random(_derived_seed(seed, attempt))
        level = _room_topology(rng, height, width, num_steps)
        floor = [i for i, v in enumerate(level) if v]
        if len(floor) < num_boxes + 2:
            continue
        cells = rng.sample(floor, num_boxes + 1)
        player, targets = cells[0], tuple(cells[1:])
        walls = bytes(1 - v for v in level)
        nbr = _neighbours(height, width, walls)
        found = _reverse_play(rng, nbr, width, player, targets, search_depth, max_nodes)
        if found is None:
            continue
        player, boxes = found
        boxmask = _mask(boxes)
        for _ in range(rng.randint(1, 3)):
            options = [q for q in nbr[player] if q >= 0 and not boxmask >> q & 1]
            if not options:
                break
            player = rng.choice(options)
        return height, width, walls, frozenset(targets), frozenset(boxes), player
    raise RuntimeError(
        f"Sokoban generation failed for seed={seed}, dim={dim}, num_boxes={num_boxes} "
        f"after {_MAX_GENERATION_ATTEMPTS} rooms; use a larger room or fewer boxes"
    )


class _LevelPool:
    """Small LRU cache of generated levels keyed by the generation arguments."""

    def __init__(self, maxsize: int = 4096):
        self.maxsize = maxsize
        self._data: OrderedDict[tuple, tuple] = OrderedDict()

    def get(self, key: tuple) -> tuple | None:
        level = self._data.get(key)
        if level is not None:
            self._data.move_to_end(key)
        return level

    def put(self, key: tuple, level: tuple) -> None:
        self._data[key] = level
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


_LEVEL_POOL = _LevelPool()
