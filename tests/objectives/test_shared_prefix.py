"""A prompt shared by several rows runs through the model once (``algo.shared_prefix``).

Compared with the padded pass it replaces: logits at the trained positions and parameter gradients
within 1e-5 (CPU float32), every algorithm's loss terms and gradients within 1e-5, the behaviour
pass's assistant log-probs within 1e-5, a whole update ending with the same weights, and the model
reading fewer tokens."""

from __future__ import annotations

import pytest
import torch
from helpers import algo_objective, grads
from tensordict import TensorDict
from torchrl.data.llm import History
from transformers import Qwen2Config, Qwen2ForCausalLM

from ragen_torchrl.models.kv_cache import shared_prefix_supported
from ragen_torchrl.objectives import ALGORITHMS
from ragen_torchrl.objectives.logprobs import attach_training_data, compute_behaviour_log_probs, make_logprob_policy
from ragen_torchrl.objectives.shared_prefix import prefix_groups, shared_prefix_logits
from ragen_torchrl.objectives.token_distribution import masked_position_logits
from ragen_torchrl.trainer.update import minibatch_plan, optimize, scores_shared_prefixes, training_batch


def _objective(name, model, tok, actor, **overrides):
    return algo_objective(name, model, tok, actor, 4, **overrides)


def small_model(vocab: int = 40) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return Qwen2ForCausalLM(config).eval()


def padded_logits(model, rows, masks) -> torch.Tensor:
    """The reference: one left-padded pass over every row (the loss's previous path)."""
    width = max(len(r) for r in rows)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (r, m) in enumerate(zip(rows, masks)):
        tokens[i, width - len(r) :] = r
        attention[i, width - len(r) :] = 1
        mask[i, width - len(r) :] = m
    return masked_position_logits(model, tokens, attention, mask)


def multi_turn_rows(seed: int = 1):
    """3 prompts (a shared 10-token head, different tails) x 3 samples, two replies each, ragged."""
    g = torch.Generator().manual_seed(seed)
    head = torch.randint(0, 40, (10,), generator=g)
    rows, masks = [], []
    for p in range(3):
        prompt = torch.cat([head, torch.randint(0, 40, (2 + 3 * p,), generator=g)])
        for _ in range(3):
            reply = torch.randint(0, 40, (int(torch.randint(1, 8, (), generator=g)),), generator=g)
            obs = torch.randint(0, 40, (4,), generator=g)
            reply2 = torch.randint(0, 40, (int(torch.randint(1, 5, (), generator=g)),), generator=g)
            rows.append(torch.cat([prompt, reply, obs, reply2]))
            masks.append(
                torch.cat(
                    [torch.zeros(len(prompt)), torch.ones(len(reply)), torch.zeros(4), torch.ones(len(reply2))]
                ).bool()
            )
    return rows, masks


def assert_same_logits_and_gradients(model, rows, masks) -> None:
    ref = padded_logits(model, rows, masks)
    out = shared_prefix_logits(model, rows, masks)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    weight = torch.randn(ref.shape, generator=torch.Generator().manual_seed(0))
    params = list(model.parameters())
    g_ref = torch.autograd.grad((ref * weight).sum(), params)
    g_out = torch.autograd.grad((out * weight).sum(), params)
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_prefix_groups_by_hand():
    rows = [torch.tensor([1, 2, 3, 7, 8]), torch.tensor([1, 2, 3, 9]), torch.tensor([1, 5, 6, 7]), torch.tensor([4, 4])]
    masks = [torch.tensor(m).bool() for m in ([0, 0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 1], [1, 0])]
    # row 3 is trained only at position 0 (nothing scores it): no group
    assert prefix_groups(rows, masks) == ([0, 0, 1, -1], [3, 3, 3, 0])
    # the same prompt with a different first trained position is another group
    assert prefix_groups(
        [rows[0], torch.tensor([1, 2, 3, 7, 8])], [masks[0], torch.tensor([0, 0, 1, 1, 1]).bool()]
    ) == (
        [0, 1],
        [3, 2],
    )


def test_multi_turn_rows_give_the_padded_pass_logits_and_gradients():
    rows, masks = multi_turn_rows()
    assert len(set(prefix_groups(rows, masks)[0])) == 3
    assert_same_logits_and_gradients(small_model(), rows, masks)


def test_edge_rows_identical_rows_position_zero_one_token_prompts_and_no_trained_token():
    model = small_model()
    same = torch.tensor([3, 4, 5, 6, 7])
    rows = [
        same,
        same.clone(),  # an identical row: its rest is scored on its own
        torch.tensor([3, 9, 9]),  # a one-token prompt: nothing to cache
        # trained at position 0 (zero logits there) and after; a longest row, so that the padded
        # reference also has nothing before it
        torch.tensor([8, 1, 2, 3, 4]),
        torch.tensor([2, 2, 2]),  # nothing trained
        torch.tensor([3, 4, 5, 1]),
    ]
    masks = [
        torch.tensor([0, 0, 1, 1, 1]),
        torch.tensor([0, 0, 1, 1, 1]),
        torch.tensor([0, 1, 1]),
        torch.tensor([1, 0, 1, 1, 0]),
        torch.tensor([0, 0, 0]),
        torch.tensor([0, 0, 1, 0]),
    ]
    assert_same_logits_and_gradients(model, rows, [m.bool() for m in masks])
    # only one-token prompts: no cache at all
    assert_same_logits_and_gradients(model, rows[2:3], [masks[2].bool()])
    # nothing trained anywhere: an empty [0, V] result
    assert shared_prefix_logits(model, rows[4:5], [masks[4].bool()]).shape == (0, 40)


