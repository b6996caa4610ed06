"""The template-collapse monitor (``turn_pairs`` and ``CollapseMonitor``) on hand-built conversations."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.diagnostics.collapse import CollapseMonitor, turn_pairs

SYSTEM = {"role": "system", "content": "You play FrozenLake."}


def chat(obs: str, *replies: str) -> list[dict]:
    """system, user(obs), then assistant/user alternating, ending with the last assistant reply."""
    out = [SYSTEM, {"role": "user", "content": obs}]
    for k, reply in enumerate(replies):
        out.append({"role": "assistant", "content": reply})
        if k < len(replies) - 1:
            out.append({"role": "user", "content": f"{obs} after move {k + 1}"})
    return out


def records_of(chats: list[list[dict]], group_ids: list[int]) -> TensorDict:
    td = TensorDict(
        group_id=torch.tensor(group_ids), episode_return=torch.zeros(len(chats)), batch_size=[len(chats)]
    ).to_lazystack(0)
    td.set(("history", "full"), History.from_chats(chats))
    return td


# --------------------------------------------------------------------------- turn_pairs
def test_turn_pairs_on_a_hand_built_history():
    messages = [
        SYSTEM,
        {"role": "user", "content": "obs 1"},
        {"role": "assistant", "content": "<think> the hole is below </think><answer>Right</answer>"},
        {"role": "user", "content": "obs 2"},
        {"role": "assistant", "content": "<answer>Down</answer>"},
    ]
    pairs = turn_pairs(History.from_chats([messages])[0])
    assert len(pairs) == 2
    (ctx1, z1), (ctx2, z2) = pairs
    assert ctx1 == messages[:2]
    assert z1 == "the hole is below"  # stripped, tags removed
    assert ctx2 == messages[:4]
    assert z2 == ""  # no reasoning block


def test_turn_pairs_primed_and_multiline_reasoning():
    messages = [
        SYSTEM,
        {"role": "user", "content": "obs"},
        # generation primed with "<think>": the reply starts inside the block
        {"role": "assistant", "content": "go up\nthen left</think><answer>Up || Left</answer>"},
        {"role": "user", "content": "obs 2"},
        {"role": "assistant", "content": "<think>a</think> <think>b</think><answer>Up</answer>"},
        {"role": "user", "content": "obs 3"},
        {"role": "assistant", "content": "<think>never closed"},
    ]
    pairs = turn_pairs(History.from_chats([messages])[0])
    assert [z for _, z in pairs] == ["go up\nthen left", "a", ""]
    assert [len(ctx) for ctx, _ in pairs] == [2, 4, 6]


def test_turn_pairs_without_assistant_turns():
    messages = [SYSTEM, {"role": "user", "content": "obs"}]
    assert turn_pairs(History.from_chats([messages])[0]) == []


# --------------------------------------------------------------------------- the monitor
REASONS = {
    "Player (0,0) Goal (3,3)": "<think>the goal is down and right</think><answer>Down</answer>",
    "Player (2,1) Goal (0,0)": "<think>the goal is up and left</think><answer>Up</answer>",
    "Player (3,3) Goal (3,0)": "<think>the goal is to the left</think><answer>Left</answer>",
}


@pytest.fixture
def diverse_records():
    chats, groups = [], []
    for g, (obs, reply) in enumerate(REASONS.items()):
        for s in range(2):  # two samples per group, one of them two turns long
            replies = [reply] if s == 0 else [reply, f"<think>still thinking {g}</think><answer>Right</answer>"]
            chats.append(chat(obs, *replies))
            groups.append(g)
    return records_of(chats, groups)


def test_monitor_reports_mi_proxies(tiny_model, diverse_records):
    model, tok = tiny_model
    monitor = CollapseMonitor(model, tok, num_pairs=8, every=1, seed=0)
    metrics = monitor(diverse_records)
    for scheme in ("first_turn", "trajectory"):
        for key in (
            "mi_estimate",
            "mi_upper_bound",
            "conditional_entropy",
            "reasoning_entropy",
            "mi_zscore",
            "retrieval_accuracy",
            "retrieval_chance",
            "valid_rate",
            "reasoning_length",
        ):
            name = f"collapse/{scheme}/{key}"
            assert name in metrics, name
            assert math.isfinite(metrics[name]), name
        assert metrics[f"collapse/{scheme}/valid_rate"] == 1.0
        assert metrics[f"collapse/{scheme}/reasoning_length"] > 0
        # the pointwise MI proxy is bounded by log(number of columns)
        assert metrics[f"collapse/{scheme}/mi_estimate"] <= metrics[f"collapse/{scheme}/mi_upper_bound"] + 1e-6
        assert metrics[f"collapse/{scheme}/conditional_entropy"] > 0
    # first-turn sampling: the columns are the 3 prompt groups
    assert metrics["collapse/first_turn/mi_upper_bound"] == pytest.approx(math.log(3))
    assert metrics["collapse/first_turn/retrieval_chance"] == pytest.approx(1 / 3)
    assert "collapse/trajectory/reasoning_token_entropy_mean" in metrics
    assert metrics["collapse/trajectory/reasoning_token_entropy_mean"] > 0
    assert metrics["timing/mi_seconds"] >= 0
    assert all(isinstance(v, float) for v in metrics.values())
    assert model.training is False
    assert all(p.grad is None for p in model.parameters())


def test_monitor_is_reproducible_and_checkpointable(tiny_model, diverse_records):
    model, tok = tiny_model
    a = CollapseMonitor(model, tok, num_pairs=8, every=2, seed=3)
    b = CollapseMonitor(model, tok, num_pairs=8, every=2, seed=3)
    ma, mb = a(diverse_records), b(diverse_records)
    ma.pop("timing/mi_seconds"), mb.pop("timing/mi_seconds")
    assert ma == mb
    assert [a.should_run(i) for i in range(5)] == [True, False, True, False, True]

    # restoring the state continues the same sampling sequence (and the EMA trackers)
    state = a.state_dict()
    c = CollapseMonitor(model, tok, num_pairs=8, every=2, seed=99)
    c.load_state_dict(state)
    next_a, next_c = a(diverse_records), c(diverse_records)
    next_a.pop("timing/mi_seconds"), next_c.pop("timing/mi_seconds")
    assert next_a == next_c


def test_monitor_methods_agree(tiny_model, diverse_records):
    # the default (prefix tree) and the reference naive scoring give the same metrics
    model, tok = tiny_model
    out = {}
    for method in ("auto", "naive"):
        out[method] = CollapseMonitor(model, tok, num_pairs=8, every=1, seed=5, method=method)(diverse_records)
    for key, value in out["naive"].items():
        if key.startswith("collapse/"):
            assert out["auto"][key] == pytest.approx(value, abs=1e-4), key


def test_monitor_with_no_reasoning_reports_zero_valid_rate(tiny_model):
    model, tok = tiny_model
    chats = [
        chat("Player (0,0) Goal (3,3)", "<answer>Down</answer>"),
        chat("Player (0,0) Goal (3,3)", "<think></think><answer>Right</answer>"),
        chat("Player (2,1) Goal (0,0)", "<think>   </think><answer>Up</answer>", "no tags at all"),
        chat("Player (2,1) Goal (0,0)", "\x0f garbage"),
    ]
    metrics = CollapseMonitor(model, tok, num_pairs=6, every=1)(records_of(chats, [0, 0, 1, 1]))
    for scheme in ("first_turn", "trajectory"):
        assert metrics[f"collapse/{scheme}/valid_rate"] == 0.0
        assert metrics[f"collapse/{scheme}/reasoning_length"] == 0.0
        assert f"collapse/{scheme}/mi_estimate" not in metrics
    assert "timing/mi_seconds" in metrics


def test_monitor_on_random_model_rollouts(tiny_model):
    """Records straight from collect_rollouts of an untrained model: garbage replies, no crash."""
    from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
    from ragen_torchrl.envs import make_env

    model, tok = tiny_model
    env = make_env("frozenlake", num_envs=4, max_turn=2)
    torch.manual_seed(0)
    records = collect_rollouts(env, make_generation_policy(model, tok, max_new_tokens=6), [11, 12], 2)
    metrics = CollapseMonitor(model, tok, num_pairs=4, every=1)(records)
    for scheme in ("first_turn", "trajectory"):
        assert 0.0 <= metrics[f"collapse/{scheme}/valid_rate"] <= 1.0
        assert all(math.isfinite(v) for k, v in metrics.items() if k.startswith(f"collapse/{scheme}/valid"))


def test_monitor_rejects_bad_settings(tiny_model):
    model, tok = tiny_model
    with pytest.raises(ValueError):
        CollapseMonitor(model, tok, num_pairs=0)
    with pytest.raises(ValueError):
        CollapseMonitor(model, tok, every=0)
    with pytest.raises(ValueError, match="method"):
        CollapseMonitor(model, tok, method="fast")
