"""TurnCachePolicy: reusing each row's KV cache across turns gives what a left-padded re-prefill gives.

The reference is an independent bare ``model.generate`` on the whole left-padded prompts (what a
policy without a cache does every turn). Multi-turn episodes are built at the token level: the
next prompt is the prompt, the reply as sampled and a row-specific observation. Rows have
different lengths, some replies end with the end-of-turn token (forced by a logits processor that
both paths get) and rows finish at different turns.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from helpers import load_tiny
from tensordict import TensorDict
from transformers import DynamicCache, LogitsProcessor, LogitsProcessorList

import ragen_torchrl.models.turn_cache as turn_cache
from ragen_torchrl.collectors import hf_generate_kwargs
from ragen_torchrl.keys import KV_COUNT_KEYS
from ragen_torchrl.models.entropy_recorder import EntropyRecorder
from ragen_torchrl.models.inverse_cdf import inverse_cdf_generate_kwargs
from ragen_torchrl.models.turn_cache import TurnCachePolicy, check_turn_cache_settings, reusable_length


@pytest.fixture(scope="module")
def model_tok(tiny_model_dir):
    return load_tiny(tiny_model_dir)


class ForceEos(LogitsProcessor):
    """Forces the end-of-turn token at decoding step ``step`` for the rows whose prompt ``pick`` selects:
    replies that end early, the same rows in both paths whatever their padding."""

    def __init__(self, eos: int, step: int, pick):
        self.eos, self.step, self.pick, self.calls, self.rows = eos, step, pick, 0, []

    def start(self, prompts):
        self.calls, self.rows = 0, [self.pick(p) for p in prompts]

    def __call__(self, input_ids, scores):
        if self.calls == self.step:
            for r, forced in enumerate(self.rows):
                if forced:
                    scores[r] = -float("inf")
                    scores[r, self.eos] = 0.0
        self.calls += 1
        return scores


class FirstScores(LogitsProcessor):
    """Keeps the scores of the first decoding step (the logits of the first new token)."""

    def __init__(self):
        self.first = None

    def start(self, prompts):
        self.first = None

    def __call__(self, input_ids, scores):
        if self.first is None:
            self.first = scores.clone()
        return scores


def _td(prompts, env_index):
    return TensorDict(
        {
            "tokens": {"prompt": torch.nested.as_nested_tensor(list(prompts), layout=torch.jagged)},
            "env_index": torch.tensor(env_index),
        },
        batch_size=[len(prompts)],
    )


def _reprefill(model, prompts, kwargs, pad, eos):
    """Bare generate on the left-padded whole prompts; replies cut after the first eos."""
    width = max(p.numel() for p in prompts)
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - p.numel() :] = p
        mask[r, width - p.numel() :] = 1
    with torch.no_grad():
        new = model.generate(input_ids=ids, attention_mask=mask, **kwargs)[:, width:]
    out = []
    for row in new:
        hits = (row == eos).nonzero().reshape(-1)
        out.append(row[: int(hits[0]) + 1] if hits.numel() else row)
    return out


def _first_prompts(tok, n):
    """Chat prompts of different lengths that share a system prompt."""
    prompts = []
    for r in range(n):
        text = tok.apply_chat_template(
            [
                {"role": "system", "content": "You push boxes. Answer with actions."},
                {"role": "user", "content": "state " + "#_" * (r + 1) + " go"},
            ],
            tokenize=False,
            add_generation_prompt=True,
        )
        prompts.append(torch.tensor(tok(text, add_special_tokens=False)["input_ids"]))
    return prompts


def _observation(tok, r, t):
    text = (
        f"<|im_end|>\n<|im_start|>user\nturn {t} row {r} "
        + "x" * ((r * 3 + t) % 5)
        + "<|im_end|>\n<|im_start|>assistant\n"
    )
    return torch.tensor(tok(text, add_special_tokens=False)["input_ids"])


def _counting(policy) -> Counter:
    """The per-row turn-cache counts of every output ``policy`` returns, summed (keyed ``reused``, ...)."""
    totals = Counter()
    call = policy.forward

    def forward(td):
        out = call(td)
        for key in KV_COUNT_KEYS:
            totals[key[-1]] += int(out.get(key).sum())
        return out

    policy.forward = forward
    return totals


def _episodes(model, tok, policy, kwargs, *, turns=4, last_turn=(3, 1, 2, 3, 0), processors=(), check=None):
    """Plays rows over ``turns`` turns with ``policy``; at each turn compares with the re-prefill reference.

    Row ``r`` plays turns ``0..last_turn[r]``, then is released. Returns the per-turn replies of both paths.
    """
    prompts = _first_prompts(tok, len(last_turn))
    pad, eos = tok.pad_token_id, tok.eos_token_id
    running = list(range(len(last_turn)))
    history = []
    for t in range(turns):
        if not running:
            break
        rows = [prompts[r] for r in running]
        for proc in processors:
            proc.start(rows)
        ours = policy(_td(rows, running)).get(("tokens", "response"), as_list=True)
        ours_state = [p.first for p in processors if isinstance(p, FirstScores)]
        for proc in processors:
            proc.start(rows)
        ref = _reprefill(model, rows, kwargs, pad, eos)
        ref_state = [p.first for p in processors if isinstance(p, FirstScores)]
        history.append((list(running), ours, ref))
        if check is not None:
            check(t, ours, ref, ours_state, ref_state)
        still = []
        for r, reply in zip(running, ours):
            if t < last_turn[r]:
                prompts[r] = torch.cat([prompts[r], reply, _observation(tok, r, t)])
                still.append(r)
        policy.release([r for r in running if r not in still])
        running = still
    return history


def _greedy(max_new_tokens=6, processors=()):
    kwargs = hf_generate_kwargs(max_new_tokens, 0)
    if processors:
        kwargs["logits_processor"] = LogitsProcessorList(list(processors))
    return kwargs


def test_greedy_replies_equal_the_reprefill_over_turns(model_tok):
    """Greedy: the same replies as the re-prefill at every turn; replies that end with the end-of-turn
    token (rows with an even prompt length, at step 2) are kept whole and their shorter cache reused."""
    model, tok = model_tok
    force = ForceEos(tok.eos_token_id, 2, pick=lambda p: p.numel() % 2 == 0)
    kwargs = _greedy(processors=[force])
    policy = TurnCachePolicy(model, generate_kwargs=kwargs)
    counts = _counting(policy)
    history = _episodes(model, tok, policy, kwargs, processors=[force])
    ended = 0
    for running, ours, ref in history:
        assert len(ours) == len(running)
        for a, b in zip(ours, ref):
            assert torch.equal(a, b)
            ended += int(a.numel() == 3 and a[-1] == tok.eos_token_id)
    assert 0 < ended < sum(len(h[0]) for h in history)
    assert [len(h[0]) for h in history] == [5, 4, 3, 2]  # rows finish at different turns
    # every row was fresh at turn 0 and reused its cache at every later turn
    assert counts["prefilled"] == 5
    assert counts["reused"] == 4 + 3 + 2
    assert policy.cached_rows() == []  # every finished row was released
    assert policy.cached_tokens == 0


def test_sampling_first_token_logits_equal_the_reprefill(model_tok):
    """Sampling: the logits of every turn's first new token equal the re-prefill's within 1e-4, and the
    entropy recorder gives the same per-row entropies."""
    model, tok = model_tok
    first = FirstScores()
    kwargs = hf_generate_kwargs(5, 1.0)
    kwargs["logits_processor"] = LogitsProcessorList([first])
    policy = TurnCachePolicy(model, generate_kwargs=kwargs, record_entropy=True)
    counts = _counting(policy)
    assert isinstance(policy.entropy_recorder, EntropyRecorder)
    compared = []

    def check(t, ours, ref, ours_first, ref_first):
        assert torch.allclose(ours_first[0], ref_first[0], atol=1e-4, rtol=0)
        compared.append(t)

    torch.manual_seed(0)
    _episodes(model, tok, policy, kwargs, processors=[first], check=check)
    assert compared == [0, 1, 2, 3]
    assert counts["reused"] > 0


@pytest.mark.parametrize("sampler", ["inverse_cdf", "multinomial"])
def test_entropy_recorder_sees_the_cached_generation(model_tok, sampler):
    """The recorder sees every step of the cached generation; the replies equal a bare ``generate``'s on the
    whole prompts from the same RNG state, with ``transformers``' sampler or through the inverse-CDF one."""
    model, tok = model_tok
    kwargs = hf_generate_kwargs(5, 1.0)
    policy = TurnCachePolicy(model, generate_kwargs=kwargs, record_entropy=True, sampler=sampler)
    kv = _counting(policy)
    prompts = _first_prompts(tok, 3)
    torch.manual_seed(1)
    replies = policy(_td(prompts, [0, 1, 2])).get(("tokens", "response"), as_list=True)
    nxt = [torch.cat([p, r, _observation(tok, i, 0)]) for i, (p, r) in enumerate(zip(prompts, replies))]
    policy.entropy_recorder.clear()
    torch.manual_seed(2)
    replies = policy(_td(nxt, [0, 1, 2])).get(("tokens", "response"), as_list=True)
    sums, counts = policy.entropy_recorder.row_sums([r.numel() for r in replies])
    # independent: the entropy of the re-prefill's first-step logits, row by row
    rec = EntropyRecorder()
    ref_kwargs = {**kwargs, "logits_processor": LogitsProcessorList([rec])}
    if sampler == "inverse_cdf":
        ref_kwargs = inverse_cdf_generate_kwargs(ref_kwargs)
    torch.manual_seed(2)
    ref = _reprefill(model, nxt, ref_kwargs, tok.pad_token_id, tok.eos_token_id)
    ref_sums, ref_counts = rec.row_sums([r.numel() for r in ref])
    assert all(torch.equal(a, b) for a, b in zip(replies, ref))  # same RNG stream, same logits up to round-off
    assert torch.equal(counts, ref_counts)
    assert torch.allclose(sums, ref_sums, atol=1e-4)
    assert kv["reused"] == 3


