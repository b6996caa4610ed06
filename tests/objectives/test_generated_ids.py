"""The update trains the token ids the policy read and sampled (``algo.train_on=generated``).

Against the previous path (the decoded conversation re-tokenised, ``train_on=retokenized``): the same
tokens, masks, losses and gradients (within 1e-5) when the reply's text round-trips; where it does
not, the generated path trains exactly the sampled ids, and its behaviour log-probs are those of a
direct forward over them."""

from __future__ import annotations

import pytest
import torch
from helpers import algo_objective, grads
from tensordict import TensorDict, lazy_stack
from torchrl.data.llm import History

from ragen_torchrl import keys as K
from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.models.loading import wrapper_chat_template
from ragen_torchrl.objectives import ALGORITHMS, build_algorithm
from ragen_torchrl.objectives.logprobs import (
    attach_training_data,
    compute_behaviour_log_probs,
    make_logprob_policy,
    tokenize_conversations,
)

REPLIES = ["<think>down</think><answer>Down</answer>", "<answer>Left</answer>", "<answer>Right</answer>"]


def scripted_policy(tok, replies=REPLIES, eos: bool = True):
    """Answers with fixed texts and reports its ids as torchrl's wrapper does (prompt via the chat template)."""
    template = wrapper_chat_template(tok)
    calls = [0]

    def policy(td):
        td = lazy_stack(list(td.unbind(0)))  # rows of their own: ragged ids are set as lists
        history = td.get(K.HISTORY_PROMPT)
        conversations = [[m for m in row if m["role"] != "<none>"] for row in history.tolist(tolist_first=True)]
        prompt_ids, response_ids, full = [], [], []
        for k, (conv, h) in enumerate(zip(conversations, history.unbind(0))):
            text = replies[(calls[0] + k) % len(replies)]
            ids = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=True, chat_template=template)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            prompt_ids.append(torch.tensor(ids))
            reply = tok(text + (tok.eos_token if eos else ""), add_special_tokens=False)["input_ids"]
            response_ids.append(torch.tensor(reply))
            full.append(h.extend(History(role="assistant", content=text, batch_size=(1,)), inplace=False, dim=-1))
        calls[0] += 1
        td.set(K.HISTORY_FULL, lazy_stack(full))
        for row, p, r in zip(td.tensordicts, prompt_ids, response_ids):
            row.set(K.TOKENS_PROMPT, p)
            row.set(K.TOKENS_RESPONSE, r)
        return td

    return policy


def scripted_records(tok, eos: bool = True, returns=(1.0, 0.0, 0.5, -0.5)):
    env = make_env("frozenlake", num_envs=4, max_turn=2)
    recs = collect_rollouts(env, scripted_policy(tok, eos=eos), [3, 5], 2)
    recs.set(K.EPISODE_RETURN, torch.tensor(returns))
    return recs


def test_records_hold_the_last_turns_ids(tiny_model):
    # the history rollout: each turn's prompt is the conversation rendered again
    model, tok = tiny_model
    env = make_env("frozenlake", num_envs=4, max_turn=2)
    policy = make_generation_policy(model, tok, max_new_tokens=6, temperature=1.0, trajectory="history")
    torch.manual_seed(0)
    recs = collect_rollouts(env, policy, [3, 5], 2)
    actor = make_logprob_policy(model, tok)
    rows = tokenize_conversations(actor, recs)
    for i in range(4):
        prompt, reply = recs[i].get(K.TOKENS_LAST_PROMPT), recs[i].get(K.TOKENS_LAST_RESPONSE)
        assert 1 <= reply.numel() <= 6
        tokens, mask = rows[i].get(K.TOKENS_FULL), rows[i].get(K.MASKS_ASSISTANT)
        assert torch.equal(tokens, torch.cat([prompt, reply]))
        assert mask[-reply.numel() :].all()
        # the prompt is the chat template's rendering of the conversation before the last reply
        history = recs[i].get(K.HISTORY_FULL)
        conv = [m for m in history.tolist() if m["role"] != "<none>"][:-1]
        text = tok.apply_chat_template(
            conv, add_generation_prompt=True, tokenize=False, chat_template=actor.chat_template
        )
        assert tok.decode(prompt) == text
        # earlier replies inside the prompt are trained as the template marks them
        assert (
            int(mask[: prompt.numel()].sum()) > 0
            if int(recs[i].get(K.NUM_TURNS)) > 1
            else not mask[: prompt.numel()].any()
        )


