"""Property-based and payload fuzzing: no model reply crashes or stalls any registered env.

Every parser treats any string as a possibly-malformed reply (penalty, state unchanged) and
never raises. Two layers:

* a deterministic list of hostile payloads (the classes that found crashes: 10,000-digit
  numbers, 1 MB replies, 10k nested tags, NUL bytes, lone surrogates, right-to-left marks,
  thousands of actions, ``9**9**9**9``, fullwidth digits, unclosed tags, plus regex bombs)
  x every reply wrapper (bare, ``<answer>``, ``<interact>``, ``\\boxed{}``, each also after a
  ``<think>`` block, and the ``<think>``-primed form) x every registered env, stepped as one
  batch per env;
* a small hypothesis budget of random text and fragment soup per env.

The env's safety net (an env exception ends the row with the format penalty) would hide a
crash, so it re-raises here: a payload that needs the safety net fails the test.
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.envs import available_envs, make_env
from ragen_torchrl.envs.active.env import ActiveReasoningEnv
from ragen_torchrl.envs.active.reply import parse_active_reply
from ragen_torchrl.envs.parsing import MAX_REPLY_CHARS, parse_response
from ragen_torchrl.envs.text_env import TextGameEnv

# ----------------------------------------------------------------------------- payloads
#: payload class -> payloads (deterministic); 5,000-digit numbers stay under the 8192-char
#: reply cap, so the parsers do see more than Python's 4300 convertible digits
PAYLOADS: dict[str, list[str]] = {
    "10k-digit numbers": [
        "9" * 10_000,
        "1" * 5_000,
        "Would you prefer " + "1" * 5_000 + " over 2?",
        "Would you prefer item 1 over item " + "7" * 5_000 + "? estimate: " + ", ".join(["1"] * 8),
        "compare 1 " + "3" * 5_000,
        "#" + "4" * 5_000,
        "1/" + "2" * 5_000,
        "\\frac{1}{" + "3" * 5_000 + "}",
        "A(" + "1" * 5_000 + ")",
        "estimate: " + ", ".join(["9" * 500] * 8),
    ],
    "1 MB replies": ["a" * (1 << 20), "1 " * (1 << 19), " " * (1 << 20) + "x", "Up || " * (1 << 17)],
    "10k nested tags": [
        "<answer>" * 10_000 + "1" + "</answer>" * 10_000,
        "<think>" * 10_000 + "x" + "</think>" * 10_000,
        "<interact>" * 10_000 + "1234" + "</interact>" * 10_000,
        "\\boxed{" * 10_000 + "1" + "}" * 10_000,
        "(" * 10_000 + "1" + ")" * 10_000,
    ],
    "NUL bytes": ["\x00", "12\x0034", "Up\x00 || \x00Left", "\x00" * 1000],
    "lone surrogates": ["\ud800", "\udfff1234", "Would you prefer \ud800 over 2?", "A = x1 \udc00 x2"],
    "right-to-left marks": ["\u200f1234\u200f", "\u202eUp || Left\u202c", "compare \u200f1\u200f 2"],
    "thousands of actions": [" || ".join(["Up", "Left", "Down", "Right"] * 1_000), "||" * 5_000, "Up" * 5_000],
    "9**9**9**9": ["9**9**9**9", "9**9**9**9 = 24", "(9**9)**(9**9)"],
    "fullwidth digits": ["１２３４", "Would you prefer １ over ２?", "４２", "Ａ(１,０,１)"],
    "unclosed tags": [
        "<answer>1234",
        "<interact>compare 1 2",
        "<think>x",
        "</answer>",
        "<answer>",
        "<think>x</think><answer>",
    ],
    # recursive-descent parsers (CircuitDecoding formulas, Countdown equations): deep nesting
    "deep nesting": [
        "A = " + "NOT " * 120 + "x1",
        "A = " + "!" * 490 + "x1",
        "A = " + "(" * 300 + "x1" + ")" * 300,
        "-" * 190 + "1",
        "(" * 100 + "1" + ")" * 100,
    ],
    # inputs that made a regex backtrack polynomially before the fix (seconds to minutes)
    "regex bombs": [
        "A = x1" + " " * 8_000 + "x",
        "Would you prefer" + " " * 8_000 + "x",
        "compare 1" + " " * 8_000 + "x",
        "1" + " " * 8_000 + "y",
        "1" * 8_000 + "x",
    ],
}

#: reply wrappers ({p} is the payload)
WRAPPERS: dict[str, str] = {
    "bare": "{p}",
    "answer": "<answer>{p}</answer>",
    "interact": "<interact>{p}</interact>",
    "boxed": "\\boxed{{{p}}}",
    "think+answer": "<think>x</think><answer>{p}</answer>",
    "think+interact": "<think>x</think><interact>{p}</interact>",
    "think+boxed": "<think>x</think><answer>\\boxed{{{p}}}</answer>",
    "primed": "x</think><answer>{p}</answer>",
}

CASES = [(cls, p, w) for cls, ps in PAYLOADS.items() for p in ps for w in WRAPPERS.values()]

#: a one-step batch of every case must finish well inside this (seconds, slow shared CPU)
STEP_BUDGET_S = 10.0


@pytest.fixture(autouse=True)
def _safety_net_reraises(monkeypatch):
    """The safety net must never be needed: any env exception fails the test."""

    def reraise(self, idx, reply, error):
        raise error

    monkeypatch.setattr(TextGameEnv, "_failed_row", reraise)


def _step(env: TextGameEnv, replies: list[str], before: list[str] | None = None):
    """Reset ``len(replies)`` rows on level seed 5 and step them once; ``before`` receives
    each row's observation after the reset."""
    n = len(replies)
    td = env.reset(
        TensorDict(level_seed=torch.full((n,), 5), group_id=torch.zeros(n, dtype=torch.long), batch_size=[n])
    )
    if before is not None:
        before.extend(game.render_text() for game in env.games)
    msgs = History(role=["assistant"] * n, content=replies, batch_size=(n,))
    td.set(("history", "full"), td["history", "prompt"].extend(msgs.unsqueeze(-1), inplace=False, dim=-1))
    return env.step(td)["next"]