def test_bad_input_is_a_clear_error():
    model = small_model()
    with pytest.raises(ValueError, match="2 token rows but 1 masks"):
        shared_prefix_logits(model, [torch.tensor([1, 2])] * 2, [torch.tensor([0, 1]).bool()])
    with pytest.raises(ValueError, match="row 0: tokens"):
        shared_prefix_logits(model, [torch.tensor([1, 2, 3])], [torch.tensor([0, 1]).bool()])


def test_supported_models():
    model = small_model()
    assert shared_prefix_supported(model)
    model.config._attn_implementation = "flash_attention_2"  # takes no mask with holes
    assert not shared_prefix_supported(model)


def test_each_shared_prompt_is_read_once():
    model = small_model()
    rows, masks = multi_turn_rows()
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, a, out: seen.append(a[0].numel()))
    try:
        padded_logits(model, rows, masks)
        padded = sum(seen)
        seen.clear()
        shared_prefix_logits(model, rows, masks)
    finally:
        hook.remove()
    prompts = {tuple(r[: int(torch.nonzero(m)[0])].tolist()) for r, m in zip(rows, masks)}
    assert len(prompts) == 3
    assert sum(seen) < 0.8 * padded


# -- through the losses and the trainer's update ----------------------------------------------
GROUPED_CHATS = [
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": obs},
        {"role": "assistant", "content": reply},
    ]
    + extra
    for obs, replies in (
        ("P___\n_O__\n___G", ("<think>down</think><answer>Down</answer>", "<answer>Right</answer>")),
        ("G__P", ("<answer>Left</answer>", "<think>left left</think><answer>Left || Left</answer>")),
    )
    for reply in replies
    for extra in ([], [{"role": "user", "content": "obs two"}, {"role": "assistant", "content": "<answer>Up</answer>"}])
]


def grouped_records():
    """Two prompts x four samples (two one-turn, two two-turn): rows of a group share their prompt."""
    recs = TensorDict(
        group_id=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        episode_return=torch.tensor([1.0, -0.5, 0.2, 0.9, 0.0, 1.0, 0.3, -1.0]),
        num_tokens=torch.tensor([20, 12, 15, 18, 9, 14, 16, 11]),
        batch_size=[8],
    ).to_lazystack(0)
    recs.set(("history", "full"), History.from_chats(GROUPED_CHATS))
    return recs


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_loss_gives_the_same_terms_gradients_and_metrics(tiny_model, name):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    obj, _ = _objective(name, model, tok, actor)
    recs = obj.advantage(obj.shape_rewards(grouped_records()))
    batch, _ = obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs)))
    runs = {}
    for shared in (False, True):
        obj.loss_module.shared_prefix = shared
        model.zero_grad()
        out = obj.loss_module(batch)
        obj.total_loss(out).backward()
        runs[shared] = (out, grads(model), obj.metrics(out, batch))
    (out_a, g_a, m_a), (out_b, g_b, m_b) = runs[False], runs[True]
    for key in out_a.keys():
        if key.startswith("loss_"):
            torch.testing.assert_close(out_b.get(key), out_a.get(key), atol=1e-5, rtol=0)
    for a, b in zip(g_b, g_a):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for key in m_a:
        assert m_b[key] == pytest.approx(m_a[key], abs=1e-5), key


def test_the_behaviour_pass_scores_the_assistant_tokens_alike(tiny_model):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    full = compute_behaviour_log_probs(actor, grouped_records(), chunk_size=3)
    shared = compute_behaviour_log_probs(actor, grouped_records(), chunk_size=3, shared_prefix=True)
    for i in range(8):
        mask = full[i].get(("masks", "all_assistant_mask"))
        assert torch.equal(shared[i].get(("tokens", "full")), full[i].get(("tokens", "full")))
        a, b = full[i].get(("log_probs", "full")), shared[i].get(("log_probs", "full"))
        torch.testing.assert_close(b[mask], a[mask], atol=1e-5, rtol=0)
        assert torch.isnan(b[~mask][1:]).all()  # the rest is not scored (position 0 keeps torchrl's 0)


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_a_whole_update_ends_with_the_same_weights(tiny_model_dir, name):
    from helpers import load_tiny

    weights = {}
    for shared in (False, True):
        model, tok = load_tiny(tiny_model_dir)
        actor = make_logprob_policy(model, tok)
        obj, cfg = _objective(name, model, tok, actor, shared_prefix=shared)
        assert scores_shared_prefixes(obj.loss_module) is shared
        optimizer = torch.optim.SGD(obj.optimizer_param_groups(1e-2), lr=1e-2)
        torch.manual_seed(3)
        recs = obj.shape_rewards(grouped_records())
        plan = minibatch_plan(recs.get("group_id"), cfg)
        batch, _ = training_batch(recs, obj, actor, skip_behaviour=plan[0][0])
        stats = optimize(batch, obj, optimizer, cfg, plan=plan, on_policy_first=True)
        assert stats["optimizer_steps"] == 2
        weights[shared] = [p.detach().clone() for p in model.parameters()]
    for a, b in zip(weights[True], weights[False]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_the_config_switch(tiny_model):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    assert _objective("grpo", model, tok, actor)[0].loss_module.shared_prefix is True
    assert _objective("gspo", model, tok, actor, shared_prefix=False)[0].loss_module.shared_prefix is False
    with pytest.raises(ValueError, match="algo.shared_prefix must be true or false"):
        _objective("grpo", model, tok, actor, shared_prefix="yes")
    ppo = _objective("ppo", model, tok, actor, critic="head")[0].loss_module
    assert not scores_shared_prefixes(ppo)  # the value head reads every position: the full pass
