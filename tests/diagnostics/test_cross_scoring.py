"""Cross-scoring: the KV-cached path must reproduce the naive concatenation path.

Tiny randomly initialised Qwen2 built in-process (no downloads), eval mode, seeded.

Tolerances: float32 agrees to ~2e-6 per entry (tested at 1e-4). bfloat16 cannot meet 1e-4:
even the *naive* path scored with two different batch sizes differs by ~1e-4 in bf16 (the
matmul kernels round differently for different shapes), and cached vs naive differed by up
to 7e-4 (mean) / 6e-3 (sum) nats over 6 random models with ragged lengths, against ~2e-3 /
1e-2 between bf16 and float32 themselves. The bf16 test therefore uses 5e-3 nats per token
(mean) and 5e-3 * |z_i| (sum).
"""

from __future__ import annotations

import doctest

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ragen_torchrl.diagnostics import cross_scoring as cs_mod
from ragen_torchrl.diagnostics.cross_scoring import cross_score
from ragen_torchrl.diagnostics.mi import mi_proxies

VOCAB = 64


def _tiny_model(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def model():
    return _tiny_model(0)


def _ragged(seed: int):
    g = torch.Generator().manual_seed(seed)
    # contexts include the degenerate 1- and 2-token cases (empty / 1-token cached prefix)
    ctx = [torch.randint(VOCAB, (n,), generator=g) for n in (1, 7, 13, 2, 30, 7)]
    zs = [torch.randint(VOCAB, (n,), generator=g) for n in (1, 5, 9, 3, 12)]
    return ctx, zs


def _direct_sum_log_prob(model, x, z):
    """log p(z | x) from one unpadded forward of [x | z], written out by hand."""
    seq = torch.cat([x, z]).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids=seq).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    total = 0.0
    for t in range(len(z)):
        # token z_t sits at position |x| + t and is predicted by the logits at |x| + t - 1
        total += logp[len(x) + t - 1, z[t]].item()
    return total


@pytest.fixture(scope="module")
def naive_reference(model):
    ctx, zs = _ragged(1)
    return cross_score(model, ctx, zs, method="naive", batch_size=7)


@pytest.mark.parametrize("method", ["cached", "tree"])
@pytest.mark.parametrize("batch_size", [3, 5, 64])
def test_cached_equals_naive_float32(model, naive_reference, batch_size, method):
    # batch_size 3: prefixes encoded 3 at a time, one context per reasoning pass, reasonings
    # split 3 + 2 (the base cache is reused, so it must not be modified by a pass);
    # 5: one context with all 5 reasonings (expand view); 64: all 6 ragged contexts in one
    # prefix pass and 64 // 5 = 12 -> all 6 contexts in one reasoning pass (gathered rows).
    ctx, zs = _ragged(1)
    mean_n, sum_n = naive_reference
    mean_c, sum_c = cross_score(model, ctx, zs, method=method, batch_size=batch_size)
    assert mean_c.shape == sum_c.shape == (len(zs), len(ctx))
    assert mean_c.dtype == torch.float32 and mean_c.device.type == "cpu"
    assert torch.isfinite(mean_c).all()
    assert (mean_c - mean_n).abs().max() < 1e-4
    assert (sum_c - sum_n).abs().max() < 1e-4
    lengths = torch.tensor([len(z) for z in zs], dtype=torch.float32).unsqueeze(1)
    torch.testing.assert_close(mean_c, sum_c / lengths)


def test_hand_check_one_entry_against_direct_forward(model):
    ctx, zs = _ragged(2)
    mean_c, sum_c = cross_score(model, ctx, zs, method="cached")
    mean_n, sum_n = cross_score(model, ctx, zs, method="naive")
    for i, j in [(3, 2), (0, 0), (4, 4), (2, 3)]:  # includes |z| = 1 and |x| = 1 entries
        want = _direct_sum_log_prob(model, ctx[j], zs[i])
        assert sum_c[i, j].item() == pytest.approx(want, abs=1e-4)
        assert sum_n[i, j].item() == pytest.approx(want, abs=1e-4)
        assert mean_c[i, j].item() == pytest.approx(want / len(zs[i]), abs=1e-4)


