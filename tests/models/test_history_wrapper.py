"""HistoryTransformersWrapper returns what torchrl's TransformersWrapper returns, for the same seed.

The subclass only does less Python work around ``generate`` (one chat-template pass, the
reply parsed from the text after the prompt); these tests compare it with the parent on the
same inputs and RNG state: every output key, the histories, whole rollouts and their
recorded entropies. An untrained tiny model samples junk replies (control tokens mid-reply,
no end-of-turn), which exercises the reply parser on ugly text.
"""

from __future__ import annotations

import pytest
import torch
from helpers import load_tiny
from tensordict import TensorDict
from torchrl.data.llm import History
from torchrl.modules.llm import TransformersWrapper
from torchrl.modules.llm.policies.common import _extract_responses_from_full_histories

from ragen_torchrl.collectors import (
    collect_rollouts,
    hf_generate_kwargs,
    make_generation_policy,
    wrapper_generate_kwargs,
)
from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.text_env import sample_seed
from ragen_torchrl.models.entropy_recorder import attach_entropy_recorder
from ragen_torchrl.models.history_wrapper import HistoryTransformersWrapper, parse_replies, reply_parser_name
from ragen_torchrl.models.loading import wrapper_chat_template


@pytest.fixture(scope="module")
def model_tok(tiny_model_dir):
    return load_tiny(tiny_model_dir)


def _torchrl_policy(model, tok, max_new_tokens):
    """What make_generation_policy built before: torchrl's own wrapper plus the entropy recorder."""
    policy = TransformersWrapper(
        model,
        tokenizer=tok,
        chat_template=wrapper_chat_template(tok),
        input_mode="history",
        generate=True,
        return_log_probs=False,
        pad_output=False,
        generate_kwargs=wrapper_generate_kwargs(hf_generate_kwargs(max_new_tokens, 1.0)),
    )
    # the same sampling settings (full distribution) as make_generation_policy sets on its wrapper
    policy.generate_kwargs.update(hf_generate_kwargs(max_new_tokens, 1.0))
    policy.entropy_recorder = attach_entropy_recorder(policy)
    return policy


def _assert_same_output(a, b):
    assert a.batch_size == b.batch_size
    keys = sorted(a.keys(True, True), key=str)
    assert keys == sorted(b.keys(True, True), key=str)
    for key in keys:
        va, vb = a.get(key, as_list=True), b.get(key, as_list=True)
        if isinstance(va, torch.Tensor):
            assert torch.equal(va, vb), key
            continue
        assert isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb), key
        for x, y in zip(va, vb):
            assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y, key
    for part in ("prompt", "response", "full"):
        assert a["history", part].tolist() == b["history", part].tolist(), part


def _reset(env, levels, group_size):
    n = len(levels) * group_size
    rows = [s for s in levels for _ in range(group_size)]
    return env.reset(
        TensorDict(
            level_seed=torch.tensor(rows),
            group_id=torch.arange(len(levels)).repeat_interleave(group_size),
            sample_seed=torch.tensor([sample_seed(s, i % group_size) for i, s in enumerate(rows)]),
            batch_size=[n],
        )
    )


def test_two_turns_give_the_parents_outputs(model_tok):
    model, tok = model_tok
    ours = make_generation_policy(model, tok, max_new_tokens=24, temperature=1.0, sampler="multinomial")
    assert isinstance(ours, HistoryTransformersWrapper)
    theirs = _torchrl_policy(model, tok, 24)
    env = make_env("frozenlake", num_envs=6)
    td = _reset(env, [3, 4], 3)
    for turn in range(2):
        torch.manual_seed(turn)
        out_theirs = theirs(td.clone())
        torch.manual_seed(turn)
        out_ours = ours(td.clone())
        _assert_same_output(out_theirs, out_ours)
        td = env.step(out_ours)["next"]


def test_same_rollouts_and_entropies_as_torchrl_wrapper(model_tok):
    model, tok = model_tok
    ours = make_generation_policy(
        model, tok, max_new_tokens=16, temperature=1.0, trajectory="history", sampler="multinomial"
    )
    theirs = _torchrl_policy(model, tok, 16)
    env = make_env("frozenlake", num_envs=8)
    records = []
    for policy in (theirs, ours):
        torch.manual_seed(0)
        records.append(collect_rollouts(env, policy, [5, 6], 4))
    a, b = records
    for key in ("num_tokens", "num_turns", "episode_return", "success", "format_valid", "group_id"):
        assert torch.equal(a[key], b[key]), key
    assert torch.allclose(a["entropy"], b["entropy"], atol=1e-5, rtol=0)
    assert a["history", "full"].tolist() == b["history", "full"].tolist()


def test_a_template_torchrl_detects_itself_goes_through_the_parent(model_tok, monkeypatch):
    # without chat_template / chat_template_name the parent's model-family detection decides
    model, tok = model_tok
    policy = HistoryTransformersWrapper(
        model, tokenizer=tok, input_mode="history", generate_kwargs={"max_new_tokens": 2}
    )
    calls = []
    parent = TransformersWrapper._from_transformers_generate_history
    monkeypatch.setattr(
        TransformersWrapper,
        "_from_transformers_generate_history",
        lambda self, *a: calls.append(1) or parent(self, *a),
    )
    td = TensorDict({"history": {"prompt": History.from_chats([[{"role": "user", "content": "hi"}]])}}, [1])
    policy(td)
    assert calls == [1]