def _dynamic_cache(buffer, filled):
    """transformers' own ``DynamicCache`` of the buffer's filled slots (it grows by ``torch.cat``)."""
    cache = DynamicCache()
    for layer in range(buffer.shape[0]):
        cache.update(buffer[layer, 0, ..., :filled, :], buffer[layer, 1, ..., :filled, :], layer)
    return cache


def _two_turns(model, tok, kwargs, seed):
    """Replies, first-step scores and stored caches of two turns (the second reusing the first's caches)."""
    first = FirstScores()
    kwargs = {**kwargs, "logits_processor": LogitsProcessorList([first])}
    policy = TurnCachePolicy(model, generate_kwargs=kwargs)
    counts = _counting(policy)
    prompts = _first_prompts(tok, 4)
    out = []
    for t in range(2):
        torch.manual_seed(seed + t)
        replies = policy(_td(prompts, [0, 1, 2, 3])).get(("tokens", "response"), as_list=True)
        out.append((replies, first.first, {e: policy.stored_cache(e)[1] for e in policy.cached_rows()}))
        first.first = None
        prompts = [torch.cat([p, r, _observation(tok, i, t)]) for i, (p, r) in enumerate(zip(prompts, replies))]
    assert counts["reused"] == 4
    return out


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_the_preallocated_buffer_generates_what_a_dynamic_cache_generates(model_tok, monkeypatch, temperature):
    """Decoding into the preallocated buffer (written in place) against ``generate`` on transformers'
    ``DynamicCache`` from the same slots: the same greedy replies, the same sampled replies under a fixed
    seed, the same first-token logits (1e-4) and the same stored keys/values, at a fresh and a reused turn."""
    model, tok = model_tok
    kwargs = hf_generate_kwargs(6, temperature)
    ours = _two_turns(model, tok, kwargs, seed=3)
    monkeypatch.setattr(turn_cache, "_buffer_cache", _dynamic_cache)
    ref = _two_turns(model, tok, kwargs, seed=3)
    for (replies, scores, store), (ref_replies, ref_scores, ref_store) in zip(ours, ref):
        assert all(torch.equal(a, b) for a, b in zip(replies, ref_replies))
        assert torch.allclose(scores, ref_scores, atol=1e-4, rtol=0)
        assert store.keys() == ref_store.keys() and len(store) == 4
        assert all(torch.allclose(store[e], ref_store[e], atol=1e-5, rtol=0) for e in store)


