"""Token-level multi-turn trajectories (``rollout.trajectory=tokens``, the default).

Each row is one token sequence: the first prompt, every reply's ids as sampled, every env turn
tokenised once. Checked against the history rollout (the conversation rendered and tokenised
again each turn): the same tokens, masks, losses and gradients where the replies' text
round-trips; where it does not, every trained token of every turn was sampled, and the ids the
policy read at each turn are the trajectory's prefix."""

from __future__ import annotations

import pytest
import torch
from helpers import RecordingPolicy, algo_objective, grads
from tensordict import lazy_stack
from torchrl.data.llm import History

from ragen_torchrl import keys as K
from ragen_torchrl.collectors.grouped import PolicyContractError, collect_rollouts, make_generation_policy
from ragen_torchrl.collectors.rollout_policy import build_rollout_policy
from ragen_torchrl.collectors.token_trajectory import TokenTrajectories, env_turn_text
from ragen_torchrl.envs import make_env
from ragen_torchrl.models.loading import wrapper_chat_template
from ragen_torchrl.models.priming import primed_chat_template
from ragen_torchrl.objectives.logprobs import (
    attach_training_data,
    compute_behaviour_log_probs,
    make_logprob_policy,
    tokenize_conversations,
)

#: replies whose text round-trips through decode, parse, render and tokenise
REPLIES = {
    "frozenlake": ["<think>down</think><answer>Down</answer>", "<answer>Left</answer>", "<answer>Right</answer>"],
    "sokoban": ["<think>push</think><answer>Up</answer>", "<answer>Left</answer>", "<answer>Down</answer>"],
}


def _reply_ids(tok, text: str, eos: bool) -> torch.Tensor:
    return torch.tensor(tok(text + (tok.eos_token if eos else ""), add_special_tokens=False)["input_ids"])


def token_policy(tok, replies, prime: str = "", eos: bool = True):
    """A scripted token-prompt policy: reply ``k`` of each call is ``replies[(call + k) % len]``'s ids."""
    calls = [0]

    def policy(td):
        for k, row in enumerate(td.tensordicts):
            assert row.get(K.TOKENS_PROMPT).dtype == torch.long
            reply = replies[(calls[0] + k) % len(replies)]
            row.set(K.TOKENS_RESPONSE, reply if isinstance(reply, torch.Tensor) else _reply_ids(tok, reply, eos))
        calls[0] += 1
        return td

    policy.input_mode, policy.tokenizer, policy.reply_prime = "tokens", tok, prime
    return policy


def history_policy(tok, replies, prime: str = "", eos: bool = True):
    """The same replies through the history contract, reporting its prompt ids as torchrl's wrapper does."""
    template = primed_chat_template(wrapper_chat_template(tok), prime)
    calls = [0]

    def policy(td):
        td = lazy_stack(list(td.unbind(0)))
        history = td.get(K.HISTORY_PROMPT)
        convs = [[m for m in row if m["role"] != "<none>"] for row in history.tolist(tolist_first=True)]
        texts = tok.apply_chat_template(convs, add_generation_prompt=True, tokenize=False, chat_template=template)
        full = []
        for k, (row, h, text) in enumerate(zip(td.tensordicts, history.unbind(0), texts)):
            reply = replies[(calls[0] + k) % len(replies)]
            row.set(K.TOKENS_PROMPT, torch.tensor(tok(text, add_special_tokens=False)["input_ids"]))
            row.set(K.TOKENS_RESPONSE, _reply_ids(tok, reply, eos))
            msg = History(role="assistant", content=prime + reply, batch_size=(1,))
            full.append(h.extend(msg, inplace=False, dim=-1))
        calls[0] += 1
        td.set(K.HISTORY_FULL, lazy_stack(full))
        return td

    return policy


def both_ways(tok, env_name: str, prime: str, max_turn: int = 3, returns=(1.0, 0.0, 0.5, -0.5)):
    out = {}
    for name, make in (("tokens", token_policy), ("history", history_policy)):
        env = make_env(env_name, num_envs=4, max_turn=max_turn)
        recs = collect_rollouts(env, make(tok, REPLIES[env_name], prime), [3, 5], 2)
        recs.set(K.EPISODE_RETURN, torch.tensor(returns))
        out[name] = recs
    return out["tokens"], out["history"]