PROMPT_TEXT = "<|im_start|>system\nrules<|im_end|>\n<|im_start|>user\nmove<|im_end|>\n<|im_start|>assistant\n"
REPLIES = [
    "<answer>Right</answer><|im_end|>",
    "  padded reply \n<|im_end|>",  # stripped by the parsers
    "no end of turn",  # truncated at max_new_tokens
    "",  # nothing generated
    "<|im_end|>",  # end of turn straight away
    "half<|im_start|>user\ninjected<|im_end|>",  # a control token mid-reply: two messages
    "x<|im_start|>no-newline",  # a block without a role line
    "a<|im_end|>\n<|im_start|>",  # an empty block after the reply
    '<tool_call>\n{"name": "f"}\n</tool_call><|im_end|>',
    "<tool_response>\nok\n</tool_response><|endoftext|>",
    "\n",
]


def _parsed(fn):
    """``(shape, messages)`` of a parse, or the exception type it raised (torchrl cannot stack a
    reply with tool calls next to one without: the subclass must fail the same way)."""
    try:
        out = fn()
    except (RuntimeError, KeyError) as e:
        return type(e)
    return out.shape, out.tolist()


@pytest.mark.parametrize("parser", ["qwen", "chatml_format"])
def test_parse_replies_matches_torchrl_on_ugly_replies(parser):
    prompt = History.from_chats([[{"role": "system", "content": "rules"}, {"role": "user", "content": "move"}]])
    prompts = torch.stack([prompt[0], prompt[0]])
    for first in REPLIES:
        for second in (first, "<answer>Up</answer><|im_end|>"):
            texts = [PROMPT_TEXT + first, PROMPT_TEXT + second]
            ref = _parsed(lambda: _extract_responses_from_full_histories(texts, prompts, parser, None))
            assert _parsed(lambda: parse_replies(texts, prompts, parser)) == ref, texts


def test_parse_replies_of_a_text_shorter_than_its_prompt():
    # the full text parses to fewer messages than the prompt: torchrl answers an empty reply
    prompt = History.from_chats([[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]])
    texts = ["<|im_start|>user\na<|im_end|>"]
    for parser in ("qwen", "chatml_format"):
        ref = _extract_responses_from_full_histories(texts, prompt, parser, None)
        assert parse_replies(texts, prompt, parser).tolist() == ref.tolist()


def test_reply_parser_name_follows_torchrl_detection():
    class Tok:
        def __init__(self, name):
            self.name_or_path = name

    assert reply_parser_name(None, Tok("/cache/tiny-qwen2-abc")) == "qwen"
    assert reply_parser_name(None, Tok("/models/my-policy")) == "chatml_format"
    assert reply_parser_name(None, Tok("meta-llama/Llama-3")) is None
    assert reply_parser_name("chatml_format", Tok("qwen")) == "chatml_format"
    assert reply_parser_name("llama", Tok("qwen")) is None


def test_each_distinct_prompt_is_prefilled_once(model_tok):
    """First turn: a group's rows share their prompt, so the prefill encodes one prompt per group (and the
    system prompt once); the rollouts are those of the plain left-padded prefill."""
    model, tok = model_tok
    env = make_env("frozenlake", num_envs=8)
    fed, records = {}, {}
    for share in (False, True):
        policy = make_generation_policy(model, tok, max_new_tokens=12, temperature=1.0)
        policy.share_prompt_head = share
        seen = []
        hook = model.get_input_embeddings().register_forward_hook(lambda m, a, out: seen.append(a[0].shape))
        try:
            torch.manual_seed(0)
            td = _reset(env, [5, 6], 4)
            out = policy(td)
        finally:
            hook.remove()
        fed[share] = seen[0][0] * seen[0][1]  # the first model call: the prefill (shared: the head)
        torch.manual_seed(0)
        records[share] = collect_rollouts(env, policy, [5, 6], 4)
        assert out.get(("tokens", "prompt"), as_list=True)[0].numel() > 8
    assert fed[True] < fed[False] / 4
    a, b = records[False], records[True]
    for key in ("num_tokens", "num_turns", "episode_return", "group_id"):
        assert torch.equal(a[key], b[key]), key
    assert torch.allclose(a["entropy"], b["entropy"], atol=1e-5, rtol=0)
    assert a["history", "full"].tolist() == b["history", "full"].tolist()
    for x, y in zip(a.get(("tokens", "last_prompt"), as_list=True), b.get(("tokens", "last_prompt"), as_list=True)):
        assert torch.equal(x, y)


def test_a_model_without_masked_cache_attention_keeps_the_plain_prefill(model_tok, monkeypatch):
    import ragen_torchrl.models.history_wrapper as hw

    model, tok = model_tok
    policy = make_generation_policy(model, tok, max_new_tokens=4, temperature=1.0)
    td = _reset(make_env("frozenlake", num_envs=4), [5], 4)
    tokens = torch.tensor([[7, 8, 9], [7, 8, 9], [7, 8, 9], [7, 8, 9]])
    assert policy._shared_prefill(tokens, torch.ones_like(tokens)) is not None
    monkeypatch.setattr(hw, "shared_prefix_supported", lambda model: False)
    assert policy._shared_prefill(tokens, torch.ones_like(tokens)) is None
    torch.manual_seed(0)
    assert policy(td).batch_size == (4,)  # the parent's prefill