def test_a_buffer_too_short_grows_and_gives_the_same_replies(model_tok, monkeypatch):
    """No room reserved for the decoding steps: every layer moves to a bigger buffer on the first step;
    replies still equal the re-prefill's over several turns and the rows' caches are still stored."""
    model, tok = model_tok
    monkeypatch.setattr(TurnCachePolicy, "_max_new_tokens", lambda self: 0)
    kwargs = _greedy()
    policy = TurnCachePolicy(model, generate_kwargs=kwargs)
    counts = _counting(policy)

    def check(t, ours, ref, *_):
        assert all(torch.equal(a, b) for a, b in zip(ours, ref))

    _episodes(model, tok, policy, kwargs, check=check)
    assert counts["reused"] == 4 + 3 + 2


def test_a_buffer_layer_after_a_batch_selection_keeps_the_selected_rows():
    buf = torch.zeros(1, 2, 3, 1, 5, 1)
    cache = turn_cache._buffer_cache(buf, 1)
    cache.update(torch.ones(3, 1, 1, 1), torch.ones(3, 1, 1, 1), 0)
    cache.layers[0].batch_select_indices(torch.tensor([2, 0]))  # keys are no longer views of the buffer
    keys, _ = cache.update(torch.full((2, 1, 1, 1), 7.0), torch.full((2, 1, 1, 1), 7.0), 0)
    assert keys.shape == (2, 1, 3, 1) and keys[:, 0, :, 0].tolist() == [[0.0, 1.0, 7.0], [0.0, 1.0, 7.0]]
    assert buf[0, 0, :, 0, :, 0].tolist() == [[0.0, 1.0, 0.0, 0.0, 0.0]] * 3  # the old buffer is left alone


