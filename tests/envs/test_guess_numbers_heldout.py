"""The held-out GuessNumbers preset (``env=guess_numbers_heldout``): 3 distinct digits of 0-5, validation
secrets disjoint from training (and demonstration) secrets, deterministic in the level seed; the
``env.split_by`` and ``env.malformed`` switches are checked before anything is built."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.games.guess_numbers import all_codes
from ragen_torchrl.envs.splits import DEMO_SEED_OFFSET, VAL_SEED_OFFSET
from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.model_setup import env_kwargs

PRESET = "guess_numbers_heldout"


def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


def preset_env():
    cfg = compose_cfg(f"env={PRESET}")
    return make_env(cfg.env.name, num_envs=1, **env_kwargs(cfg.env))


def secrets(env, first: int, count: int) -> list[str]:
    return [env.game_factory(seed, 0).secret for seed in range(first, first + count)]


def test_preset_is_the_small_preset_on_a_larger_code_space_with_held_out_secrets():
    held, small = (
        OmegaConf.to_container(compose_cfg(f"env={p}"), resolve=True) for p in (PRESET, "guess_numbers_small")
    )
    changed = {k: (small["env"][k], held["env"][k]) for k in small["env"] if small["env"][k] != held["env"][k]}
    assert changed == {"num_digits": (2, 3), "num_symbols": (5, 6), "split_by": ("level", "secret")}
    # everything else (warm start, validation size, turn budget, the reference's malformed rule) is the small preset's
    assert {k: v for k, v in held.items() if k != "env"} == {k: v for k, v in small.items() if k != "env"}
    assert held["env"]["malformed"] == "auto" and held["env"]["max_turn"] == 10
    validate_config(compose_cfg(f"env={PRESET}"))


def test_validation_secrets_are_never_training_or_demonstration_secrets():
    env = preset_env()
    codes = all_codes(3, 6)
    held_out = {c for i, c in enumerate(codes) if i % 5 == 0}
    train = set(secrets(env, 0, 3000))
    val = set(secrets(env, VAL_SEED_OFFSET, 1000))
    demo = set(secrets(env, DEMO_SEED_OFFSET, 3000))
    assert len(codes) == 120 and len(held_out) == 24
    assert val == held_out  # every validation-only code is played
    assert train == demo == set(codes) - held_out  # training and the warm start see the other 96, all of them
    assert not train & val and not demo & val


def test_the_split_is_deterministic_in_the_level_seed():
    seeds = [0, 7, VAL_SEED_OFFSET, VAL_SEED_OFFSET + 5, DEMO_SEED_OFFSET + 3]
    a, b = preset_env(), preset_env()
    assert [a.game_factory(s, 0).secret for s in seeds] == [b.game_factory(s, 1).secret for s in seeds]
    # pinned draws: a change of the generator (and so of every run's levels) shows up here
    assert secrets(a, 0, 4) == ["352", "135", "243", "235"]
    assert secrets(a, VAL_SEED_OFFSET, 4) == ["123", "034", "312", "102"]
    assert len(set(secrets(a, 0, 64))) > 20  # the training levels spread over the codes


def test_the_oracle_solves_every_code_within_five_of_the_ten_turns():
    env = preset_env()
    for seed in list(range(200)) + list(range(VAL_SEED_OFFSET, VAL_SEED_OFFSET + 100)):
        game = env.game_factory(seed, 0)
        while not game.done:
            game.step(game.oracle_action())
        assert game.success and game.turn <= 5, (seed, game.secret, game.turn)


@pytest.mark.parametrize("mode", ["end", "retry"])
def test_the_malformed_rule_is_set_apart_from_t3(mode):
    for t3 in ("false", "true"):
        cfg = compose_cfg(f"env={PRESET}", f"env.malformed={mode}", f"t3.enabled={t3}")
        validate_config(cfg)
        env = make_env(cfg.env.name, num_envs=1, **env_kwargs(cfg.env))
        assert env.malformed_mode() == mode
        env.t3_active = True  # what a T3 transform sets: a forced mode does not follow it
        assert env.malformed_mode() == mode


@pytest.mark.parametrize(
    "overrides,key,choices",
    [
        ((f"env={PRESET}", "env.split_by=hash"), "env.split_by", "secret, level"),
        (("env=circuit_decoding_small", "env.split_by=secret"), "env.split_by", "circuits, level"),
        ((f"env={PRESET}", "env.malformed=skip"), "env.malformed", "auto, end, retry, penalty"),
    ],
)
def test_bad_switch_values_are_config_errors_naming_the_key_and_the_choices(overrides, key, choices):
    with pytest.raises(ConfigError, match=f"{key} must be one of {choices}"):
        validate_config(compose_cfg(*overrides))