@pytest.mark.parametrize("method", ["cached", "tree"])
@pytest.mark.parametrize("batch_size", [3, 64])
def test_cached_equals_naive_float64_to_rounding(batch_size, method):
    # In float64 the two paths agree to ~1e-12: the cached algorithm is exact, and what is
    # left in lower precisions is kernel rounding (see the bfloat16 test below).
    model = _tiny_model(4).to(torch.float64)
    ctx, zs = _ragged(4)
    mean_n, sum_n = cross_score(model, ctx, zs, method="naive", batch_size=batch_size)
    mean_c, sum_c = cross_score(model, ctx, zs, method=method, batch_size=batch_size)
    assert sum_c.dtype == torch.float64  # a float64 model keeps its precision
    assert (sum_c - sum_n).abs().max() < 1e-9
    assert (mean_c - mean_n).abs().max() < 1e-9


@pytest.mark.parametrize("method", ["cached", "tree"])
def test_cached_equals_naive_bfloat16(method):
    model = _tiny_model(3).to(torch.bfloat16)
    ctx, zs = _ragged(3)
    mean_n, sum_n = cross_score(model, ctx, zs, method="naive", batch_size=8)
    mean_c, sum_c = cross_score(model, ctx, zs, method=method, batch_size=8)
    lengths = torch.tensor([len(z) for z in zs], dtype=torch.float32).unsqueeze(1)
    assert torch.isfinite(mean_c).all()
    assert (mean_c - mean_n).abs().max() < 5e-3
    assert ((sum_c - sum_n).abs() <= 5e-3 * lengths).all()
    # and both stay close to the float32 answer (bf16 rounding only)
    mean_f, _ = cross_score(_tiny_model(3), ctx, zs, method="naive")
    assert (mean_c - mean_f).abs().max() < 2e-2


def test_select_cache_leaves_the_base_cache_untouched(model):
    from ragen_torchrl.models.kv_cache import forward_kwargs, output_cache, select_cache

    cache_name, _ = forward_kwargs(model)
    with torch.no_grad():
        base = output_cache(model(input_ids=torch.randint(VOCAB, (2, 6)), use_cache=True))
        if not hasattr(base, "layers"):
            pytest.skip("per-layer cache objects need transformers >= 4.56")
        before = [layer.keys.clone() for layer in base.layers]
        for index in (torch.tensor([1, 1, 1]), torch.tensor([0, 1, 1, 0])):  # expand / gather
            sel = select_cache(base, index, 4)
            assert sel.get_seq_length() == 4 and sel.layers[0].keys.shape[0] == len(index)
            torch.testing.assert_close(sel.layers[0].keys, before[0][index, :, :4])
            # a forward appends to the selected cache, never to the base one
            model(input_ids=torch.randint(VOCAB, (len(index), 2)), use_cache=True, **{cache_name: sel})
            assert sel.get_seq_length() == 6
        assert base.get_seq_length() == 6
        for layer, ref in zip(base.layers, before):
            assert torch.equal(layer.keys, ref)


def test_identical_context_columns_score_identically(model):
    # the same prompt placed in two columns (different chunk positions / padding) must get
    # the same scores: padding and chunking are invisible
    ctx, zs = _ragged(4)
    ctx = ctx + [ctx[1].clone()]
    mean_c, _ = cross_score(model, ctx, zs, batch_size=64)
    assert (mean_c[:, 1] - mean_c[:, -1]).abs().max() < 1e-5


def test_restores_training_mode_and_feeds_mi(model):
    ctx, zs = _ragged(5)
    model.train()
    try:
        mean_a, sum_a = cross_score(model, ctx, zs)
        assert model.training  # restored
    finally:
        model.eval()
    mean_b, _ = cross_score(model, ctx, zs)
    torch.testing.assert_close(mean_a, mean_b)  # scored in eval mode both times
    out = mi_proxies(mean_a[:, :5], torch.arange(5), seq_log_probs=sum_a[:, :5])
    assert out["num_pairs"] == 5 and out["num_columns"] == 5


