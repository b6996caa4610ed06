"""FrozenLake game core (pure Python, no torch).

Rules follow gymnasium's FrozenLake (>= 1.0) with RAGEN's text rendering:

* map letters ``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal (gymnasium's ``desc``);
* rendered symbols ``P`` player, ``_`` frozen, ``O`` hole, ``G`` goal;
* slippery semantics: the intended move happens with probability ``success_rate`` and
  each of the two perpendicular moves with probability ``(1 - success_rate) / 2``;
* moving into the border leaves the player in place; falling into a hole ends the
  episode with reward 0; reaching the goal ends it with reward 1 (``success``).

Two observation formats (``observation=``, see :data:`OBSERVATIONS`):

* ``"annotated"`` (default): the grid, player and goal coordinates, the goal's direction
  and what each of the four moves would reach. The per-move annotations are this
  project's addition for the tiny from-scratch model, which has no pretrained notion of a
  2-D grid written as a line-broken string: they spell out what the grid implies, so the
  task is learnable in a short run. Rules and rewards are unchanged.
* ``"paper"``: what RAGEN-2 (arXiv 2604.06268) shows: the grid plus a coordinate listing
  (board size, start, goal, player, holes), nothing derived from them. Use it with a
  pretrained model (Qwen2.5 scale), as the paper does.

Example:
    >>> game = FrozenLakeGame(desc=["SF", "HG"])
    >>> game.oracle_action()
    'Right'
    >>> game.step("Right")
    (0.0, False, {'success': False, 'action_is_effective': True})
    >>> game.step("Down")
    (1.0, True, {'success': True, 'action_is_effective': True})
"""

from __future__ import annotations

import random
from collections import deque

from ragen_torchrl.checks import check_choice

from .base import TextGame

#: action name -> (row delta, col delta); order matches gymnasium's action ids 0..3
MOVES: dict[str, tuple[int, int]] = {
    "Left": (0, -1),
    "Down": (1, 0),
    "Right": (0, 1),
    "Up": (-1, 0),
}
#: the two moves perpendicular to each action (where a slip can send the player)
PERPENDICULAR: dict[str, tuple[str, str]] = {
    "Left": ("Up", "Down"),
    "Right": ("Up", "Down"),
    "Up": ("Left", "Right"),
    "Down": ("Left", "Right"),
}
_VALID_TILES = set("SFHG")
#: observation formats of :meth:`FrozenLakeGame.render_text`
OBSERVATIONS = ("annotated", "paper")


def _shortest_distances(desc: list[str], goal: tuple[int, int]) -> dict[tuple[int, int], int]:
    """BFS distance to the goal from every tile reachable without crossing holes."""
    n_rows, n_cols = len(desc), len(desc[0])
    dist = {goal: 0}
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < n_rows and 0 <= nc < n_cols and (nr, nc) not in dist:
                if desc[nr][nc] != "H":
                    dist[(nr, nc)] = dist[(r, c)] + 1
                    queue.append((nr, nc))
    return dist


