"""A model reply never kills a training run.

Known bad inputs (a number with more than 4,300 digits in
MovieRecommendation's ``int(ref.lstrip("#"))`` and PreferenceEstimation's ``parse_compare``),
the regex bombs found by the fuzz suite, and the env's safety net: an env exception on one
row is logged with the row's level seed, the row ends with the format penalty, and training
goes on.
"""

from __future__ import annotations

import logging
import math
import time

import pytest
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.games import guess_numbers, metamathqa
from ragen_torchrl.envs.games.circuit_decoding import CircuitDecodingGame
from ragen_torchrl.envs.games.preference_estimation import PreferenceEstimationGame
from ragen_torchrl.envs.games.preference_questions import parse_compare, parse_pair
from ragen_torchrl.envs.parsing import INT_CLAMP, MAX_REPLY_CHARS, safe_int
from ragen_torchrl.envs.text_env import ENV_ERROR_MESSAGE

TEN_K = "1" * 10_000  # "a number with more than 4,300 digits"


def _reset(env, seeds):
    n = len(seeds)
    return env.reset(TensorDict(level_seed=torch.tensor(seeds), group_id=torch.arange(n), batch_size=[n]))


def _step(env, td, replies):
    msgs = History(role=["assistant"] * len(replies), content=list(replies), batch_size=(len(replies),))
    td = td.clone(False)
    td.set(("history", "full"), td["history", "prompt"].extend(msgs.unsqueeze(-1), inplace=False, dim=-1))
    return env.step(td)["next"]


# ------------------------------------------------------------------ the exact inputs
def test_safe_int_never_raises_and_clamps():
    # int() raises ValueError on "a number with more than 4,300 digits"
    assert safe_int(TEN_K) == INT_CLAMP == 10**18
    assert safe_int("-" + TEN_K) == -(10**18)
    assert safe_int("0" * 10_000 + "7") == 7  # leading zeros are not significant
    assert (safe_int("12"), safe_int("１２"), safe_int("1e3"), safe_int("\x00"), safe_int("\ud800")) == (
        12,
        12,
        None,
        None,
        None,
    )


def test_movie_recommendation_seen_position_10k_digits():
    # MovieRecommendation `int(ref.lstrip("#"))` raised ValueError on 10,000 digits
    env = make_env("movie_recommendation", num_envs=1)
    _reset(env, [0])
    game = env.games[0]
    assert game._seen_position("#" + TEN_K) is None and game._seen_position(TEN_K) is None
    assert game._seen_position("#2") == 1  # 1-based ids: "#2" is the second seen movie


def test_preference_parse_compare_10k_digits():
    # PreferenceEstimation `parse_compare` raised ValueError on 10,000 digits
    assert parse_compare("compare 1 " + TEN_K) == (1, 10**18)
    assert parse_pair("Would you prefer item " + TEN_K + " over item 2?") == (10**18, 2)
    assert parse_compare("compare 3 7") == (3, 7)


def test_preference_game_10k_digit_query_is_invalid_and_changes_nothing():
    # "penalty, state unchanged" (a T3 query still uses its turn)
    game = PreferenceEstimationGame([[1.0, 0.0], [0.0, 1.0]], [0.8, 0.6])
    reward, done, info = game.step("interact:compare 1 " + TEN_K)
    assert (reward, done, info["valid"], game.turn) == (0.0, False, False, 1)
    assert game.comparisons == [] and game.asked == set() and game.estimate is None
    assert "item ids must be between 1 and 2" in info["feedback"]


@pytest.mark.parametrize("name", ["movie_recommendation", "preference_estimation"])
def test_t3_env_step_with_5000_digit_id(name):
    # the rollout died with ValueError; 5,000 digits fit in the 8192-char reply cap
    env = make_env(name, num_envs=1)
    td = _reset(env, [0])
    query = "Would you prefer " + "1" * 5_000 + " over 2?"
    nxt = _step(env, td, [f"<think>x</think><interact>{query}</interact>"])
    assert nxt["reward"].item() == 0.0  # a query is unrewarded (terminal rewards only)
    assert not nxt["done"].item() and not nxt["action_is_valid"].item() and nxt["is_query"].item()
    assert nxt["history", "prompt"][0].content[-1].startswith("Feedback: Invalid query")
    assert env.games[0].comparisons == []


def test_metamathqa_core_10k_digit_fraction():
    # every parser treats any string as a possibly-malformed reply, never raises
    assert metamathqa._as_number("1/" + TEN_K) is None
    assert metamathqa._as_number("\\frac{1}{" + TEN_K + "}") is None
    assert metamathqa._as_number("3/4") == metamathqa.Fraction(3, 4)
    assert not metamathqa.answers_match("1/" + TEN_K, "0")


# ------------------------------------------------------------------ regex bombs (no stall)
def _fast(fn, *args, budget_s=1.0):
    start = time.perf_counter()
    out = fn(*args)
    assert time.perf_counter() - start < budget_s
    return out


def test_circuit_answer_with_space_run_is_fast():
    # "no env step hung" must keep holding; (.+?)\s*\.?\s*$ backtracked cubically
    game = CircuitDecodingGame.generate(0, "train", num_circuits=1, n_inputs=3)
    assert _fast(game.parse_answer, "A = x1" + " " * 2_000 + "x") == {"A": None}
    assert _fast(game.parse_answer, "A = x1 AND x2 .") == {"A": ("AND", ("var", 1), ("var", 2))}


def test_pair_question_with_space_run_is_fast():
    # neighbouring \s* pieces in the question regexes backtracked cubically (28 s for 2,000 spaces)
    assert _fast(parse_pair, " " * 2_000 + "x") is None
    assert _fast(parse_pair, "Would you  prefer\n item 3   over item 7 ?") == (3, 7)


