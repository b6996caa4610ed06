"""Sokoban: push every box onto a target (pure Python, no torch).

Levels come from text (:meth:`SokobanGame.from_text`) or from the reverse-play generator
(:meth:`SokobanGame.generate`, :mod:`ragen_torchrl.envs.games.sokoban_generator`), which
follows gym-sokoban / RAGEN and makes levels that are solvable by construction; the tests
check it with the BFS solver :meth:`SokobanGame.solve`
(:mod:`ragen_torchrl.envs.games.sokoban_search`). This module holds the game rules, the
level text format and the rendering / reasoning text.

Positions are flat integers ``row * width + col`` inside the module; the public API uses
``(row, col)`` tuples, 0-based from the top-left corner (border walls included).

Example:
    >>> game = SokobanGame.from_text('''
    ... ######
    ... #PX_O#
    ... ######''')
    >>> game.solve()
    ['Right', 'Right']
    >>> game.step("Right")[:2]
    (-0.1, False)
    >>> round(game.step("Right")[0], 6), game.success
    (10.9, True)
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Sequence

from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.sokoban_generator import _LEVEL_POOL, _generate_level_uncached
from ragen_torchrl.envs.games.sokoban_search import (
    _ACTION_INDEX,
    ACTIONS,
    _bfs_plan,
    _live_mask,
    _mask,
    _min_assignment,
    _neighbours,
)

__all__ = ["SokobanGame", "ACTIONS", "SYMBOLS"]


#: text symbols
SYMBOLS = {
    "wall": "#",
    "floor": "_",
    "target": "O",
    "box": "X",
    "box_on_target": "√",
    "player": "P",
    "player_on_target": "S",
}


STEP_PENALTY = -0.1


BOX_ON_TARGET = 1.0


BOX_OFF_TARGET = -1.0


SOLVED_BONUS = 10.0


class SokobanGame(TextGame):
    """One Sokoban episode.

    Rewards: -0.1 per step; +1 when a box is pushed onto a target, -1 when one is pushed off
    a target; +10 (and ``done``, ``success``) when every box is on a target. A move into a
    wall, or a push of a box into a wall or another box, changes nothing
    (``action_is_effective`` False) and still costs -0.1. Steps after the end return
    ``(0.0, True, ...)`` without changing anything.

    ``progress()`` is the minimum-cost matching of boxes to targets under Manhattan distance
    (exact for up to 6 boxes, nearest target beyond): 0 when solved, lower is closer.
    """

    action_names: tuple[str, ...] | None = ACTIONS
    instructions: str = (
        "You are solving the Sokoban puzzle. You are the player and you must push every box "
        "onto a target. You can only push a box, you can not pull it, and you can not push "
        "a box into a wall or into another box. Symbols: # is a wall, _ is floor, O is a "
        "target, X is a box, √ is a box on a target, P is you, S is you on a target. "
        "Rows count down from 0 at the top and columns count right from 0 at the left. "
        "Your actions are Up, Down, Left and Right. Each step costs 0.1, a box on a target "
        "gives 1, a box taken off a target costs 1, and you get 10 when all boxes are on "
        "targets."
    )

    def __init__(
        self,
        height: int,
        width: int,
        walls: Iterable[tuple[int, int]],
        targets: Iterable[tuple[int, int]],
        boxes: Iterable[tuple[int, int]],
        player: tuple[int, int],
    ):
        """Build a level from ``(row, col)`` coordinates (everything else is floor)."""
        if height < 1 or width < 1:
            raise ValueError(f"Sokoban room must be at least 1x1, got {height}x{width}")
        wall_arr = bytearray(height * width)
        for r, c in walls:
            wall_arr[self._check(r, c, height, width, "wall")] = 1
        t = frozenset(self._check(r, c, height, width, "target") for r, c in targets)
        b = frozenset(self._check(r, c, height, width, "box") for r, c in boxes)
        p = self._check(player[0], player[1], height, width, "player")
        self._setup(height, width, bytes(wall_arr), t, b, p)

    @staticmethod
    def _check(r: int, c: int, height: int, width: int, what: str) -> int:
        if not (0 <= r < height and 0 <= c < width):
            raise ValueError(f"Sokoban {what} at ({r}, {c}) is outside the {height}x{width} room")
        return r * width + c

    def _setup(
        self,
        height: int,
        width: int,
        walls: bytes,
        targets: frozenset[int],
        boxes: frozenset[int],
        player: int,
    ) -> None:
        if len(boxes) < 1 or len(boxes) != len(targets):
            raise ValueError(
                f"Sokoban level needs as many boxes as targets (at least 1), "
                f"got {len(boxes)} boxes and {len(targets)} targets"
            )
        for cell in itertools.chain(boxes, targets, (player,)):
            if walls[cell]:
                r, c = divmod(cell, width)
                raise ValueError(f"Sokoban level has a wall under an object at ({r}, {c})")
        if player in boxes:
            raise ValueError("Sokoban player and a box share a cell")
        self.height = height
        self.width = width
        self._walls = walls
        self._nbr = _neighbours(height, width, walls)
        self.targets: frozenset[int] = targets
        self.boxes: frozenset[int] = boxes
        self.player: int = player
        self._target_mask = _mask(targets)
        self._initial = (player, boxes)
        self._success = False
        self._done = False
        self._plan: list[int] | None = None
        self._plan_key: tuple[int, frozenset[int]] | None = None

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_text(cls, text: str) -> "SokobanGame":
        """Parse a level: ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on
        target, ``P`` player, ``S`` player on target; rows on separate lines.

        Leading/trailing blank lines and trailing spaces are ignored. Raises ``ValueError``
        for unknown symbols, a non-rectangular grid, not exactly one player, or a number of
        boxes different from the number of targets (or zero).
        """
        if not isinstance(text, str):
            raise ValueError(f"Sokoban level text must be a str, got {type(text).__name__}")
        lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if not lines:
            raise ValueError("Sokoban level text is empty")
        width = len(lines[0])
        for i, ln in enumerate(lines):
            if len(ln) != width:
                raise ValueError(f"Sokoban level is not rectangular: row 0 has {width} cells, row {i} has {len(ln)}")
        height = len(lines)
        walls = bytearray(height * width)
        targets, boxes, players = set(), set(), []
        for r, ln in enumerate(lines):
            for c, ch in enumerate(ln):
                p = r * width + c
                if ch == "#":
                    walls[p] = 1
                elif ch == "_":
                    pass
                elif ch == "O":
                    targets.add(p)
                elif ch == "X":
                    boxes.add(p)
                elif ch == "√":
                    boxes.add(p)
                    targets.add(p)
                elif ch == "P":
                    players.append(p)
                elif ch == "S":
                    players.append(p)
                    targets.add(p)
                else:
                    raise ValueError(
                        f"Sokoban level has an unknown symbol {ch!r} at row {r}, col {c}; expected one of # _ O X √ P S"
                    )
        if len(players) != 1:
            raise ValueError(f"Sokoban level needs exactly one player (P or S), found {len(players)}")
        game = cls.__new__(cls)
        game._setup(height, width, bytes(walls), frozenset(targets), frozenset(boxes), players[0])
        return game

    @classmethod
    def generate(
        cls,
        seed: int,
        dim: tuple[int, int] = (6, 6),
        num_boxes: int = 1,
        num_steps: int | None = None,
        search_depth: int = 100,
        max_nodes: int = 3000,
        use_cache: bool = True,
    ) -> "SokobanGame":
        """A solvable level from the reverse-play generator, deterministic in its arguments.

        Args:
            seed: level seed (any int).
            dim: ``(height, width)`` including the wall border; (6, 6) and (8, 8) are the
                RAGEN settings.
            num_boxes: boxes (= targets).
            num_steps: random-walk steps of the room topology (default ``1.7 * (h + w)``).
            search_depth: maximum number of pulls on one reverse-play path.
            max_nodes: node budget of the reverse-play search (expanded states per room).
            use_cache: look up / store the level in the module's LRU level pool.
        """
        height, width = int(dim[0]), int(dim[1])
        if height < 3 or width < 3:
            raise ValueError(f"Sokoban dim must be at least (3, 3), got {dim}")
        if num_boxes < 1:
            raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
        if num_steps is None:
            num_steps = int(1.7 * (height + width))
        key = (int(seed), height, width, int(num_boxes), int(num_steps), int(search_depth), int(max_nodes))
        level = _LEVEL_POOL.get(key) if use_cache else None
        if level is None:
            level = _generate_level_uncached(
                int(seed), (height, width), int(num_boxes), int(num_steps), int(search_depth), int(max_nodes)
            )
            if use_cache:
                _LEVEL_POOL.put(key, level)
        game = cls.__new__(cls)
        game._setup(*level)
        return game

    @staticmethod
    def clear_cache() -> None:
        """Empty the generated-level pool."""
        _LEVEL_POOL.clear()

    def reset(self) -> None:
        """Restore the initial state of this level."""
        self.player, self.boxes = self._initial
        self._success = False
        self._done = False

    def copy(self) -> "SokobanGame":
        """An independent game in the same current state."""
        other = self.__class__.__new__(self.__class__)
        other.__dict__.update(self.__dict__)
        other._plan = list(self._plan) if self._plan is not None else None
        return other

    # ---------------------------------------------------------------- coordinates
    def _rc(self, p: int) -> tuple[int, int]:
        return divmod(p, self.width)

    @property
    def player_pos(self) -> tuple[int, int]:
        """The player's ``(row, col)``."""
        return self._rc(self.player)

    @property
    def box_positions(self) -> list[tuple[int, int]]:
        """Sorted ``(row, col)`` of the boxes."""
        return sorted(self._rc(b) for b in self.boxes)

    @property
    def target_positions(self) -> list[tuple[int, int]]:
        """Sorted ``(row, col)`` of the targets."""
        return sorted(self._rc(t) for t in self.targets)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def num_boxes_on_target(self) -> int:
        return len(self.boxes & self.targets)

    def state_key(self) -> tuple[int, frozenset[int]]:
        """Hashable ``(player, boxes)`` state."""
        return (self.player, self.boxes)

    # ---------------------------------------------------------------- dynamics
    @staticmethod
    def _action_index(action: str) -> int:
        try:
            return _ACTION_INDEX[str(action).strip().lower()]
        except KeyError:
            raise ValueError(f"unknown Sokoban action {action!r}; expected one of {ACTIONS}") from None

    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        d = self._action_index(action)
        if self._done:
            return 0.0, True, {"success": self._success, "action_is_effective": False}
        before = (self.player, self.boxes)
        reward = STEP_PENALTY
        effective = False
        q = self._nbr[self.player][d]
        if q >= 0:
            if q in self.boxes:
                r = self._nbr[q][d]
                if r >= 0 and r not in self.boxes:
                    self.boxes = (self.boxes - {q}) | {r}
                    self.player = q
                    effective = True
                    on_q, on_r = q in self.targets, r in self.targets
                    if on_r and not on_q:
                        reward += BOX_ON_TARGET
                    elif on_q and not on_r:
                        reward += BOX_OFF_TARGET
            else:
                self.player = q
                effective = True
        if effective and self._mask_boxes() == self._target_mask:
            reward += SOLVED_BONUS
            self._success = True
            self._done = True
        # keep the cached oracle plan while the state follows it
        if self._plan is not None and self._plan_key == before and self._plan and self._plan[0] == d:
            self._plan = self._plan[1:]
            self._plan_key = (self.player, self.boxes)
        elif effective:
            self._plan = None
            self._plan_key = None
        return reward, self._done, {"success": self._success, "action_is_effective": effective}

    def _mask_boxes(self) -> int:
        return _mask(self.boxes)

    def solve(self, max_nodes: int = 200_000) -> list[str] | None:
        """A shortest plan (action names) from the current state by BFS over
        ``(player, boxes)``; ``[]`` when solved, ``None`` if no plan within ``max_nodes``
        visited states (or the level is unsolvable)."""
        live = _live_mask(self.height, self.width, self._walls, self.targets)
        plan = _bfs_plan(
            self._nbr,
            self.height * self.width,
            self.player,
            self._mask_boxes(),
            self._target_mask,
            live,
            max_nodes,
        )
        return None if plan is None else [ACTIONS[d] for d in plan]

    def _current_plan(self) -> list[int] | None:
        key = (self.player, self.boxes)
        if self._plan_key != key:  # a None plan for the current key means "no plan found"
            plan = self.solve()
            self._plan = None if plan is None else [_ACTION_INDEX[a.lower()] for a in plan]
            self._plan_key = key
        return self._plan

    def oracle_action(self) -> str:
        """First move of a shortest plan (cached while the game follows it). For an
        unsolvable state (or one beyond the solver budget) the first action that changes
        the state, else ``Up``."""
        plan = self._current_plan()
        if plan:
            return ACTIONS[plan[0]]
        for d in range(4):
            q = self._nbr[self.player][d]
            if q >= 0 and (q not in self.boxes or (self._nbr[q][d] >= 0 and self._nbr[q][d] not in self.boxes)):
                return ACTIONS[d]
        return ACTIONS[0]

    def progress(self) -> float:
        """Minimum total Manhattan distance of a box-to-target matching (0 when solved)."""
        cost, _ = _min_assignment(self.box_positions, self.target_positions)
        return float(cost)

    # ---------------------------------------------------------------- text
    def to_text(self) -> str:
        """The grid in the level-text format (readable by :meth:`from_text`)."""
        rows = []
        for r in range(self.height):
            chars = []
            for c in range(self.width):
                p = r * self.width + c
                if self._walls[p]:
                    ch = "#"
                elif p == self.player:
                    ch = "S" if p in self.targets else "P"
                elif p in self.boxes:
                    ch = "√" if p in self.targets else "X"
                elif p in self.targets:
                    ch = "O"
                else:
                    ch = "_"
                chars.append(ch)
            rows.append("".join(chars))
        return "\n".join(rows)

    @staticmethod
    def _fmt(cells: Sequence[tuple[int, int]]) -> str:
        return ", ".join(f"({r}, {c})" for r, c in cells)

    def render_text(self) -> str:
        pr, pc = self.player_pos
        return (
            f"{self.to_text()}\n"
            f"Player (row, col): ({pr}, {pc}). Boxes: {self._fmt(self.box_positions)}. "
            f"Targets: {self._fmt(self.target_positions)}."
        )

    def explain(self, action: str) -> str:
        """Short reasoning for ``action`` in the current state, e.g. "The player is at
        (2, 3). The box at (2, 4) must reach the target at (4, 4), so I push it Down." """
        d = self._action_index(action)
        name = ACTIONS[d]
        pr, pc = self.player_pos
        head = f"The player is at ({pr}, {pc})."
        if self._done or self._mask_boxes() == self._target_mask:
            return f"{head} All boxes are on targets."
        _, pairs = _min_assignment(self.box_positions, self.target_positions)
        goal_of = dict(pairs)
        q = self._nbr[self.player][d]
        if q < 0:
            where = {"Up": "above", "Down": "below", "Left": "to the left of", "Right": "to the right of"}[name]
            return f"{head} There is a wall {where} the player, so the player can not move {name}."
        if q in self.boxes:
            br, bc = self._rc(q)
            tr, tc = goal_of[(br, bc)]
            r = self._nbr[q][d]
            if r < 0 or r in self.boxes:
                return (
                    f"{head} The box at ({br}, {bc}) can not move {name}, as a wall or a box "
                    f"is in the way, so this push does nothing."
                )
            if r in self.targets:
                rr, rc = self._rc(r)
                return f"{head} The box at ({br}, {bc}) can go onto the target at ({rr}, {rc}), so I push it {name}."
            if (br, bc) == (tr, tc):
                return f"{head} The box at ({br}, {bc}) is on a target, but I push it {name} to make room."
            return f"{head} The box at ({br}, {bc}) must reach the target at ({tr}, {tc}), so I push it {name}."
        # a plain move: focus on the box the plan pushes next, else the nearest open box
        focus = None
        plan = self._current_plan()
        if plan and plan[0] == d:
            p, boxes = self.player, set(self.boxes)
            for dd in plan:
                nq = self._nbr[p][dd]
                if nq in boxes:
                    focus = nq
                    break
                p = nq
        if focus is None:
            open_boxes = [b for b in self.boxes if b not in self.targets] or list(self.boxes)
            focus = min(open_boxes, key=lambda b: (abs(self._rc(b)[0] - pr) + abs(self._rc(b)[1] - pc), b))
        br, bc = self._rc(focus)
        tr, tc = goal_of[(br, bc)]
        if (br, bc) == (tr, tc):
            return f"{head} The box at ({br}, {bc}) is on a target, so I move {name} to get in place to push it."
        return (
            f"{head} The box at ({br}, {bc}) must reach the target at ({tr}, {tc}), "
            f"so I move {name} to get in place to push it."
        )

    def __repr__(self) -> str:
        return f"SokobanGame({self.height}x{self.width}, boxes={len(self.boxes)}, solved={self._success})"
