"""Template collapse on purpose: ``sft.reasoning=shuffled`` demonstrations (RAGEN-2, arXiv 2604.06268).

The shuffled warm start must keep the reasoning's marginal distribution (same texts, same counts:
matched entropy), keep every answer where the oracle put it, and break the link between a reasoning
and its observation.
"""

from collections import Counter

import pytest

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.parsing import THINK_RE
from ragen_torchrl.trainer.demonstrations import make_demonstrations, shuffle_reasoning
from ragen_torchrl.trainer.sft import sft_fingerprint


def _turns(demos):
    """(observation, think, rest-of-reply) for every assistant turn."""
    out = []
    for chat in demos:
        for prev, msg in zip(chat, chat[1:]):
            if msg["role"] == "assistant":
                m = THINK_RE.search(msg["content"])
                out.append((prev["content"], m.group(1), msg["content"][m.end() :]))
    return out


def test_shuffled_demonstrations_keep_the_reasoning_multiset_and_the_answers():
    env = make_env("frozenlake", num_envs=1)
    grounded = make_demonstrations(env, 200, noise=0.6, seed=3)
    shuffled = make_demonstrations(env, 200, noise=0.6, seed=3, reasoning="shuffled")
    g, s = _turns(grounded), _turns(shuffled)
    assert [(o, rest) for o, _, rest in g] == [(o, rest) for o, _, rest in s]  # same prompts and answers
    assert Counter(t for _, t, _ in g) == Counter(t for _, t, _ in s)  # same reasoning texts, same counts
    moved = sum(a[1] != b[1] for a, b in zip(g, s))
    assert moved > 0.8 * len(g)  # FrozenLake reasoning is diverse: a permutation moves most of it


def test_shuffled_reasoning_no_longer_depends_on_the_observation():
    """FrozenLake's reasoning opens with the goal direction the observation states ("Goal is up.").

    Grounded: every reasoning agrees with its observation. Shuffled: only as often as two random
    turns share a goal direction (about 1 in 5 here).
    """
    env = make_env("frozenlake", num_envs=1)
    agree = {}
    for kind in ("grounded", "shuffled"):
        turns = _turns(make_demonstrations(env, 300, noise=0.0, seed=0, reasoning=kind))
        agree[kind] = sum(think.split(".")[0] + "." in obs for obs, think, _ in turns) / len(turns)
    assert agree["grounded"] == 1.0
    assert agree["shuffled"] < 0.4, agree


def test_shuffle_reasoning_leaves_turns_without_think_alone():
    demos = [
        [{"role": "user", "content": "u"}, {"role": "assistant", "content": "<answer>x</answer>"}],
        [{"role": "assistant", "content": "<think>a</think><answer>1</answer>"}],
        [{"role": "assistant", "content": "<think>b</think><answer>2</answer>"}],
    ]
    out = shuffle_reasoning(demos, seed=0)
    assert out[0] == demos[0]
    assert {out[1][0]["content"][:16], out[2][0]["content"][:16]} == {"<think>a</think>", "<think>b</think>"}
    assert demos[1][0]["content"] == "<think>a</think><answer>1</answer>"  # input not mutated


def test_unknown_reasoning_kind_is_a_clear_error():
    env = make_env("frozenlake", num_envs=1)
    with pytest.raises(ValueError, match="sft.reasoning must be one of"):
        make_demonstrations(env, 1, reasoning="templated")


def test_grounded_default_keeps_the_warm_start_cache_key(tmp_path, monkeypatch):
    """Adding the switch must not invalidate warm starts cached before it existed."""
    from ragen_torchrl.trainer import sft

    seen = []
    monkeypatch.setattr(sft, "sft_fingerprint", lambda cfg, *a: seen.append(dict(cfg)) or "x")
    env = make_env("frozenlake", num_envs=1)
    (tmp_path / "sft-x").mkdir()
    (tmp_path / "sft-x" / "config.json").write_text("{}")
    base = {"episodes": 1, "noise": 0.0, "steps": 1, "batch_size": 1, "lr": 1e-3, "seed": 0}
    sft.warm_start("base", env, {**base, "reasoning": "grounded"}, str(tmp_path))
    sft.warm_start("base", env, {**base, "reasoning": "shuffled"}, str(tmp_path))
    assert seen[0] == base
    assert seen[1] == {**base, "reasoning": "shuffled"}
    assert sft_fingerprint(seen[0], "base") != sft_fingerprint(seen[1], "base")
