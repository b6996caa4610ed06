"""Game cores of the T3 active-reasoning tasks (pure Python)."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_torchrl.envs.games.circuit_decoding import CircuitDecodingGame
from ragen_torchrl.envs.games.circuit_formulas import candidate_classes, enumerate_family, parse_formula, truth_table
from ragen_torchrl.envs.games.guess_numbers import (
    ALL_CODES,
    GuessNumbersGame,
    consistent_candidates,
    feedback,
)
from ragen_torchrl.envs.games.movie_recommendation import (
    MovieRecommendationGame,
    generate_catalog,
    load_catalog,
)
from ragen_torchrl.envs.games.preference_belief import cosine
from ragen_torchrl.envs.games.preference_estimation import PreferenceEstimationGame
from ragen_torchrl.envs.games.preference_questions import parse_vector
from ragen_torchrl.envs.games.situation_puzzles import (
    PUZZLES,
    HFJudge,
    RuleBasedJudge,
    SituationPuzzlesGame,
    map_judge_output,
    match_fact,
    word_f1,
)
from ragen_torchrl.transforms.t3_rules import SimilarityDecreaseRule, make_rule

BASE_KEYS = {
    "kind",
    "valid",
    "feedback",
    "turn",
    "turns_left",
    "progress",
    "progress_before",
    "success",
    "action_is_effective",
}

BAD_QUERIES = [
    "",
    "   ",
    None,
    "123",
    "1123",
    "abcd",
    "12345",
    "1 2 3",
    "A(1,0)",
    "A(2,0,1)",
    "Z(1,0,1)",
    "compare 1",
    "compare 0 1",
    "compare 1 1",
    "compare 1 999",
    "rate 999",
    "rate",
    "estimate: 1,2",
    "estimate: nan, nan, nan, nan",
    "estimate: inf,1,1,1",
    "((((",
    "NOT " * 3000,
    "\x00\x01",
    "💥💥",
    "1" * 10_000,
    "compare 1 2; estimate: a, b",
    "interact:",
    "answer:",
]


def _make_games():
    return [
        GuessNumbersGame.generate(0),
        CircuitDecodingGame.generate(0),
        PreferenceEstimationGame.generate(0),
        MovieRecommendationGame.generate(0),
        SituationPuzzlesGame.generate(0),
    ]


# ---------------------------------------------------------------------------------- common API
def test_common_api_and_paper_defaults():
    expected = {
        "GuessNumbers": 10,
        "CircuitDecoding": 10,
        "PreferenceEstimation": 10,
        "MovieRecommendation": 5,
        "SituationPuzzles": 15,
    }
    for game in _make_games():
        assert game.action_names is None
        assert game.max_turns == expected[game.task_name]
        assert isinstance(game.render_text(), str) and game.render_text()
        action = game.oracle_action()
        assert action.startswith(("interact:", "answer:"))
        assert isinstance(game.explain(action), str) and game.explain(action)
        reward, done, info = game.step(action)
        assert BASE_KEYS <= set(info)
        assert isinstance(info["success"], bool) and isinstance(info["action_is_effective"], bool)
        assert info["turn"] == 1 and info["kind"] == "interact" and info["valid"]
        assert info["progress"] == pytest.approx(game.progress())
        # an invalid action uses a turn and changes nothing else
        reward, done, info = game.step("dance")
        assert (reward, done, info["valid"], info["kind"], game.turn) == (0.0, False, False, "invalid", 2)


@pytest.mark.parametrize("game_index", range(5))
def test_malformed_queries_and_answers_never_raise(game_index):
    game = _make_games()[game_index]
    for q in BAD_QUERIES:
        before = game.progress()
        text, info = game.interact(q)
        assert isinstance(text, str)
        if game.task_name != "SituationPuzzles":  # any non-empty text is a question there
            assert info["valid"] is False, q
            assert text.startswith("Invalid"), text
            assert game.progress() == before
        assert BASE_KEYS <= set(info)
    assert game.turn == len(BAD_QUERIES) and not game.done
    reward, info = game.answer("((( not an answer !!!")
    assert game.done and BASE_KEYS <= set(info)
    if game.task_name != "SituationPuzzles":
        assert reward == 0.0 and info["valid"] is False and not info["success"]
    # after the end nothing changes and nothing raises
    assert game.interact("0123")[1]["valid"] is False
    assert game.answer("anything")[0] == 0.0
    assert game.step("interact:1234")[1] is True


def _signature(game):
    return repr(
        [getattr(game, k, None) for k in ("secret", "tables", "preference", "items", "seen", "candidates")]
        + [getattr(getattr(game, "puzzle", None), "id", None)]
    )


def test_generate_is_deterministic_and_splits_differ():
    for cls in (
        GuessNumbersGame,
        CircuitDecodingGame,
        PreferenceEstimationGame,
        MovieRecommendationGame,
        SituationPuzzlesGame,
    ):
        a, b = cls.generate(3), cls.generate(3)
        assert _signature(a) == _signature(b) and a.render_text() == b.render_text()
        assert _signature(cls.generate(3, split="val")) != _signature(a)
        assert len({_signature(cls.generate(s)) for s in range(6)}) > 1
        with pytest.raises(ValueError):
            cls.generate(0, split="test")


# --------------------------------------------------------------------------------- GuessNumbers
def _brute_feedback(secret: str, guess: str) -> tuple[int, int]:
    a = sum(1 for i in range(4) if secret[i] == guess[i])
    b = sum(1 for i in range(4) for j in range(4) if i != j and secret[i] == guess[j])
    return a, b


codes = st.sampled_from(ALL_CODES)


@settings(max_examples=300, deadline=None)
@given(codes, codes)
def test_feedback_matches_brute_force(secret, guess):
    assert feedback(secret, guess) == _brute_feedback(secret, guess)


def test_all_codes():
    assert len(ALL_CODES) == 5040 == len(set(ALL_CODES))
    assert all(len(set(c)) == 4 and c.isdigit() for c in ALL_CODES)
    assert "0123" in ALL_CODES  # a leading zero is allowed
    assert consistent_candidates([]) == list(ALL_CODES)
    with pytest.raises(ValueError):
        feedback("1123", "0123")


def test_consistent_candidates_matches_brute_force():
    rng = random.Random(0)
    for trial in range(12):
        guesses = rng.sample(ALL_CODES, rng.randint(1, 3))
        if trial % 3 == 2:  # arbitrary (possibly contradictory) feedback
            history = [(g, (rng.randint(0, 2), rng.randint(0, 2))) for g in guesses]
            secret = None
        else:
            secret = rng.choice(ALL_CODES)
            history = [(g, _brute_feedback(secret, g)) for g in guesses]
        brute = [c for c in ALL_CODES if all(_brute_feedback(c, g) == fb for g, fb in history)]
        assert consistent_candidates(history) == brute
        if secret is not None:
            assert secret in brute


def test_guess_numbers_tracks_hypotheses_exactly():
    game = GuessNumbersGame("5301")
    text, info = game.interact("0123")
    assert text == "Guess 0123: 0 in place, 3 misplaced"
    assert info["hypothesis_size_before"] == 5040 and info["guess_in_previous_hypotheses"] is True
    assert info["hypothesis_size"] == len(consistent_candidates(game.history))
    assert game.progress() == info["hypothesis_size"] == game.hypothesis_size
    assert info["action_is_effective"] and info["in_place"] == 0 and info["misplaced"] == 3
    # a guess that the feedback already ruled out is outside H_{t-1}
    text, info = game.interact("4567")
    assert info["guess_in_previous_hypotheses"] is False
    # repeating a guess cannot shrink H
    _, info = game.interact("0123")
    assert info["repeated_query"] and not info["action_is_effective"]
    assert info["hypothesis_size"] == info["hypothesis_size_before"]
    r, done, info = game.step("answer: 5301")
    assert (r, done, info["success"]) == (1.0, True, True)


def test_guess_numbers_oracle_solves_30_seeds_within_budget():
    for seed in range(30):
        game = GuessNumbersGame.generate(seed, split="train" if seed % 2 else "val")
        while not game.done:
            action = game.oracle_action()
            reward, done, info = game.step(action)
            if info["kind"] == "interact":
                assert info["guess_in_previous_hypotheses"] and info["action_is_effective"]
        assert game.success and reward == 1.0 and game.turn <= game.max_turns


def test_guess_numbers_splits_are_disjoint():
    train = {GuessNumbersGame.generate(s).secret for s in range(200)}
    val = {GuessNumbersGame.generate(s, split="val").secret for s in range(200)}
    assert not train & val
    assert all(ALL_CODES.index(s) % 5 == 0 for s in val)


# ------------------------------------------------------------------------------ CircuitDecoding
def test_circuit_family_and_parser():
    assert len(enumerate_family(3, "default")) == 51
    assert len(candidate_classes(3, "default")) == 45
    assert len(candidate_classes(3, "basic")) == 24
    t = truth_table(parse_formula("x1 AND x2", 3), 3)
    for text in ["x2 AND x1", "x1 & x2", "(x1) and (x2)", "NOT (NOT x1 OR NOT x2)", "x1 && x2"]:
        assert truth_table(parse_formula(text, 3), 3) == t, text
    assert parse_formula("x1 OR x2 AND x3", 3) == parse_formula("x1 OR (x2 AND x3)", 3)
    for bad in ["", "x4", "x1 AND", "(x1", "x1 x2", "AND", "y1", "NOT " * 5000 + "x1", None]:
        assert parse_formula(bad, 3) is None


def test_circuit_pruning_keeps_truth_and_never_grows():
    rng = random.Random(1)
    for seed in range(8):
        game = CircuitDecodingGame.generate(seed, num_circuits=2)
        sizes = [game.hypothesis_size]
        for _ in range(12):
            bits = ",".join(str(rng.randint(0, 1)) for _ in range(3))
            name = rng.choice(["A", "B", "a", "b"])
            _, info = game.interact(f"{name}({bits})")
            assert info["valid"]
            for table, alive in zip(game.tables, game.alive):
                assert table in alive
            assert info["hypothesis_size"] <= info["hypothesis_size_before"]
            assert info["hypothesis_size"] == sum(info["hypothesis_sizes"].values())
            sizes.append(game.hypothesis_size)
        assert sizes == sorted(sizes, reverse=True)


def test_circuit_query_and_fractional_reward():
    game = CircuitDecodingGame(["x1 AND x2", "NOT x3"])
    assert game.interact("A(1,1,0)")[0] == "A(1,1,0) = 1"
    assert game.interact("b(001)")[0] == "B(0,0,1) = 0"
    reward, info = game.answer("A = x2 AND x1; B = x3")
    assert reward == 0.5 and info["correct"] == {"A": True, "B": False} and not info["success"]
    game = CircuitDecodingGame(["x1 AND x2", "NOT x3"])
    reward, info = game.answer("B: NOT x3\nA = NOT (NOT x1 OR NOT x2)")
    assert reward == 1.0 and info["success"]
    game = CircuitDecodingGame(["x1 AND x2", "NOT x3"])
    reward, info = game.answer("A = x1 AND; B = NOT x3")
    assert reward == 0.5 and info["valid"] is False


def test_circuit_unnamed_query_is_invalid():
    # REFERENCE §3: "a query names **one** circuit, A(1,0,1)"; reading every circuit at once is invalid
    game = CircuitDecodingGame(["x1 AND x2", "NOT x3"])
    size = game.hypothesis_size
    for q in ["(0 0 0)", "*(0,0,0)", "ALL(0,0,0)"]:
        text, info = game.interact(q)
        assert not info["valid"] and text.startswith("Invalid query") and "name one circuit" in text
        assert info["hypothesis_size"] == size == game.hypothesis_size and not game.queries
    assert game.turn == 3  # each invalid query still uses a turn


def test_circuit_oracle_asks_named_queries():
    rewards = []
    for seed in range(20):
        game = CircuitDecodingGame.generate(seed, split="val" if seed % 3 == 0 else "train")
        while not game.done:
            action = game.oracle_action()
            if action.startswith("interact:"):
                assert action.split(":", 1)[1][0] in game.names  # one named circuit per query
            reward, done, info = game.step(action)
            assert info["valid"]
        solved = sum(len(a) == 1 for a in game.alive)
        assert reward >= solved / len(game.names) and game.turn <= game.max_turns
        rewards.append(reward)
    # one circuit per query: 2 x 45 classes do not always fit in 9 queries
    assert sum(rewards) / len(rewards) >= 0.4


# ------------------------------------------------------------------------- PreferenceEstimation
def _vec_with_cos(c: float) -> list[float]:
    return [c, math.sqrt(1 - c * c), 0.0, 0.0]


def test_preference_threshold_and_similarity():
    items = [[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.9, 0.1, 0.5, 0.5]]
    for c, expected in [(0.87, 0.0), (0.89, 1.0), (0.99, 1.0), (-0.95, 0.0)]:
        game = PreferenceEstimationGame(items, [1.0, 0.0, 0.0, 0.0])
        reward, info = game.answer(", ".join(f"{x:.6f}" for x in _vec_with_cos(c)))
        assert reward == expected and info["similarity"] == pytest.approx(c, abs=1e-5)
    assert cosine([1, 0], [0, 0]) == 0.0 and cosine(None, [1, 0]) == 0.0
    assert parse_vector("[0.5, -1e-2, 3, .5]", 4) == [0.5, -0.01, 3.0, 0.5]
    assert parse_vector("weights: 1, 2", 2) == [1.0, 2.0]
    assert parse_vector("1, 2, 3", 2) is None


def test_preference_progress_and_similarity_rule():
    items = [[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.9, 0.1, 0.5, 0.5]]
    game = PreferenceEstimationGame(items, [1.0, 0.0, 0.0, 0.0])
    rule = make_rule("PreferenceEstimation")
    assert isinstance(rule, SimilarityDecreaseRule)
    rule.reset(game.progress())
    assert game.progress() == 0.0  # no estimate yet
    fired = []
    for c in [0.5, 0.9, 0.8, 0.85, 0.7, 0.6]:
        est = ", ".join(f"{x:.6f}" for x in _vec_with_cos(c))
        _, info = game.interact(f"compare 1 2; estimate: {est}")
        assert info["valid"] and info["estimate_reported"]
        assert info["similarity"] == pytest.approx(c, abs=1e-5) == game.progress()
        fired.append(rule.update(game.progress(), info))
    assert fired == [False, False, False, False, False, True]
    # the closed-form estimate needs nothing from the agent
    game = PreferenceEstimationGame(items, [1.0, 0.0, 0.0, 0.0], estimate_source="observations")
    _, info = game.interact("compare 1 3")
    assert info["preferred"] == 3 and not info["estimate_reported"] and game.progress() > 0.5


def test_preference_oracle_succeeds():
    wins = 0
    for seed, split in [(s, sp) for s in range(5) for sp in ("train", "val")]:
        game = PreferenceEstimationGame.generate(seed, split=split)
        assert game.dim == 8 and min(game.preference) >= 0  # reference: 8 non-negative dimensions
        while not game.done:
            action = game.oracle_action()
            assert action.startswith(("interact:Would you prefer item ", "answer:"))
            reward, done, info = game.step(action)
            assert info["valid"]
        wins += game.success
        assert game.turn <= game.max_turns
    assert wins >= 8


def test_preference_pairwise_questions_yes_equal_no():
    # REFERENCE §3: "the agent interacts only by pairwise questions ("Would you prefer X over Y?"
    # -> Yes / Equal / No)"; v* = (1, 0): utilities 0.9, 0.9, 0.2
    game = PreferenceEstimationGame([[0.9, 0.1], [0.9, 0.5], [0.2, 0.7]], [1.0, 0.0])
    text, info = game.interact("Would you prefer item 1 over item 3?")
    assert text == "Yes: the user prefers item 1 over item 3." and info["reply"] == "Yes" and info["preferred"] == 1
    text, info = game.interact("prefer 3 over 2")
    assert text == "No: the user prefers item 2 over item 3." and info["reply"] == "No"
    text, info = game.interact("Would you prefer item 1 over item 2? estimate: 1, 0")
    assert info["reply"] == "Equal" and info["preferred"] is None and text.startswith("Equal")
    assert info["estimate_updated"] and game.comparisons == [(0, 2), (1, 2)]  # Equal adds no constraint
    for bad in ["rate 1", "score of item 1", "Would you prefer item 1?"]:
        assert not game.interact(bad)[1]["valid"]
    assert PreferenceEstimationGame.generate(0, dim=3, nonnegative=False).dim == 3  # configurable


# -------------------------------------------------------------------------- MovieRecommendation
def test_catalog_generation_and_loading(tmp_path):
    cat = generate_catalog(0, num_items=50, dim=4)
    assert cat == generate_catalog(0, num_items=50, dim=4)
    assert len({c["title"] for c in cat}) == 50 and all(len(c["attributes"]) == 4 for c in cat)
    assert len({c["title"] for c in generate_catalog(1, num_items=400, dim=2)}) == 400
    jl = tmp_path / "cat.jsonl"
    jl.write_text("\n".join(json.dumps(c) for c in cat[:10]) + "\n")
    assert load_catalog(jl) == cat[:10]
    arr = tmp_path / "cat.json"
    arr.write_text(json.dumps(cat[:5]))
    assert load_catalog(arr) == cat[:5]
    csv_path = tmp_path / "cat.csv"
    csv_path.write_text('title,attributes\n"Alpha, the movie","[0.1, 0.2]"\nBeta,0.3;0.4\nGamma,0.5 0.6\n')
    loaded = load_catalog(csv_path)
    assert [c["title"] for c in loaded] == ["Alpha, the movie", "Beta", "Gamma"]
    assert loaded[1]["attributes"] == [0.3, 0.4]


@pytest.mark.parametrize(
    "name,content",
    [
        ("bad.jsonl", '{"title": "A", "attributes": [1, 2]}\nnot json\n'),
        ("bad2.jsonl", '{"name": "A", "attributes": [1, 2]}\n'),
        ("bad3.jsonl", '{"title": "A", "attributes": "x y"}\n'),
        ("bad4.jsonl", '{"title": "A", "attributes": [1, 2]}\n{"title": "B", "attributes": [1]}\n'),
        ("bad5.jsonl", ""),
        ("bad6.csv", "name,attributes\nA,1;2\n"),
        ("bad7.csv", "title,attributes\nA,1;zz\n"),
        ("bad8.json", "[1, 2]"),
        ("bad9.jsonl", '{"title": "A", "attributes": [1]}\n{"title": "a", "attributes": [2]}\n'),
    ],
)
def test_load_catalog_malformed(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError) as err:
        load_catalog(path)
    assert name in str(err.value)
    if "repeats" not in str(err.value):
        assert "title" in str(err.value) and "attributes" in str(err.value)


def test_movie_queries_and_scoring():
    game = MovieRecommendationGame.generate(5)
    a, b = (game.catalog[i] for i in game.seen[:2])
    ua, ub = (sum(x * y for x, y in zip(game.preference, m["attributes"])) for m in (a, b))
    text, info = game.interact("Would you prefer 1 over 2?")
    win, lose = (a, b) if ua > ub else (b, a)
    assert text == f"{'Yes' if ua > ub else 'No'}: the user prefers '{win['title']}' over '{lose['title']}'."
    assert info["query_type"] == "compare" and info["preferred"] == (1 if ua > ub else 2)
    _, info2 = game.interact("compare 2 1; estimate: 1, 0, 0, 0")
    assert info2["repeated_query"] and info2["estimate_reported"] and info2["estimate_updated"]
    # REFERENCE §3 (MR): "pairwise questions only, no numeric ratings"
    for q in ["rate 1", f"rate {a['title']}"]:
        text, info = game.interact(q)
        assert not info["valid"] and text.startswith("Invalid query")
    seen_title = game.catalog[game.seen[1]]["title"]
    reward, info = MovieRecommendationGame.generate(5).answer(seen_title)
    assert reward == 0.0 and info["valid"] is False
    best = game.catalog[game.best]["title"]
    wrong = next(game.catalog[i]["title"] for i in game.candidates if i != game.best)
    assert MovieRecommendationGame.generate(5).answer(f'"{best.lower()}".')[0] == 1.0
    assert MovieRecommendationGame.generate(5).answer(wrong)[0] == 0.0


def test_movie_observation_estimate_and_oracle():
    game = MovieRecommendationGame.generate(2, estimate_source="observations")
    _, info = game.interact("1 vs 2")
    assert info["estimate_updated"] and game.progress() != 0.0  # the comparison estimate
    wins = 0
    for seed in range(20):
        game = MovieRecommendationGame.generate(seed, split="val" if seed % 4 == 0 else "train")
        while not game.done:
            action = game.oracle_action()
            assert action.startswith(("interact:Would you prefer ", "answer:"))
            reward, done, info = game.step(action)
            assert info["valid"]
        wins += game.success
        assert game.turn <= game.max_turns
    # 4 Yes/No answers do not always single out the best of 8 unseen movies
    assert wins >= 8


# ----------------------------------------------------------------------------- SituationPuzzles
UNRELATED = ["Does the story involve a purple dragon?", "What is the capital of France?"]


@pytest.mark.parametrize("puzzle", PUZZLES, ids=[p.id for p in PUZZLES])
def test_rule_based_judge_on_every_puzzle(puzzle):
    judge = RuleBasedJudge()
    assert len(puzzle.facts) >= 4
    for fact in puzzle.facts:
        assert match_fact(puzzle, fact.question) is fact
        assert judge.judge(puzzle, fact.question) == ("Yes" if fact.truth else "No")
    for q in UNRELATED:
        assert judge.judge(puzzle, q) == "Unknown"
    game = SituationPuzzlesGame(puzzle)
    while not game.done:
        reward, done, info = game.step(game.oracle_action())
    assert reward == 1.0 and game.success and game.turn <= game.max_turns


def test_puzzle_set_and_splits():
    assert len(PUZZLES) >= 20 and len({p.id for p in PUZZLES}) == len(PUZZLES)
    train = {SituationPuzzlesGame.generate(s).puzzle.id for s in range(100)}
    val = {SituationPuzzlesGame.generate(s, split="val").puzzle.id for s in range(100)}
    assert not train & val and len(val) == 5


def test_word_f1_and_output_mapping():
    assert word_f1("The man was BALD!", "the man was bald") == 1.0
    assert word_f1("", "") == 1.0 and word_f1("x", "") == 0.0
    assert word_f1("a b", "a c") == pytest.approx(0.5)
    assert word_f1("a a b", "a b b") == pytest.approx(2 / 3)
    for text, out in [
        ("Yes", "Yes"),
        (" yes.", "Yes"),
        ("No, never", "No"),
        ("NO", "No"),
        ("Unknown", "Unknown"),
        ("Nope", "Unknown"),
        ("", "Unknown"),
        ("maybe yes", "Unknown"),
        (None, "Unknown"),
        ("Yesterday", "Unknown"),
    ]:
        assert map_judge_output(text) == out


def test_consecutive_unknown_progress():
    game = SituationPuzzlesGame(PUZZLES[0])
    rule = make_rule("SituationPuzzles")
    seq = [UNRELATED[0], UNRELATED[1], "Did the man have hiccups?"] + [UNRELATED[0]] * 5
    fired = []
    for q in seq:
        _, info = game.interact(q)
        fired.append(rule.update(game.progress(), info))
    assert game.progress() == 5 and info["consecutive_unknown"] == 5 and info["unknown_count"] == 7
    assert fired == [False] * 7 + [True]
    assert info["repeated_query"]
    _, info = game.interact("   ")
    assert info["valid"] is False and info["judge_answer"] is None and game.progress() == 6


def test_custom_judge_callable_and_hf_judge_stub():
    game = SituationPuzzlesGame(PUZZLES[1], judge=lambda p, q: "yes, definitely")
    assert game.interact("anything?")[0] == "Yes"

    class Batch(dict):
        def to(self, device):
            return self

    class Ids(list):
        @property
        def shape(self):
            return (1, len(self[0]))

    class StubTokenizer:
        chat_template = None
        pad_token_id = 0
        eos_token_id = 0

        def __init__(self):
            self.prompts = []

        def __call__(self, text, return_tensors=None):
            self.prompts.append(text)
            return Batch(input_ids=Ids([[1, 2, 3]]))

        def decode(self, ids, skip_special_tokens=True):
            return {7: " No.", 8: " Yes"}.get(ids[0], "???")

    class StubModel:
        def __init__(self, token):
            self.token = token

        def generate(self, input_ids, max_new_tokens, do_sample, pad_token_id):
            assert max_new_tokens == 4 and do_sample is False
            return [input_ids[0] + [self.token]]

    tok = StubTokenizer()
    assert HFJudge(StubModel(7), tok).judge(PUZZLES[0], "Was he thirsty?") == "No"
    assert PUZZLES[0].explanation in tok.prompts[0] and "Was he thirsty?" in tok.prompts[0]
    assert HFJudge(StubModel(8), tok).judge(PUZZLES[0], "Q?") == "Yes"
    assert HFJudge(StubModel(9), tok).judge(PUZZLES[0], "Q?") == "Unknown"


def test_hf_judge_with_tiny_qwen2():
    torch = pytest.importorskip("torch")
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = ["Yes", "No", "Unknown", "<pad>", "<eos>", "<unk>", "the", "man"]
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
    )
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    judge = HFJudge(model, tok, max_new_tokens=2)
    assert judge.judge(PUZZLES[0], "Did the man have hiccups?") in ("Yes", "No", "Unknown")
    with torch.no_grad():  # all logits equal -> greedy picks id 0 = "Yes"
        model.lm_head.weight.zero_()
    assert judge.judge(PUZZLES[0], "Did the man have hiccups?") == "Yes"
    assert judge.last_output.split()[0] == "Yes"
    game = SituationPuzzlesGame(PUZZLES[0], judge=judge)
    assert game.interact("Did the man have hiccups?")[1]["judge_answer"] == "Yes"


def test_puzzle_data_file_loads_and_bad_files_are_clear_errors(tmp_path):
    from ragen_torchrl.envs.games.situation_puzzles import load_puzzles

    assert load_puzzles() == PUZZLES and len(PUZZLES) >= 20
    own = tmp_path / "mine.json"
    own.write_text(
        '{"puzzles": [{"id": "p", "story": "s", "explanation": "e", '
        '"facts": [{"keywords": ["rain|wet"], "truth": true, "question": "Did it rain?"}]}]}'
    )
    (puzzle,) = load_puzzles(own)
    assert puzzle.facts[0].keywords == ("rain|wet",) and puzzle.facts[0].truth is True
    for bad in ('{"puzzles": [{"id": "p"}]}', "[1, 2]", "not json", '{"puzzles": []}'):
        own.write_text(bad)
        with pytest.raises(ValueError, match="mine.json"):
            load_puzzles(own)


# ------------------------------------------------------------------ CircuitDecoding presentation
def test_circuit_indexed_presentation_lists_candidates_and_scores_indices_like_formulas():
    # reference presentation: the candidate formulas listed with indices, answers by index
    from ragen_torchrl.envs.games.circuit_decoding import CircuitDecodingGame

    def game(presentation):
        return CircuitDecodingGame(["x1 AND x2", "NOT x2"], n_inputs=2, family="basic", presentation=presentation)

    g = game("indexed")
    # basic family over 2 inputs, family order: x1, x2, NOT x1, NOT x2, then AND/OR/XOR and their negations
    assert g.candidates[:4] == ["x1", "x2", "NOT x1", "NOT x2"] and len(g.candidates) == 10
    text = g.render_text()
    assert "1. x1\n2. x2\n3. NOT x1\n4. NOT x2\n" in text and "A = <index>; B = <index>" in text
    assert "OP one of" not in text
    assert "1. x1" not in game("formula").render_text()  # the family in words
    i_and, i_not2 = g.candidates.index("x1 AND x2") + 1, 4
    # a query is the same in both presentations (one named circuit)
    assert game("indexed").interact("A(1,1)")[0] == game("formula").interact("A(1,1)")[0] == "A(1,1) = 1"
    cases = [
        (f"A = {i_and}; B = {i_not2}", "A = x1 AND x2; B = NOT x2", 1.0),
        (f"A = #{i_and}; B = 1", "A = x2 AND x1; B = x1", 0.5),  # index 1 = x1, wrong for B
        ("A = 99; B = 4", "A = x1 AND x3; B = NOT x2", 0.5),  # out of range / unparsable: 0 for A
    ]
    for indexed_answer, formula_answer, reward in cases:
        r_idx, info_idx = game("indexed").answer(indexed_answer)
        r_f, info_f = game("formula").answer(formula_answer)
        assert r_idx == r_f == reward and info_idx["correct"] == info_f["correct"]
    # formula text is accepted in the indexed presentation too; an index is not a formula there
    assert game("indexed").answer("A = x1 AND x2; B = NOT x2")[0] == 1.0
    assert game("formula").answer(f"A = {i_and}; B = {i_not2}")[0] == 0.0


def test_circuit_indexed_oracle_answers_with_indices():
    from ragen_torchrl.envs.active.tasks import CircuitDecodingEnv

    env = CircuitDecodingEnv(num_envs=1, num_circuits=1, n_inputs=2, family="basic")  # default: indexed
    game = env.game_factory(0, 0)
    while True:
        action = game.oracle_action()
        if action.startswith(game.ANSWER_PREFIX):
            break
        game.step(action)
    payload = game.split_action(action)[1]
    assert payload.split("=")[1].strip().isdigit()
    assert game.step(action)[0] == 1.0
