"""The CPU-scale T3 presets: sized games, terse demonstrations with belief-trap noise, the presets'
pinned warm start, and an end-to-end run with T3 on ``trainer=smoke``."""

from __future__ import annotations

import itertools
import random

import pytest
import tensordict
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.games.circuit_decoding import CircuitDecodingGame
from ragen_torchrl.envs.games.guess_numbers import (
    ALL_CODES,
    GuessNumbersGame,
    all_codes,
    consistent_candidates,
    feedback,
    is_valid_code,
)
from ragen_torchrl.envs.splits import VAL_SEED_OFFSET
from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.demonstrations import make_demonstrations

tensordict.set_list_to_stack(True).set()


def _brute_feedback(secret: str, guess: str) -> tuple[int, int]:
    a = sum(s == g for s, g in zip(secret, guess))
    b = sum(1 for g in guess if g in secret) - a
    return a, b


def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


# ------------------------------------------------------------------------------ sized GuessNumbers
@pytest.mark.parametrize("digits,symbols,count", [(4, 10, 5040), (3, 6, 120), (2, 5, 20), (1, 3, 3)])
def test_all_codes_counts_and_distinct_digits(digits, symbols, count):
    codes = all_codes(digits, symbols)
    assert len(codes) == len(set(codes)) == count
    assert all(len(c) == digits and len(set(c)) == digits and max(map(int, c)) < symbols for c in codes)
    assert list(codes) == sorted(codes)
    assert all_codes() is ALL_CODES


@pytest.mark.parametrize("digits,symbols", [(0, 5), (3, 2), (11, 11), (2, 11)])
def test_bad_sizes_are_clear_errors(digits, symbols):
    with pytest.raises(ValueError, match="num_digits"):
        all_codes(digits, symbols)
    with pytest.raises(ValueError, match="num_digits"):
        GuessNumbersGame("01", num_digits=digits, num_symbols=symbols)
    with pytest.raises(ValueError, match="num_digits"):
        make_env("guess_numbers", num_digits=digits, num_symbols=symbols)


def test_small_feedback_and_consistency_match_brute_force():
    codes = all_codes(3, 6)
    rng = random.Random(0)
    for _ in range(50):
        secret = rng.choice(codes)
        guesses = rng.sample(codes, 3)
        history = [(g, feedback(secret, g)) for g in guesses]
        for g, fb in history:
            assert fb == _brute_feedback(secret, g)
        brute = [c for c in codes if all(_brute_feedback(c, g) == fb for g, fb in history)]
        assert consistent_candidates(history, codes) == brute
        assert secret in brute


def test_small_game_rules_and_progress():
    game = GuessNumbersGame("31", num_digits=2, num_symbols=5)
    assert game.hypothesis_size == 20
    text, info = game.interact("01")
    # 01 vs 31: the 1 is in place; 0 is not in the secret
    assert text == "Guess 01: 1 in place, 0 misplaced"
    assert info["hypothesis_size"] == len([c for c in all_codes(2, 5) if _brute_feedback(c, "01") == (1, 0)])
    # outside the alphabet, repeated digits, wrong length: invalid queries that still use a turn
    for bad in ("15", "11", "012", "ab"):
        text, info = game.interact(bad)
        assert not info["valid"] and "2 distinct digits from 0-4" in text
    assert game.turn == 5
    assert is_valid_code("04", 2, 5) and not is_valid_code("05", 2, 5)
    reward, info = game.answer("31")
    assert reward == 1.0 and info["success"]


def test_small_splits_are_disjoint_and_cover_every_secret():
    train = {GuessNumbersGame.generate(s, "train", num_digits=2, num_symbols=5).secret for s in range(400)}
    val = {GuessNumbersGame.generate(s, "val", num_digits=2, num_symbols=5).secret for s in range(400)}
    codes = all_codes(2, 5)
    assert not train & val
    assert val == {c for i, c in enumerate(codes) if i % 5 == 0}
    assert train | val == set(codes)


@pytest.mark.parametrize("digits,symbols", [(2, 5), (3, 6), (2, 6)])
def test_oracle_always_solves_the_small_sizes_within_the_budget(digits, symbols):
    for secret in all_codes(digits, symbols):
        game = GuessNumbersGame(secret, num_digits=digits, num_symbols=symbols)
        while not game.done:
            game.step(game.oracle_action())
        assert game.success and game.turn <= 6, (secret, game.turn)


def test_terse_reasoning_lists_the_candidates_when_few_are_left():
    game = GuessNumbersGame("31", num_digits=2, num_symbols=5, terse=True, list_candidates=6)
    assert game.explain("interact:01") == "No feedback yet. I open with 01."
    game.interact("01")
    hyps = " ".join(game.hypotheses)
    assert game.explain("interact:21") == f"{len(game.hypotheses)} fit: {hyps}. I guess 21."
    big = GuessNumbersGame("0157", terse=True)
    big.interact("0123")
    assert big.explain("interact:0145").startswith(f"{big.hypothesis_size} fit. ")  # too many to list
    with pytest.raises(ValueError, match="list_candidates"):
        GuessNumbersGame("01", num_digits=2, num_symbols=5, list_candidates=-1)


