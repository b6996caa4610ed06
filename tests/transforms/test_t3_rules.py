"""T3 stall rules: scripted progress sequences, registry, and the games feeding them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_torchrl.transforms.t3_rules import (
    TASK_NAMES,
    AnyRule,
    ConsecutiveUnknownRule,
    EstimateDriftRule,
    OutsideHypothesisRule,
    ShrinkStallRule,
    SimilarityDecreaseRule,
    make_rule,
)


def _run(rule, seq, infos=None, initial=None):
    rule.reset(initial)
    infos = infos or [{}] * len(seq)
    return [rule.update(p, i) for p, i in zip(seq, infos)]


def _first(fired):
    return fired.index(True) + 1 if True in fired else None


def test_shrink_stall_consecutive_vs_cumulative():
    seq = [50, 50, 50, 40, 40, 40, 40]  # stalls at turns 2, 3, 5, 6, 7
    assert _first(_run(ShrinkStallRule(3), seq, initial=100)) == 7
    assert _first(_run(ShrinkStallRule(3, cumulative=True), seq, initial=100)) == 5
    assert _run(ShrinkStallRule(1), [10, 10, 5], initial=10) == [True, True, False]
    # without a baseline the first turn only records it
    assert _run(ShrinkStallRule(1), [10, 10]) == [False, True]
    # min_delta: a shrink of at most min_delta is a stall
    assert _run(ShrinkStallRule(1, min_delta=2), [99, 90], initial=100) == [True, False]


def test_progress_before_in_info_is_the_baseline():
    rule = ShrinkStallRule(1)
    rule.reset()
    assert rule.update(30, {"progress_before": 30}) is True
    assert rule.update(20, {"progress_before": 30}) is False


def _reference_consecutive(seq, initial, k):
    prev, count, out = initial, 0, []
    for p in seq:
        count = count + 1 if p >= prev else 0
        out.append(count >= k)
        prev = p
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=15), st.integers(1, 4))
def test_shrink_stall_matches_reference(seq, k):
    assert _run(ShrinkStallRule(k), seq, initial=5) == _reference_consecutive(seq, 5, k)
    stalls, prev, cum = 0, 5, []
    for p in seq:
        stalls += p >= prev
        cum.append(stalls >= k)
        prev = p
    assert _run(ShrinkStallRule(k, cumulative=True), seq, initial=5) == cum


def test_outside_hypothesis_and_guess_numbers_combo():
    assert _run(
        OutsideHypothesisRule(),
        [1, 1, 1],
        [{"guess_in_previous_hypotheses": True}, {}, {"guess_in_previous_hypotheses": False}],
    ) == [False, False, True]
    seq = [1440, 200, 150, 150]
    infos = [{"guess_in_previous_hypotheses": g} for g in (True, False, True, True)]
    # T3 paper, GuessNumbers: "truncate if |H_t| does not decrease for k turns" -- the guess outside
    # H_{t-1} at turn 2 shrinks H (1440 -> 200), so only turn 4 (150 -> 150) fires
    rule = make_rule("GuessNumbers")
    assert isinstance(rule, ShrinkStallRule)
    assert _run(rule, seq, infos, initial=5040) == [False, False, False, True]
    # the outside-H trigger is an option (not in the paper): it fires at turn 2 as well
    rule = make_rule("GuessNumbers", outside_trigger=True)
    assert isinstance(rule, AnyRule)
    assert _run(rule, seq, infos, initial=5040) == [False, True, False, True]
    assert rule.fired


def test_outside_trigger_obeys_k():
    # issue item 9: "make k govern it too" -- k = 2 needs two consecutive outside guesses
    # (turns 2-3; turn 4 resets, turns 5-6 fire again); |H| shrinks every turn
    seq = [1000, 900, 800, 700, 600, 500]
    outside = [True, False, False, True, False, False]  # guess_in_previous_hypotheses
    infos = [{"guess_in_previous_hypotheses": g} for g in outside]
    rule = make_rule("GuessNumbers", k=2, outside_trigger=True)
    assert _run(rule, seq, infos, initial=5040) == [False, False, True, False, False, True]
    cum = make_rule("GuessNumbers", k=3, cumulative=True, outside_trigger=True)
    # cumulative: third outside guess at turn 5
    assert _first(_run(cum, seq, infos, initial=5040)) == 5
    with pytest.raises(ValueError, match="outside_trigger"):
        make_rule("CircuitDecoding", outside_trigger=True)


def test_malformed_turns_count_as_stalls():
    # REFERENCE §3: "a malformed turn makes no epistemic progress, so it counts toward the stall window"
    mal = {"malformed": True}
    # CircuitDecoding, k = 3 consecutive: shrink, then three malformed turns -> fires at turn 4
    assert _run(ShrinkStallRule(3), [40, 40, 40, 40], [{}, mal, mal, mal], initial=90) == [False, False, False, True]
    # even without any baseline (no earlier progress) a malformed turn is a stall
    assert _run(ShrinkStallRule(1), [5], [mal]) == [True]
    assert _run(ConsecutiveUnknownRule(2), [0, 0], [mal, mal]) == [False, True]
    # PE: estimate at turn 1 (baseline), then two malformed turns
    assert _run(SimilarityDecreaseRule(2), [0.3, 0.3, 0.3], [{"estimate_updated": True}, mal, mal]) == [
        False,
        False,
        True,
    ]
    assert _run(OutsideHypothesisRule(2), [1, 1], [mal, mal]) == [False, True]


def test_consecutive_unknown():
    answers = ["Unknown", "Unknown", "Yes", "Unknown", "Unknown", "Unknown", "Unknown", "Unknown"]
    fired = _run(ConsecutiveUnknownRule(5), [0] * 8, [{"judge_answer": a} for a in answers])
    assert _first(fired) == 8
    # an invalid question (judge_answer None) counts as Unknown
    assert _run(ConsecutiveUnknownRule(2), [0, 0], [{"judge_answer": None}, {"judge_answer": "Unknown"}]) == [
        False,
        True,
    ]
    # without judge_answer, progress is the game's own consecutive count
    assert _run(ConsecutiveUnknownRule(3), [1, 2, 0, 1, 2, 3]) == [False] * 5 + [True]


def test_similarity_decrease():
    seq = [0.1, 0.3, 0.2, 0.25, 0.2, 0.1, 0.05]
    # turn 1 is the first estimate (baseline); stalls at 3, 5, 6, 7 (0.25 > 0.2 improves at 4)
    assert _run(SimilarityDecreaseRule(2), seq, initial=0.0) == [False] * 5 + [True, True]
    assert _first(_run(SimilarityDecreaseRule(1), seq, initial=0.0)) == 3


def test_similarity_first_estimate_is_only_the_baseline():
    # issue item 9: "compare only once a first estimate exists" -- a first estimate with a
    # negative cosine is not a decrease (the old rule fired at turn 1 with k = 1)
    assert _run(SimilarityDecreaseRule(1), [-0.4, 0.1], initial=0.0) == [False, False]
    # turns before the first estimate are neither stalls nor baselines
    no, yes = {"estimate_updated": False}, {"estimate_updated": True}
    assert _run(SimilarityDecreaseRule(1), [0.0, 0.0, 0.5, 0.6], [no, no, yes, yes], initial=0.0) == [False] * 4


def test_similarity_no_improvement_is_a_stall():
    # REFERENCE §3 (PE/MR): "no improvement of cos (not increasing, or no estimate given) for k
    # consecutive turns"; an agent repeating its estimate is truncated (old rule: never)
    assert _run(SimilarityDecreaseRule(2), [0.5, 0.5, 0.5], initial=0.0) == [False, False, True]
    # no new estimate: stall even though the cosine of the kept estimate is unchanged
    infos = [{"estimate_reported": True}, {"estimate_reported": False}, {"estimate_reported": False}]
    assert _run(SimilarityDecreaseRule(2), [0.5, 0.5, 0.5], infos) == [False, False, True]
    # an increase resets the count
    assert _run(SimilarityDecreaseRule(2), [0.5, 0.4, 0.6, 0.6, 0.6], initial=0.0) == [False, False, False, False, True]
    # require_decrease=True: the literal "similarity decreases" reading (equal cosine resets)
    strict = SimilarityDecreaseRule(2, require_decrease=True)
    assert _run(strict, [0.6, 0.5, 0.4, 0.4, 0.3], initial=0.0) == [False, False, True, False, False]


def test_estimate_drift():
    moving = [[1, 0], [0, 1], [1, 0], [0, 1], [1, 0], [0, 1]]
    assert not any(_run(EstimateDriftRule(4, 0.28), [0] * 6, [{"query_estimate": e} for e in moving]))


def test_estimate_drift_raw_estimates_and_zero_movement():
    # reference code (MR unsupervised): raw, unnormalised estimates -- steps of 1.0 along one
    # direction are movement (unit-normalised they were 0 and the old rule fired at turn 5)
    growing = [{"query_estimate": [float(i), 0.0]} for i in range(1, 7)]
    assert not any(_run(EstimateDriftRule(4, 0.28), [0] * 6, growing))
    # a turn without a new estimate is zero movement: steps [1, 0, 0, 0] -> mean 0.25 < 0.28 at
    # turn 5 (the old rule skipped those turns and never fired)
    infos = [{"query_estimate": [1.0, 0.0]}, {"query_estimate": [2.0, 0.0]}, {}, {"query_estimate": None}]
    infos.append({"malformed": True})
    assert _run(EstimateDriftRule(4, 0.28), [0] * 5, infos) == [False] * 4 + [True]


def test_make_rule_defaults_and_errors():
    cd = make_rule("CircuitDecoding")
    # T3 paper: "for all tau in [t-k, t)" = consecutive stalls; cumulative is the reference switch
    assert isinstance(cd, ShrinkStallRule) and cd.k == 3 and not cd.cumulative
    assert make_rule("circuit_decoding", cumulative=True).cumulative
    assert make_rule("SituationPuzzles").k == 5
    assert make_rule("preference-estimation").k == 2
    assert isinstance(make_rule("MovieRecommendation"), SimilarityDecreaseRule)
    assert isinstance(make_rule("MovieRecommendation", rule="drift"), EstimateDriftRule)
    # the released reference code runs the drift rule for PreferenceEstimation too (its MovieRecSpace)
    pe = make_rule("PreferenceEstimation", rule="drift")
    assert isinstance(pe, EstimateDriftRule) and (pe.window, pe.threshold) == (4, 0.28)
    assert make_rule("PreferenceEstimation", rule="decrease").require_decrease
    assert make_rule("PreferenceEstimation", rule="reference").reference_counting
    gn = make_rule("GuessNumbers", k=2)
    assert isinstance(gn, ShrinkStallRule) and gn.k == 2
    gn = make_rule("GuessNumbers", k=2, outside_trigger=True)
    assert [type(r) for r in gn.rules] == [OutsideHypothesisRule, ShrinkStallRule]
    assert [r.k for r in gn.rules] == [2, 2]
    assert len(TASK_NAMES) == 5
    with pytest.raises(ValueError) as err:
        make_rule("Sokoban")
    for name in TASK_NAMES:
        assert name in str(err.value)
    with pytest.raises(ValueError):
        make_rule("SituationPuzzles", cumulative=True)
    with pytest.raises(ValueError, match="leave t3.rule null"):
        make_rule("GuessNumbers", rule="drift")
    with pytest.raises(ValueError, match="improve, decrease, reference, drift"):
        make_rule("PreferenceEstimation", rule="supervised")
    with pytest.raises(ValueError):
        ShrinkStallRule(0)


def test_rules_on_real_games():
    from ragen_torchrl.envs.games.circuit_decoding import CircuitDecodingGame
    from ragen_torchrl.envs.games.guess_numbers import GuessNumbersGame

    game = GuessNumbersGame("0157")
    rule = make_rule("GuessNumbers")
    fired = []
    for q in ["0123", "0123"]:
        info = game.interact(q)[1]
        fired.append(rule.update(info["progress"], info))
    assert fired == [False, True]  # repeating a guess: no shrink

    game = CircuitDecodingGame(["x1 AND x2", "NOT x3"])
    consecutive, cumulative = make_rule("CircuitDecoding"), make_rule("CircuitDecoding", cumulative=True)
    out = []
    for q in ["A(1,1,1)", "A(1,1,1)", "B(0,0,0)", "A(1,1,1)", "B(0,0,0)", "foo"]:
        info = game.interact(q)[1]
        out.append((consecutive.update(game.progress(), info), cumulative.update(game.progress(), info)))
    # stalls at turns 2, 4, 5, 6: cumulative fires at 5 (third stall), consecutive at 6
    assert out == [(False, False), (False, False), (False, False), (False, False), (False, True), (True, True)]


# --------------------------------------------------------------------------- PE/MR invalid turns
# v* = (1, 0): cos of the estimates (1, 1) = 0.707, (2, 1) = 0.894, (1, 0) = 1, (0, 1) = 0. Items /
# seen movies 1..3; ids 7 and 9 are unknown, so the game rejects those queries as a whole (and
# an estimate of the wrong length too).
SEQ_A = [
    "Would you prefer 9 over 1? estimate: 1, 1",  # unknown item, valid estimate
    "Would you prefer 1 over 2?",  # no estimate
    "Would you prefer 1 over 2? estimate: 2, 1",  # repeated question, better estimate
    "Would you prefer 1 over 3? estimate: 2, 1",  # repeated estimate
    "Would you prefer 7 over 1? estimate: 1, 0",  # unknown item, better estimate
    "Would you prefer 2 over 3? estimate: 1, 0, 0",  # wrong length
    "Would you prefer 2 over 3?",  # no estimate
]
SEQ_B = [
    "Would you prefer 9 over 1? estimate: 1, 1",  # unknown item, valid estimate
    "Would you prefer 1 over 2?",  # no estimate
    "Would you prefer 1 over 3? estimate: 1",  # wrong length
    "Would you prefer 2 over 3? estimate: 1, 1",
    "Would you prefer 1 over 2? estimate: 0, 1",  # worse
    "Would you prefer 1 over 3? estimate: 0, 1",  # repeated
]


def _preference_game(task: str):
    from ragen_torchrl.envs.games.movie_recommendation import MovieRecommendationGame
    from ragen_torchrl.envs.games.preference_estimation import PreferenceEstimationGame

    items = [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.9, 0.1]]
    if task == "PreferenceEstimation":
        return PreferenceEstimationGame(items[:3], [1.0, 0.0])
    catalog = [{"title": f"Movie {i}", "attributes": x} for i, x in enumerate(items)]
    return MovieRecommendationGame(catalog, [1.0, 0.0], seen=[0, 1, 2], candidates=[3], max_turns=10)


def _play_rule(task: str, rule: str | None, queries: list[str]) -> list[bool]:
    """Each query's game info fed to the rule as T3Truncation does (progress = the game's)."""
    game, stall = _preference_game(task), make_rule(task, rule=rule)
    stall.reset(game.progress())
    out = []
    for q in queries:
        _, info = game.interact(q)
        out.append(stall.update(info["progress"], info))
    return out


@pytest.mark.parametrize("task", ["PreferenceEstimation", "MovieRecommendation"])
@pytest.mark.parametrize(
    "rule, seq, expected",
    [
        # paper text (default): a rejected query carries no estimate. A: the first estimate comes at
        # turn 3; turn 4 repeats it (stall 1), turn 5 is rejected (stall 2): fires at 5
        (None, SEQ_A, [False, False, False, False, True, True, True]),
        # reference counting: turn 1's estimate counts (0.707); 2 no estimate (stall 1); 3 up
        # (reset); 4 equal (stall 1); 5 the rejected query's estimate is up (reset); 6 wrong length
        # (stall 1); 7 none (stall 2): fires at 7, later than the default
        ("reference", SEQ_A, [False] * 6 + [True]),
        # strict decreases only: equal cosines and turns without an estimate reset
        ("decrease", SEQ_A, [False] * 7),
        # B, default: turns 1-3 carry no accepted estimate; 4 first estimate; 5 down; 6 equal: fires at 6
        (None, SEQ_B, [False] * 5 + [True]),
        # B, reference: 1 first estimate; 2 none (stall 1); 3 wrong length (stall 2): fires at 3, earlier
        ("reference", SEQ_B, [False, False, True, True, True, True]),
        ("decrease", SEQ_B, [False] * 6),
    ],
)
def test_preference_rules_count_invalid_turns(task, rule, seq, expected):
    assert _play_rule(task, rule, seq) == expected


@pytest.mark.parametrize(
    "seq, expected",
    [
        # steps (raw, once a first estimate exists): 2: 0.1, 3: 0 (none), 4: 0.5 (the rejected
        # query's estimate counts), 5: 0 (wrong length) -> mean 0.15 < 0.28 at turn 5 (reading only
        # accepted estimates, the first comes at turn 2 and the window is full only at turn 6)
        (
            [
                "Would you prefer 9 over 1? estimate: 1, 1",
                "Would you prefer 1 over 2? estimate: 1, 1.1",
                "Would you prefer 1 over 2?",
                "Would you prefer 7 over 1? estimate: 1.5, 1.1",
                "Would you prefer 2 over 3? estimate: 1",
            ],
            [False] * 4 + [True],
        ),
        # steps 2: 2.0 (rejected query, estimate counts), 3-5: 0 -> mean 0.5 at 5, 0 at 6: fires at 6
        # (reading only accepted estimates the step at 2 is 0 and it fired at 5)
        (
            [
                "Would you prefer 1 over 2? estimate: 1, 0",
                "Would you prefer 9 over 1? estimate: 3, 0",
                "Would you prefer 1 over 3?",
                "Would you prefer 1 over 2?",
                "Would you prefer 2 over 3?",
                "Would you prefer 1 over 3?",
            ],
            [False] * 5 + [True],
        ),
    ],
)
@pytest.mark.parametrize("task", ["PreferenceEstimation", "MovieRecommendation"])
def test_drift_rule_counts_invalid_turns_as_the_reference(task, seq, expected):
    assert _play_rule(task, "drift", seq) == expected