def test_bad_input(model):
    ctx, zs = _ragged(6)
    with pytest.raises(ValueError, match="method"):
        cross_score(model, ctx, zs, method="fast")
    with pytest.raises(ValueError, match="empty"):
        cross_score(model, ctx, zs + [torch.zeros(0, dtype=torch.long)])
    with pytest.raises(ValueError, match="empty"):
        cross_score(model, [], zs)
    with pytest.raises(ValueError, match="1-D"):
        cross_score(model, [torch.zeros(2, 3, dtype=torch.long)], zs)
    with pytest.raises(ValueError, match="integer"):
        cross_score(model, ctx, [torch.zeros(3)])
    with pytest.raises(ValueError, match="batch_size"):
        cross_score(model, ctx, zs, batch_size=0)


def test_docstring_examples():
    result = doctest.testmod(cs_mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("method,batch_size", [("cached", 64), ("cached", 3), ("naive", 5), ("tree", 64), ("tree", 1)])
def test_own_context_entropy_matches_a_separate_forward(model, method, batch_size):
    from ragen_torchrl.diagnostics.entropy import token_entropy

    contexts, reasonings = _ragged(7)
    own = torch.tensor([k % len(contexts) for k in range(len(reasonings))])
    mean_lp, _, ent = cross_score(model, contexts, reasonings, method=method, batch_size=batch_size, entropy_cols=own)
    assert ent.shape == (len(reasonings),)
    for i, z in enumerate(reasonings):
        x = contexts[int(own[i])]
        with torch.no_grad():
            logits = model(input_ids=torch.cat([x, z])[None]).logits
        mask = torch.zeros(1, len(x) + len(z), dtype=torch.bool)
        mask[0, len(x) - 1 : len(x) + len(z) - 1] = True  # the positions that predict z
        assert abs(float(ent[i]) - float(token_entropy(logits, mask)[0])) < 1e-4


def test_entropy_cols_bad_input(model):
    contexts, reasonings = _ragged(1)
    with pytest.raises(ValueError, match="entropy_cols"):
        cross_score(model, contexts, reasonings, entropy_cols=[0])
    with pytest.raises(ValueError, match="entropy_cols"):
        cross_score(model, contexts, reasonings, entropy_cols=[len(contexts)] * len(reasonings))


def _templated(seed: int):
    """Reasonings that share prefixes the way templated reasoning does: one is a prefix of
    others, two are identical, one shares nothing, lengths 1 to 9."""
    g = torch.Generator().manual_seed(seed)
    stem = torch.randint(VOCAB, (6,), generator=g)
    zs = [stem[:1], stem[:3], stem.clone(), stem.clone()]
    zs += [torch.cat([stem[:3], torch.randint(VOCAB, (n,), generator=g)]) for n in (1, 4, 6)]
    zs += [torch.randint(VOCAB, (5,), generator=g)]
    ctx, _ = _ragged(seed)
    return ctx, zs


@pytest.mark.parametrize("batch_size", [1, 2, 64])
def test_tree_equals_naive_on_shared_prefixes(model, batch_size):
    # batch_size 1: a budget of ~4 tree slots -> several prefix trees, one context per pass;
    # 64: one tree, all six contexts in one pass
    ctx, zs = _templated(8)
    own = torch.tensor([k % len(ctx) for k in range(len(zs))])
    mean_n, sum_n, ent_n = cross_score(model, ctx, zs, method="naive", entropy_cols=own)
    mean_t, sum_t, ent_t = cross_score(model, ctx, zs, method="tree", batch_size=batch_size, entropy_cols=own)
    assert (sum_t - sum_n).abs().max() < 1e-4
    assert (mean_t - mean_n).abs().max() < 1e-4
    assert (ent_t - ent_n).abs().max() < 1e-4
    torch.testing.assert_close(sum_t[2], sum_t[3])  # identical reasonings, identical rows
    # and one entry by hand against a plain unpadded forward
    assert sum_t[5, 4].item() == pytest.approx(_direct_sum_log_prob(model, ctx[4], zs[5]), abs=1e-4)


def test_tree_is_the_default_where_supported_and_refused_where_not(model):
    from ragen_torchrl.diagnostics.tree_scoring import tree_supported

    assert tree_supported(model)
    ctx, zs = _templated(9)
    torch.testing.assert_close(cross_score(model, ctx, zs)[1], cross_score(model, ctx, zs, method="tree")[1])
    torch.manual_seed(0)
    sliding = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            use_sliding_window=True,
            sliding_window=4,
            max_window_layers=0,
        )
    ).eval()
    assert not tree_supported(sliding)
    with pytest.raises(ValueError, match="tree"):
        cross_score(sliding, ctx, zs, method="tree")
    # "auto" falls back to the per-pair cached path for such models
    torch.testing.assert_close(cross_score(sliding, ctx, zs)[1], cross_score(sliding, ctx, zs, method="cached")[1])


