"""T3Truncation: fires at exactly the right turn on each task, grants one forced-answer turn,
ends the episode on a further query, is a no-op for validation, works on sub-batches of rows;
token accounting helpers. ``t3_rule_fired`` marks the turn the rule fired, ``truncated_by_t3``
the end of an episode truncated by T3 (a correct forced answer is a success, not a truncation)."""

from __future__ import annotations

import tensordict

tensordict.set_list_to_stack(True).set()

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402
from torchrl.envs import TransformedEnv  # noqa: E402

from ragen_torchrl.envs import RowTransformedEnv, make_env  # noqa: E402
from ragen_torchrl.envs.games.guess_numbers import ALL_CODES, _fb  # noqa: E402
from ragen_torchrl.envs.games.preference_belief import cosine  # noqa: E402
from ragen_torchrl.transforms.t3 import (  # noqa: E402
    DEFAULT_PROMPT,
    T3Truncation,
    t3_config_defaults,
    t3_token_stats,
)
from ragen_torchrl.transforms.t3_rules import PAPER_DEFAULTS  # noqa: E402


def t3_env(name: str, num_envs: int = 1, env_kwargs=None, **t3_kwargs):
    env = make_env(name, num_envs=num_envs, **(env_kwargs or {}))
    return env.append_transform(T3Truncation(name, **t3_kwargs))


def reset(env, level_seeds) -> TensorDict:
    n = len(level_seeds)
    return env.reset(TensorDict(level_seed=torch.tensor(level_seeds), group_id=torch.arange(n), batch_size=[n]))


