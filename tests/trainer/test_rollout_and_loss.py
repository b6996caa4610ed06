"""Multi-turn rollouts (``collect_rollouts``) and the GRPO loss wiring on their records.

A randomly initialised tiny model never produces a valid ``<answer>``, so every turn of
every episode costs the format penalty (-0.1) and episodes run to ``max_turn``.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.splits import VAL_SEED_OFFSET, train_level_seeds, val_level_seeds
from ragen_torchrl.models.loading import load_pretrained
from ragen_torchrl.models.tiny import EOT_TOKEN
from ragen_torchrl.objectives import build_algorithm
from ragen_torchrl.objectives.logprobs import (
    attach_training_data,
    compute_behaviour_log_probs,
    make_logprob_policy,
    training_view,
)
from ragen_torchrl.transforms.advantage import GroupAdvantage

P, G = 2, 3
MAX_NEW_TOKENS = 8
FORMAT_PENALTY = -0.1


@pytest.fixture(scope="module")
def model_tok(tiny_model_dir):
    model, tok = load_pretrained(tiny_model_dir, device="cpu", dtype="float32")
    return model, tok


@pytest.fixture(scope="module")
def env():
    return make_env("frozenlake", num_envs=P * G)


@pytest.fixture(scope="module")
def seeds():
    return train_level_seeds(seed=0, iteration=0, num_groups=P)


@pytest.fixture(scope="module")
def records(model_tok, env, seeds):
    model, tok = model_tok
    policy = make_generation_policy(model, tok, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0)
    torch.manual_seed(0)
    return collect_rollouts(env, policy, seeds, G)


@pytest.fixture(autouse=True)
def _clean_grads(model_tok):
    model, _ = model_tok
    model.zero_grad(set_to_none=True)
    yield
    model.zero_grad(set_to_none=True)


def assistant_contents(history) -> list[str]:
    return [c for r, c in zip(history.role, history.content) if r == "assistant"]


# --------------------------------------------------------------------------- level seeds
def test_train_level_seeds_are_deterministic_and_below_the_val_range():
    a = train_level_seeds(seed=3, iteration=7, num_groups=16)
    assert a == train_level_seeds(seed=3, iteration=7, num_groups=16)
    assert len(a) == 16
    assert a != train_level_seeds(seed=3, iteration=8, num_groups=16)
    assert a != train_level_seeds(seed=4, iteration=7, num_groups=16)
    many = [s for it in range(50) for s in train_level_seeds(0, it, 32)]
    assert all(isinstance(s, int) and 0 <= s < 2**30 for s in many)
    assert VAL_SEED_OFFSET == 2**30


def test_val_level_seeds_are_fixed_and_disjoint_from_training():
    val = val_level_seeds(8)
    assert val == val_level_seeds(8) == list(range(2**30, 2**30 + 8))
    train = {s for it in range(50) for s in train_level_seeds(0, it, 32)}
    assert not train & set(val)
    assert all(s >= 2**30 for s in val)


def test_make_generation_policy_rejects_bad_settings(model_tok):
    model, tok = model_tok
    with pytest.raises(ValueError, match="max_new_tokens"):
        make_generation_policy(model, tok, max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        make_generation_policy(model, tok, temperature=-0.5)


def test_collect_rollouts_rejects_empty_input(model_tok, env):
    model, tok = model_tok
    policy = make_generation_policy(model, tok, max_new_tokens=2)
    with pytest.raises(ValueError):
        collect_rollouts(env, policy, [], G)
    with pytest.raises(ValueError):
        collect_rollouts(env, policy, [1, 2], 0)


# --------------------------------------------------------------------------- rollout records
def test_one_row_per_trajectory_grouped_by_level(records, seeds):
    assert records.batch_size == (P * G,)
    groups = records.get("group_id")
    assert groups.tolist() == [0, 0, 0, 1, 1, 1]
    assert torch.bincount(groups).tolist() == [G] * P
    levels = records.get("level_seed")
    for g in range(P):
        rows = levels[groups == g]
        assert (rows == seeds[g]).all()
    assert len(set(levels.tolist())) == P
    for key in ("episode_return", "success", "num_turns", "num_tokens", "format_valid", "truncated_by_t3"):
        assert records.get(key).shape == (P * G,), key


def test_episode_return_follows_the_env_rules_for_invalid_replies(records, env):
    # a random model never writes a parseable <answer>: every turn is invalid
    assert (records.get("format_valid") == 0).all()
    assert not records.get("success").any()
    assert not records.get("truncated_by_t3").any()
    turns = records.get("num_turns")
    assert ((turns >= 1) & (turns <= env.max_turn)).all()
    # invalid turns change nothing, so every episode runs out of turns
    assert (turns == env.max_turn).all()
    expected = FORMAT_PENALTY * turns.float()
    torch.testing.assert_close(records.get("episode_return"), expected, rtol=0, atol=1e-6)


def test_token_counts(records):
    tokens = records.get("num_tokens")
    turns = records.get("num_turns")
    assert (tokens > 0).all()
    assert (tokens <= MAX_NEW_TOKENS * turns).all()


def test_full_history_is_the_whole_conversation(records, env):
    hist = records.get(("history", "full"))
    first_users = []
    for i in range(records.batch_size[0]):
        h = hist[i]
        roles = list(h.role)
        contents = list(h.content)
        turns = int(records.get("num_turns")[i])
        assert roles[-1] == "assistant"
        assert roles == ["system", "user"] + ["assistant", "user"] * (turns - 1) + ["assistant"]
        assert contents[0] == env.system_prompt
        # every later observation starts with the invalid-reply feedback
        assert all(c.startswith("Invalid reply.") for r, c in zip(roles[3:], contents[3:]) if r == "user")
        first_users.append(contents[1])
    # all samples of a group start from the same level, different groups from different levels
    assert first_users[0] == first_users[1] == first_users[2]
    assert first_users[3] == first_users[4] == first_users[5]
    assert first_users[0] != first_users[3]


def test_rollouts_are_reproducible_and_group_offset(model_tok, env, seeds, records):
    model, tok = model_tok
    policy = make_generation_policy(model, tok, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0)
    torch.manual_seed(0)
    again = collect_rollouts(env, policy, seeds, G, group_offset=10)
    assert again.get("group_id").tolist() == [10, 10, 10, 11, 11, 11]
    # same torch seed, same sampling: the conversations are identical
    assert torch.equal(again.get("num_tokens"), records.get("num_tokens"))
    for i in range(P * G):
        assert list(again[i].get(("history", "full")).content) == list(records[i].get(("history", "full")).content)


def test_chunked_generation_keeps_rows_in_place(model_tok, env, seeds):
    model, tok = model_tok
    policy = make_generation_policy(model, tok, max_new_tokens=4, temperature=0.0)  # greedy
    torch.manual_seed(0)
    chunked = collect_rollouts(env, policy, seeds, G, chunk_size=4)  # 6 rows: chunks of 4 and 2
    whole = collect_rollouts(env, policy, seeds, G)
    assert chunked.get("group_id").tolist() == [0, 0, 0, 1, 1, 1]
    assert torch.equal(chunked.get("level_seed"), whole.get("level_seed"))
    # greedy replies depend only on the conversation, so chunking changes nothing
    for i in range(P * G):
        assert list(chunked[i].get(("history", "full")).content) == list(whole[i].get(("history", "full")).content)


# --------------------------------------------------------------------------- behaviour log-probs and loss
@pytest.fixture(scope="module")
def train_batch(model_tok, records):
    """Records with varied returns (so advantages are not all 0), advantage and behaviour data."""
    model, tok = model_tok
    batch = records.copy()
    batch.set("episode_return", torch.tensor([1.0, 0.0, 0.5, -0.5, 0.2, 0.9]))
    batch = GroupAdvantage()(batch)
    actor = make_logprob_policy(model, tok)
    behaviour = compute_behaviour_log_probs(actor, batch, chunk_size=4)  # 2 chunks: padding differs per chunk
    return actor, behaviour, attach_training_data(batch, behaviour)


def test_behaviour_tensors_are_unpadded_and_aligned(train_batch, model_tok):
    _, tok = model_tok
    _, behaviour, batch = train_batch
    assert behaviour.batch_size == (P * G,)
    for i in range(P * G):
        row = behaviour[i]
        tokens = row.get(("tokens", "full"))
        lps = row.get(("log_probs", "full"))
        amask = row.get(("masks", "all_assistant_mask"))
        attn = row.get(("masks", "all_attention_mask"))
        assert tokens.shape == lps.shape == amask.shape == attn.shape
        assert attn.all()  # padding removed
        assert (tokens != tok.pad_token_id).all()
        assert torch.isfinite(lps).all() and (lps <= 0).all()
        assert amask.dtype == torch.bool and lps.dtype == torch.float32
    # the training layout: the conversation is the prompt, behaviour data attached (left-padded)
    for i in range(P * G):
        row = batch[i]
        real = row.get(("masks", "all_attention_mask"))
        assert list(row.get(("history", "prompt")).content) == list(row.get(("history", "full")).content)
        assert torch.equal(row.get(("log_probs", "full"))[real], behaviour[i].get(("log_probs", "full")))
        assert row.get("advantage").shape == (1, 1)


def test_assistant_mask_covers_only_assistant_tokens(train_batch, model_tok, records):
    # train_on=generated with token-level rollouts (the default): each turn's reply ids as sampled,
    # one trained span per turn; an <|im_end|> the template appends after a budget-cut reply is not trained
    _, tok = model_tok
    _, behaviour, _ = train_batch
    for i in range(P * G):
        contents = assistant_contents(records[i].get(("history", "full")))
        last = records[i].get(("tokens", "last_response")).tolist()
        tokens = behaviour[i].get(("tokens", "full"))
        amask = behaviour[i].get(("masks", "all_assistant_mask"))
        assert torch.equal(tokens, records[i].get(("tokens", "trajectory")))
        assert torch.equal(amask, records[i].get(("masks", "trajectory_assistant")))
        assert tokens[-len(last) :].tolist() == last and amask[-len(last) :].all()
        starts = torch.nonzero(amask[1:] & ~amask[:-1]).reshape(-1) + 1
        ends = torch.nonzero(amask[:-1] & ~amask[1:]).reshape(-1) + 1
        assert starts.numel() == len(contents) == int(records[i].get("num_turns"))
        cut = sum(int(tokens[e - 1]) != tok.eos_token_id for e in ends.tolist())  # earlier replies the budget cut
        eot = tokens == tok.eos_token_id
        assert int((eot & ~amask).sum()) == 2 + (len(contents) - 1) + cut  # system + one per user message + cuts
        assert all(int(tokens[e]) == tok.eos_token_id for e in ends.tolist() if int(tokens[e - 1]) != tok.eos_token_id)


def test_retokenized_mask_covers_every_assistant_turn(model_tok, records):
    # train_on=retokenized (RAGEN's reference): every reply re-rendered by the template, <|im_end|> trained
    model, tok = model_tok
    behaviour = compute_behaviour_log_probs(make_logprob_policy(model, tok), records, train_on="retokenized")
    for i in range(P * G):
        contents = assistant_contents(records[i].get(("history", "full")))
        expected = []
        for c in contents:
            expected += tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        tokens = behaviour[i].get(("tokens", "full"))
        amask = behaviour[i].get(("masks", "all_assistant_mask"))
        assert tokens[amask].tolist() == expected
        eot = tokens == tok.eos_token_id
        assert int((eot & amask).sum()) == len(contents)
        assert int((eot & ~amask).sum()) == 2 + (len(contents) - 1)


def test_importance_ratio_is_one_before_any_update(train_batch, model_tok):
    model, _ = model_tok
    actor, _, batch = train_batch
    loss_module = build_algorithm({"name": "grpo", "entropy_coeff": 0.001}, actor, model).loss_module
    mb = batch[torch.tensor([0, 3, 1, 4])]
    out = loss_module(mb)
    assert abs(out.kl_approx.item()) < 1e-5
    assert out.clip_fraction.item() == 0.0
    assert out.ESS.item() == pytest.approx(1.0, abs=1e-4)
    # ratio 1: each sequence's token-mean gain is its advantage; prompt_mean averages them
    adv = mb.get("advantage").reshape(-1)
    assert out.loss_objective.item() == pytest.approx(-adv.mean().item(), abs=1e-5)
    assert out.entropy.item() > 0

    loss = out.loss_objective.sum() + out.loss_entropy.sum()
    assert torch.isfinite(loss)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    nonzero = [n for n, g in grads.items() if g.abs().sum() > 0]
    assert any("embed_tokens" in n for n in nonzero)
    assert any("layers.0.self_attn" in n for n in nonzero)
    assert any("layers.0.mlp" in n for n in nonzero)


def test_ratio_moves_after_an_update(model_tok, train_batch):
    """The check above is not vacuous: after one optimizer step the ratio departs from 1."""
    model, _ = model_tok
    actor, _, batch = train_batch
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        loss_module = build_algorithm({"name": "grpo", "entropy_coeff": 0.0}, actor, model).loss_module
        opt = torch.optim.SGD(model.parameters(), lr=5.0)
        out = loss_module(batch)
        out.loss_objective.sum().backward()
        opt.step()
        after = loss_module(batch)
        assert abs(after.kl_approx.item()) > 1e-4
        assert after.clip_fraction.item() > 0
    finally:
        model.load_state_dict(state)


# --------------------------------------------------------------------------- scripted replies
SCRIPTED = [
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "P___\n_O__\n___G\nPlayer (0,0) Goal (2,3)"},
        {"role": "assistant", "content": "<think>the goal is right and down</think><answer>Right || Down</answer>"},
    ],
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "obs"},
        {"role": "assistant", "content": "<think>x</think><answer>Up</answer>"},
        {"role": "user", "content": "Invalid reply.\nobs two"},
        {"role": "assistant", "content": "<answer>Left</answer>"},
    ],
]


def test_behaviour_log_probs_match_an_independent_forward(model_tok):
    model, tok = model_tok
    history = History.from_chats(SCRIPTED)
    recs = TensorDict(
        group_id=torch.tensor([0, 0]), episode_return=torch.tensor([1.0, 0.0]), batch_size=[2]
    ).to_lazystack(0)
    recs.set(("history", "full"), history)
    assert list(training_view(recs)[1].get(("history", "prompt")).role)[-1] == "assistant"
    behaviour = compute_behaviour_log_probs(make_logprob_policy(model, tok), recs)
    for i, chat in enumerate(SCRIPTED):
        ref = tok.apply_chat_template(chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        ids = torch.tensor(ref["input_ids"])
        mask = torch.tensor(ref["assistant_masks"], dtype=torch.bool)
        tokens = behaviour[i].get(("tokens", "full"))
        lps = behaviour[i].get(("log_probs", "full"))
        amask = behaviour[i].get(("masks", "all_assistant_mask"))
        assert torch.equal(tokens, ids)
        assert torch.equal(amask, mask)
        assert tok.decode(ids[mask]) == "".join(m["content"] + EOT_TOKEN for m in chat if m["role"] == "assistant")
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0].float()
        # log p(token t | tokens < t) sits at position t
        direct = torch.log_softmax(logits[:-1], dim=-1).gather(-1, ids[1:, None]).squeeze(-1)
        assert not mask[0]
        torch.testing.assert_close(lps[1:][mask[1:]], direct[mask[1:]], rtol=0, atol=1e-5)