def _check_contract(nxt, n: int) -> None:
    reward = nxt["reward"]
    assert reward.shape == (n, 1, 1)
    assert torch.isfinite(reward).all()
    for key in ("done", "terminated", "truncated"):
        assert nxt[key].shape == (n, 1) and nxt[key].dtype == torch.bool
    assert nxt["action_is_valid"].dtype == torch.bool
    for row in range(n):
        history = nxt["history", "prompt"][row]
        assert history.role[-1] == "user"
        # the reply cap bounds what the env echoes back into the conversation
        assert len(history.content[-1]) < MAX_REPLY_CHARS + 4_000


def test_payload_list_covers_every_issue_class():
    # "10,000-digit numbers, 1 MB replies, 10k nested tags, NUL bytes, lone surrogates,
    # right-to-left marks, thousands of actions, `9**9**9**9`, fullwidth digits, unclosed tags"
    assert {
        "10k-digit numbers",
        "1 MB replies",
        "10k nested tags",
        "NUL bytes",
        "lone surrogates",
        "right-to-left marks",
        "thousands of actions",
        "9**9**9**9",
        "fullwidth digits",
        "unclosed tags",
    } <= set(PAYLOADS)
    assert len(PAYLOADS["10k-digit numbers"][0]) == 10_000 and len(PAYLOADS["1 MB replies"][0]) == 1 << 20
    assert PAYLOADS["10k nested tags"][0].count("<answer>") == 10_000
    assert {"<answer>{p}</answer>", "<interact>{p}</interact>", "\\boxed{{{p}}}"} <= set(WRAPPERS.values())


@pytest.mark.parametrize("name", available_envs())
def test_hostile_payloads_never_crash(name):
    """Every payload x wrapper on every registered env (including the T3 ones): a finite
    reward, the contract's flags, a bounded next message, and no stall."""
    replies = [w.format(p=p) for _, p, w in CASES]
    assert len(set(replies)) == len(replies) == sum(map(len, PAYLOADS.values())) * len(WRAPPERS)
    env = make_env(name, num_envs=len(replies))
    before: list[str] = []
    start = time.perf_counter()
    nxt = _step(env, replies, before)
    elapsed = time.perf_counter() - start
    _check_contract(nxt, len(replies))
    assert elapsed < STEP_BUDGET_S, f"{name}: {len(replies)} hostile replies took {elapsed:.1f} s"
    # a malformed reply gets the penalty and leaves the state unchanged
    reward, malformed = nxt["reward"].flatten().tolist(), 0
    for row, reply in enumerate(replies):
        if isinstance(env, ActiveReasoningEnv):
            if parse_active_reply(reply).kind is None:  # reference without T3: "Try again.", no penalty
                malformed += 1
                assert reward[row] == 0.0 and not nxt["done"][row].item(), reply[:80]
        elif not parse_response(reply, None).format_ok:
            malformed += 1
            assert reward[row] == pytest.approx(env.format_penalty), reply[:80]
            assert env.games[row].render_text() == before[row], reply[:80]
    assert malformed > len(replies) // 3


# ----------------------------------------------------------------------------- hypothesis
FRAGMENTS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<interact>",
    "</interact>",
    "\\boxed{",
    "}",
    "||",
    "Left",
    "Up",
    "Right",
    "Down",
    "1234",
    "(1,0,1)",
    "A = x1 AND x2",
    "compare 1 2",
    "Would you prefer 1 over 2?",
    "estimate:",
    "=",
    "+",
    "*",
    "(",
    ")",
    "\n",
    " ",
    "\x00",
    "\ud800",
    "\u200f",
    "１２",
    "9**9**9**9",
    "9" * 5_000,
    " " * 2_000,
]
replies = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=40).map("".join),
    st.builds(lambda s, n: s * n, st.sampled_from(FRAGMENTS), st.integers(100, 2000)),
)

_ENVS: dict[str, object] = {}


def _env(name: str):
    if name not in _ENVS:
        _ENVS[name] = make_env(name, num_envs=1)
    return _ENVS[name]


@pytest.mark.parametrize("name", available_envs())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=replies)
def test_random_replies_never_crash(name, reply):
    env = _env(name)
    nxt = _step(env, [reply])
    _check_contract(nxt, 1)
    assert math.isfinite(float(nxt["reward"]))
