"""Bandit game core: payouts, held-out names, level randomisation and observations."""

import math

import pytest

from ragen_torchrl.envs.games.bandit import (
    HIGH_RISK_PROB,
    TRAIN_NAME_PAIRS,
    VAL_NAME_PAIRS,
    BanditGame,
)
from ragen_torchrl.envs.games.base import TextGame


def test_held_out_names_disjoint():
    train_names = {n.lower() for pair in TRAIN_NAME_PAIRS for n in pair}
    val_names = {n.lower() for pair in VAL_NAME_PAIRS for n in pair}
    assert len(train_names) == 2 * len(TRAIN_NAME_PAIRS)
    assert len(val_names) == 2 * len(VAL_NAME_PAIRS)
    assert not train_names & val_names
    for seed in range(200):
        assert set(n.lower() for n in BanditGame.generate(seed, split="val").action_names) <= val_names
        assert set(n.lower() for n in BanditGame.generate(seed, split="train").action_names) <= train_names
    with pytest.raises(ValueError, match="split"):
        BanditGame.generate(0, split="test")


def test_high_risk_payout_frequency_over_levels():
    n = 4000
    rewards = []
    for seed in range(n):
        game = BanditGame.generate(seed)
        r, done, info = game.step(game.high_risk_arm)
        assert done and info["success"] and info["action_is_effective"]
        assert r in (0.0, 1.0)
        rewards.append(r)
    freq = sum(rewards) / n
    std = math.sqrt(HIGH_RISK_PROB * (1 - HIGH_RISK_PROB) / n)
    assert abs(freq - HIGH_RISK_PROB) < 4 * std


def test_high_risk_payout_frequency_single_game_rng():
    game = BanditGame.generate(11)
    n = 20_000
    freq = sum(game.pull(game.high_risk_arm) for _ in range(n)) / n
    assert abs(freq - 0.25) < 4 * math.sqrt(0.25 * 0.75 / n)
    assert {game.pull(game.low_risk_arm) for _ in range(100)} == {0.1}


def test_low_risk_always_pays_and_is_not_success():
    for seed in range(50):
        game = BanditGame.generate(seed, split="val")
        r, done, info = game.step(game.low_risk_arm)
        assert r == 0.1 and done and not info["success"] and not game.success
        assert game.step(game.high_risk_arm) == (0.0, True, {"success": False, "action_is_effective": False})


def test_deterministic_by_seed():
    for seed in range(30):
        a, b = BanditGame.generate(seed), BanditGame.generate(seed)
        assert a.action_names == b.action_names and a.high_risk_arm == b.high_risk_arm
        assert a.render_text() == b.render_text()
        assert a.step(a.high_risk_arm) == b.step(b.high_risk_arm)


def test_payout_seed_varies_draws_not_level():
    levels = {BanditGame.generate(9, payout_seed=k).render_text() for k in range(50)}
    assert len(levels) == 1
    draws = {BanditGame.generate(9, payout_seed=k).pull(BanditGame.generate(9).high_risk_arm) for k in range(50)}
    assert draws == {0.0, 1.0}
    a = BanditGame.generate(9)
    assert a.payout_seed == 9 and a.pull(a.high_risk_arm) == BanditGame.generate(9, payout_seed=9).pull(a.high_risk_arm)


def test_level_randomises_pair_and_order_but_names_fix_the_roles():
    # reference config: ARM_NAMES pairs are (low-risk, high-risk); only the order is shuffled
    orders, pairs = set(), set()
    for seed in range(200):
        g = BanditGame.generate(seed)
        assert (g.low_risk_arm, g.high_risk_arm) in TRAIN_NAME_PAIRS
        pairs.add((g.low_risk_arm, g.high_risk_arm))
        orders.add(g.action_names[0] == g.low_risk_arm)
    assert orders == {True, False}
    assert len(pairs) == len(TRAIN_NAME_PAIRS)


def test_interface_observation_and_oracle():
    g = BanditGame("Teacher", "Trader", seed=3, low_first=False)
    assert isinstance(g, TextGame)
    assert g.action_names == ("Trader", "Teacher")
    assert BanditGame.action_names is None  # per-instance attribute
    text = g.render_text()
    # REFERENCE §4: "the agent must infer which is the steady and which the risky arm
    # from the names alone; the prompt never says"
    assert text == "The arms are Trader and Teacher. Which arm do you pull?"
    for word in ("risk", "steady", "0.1", "0.25", "1.0"):
        assert word not in text.lower() and word not in BanditGame.instructions.lower()
    assert g.oracle_action() == "Trader"
    assert g.expected_value("Trader") == 0.25 and g.expected_value("teacher") == 0.1
    assert "Trader" in g.explain("Trader") and "risky" in g.explain("Trader")
    assert "steady" in g.explain("Teacher")
    assert g.progress() == 1.0
    with pytest.raises(ValueError, match="unknown bandit arm"):
        g.step("Doctor")
    g.step("Teacher")
    assert g.progress() == 0.0 and "You pulled Teacher and got 0.1" in g.render_text()
    with pytest.raises(ValueError):
        BanditGame("Same", "same")
    assert "arm" in BanditGame.instructions
