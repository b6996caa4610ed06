"""Behaviour tests of the pure-Python FrozenLake core (no torch).

Expected values are computed by hand in the comments. Coordinates are (row, col),
row 0 at the top; Down increases the row, Right increases the column.
"""

from __future__ import annotations

import math
from collections import Counter, deque

import pytest

from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.frozenlake import MOVES, PERPENDICULAR, FrozenLakeGame, generate_map

# a 3x3 map with the start in the centre: every direction is a legal, hole-free move
CENTRE = ["FFF", "FSF", "FFG"]
# a 5x5 open map with the start in the centre: the intended move and both perpendicular
# moves always land on a distinct frozen tile, so slips are observable by position
OPEN5 = ["FFFFF", "FFFFF", "FFSFF", "FFFFF", "FFFFG"]


def bfs_distance(desc: list[str], start: tuple[int, int]) -> float:
    """Independent BFS from ``start`` to the goal over non-hole tiles (inf if unreachable)."""
    n_rows, n_cols = len(desc), len(desc[0])
    seen = {start: 0}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        if desc[r][c] == "G":
            return float(seen[(r, c)])
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < n_rows and 0 <= nc < n_cols and (nr, nc) not in seen and desc[nr][nc] != "H":
                seen[(nr, nc)] = seen[(r, c)] + 1
                queue.append((nr, nc))
    return math.inf


def find(desc: list[str], letter: str) -> tuple[int, int]:
    return next((r, row.index(letter)) for r, row in enumerate(desc) if letter in row)


# --------------------------------------------------------------------------- moves
@pytest.mark.parametrize(
    "action, expected",
    # start (1, 1): Left -> (1, 0), Down -> (2, 1), Right -> (1, 2), Up -> (0, 1)
    [("Left", (1, 0)), ("Down", (2, 1)), ("Right", (1, 2)), ("Up", (0, 1))],
)
def test_move_in_each_direction(action, expected):
    game = FrozenLakeGame(desc=CENTRE)
    assert game.player == (1, 1)
    reward, done, info = game.step(action)
    assert game.player == expected
    # every target tile is frozen ("F"), so nothing ends and nothing is earned
    assert (reward, done) == (0.0, False)
    assert info == {"success": False, "action_is_effective": True}
    assert not game.success


def test_moves_table_matches_gymnasium_order_and_perpendiculars():
    # gymnasium action ids: 0 Left, 1 Down, 2 Right, 3 Up
    assert list(MOVES) == ["Left", "Down", "Right", "Up"]
    assert FrozenLakeGame.action_names == ("Left", "Down", "Right", "Up")
    for action, (a, b) in PERPENDICULAR.items():
        # a perpendicular move is orthogonal to the intended one: dot product 0
        for other in (a, b):
            assert MOVES[action][0] * MOVES[other][0] + MOVES[action][1] * MOVES[other][1] == 0
        assert a != b


@pytest.mark.parametrize(
    "desc, action",
    [
        (["SF", "FG"], "Left"),  # S at (0, 0): Left would be column -1
        (["SF", "FG"], "Up"),  # S at (0, 0): Up would be row -1
        (["GF", "FS"], "Right"),  # S at (1, 1) on a 2x2 map: column 2 is outside
        (["GF", "FS"], "Down"),  # S at (1, 1): row 2 is outside
    ],
)
def test_border_is_a_wall(desc, action):
    game = FrozenLakeGame(desc=desc)
    start = game.player
    reward, done, info = game.step(action)
    assert game.player == start
    assert (reward, done) == (0.0, False)
    assert info == {"success": False, "action_is_effective": False}


def test_hole_ends_episode_without_reward():
    # S (0, 0), hole at (0, 1): Right falls in
    game = FrozenLakeGame(desc=["SH", "FG"])
    reward, done, info = game.step("Right")
    assert game.player == (0, 1)
    assert (reward, done) == (0.0, True)
    assert info == {"success": False, "action_is_effective": True}
    assert game.done and not game.success
    # a hole is cut off from the goal: progress is rows * cols = 4 (finite on purpose)
    assert game.progress() == 4.0


def test_goal_gives_reward_one_and_success():
    # S (0, 0) -> Right -> G (0, 1)
    game = FrozenLakeGame(desc=["SG"])
    reward, done, info = game.step("Right")
    assert (reward, done) == (1.0, True)
    assert info == {"success": True, "action_is_effective": True}
    assert game.success and game.done
    assert game.progress() == 0.0


def test_two_step_path_from_module_docstring():
    # ["SF", "HG"]: Right -> (0, 1) frozen, Down -> (1, 1) goal
    game = FrozenLakeGame(desc=["SF", "HG"])
    assert game.step("Right") == (0.0, False, {"success": False, "action_is_effective": True})
    assert game.step("Down") == (1.0, True, {"success": True, "action_is_effective": True})


