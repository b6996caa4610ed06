"""The token rollout through the per-row KV cache (``rollout.kv_cache``, default true).

The reference is the same rollout with ``kv_cache=False``: the token-prompt wrapper re-encodes every
row's whole prompt each turn (torchrl's generation path), an independent implementation of the
same distribution."""

from __future__ import annotations

import pytest
import torch

from ragen_torchrl import keys as K
from ragen_torchrl.collectors.grouped import (
    collect_rollouts,
    make_generation_policy,
    turn_cache_metrics,
)
from ragen_torchrl.envs import make_env
from ragen_torchrl.models.turn_cache import TurnCachePolicy

LEVELS, G = [3, 5], 2


def _rollout(model, tok, env_name: str, kv_cache: bool, temperature: float, seed: int = 0, max_new_tokens: int = 6):
    policy = make_generation_policy(
        model, tok, max_new_tokens=max_new_tokens, temperature=temperature, kv_cache=kv_cache
    )
    torch.manual_seed(seed)
    recs = collect_rollouts(make_env(env_name, num_envs=len(LEVELS) * G, max_turn=4), policy, LEVELS, G)
    return recs, policy


def _same_records(a, b) -> None:
    for key in (K.EPISODE_RETURN, K.SUCCESS, K.NUM_TURNS, K.NUM_TOKENS, K.GROUP_ID, K.TRAJECTORY_REFITS):
        assert torch.equal(a.get(key), b.get(key)), key
    for key in (K.TOKENS_TRAJECTORY, K.MASKS_TRAJECTORY):
        for x, y in zip(a.get(key, as_list=True), b.get(key, as_list=True), strict=True):
            assert torch.equal(x, y), key
    assert [h.content for h in a.get(K.HISTORY_FULL).unbind(0)] == [h.content for h in b.get(K.HISTORY_FULL).unbind(0)]
    assert torch.allclose(a.get(K.ENTROPY), b.get(K.ENTROPY), atol=1e-4)


@pytest.mark.parametrize("env_name", ["sokoban", "frozenlake"])
def test_greedy_rollouts_equal_with_and_without_the_cache(tiny_model, env_name):
    model, tok = tiny_model
    cached, policy = _rollout(model, tok, env_name, True, 0.0)
    plain, off = _rollout(model, tok, env_name, False, 0.0)
    assert policy.turn_cache is not None and off.turn_cache is None
    assert int(cached.get(K.NUM_TURNS).max()) >= 2  # multi-turn: later turns read the cache
    turns = cached.get(K.NUM_TURNS)
    # per trajectory: the first turn encoded from scratch, every later turn read the cache
    assert cached.get(K.KV_PREFILLED).tolist() == [1] * len(cached)
    assert cached.get(K.KV_REUSED).tolist() == (turns - 1).tolist()
    assert int(cached.get(K.KV_OVER_CAP).sum()) == 0
    assert K.KV_REUSED not in plain.keys(include_nested=True)  # no turn cache, no counts
    assert policy.turn_cache.cached_rows() == []  # every finished row released its cache
    _same_records(cached, plain)


@pytest.mark.parametrize("seed", [1, 2])
def test_sampled_rollouts_match_the_reprefill(tiny_model, seed):
    # sampling at T=1 from the same seed draws the same tokens (the logits agree to round-off, checked
    # below and in tests/models/test_turn_cache.py; a flipped sample there would show up here)
    model, tok = tiny_model
    cached, policy = _rollout(model, tok, "sokoban", True, 1.0, seed=seed)
    plain, _ = _rollout(model, tok, "sokoban", False, 1.0, seed=seed)
    assert int(cached.get(K.KV_REUSED).sum()) > 0
    _same_records(cached, plain)


def test_the_first_new_token_logits_equal_the_reprefill_mid_rollout(tiny_model):
    # each turn's first-token logits (read by a logits processor inside generate) against an
    # independent forward of the row's whole prompt, unpadded and uncached
    model, tok = tiny_model
    policy = make_generation_policy(model, tok, max_new_tokens=6, temperature=1.0)
    first: list = []

    def record_first(input_ids, scores):
        if not first[-1]:
            first[-1].append(scores.detach().clone())
        return scores

    policy.generate_kwargs["logits_processor"].append(record_first)
    seen = []

    class Spy:
        def __getattr__(self, name):
            return getattr(policy, name)

        def __call__(self, td):
            prompts = [p.clone() for p in td.get(K.TOKENS_PROMPT, as_list=True)]
            first.append([])
            out = policy(td)
            seen.append((prompts, first[-1][0]))
            return out

    torch.manual_seed(2)
    recs = collect_rollouts(make_env("sokoban", num_envs=4, max_turn=3), Spy(), LEVELS, G)
    assert int(recs.get(K.KV_REUSED).sum()) > 0 and len(seen) >= 2
    for prompts, scores in seen:
        for prompt, row in zip(prompts, scores, strict=True):
            torch.testing.assert_close(row, model(prompt[None]).logits[0, -1], atol=1e-4, rtol=0)


