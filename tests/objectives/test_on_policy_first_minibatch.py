"""The losses score the batch's stored token ids (no second chat template and tokenisation),
and the first mini-batch of an epoch-1 update takes its behaviour log-probs from the loss's own
forward (``current_as_behaviour``) instead of a separate pass. Every path is compared with the previous
one: tokens and masks equal, loss values and gradients within 1e-5 (CPU float32), the same weights after a
whole update, and the same trainer run (rollouts and weights) for the same seed."""

from __future__ import annotations

import pytest
import torch
from helpers import TINY_RUN, algo_objective, grads, records

from ragen_torchrl.objectives import ALGORITHMS
from ragen_torchrl.objectives.logprobs import (
    attach_training_data,
    compute_behaviour_log_probs,
    make_logprob_policy,
    token_dist,
    tokenize_conversations,
)
from ragen_torchrl.trainer.update import minibatch_plan, optimize, training_batch


def _objective(name, model, tok, actor):
    return algo_objective(name, model, tok, actor, 2)


def test_tokenising_alone_gives_the_wrappers_tokens_and_masks(tiny_model):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    scored = compute_behaviour_log_probs(actor, records())
    plain = tokenize_conversations(actor, records())
    for i in range(4):
        for key in (("tokens", "full"), ("masks", "all_assistant_mask"), ("masks", "all_attention_mask")):
            assert torch.equal(plain[i].get(key), scored[i].get(key)), (i, key)
        assert torch.isnan(plain[i].get(("log_probs", "full"))).all()
    # a partial skip: the skipped rows are tokenised only, the others scored as before, in row order
    mixed = compute_behaviour_log_probs(actor, records(), skip=torch.tensor([2, 0]))
    for i in range(4):
        assert torch.equal(mixed[i].get(("tokens", "full")), scored[i].get(("tokens", "full")))
        lp = mixed[i].get(("log_probs", "full"))
        if i in (0, 2):
            assert torch.isnan(lp).all()
        else:
            torch.testing.assert_close(lp, scored[i].get(("log_probs", "full")))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_loss_and_gradients_equal_the_separate_behaviour_pass(tiny_model, name):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    obj, _ = _objective(name, model, tok, actor)
    recs = obj.advantage(obj.shape_rewards(records()))
    old, _ = obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs)))
    new, _ = obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs, skip=torch.arange(4))))

    model.zero_grad()
    out_old = obj.loss_module(old)
    obj.total_loss(out_old).backward()
    g_old = grads(model)
    model.zero_grad()
    with obj.loss_module.current_as_behaviour():
        out_new = obj.loss_module(new)
    obj.total_loss(out_new).backward()
    g_new = grads(model)

    for key in out_old.keys():
        if key.startswith("loss_"):
            torch.testing.assert_close(out_new.get(key), out_old.get(key), atol=1e-5, rtol=0)
    for a, b in zip(g_new, g_old):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert out_new.clip_fraction.item() == 0.0
    assert not obj.loss_module.behaviour_from_current  # the flag is scoped to the block


def test_outside_the_block_the_skipped_rows_are_not_trusted(tiny_model):
    # NaN behaviour log-probs take their tokens out of the loss: nothing made up is trained on
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    obj, _ = _objective("grpo", model, tok, actor)
    recs = obj.advantage(records())
    batch = attach_training_data(recs, compute_behaviour_log_probs(actor, recs, skip=torch.arange(4)))
    out = obj.loss_module(batch)
    assert obj.metrics(out, batch)["assistant_tokens"] == 0


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_a_whole_update_ends_with_the_same_weights(tiny_model_dir, name):
    from helpers import load_tiny

    weights = {}
    for shortcut in (False, True):
        model, tok = load_tiny(tiny_model_dir)
        actor = make_logprob_policy(model, tok)
        obj, cfg = _objective(name, model, tok, actor)
        optimizer = torch.optim.AdamW(obj.optimizer_param_groups(1e-2), lr=1e-2)
        torch.manual_seed(3)
        recs = obj.shape_rewards(records())
        plan = minibatch_plan(recs.get("group_id"), cfg)
        assert len(plan[0]) == 2  # the shortcut covers one of two mini-batches
        skip = plan[0][0] if shortcut else None
        batch, _ = training_batch(recs, obj, actor, skip_behaviour=skip)
        stats = optimize(batch, obj, optimizer, cfg, plan=plan, on_policy_first=shortcut)
        assert stats["optimizer_steps"] == 2
        weights[shortcut] = [p.detach().clone() for p in model.parameters()]
    for a, b in zip(weights[True], weights[False]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_a_trainer_iteration_is_the_same_with_and_without_the_shortcut(ragen_cache_dir, tmp_path):
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config_paths import CONFIG_DIR
    from ragen_torchrl.trainer.loop import Trainer

    runs = {}
    for shortcut in (False, True):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(
                "config",
                overrides=[
                    "trainer=smoke",
                    "trainer.prompts_per_iter=4",
                    "algo.mini_batch_size=4",
                    "diagnostics.mi.enabled=false",
                    f"algo.on_policy_first_minibatch={str(shortcut).lower()}",
                    *TINY_RUN,
                    f"model.cache_dir={ragen_cache_dir}",
                ],
            )
        trainer = Trainer(cfg, run_dir=tmp_path / f"run_{shortcut}")
        stats = trainer.train_iteration()
        runs[shortcut] = (stats, [p.detach().clone() for p in trainer.model.parameters()])
    (s_old, w_old), (s_new, w_new) = runs[False], runs[True]
    assert s_new["train/optimizer_steps"] == s_old["train/optimizer_steps"] == 2
    for key in ("rollout/success", "rollout/tokens", "rollout/turns", "train/assistant_tokens"):
        assert s_new[key] == s_old[key], key  # same rollouts for the same seed
    assert s_new["train/loss"] == pytest.approx(s_old["train/loss"], abs=1e-5)
    for a, b in zip(w_new, w_old):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_scoring_stored_tokens_equals_the_wrappers_history_path(tiny_model, name):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    obj, _ = _objective(name, model, tok, actor)
    recs = obj.advantage(obj.shape_rewards(records()))
    batch, _ = obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs)))

    # the distributions: the stored-token path vs torchrl's history path
    mine = token_dist(actor, batch)
    theirs = actor._get_rlhf_dist(batch.copy())
    torch.testing.assert_close(mine.logits, theirs.logits, atol=1e-6, rtol=1e-6)
    assert torch.equal(mine.mask, theirs.mask)

    results = []
    for stored_tokens in (True, False):
        td = batch.copy()
        if not stored_tokens:  # without the masks the loss falls back to the wrapper's history path
            del td[("masks", "all_attention_mask")]
            assert ("masks", "all_attention_mask") not in td.keys(True)
        model.zero_grad()
        out = obj.loss_module(td)
        obj.total_loss(out).backward()
        results.append((out, grads(model)))
    (out_new, g_new), (out_old, g_old) = results
    for key in out_old.keys():
        if key.startswith("loss_"):
            torch.testing.assert_close(out_new.get(key), out_old.get(key), atol=1e-5, rtol=0)
    for a, b in zip(g_new, g_old):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_behaviour_log_probs_from_stored_tokens_equal_the_wrappers(tiny_model):
    from ragen_torchrl.objectives.logprobs import _wrapper_log_probs

    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    mine = compute_behaviour_log_probs(actor, records(), chunk_size=3)  # chunks of unequal sizes
    theirs = _wrapper_log_probs(actor, records(), chunk_size=32)
    for i in range(4):
        for key in (("tokens", "full"), ("masks", "all_assistant_mask"), ("masks", "all_attention_mask")):
            assert torch.equal(mine[i].get(key), theirs[i].get(key))
        torch.testing.assert_close(
            mine[i].get(("log_probs", "full")), theirs[i].get(("log_probs", "full")), atol=1e-5, rtol=0
        )