@pytest.mark.parametrize("desc, first, success", [(["SG"], "Right", True), (["SH", "FG"], "Right", False)])
def test_stepping_after_done_is_a_noop(desc, first, success):
    game = FrozenLakeGame(desc=desc)
    game.step(first)
    pos = game.player
    for action in ("Left", "Down", "Right", "Up"):
        # reward 0 (no second goal reward), still done, success kept, nothing moves
        assert game.step(action) == (0.0, True, {"success": success, "action_is_effective": False})
        assert game.player == pos
    assert game.success is success


@pytest.mark.parametrize("bad", ["Jump", "left", "RIGHT", "", "Left ", None])
def test_step_rejects_non_canonical_actions(bad):
    # the core receives parsed, canonical names only; anything else is a programming error
    game = FrozenLakeGame(desc=CENTRE)
    with pytest.raises(ValueError):
        game.step(bad)
    assert game.player == (1, 1) and not game.done


# --------------------------------------------------------------------------- desc validation
@pytest.mark.parametrize(
    "desc",
    [
        ["FF", "FG"],  # no S
        ["SG", "FG"],  # two G
        ["SF", "FF"],  # no G
        ["SS", "FG"],  # two S
        ["SX", "FG"],  # bad letter
        ["S.", "FG"],  # bad letter
        ["SFF", "FG"],  # ragged rows
        ["SF", "FGF"],  # ragged rows
        [],  # empty map
        ["", ""],  # empty rows
        [1, 2],  # rows are not strings
    ],
)
def test_invalid_desc_raises(desc):
    with pytest.raises(ValueError):
        FrozenLakeGame(desc=desc)


def test_lowercase_desc_is_accepted():
    game = FrozenLakeGame(desc=["sf", "hg"])
    assert game.desc == ["SF", "HG"]
    assert game.holes == [(1, 0)] and game.goal == (1, 1)


@pytest.mark.parametrize("rate", [-0.01, 1.01, 2.0, -1.0])
def test_success_rate_out_of_range_raises(rate):
    with pytest.raises(ValueError):
        FrozenLakeGame(desc=CENTRE, success_rate=rate)


@pytest.mark.parametrize("rate", [0.0, 0.5, 1.0])
def test_success_rate_bounds_are_inclusive(rate):
    assert FrozenLakeGame(desc=CENTRE, success_rate=rate).success_rate == rate


def test_needs_desc_or_seed():
    with pytest.raises(ValueError):
        FrozenLakeGame()


# --------------------------------------------------------------------------- generated maps
SEEDS = range(300)


@pytest.fixture(scope="module")
def maps():
    return {s: generate_map(s) for s in SEEDS}


def test_generated_maps_are_4x4_with_one_start_and_goal(maps):
    for seed, desc in maps.items():
        assert len(desc) == 4 and all(len(row) == 4 for row in desc), seed
        joined = "".join(desc)
        assert set(joined) <= set("SFHG"), seed
        assert joined.count("S") == 1 and joined.count("G") == 1, seed


def test_generated_maps_always_have_a_hole_free_path(maps):
    for seed, desc in maps.items():
        d = bfs_distance(desc, find(desc, "S"))
        # S and G are distinct, so the path has at least one step
        assert 1 <= d < math.inf, seed


def test_generated_frozen_fraction_close_to_p_frozen(maps):
    # each of the 14 tiles that are neither S nor G is frozen with p = 0.9 before the
    # (rare) rejection of blocked maps, which only removes maps with many holes; so the
    # average frozen fraction is ~0.9, a bit above. Std of one map's hole count is
    # sqrt(14 * 0.9 * 0.1) ~ 1.12, so the std error of the mean fraction over 300 maps is
    # 1.12 / 14 / sqrt(300) ~ 0.0046; +-0.025 is > 5 standard errors.
    holes = sum("".join(desc).count("H") for desc in maps.values())
    frozen_fraction = 1.0 - holes / (14 * len(maps))
    assert 0.875 <= frozen_fraction <= 0.93
    # and holes do occur (the maps are not trivially open)
    assert holes > 0


def test_generated_maps_are_deterministic_by_seed_and_vary(maps):
    for seed in range(0, 300, 7):
        assert generate_map(seed) == maps[seed]
        assert FrozenLakeGame(seed=seed).desc == maps[seed]
    # different seeds give (mostly) different maps, and start/goal positions vary too
    assert len({tuple(m) for m in maps.values()}) > 250
    assert len({find(m, "S") for m in maps.values()}) == 16
    assert len({find(m, "G") for m in maps.values()}) == 16