def test_the_cap_falls_back_to_reprefill_with_the_same_replies(model_tok):
    model, tok = model_tok
    kwargs = _greedy()
    cap = 90  # about one row's conversation: the others are not stored
    policy = TurnCachePolicy(model, generate_kwargs=kwargs, max_cached_tokens=cap)
    counts = _counting(policy)

    def check(t, ours, ref, *_):
        assert all(torch.equal(a, b) for a, b in zip(ours, ref))
        assert policy.cached_tokens <= cap

    _episodes(model, tok, policy, kwargs, check=check)
    assert counts["over_cap"] > 0
    assert counts["reused"] > 0  # some rows fit
    assert counts["prefilled"] > 5  # over-cap rows re-prefilled at later turns


def test_release_and_clear_free_the_rows(model_tok):
    model, tok = model_tok
    policy = TurnCachePolicy(model, generate_kwargs=_greedy(4))
    prompts = _first_prompts(tok, 3)
    replies = policy(_td(prompts, [4, 7, 9])).get(("tokens", "response"), as_list=True)
    sizes = {e: p.numel() + r.numel() - 1 for e, p, r in zip([4, 7, 9], prompts, replies)}
    assert policy.cached_rows() == [4, 7, 9]
    assert policy.cached_tokens == sum(sizes.values())
    policy.release([7, 123])  # an unknown row is ignored
    assert policy.cached_rows() == [4, 9]
    assert policy.cached_tokens == sizes[4] + sizes[9]
    # the released row prefills from scratch at its next turn
    nxt = torch.cat([prompts[1], replies[1], _observation(tok, 1, 0)])
    out = policy(_td([nxt], [7]))
    assert out["turn_cache", "prefilled"].tolist() == [1] and out["turn_cache", "reused"].tolist() == [0]
    assert out["turn_cache", "prefill_tokens"].tolist() == [nxt.numel()]  # the whole prompt, encoded again
    policy.clear()
    assert policy.cached_rows() == [] and policy.cached_tokens == 0