def test_clear_and_release_are_called(tiny_model):
    model, tok = tiny_model
    policy = make_generation_policy(model, tok, max_new_tokens=4, temperature=0.0)
    calls = []

    class Spy:
        def __getattr__(self, name):
            return getattr(policy, name)

        def __call__(self, td):
            calls.append(("generate", sorted(td.get(K.ENV_INDEX).tolist())))
            return policy(td)

        def clear(self):
            calls.append(("clear",))
            policy.clear()

        def release(self, env_indices):
            calls.append(("release", sorted(env_indices)))
            policy.release(env_indices)

    recs = collect_rollouts(make_env("sokoban", num_envs=4, max_turn=3), Spy(), LEVELS, G)
    assert calls[0] == ("clear",)
    released = [i for c in calls if c[0] == "release" for i in c[1]]
    assert sorted(released) == [0, 1, 2, 3]  # each row once, when its episode ended
    for i in range(4):  # no row generates after its release
        last_gen = max(n for n, c in enumerate(calls) if c[0] == "generate" and i in c[1])
        rel = next(n for n, c in enumerate(calls) if c[0] == "release" and i in c[1])
        assert last_gen < rel
    assert len([c for c in calls if c[0] == "generate"]) == int(recs.get(K.NUM_TURNS).max())
    assert policy.turn_cache.cached_rows() == []


def test_a_plain_callable_policy_needs_no_clear_or_release(tiny_model):
    _, tok = tiny_model
    reply = torch.tensor(tok("<answer>Up</answer>" + tok.eos_token, add_special_tokens=False)["input_ids"])

    def policy(td):
        for row in td.tensordicts:
            row.set(K.TOKENS_RESPONSE, reply)
        return td

    policy.input_mode, policy.tokenizer = "tokens", tok
    recs = collect_rollouts(make_env("sokoban", num_envs=2, max_turn=2), policy, [3], 2)
    assert recs.get(K.NUM_TURNS).tolist() == [2, 2]


def test_the_switch_and_its_errors(tiny_model):
    model, tok = tiny_model
    on = make_generation_policy(model, tok, max_cached_tokens=123)
    assert isinstance(on.turn_cache, TurnCachePolicy) and on.turn_cache.max_cached_tokens == 123
    assert on.turn_cache.generate_kwargs is on.generate_kwargs  # one set of sampling settings and recorder
    assert "turn_cache" not in dict(on.named_children())  # not a submodule: the state_dict is the model's
    assert make_generation_policy(model, tok, kv_cache=False).turn_cache is None
    assert getattr(make_generation_policy(model, tok, trajectory="history"), "turn_cache", None) is None
    with pytest.raises(ValueError, match="rollout.kv_cache must be true or false, got 'yes'"):
        make_generation_policy(model, tok, kv_cache="yes")
    with pytest.raises(ValueError, match="rollout.kv_cache_max_tokens must be a non-negative integer"):
        make_generation_policy(model, tok, max_cached_tokens=-1)


def test_turn_cache_metrics_per_iteration(tiny_model):
    model, tok = tiny_model
    policy = make_generation_policy(model, tok, max_new_tokens=4, temperature=0.0)
    recs = collect_rollouts(make_env("sokoban", num_envs=4, max_turn=3), policy, LEVELS, G)
    m = turn_cache_metrics(recs)
    turns = int(recs.get(K.NUM_TURNS).sum())
    assert m["rollout/kv_rows_prefilled"] == 4 and m["rollout/kv_rows_reused"] == turns - 4
    assert m["rollout/kv_rows_over_cap"] == 0 and m["rollout/kv_prefill_tokens"] > 0
    # the prefill tokens of a trajectory: its first prompt whole, then each later turn's new tokens
    # (the previous reply's last token, which generate never encodes, and the env's next message)
    first = [int(r.get(K.TOKENS_TRAJECTORY).numel()) for r in recs.unbind(0)]
    assert all(0 < int(n) <= f for n, f in zip(recs.get(K.KV_PREFILL_TOKENS), first))
    off = make_generation_policy(model, tok, kv_cache=False)
    assert turn_cache_metrics(collect_rollouts(make_env("sokoban", num_envs=4, max_turn=3), off, LEVELS, G)) == {}