def test_generate_map_size_and_p_frozen_arguments():
    for seed in range(20):
        desc = generate_map(seed, size=6)
        assert len(desc) == 6 and all(len(r) == 6 for r in desc)
        assert bfs_distance(desc, find(desc, "S")) < math.inf
        # p_frozen = 1: every tile but S and G is frozen
        assert "H" not in "".join(generate_map(seed, p_frozen=1.0))


@pytest.mark.parametrize("kwargs", [{"size": 1}, {"p_frozen": 0.0}, {"p_frozen": 1.5}, {"p_frozen": -0.1}])
def test_generate_map_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        generate_map(0, **kwargs)


# --------------------------------------------------------------------------- slipping
def _slip_counts(action: str, success_rate: float, n: int, slip_seed: int = 123) -> Counter:
    """Which move happened, over ``n`` single steps from the centre of OPEN5."""
    game = FrozenLakeGame(desc=OPEN5, success_rate=success_rate, slip_seed=slip_seed)
    by_offset = {delta: name for name, delta in MOVES.items()}
    counts: Counter = Counter()
    for _ in range(n):
        game.player = game.start  # back to (2, 2); the slip RNG keeps running
        game.step(action)
        delta = (game.player[0] - 2, game.player[1] - 2)
        counts[by_offset[delta]] += 1
    return counts


def _within(count: int, n: int, p: float, k: float = 4.0) -> bool:
    se = math.sqrt(p * (1 - p) / n)
    return abs(count / n - p) <= k * se


@pytest.mark.parametrize("action", ["Left", "Down", "Right", "Up"])
def test_slip_probabilities_match_gymnasium(action):
    # success_rate 0.6: intended move 0.6, each perpendicular move (1 - 0.6) / 2 = 0.2,
    # the opposite move never. n = 5000 -> std error sqrt(0.24 / 5000) ~ 0.0069 (0.6) and
    # sqrt(0.16 / 5000) ~ 0.0057 (0.2); tolerance 4 standard errors.
    n = 5000
    counts = _slip_counts(action, 0.6, n)
    first, second = PERPENDICULAR[action]
    assert sum(counts.values()) == n
    assert _within(counts[action], n, 0.6)
    assert _within(counts[first], n, 0.2)
    assert _within(counts[second], n, 0.2)
    assert set(counts) <= {action, first, second}  # never the opposite direction


def test_success_rate_zero_always_slips_evenly():
    # success_rate 0: intended never, each perpendicular (1 - 0) / 2 = 0.5
    n = 4000
    counts = _slip_counts("Right", 0.0, n)
    assert counts["Right"] == 0 and counts["Left"] == 0
    assert _within(counts["Up"], n, 0.5) and _within(counts["Down"], n, 0.5)


def test_success_rate_one_never_slips():
    for action in MOVES:
        counts = _slip_counts(action, 1.0, 1000)
        assert counts == Counter({action: 1000})


def test_slip_draws_are_reproducible_by_seed():
    def trajectory(**kw):
        game = FrozenLakeGame(desc=OPEN5, success_rate=0.5, **kw)
        out = []
        for _ in range(30):
            game.player = game.start
            game.step("Down")
            out.append(game.player)
        return out

    assert trajectory(slip_seed=5) == trajectory(slip_seed=5)
    assert trajectory(slip_seed=5) != trajectory(slip_seed=6)  # 30 draws at p=0.5: collision ~1e-9
    # without slip_seed the level seed drives the slips
    assert trajectory(seed=9) == trajectory(seed=9, slip_seed=9)


def test_slip_into_border_stays_in_place():
    # 1x2 map, S at (0, 0): with success_rate 0, Right always slips Up or Down, both walls
    game = FrozenLakeGame(desc=["SG"], success_rate=0.0, slip_seed=0)
    for _ in range(50):
        reward, done, info = game.step("Right")
        assert (reward, done, info["action_is_effective"]) == (0.0, False, False)
        assert game.player == (0, 0)


# --------------------------------------------------------------------------- oracle / progress
def test_progress_and_oracle_on_hand_made_map():
    # S F H        holes (0, 2) and (1, 1). From S (0, 0) the only way around is
    # F H F        Down, Down, Right, Right: (1,0) (2,0) (2,1) (2,2) -> distance 4.
    # F F G        Right leads to the dead end (0, 1), whose distance is 5.
    game = FrozenLakeGame(desc=["SFH", "FHF", "FFG"])
    assert game.progress() == 4.0
    assert game.oracle_action() == "Down"
    plan = []
    while not game.done:
        plan.append(game.oracle_action())
        game.step(plan[-1])
    assert plan == ["Down", "Down", "Right", "Right"]
    assert game.success


def test_oracle_tie_break_follows_action_order():
    # S at (0, 0), G at (1, 1) on an open 2x2 map: Down and Right both reach distance 1;
    # ties go to the first in action_names order (Left, Down, Right, Up) -> Down
    assert FrozenLakeGame(desc=["SF", "FG"]).oracle_action() == "Down"


