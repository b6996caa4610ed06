"""Countdown game core: expression parser, reward rules, generator/solver and file loading."""

import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.countdown import CountdownGame, CountdownProblem, load_countdown_file
from ragen_torchrl.envs.games.countdown_expressions import ExpressionError, evaluate_expression


# --------------------------------------------------------------------------- parser
@pytest.mark.parametrize(
    "text, numbers, value, used",
    [
        ("2 + 3 * 4", [2, 3, 4], 14, [2, 3, 4]),
        ("(2 + 3) * 4", [2, 3, 4], 20, [2, 3, 4]),
        ("8 - 4 - 2", [8, 4, 2], 2, [8, 4, 2]),  # left associative
        ("8 / 4 / 2", [8, 4, 2], 1, [8, 4, 2]),
        ("8 / (4 / 2)", [8, 4, 2], 4, [8, 4, 2]),
        ("2 * 3 - 4 / 8", [2, 3, 4, 8], Fraction(11, 2), [2, 3, 4, 8]),
        ("((7))", [7], 7, [7]),
        ("-3 + 10", [3, 10], 7, [3, 10]),
        ("10 - -3", [3, 10], 13, [10, 3]),
        ("6 × 7 ÷ 3", [3, 6, 7], 14, [6, 7, 3]),
        ("9 − 2", [2, 9], 7, [9, 2]),
        ("5+5", [5, 5, 1], 10, [5, 5]),
        ("  50+25\n", [25, 50], 75, [50, 25]),
        ("3 * 4 = 12", [3, 4], 12, [3, 4]),
    ],
)
def test_evaluate_valid(text, numbers, value, used):
    v, u = evaluate_expression(text, numbers)
    assert v == value and isinstance(v, Fraction)
    assert u == used


@pytest.mark.parametrize(
    "text, match",
    [
        ("__import__('os')", "invalid character"),
        ("__import__('os').system('ls')", "invalid character"),
        ("2 + a", "invalid character"),
        ("1" * 10_000, "longer than 200"),
        ("2 + " * 60 + "2", "longer than 200"),
        ("２ + 3", "invalid character"),  # full-width digit
        ("٣ + 3", "invalid character"),  # Arabic-Indic digit
        ("2 ➕ 3", "invalid character"),
        ("4 / (3 - 3)", "division by zero"),
        ("(2 + 3", "unbalanced"),
        ("2 + 3)", "unbalanced"),
        ("()", "unbalanced|missing operand"),
        ("2 ** 3", "unexpected"),
        ("2 3", "unexpected number 3"),
        ("2 +", "end of expression"),
        ("", "empty"),
        ("   ", "empty"),
        ("7 + 2", "not one of the given"),
        ("3 + 3", "used 2 times"),
        ("2.5 + 3", "invalid character"),
        ("2 + 3 = x", "right-hand side"),
        ("2 + 3 = 5 = 5", "right-hand side"),
    ],
)
def test_evaluate_errors(text, match):
    with pytest.raises(ExpressionError, match=match):
        evaluate_expression(text, [2, 3, 4, 3 if "3 + 3" not in text else 4])


def test_expression_error_is_value_error_and_non_str():
    assert issubclass(ExpressionError, ValueError)
    with pytest.raises(ExpressionError):
        evaluate_expression(None, [1])  # type: ignore[arg-type]
    with pytest.raises(ExpressionError):
        evaluate_expression("(" * 60 + "2" + ")" * 60, [2])  # too deep / too long
    with pytest.raises(ExpressionError, match="nested"):
        evaluate_expression("-" * 80 + "2", [2])


def test_rhs_must_match_target_when_given():
    assert evaluate_expression("3 * 4 = 12", [3, 4], target=12)[0] == 12
    with pytest.raises(ExpressionError, match="not the target"):
        evaluate_expression("3 * 4 = 13", [3, 4], target=12)


_EXPR_CHARS = st.one_of(st.sampled_from(list("0123456789+-*/()= ×÷")), st.characters())


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=_EXPR_CHARS, max_size=40))
def test_evaluate_only_raises_expression_error(text):
    try:
        v, used = evaluate_expression(text, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 25, 50, 75, 100])
    except ExpressionError:
        return
    assert isinstance(v, Fraction) and all(isinstance(n, int) for n in used)


# --------------------------------------------------------------------------- rewards
@pytest.mark.parametrize(
    "answer, reward, success",
    [
        ("(25 + 50) + 7", 1.0, True),  # subset, correct
        ("25 + 50 + 7 = 82", 1.0, True),  # trailing "= target"
        ("7 + 25 + 50 + 3 - 3", 0.0, False),  # 3 used twice
        ("(50 + 25 + 7) * 3 / 3", 0.0, False),
        ("50 + 25 + 7 + 3", 0.1, False),  # exactly the numbers, wrong value
        ("3 * 7 + 25 - 50", 0.1, False),
        ("50 + 25", 0.0, False),  # subset, wrong
        ("50 + 25 + 7 + 3 = 82", 0.1, False),  # claims the target, value wrong
        ("50 + 25 + 7 + 3 = 85", 0.0, False),  # right-hand side is not the target
        ("82", 0.0, False),  # not a given number
        ("50 + 32", 0.0, False),
        ("__import__('os')", 0.0, False),
        ("", 0.0, False),
        ("x" * 10_000, 0.0, False),
        ("50 / (7 - 7)", 0.0, False),
    ],
)
def test_step_rewards(answer, reward, success):
    game = CountdownGame(target=82, numbers=[3, 7, 25, 50])
    r, done, info = game.step(answer)
    assert r == pytest.approx(reward) and done
    assert info["success"] is success and game.success is success
    assert set(info) >= {"success", "action_is_effective"}
    assert game.step("50 + 25 + 7") == (0.0, True, {"success": success, "action_is_effective": False})