@pytest.mark.parametrize("env_name", ["frozenlake", "sokoban"])
@pytest.mark.parametrize("prime", ["", "<think>"], ids=["plain", "primed"])
def test_round_tripping_replies_give_todays_tokens_and_masks(tiny_model, env_name, prime):
    model, tok = tiny_model
    tokens, history = both_ways(tok, env_name, prime)
    assert int(tokens.get(K.NUM_TURNS).max()) >= 2  # multi-turn rows: earlier replies inside the trajectory
    assert tokens.get(K.TRAJECTORY_REFITS).tolist() == [0, 0, 0, 0]
    actor = make_logprob_policy(model, tok, reply_prime=prime)
    new, old = tokenize_conversations(actor, tokens), tokenize_conversations(actor, history)
    retok = tokenize_conversations(actor, history, train_on="retokenized")
    for i in range(4):
        assert torch.equal(new[i].get(K.TOKENS_FULL), old[i].get(K.TOKENS_FULL))
        assert torch.equal(new[i].get(K.MASKS_ASSISTANT), old[i].get(K.MASKS_ASSISTANT))
        # and the whole conversation re-rendered (it closes the last turn with an untrained newline)
        assert torch.equal(new[i].get(K.TOKENS_FULL), retok[i].get(K.TOKENS_FULL)[:-1])
        assert torch.equal(new[i].get(K.MASKS_ASSISTANT), retok[i].get(K.MASKS_ASSISTANT)[:-1])
        # the text views are the same: the env, MI and the logs see the same conversations
        assert tokens[i].get(K.HISTORY_FULL).content == history[i].get(K.HISTORY_FULL).content


def test_round_tripping_replies_give_the_same_grpo_losses_and_gradients(tiny_model):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok, reply_prime="<think>")
    runs = {}
    for name, recs in zip(("tokens", "history"), both_ways(tok, "frozenlake", "<think>")):
        obj = algo_objective("grpo", model, tok, actor, 4)[0]
        recs = obj.advantage(obj.shape_rewards(recs))
        batch, _ = obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs)))
        model.zero_grad()
        out = obj.loss_module(batch)
        obj.total_loss(out).backward()
        runs[name] = (out, grads(model))
    (out_t, g_t), (out_h, g_h) = runs["tokens"], runs["history"]
    losses = [k for k in out_h.keys() if k.startswith("loss_")]
    assert losses
    for key in losses:
        torch.testing.assert_close(out_t.get(key), out_h.get(key), atol=1e-5, rtol=0)
    assert any(float(g.abs().sum()) > 0 for g in g_t)
    for a, b in zip(g_t, g_h):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_replies_that_do_not_round_trip_are_trained_as_sampled_on_every_turn(tiny_model):
    model, tok = tiny_model
    # a budget-cut reply with leading-space tokens (the parser trims the space, so the text comes back as
    # other ids and with an end-of-turn token), and byte tokens that decode to U+FFFD alone
    cut = _reply_ids(tok, " Up Down", eos=False)
    odd = torch.tensor([i for i in range(tok.vocab_size) if "\ufffd" in tok.decode([i])][:3])
    assert cut[0] != _reply_ids(tok, "Up", eos=False)[0] and odd.numel() == 3
    replies = [cut, torch.cat([odd, torch.tensor([tok.eos_token_id])])]
    env = make_env("frozenlake", num_envs=2, max_turn=3)
    recs = collect_rollouts(env, token_policy(tok, replies), [3], 2)
    actor = make_logprob_policy(model, tok)
    rows = tokenize_conversations(actor, recs)
    history = tokenize_conversations(actor, recs, train_on="retokenized")
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    for i in range(2):
        ids, mask = rows[i].get(K.TOKENS_FULL), rows[i].get(K.MASKS_ASSISTANT)
        assert int(recs[i].get(K.NUM_TURNS)) == 3
        sampled = [replies[(turn + i) % 2] for turn in range(3)]
        assert torch.equal(ids[mask], torch.cat(sampled))  # every trained token was sampled, in order
        # each reply sits where it was sampled; after a cut one comes the template's end-of-turn, untrained
        spans = torch.nonzero(mask[1:] & ~mask[:-1]).reshape(-1) + 1
        assert spans.numel() == 3
        for start, reply in zip(spans.tolist(), sampled):
            assert torch.equal(ids[start : start + reply.numel()], reply)
            after = start + reply.numel()
            if after < ids.numel() and reply[-1] != eot:
                assert int(ids[after]) == eot and not mask[after]
        assert not torch.equal(history[i].get(K.TOKENS_FULL)[: ids.numel()], ids)  # re-rendering changes them


@pytest.mark.parametrize("env_name, prime", [("frozenlake", "<think>"), ("sokoban", "")])
def test_a_sampling_model_reads_and_trains_its_trajectory(tiny_model, env_name, prime):
    model, tok = tiny_model
    policy = make_generation_policy(model, tok, max_new_tokens=5, temperature=1.0, reply_prime=prime)
    assert policy.input_mode == "tokens"
    recording = RecordingPolicy(policy)  # what the policy read and sampled at each turn, per env row
    torch.manual_seed(0)
    recs = collect_rollouts(make_env(env_name, num_envs=4, max_turn=3), recording, [3, 5], 2)
    assert int(recs.get(K.NUM_TURNS).max()) >= 2
    for i in range(4):
        ids, mask = recs[i].get(K.TOKENS_TRAJECTORY), recs[i].get(K.MASKS_TRAJECTORY)
        turns = recording.seen[i]
        assert len(turns) == int(recs[i].get(K.NUM_TURNS))
        for prompt, reply in turns:  # each turn read the trajectory so far, and its reply follows it
            assert torch.equal(ids[: prompt.numel()], prompt)
            assert torch.equal(ids[prompt.numel() : prompt.numel() + reply.numel()], reply)
            assert mask[prompt.numel() : prompt.numel() + reply.numel()].all()
        assert torch.equal(ids[mask], torch.cat([r for _, r in turns]))
        assert ids.numel() == turns[-1][0].numel() + turns[-1][1].numel()
        if prime:  # the prime ends every prompt; never trained
            assert all(tok.decode(p[-1:]) == prime for p, _ in turns)