def test_guess_code_with_space_run_is_fast():
    assert _fast(guess_numbers._parse_code, "1" + " " * 8_000 + "y") is None
    assert guess_numbers._parse_code("  Guess: 0, 1, 2, 3 ") == "0123"


def test_megabyte_reply_is_cut_before_parsing():
    # the env cuts every reply to MAX_REPLY_CHARS (8192) before any parser or game sees it
    env = make_env("frozenlake", num_envs=2)
    td = _reset(env, [7, 7])
    late = "x" * MAX_REPLY_CHARS + "<think>x</think><answer>Down</answer>"  # answer past the cap
    early = "<think>x</think><answer>Down</answer>" + "x" * (1 << 20)
    nxt = _step(env, td, [late, early])
    # row 0: no answer inside the cap -> format penalty -0.1; row 1: Down from (0,1), goal (2,1)
    assert nxt["reward"].flatten().tolist() == pytest.approx([-0.1, 0.0])
    assert nxt["action_is_valid"].tolist() == [False, True]


# ------------------------------------------------------------------ the safety net
def _boom(action):
    raise RuntimeError("injected env bug")


def test_env_exception_ends_only_that_row_with_format_penalty(caplog):
    # "an env exception on one row is logged with the row's level seed, the row ends
    # with the format penalty, and training goes on"
    env = make_env("frozenlake", num_envs=2, format_penalty=-0.25)
    td = _reset(env, [3, 7])
    env.games[0].step = _boom  # row 0 (level seed 3) has a bug
    reply = "<think>x</think><answer>Down</answer>"
    with caplog.at_level(logging.WARNING, logger="ragen_torchrl.envs.text_env"):
        nxt = _step(env, td, [reply, reply])
    assert nxt["reward"].flatten().tolist() == [-0.25, 0.0]
    assert nxt["done"].flatten().tolist() == [True, False]
    assert nxt["terminated"].flatten().tolist() == [True, False]
    assert nxt["truncated"].flatten().tolist() == [False, False]
    assert nxt["success"].tolist() == [False, False] and nxt["turn"].tolist() == [1, 1]
    assert nxt["history", "prompt"][0].content[-1] == ENV_ERROR_MESSAGE
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "FrozenLakeEnv" in record.getMessage() and "level_seed=3" in record.getMessage()
    assert "RuntimeError: injected env bug" in record.getMessage()
    assert env.env_error_count == 1
    # the other row goes on: Down again from (1,1) reaches the goal (2,1), reward 1
    nxt1 = _step(env, nxt[1:2], [reply])
    assert nxt1["reward"].item() == 1.0 and nxt1["success"].item() and nxt1["done"].item()


def test_non_finite_reward_is_an_env_error(caplog):
    # a NaN reward would poison the advantages: treated like an exception of that row
    env = make_env("frozenlake", num_envs=1)
    td = _reset(env, [7])
    env.games[0].step = lambda action: (math.nan, False, {"success": False, "action_is_effective": True})
    with caplog.at_level(logging.WARNING, logger="ragen_torchrl.envs.text_env"):
        nxt = _step(env, td, ["<think>x</think><answer>Down</answer>"])
    assert nxt["reward"].item() == pytest.approx(-0.1) and nxt["terminated"].item()
    assert "level_seed=7" in caplog.text and "non-finite reward" in caplog.text


def test_error_after_the_turn_was_counted_counts_it_once():
    # a raise in progress() (after the turn count) still ends the row at turn 1, progress 0.0
    env = make_env("frozenlake", num_envs=1)
    td = _reset(env, [7])
    env.games[0].progress = lambda: 1 / 0
    nxt = _step(env, td, ["<think>x</think><answer>Down</answer>"])
    assert nxt["turn"].tolist() == [1] and nxt["progress"].tolist() == [0.0] and nxt["done"].item()
    assert nxt["reward"].item() == pytest.approx(-0.1)


def test_t3_env_exception_ends_only_that_row(caplog):
    env = make_env("guess_numbers", num_envs=2)
    td = _reset(env, [11, 12])
    env.games[0].step = _boom
    reply = "<think>x</think><interact>0123</interact>"
    with caplog.at_level(logging.WARNING, logger="ragen_torchrl.envs.text_env"):
        nxt = _step(env, td, [reply, reply])
    assert nxt["reward"].flatten().tolist() == pytest.approx([-0.1, 0.0])
    assert nxt["terminated"].flatten().tolist() == [True, False]
    assert nxt["is_query"].tolist() == [False, True]
    # the failed row made no progress: progress_before == progress == |H_0| = 10*9*8*7
    assert nxt["progress_before"][0].item() == nxt["progress"][0].item() == 5040.0
    assert nxt["hypothesis_size"][0].item() == 5040.0 and nxt["hypothesis_size"][1].item() < 5040.0
    assert env.last_infos[0] == {"env_error": "RuntimeError: injected env bug"}
    assert "GuessNumbersEnv" in caplog.text and "level_seed=11" in caplog.text


def test_hf_judge_sees_at_most_500_chars_of_a_megabyte_question():
    # a 1 MB question would overflow the judge LM's context (a device-side assert on a GPU,
    # which no except survives): the judge's prompt holds only the first 500 characters
    from ragen_torchrl.envs.games.situation_puzzles import PUZZLES, HFJudge

    class Tok:
        chat_template = None

    judge = HFJudge(model=None, tokenizer=Tok())
    empty = judge.build_prompt(PUZZLES[0], "")
    assert len(judge.build_prompt(PUZZLES[0], "?" * (1 << 20))) == len(empty) + 500
    with pytest.raises(ValueError, match="max_question_chars"):
        HFJudge(model=None, tokenizer=Tok(), max_question_chars=0)