@pytest.mark.parametrize("method", ["tree", "cached"])
def test_bfloat16_policy_scored_in_float32_matches_naive_to_1e4(method):
    # bf16 arithmetic cannot meet 1e-4 (see the module docstring), but the same bf16
    # parameters scored with dtype=float32 can, and the policy itself is left as it was
    model = _tiny_model(3).to(torch.bfloat16)
    before = [p.clone() for p in model.parameters()]
    ctx, zs = _templated(3)
    mean_n, sum_n = cross_score(model, ctx, zs, method="naive", dtype=torch.float32)
    mean_c, sum_c = cross_score(model, ctx, zs, method=method, dtype="float32")
    assert (mean_c - mean_n).abs().max() < 1e-4
    assert (sum_c - sum_n).abs().max() < 1e-4
    # = scoring an explicit float32 copy of the bf16 weights
    mean_f, _ = cross_score(_tiny_model(3).to(torch.bfloat16).float(), ctx, zs, method=method)
    assert (mean_c - mean_f).abs().max() < 1e-6
    assert all(p.dtype == torch.bfloat16 and torch.equal(p, b) for p, b in zip(model.parameters(), before))
    with pytest.raises(ValueError, match="dtype"):
        cross_score(model, ctx, zs, dtype="int8")
    with pytest.raises(ValueError, match="dtype"):
        cross_score(model, ctx, zs, dtype="flot32")


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_on_llama_with_both_mask_taking_attention_kernels(attn):
    # the tree mask is an additive 4-D float mask: both kernels must apply it as given
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            attn_implementation=attn,
        )
    ).eval()
    ctx, zs = _templated(2)
    _, sum_n = cross_score(llama, ctx, zs, method="naive")
    _, sum_t = cross_score(llama, ctx, zs, method="tree", batch_size=2)
    assert (sum_t - sum_n).abs().max() < 1e-4


def _chat_like(seed: int):
    """Contexts with a shared head (like a system prompt), including two that differ only in
    their last token and one that is the head plus one token, and templated reasonings."""
    g = torch.Generator().manual_seed(seed)
    head = torch.randint(VOCAB, (9,), generator=g)
    tails = [torch.randint(VOCAB, (n,), generator=g) for n in (1, 4, 11, 6)]
    ctx = [torch.cat([head, t]) for t in tails]
    ctx.append(torch.cat([head, tails[1][:-1], (tails[1][-1:] + 1) % VOCAB]))  # last token differs
    _, zs = _templated(seed)
    return ctx, zs


@pytest.mark.parametrize("method", ["cached", "tree"])
@pytest.mark.parametrize("batch_size", [2, 64])
def test_shared_context_head_is_encoded_once_and_exactly(model, method, batch_size):
    ctx, zs = _chat_like(10)
    _, sum_n = cross_score(model, ctx, zs, method="naive")
    fed = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(int(kwargs["input_ids"].numel())), with_kwargs=True
    )
    try:
        _, sum_c = cross_score(model, ctx, zs, method=method, batch_size=batch_size)
    finally:
        hook.remove()
    assert (sum_c - sum_n).abs().max() < 1e-4
    if batch_size == 64:  # one prefix pass: the 9-token head once, then 5 rests of width 10
        assert fed[:2] == [9, 5 * 10]


def test_contexts_differing_only_in_their_last_token(model):
    # their cached prefixes are all the shared head: no per-context rest pass at all
    ctx, zs = _chat_like(11)
    pair = [ctx[1], ctx[4]]
    _, sum_n = cross_score(model, pair, zs, method="naive")
    for method in ("cached", "tree"):
        _, sum_c = cross_score(model, pair, zs, method=method)
        assert (sum_c - sum_n).abs().max() < 1e-4