def test_a_batch_that_holds_tokens_is_scored_without_tokenising_again(tiny_model, monkeypatch):
    # the reference pass runs on the training batch: its stored tokens are scored as they are
    import ragen_torchrl.objectives.logprobs as logprobs

    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    first = compute_behaviour_log_probs(actor, records())
    batch = attach_training_data(records(), first)
    monkeypatch.setattr(logprobs, "tokenize_conversations", lambda *a: pytest.fail("tokenised again"))
    again = compute_behaviour_log_probs(actor, batch)
    for i in range(4):
        for key in first[i].keys(True, True):
            torch.testing.assert_close(again[i].get(key), first[i].get(key))
    torch.testing.assert_close(batch[0].get(("log_probs", "full")), first[0].get(("log_probs", "full")))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_logits_at_the_assistant_positions_only_give_the_same_loss_gradients_and_metrics(tiny_model, name):
    """compact_logits (the LM head only where a row has an assistant token) vs logits everywhere."""
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    obj, _ = _objective(name, model, tok, actor)
    recs = obj.advantage(obj.shape_rewards(records()))
    batch, _ = obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs)))
    runs = {}
    for compact in (False, True):
        obj.loss_module.compact_logits = compact
        model.zero_grad()
        out = obj.loss_module(batch)
        obj.total_loss(out).backward()
        runs[compact] = (out, grads(model), obj.metrics(out, batch))
    (out_full, g_full, m_full), (out_c, g_c, m_c) = runs[False], runs[True]
    for key in out_full.keys():
        if key.startswith("loss_"):
            torch.testing.assert_close(out_c.get(key), out_full.get(key), atol=1e-5, rtol=0)
    for a, b in zip(g_c, g_full):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert m_c.keys() == m_full.keys()
    for key in m_full:
        assert m_c[key] == pytest.approx(m_full[key], abs=1e-5), key


def test_compact_logits_run_the_lm_head_on_fewer_positions(tiny_model):
    from ragen_torchrl.objectives.token_distribution import masked_position_logits

    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    rows = tokenize_conversations(actor, records())
    pad = tok.pad_token_id
    tokens = rows.get(("tokens", "full"), as_padded_tensor=True, padding_side="left", padding_value=pad)
    attn = rows.get(("masks", "all_attention_mask"), as_padded_tensor=True, padding_side="left", padding_value=False)
    mask = rows.get(("masks", "all_assistant_mask"), as_padded_tensor=True, padding_side="left", padding_value=False)
    seen = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, a, out: seen.append(out.shape[:-1].numel()))
    try:
        compact = masked_position_logits(model, tokens, attn.long(), mask)
    finally:
        hook.remove()
    full = model(tokens, attn.long()).logits
    shifted = torch.cat([torch.zeros_like(full[:, :1]), full[:, :-1]], 1)
    torch.testing.assert_close(compact, shifted[mask.bool()], atol=1e-5, rtol=1e-5)
    # the LM head ran on the scored assistant positions only: no prompt-only position reached the vocabulary
    assert seen[0] == int(mask[:, 1:].sum()) < tokens.numel()
