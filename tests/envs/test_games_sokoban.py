"""Sokoban game core: hand-checked rules, parsing, solver and the reverse-play generator."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.sokoban import SokobanGame
from ragen_torchrl.envs.games.sokoban_search import ACTIONS

CORRIDOR = """
######
#PX_O#
######
"""

# box must be pushed Down; the player has to walk around it first (shortest plan: 6)
AROUND = """
#####
#___#
#_X_#
#_O_#
#_P_#
#####
"""


def approx(x):
    return pytest.approx(x, abs=1e-9)


# --------------------------------------------------------------------------- parsing / text
def test_from_text_and_render():
    g = SokobanGame.from_text(CORRIDOR)
    assert isinstance(g, TextGame)
    assert (g.height, g.width) == (3, 6)
    assert g.player_pos == (1, 1)
    assert g.box_positions == [(1, 2)]
    assert g.target_positions == [(1, 4)]
    assert g.action_names == ("Up", "Down", "Left", "Right")
    assert g.render_text() == ("######\n#PX_O#\n######\nPlayer (row, col): (1, 1). Boxes: (1, 2). Targets: (1, 4).")
    assert SokobanGame.from_text(g.to_text()).render_text() == g.render_text()
    assert g.instructions and "Up" in g.instructions


def test_from_text_special_symbols_roundtrip():
    text = "#####\n#S√X#\n#___#\n#####"
    g = SokobanGame.from_text(text)
    assert g.to_text() == text
    assert g.player_pos == (1, 1)
    assert g.box_positions == [(1, 2), (1, 3)]
    assert g.target_positions == [(1, 1), (1, 2)]
    assert g.num_boxes_on_target == 1


@pytest.mark.parametrize(
    "text, match",
    [
        ("#####\n#PXO#\n#PXO#\n#####", "exactly one player"),
        ("#####\n#_XO#\n#####", "exactly one player"),
        ("#####\n#PXX#\n#_O_#\n#####", "as many boxes as targets"),
        ("#####\n#P_O#\n#####", "as many boxes as targets"),
        ("#####\n#P__#\n#####", "as many boxes as targets"),
        ("#####\n#PXO#\n####", "not rectangular"),
        ("######\n#PXO?#\n######", "unknown symbol"),
        ("\n\n", "empty"),
    ],
)
def test_from_text_errors(text, match):
    with pytest.raises(ValueError, match=match):
        SokobanGame.from_text(text)


def test_constructor_coordinates():
    g = SokobanGame(3, 4, walls=[(0, c) for c in range(4)], targets=[(2, 3)], boxes=[(2, 2)], player=(2, 1))
    assert g.step("Right")[0] == approx(10.9)
    with pytest.raises(ValueError, match="outside"):
        SokobanGame(3, 3, walls=[], targets=[(5, 5)], boxes=[(1, 1)], player=(0, 0))


# --------------------------------------------------------------------------- rules
def test_push_onto_target_solves():
    g = SokobanGame.from_text(CORRIDOR)
    r, done, info = g.step("Right")
    assert (r, done) == (approx(-0.1), False)
    assert info == {"success": False, "action_is_effective": True}
    assert g.player_pos == (1, 2) and g.box_positions == [(1, 3)]
    r, done, info = g.step("Right")
    assert r == approx(-0.1 + 1 + 10)
    assert done and info["success"] and g.success
    assert "√" in g.render_text()
    # stepping after the end changes nothing
    assert g.step("Left") == (0.0, True, {"success": True, "action_is_effective": False})


def test_wall_and_blocked_pushes_are_ineffective():
    g = SokobanGame.from_text(CORRIDOR)
    for a in ("Up", "Down", "Left"):
        r, done, info = g.step(a)
        assert r == approx(-0.1) and not done and not info["action_is_effective"]
        assert g.player_pos == (1, 1)
    # box against a wall
    g = SokobanGame.from_text("######\n#_PX##\n#___O#\n######")
    r, _, info = g.step("Right")
    assert r == approx(-0.1) and not info["action_is_effective"] and g.player_pos == (1, 2)
    # box against another box
    g = SokobanGame.from_text("#######\n#PXX_O#\n#____O#\n#######")
    r, _, info = g.step("Right")
    assert r == approx(-0.1) and not info["action_is_effective"]
    assert g.box_positions == [(1, 2), (1, 3)]


def test_grid_edge_without_walls_is_blocking():
    g = SokobanGame.from_text("PX_O")
    r, _, info = g.step("Left")
    assert not info["action_is_effective"] and g.player_pos == (0, 0)
    assert not g.step("Up")[2]["action_is_effective"]


def test_box_off_and_onto_target_rewards():
    # two boxes: push one off a target (-1), then one onto a target (+1) without solving
    g = SokobanGame.from_text("#######\n#P√__O#\n#_X___#\n#######")
    r, done, _ = g.step("Right")
    assert r == approx(-0.1 - 1.0) and not done
    g = SokobanGame.from_text("#######\n#PX_O_#\n#_X__O#\n#######")
    g.step("Right")
    r, done, info = g.step("Right")
    assert r == approx(-0.1 + 1.0) and not done and not info["success"]
    assert g.num_boxes_on_target == 1


def test_progress_and_reset():
    g = SokobanGame.from_text(CORRIDOR)
    assert g.progress() == 2.0
    g.step("Right")
    assert g.progress() == 1.0
    g.step("Right")
    assert g.progress() == 0.0
    g.reset()
    assert g.progress() == 2.0 and not g.success and g.player_pos == (1, 1)
    # assignment, not nearest target: both boxes are nearest to (1, 4)
    g2 = SokobanGame.from_text("#######\n#PX_O_#\n#__X__#\n#O____#\n#######")
    assert g2.progress() == 2.0 + 3.0


def test_unknown_action_raises():
    with pytest.raises(ValueError, match="unknown Sokoban action"):
        SokobanGame.from_text(CORRIDOR).step("Jump")


# --------------------------------------------------------------------------- solver / oracle
def test_bfs_plan_known_levels():
    assert SokobanGame.from_text(CORRIDOR).solve() == ["Right", "Right"]
    plan = SokobanGame.from_text(AROUND).solve()
    assert len(plan) == 6 and plan[-1] == "Down"
    g = SokobanGame.from_text(AROUND)
    for i, a in enumerate(plan):
        r, done, info = g.step(a)
        assert done == (i == len(plan) - 1)
    assert g.success


def test_solve_edge_cases():
    solved = SokobanGame.from_text("#####\n#P√_#\n#####")
    assert solved.solve() == []
    stuck = SokobanGame.from_text("#####\n#X__#\n#_PO#\n#####")  # box in a corner
    assert stuck.solve() is None
    assert stuck.oracle_action() in ACTIONS
    assert SokobanGame.from_text(AROUND).solve(max_nodes=3) is None


def test_oracle_follows_plan_and_recovers_from_deviation():
    g = SokobanGame.from_text(AROUND)
    first = g.oracle_action()
    g.step({"Left": "Right", "Right": "Left"}.get(first, "Left"))  # deviate
    steps = 0
    while not g.done and steps < 20:
        g.step(g.oracle_action())
        steps += 1
    assert g.success and steps <= 7


def test_explain_mentions_state():
    g = SokobanGame.from_text("#######\n#_____#\n#_PX__#\n#_____#\n#___O_#\n#######")
    text = g.explain("Right")
    assert "(2, 2)" in text and "(2, 3)" in text and "Right" in text and "push" in text
    g2 = SokobanGame.from_text("######\n#____#\n#__P_#\n#__X_#\n#__O_#\n######")
    assert g2.explain("Down") == (
        "The player is at (2, 3). The box at (3, 3) can go onto the target at (4, 3), so I push it Down."
    )
    assert "wall" in SokobanGame.from_text(CORRIDOR).explain("Up")
    move = SokobanGame.from_text(AROUND).explain("Left")
    assert "move Left" in move and "(2, 2)" in move and "(3, 2)" in move
    assert len(move.split()) < 40


# --------------------------------------------------------------------------- generator
def _check_generated(g, dim, num_boxes):
    h, w = dim
    assert (g.height, g.width) == (h, w)
    assert len(g.boxes) == len(g.targets) == num_boxes
    text = g.to_text()
    lines = text.split("\n")
    assert lines[0] == "#" * w and lines[-1] == "#" * w
    assert all(ln[0] == "#" and ln[-1] == "#" for ln in lines)
    assert sum(text.count(ch) for ch in "PS") == 1
    assert g.boxes != g.targets  # not already solved
    plan = g.solve()
    assert plan, f"unsolvable or trivial level:\n{text}"
    return plan


def test_generator_6x6_solvable_1000_seeds():
    lengths = [len(_check_generated(SokobanGame.generate(s, use_cache=False), (6, 6), 1)) for s in range(1000)]
    assert max(lengths) >= 5  # not all trivial


def test_generator_8x8_two_boxes_solvable_100_seeds():
    for s in range(100):
        plan = _check_generated(SokobanGame.generate(s, dim=(8, 8), num_boxes=2, use_cache=False), (8, 8), 2)
        g = SokobanGame.generate(s, dim=(8, 8), num_boxes=2)
        for a in plan:
            g.step(a)
        assert g.success


def test_generator_deterministic_and_cached():
    a = SokobanGame.generate(123)
    b = SokobanGame.generate(123, use_cache=False)
    c = SokobanGame.generate(123)
    assert a.render_text() == b.render_text() == c.render_text()
    a.step(a.oracle_action())
    assert c.render_text() == b.render_text()  # cached levels are not shared state
    texts = {SokobanGame.generate(s).to_text() for s in range(20)}
    assert len(texts) > 15
    assert SokobanGame.generate(5, dim=(8, 8), num_boxes=2).to_text() != SokobanGame.generate(5).to_text()


def test_generator_bad_arguments():
    with pytest.raises(ValueError):
        SokobanGame.generate(0, dim=(2, 6))
    with pytest.raises(ValueError):
        SokobanGame.generate(0, num_boxes=0)


# --------------------------------------------------------------------------- invariants
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), actions=st.lists(st.sampled_from(ACTIONS), max_size=30))
def test_random_play_invariants(seed, actions):
    g = SokobanGame.generate(seed % 50)
    walls = {divmod(p, g.width) for p in range(g.height * g.width) if g._walls[p]}
    allowed = {-0.1, 0.9, -1.1, 10.9, 9.9}
    for a in actions:
        before = g.render_text()
        r, done, info = g.step(a)
        if g.done and r == 0.0:
            break
        assert any(abs(r - x) < 1e-9 for x in allowed)
        assert info["action_is_effective"] == (g.render_text() != before)
        assert len(g.boxes) == 1 and g.player not in g.boxes
        assert g.player_pos not in walls and not set(g.box_positions) & walls
        if done:
            assert info["success"] and g.progress() == 0.0
            break


def test_oracle_plays_generated_levels_optimally():
    for s in range(50):
        g = SokobanGame.generate(s, dim=(8, 8) if s % 2 else (6, 6), num_boxes=2 if s % 2 else 1)
        n = len(g.solve())
        initially_on = g.num_boxes_on_target
        total = 0.0
        for _ in range(n):
            total += g.step(g.oracle_action())[0]
        assert g.success and g.done
        assert total == pytest.approx(-0.1 * n + (len(g.boxes) - initially_on) + 10.0, abs=1e-6)
