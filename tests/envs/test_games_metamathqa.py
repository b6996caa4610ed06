"""MetaMathQA game core: answer normalisation, reward schedule and data loading."""

import json

import pytest

from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.metamathqa import (
    INCORRECT_FEEDBACK,
    MathProblem,
    MetaMathQAGame,
    answers_match,
    extract_answer,
    load_metamathqa,
    normalize_answer,
)


@pytest.mark.parametrize(
    "prediction, reference, match",
    [
        ("18", "18", True),
        (" 18 ", "18", True),
        ("18.", "18", True),
        ("$18$", "18", True),
        ("The answer is 18", "18", True),
        ("The answer is: 18", "18", True),
        ("the final answer is $\\boxed{18}$.", "18", True),
        ("\\boxed{18}", "18", True),
        ("\\boxed{\\frac{3}{4}}", "\\frac{3}{4}", True),
        ("\\frac{3}{4}", "0.75", True),
        ("3/4", "0.75", True),
        ("2.50", "2.5", True),
        ("2.5", "5/2", True),
        ("-3", "-3.0", True),
        ("1,000", "1000", True),
        ("$1,234,567$", "1234567", True),
        ("X = 5", "x=5", True),
        ("Yes", "yes", True),
        ("(1,2)", "(1, 2)", True),
        ("19", "18", False),
        ("2.51", "2.5", False),
        ("1,2", "12", False),
        ("", "18", False),
        ("The answer is", "18", False),
        ("18 apples", "18", False),
    ],
)
def test_normalisation_table(prediction, reference, match):
    assert answers_match(prediction, reference) is match


def test_normalize_answer_examples():
    assert normalize_answer("  The answer is: $\\boxed{1,000}$. ") == "1000"
    assert normalize_answer("\\boxed{x^{2}}") == "x^{2}"
    assert normalize_answer(None) == ""


def test_extract_answer():
    assert extract_answer("So 3 + 4 = 7.\nThe answer is: 7") == "7"
    assert extract_answer("The answer is: 3. Wait. The answer is: 4") == "4"
    assert extract_answer("the answer is 12") == "12"
    assert extract_answer("no marker") is None


@pytest.mark.parametrize("attempt", range(5))
def test_reward_schedule(attempt):
    game = MetaMathQAGame("What is 2 + 3?", "5")
    for k in range(attempt):
        r, done, info = game.step(str(10 + k))
        assert (r, done, info["success"]) == (0.0, False, False)
        assert game.render_text() == INCORRECT_FEEDBACK == "Incorrect. Please think again."
        assert game.progress() == k + 1
    r, done, info = game.step("The answer is 5.")
    assert r == 1.0 / 2**attempt and done and info["success"] and game.success
    assert game.progress() == attempt


def test_five_wrong_answers_end_without_success():
    game = MetaMathQAGame("What is 2 + 3?", "5")
    assert isinstance(game, TextGame) and game.action_names is None
    assert game.render_text() == "What is 2 + 3?"
    for k in range(5):
        r, done, info = game.step("4")
        assert r == 0.0 and done == (k == 4) and not info["success"]
    assert not game.success
    assert game.step("5") == (0.0, True, {"success": False, "action_is_effective": False})
    short = MetaMathQAGame("q?", "1", max_attempts=2)
    short.step("0")
    assert short.step("0")[1]


def test_empty_answer_not_effective_and_oracle():
    game = MetaMathQAGame("What is 2 + 3?", "5")
    assert game.step("  ")[2]["action_is_effective"] is False
    assert game.oracle_action() == "5"
    assert game.step(game.oracle_action())[0] == 0.5
    with pytest.raises(ValueError):
        MetaMathQAGame("", "5")
    with pytest.raises(ValueError):
        MetaMathQAGame("q", "  ")


def test_synthetic_generate_deterministic():
    for seed in range(50):
        a, b = MetaMathQAGame.generate(seed), MetaMathQAGame.generate(seed)
        assert (a.question, a.answer) == (b.question, b.answer)
        assert a.step(a.oracle_action()) == (1.0, True, {"success": True, "action_is_effective": True})
        assert a.answer in a.explain(a.answer) and len(a.explain(a.answer).split()) < 40
    problems = [MathProblem("q1?", "1"), ("q2?", "2")]
    assert MetaMathQAGame.generate(3, problems=problems).question == "q2?"


def test_load_jsonl_query_response(tmp_path):
    path = tmp_path / "mm.jsonl"
    rows = [
        {"query": "What is 6 times 7?", "response": "6 * 7 = 42.\nThe answer is: 42", "type": "GSM_Rephrased"},
        {"question": "Half of 5?", "answer": "2.5"},
        {"question": "GSM style?", "answer": "3 + 4 = 7\n#### 7"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    problems = load_metamathqa(path)
    assert problems == [
        MathProblem("What is 6 times 7?", "42"),
        MathProblem("Half of 5?", "2.5"),
        MathProblem("GSM style?", "7"),
    ]
    assert load_metamathqa(str(path), limit=1) == problems[:1]
    game = MetaMathQAGame.from_problems(problems, seed=4)
    assert game.question == "Half of 5?" and game.step("5/2")[0] == 1.0


def test_load_json_array(tmp_path):
    path = tmp_path / "mm.json"
    path.write_text(json.dumps([{"query": "q?", "response": "The answer is: 9"}]))
    assert load_metamathqa(path) == [MathProblem("q?", "9")]


def test_load_errors(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.jsonl.*not found.*'query'"):
        load_metamathqa(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match=r"missing\.parquet.*not found"):
        load_metamathqa(str(tmp_path / "missing.parquet"))
    for bad in [
        {"query": "q?"},
        {"response": "The answer is: 3"},
        {"query": "q?", "response": "no marker"},
        {"question": "q?", "answer": ""},
        {"question": 3, "answer": "3"},
    ]:
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps({"question": "ok?", "answer": "1"}) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(ValueError, match=r"bad\.jsonl, line 2.*'query' and 'response'.*'question' and 'answer'"):
            load_metamathqa(path)
    path = tmp_path / "junk.jsonl"
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"junk\.jsonl, line 1"):
        load_metamathqa(path)


def test_hub_name_without_datasets_is_clear():
    try:
        import datasets  # noqa: F401

        pytest.skip("datasets installed; would hit the network")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="pip install datasets.*local"):
        load_metamathqa("meta-math/MetaMathQA")
