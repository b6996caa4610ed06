"""ragen_torchrl.checks: the small type/range checks."""

from __future__ import annotations

import math
import re

import pytest

from ragen_torchrl.checks import check_bool, check_choice, check_int, check_number


# --------------------------------------------------------------------------------------------
# check_int
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, 1, 7, 10**20])
def test_check_int_returns_the_value(value):
    assert check_int("n", value, minimum=0) == value
    assert type(check_int("n", value)) is int


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (True, {"minimum": 0}, "n must be an int >= 0, got True"),  # bool is not an int here
        (False, {}, "n must be an int, got False"),
        (2.0, {"minimum": 1}, "n must be an int >= 1, got 2.0"),
        ("3", {"minimum": 1}, "n must be an int >= 1, got '3'"),
        (None, {"minimum": 1}, "n must be an int >= 1, got None"),
        (0, {"minimum": 1}, "n must be an int >= 1, got 0"),
        (9, {"maximum": 5}, "n must be an int <= 5, got 9"),
        (9, {"minimum": 1, "maximum": 5}, "n must be an int in [1, 5], got 9"),
        (0, {"minimum": 1, "noun": "an integer"}, "n must be an integer >= 1, got 0"),
        (0, {"minimum": 1, "expected": "a positive integer"}, "n must be a positive integer, got 0"),
    ],
)
def test_check_int_rejects(value, kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_int("n", value, **kwargs)


def test_check_int_keeps_the_messages_it_replaced():
    with pytest.raises(ValueError, match=r"^filter\.grad_snr\.buckets must be an int >= 1, got 0$"):
        check_int("filter.grad_snr.buckets", 0, minimum=1)


# --------------------------------------------------------------------------------------------
# check_number
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "expected"), [(0, 0.0), (3, 3.0), (0.25, 0.25), (-1.5, -1.5)])
def test_check_number_returns_a_float(value, expected):
    got = check_number("x", value)
    assert got == expected and type(got) is float


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (True, {}, "x must be a number, got True"),
        ("1.0", {}, "x must be a number, got '1.0'"),
        (None, {}, "x must be a number, got None"),
        ([1], {}, "x must be a number, got [1]"),
        (float("nan"), {}, "x must be finite, got nan"),
        (float("inf"), {}, "x must be finite, got inf"),
        (float("-inf"), {"minimum": 0.0}, "x must be finite, got -inf"),
        (-1, {"minimum": 0.0}, "x must be >= 0.0, got -1.0"),
        (2, {"maximum": 1}, "x must be <= 1, got 2.0"),
        (2, {"minimum": 0, "maximum": 1}, "x must be in [0, 1], got 2.0"),
        (2, {"minimum": 0, "maximum": 1, "expected": "in [0, 1]"}, "x must be in [0, 1], got 2"),
        (False, {"expected": "in [0, 1]"}, "x must be in [0, 1], got False"),
        (float("nan"), {"finite": False, "minimum": 0.0}, "x must be >= 0.0, got nan"),
    ],
)
def test_check_number_rejects(value, kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_number("x", value, **kwargs)


def test_check_number_finite_false_lets_nan_and_inf_through():
    assert math.isnan(check_number("x", float("nan"), finite=False))
    assert check_number("x", float("-inf"), finite=False) == -math.inf


# --------------------------------------------------------------------------------------------
# check_bool / check_choice
# --------------------------------------------------------------------------------------------
def test_check_bool():
    assert check_bool("flag", True) is True and check_bool("flag", False) is False
    for bad in (0, 1, "yes", "true", None, 1.0):
        with pytest.raises(ValueError, match=f"^flag must be true or false, got {re.escape(repr(bad))}$"):
            check_bool("flag", bad)


def test_check_choice():
    assert check_choice("mode", "min", ("min", "max")) == "min"
    with pytest.raises(ValueError, match=r"^mode must be one of min, max, got 'mean'$"):
        check_choice("mode", "mean", ("min", "max"))
    with pytest.raises(ValueError, match=r"^mode must be one of min, max, got None$"):
        check_choice("mode", None, ["min", "max"])
    with pytest.raises(ValueError, match=r"^unknown filter\.metric 'variance'; valid options: rv, mi$"):
        check_choice(
            "filter.metric", "variance", ("rv", "mi"), message="unknown {name} {value!r}; valid options: {choices}"
        )


def test_check_choice_lists_non_string_options():
    assert check_choice("k", 2, (1, 2, 3)) == 2
    with pytest.raises(ValueError, match=r"^k must be one of 1, 2, 3, got 4$"):
        check_choice("k", 4, (1, 2, 3))


def test_the_config_key_forms_use_the_same_checks():
    """``config_checks.check_bool`` / ``check_choice`` read a key and call these: same message, ``ConfigError``."""
    from omegaconf import OmegaConf

    from ragen_torchrl.trainer import config_checks
    from ragen_torchrl.trainer.config_checks import ConfigError

    cfg = OmegaConf.create({"a": {"flag": "yes", "mode": "mean", "unset": None}})
    with pytest.raises(ConfigError, match=r"^a\.flag must be true or false, got 'yes'$"):
        config_checks.check_bool(cfg, "a.flag")
    with pytest.raises(ConfigError, match=r"^a\.mode must be one of min, max, got 'mean'$"):
        config_checks.check_choice(cfg, "a.mode", ("min", "max"))
    config_checks.check_bool(cfg, "a.unset")  # null: allowed unless optional=False
    config_checks.check_choice(cfg, "a.unset", ("min", "max"))
    with pytest.raises(ConfigError, match=r"^a\.unset must be true or false, got None$"):
        config_checks.check_bool(cfg, "a.unset", optional=False)
    with pytest.raises(ConfigError, match="^x must be true or false"):
        check_bool("x", 1, error=ConfigError)