def test_noisy_demonstration_queries_make_no_progress():
    env = make_env("guess_numbers", num_digits=2, num_symbols=5, terse=True)
    rng = random.Random(0)
    stalls = 0
    for seed in range(30):
        game = env.game_factory(seed, 0)
        game.interact(game.oracle_action().split(":", 1)[1])
        before = game.hypothesis_size
        query = env.random_query(game, rng)
        _, info = game.interact(query)
        stalls += info["hypothesis_size"] == before
    assert stalls >= 25  # a no-progress guess exists after the opener in almost every game


def test_small_demonstrations_hold_belief_traps_and_successes():
    env = make_env("guess_numbers", num_digits=2, num_symbols=5, terse=True, list_candidates=6)
    demos = make_demonstrations(env, 200, noise=0.2, seed=0)
    replies = [m["content"] for c in demos for m in c if m["role"] == "assistant"]
    assert all(r.startswith("<think>") and ("<interact>" in r or "<answer>" in r) for r in replies)
    # a repeated guess (the belief-trap query the T3 rule fires on) appears in the data
    repeats = 0
    for chat in demos:
        guesses = [m["content"].split("<interact>")[1][:2] for m in chat if "<interact>" in m["content"]]
        repeats += len(guesses) != len(set(guesses))
    assert repeats >= 10
    assert sum("Correct!" in m["content"] for c in demos for m in c) == 0  # the answer ends the chat
    assert all(c[-1]["role"] == "assistant" for c in demos)


# ------------------------------------------------------------------------------ small CircuitDecoding
def test_circuit_known_table_and_terse_reasoning():
    game = CircuitDecodingGame(["x1 AND x2", "NOT x2"], n_inputs=2, family="basic", terse=True)
    assert game.explain("interact:A(1,1)") == "A ????, B ????. I ask A(1,1)."
    game.interact("A(1,1)")
    game.interact("B(0,0)")
    assert game.known_table(0) == "???1" and game.known_table(1) == "1???"
    for q in ("A(0,0)", "A(0,1)", "A(1,0)"):
        game.interact(q)
    assert game.explain("answer:A = x1 AND x2; B = x1").startswith("A 0001 is x1 AND x2, B 1???")


def test_circuit_noisy_queries_make_no_progress():
    env = make_env("circuit_decoding", num_circuits=2, n_inputs=2, family="basic", terse=True)
    rng = random.Random(1)
    stalls = 0
    for seed in range(30):
        game = env.game_factory(seed, 0)
        for _ in range(3):
            game.step(game.oracle_action())
        before = game.hypothesis_size
        _, info = game.interact(env.random_query(game, rng))
        stalls += info["valid"] and info["hypothesis_size"] == before
    assert stalls >= 25


# ------------------------------------------------------------------------------ presets
@pytest.mark.parametrize("preset", ["guess_numbers_small", "circuit_decoding_small"])
def test_small_presets_pin_their_warm_start_and_the_command_line_wins(preset):
    cfg = compose_cfg(f"env={preset}")
    validate_config(cfg)
    assert cfg.env.terse is True and cfg.sft.noise == 0.2 and cfg.sft.steps == 400
    assert cfg.trainer.val_levels == 256 and cfg.env.max_turn == 10  # the paper's turn budget
    cfg = compose_cfg(f"env={preset}", "sft.steps=3", "trainer.val_levels=8", "sft.noise=0.5")
    assert (cfg.sft.steps, cfg.trainer.val_levels, cfg.sft.noise) == (3, 8, 0.5)
    # other presets keep the global defaults
    cfg = compose_cfg("env=guess_numbers")
    assert cfg.sft.steps == 500 and cfg.trainer.val_levels == 512 and cfg.env.get("num_digits", 4) == 4


def test_small_preset_rejects_unknown_and_oversized_keys():
    with pytest.raises(ConfigError, match="env.num_digitz"):
        validate_config(compose_cfg("env=guess_numbers_small", "+env.num_digitz=3"))
    with pytest.raises(ConfigError, match="num_digits"):
        validate_config(compose_cfg("env=guess_numbers_small", "env.num_digits=11"))


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["guess_numbers_small", "circuit_decoding_small"])
def test_small_preset_trains_end_to_end_with_t3_on_smoke(preset, ragen_cache_dir, tmp_path):
    from ragen_torchrl.trainer.loop import Trainer

    cfg = compose_cfg(
        f"env={preset}",
        "trainer=smoke",
        "t3.enabled=true",
        # the preset pins 256 validation levels (it wins over trainer=smoke); validation plays the
        # whole turn budget (malformed replies are retried there), so keep the pipeline check small
        "trainer.val_levels=4",
        *TINY_RUN,
        f"model.cache_dir={ragen_cache_dir}",
    )
    torch.manual_seed(0)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    summary = trainer.fit()
    assert summary["iterations"] == 2 and len(trainer.history) == 2
    for stats in trainer.history:
        for key in ("t3/rollout_tokens", "t3/truncation_rate", "t3/rule_fire_rate", "t3/mean_turns_saved"):
            assert key in stats and stats[key] == stats[key], key
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_val_levels_of_the_small_game_come_from_the_val_split():
    env = make_env("guess_numbers", num_digits=2, num_symbols=5)
    val_codes = {c for i, c in enumerate(all_codes(2, 5)) if i % 5 == 0}
    for seed in itertools.islice(range(VAL_SEED_OFFSET, VAL_SEED_OFFSET + 50), 50):
        assert env.game_factory(seed, 0).secret in val_codes