def test_a_weight_update_clears_the_caches(tiny_model):
    """The stored keys/values belong to the weights that computed them: after an optimizer step the next
    turn re-prefills and gives what the updated model gives."""
    model, tok = tiny_model
    kwargs = _greedy(5)
    policy = TurnCachePolicy(model, generate_kwargs=kwargs)
    counts = _counting(policy)
    prompts = _first_prompts(tok, 2)
    replies = policy(_td(prompts, [0, 1])).get(("tokens", "response"), as_list=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(input_ids=prompts[0].unsqueeze(0), labels=prompts[0].unsqueeze(0)).loss.backward()
    opt.step()
    nxt = [torch.cat([p, r, _observation(tok, i, 0)]) for i, (p, r) in enumerate(zip(prompts, replies))]
    got = policy(_td(nxt, [0, 1])).get(("tokens", "response"), as_list=True)
    assert counts["reused"] == 0 and counts["prefilled"] == 4  # the second turn re-prefilled both rows
    ref = _reprefill(model, nxt, kwargs, tok.pad_token_id, tok.eos_token_id)
    assert all(torch.equal(a, b) for a, b in zip(got, ref))


def test_a_new_episode_on_a_slot_is_prefilled_from_scratch(model_tok):
    model, tok = model_tok
    kwargs = _greedy(5)
    policy = TurnCachePolicy(model, generate_kwargs=kwargs)
    counts = _counting(policy)
    a, b = _first_prompts(tok, 2)
    policy(_td([a], [0]))
    got = policy(_td([b], [0])).get(("tokens", "response"), as_list=True)  # not an extension of a's
    assert counts["reused"] == 0 and counts["prefilled"] == 2
    assert torch.equal(got[0], _reprefill(model, [b], kwargs, tok.pad_token_id, tok.eos_token_id)[0])
    assert policy.cached_tokens == b.numel() + got[0].numel() - 1


def test_kv_cache_off_stores_nothing_and_gives_the_same_replies(model_tok):
    model, tok = model_tok
    kwargs = _greedy()
    policy = TurnCachePolicy(model, generate_kwargs=kwargs, kv_cache=False)
    counts = _counting(policy)

    def check(t, ours, ref, *_):
        assert all(torch.equal(a, b) for a, b in zip(ours, ref))

    _episodes(model, tok, policy, kwargs, check=check)
    assert counts["reused"] == 0 and policy.cached_rows() == []


def test_a_model_without_masked_cache_attention_reprefills(model_tok, monkeypatch):
    model, tok = model_tok
    monkeypatch.setattr(turn_cache, "shared_prefix_supported", lambda model: False)
    kwargs = _greedy()
    policy = TurnCachePolicy(model, generate_kwargs=kwargs)
    counts = _counting(policy)

    def check(t, ours, ref, *_):
        assert all(torch.equal(a, b) for a, b in zip(ours, ref))

    _episodes(model, tok, policy, kwargs, check=check)
    assert counts["reused"] == 0 and policy.cached_rows() == []


def test_reusable_length():
    p = torch.tensor([5, 6, 7, 8])
    assert reusable_length(None, p) == 0
    assert reusable_length(torch.tensor([5, 6, 7]), p) == 3
    assert reusable_length(torch.tensor([5, 6, 7, 8, 9]), p) == 0  # longer than the prompt
    assert reusable_length(torch.tensor([5, 0]), p) == 0


def test_bad_settings_and_inputs_raise(model_tok):
    model, tok = model_tok
    with pytest.raises(ValueError, match="rollout.kv_cache_max_tokens"):
        TurnCachePolicy(model, max_cached_tokens=-1)
    with pytest.raises(ValueError, match="rollout.kv_cache must be true or false"):
        TurnCachePolicy(model, kv_cache="yes")
    with pytest.raises(ValueError, match="rollout.kv_cache_max_tokens"):
        check_turn_cache_settings(True, 1.5)
    policy = TurnCachePolicy(model, generate_kwargs=_greedy(2))
    prompts = _first_prompts(tok, 2)
    with pytest.raises(ValueError, match="env_index must be distinct"):
        policy(_td(prompts, [3, 3]))


@pytest.mark.parametrize(
    ("override", "text"),
    [("rollout.kv_cache=maybe", "rollout.kv_cache"), ("rollout.kv_cache_max_tokens=-5", "rollout.kv_cache_max_tokens")],
)
def test_bad_config_values_name_the_key(tmp_path, override, text):
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config import validate_config
    from ragen_torchrl.trainer.config_checks import ConfigError
    from ragen_torchrl.trainer.config_paths import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"model.cache_dir={tmp_path}", override])
    with pytest.raises(ConfigError, match=text):
        validate_config(cfg)