def step(env, td, replies):
    n = td.batch_size[0]
    msg = History(role=["assistant"] * n, content=list(replies), batch_size=(n,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    return env.step(td)["next"]


def ask(q: str) -> str:
    return f"<think>t</think><interact>{q}</interact>"


def answer(a: str) -> str:
    return f"<think>t</think><answer>{a}</answer>"


def last_user(td, row: int = 0) -> str:
    h = td["history", "prompt"][row]
    assert h.role[-1] == "user"
    return h.content[-1]


def play(env, td, replies):
    """Step one row through ``replies``; return the list of ``next`` TensorDicts."""
    outs = []
    for reply in replies:
        td = step(env, td, [reply])
        outs.append(td)
        if td["done"].item():
            break
    return outs


def fired_turns(outs) -> list[int]:
    return [int(o["turn"].item()) for o in outs if o["t3_rule_fired"].item()]


def cut_turns(outs) -> list[int]:
    return [int(o["turn"].item()) for o in outs if o["truncated_by_t3"].item()]


def base(env):
    return env.base_env


# ------------------------------------------------------------------------------ GuessNumbers
def _gn_first_guess(secret: str) -> str:
    return "0123" if secret != "0123" else "4567"


def test_gn_repeated_guess_fires_then_answer_gets_normal_reward():
    env = t3_env("guess_numbers")
    td = reset(env, [3])
    secret = base(env).games[0].secret
    g = _gn_first_guess(secret)
    o1 = step(env, td, [ask(g)])
    assert not o1["t3_rule_fired"].item() and DEFAULT_PROMPT not in last_user(o1)
    o2 = step(env, o1, [ask(g)])  # the same guess again: |H| does not shrink
    assert o2["t3_rule_fired"].item() and not o2["truncated_by_t3"].item() and not o2["done"].item()
    assert last_user(o2) == f"Feedback: {base(env).games[0].last_feedback}\nTurns left: 8.\n{DEFAULT_PROMPT}"
    o3 = step(env, o2, [answer(secret)])
    assert o3["done"].item() and o3["terminated"].item() and not o3["truncated"].item()
    assert o3["reward"].item() == 1.0 and o3["success"].item()
    # issue item 9: "a correct answer on the forced-answer turn is a success, not a truncation"
    assert not o3["truncated_by_t3"].item() and not o3["t3_rule_fired"].item()


def _gn_outside_probe(env, td):
    game = base(env).games[0]
    g = _gn_first_guess(game.secret)
    o1 = step(env, td, [ask(g)])
    h1 = set(game.hypotheses)
    # a new guess that is inconsistent with the feedback yet still shrinks H
    probe = next(c for c in ALL_CODES if c not in h1 and c != g and len({_fb(h, c) for h in h1}) > 1)
    return o1, step(env, o1, [ask(probe)])


def test_gn_guess_outside_previous_hypotheses_is_not_the_papers_rule():
    # T3 paper (GN): truncate if |H_t| does not decrease for k turns; the outside-H trigger is
    # not in the paper and is off by default
    env = t3_env("guess_numbers")
    o1, o2 = _gn_outside_probe(env, reset(env, [8]))
    assert o2["progress"].item() < o1["progress"].item()  # |H| shrank ...
    assert not o2["guess_in_previous_hypotheses"].item()  # ... with a guess outside H_1
    assert not o2["t3_rule_fired"].item()


def test_gn_outside_trigger_option_fires():
    env = t3_env("guess_numbers", outside_trigger=True)  # k = 1
    o1, o2 = _gn_outside_probe(env, reset(env, [8]))
    assert o2["progress"].item() < o1["progress"].item() and o2["t3_rule_fired"].item()


@pytest.mark.parametrize(
    "forced_reply, malformed, reward, env_ended",
    [
        (ask("9876"), "end", 0.0, False),
        ("no tags", "end", 0.0, True),
        ("no tags", "auto", 0.0, True),  # T3 active: the env ends the episode (reference)
        ("no tags", "retry", 0.0, False),
        ("no tags", "penalty", -0.1, False),
    ],
)
def test_gn_anything_but_an_answer_after_truncation_ends_the_episode(forced_reply, malformed, reward, env_ended):
    env = t3_env("guess_numbers", env_kwargs={"malformed": malformed})
    td = reset(env, [3])
    g = _gn_first_guess(base(env).games[0].secret)
    outs = play(env, td, [ask(g), ask(g), forced_reply, ask("5678")])
    assert len(outs) == 3 and fired_turns(outs) == [2] and cut_turns(outs) == [3]
    last = outs[-1]
    # a malformed reply with malformed=end/auto is ended by the env itself (terminated, reward 0)
    assert last["done"].item() and last["truncated"].item() != env_ended and last["terminated"].item() == env_ended
    assert last["reward"].item() == pytest.approx(reward) and not last["success"].item()


def test_gn_wrong_forced_answer_is_a_truncation():
    env = t3_env("guess_numbers")
    td = reset(env, [3])
    secret = base(env).games[0].secret
    g = _gn_first_guess(secret)
    wrong = next(c for c in ("4567", "5678", "6789") if c != secret)
    outs = play(env, td, [ask(g), ask(g), answer(wrong)])
    assert fired_turns(outs) == [2] and cut_turns(outs) == [3] and outs[-1]["reward"].item() == 0.0


def test_malformed_turns_count_toward_the_window():
    # REFERENCE §3: "a malformed turn makes no epistemic progress, so it counts toward the stall
    # window" (old code: an agent that stops producing valid queries was never truncated)
    env = t3_env("circuit_decoding", env_kwargs={"malformed": "penalty"})  # k = 3 consecutive
    td = reset(env, [4])
    outs = play(env, td, [ask("A(1,0,1)"), "no tags", "<think>x</think>", "<think>x</think><answer></answer>"])
    assert outs[0]["progress"].item() < outs[0]["progress_before"].item()
    assert fired_turns(outs) == [4] and DEFAULT_PROMPT in last_user(outs[-1])


@pytest.mark.parametrize("name", ["guess_numbers", "circuit_decoding", "situation_puzzles"])
def test_oracle_never_triggers_truncation(name):
    env = t3_env(name, num_envs=2)
    td = reset(env, [1, 2])
    inner = base(env)
    for _ in range(inner.max_turn):
        replies = []
        for i in range(2):
            action = inner.games[i].oracle_action()
            replies.append(inner.format_reply("t", [action]))
        td = step(env, td, replies)
        assert not td["t3_rule_fired"].any() and not td["truncated_by_t3"].any()
        if td["done"].all():
            break
    assert td["done"].all() and td["is_answer"].all()
    if name != "circuit_decoding":  # one circuit per query: not always solved in 10 turns
        assert td["success"].all()


# ------------------------------------------------------------------------------ CircuitDecoding
def test_cd_three_non_shrinking_queries_fire_then_answer_is_scored():
    env = t3_env("circuit_decoding")  # k = 3, consecutive (paper)
    td = reset(env, [4])
    game = base(env).games[0]
    outs = play(env, td, [ask("A(1,0,1)")] * 4)
    assert [o["progress"].item() < o["progress_before"].item() for o in outs] == [True, False, False, False]
    assert fired_turns(outs) == [4] and cut_turns(outs) == []
    assert DEFAULT_PROMPT in last_user(outs[-1]) and not outs[-1]["done"].item()
    truth = "; ".join(f"{nm} = {f}" for nm, f in zip(game.names, game.formulas))
    o5 = step(env, outs[-1], [answer(truth)])
    assert o5["done"].item() and o5["terminated"].item() and o5["reward"].item() == 1.0
    assert not o5["truncated_by_t3"].item()  # a success, not a truncation


@pytest.mark.parametrize("cumulative, expected", [(True, [5]), (False, [])])
def test_cd_cumulative_versus_consecutive_stalls(cumulative, expected):
    # T3 paper: stalls "for all tau in [t-k, t)" (consecutive); the reference code counts them
    # cumulatively (switch)
    env = t3_env("circuit_decoding", cumulative=cumulative)
    td = reset(env, [4])
    game = base(env).games[0]
    outs = play(env, td, [ask("A(1,0,1)")] * 3)  # shrink, stall, stall
    best = game.oracle_action().split(":", 1)[1]
    outs += play(env, outs[-1], [ask(best), ask("A(1,0,1)")])  # shrink, stall
    assert [o["progress"].item() < o["progress_before"].item() for o in outs] == [True, False, False, True, False]
    assert fired_turns(outs) == expected


def test_cd_default_is_consecutive():
    env = t3_env("circuit_decoding")
    td = reset(env, [4])
    game = base(env).games[0]
    outs = play(env, td, [ask("A(1,0,1)")] * 3)
    outs += play(env, outs[-1], [ask(game.oracle_action().split(":", 1)[1]), ask("A(1,0,1)")])
    assert fired_turns(outs) == []  # stalls at 2, 3, 5: never 3 in a row (cumulative: fires at 5)


# ------------------------------------------------------------------------------ SituationPuzzles
def test_sp_five_consecutive_unknown_fire():
    env = t3_env("situation_puzzles")
    td = reset(env, [0])
    game = base(env).games[0]
    fact = game.puzzle.facts[0]
    unknown = [ask(f"Is it xyzzy{i}?") for i in range(4)]
    more_unknown = [ask(f"Was it plugh{i}?") for i in range(5)]
    outs = play(env, td, unknown + [ask(fact.question)] + more_unknown)
    assert base(env).last_infos[0]["judge_answer"] == "Unknown"
    counts = [o["progress"].item() for o in outs]
    assert counts == [1, 2, 3, 4, 0, 1, 2, 3, 4, 5]  # consecutive Unknown count
    assert fired_turns(outs) == [10]
    o11 = step(env, outs[-1], [answer(game.puzzle.explanation)])
    assert o11["terminated"].item() and o11["reward"].item() == pytest.approx(1.0)
    assert o11["success"].item() and not o11["truncated_by_t3"].item()


# ------------------------------------------------------------------------------ PE / MR
def _decreasing_estimates(pref: list[float]) -> list[list[float]]:
    """Estimates whose cosine with ``pref`` is 1, then strictly decreasing."""
    u = [0.0] * len(pref)
    j = min(range(len(pref)), key=lambda i: abs(pref[i]))
    u[j] = 1.0
    dot = sum(a * b for a, b in zip(pref, u))
    u = [b - dot * a for a, b in zip(pref, u)]  # orthogonal to pref
    mix = [[(1 - w) * a + w * b for a, b in zip(pref, u)] for w in (0.0, 0.4, 0.8, 1.0)]
    sims = [cosine(v, pref) for v in mix]
    assert all(x > y for x, y in zip(sims, sims[1:]))
    return mix


def _est(v) -> str:
    return "estimate: " + ", ".join(f"{x:.4f}" for x in v)


def _with_cos(pref: list[float], c: float) -> list[float]:
    """A vector whose cosine with ``pref`` is ``c``."""
    e = _decreasing_estimates(pref)
    u = [b / math.sqrt(sum(x * x for x in e[3])) for b in e[3]]  # unit, orthogonal to pref
    p = [a / math.sqrt(sum(x * x for x in pref)) for a in pref]
    return [c * a + math.sqrt(1 - c * c) * b for a, b in zip(p, u)]


def q(a: int, b: int, est=None) -> str:
    text = f"Would you prefer item {a} over item {b}?"
    return ask(text + (f" {_est(est)}" if est is not None else ""))


def test_pe_similarity_decreasing_two_turns_fires():
    env = t3_env("preference_estimation")  # k = 2
    td = reset(env, [6])
    game = base(env).games[0]
    e = _decreasing_estimates(game.preference)
    outs = play(env, td, [q(1, 2, e[0]), q(3, 4, e[1]), q(5, 6, e[2])])
    assert fired_turns(outs) == [3]
    o4 = step(env, outs[-1], [answer(", ".join(f"{x:.4f}" for x in game.preference))])
    assert o4["terminated"].item() and o4["reward"].item() == 1.0 and not o4["truncated_by_t3"].item()


def test_pe_a_rise_in_between_resets_the_count():
    env = t3_env("preference_estimation")
    td = reset(env, [6])
    e = _decreasing_estimates(base(env).games[0].preference)
    order = [e[0], e[1], e[0], e[1], e[0]]  # down, up, down, up: never two stalls in a row
    outs = play(env, td, [q(i + 1, i + 2, v) for i, v in enumerate(order)])
    assert fired_turns(outs) == []


def test_pe_repeating_or_omitting_the_estimate_fires():
    # REFERENCE §3 (PE): "no improvement of cos (not increasing, or no estimate given) for k
    # consecutive turns" -- the old rule (strict decrease) never fired here
    env = t3_env("preference_estimation")
    td = reset(env, [6])
    e = _decreasing_estimates(base(env).games[0].preference)
    outs = play(env, td, [q(1, 2, e[1]), q(3, 4, e[1]), q(5, 6, e[1])])  # the same estimate
    assert fired_turns(outs) == [3]
    td = reset(env, [6])
    outs = play(env, td, [q(1, 2, e[1]), q(3, 4), q(5, 6)])  # no estimate after the first
    assert fired_turns(outs) == [3]


def test_pe_first_estimate_is_only_the_baseline():
    # issue item 9: "compare only once a first estimate exists": turns without any estimate do not
    # count, and a first estimate with a negative cosine is not a decrease (old rule: cos -0.5 <
    # 0.0 then -0.6 < -0.5 fired at turn 2)
    env = t3_env("preference_estimation")
    td = reset(env, [6])
    pref = base(env).games[0].preference
    outs = play(env, td, [q(1, 2), q(3, 4), q(5, 6, _with_cos(pref, -0.5)), q(7, 8, _with_cos(pref, -0.6))])
    assert [round(o["progress"].item(), 3) for o in outs] == [0.0, 0.0, -0.5, -0.6]
    assert fired_turns(outs) == []


def test_mr_similarity_decrease_fires_and_forced_answer_scores():
    env = t3_env("movie_recommendation")  # k = 2, max_turn 5
    td = reset(env, [2])
    game = base(env).games[0]
    e = _decreasing_estimates(game.preference)
    outs = play(env, td, [ask(f"Would you prefer {i + 1} over {i + 2}? {_est(e[i])}") for i in range(3)])
    assert fired_turns(outs) == [3]
    o4 = step(env, outs[-1], [answer(game.catalog[game.best]["title"])])
    assert o4["terminated"].item() and o4["reward"].item() == 1.0 and not o4["truncated_by_t3"].item()


def test_mr_firing_on_the_second_last_turn_asks_once():
    env = t3_env("movie_recommendation")
    td = reset(env, [2])
    e = _decreasing_estimates(base(env).games[0].preference)
    order = [e[2], e[1], e[1], e[2]]  # up, stall, stall at turn 4: the env asks for the answer too
    outs = play(env, td, [ask(f"Would you prefer {i + 1} over {i + 2}? {_est(v)}") for i, v in enumerate(order)])
    assert fired_turns(outs) == [4] and last_user(outs[-1]).count(DEFAULT_PROMPT) == 1


def test_rule_firing_on_the_last_turn_changes_nothing():
    env = t3_env("movie_recommendation")
    td = reset(env, [2])
    e = _decreasing_estimates(base(env).games[0].preference)
    order = [e[2], e[1], e[0], e[1], e[2]]  # up, up, down, down at turn 5 = max_turn
    outs = play(env, td, [ask(f"Would you prefer {i + 1} over {i + 2}? {_est(v)}") for i, v in enumerate(order)])
    assert len(outs) == 5 and fired_turns(outs) == [] and cut_turns(outs) == []
    assert outs[-1]["truncated"].item() and outs[-1]["reward"].item() == 0.0
    assert DEFAULT_PROMPT not in last_user(outs[-1])


# ------------------------------------------------------------------------------ validation mode
@pytest.mark.parametrize(
    "make",
    [lambda: T3Truncation("guess_numbers", enabled=False), lambda: T3Truncation("guess_numbers").set_enabled(False)],
)
def test_disabled_transform_never_truncates(make):
    env = make_env("guess_numbers", num_envs=1).append_transform(make())
    td = reset(env, [3])
    g = _gn_first_guess(base(env).games[0].secret)
    outs = play(env, td, [ask(g)] * 12)
    assert len(outs) == 10 and fired_turns(outs) == []
    # only the env's own last-turn request (before turn 10) asks for the answer
    assert [o["turn"].item() for o in outs if DEFAULT_PROMPT in last_user(o)] == [9]
    assert outs[-1]["truncated"].item() and not outs[-1]["terminated"].item()


# ------------------------------------------------------------------------------ sub-batches, resets
def test_sub_batches_of_rows_are_tracked_by_env_index():
    env = t3_env("guess_numbers", num_envs=3)
    td = reset(env, [3, 3, 3])
    inner = base(env)
    secret = inner.games[0].secret
    g = _gn_first_guess(secret)
    o = step(env, td, [ask(g)] * 3)
    assert not o["truncated_by_t3"].any()
    oracle2 = inner.games[2].oracle_action().split(":", 1)[1]
    o02 = step(env, o[torch.tensor([0, 2])], [ask(g), ask(oracle2)])  # row 0 repeats, row 2 is consistent
    assert o02["env_index"].tolist() == [0, 2] and o02["t3_rule_fired"].tolist() == [True, False]
    o1 = step(env, o[torch.tensor([1])], [ask(g)])  # row 1, stepped alone, repeats too
    assert o1["env_index"].tolist() == [1] and o1["t3_rule_fired"].tolist() == [True]
    assert DEFAULT_PROMPT in last_user(o1) and DEFAULT_PROMPT in last_user(o02, 0)
    assert DEFAULT_PROMPT not in last_user(o02, 1)
    # row 0 answers, row 2 keeps asking consistently: one step each, in the other order
    oracle2 = inner.games[2].oracle_action()
    o20 = step(env, o02[torch.tensor([1, 0])], [inner.format_reply("t", [oracle2]), answer(secret)])
    assert o20["env_index"].tolist() == [2, 0]
    assert o20["truncated_by_t3"].tolist() == [False, False]  # row 0 answered correctly: a success
    assert o20["done"].reshape(-1).tolist() == [False, True] and o20["reward"].reshape(-1).tolist() == [0.0, 1.0]
    o1b = step(env, o1, [ask("6789")])  # row 1 queries again in its forced turn
    assert o1b["done"].item() and o1b["truncated"].item() and o1b["reward"].item() == 0.0
    assert o1b["truncated_by_t3"].item()


def test_reset_clears_pending_truncation():
    env = t3_env("guess_numbers")
    td = reset(env, [3])
    g = _gn_first_guess(base(env).games[0].secret)
    outs = play(env, td, [ask(g), ask(g)])
    assert fired_turns(outs) == [2]
    td = reset(env, [3])
    assert not td["truncated_by_t3"].item() and not td["t3_rule_fired"].item()
    o = step(env, td, [ask(g)])  # a query on turn 1 of a new episode: no forced-answer state
    assert not o["done"].item() and not o["truncated_by_t3"].item()


def test_plain_transformed_env_on_full_batches_and_task_inference():
    env = TransformedEnv(make_env("guess_numbers", num_envs=2), T3Truncation())
    assert {"truncated_by_t3", "t3_rule_fired"} <= set(env.observation_spec.keys())
    td = reset(env, [3, 3])  # level_seed reaches the env through the declared state spec
    g = _gn_first_guess(env.base_env.games[0].secret)
    o = step(env, td, [ask(g), ask(g)])
    o = step(env, o, [ask(g), ask("4567" if g != "4567" else "5678")])
    assert o["t3_rule_fired"].tolist()[0] and env.transform.task == "GuessNumbers"
    assert isinstance(make_env("guess_numbers").append_transform(T3Truncation()), RowTransformedEnv)


def test_bad_options_raise():
    with pytest.raises(ValueError, match="guess_numbers"):
        T3Truncation("sokoban")
    with pytest.raises(ValueError):
        T3Truncation("situation_puzzles", cumulative=True)
    with pytest.raises(ValueError, match="outside_trigger"):
        T3Truncation("circuit_decoding", outside_trigger=True)
    with pytest.raises(ValueError, match="t3.k"):
        T3Truncation("guess_numbers", k=0)
    with pytest.raises(RuntimeError):
        T3Truncation("guess_numbers")(TensorDict({}, batch_size=[]))


# ------------------------------------------------------------------------------ helpers
def test_config_defaults_match_the_paper():
    d = t3_config_defaults()
    assert d == {
        "guess_numbers": {"k": 1, "cumulative": False},
        "circuit_decoding": {"k": 3, "cumulative": False},  # paper text: consecutive stalls
        "situation_puzzles": {"k": 5},
        "preference_estimation": {"k": 2},
        "movie_recommendation": {"k": 2},
    }
    assert {v["k"] for v in d.values()} == {v["k"] for v in PAPER_DEFAULTS.values()}


def test_token_stats():
    records = TensorDict(
        num_tokens=torch.tensor([100, 40, 60, 0]),
        success=torch.tensor([True, False, True, False]),
        num_turns=torch.tensor([10, 4, 6, 10]),
        truncated_by_t3=torch.tensor([False, True, True, False]),
        batch_size=[4],
    )
    s = t3_token_stats(records, max_turn=10)
    assert s["t3/rollout_tokens"] == 200.0 and s["t3/tokens_per_trajectory"] == 50.0
    assert s["t3/tokens_per_success"] == 100.0
    assert s["t3/truncation_rate"] == 0.5
    assert s["t3/mean_turns_saved"] == 5.0  # (10 - 4 + 10 - 6) / 2
    none = t3_token_stats({"num_tokens": [5], "success": [False], "num_turns": [3], "truncated_by_t3": [False]}, 10)
    assert math.isnan(none["t3/tokens_per_success"]) and none["t3/mean_turns_saved"] == 0.0
    with pytest.raises(KeyError):
        t3_token_stats({"num_tokens": [1]}, 10)
    assert "t3/rule_fire_rate" not in s


def test_token_stats_separate_rule_fired_from_truncated():
    # issue item 9: "t3/ metrics separate 'rule fired' from 'episode ended truncated'": 3 of 4
    # episodes fired; one answered correctly on the forced turn (success, not truncated)
    records = {
        "num_tokens": [10, 20, 30, 40],
        "success": [True, False, False, True],
        "num_turns": [3, 4, 5, 10],
        "t3_rule_fired": [True, True, True, False],
        "truncated_by_t3": [False, True, True, False],
    }
    s = t3_token_stats(records, max_turn=10)
    assert s["t3/rule_fire_rate"] == 0.75 and s["t3/truncation_rate"] == 0.5
    assert s["t3/forced_answer_success_rate"] == pytest.approx(1 / 3)
    assert s["t3/mean_turns_saved"] == 5.5  # (10 - 4 + 10 - 5) / 2
    with pytest.raises(ValueError):
        t3_token_stats(records, 0)