def generate_map(seed: int, size: int = 4, p_frozen: float = 0.9) -> list[str]:
    """A random ``size`` x ``size`` map with a guaranteed hole-free path from S to G.

    Like gymnasium's ``generate_random_map``: tiles are frozen with probability
    ``p_frozen``, otherwise holes; maps are redrawn until a path exists. Unlike gymnasium,
    start and goal positions are random too (RAGEN varies them), always distinct.

    Example:
        >>> m = generate_map(0)
        >>> len(m), len(m[0]), sum(row.count("S") for row in m)
        (4, 4, 1)
    """
    if size < 2:
        raise ValueError(f"FrozenLake size must be >= 2, got {size}")
    if not 0.0 < p_frozen <= 1.0:
        raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
    rng = random.Random(seed)
    while True:
        cells = [["F" if rng.random() < p_frozen else "H" for _ in range(size)] for _ in range(size)]
        start, goal = rng.sample(range(size * size), 2)
        cells[start // size][start % size] = "S"
        cells[goal // size][goal % size] = "G"
        desc = ["".join(row) for row in cells]
        if (start // size, start % size) in _shortest_distances(desc, (goal // size, goal % size)):
            return desc


class FrozenLakeGame(TextGame):
    """One FrozenLake episode.

    Args:
        desc: explicit map as a list of strings over ``S F H G`` (exactly one S and one G).
            When ``None`` a map is generated from ``seed``.
        seed: level seed (map generation and, unless ``slip_seed`` is given, slip draws).
        size: side of generated maps.
        p_frozen: probability that a generated tile is frozen.
        success_rate: probability that the intended move happens (1.0 = not slippery).
        slip_seed: seed of the slip RNG (default: ``seed``, so every sample of a level
            that takes the same actions sees the same slips, as in the reference).
        observation: ``"annotated"`` (default) or ``"paper"``; see the module docstring.

    Example:
        >>> game = FrozenLakeGame(desc=["SFH", "FFG"])
        >>> print(game.render_text())
        P_O
        __G
        Player (0,0) Goal (1,2). Goal is down right. Left wall, Down ice, Right ice, Up wall.
    """

    action_names = ("Left", "Down", "Right", "Up")
    instructions = "FrozenLake. You are P. Reach G, avoid holes O. Actions: Left, Down, Right, Up."

    def __init__(
        self,
        desc: list[str] | None = None,
        *,
        seed: int | None = None,
        size: int = 4,
        p_frozen: float = 0.9,
        success_rate: float = 1.0,
        slip_seed: int | None = None,
        observation: str = "annotated",
    ) -> None:
        if not 0.0 <= success_rate <= 1.0:
            raise ValueError(f"success_rate must be in [0, 1], got {success_rate}")
        check_choice("observation", observation, OBSERVATIONS)
        self.observation = observation
        if desc is None:
            if seed is None:
                raise ValueError("FrozenLakeGame needs either `desc` or `seed`")
            desc = generate_map(seed, size=size, p_frozen=p_frozen)
        self.desc = self._validate_desc(desc)
        self.success_rate = float(success_rate)
        self._rng = random.Random(slip_seed if slip_seed is not None else seed)
        self.n_rows, self.n_cols = len(self.desc), len(self.desc[0])
        self.start = self._find("S")
        self.goal = self._find("G")
        self.holes = [(r, c) for r in range(self.n_rows) for c in range(self.n_cols) if self.desc[r][c] == "H"]
        self.player = self.start
        self.done = False
        self._success = False
        self._dist = _shortest_distances(self.desc, self.goal)

    @staticmethod
    def _validate_desc(desc: list[str]) -> list[str]:
        if not desc or not all(isinstance(row, str) for row in desc):
            raise ValueError("desc must be a non-empty list of strings")
        desc = [row.upper() for row in desc]
        if len({len(row) for row in desc}) != 1 or not desc[0]:
            raise ValueError(f"desc rows must be non-empty and of equal length, got {desc}")
        letters = set("".join(desc))
        if not letters <= _VALID_TILES:
            raise ValueError(f"desc may only use the letters S, F, H, G; got {sorted(letters - _VALID_TILES)}")
        joined = "".join(desc)
        if joined.count("S") != 1 or joined.count("G") != 1:
            raise ValueError("desc must contain exactly one S and one G")
        return desc

    def _find(self, letter: str) -> tuple[int, int]:
        for r, row in enumerate(self.desc):
            c = row.find(letter)
            if c >= 0:
                return (r, c)
        raise ValueError(letter)  # unreachable after validation

    # -- dynamics -------------------------------------------------------------
    def _move(self, pos: tuple[int, int], action: str) -> tuple[int, int]:
        dr, dc = MOVES[action]
        r, c = pos[0] + dr, pos[1] + dc
        if 0 <= r < self.n_rows and 0 <= c < self.n_cols:
            return (r, c)
        return pos

    def _actual_move(self, action: str) -> str:
        if self.success_rate >= 1.0:
            return action
        u = self._rng.random()
        if u < self.success_rate:
            return action
        first, second = PERPENDICULAR[action]
        return first if u < self.success_rate + (1.0 - self.success_rate) / 2 else second

    def step(self, action: str) -> tuple[float, bool, dict]:
        """Apply one move (canonical name). Returns ``(reward, done, info)``."""
        if action not in MOVES:
            raise ValueError(f"unknown FrozenLake action {action!r}; valid: {list(MOVES)}")
        if self.done:
            return 0.0, True, {"success": self._success, "action_is_effective": False}
        old = self.player
        self.player = self._move(old, self._actual_move(action))
        tile = self.desc[self.player[0]][self.player[1]]
        reward = 0.0
        if tile == "G":
            self.done, self._success, reward = True, True, 1.0
        elif tile == "H":
            self.done = True
        return reward, self.done, {"success": self._success, "action_is_effective": self.player != old}

    # -- text -----------------------------------------------------------------
    def render_grid(self) -> str:
        rows = []
        for r in range(self.n_rows):
            cells = []
            for c in range(self.n_cols):
                tile = self.desc[r][c]
                if (r, c) == self.player:
                    cells.append("P")
                else:
                    cells.append({"H": "O", "G": "G"}.get(tile, "_"))
            rows.append("".join(cells))
        return "\n".join(rows)

    def neighbours(self) -> str:
        """What each move would reach: ``wall``, ``hole``, ``goal`` or ``ice``."""
        parts = []
        for action in self.action_names:
            nxt = self._move(self.player, action)
            tile = "wall" if nxt == self.player else {"H": "hole", "G": "goal"}.get(self.desc[nxt[0]][nxt[1]], "ice")
            parts.append(f"{action} {tile}")
        return ", ".join(parts)

    def render_text(self) -> str:
        """The observation in the format chosen by ``observation``."""
        return self.render_paper() if self.observation == "paper" else self.render_annotated()

    def render_paper(self) -> str:
        """RAGEN-2's observation: the grid, then the coordinates of every entity.

        Example:
            >>> print(FrozenLakeGame(desc=["SFH", "FFG"], observation="paper").render_text())
            P_O
            __G
            Board size: 2 rows x 3 cols (zero-indexed).
            Start: (0, 0)
            Goal: (1, 2)
            Player: (0, 0)
            Holes: (0, 2)
        """
        r, c = self.player
        tile = self.desc[r][c]
        player = {"G": "Player on goal", "H": "Player in hole"}.get(tile, "Player")
        lines = [
            self.render_grid(),
            f"Board size: {self.n_rows} rows x {self.n_cols} cols (zero-indexed).",
            f"Start: ({self.start[0]}, {self.start[1]})",
            f"Goal: ({self.goal[0]}, {self.goal[1]})",
            f"{player}: ({r}, {c})",
        ]
        if self.holes:
            lines.append("Holes: " + ", ".join(f"({hr}, {hc})" for hr, hc in self.holes))
        return "\n".join(lines)

    def render_annotated(self) -> str:
        """The grid with coordinates, the goal's direction and each move's target tile."""
        # short on purpose (every observation token is paid for at every later turn); the
        # coordinates and the four neighbours make the map readable for a tiny model
        return (
            f"{self.render_grid()}\n"
            f"Player ({self.player[0]},{self.player[1]}) Goal ({self.goal[0]},{self.goal[1]}). "
            f"Goal is {self.goal_direction()}. {self.neighbours()}."
        )

    def goal_direction(self) -> str:
        """Where the goal is relative to the player, e.g. ``"down right"`` (``"here"`` on it)."""
        dr, dc = self.goal[0] - self.player[0], self.goal[1] - self.player[1]
        words = ("down" if dr > 0 else "up" if dr < 0 else "", "right" if dc > 0 else "left" if dc < 0 else "")
        return " ".join(w for w in words if w) or "here"

    # -- oracle -----------------------------------------------------------------
    def progress(self) -> float:
        """Shortest hole-free path length to the goal (0 at the goal).

        In a hole, or cut off from the goal, it is ``rows * cols`` (longer than any path),
        so the value stays finite for averaging and for T3's stall rule.
        """
        return float(self._dist.get(self.player, self.n_rows * self.n_cols))

    def oracle_action(self) -> str:
        """First move of a shortest hole-free path (ignores slipping); ties in ``action_names`` order."""
        best, best_d = self.action_names[0], float("inf")
        for action in self.action_names:
            nxt = self._move(self.player, action)
            d = self._dist.get(nxt, float("inf"))
            if nxt != self.player and d < best_d:
                best, best_d = action, d
        return best

    def greedy_action(self) -> str:
        """A biased, hole-blind heuristic: step toward the goal along the larger gap.

        Demonstrations mix it in as noise, so the warm-started policy makes systematic
        mistakes (walking into holes on the direct line) that RL can fix.
        """
        dr, dc = self.goal[0] - self.player[0], self.goal[1] - self.player[1]
        if abs(dc) >= abs(dr) and dc != 0:
            return "Right" if dc > 0 else "Left"
        return "Down" if dr > 0 else "Up"

    def explain(self, action: str) -> str:
        where = self.goal_direction()
        nxt = self._move(self.player, action)
        if nxt == self.player:
            what = "a wall"
        else:
            what = {"H": "a hole", "G": "the goal"}.get(self.desc[nxt[0]][nxt[1]], "ice")
        return f"Goal is {where}. {action} is {what}."