def test_duplicate_numbers_and_effective_flag():
    game = CountdownGame(10, [5, 5, 2])
    assert game.step("5 + 5")[0] == 1.0
    game = CountdownGame(10, [5, 5, 2])
    r, _, info = game.step("5 * 5 * 2")
    assert r == pytest.approx(0.1) and info["action_is_effective"]
    r, _, info = CountdownGame(10, [5, 5, 2]).step("5 5")
    assert r == 0.0 and not info["action_is_effective"]


def test_render_and_interface():
    game = CountdownGame(24, [3, 4, 6])
    assert isinstance(game, TextGame) and game.action_names is None
    text = game.render_text()
    assert "24" in text and "3, 4, 6" in text
    assert game.progress() == 24.0
    game.step("3 * 6")
    assert game.progress() == 6.0
    assert "18" in game.render_text()
    assert "equation" in CountdownGame.instructions
    with pytest.raises(ValueError):
        CountdownGame(24, [])
    with pytest.raises(ValueError):
        CountdownGame(24, [1.5, 2])


# --------------------------------------------------------------------------- solver / generator
def test_solver_known_instances():
    assert CountdownGame(24, [3, 4, 6]).solve() in ("4 * 6", "6 * 4")
    assert CountdownGame(24, [1, 3, 4, 6]).score(CountdownGame(24, [1, 3, 4, 6]).solve()) == 1.0
    frac = CountdownGame(24, [1, 5, 5, 5])
    assert frac.score(frac.solve()) == 1.0
    assert CountdownGame(1000, [1, 2]).solve() is None
    unsolvable = CountdownGame(1000, [1, 2])
    assert unsolvable.step(unsolvable.oracle_action())[0] == pytest.approx(0.1)


def test_generator_instances_solvable_and_deterministic():
    sizes = set()
    for seed in range(300):
        game = CountdownGame.generate(seed)
        assert 3 <= len(game.numbers) <= 4 and all(1 <= n <= 99 for n in game.numbers)
        assert 1 <= game.target <= 1000
        sizes.add(len(game.numbers))
        oracle = game.oracle_action()
        assert game.step(oracle) == (1.0, True, {"success": True, "action_is_effective": True})
    assert sizes == {3, 4}
    a, b = CountdownGame.generate(7), CountdownGame.generate(7)
    assert (a.target, a.numbers) == (b.target, b.numbers)
    assert len(CountdownGame.generate(3, num_numbers=4).numbers) == 4


def test_explain_uses_steps():
    game = CountdownGame(82, [3, 7, 25, 50])
    sol = game.solve()
    text = game.explain(sol)
    assert "82" in text and sol in text and "=" in text
    assert "gives" not in game.explain("3 + 7") and "10" in game.explain("3 + 7")


# --------------------------------------------------------------------------- files
def test_load_countdown_jsonl(tmp_path):
    path = tmp_path / "cd.jsonl"
    path.write_text(
        json.dumps({"target": 24, "nums": [3, 4, 6]})
        + "\n\n"
        + json.dumps({"target": 10, "numbers": [5, 5, 2], "extra": 1})
        + "\n"
    )
    problems = load_countdown_file(path)
    assert problems == [CountdownProblem(24, (3, 4, 6)), CountdownProblem(10, (5, 5, 2))]
    game = CountdownGame.from_problems(problems, seed=3)
    assert (game.target, game.numbers) == (10, (5, 5, 2))


def test_load_countdown_json_array(tmp_path):
    path = tmp_path / "cd.json"
    path.write_text(json.dumps([{"target": 24, "nums": [3, 4, 6]}]))
    assert load_countdown_file(str(path)) == [CountdownProblem(24, (3, 4, 6))]


def test_load_countdown_errors(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ValueError, match="nope.jsonl.*not found"):
        load_countdown_file(missing)
    for bad in [
        '{"target": 24}',
        '{"nums": [1, 2]}',
        '{"target": "x", "nums": [1]}',
        '{"target": 3, "nums": "12"}',
        '{"target": 3, "nums": [1.5]}',
        "[1, 2]",
        "{bad json",
    ]:
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps({"target": 1, "nums": [1]}) + "\n" + bad + "\n")
        with pytest.raises(ValueError, match=r"bad\.jsonl, line 2.*'target'.*'nums'"):
            load_countdown_file(path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no records"):
        load_countdown_file(empty)


def test_load_countdown_parquet_needs_pandas_or_pyarrow(tmp_path):
    try:
        import pyarrow  # noqa: F401

        pytest.skip("pyarrow installed")
    except ImportError:
        pass
    try:
        import pandas  # noqa: F401

        pytest.skip("pandas installed")
    except ImportError:
        pass
    path = tmp_path / "cd.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(ImportError, match="pyarrow"):
        load_countdown_file(path)
