"""SearchQA game core: scoring, action parsing, the BM25 retriever and its cache, the generated
world, the oracle on every shipped question, and the loaders of the user's files."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import OrderedDict

import pytest

from ragen_torchrl.envs.games import retrieval
from ragen_torchrl.envs.games.retrieval import BM25Retriever, Passage, default_cache_dir, tokenize
from ragen_torchrl.envs.games.searchqa import SearchQAGame, parse_action
from ragen_torchrl.envs.games.searchqa_data import load_corpus, load_questions
from ragen_torchrl.envs.games.searchqa_scoring import exact_match, normalize_answer, score_answer, token_f1
from ragen_torchrl.envs.games.searchqa_world import QAItem, generate_world

CORPUS = [
    Passage("a", "Telmora", "Telmora is a city in the country of Brisland."),
    Passage("b", "Orvane Dask", "Orvane Dask was born in the city of Telmora."),
    Passage("c", "Orvane Dask", "Orvane Dask was born in the year 1931."),
    Passage("d", "Kelvari Works", "The founder of Kelvari Works is Orvane Dask."),
    Passage("e", "Vel", "Vel is a city in the country of Ostmark."),
    Passage("f", "Ostmark", "Ostmark is a country by the sea."),
    Passage("g", "Brisland", "Brisland is a country of hills."),
]


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch):
    """Each test sees an empty in-process index memo (so disk caching is observable)."""
    monkeypatch.setattr(retrieval, "_MEMO", OrderedDict())


@pytest.fixture
def retriever(tmp_path):
    return BM25Retriever(CORPUS, cache_dir=tmp_path)


def play(game: SearchQAGame, actions: list[str]) -> list[tuple[float, bool, dict]]:
    return [game.step(a) for a in actions]


# --------------------------------------------------------------------------- scoring (hand-worked)
def test_normalisation_is_squad_style():
    assert normalize_answer("The Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("  a  Tale of TWO cities. ") == "tale of two cities"
    assert normalize_answer("U.S.A.") == "usa"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert normalize_answer(None) == "" and normalize_answer(42) == ""


def test_exact_match_against_any_gold_answer():
    assert exact_match("the Telmora.", ["Vel", "Telmora"])
    assert not exact_match("Telmora City", ["Telmora"])
    assert not exact_match("", [""]) and not exact_match("the", ["a"])  # empty after normalising


def test_token_f1_hand_worked():
    # prediction "orvane dask born" vs gold "orvane dask": 2 common, P = 2/3, R = 1, F1 = 0.8
    assert token_f1("Orvane Dask born", "Orvane Dask") == pytest.approx(0.8)
    # "city of telmora" vs "telmora": 1 common, P = 1/3, R = 1, F1 = 0.5
    assert token_f1("the city of Telmora", "Telmora") == pytest.approx(0.5)
    # repeated tokens count once per occurrence: "dask dask" vs "orvane dask": 1 common, P=1/2 R=1/2
    assert token_f1("Dask Dask", "Orvane Dask") == pytest.approx(0.5)
    assert token_f1("yes", "no") == 0.0 and token_f1("no", "no") == 1.0  # HotpotQA's yes/no rule
    assert token_f1("yes it is", "yes") == 0.0


def test_reward_rule_exact_then_f1_above_threshold():
    assert score_answer("Orvane Dask", ["orvane dask"]) == (1.0, True, 1.0)
    # F1 0.8 >= 0.3: the F1 itself, no success
    assert score_answer("Orvane Dask born", ["Orvane Dask"]) == pytest.approx((0.8, False, 0.8))
    # "a b c d" vs "a": P = 1/4, R = 1, F1 = 0.4 -> 0.4; "a b c d e f g" vs "a": F1 = 0.25 -> 0
    assert score_answer("w x y z", ["w"]).reward == pytest.approx(0.4)
    low = score_answer("t u v w x y z", ["t"])
    assert low.reward == 0.0 and low.f1 == pytest.approx(0.25) and not low.exact_match
    assert score_answer("Vel", ["Telmora"]) == (0.0, False, 0.0)
    # the best gold answer counts
    assert score_answer("Orvane", ["Vel", "Orvane Dask"]).reward == pytest.approx(2 / 3)
    assert score_answer("x" * 100_000, ["x"]).reward == 0.0  # bounded work on huge answers


# --------------------------------------------------------------------------- action parsing
@pytest.mark.parametrize(
    "text,expected",
    [
        ("search[Kelvari Works founder]", ("search", "Kelvari Works founder")),
        ("  SEARCH [ Telmora ]  ", ("search", "Telmora")),
        ("Finish[1931]", ("finish", "1931")),
        ("finish[]", None),
        ("search[   ]", None),
        ("search Telmora", None),
        ("search[a] || finish[b]", None),
        ("finish[a]]", None),
        ("search[[a]]", None),
        ("I think finish[Vel]", None),
        ("lookup[Vel]", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_action(text, expected):
    assert parse_action(text) == expected


# --------------------------------------------------------------------------- retriever
def test_tokenizer_drops_stopwords_and_punctuation():
    assert tokenize("In which country is Telmora?") == ["country", "telmora"]
    assert tokenize("") == [] and tokenize("the of a") == []


def test_bm25_ranks_the_passage_with_more_matching_terms_first(retriever):
    # "born" is in b and c; "city" in a, b and e; only b has both with "orvane dask"
    assert [p.id for p in retriever.search("Orvane Dask born city")][:2] == ["b", "c"]
    assert retriever.search("Orvane Dask born year")[0].id == "c"
    assert retriever.search("founder Kelvari")[0].id == "d"
    assert retriever.search("Telmora country")[0].id == "a"


def test_search_returns_at_most_k_matching_passages(retriever):
    assert len(retriever.search("country", k=2)) == 2
    assert {p.id for p in retriever.search("country", k=10)} == {"a", "e", "f", "g"}  # only matching ones
    assert retriever.search("zebra") == [] and retriever.search("") == [] and retriever.search("the of") == []
    assert retriever.search(None) == [] and retriever.search("country", k=0) == []
    assert retriever.search("\x00\ud800 " * 3000) == []  # never raises on hostile text


def test_ties_are_broken_by_corpus_order(tmp_path):
    same = [Passage(str(i), "", "alpha beta") for i in range(8)]
    r = BM25Retriever(same, cache_dir=tmp_path)
    assert [p.id for p in r.search("alpha", k=5)] == ["0", "1", "2", "3", "4"]


def test_index_is_cached_on_disk_by_content_hash_and_loaded_afterwards(tmp_path, monkeypatch):
    first = BM25Retriever(CORPUS, cache_dir=tmp_path)
    assert first.source == "built" and (first.cache_path / "meta.json").is_file()
    assert first.cache_path.parent == tmp_path / "bm25" and first.cache_path.name == first.fingerprint
    monkeypatch.setattr(retrieval, "_MEMO", OrderedDict())  # a new process
    second = BM25Retriever(list(CORPUS), cache_dir=tmp_path)
    assert second.source == "disk" and second.fingerprint == first.fingerprint
    assert [p.id for p in second.search("Orvane Dask born city")] == [
        p.id for p in first.search("Orvane Dask born city")
    ]
    # in the same process, the index is shared
    assert BM25Retriever(CORPUS, cache_dir=tmp_path).source == "memory"
    # an edited passage is a different corpus
    edited = CORPUS[:-1] + [Passage("g", "Brisland", "Brisland is a country of lakes.")]
    third = BM25Retriever(edited, cache_dir=tmp_path)
    assert third.source == "built" and third.fingerprint != first.fingerprint
    assert sorted(p.name for p in (tmp_path / "bm25").iterdir()) == sorted([first.fingerprint, third.fingerprint])


def test_corrupt_cache_is_rebuilt(tmp_path, monkeypatch, caplog):
    first = BM25Retriever(CORPUS, cache_dir=tmp_path)
    (first.cache_path / "vocab.index.json").write_text("{not json")
    monkeypatch.setattr(retrieval, "_MEMO", OrderedDict())
    with caplog.at_level(logging.WARNING):
        again = BM25Retriever(CORPUS, cache_dir=tmp_path)
    assert again.source == "built" and "rebuilding" in caplog.text
    assert again.search("Telmora country")[0].id == "a"
    monkeypatch.setattr(retrieval, "_MEMO", OrderedDict())
    assert BM25Retriever(CORPUS, cache_dir=tmp_path).source == "disk"


def test_unwritable_cache_keeps_the_index_in_memory(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING):
        r = BM25Retriever(CORPUS, cache_dir=blocker)  # a file, not a directory
    assert r.source == "built" and r.search("Telmora country")[0].id == "a"
    assert "stays in memory" in caplog.text
    assert BM25Retriever(CORPUS, cache=False).cache_path is None


def test_default_cache_dir_honours_ragen_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path))
    assert default_cache_dir() == str(tmp_path)
    monkeypatch.delenv("RAGEN_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "ragen_torchrl")
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path / "rc"))
    assert BM25Retriever(CORPUS).cache_path.parent == tmp_path / "rc" / "bm25"


def test_missing_bm25s_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(ImportError, match=r"pip install ragen_torchrl\[search\]"):
        BM25Retriever(CORPUS, cache=False)


def test_empty_corpus_is_an_error():
    with pytest.raises(ValueError, match="at least one passage"):
        BM25Retriever([], cache=False)


# --------------------------------------------------------------------------- generated world
def test_world_is_deterministic_and_seed_dependent():
    a, b = generate_world(0), generate_world.__wrapped__(0)
    assert a == b
    assert generate_world(1).passages != a.passages
    assert len(a.passages) == 300 and len(a.questions) == 480
    assert sum(len(q.hops) == 2 for q in a.questions) == 180


def test_world_passages_state_one_fact_each_and_questions_chain_hops():
    world = generate_world(0)
    ids = [p.id for p in world.passages]
    assert len(set(ids)) == len(ids)
    by_id = {p.id: p for p in world.passages}
    for p in world.passages:
        assert p.text.count(".") == 1 and p.text.endswith(".") and p.title in p.text
    for q in world.questions:
        assert len(set(map(_key, world.questions))) == len(world.questions)
        assert q.answers == (q.hops[-1].value,) and 1 <= len(q.hops) <= 2
        for i, hop in enumerate(q.hops):
            passage = by_id[hop.passage_id]
            assert hop.value in passage.text  # the fact is stated by its passage
            if i:
                assert passage.title == q.hops[i - 1].value  # hop 2's subject is hop 1's value


def _key(q: QAItem) -> str:
    return q.question.lower()


def test_bad_world_sizes_are_errors():
    with pytest.raises(ValueError, match="num_companies"):
        generate_world(0, num_people=3, num_companies=5)


# --------------------------------------------------------------------------- game rules
def game_for(retriever, question="Where was the founder of Kelvari Works born?", answers=("Telmora",), hops=()):
    return SearchQAGame(QAItem(question, answers, hops), retriever)


def test_search_shows_top_passages_and_finish_scores(retriever):
    game = game_for(retriever)
    assert game.render_text() == (
        "Question: Where was the founder of Kelvari Works born?\nActions: search[query] or finish[answer]."
    )
    reward, done, info = game.step("search[Kelvari Works founder]")
    assert (reward, done, info["action_is_effective"]) == (0.0, False, True)
    lines = game.render_text().split("\n")
    assert lines[0] == "Results for search[Kelvari Works founder]:"
    assert lines[1] == "1. Kelvari Works: The founder of Kelvari Works is Orvane Dask."
    assert lines[-1] == "Actions: search[query] or finish[answer]."
    # the same search again shows nothing new
    assert game.step("search[Kelvari Works founder]")[2]["action_is_effective"] is False
    assert game.step("search[zebra]")[:2] == (0.0, False)
    assert game.render_text().startswith("No passage matches search[zebra].")
    reward, done, info = game.step("finish[the Telmora]")
    assert (reward, done, info["success"], info["exact_match"]) == (1.0, True, True, True)
    assert game.render_text() == "Your answer the Telmora is correct. Reward: 1.00"
    assert game.step("finish[Telmora]") == (0.0, True, {"success": True, "action_is_effective": False})


def test_partial_and_wrong_answers(retriever):
    game = game_for(retriever, answers=("Orvane Dask",))
    reward, done, info = game.step("finish[Dask]")  # P = 1, R = 1/2, F1 = 2/3
    assert reward == pytest.approx(2 / 3) and done and not info["success"] and info["f1"] == pytest.approx(2 / 3)
    game = game_for(retriever)
    assert game.step("finish[Vel]")[:2] == (0.0, True) and not game.success


def test_invalid_action_changes_nothing(retriever):
    game = game_for(retriever)
    game.step("search[Telmora]")
    before = (game.render_text(), game.searches, game.progress())
    for bad in ("search[]", "finish[a] || search[b]", "Telmora", "", "\x00" * 100, "9" * 5000):
        assert game.step(bad) == (0.0, False, {"success": False, "action_is_effective": False})
    assert (game.render_text(), game.searches, game.progress()) == before


def test_passages_are_cut_to_passage_chars(tmp_path):
    long = [Passage("x", "Long", "word " * 500)]
    game = SearchQAGame(QAItem("q?", ("a",)), BM25Retriever(long, cache=False), passage_chars=40)
    game.step("search[word]")
    line = game.render_text().split("\n")[1]
    assert line.startswith("1. Long: word") and line.endswith("...") and len(line) <= 3 + 40


def test_oracle_solves_every_shipped_question_by_searching_each_hop(tmp_path):
    world = generate_world(0)
    r = BM25Retriever(world.passages, cache_dir=tmp_path)
    for q in world.questions:
        game = SearchQAGame(q, r)
        turns = 0
        for hop in q.hops:
            action = game.oracle_action()
            assert action == f"search[{hop.query}]", q.question
            game.step(action)
            turns += 1
            assert hop.passage_id in {p.id for p in game.results}, (q.question, hop.query)  # the fact is shown
            assert hop.value in game.render_text()
        assert game.progress() == 1.0
        reward, done, info = game.step(game.oracle_action())
        assert (reward, done, info["success"]) == (1.0, True, True), q.question
        assert turns + 1 <= 5 and game.progress() == 0.0


def test_oracle_without_hops_searches_the_question_then_answers(retriever):
    game = game_for(retriever, question="Who founded Kelvari Works?", answers=("Orvane Dask",))
    assert game.oracle_action() == "search[Who founded Kelvari Works?]"
    game.step(game.oracle_action())
    assert game.oracle_action() == "finish[Orvane Dask]"
    assert game.step(game.oracle_action())[0] == 1.0


def test_explanations_depend_on_the_observation(tmp_path):
    world = generate_world(0)
    r = BM25Retriever(world.passages, cache_dir=tmp_path)
    q = next(q for q in world.questions if q.question.startswith("Where was the founder of"))
    game = SearchQAGame(q, r)
    first = game.explain(game.oracle_action())
    assert first == f"I need {q.hops[0].need}."
    game.step(game.oracle_action())
    second = game.explain(game.oracle_action())
    assert q.hops[0].value in second and q.hops[1].need in second
    game.step(game.oracle_action())
    assert q.answers[0] in game.explain(game.oracle_action())
    other = SearchQAGame(world.questions[0], r)
    assert other.explain(other.oracle_action()) != first


# --------------------------------------------------------------------------- loaders
def write(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_load_questions_reads_every_answer_field(tmp_path):
    path = write(
        tmp_path / "q.jsonl",
        [
            {"question": "Q1?", "answers": ["Ann", "Bo"]},
            {"question": "Q2?", "answer": "Cy"},
            {"question": "Q3?", "answer": ["Di"]},
            {"question": "Q4?", "golden_answers": ["Ed"]},
            {"question": "Q5?", "ground_truth": "Fe"},
            {"question": "Q6?", "answers": {"text": ["Gu"], "answer_start": [0]}},
            {"question": " Q7? ", "answers": [1987]},
        ],
    )
    items = load_questions(path)
    assert [(q.question, q.answers) for q in items] == [
        ("Q1?", ("Ann", "Bo")),
        ("Q2?", ("Cy",)),
        ("Q3?", ("Di",)),
        ("Q4?", ("Ed",)),
        ("Q5?", ("Fe",)),
        ("Q6?", ("Gu",)),
        ("Q7?", ("1987",)),
    ]
    assert len(load_questions(path, limit=2)) == 2


@pytest.mark.parametrize(
    "record,match",
    [
        ({"answers": ["A"]}, r"line 2: field 'question'"),
        ({"question": "Q?"}, r"line 2: no gold answer field"),
        ({"question": "Q?", "answers": []}, r"line 2: field 'answers' holds no answer that is non-empty"),
        ({"question": "Q?", "answer": "  "}, r"line 2: field 'answer' holds no answer that is non-empty"),
        ({"question": "Q?", "answer": "The"}, r"line 2: field 'answer' holds no answer that is non-empty"),
        ("[1, 2]", r"line 2: expected a JSON object"),
        ("{broken", r"line 2: invalid JSON"),
    ],
)
def test_load_questions_errors_name_file_line_and_field(tmp_path, record, match):
    path = write(tmp_path / "q.jsonl", [{"question": "ok?", "answer": "x"}, record])
    with pytest.raises(ValueError, match=match) as err:
        load_questions(path)
    assert str(path) in str(err.value)


def test_load_corpus_and_its_errors(tmp_path):
    path = write(
        tmp_path / "c.jsonl",
        [
            {"id": "p1", "title": "T1", "text": "Body one."},
            {"id": 2, "text": "No title."},
            {"id": "p3", "contents": '"Hamlet"\nA play.'},
        ],
    )
    assert load_corpus(path) == [
        Passage("p1", "T1", "Body one."),
        Passage("2", "", "No title."),
        Passage("p3", "Hamlet", "A play."),
    ]
    for record, match in [
        ({"title": "T", "text": "x"}, "line 2: field 'id'"),
        ({"id": "p1", "text": "x"}, "line 2: id 'p1' repeats the passage of line 1"),
        ({"id": "p2", "title": "T"}, "line 2: field 'text'"),
        ({"id": "p2", "title": 3, "text": "x"}, "line 2: field 'title'"),
    ]:
        bad = write(tmp_path / "bad.jsonl", [{"id": "p1", "text": "ok"}, record])
        with pytest.raises(ValueError, match=match):
            load_corpus(bad)
    with pytest.raises(ValueError, match="file not found"):
        load_corpus(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="no records"):
        load_corpus(write(tmp_path / "empty.jsonl", []))


def test_cache_files_stay_under_the_cache_dir(tmp_path):
    BM25Retriever(CORPUS, cache_dir=tmp_path / "c")
    files = [os.path.relpath(os.path.join(d, f), tmp_path) for d, _, fs in os.walk(tmp_path) for f in fs]
    assert files and all(f.startswith(os.path.join("c", "bm25")) for f in files)
    assert not [f for f in files if os.path.basename(os.path.dirname(f)).startswith(".")]  # no temp dir left


def test_top_k_equals_a_brute_force_ranking_of_bm25s_scores(tmp_path):
    import random

    import numpy as np

    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    # "common" is in most passages (a long posting list: the dense path), the w* words in a few (sparse)
    passages = [
        Passage(str(i), "", " ".join(rng.choices(words, k=rng.randint(1, 6))) + " common" * (rng.random() < 0.7))
        for i in range(300)
    ]
    words.append("common")
    r = BM25Retriever(passages, cache=False)
    for _ in range(200):
        query = " ".join(rng.choices(words + ["unknown"], k=rng.randint(1, 4)))
        k = rng.choice([1, 3, 5, 50, 400])
        ids = sorted({r._vocab[t] for t in tokenize(query) if t in r._vocab})
        scores = np.asarray(r._bm25.get_scores_from_ids(ids), dtype=np.float64) if ids else np.zeros(300)
        expected = [i for i in sorted(range(300), key=lambda i: (-round(scores[i], 4), i)) if scores[i] > 0][:k]
        assert [int(p.id) for p in r.search(query, k=k)] == expected, query