def test_progress_is_rows_times_cols_when_cut_off():
    # S (0, 0) boxed in by holes (0, 1) and (1, 0): 3 * 3 = 9, longer than any path
    game = FrozenLakeGame(desc=["SHF", "HFF", "FFG"])
    assert game.progress() == 9.0


def test_oracle_rollouts_reach_goal_in_bfs_distance():
    for seed in range(100):
        game = FrozenLakeGame(seed=seed, success_rate=1.0)
        d = bfs_distance(game.desc, game.player)
        assert game.progress() == d, seed
        steps = 0
        while not game.done and steps <= d:
            expected_left = bfs_distance(game.desc, game.player)
            assert game.progress() == expected_left, seed
            reward, done, info = game.step(game.oracle_action())
            steps += 1
            # each oracle move is effective and brings the player one step closer
            assert info["action_is_effective"], seed
            assert game.progress() == expected_left - 1, seed
        assert game.success and steps == d, seed
        assert reward == 1.0


def test_progress_matches_bfs_on_every_tile():
    for seed in range(30):
        game = FrozenLakeGame(seed=seed)
        for r in range(4):
            for c in range(4):
                if game.desc[r][c] == "H":
                    continue
                game.player = (r, c)
                # unreachable tiles report rows * cols = 16 instead of inf
                assert game.progress() == min(bfs_distance(game.desc, (r, c)), 16), (seed, r, c)


# --------------------------------------------------------------------------- rendering
def test_render_text_symbols_and_coordinates():
    game = FrozenLakeGame(desc=["SF", "HG"])
    # P at the start (S is not shown), H rendered as O, F as _, G as G
    # neighbours of (0, 0): Left/Up are walls, Down (1, 0) is the hole, Right (0, 1) is ice
    assert game.render_text() == (
        "P_\nOG\nPlayer (0,0) Goal (1,1). Goal is down right. Left wall, Down hole, Right ice, Up wall."
    )
    game.step("Right")
    # from (0, 1): Left back to ice, Down onto the goal, Right/Up walls
    assert game.render_text() == (
        "_P\nOG\nPlayer (0,1) Goal (1,1). Goal is down. Left ice, Down goal, Right wall, Up wall."
    )
    game.step("Down")
    # standing on the goal: P covers G
    assert game.render_grid() == "__\nOP"


def test_render_text_without_holes_and_in_hole():
    assert FrozenLakeGame(desc=["SG"]).render_text() == (
        "PG\nPlayer (0,0) Goal (0,1). Goal is right. Left wall, Down wall, Right goal, Up wall."
    )
    game = FrozenLakeGame(desc=["SH", "FG"])
    game.step("Right")
    # P covers the hole it fell into
    assert game.render_grid() == "_P\n_G"
    assert "Player (0,1)" in game.render_text()


def test_render_generated_map_shape_and_symbols():
    for seed in range(50):
        game = FrozenLakeGame(seed=seed)
        grid = game.render_grid().splitlines()
        assert len(grid) == 4
        # one character per cell, no separators
        cells = [list(row) for row in grid]
        assert all(len(row) == 4 for row in cells)
        flat = [c for row in cells for c in row]
        assert flat.count("P") == 1 and flat.count("G") == 1
        assert set(flat) <= {"P", "_", "O", "G"}
        assert flat.count("O") == len(game.holes)


# --------------------------------------------------------------------------- misc API
def test_greedy_and_explain_are_observation_dependent():
    game = FrozenLakeGame(desc=["SFH", "FHF", "FFG"])
    # goal (2, 2) from (0, 0): |dc| = 2 >= |dr| = 2 and dc > 0 -> Right
    assert game.greedy_action() == "Right"
    # the goal is 2 down and 2 right of (0, 0); Down lands on (1, 0), ice
    assert game.explain("Down") == "Goal is down right. Down is ice."
    assert game.explain("Up") == "Goal is down right. Up is a wall."
    game.player = (1, 0)
    # Right from (1, 0) lands on (1, 1), the hole
    assert game.explain("Right") == "Goal is down right. Right is a hole."
    game.player = (2, 1)
    # Right from (2, 1) lands on the goal (2, 2)
    assert game.explain("Right") == "Goal is right. Right is the goal."


def test_textgame_is_abstract_and_success_defaults_false():
    with pytest.raises(TypeError):
        TextGame()  # type: ignore[abstract]

    class Dummy(TextGame):
        def step(self, action):
            return 0.0, False, {"success": False, "action_is_effective": False}

        def render_text(self):
            return ""

        def oracle_action(self):
            return ""

    d = Dummy()
    assert d.success is False and d.progress() == 0.0 and d.explain("x") == "I choose x."
    assert isinstance(FrozenLakeGame(desc=CENTRE), TextGame)
