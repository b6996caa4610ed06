"""Generation primed with ``<think>`` (``rollout.prime_think``, the reference's default).

The primed tag ends the prompt: the policy never samples it, so its ids are prompt ids, the
generated ids start after it, the env still parses a complete ``<think>…</think><answer>…</answer>``
reply, and no training row (generated or retokenised ids, SFT targets) trains it.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl import keys as K
from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.models.priming import THINK_PRIME, primed_chat_template, unmask_primed
from ragen_torchrl.objectives.logprobs import _prompt_assistant_masks, make_logprob_policy, tokenize_conversations
from ragen_torchrl.trainer.sft import tokenize_conversations as sft_tokenize


def _think_id(tok) -> int:
    ids = tok(THINK_PRIME, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1  # the tiny tokenizer has the tag as one token
    return ids[0]


def _generate(model, tok, prime: str):
    policy = make_generation_policy(model, tok, max_new_tokens=5, temperature=1.0, reply_prime=prime)
    chats = [[{"role": "system", "content": "rules"}, {"role": "user", "content": "go"}]] * 2
    td = TensorDict({"history": {"prompt": History.from_chats(chats)}}, batch_size=[2])
    torch.manual_seed(0)
    return policy(td)


@pytest.mark.parametrize("prime", [THINK_PRIME, ""])
def test_the_prompt_ends_with_think_only_when_primed(tiny_model, prime):
    model, tok = tiny_model
    out = _generate(model, tok, prime)
    think = _think_id(tok)
    for row in range(2):
        text_prompt = out["text", "prompt"][row]
        prompt_ids = out.get(K.TOKENS_PROMPT, as_list=True)[row]
        response_ids = out.get(K.TOKENS_RESPONSE, as_list=True)[row]
        assert text_prompt.endswith("<|im_start|>assistant\n" + prime)
        assert (int(prompt_ids[-1]) == think) == bool(prime)
        # the generated ids follow the prime: the prime is not among them
        assert 1 <= response_ids.numel() <= 5
        # the assistant message the env parses starts with the primed tag, then the sampled text
        content = out["history", "full"][row, -1].content
        sampled = tok.decode(response_ids.tolist(), skip_special_tokens=True)
        assert content == (prime + sampled).strip()


def test_a_primed_reply_parses_as_a_complete_reply():
    from ragen_torchrl.envs.parsing import parse_response

    # what the env reads: the tag from the prompt + what the model wrote after it
    r = parse_response(THINK_PRIME + "go down</think><answer>Down</answer>", ("Down", "Up"))
    assert r.num_invalid == 0 and r.actions == ["Down"]


@pytest.mark.parametrize("trajectory", ["tokens", "history"])
@pytest.mark.parametrize("train_on", ["generated", "retokenized"])
def test_training_rows_do_not_train_the_primed_tag(tiny_model, train_on, trajectory):
    model, tok = tiny_model
    think = _think_id(tok)
    env = make_env("frozenlake", num_envs=4, max_turn=2)
    policy = make_generation_policy(
        model, tok, max_new_tokens=6, temperature=1.0, reply_prime=THINK_PRIME, trajectory=trajectory
    )
    torch.manual_seed(0)
    recs = collect_rollouts(env, policy, [3, 5], 2)
    actor = make_logprob_policy(model, tok, reply_prime=THINK_PRIME)
    rows = tokenize_conversations(actor, recs, train_on=train_on)
    for i in range(4):
        tokens, mask = rows[i].get(K.TOKENS_FULL), rows[i].get(K.MASKS_ASSISTANT)
        turns = int(recs[i].get(K.NUM_TURNS))
        # every reply opens with the primed tag (a prompt token) and none of them is trained
        starts = [t for t in range(len(tokens)) if mask[t] and (t == 0 or not mask[t - 1])]
        assert len(starts) == turns
        assert all(int(tokens[t - 1]) == think for t in starts)
        if train_on == "generated":
            # the ids the policy read and sampled (no fallback to re-tokenising: the primed prompt is matched)
            prompt, reply = recs[i].get(K.TOKENS_LAST_PROMPT), recs[i].get(K.TOKENS_LAST_RESPONSE)
            assert torch.equal(tokens, torch.cat([prompt, reply]))
            if turns > 1 and trajectory == "history":  # the template's rendering of the last prompt
                all_prompts = list(recs.get(K.TOKENS_LAST_PROMPT, as_list=True))
                assert _prompt_assistant_masks(actor, recs, [i], all_prompts)[0] is not None
            assert torch.equal(tokens[-reply.numel() :], reply) and mask[-reply.numel() :].all()
            assert not mask[-reply.numel() - 1]  # the primed tag right before the sampled reply
    # the two modes agree on the row of a reply that round-trips: same ids, same mask
    generated = tokenize_conversations(actor, recs, train_on="generated")
    retokenized = tokenize_conversations(actor, recs, train_on="retokenized")
    same = [
        i
        for i in range(4)
        if torch.equal(
            generated[i].get(K.TOKENS_FULL),
            retokenized[i].get(K.TOKENS_FULL)[: generated[i].get(K.TOKENS_FULL).numel()],
        )
    ]
    for i in same:
        n = generated[i].get(K.TOKENS_FULL).numel()
        assert torch.equal(generated[i].get(K.MASKS_ASSISTANT), retokenized[i].get(K.MASKS_ASSISTANT)[:n])


def test_sft_targets_leave_the_primed_tag_out(tiny_model):
    _, tok = tiny_model
    think = _think_id(tok)
    demo = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "<think>left</think><answer>Left</answer>"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "<think>up</think><answer>Up</answer>"},
    ]
    ((ids, plain),) = sft_tokenize(tok, [demo])
    ((ids2, primed),) = sft_tokenize(tok, [demo], reply_prime=THINK_PRIME)
    assert torch.equal(ids, ids2)
    at_think = ids == think
    assert at_think.sum() == 2 and plain[at_think].all() and not primed[at_think].any()
    assert torch.equal(plain & ~at_think, primed)  # everything else is still a target


def test_unmask_primed_leaves_a_reply_without_the_tag_alone(tiny_model):
    _, tok = tiny_model
    ids = torch.tensor(tok("<answer>Up</answer><think>x", add_special_tokens=False)["input_ids"])
    mask = torch.ones(len(ids), dtype=torch.bool)
    assert torch.equal(unmask_primed(ids, mask, tok, THINK_PRIME), mask)


def test_the_primed_template_renders_training_conversations_unchanged(tiny_model):
    _, tok = tiny_model
    template = tok.chat_template
    primed = primed_chat_template(template, THINK_PRIME)
    conv = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "<think>a</think>"}]
    render = lambda t, gen: tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, chat_template=t)  # noqa: E731
    assert render(primed, False) == render(template, False)
    assert render(primed, True) == render(template, True) + THINK_PRIME
    with pytest.raises(ValueError, match="rollout.prime_think"):
        primed_chat_template(None, THINK_PRIME)
