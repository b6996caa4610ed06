"""The dense training batch gives the losses, gradients and mini-batch plan of the ragged per-row batch."""

from __future__ import annotations

import pytest
import torch
from helpers import algo_objective, records
from tensordict import lazy_stack

from ragen_torchrl.data.dense import dense_rows, trim_padding, unpad_rows
from ragen_torchrl.data.groups import Groups
from ragen_torchrl.keys import LOG_PROBS_FULL, MASKS_ASSISTANT, MASKS_ATTENTION, TOKENS_FULL
from ragen_torchrl.objectives import ALGORITHMS
from ragen_torchrl.objectives.logprobs import (
    attach_training_data,
    compute_behaviour_log_probs,
    make_logprob_policy,
    training_view,
)
from ragen_torchrl.trainer.update import minibatch_plan

PATHS = {"shared_prefix": (True, True), "compact": (True, False), "full_logits": (False, False)}


def _ragged(recs, behaviour):
    """The per-row layout the losses also accept: each row's unpadded tensors (a lazy stack)."""
    return lazy_stack([row.update(beh) for row, beh in zip(training_view(recs).unbind(0), behaviour.unbind(0))])


def _params(obj):
    return [p for p in obj.trainable_parameters()]


def _loss_and_grads(obj, batch):
    params = _params(obj)
    for p in params:
        p.grad = None
    out = obj.loss_module(batch)
    obj.total_loss(out).backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]
    return out, grads


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("name", ALGORITHMS)
def test_losses_and_gradients_equal_the_ragged_batch(tiny_model, name, path):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    compact, shared = PATHS[path]
    obj, _ = algo_objective(name, model, tok, actor, 2, kl_coeff=0.01)
    obj.loss_module.compact_logits, obj.loss_module.shared_prefix = compact, shared
    recs = obj.advantage(obj.shape_rewards(records()))
    behaviour = compute_behaviour_log_probs(actor, recs, shared_prefix=compact and shared)
    for row in behaviour.unbind(0):  # a reference policy's log-probs (any values aligned with the tokens)
        row.set(("ref_log_probs", "full"), row.get(LOG_PROBS_FULL).nan_to_num(0.0) - 0.05)
    ragged, _ = obj.prepare(_ragged(recs, behaviour))
    dense, _ = obj.prepare(attach_training_data(recs, behaviour))
    assert dense.get(TOKENS_FULL).ndim == 2  # one padded [N, T] batch
    for rows in (torch.arange(4), torch.tensor([3, 0]), torch.tensor([1])):
        out_r, g_r = _loss_and_grads(obj, ragged[rows])
        out_d, g_d = _loss_and_grads(obj, dense[rows])
        for key in out_r.keys():
            if key.startswith("loss_"):
                torch.testing.assert_close(out_d.get(key), out_r.get(key), atol=1e-5, rtol=0)
        for a, b in zip(g_d, g_r):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_dense_rows_pad_on_the_left_and_round_trip(tiny_model):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    behaviour = compute_behaviour_log_probs(actor, records())
    batch = attach_training_data(records(), behaviour)
    lengths = [t.numel() for t in behaviour.get(TOKENS_FULL, as_list=True)]
    width = max(lengths)
    attention = batch.get(MASKS_ATTENTION)
    assert attention.shape == (4, width)
    for i, n in enumerate(lengths):
        assert attention[i].tolist() == [False] * (width - n) + [True] * n
        assert not batch.get(MASKS_ASSISTANT)[i, : width - n].any()
        assert torch.equal(batch.get(TOKENS_FULL)[i, width - n :], behaviour[i].get(TOKENS_FULL))
        assert batch.get(LOG_PROBS_FULL)[i, : width - n].eq(0).all()  # the losses' padding value
    # the per-row values came along; cutting the rows back gives the behaviour rows
    assert batch.get("group_id").tolist() == records().get("group_id").tolist()
    back = unpad_rows(batch)
    for a, b in zip(back.unbind(0), behaviour.unbind(0)):
        for key in (TOKENS_FULL, MASKS_ASSISTANT, MASKS_ATTENTION, LOG_PROBS_FULL):
            assert torch.equal(a.get(key), b.get(key)) or torch.allclose(a.get(key), b.get(key), equal_nan=True)
    # a selection keeps only the columns its rows use: the ragged batch's own padding
    short = int(torch.tensor(lengths).argmin())
    trimmed = trim_padding(batch[torch.tensor([short])])
    assert trimmed.get(TOKENS_FULL).shape == (1, lengths[short])
    assert trimmed.get("group_id").shape == (1,)  # one value per row is not a column


def test_dense_rows_needs_tokens():
    with pytest.raises(KeyError, match="tokens"):
        dense_rows(lazy_stack([records()[0].select("group_id")]), 0)


def _old_plan(group_ids, mini_batch_size, epochs):
    # the plan as drawn before Groups: torch.unique membership, one randperm of the groups per epoch
    ids = torch.as_tensor(group_ids).reshape(-1)
    uniq, inverse = torch.unique(ids, return_inverse=True)
    members = [torch.nonzero(inverse == g).reshape(-1) for g in range(uniq.numel())]
    plan = []
    for _ in range(epochs):
        order = torch.randperm(uniq.numel()).tolist()
        batches, current, size = [], [], 0
        for g in order:
            rows = members[g]
            if current and size + rows.numel() > mini_batch_size:
                batches.append(torch.cat(current))
                current, size = [], 0
            current.append(rows)
            size += rows.numel()
        if current:
            batches.append(torch.cat(current))
        plan.append(batches)
    return plan


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_minibatch_plan_is_unchanged(seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 9, (30,), generator=gen) * 3 + 100
    returns = torch.rand(30, generator=gen)
    algo = {"mini_batch_size": 7, "update_epochs": 3, "mini_batch_by": "group"}
    torch.manual_seed(seed)
    expected = _old_plan(ids, 7, 3)
    torch.manual_seed(seed)
    from_ids = minibatch_plan(ids, algo)
    torch.manual_seed(seed)
    from_groups = minibatch_plan(Groups.from_values(ids, returns), algo)
    for plan in (from_ids, from_groups):
        assert [[b.tolist() for b in epoch] for epoch in plan] == [[b.tolist() for b in e] for e in expected]