def test_a_template_that_rewrites_earlier_messages_is_tokenised_again(tiny_model):
    _, tok = tiny_model
    # earlier assistant messages render as "[old]": the conversation before a turn is no prefix of the next
    template = wrapper_chat_template(tok).replace(
        "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}",
        "{% generation %}{{ (message['content'] if loop.last else '[old]') + '<|im_end|>' }}{% endgeneration %}",
    )
    assert template != wrapper_chat_template(tok)
    traj = TokenTrajectories(tok, template, num_rows=1)
    user = [{"role": "user", "content": "go"}]
    traj.start([0], [user])
    traj.add_replies([0], [_reply_ids(tok, "Left", eos=True)])
    before = [*user, {"role": "assistant", "content": "Left"}]
    after = [*before, {"role": "user", "content": "again"}]
    traj.add_env_turns([0], [before], [after])
    ids, mask = traj.trajectory(0)
    assert traj.refits.tolist() == [1]
    text = tok.apply_chat_template(after, tokenize=False, add_generation_prompt=True, chat_template=template)
    assert tok.decode(ids) == text and "[old]" in text
    # the rewritten reply was never sampled as "[old]": nothing of it is trained
    assert not mask.any()


def test_env_turn_text_by_hand():
    chatml = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    before = chatml + "<think>a</think>go<|im_end|>\n"
    after = before + "<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n<think>"
    turn = "<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n<think>"
    assert env_turn_text(chatml + "<think>", before, after, "<think>a</think>go", "<think>") == ("<|im_end|>\n", turn)
    # the reply's text also occurs earlier in the conversation: the one after the prompt is the reply
    assert env_turn_text(chatml, chatml + "hi<|im_end|>\n", chatml + "hi<|im_end|>\nX", "hi") == ("<|im_end|>\n", "X")
    assert env_turn_text(chatml, chatml + "go<|im_end|>\n", chatml + "GO<|im_end|>\nX", "go") is None


def test_the_switch_and_its_errors(tiny_model):
    model, tok = tiny_model
    assert make_generation_policy(model, tok).input_mode == "tokens"  # the default
    assert make_generation_policy(model, tok, trajectory="history").input_mode == "history"
    assert build_rollout_policy("hf", model, tok, max_new_tokens=4, temperature=1.0)[0].input_mode == "tokens"
    hist, _ = build_rollout_policy("hf", model, tok, max_new_tokens=4, temperature=1.0, trajectory="history")
    assert hist.input_mode == "history"
    with pytest.raises(ValueError, match="rollout.trajectory must be one of tokens, history, got 'text'"):
        make_generation_policy(model, tok, trajectory="text")
    with pytest.raises(ValueError, match="rollout.trajectory must be one of tokens, history, got 'text'"):
        build_rollout_policy("vllm", model, tok, max_new_tokens=4, temperature=1.0, trajectory="text")

    def silent(td):  # a token-prompt policy that writes no reply ids
        return td

    silent.input_mode, silent.tokenizer = "tokens", tok
    with pytest.raises(PolicyContractError, match=r"lacks \('tokens', 'response'\)"):
        collect_rollouts(make_env("frozenlake", num_envs=1), silent, [3], 1)


def test_a_bad_trajectory_value_is_a_config_error(tmp_path):
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config import validate_config
    from ragen_torchrl.trainer.config_checks import ConfigError
    from ragen_torchrl.trainer.config_paths import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"model.cache_dir={tmp_path}", "rollout.trajectory=text"])
        ok = compose("config", overrides=[f"model.cache_dir={tmp_path}", "rollout.trajectory=history"])
    with pytest.raises(ConfigError, match="rollout.trajectory"):
        validate_config(cfg)
    validate_config(ok)
    assert ok.rollout.trajectory == "history"


def test_the_token_policy_also_answers_a_history_prompt(tiny_model):
    # called outside collect_rollouts on a conversation: the same reply as the history-mode policy
    model, tok = tiny_model
    env = make_env("frozenlake", num_envs=2)
    td = env.reset()
    outs = [make_generation_policy(model, tok, max_new_tokens=6, temperature=0, trajectory=m)(td.clone())
            for m in ("tokens", "history")]  # fmt: skip
    assert [h.content for h in outs[0][K.HISTORY_FULL].unbind(0)] == [
        h.content for h in outs[1][K.HISTORY_FULL].unbind(0)
    ]
    for a, b in zip(outs[0].get(K.TOKENS_RESPONSE, as_list=True), outs[1].get(K.TOKENS_RESPONSE, as_list=True)):
        assert torch.equal(a, b)