def test_round_tripping_replies_give_the_retokenized_rows(tiny_model):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    recs = scripted_records(tok)
    assert int(recs.get(K.NUM_TURNS).max()) == 2  # multi-turn rows: earlier replies inside the prompt
    gen = tokenize_conversations(actor, recs)
    old = tokenize_conversations(actor, recs, train_on="retokenized")
    for i in range(4):
        a, b = gen[i].get(K.TOKENS_FULL), old[i].get(K.TOKENS_FULL)
        # the template closes the last turn with a newline after the end-of-turn token; it is not trained
        assert torch.equal(a, b[:-1]) and tok.decode(b[-1:]) == "\n"
        assert torch.equal(gen[i].get(K.MASKS_ASSISTANT), old[i].get(K.MASKS_ASSISTANT)[:-1])


@pytest.mark.parametrize("name", ALGORITHMS)
def test_round_tripping_replies_give_the_same_losses_and_gradients(tiny_model, name):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    runs = {}
    for train_on in ("retokenized", "generated"):
        obj = algo_objective(name, model, tok, actor, 4, train_on=train_on)[0]
        assert obj.train_on == train_on
        recs = obj.advantage(obj.shape_rewards(scripted_records(tok)))
        beh = compute_behaviour_log_probs(actor, recs, train_on=obj.train_on)
        batch, _ = obj.prepare(attach_training_data(recs, beh))
        model.zero_grad()
        out = obj.loss_module(batch)
        obj.total_loss(out).backward()
        runs[train_on] = (out, grads(model))
    (out_a, g_a), (out_b, g_b) = runs["retokenized"], runs["generated"]
    for key in out_a.keys():
        if key.startswith("loss_"):
            torch.testing.assert_close(out_b.get(key), out_a.get(key), atol=1e-5, rtol=0)
    for a, b in zip(g_b, g_a):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_replies_that_do_not_round_trip_are_trained_as_sampled(tiny_model):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    # byte-level ids that decode to U+FFFD: re-tokenising the text gives other (more) ids
    odd = [i for i in range(tok.vocab_size) if "\ufffd" in tok.decode([i])][:3]
    assert odd, "the tiny tokenizer has byte tokens that are not valid UTF-8 alone"
    env = make_env("frozenlake", num_envs=2, max_turn=1)

    def policy(td):
        out = scripted_policy(tok, replies=["x"])(td)
        for row in out.tensordicts:
            row.set(K.TOKENS_RESPONSE, torch.tensor(odd))
        text = tok.decode(odd)
        rows = [h[:-1].extend(History(role="assistant", content=text, batch_size=(1,)), inplace=False, dim=-1)
                for h in out.get(K.HISTORY_FULL).unbind(0)]  # fmt: skip
        out.set(K.HISTORY_FULL, lazy_stack(rows))
        return out

    recs = collect_rollouts(env, policy, [3], 2)
    gen = compute_behaviour_log_probs(actor, recs)
    old = tokenize_conversations(actor, recs, train_on="retokenized")
    for i in range(2):
        tokens, mask = gen[i].get(K.TOKENS_FULL), gen[i].get(K.MASKS_ASSISTANT)
        assert tokens[-3:].tolist() == odd and mask.sum() == 3  # no end-of-turn token was sampled: none trained
        assert not torch.equal(old[i].get(K.TOKENS_FULL)[: tokens.numel()], tokens)
        # the behaviour log-probs are those of the sampled ids after the prompt the policy read
        with torch.no_grad():
            logits = model(tokens.unsqueeze(0)).logits[0]
        direct = torch.log_softmax(logits[-4:-1], -1).gather(-1, tokens[-3:].unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(gen[i].get(K.LOG_PROBS_FULL)[-3:], direct, atol=1e-5, rtol=0)


def test_a_prompt_the_template_does_not_reproduce_falls_back_to_retokenizing(tiny_model):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    recs = scripted_records(tok)
    two = int(torch.nonzero(recs.get(K.NUM_TURNS) == 2)[0])
    tampered = recs[two].get(K.TOKENS_LAST_PROMPT).clone()
    tampered[-2] = (tampered[-2] + 1) % tok.vocab_size
    recs.tensordicts[two].set(K.TOKENS_LAST_PROMPT, tampered)
    gen = tokenize_conversations(actor, recs)
    old = tokenize_conversations(actor, recs, train_on="retokenized")
    assert torch.equal(gen[two].get(K.TOKENS_FULL), old[two].get(K.TOKENS_FULL))


def test_records_without_ids_and_bad_values():
    from helpers import records

    class Actor:  # never reached: the records carry no ids, and the choice is checked first
        pass

    with pytest.raises(ValueError, match="train_on must be one of generated, retokenized"):
        tokenize_conversations(Actor(), records(), train_on="decoded")
    with pytest.raises(ValueError, match="algo.train_on must be one of"):
        build_algorithm({"name": "grpo", "train_on": "text"}, actor=None, model=None)
    td = TensorDict({}, batch_size=[2])
    assert K.TOKENS_LAST_PROMPT not in td.keys(True)