@pytest.mark.parametrize("cascade", [False, True])
def test_a_row_released_after_its_turn_is_never_gathered(model_tok, monkeypatch, cascade):
    """A stored cache is a reference into the call's buffers: only a row that continues has its keys/values
    copied out (at its next turn); a row released at its last turn costs no copy."""
    model, tok = model_tok
    gathered = []
    tensor = turn_cache._StoredSlots.tensor
    monkeypatch.setattr(turn_cache._StoredSlots, "tensor", lambda self: gathered.append(1) or tensor(self))
    policy = TurnCachePolicy(model, generate_kwargs=_greedy(4), cascade=cascade)
    base = _first_prompts(tok, 2)
    prompts = [base[g] for g in (0, 0, 1, 1)]
    replies = policy(_td(prompts, [0, 1, 2, 3])).get(("tokens", "response"), as_list=True)
    assert policy.cached_rows() == [0, 1, 2, 3] and gathered == []
    policy.release([0, 1, 2])  # three episodes end here
    assert gathered == []
    nxt = torch.cat([prompts[3], replies[3], _observation(tok, 3, 0)])
    out = policy(_td([nxt], [3]))
    assert out["turn_cache", "reused"].tolist() == [1] and len(gathered) == 1


def _grouped_turns(model, tok, kwargs, cascade, seed=0):
    """Two turns of 8 rows in 3 groups (rows of a group share their first prompt): replies, first-step
    scores and stored caches; the second turn reuses the first's caches."""
    first = FirstScores()
    policy = TurnCachePolicy(
        model, generate_kwargs={**kwargs, "logits_processor": LogitsProcessorList([first])}, cascade=cascade
    )
    counts = _counting(policy)
    base = _first_prompts(tok, 3)
    prompts = [base[g] for g in (0, 0, 0, 1, 1, 2, 2, 2)]
    out = []
    for t in range(2):
        torch.manual_seed(seed + t)
        replies = policy(_td(prompts, list(range(8)))).get(("tokens", "response"), as_list=True)
        out.append((replies, first.first, {e: policy.stored_cache(e)[1] for e in policy.cached_rows()}))
        first.first = None
        prompts = [torch.cat([p, r, _observation(tok, i, t)]) for i, (p, r) in enumerate(zip(prompts, replies))]
    assert counts["prefilled"] == 8 and counts["reused"] == 8
    return out


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_cascade_attention_gives_the_replies_and_caches_of_the_plain_path(model_tok, monkeypatch, temperature):
    """Rows of a group at their first turn decode over their shared prompt once (cascade attention): the same
    replies (greedy, and sampled from the same seed), the same first-step scores and stored caches within
    1e-5 as every row on its own copy of the prompt, at the first turn and at the next turn that reuses them."""
    import ragen_torchrl.models.cascade_attention as cascade_mod

    model, tok = model_tok
    calls = []
    real = cascade_mod.cascade_attention
    monkeypatch.setattr(cascade_mod, "cascade_attention", lambda *a: calls.append(a[0].shape) or real(*a))
    kwargs = hf_generate_kwargs(8, temperature)
    before = model.config._attn_implementation
    ours = _grouped_turns(model, tok, kwargs, cascade=True)
    assert calls and all(shape[2] == 1 for shape in calls)  # every step of the first turn, one query each
    assert len(calls) % model.config.num_hidden_layers == 0
    assert model.config._attn_implementation == before  # restored after the call
    n_calls = len(calls)
    ref = _grouped_turns(model, tok, kwargs, cascade=False)
    assert len(calls) == n_calls  # the plain path never runs it
    for (replies, scores, store), (ref_replies, ref_scores, ref_store) in zip(ours, ref):
        assert all(torch.equal(a, b) for a, b in zip(replies, ref_replies))
        torch.testing.assert_close(scores, ref_scores, atol=1e-5, rtol=0)
        assert store.keys() == ref_store.keys() and len(store) == 8
        for e in store:
            torch.testing.assert_close(store[e], ref_store[e], atol=1e-5, rtol=0)


def test_cascade_is_not_used_without_shared_prompts_or_on_eager_attention(model_tok, monkeypatch):
    model, tok = model_tok
    used = []
    monkeypatch.setattr(TurnCachePolicy, "_cascade_generate", lambda self, *a: used.append(1))
    policy = TurnCachePolicy(model, generate_kwargs=_greedy(2))
    policy(_td(_first_prompts(tok, 3), [0, 1, 2]))  # three distinct prompts: nothing to share
    assert used == []
    monkeypatch.setattr(model.config, "_attn_implementation", "eager")
    prompts = _first_prompts(tok, 1) * 2
    TurnCachePolicy(model, generate_kwargs=_greedy(2))(_td(prompts, [0, 1]))
    assert used == []
