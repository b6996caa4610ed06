"""The vLLM rollout backend: everything that runs without vLLM or a GPU.

* without vLLM (or without CUDA) asking for it is a clear error naming the extra and the GPU;
* ``build_rollout_policy("hf", ...)`` is ``make_generation_policy`` (same replies, no weight sync);
* vLLM samples as the hf path does (``vllm_sampling_kwargs`` against ``hf_generate_kwargs`` and
  transformers' own defaults) and writes the same assistant messages (``reparse_replies``);
* ``VLLMWeightSync`` sends every parameter under its Hugging Face name and shape to the engine's
  ``load_weights`` through ``LLM.apply_model`` (a stand-in engine records them) and resets the prefix cache;
* token mode (``rollout.trajectory=tokens``): with a test double of ``vllm.LLM`` that answers from the
  tiny hf model (``HFBackedFakeLLM``), the vLLM token policy yields the hf token path's records and
  training batch for the same sampled ids, and the engine's log-probs equal the hf scoring;
* ``benchmarks/gpu_smoke.sh`` parses and its model helper builds a small model on the CPU.

The test that builds a real engine needs vLLM and a CUDA GPU and is skipped elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch
from tensordict import TensorDict, lazy_stack
from torchrl.data.llm import History
from torchrl.modules.llm.policies import ChatHistory

from ragen_torchrl import keys as K
from ragen_torchrl.collectors import (
    check_policy_output,
    collect_rollouts,
    hf_generate_kwargs,
    make_generation_policy,
    wrapper_generate_kwargs,
)
from ragen_torchrl.collectors.rollout_policy import build_rollout_policy
from ragen_torchrl.collectors.vllm_backend import (
    LOG_PROBS_RESPONSE,
    VLLMTokenPolicy,
    VLLMUnavailableError,
    VLLMWeightSync,
    _RolloutvLLMWrapper,
    find_vllm_model,
    make_vllm_generation_policy,
    reparse_replies,
    reply_from_output,
    token_sampling_kwargs,
    vllm_engine_kwargs,
    vllm_sampling_kwargs,
)
from ragen_torchrl.envs import make_env
from ragen_torchrl.models.priming import prime_text
from ragen_torchrl.models.vision import stop_token_ids
from ragen_torchrl.objectives.logprobs import compute_behaviour_log_probs, make_logprob_policy

ROOT = Path(__file__).resolve().parents[1]
HAS_VLLM_GPU = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def _no_vllm(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))


# ----------------------------------------------------------------------------- errors
def test_without_vllm_the_builder_names_the_extra_and_the_gpu(monkeypatch, tiny_model):
    model, tok = tiny_model
    _no_vllm(monkeypatch)
    for build in (
        lambda: make_vllm_generation_policy(model, tok, max_new_tokens=8, temperature=1.0),
        lambda: build_rollout_policy("vllm", model, tok, max_new_tokens=8, temperature=1.0),
    ):
        with pytest.raises(VLLMUnavailableError) as err:
            build()
        assert "pip install 'ragen_torchrl[vllm]'" in str(err.value) and "CUDA GPU" in str(err.value)
        assert isinstance(err.value, ImportError)
    # installed but no GPU: says that
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(VLLMUnavailableError, match="needs a CUDA GPU"):
        make_vllm_generation_policy(model, tok, max_new_tokens=8, temperature=1.0)


def test_bad_backend_and_bad_sampling_are_value_errors(tiny_model):
    model, tok = tiny_model
    with pytest.raises(ValueError, match="unknown rollout backend 'sglang'; choose one of: hf, vllm"):
        build_rollout_policy("sglang", model, tok, max_new_tokens=8, temperature=1.0)
    with pytest.raises(ValueError, match="takes no vLLM options"):
        build_rollout_policy("hf", model, tok, max_new_tokens=8, temperature=1.0, gpu_memory_utilization=0.5)
    # checked before vLLM is looked for, with the hf path's messages
    for kwargs, text in (
        ({"max_new_tokens": 0, "temperature": 1.0}, "max_new_tokens"),
        ({"max_new_tokens": 4, "temperature": -1}, "temperature"),
    ):
        with pytest.raises(ValueError, match=text):
            make_vllm_generation_policy(model, tok, **kwargs)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        vllm_engine_kwargs(model, gpu_memory_utilization=0)


# ----------------------------------------------------------------------------- hf
def test_hf_rollout_policy_is_make_generation_policy(tiny_model):
    model, tok = tiny_model
    policy, sync = build_rollout_policy("hf", model, tok, max_new_tokens=6, temperature=1.0)
    reference = make_generation_policy(model, tok, max_new_tokens=6, temperature=1.0)
    assert sync is None and type(policy) is type(reference)
    same = {k: v for k, v in policy.generate_kwargs.items() if k != "logits_processor"}  # its own entropy recorder
    assert same == {k: v for k, v in reference.generate_kwargs.items() if k != "logits_processor"}
    assert policy.chat_template == reference.chat_template and policy.entropy_recorder is not None
    env = make_env("frozenlake", num_envs=2)
    outs = []
    for p in (policy, reference):
        torch.manual_seed(0)
        outs.append(collect_rollouts(env, p, level_seeds=[3], group_size=2))
    a, b = outs
    assert a["num_tokens"].tolist() == b["num_tokens"].tolist()
    assert a["episode_return"].tolist() == b["episode_return"].tolist()
    assert [h.content for h in a["history", "full"].unbind(0)] == [h.content for h in b["history", "full"].unbind(0)]


# ----------------------------------------------------------------------------- sampling parity
@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0])
def test_vllm_sampling_matches_the_hf_generate_kwargs(temperature):
    hf = hf_generate_kwargs(32, temperature)
    vl = vllm_sampling_kwargs(32, temperature)
    assert vl["max_tokens"] == hf["max_new_tokens"] == 32
    if temperature == 0:
        assert not hf["do_sample"] and vl == {"max_tokens": 32, "temperature": 0.0}
    else:
        assert hf["do_sample"] and vl["temperature"] == hf["temperature"] and vl["top_p"] == hf["top_p"] == 1.0
        # the full distribution on both paths: no top-k (hf: 0, vLLM: -1), no min-p, no penalties
        assert hf["top_k"] == 0 and vl["top_k"] == -1
        assert hf["min_p"] is None and vl["min_p"] == 0.0
        assert hf["repetition_penalty"] == vl["repetition_penalty"] == 1.0
        assert vl["presence_penalty"] == vl["frequency_penalty"] == 0.0
    # torchrl's vLLMWrapper accepts them as they are (its own parameter checks)
    from torchrl.modules.llm import vLLMWrapper

    vLLMWrapper._standardize_generate_kwargs(wrapper_generate_kwargs(vl))


def test_vllm_sampling_passes_the_configured_truncation():
    vl = vllm_sampling_kwargs(8, 1.0, top_k=20, top_p=0.9, min_p=0.05)
    assert (vl["top_k"], vl["top_p"], vl["min_p"]) == (20, 0.9, 0.05)
    with pytest.raises(ValueError, match="rollout.top_p"):
        vllm_sampling_kwargs(8, 1.0, top_p=0.0)


def test_a_checkpoint_generation_config_does_not_reach_the_sampler(tiny_model):
    """Instruct checkpoints ship top_k / repetition_penalty in generation_config.json: generate fills
    every setting it is not given from there, so the hf path gives them all."""
    model, _ = tiny_model
    model.generation_config.top_k, model.generation_config.repetition_penalty = 20, 1.05
    model.generation_config.min_p, model.generation_config.typical_p = 0.1, 0.9
    try:
        config, _ = model._prepare_generation_config(None, **hf_generate_kwargs(8, 1.0))
    finally:
        model.generation_config.top_k, model.generation_config.repetition_penalty = None, None
        model.generation_config.min_p, model.generation_config.typical_p = None, None
    assert config.top_k == 0 and config.repetition_penalty == 1.0
    assert config.min_p is None and config.typical_p == 1.0
    # and the vLLM engine ignores the checkpoint's generation config
    assert vllm_engine_kwargs(torch.nn.Linear(2, 2), world_size=1)["generation_config"] == "vllm"


def test_engine_kwargs():
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    kw = vllm_engine_kwargs(model, seed=5, world_size=1, max_model_len=2048)
    assert kw == {
        "dtype": "bfloat16",
        "gpu_memory_utilization": 0.3,
        "seed": 5,
        "tensor_parallel_size": 1,
        "generation_config": "vllm",
        "logprobs_mode": "processed_logprobs",
        "max_model_len": 2048,
    }
    assert vllm_engine_kwargs(model, dtype=torch.float32, world_size=1)["dtype"] == "float32"
    # under torchrun: one in-process engine per rank
    assert vllm_engine_kwargs(model, world_size=4)["distributed_executor_backend"] == "external_launcher"


# ----------------------------------------------------------------------------- replies
def _force_end_of_turn(model, tok, after: int):
    """Make the tiny model end its reply (end-of-turn token) from its ``after``-th generated token on."""
    calls = {"n": 0}

    def hook(_module, _inp, out):
        calls["n"] += 1
        if calls["n"] >= after:
            out[..., tok.eos_token_id] += 1000
        return out

    return model.lm_head.register_forward_hook(hook)


@pytest.mark.parametrize("finished", [True, False])
def test_vllm_replies_are_parsed_as_the_hf_path_parses_them(tiny_model, finished, monkeypatch):
    """torchrl's vLLMWrapper keeps the raw reply (end-of-turn token included) as the assistant
    message; the rollout wrapper re-parses it into the hf path's message."""
    model, tok = tiny_model
    if finished:
        _force_end_of_turn(model, tok, after=3)
    hf = make_generation_policy(model, tok, max_new_tokens=6, temperature=0)
    td = make_env("frozenlake", num_envs=2).reset()
    out = hf(td.clone())
    text_full = list(out["text", "full"])
    prompt = td["history", "prompt"]
    raw = [History(role="assistant", content=r).unsqueeze(0) for r in out["text", "response"]]
    assert any("<|im_end|>" in r for r in out["text", "response"]) == finished

    def fake_generate(self, tensordict_input, sampling_params, out_td):
        # what vLLMWrapper writes in history mode: the raw reply as the assistant message
        result = TensorDict(batch_size=[2]).to_lazystack(0)
        chat = ChatHistory._from_tensordict(result.empty())
        chat.prompt = prompt
        chat.response = lazy_stack(raw)
        chat.full = prompt.extend(lazy_stack(raw), inplace=False, dim=-1)
        result.set("history", chat)
        result.set(("text", "full"), text_full)
        result.set(("tokens", "response"), list(out.get(("tokens", "response"), as_list=True)))
        return result

    from torchrl.modules.llm import vLLMWrapper

    monkeypatch.setattr(vLLMWrapper, "_from_vllm_generate_history", fake_generate)
    wrapper = _RolloutvLLMWrapper.__new__(_RolloutvLLMWrapper)
    torch.nn.Module.__init__(wrapper)
    wrapper.num_samples, wrapper.history_key, wrapper.text_key = None, "history", "text"
    wrapper.tokenizer, wrapper.chat_template_name = tok, None
    result = wrapper._from_vllm_generate_history(td, None, None)
    check_policy_output(result, 2)
    for got, want in zip(result["history", "full"].unbind(0), out["history", "full"].unbind(0), strict=True):
        assert got.role == want.role and got.content == want.content
    # and the function alone
    chat = ChatHistory(prompt=prompt, batch_size=[2])
    chat = reparse_replies(chat, text_full, tok)
    assert [h.content for h in chat.full.unbind(0)] == [h.content for h in out["history", "full"].unbind(0)]


# ----------------------------------------------------------------------------- weight sync
class FakeEngine:
    """A stand-in ``vllm.LLM`` whose model records what it receives: ``layout="apply_model"`` has vLLM's
    public ``LLM.apply_model`` (one worker), ``"v1"`` / ``"v0"`` only the in-process attribute layouts."""

    def __init__(self, layout: str = "apply_model", returns=None):
        self.received: list[tuple[str, torch.Tensor]] = []
        self.resets = 0
        inner = NS(load_weights=self._load)
        self._returns = returns
        if layout == "apply_model":
            self.apply_model = lambda fn: [fn(inner)]
        elif layout == "v1":
            self.llm_engine = NS(model_executor=NS(driver_worker=NS(worker=NS(model_runner=NS(model=inner)))))
        else:  # V0
            self.llm_engine = NS(model_executor=NS(driver_worker=NS(model_runner=NS(model=inner))))

    def _load(self, weights):
        self.received.extend((name, t.clone()) for name, t in weights)
        return {n for n, _ in self.received} if self._returns is None else self._returns

    def reset_prefix_cache(self):
        self.resets += 1


@pytest.mark.parametrize("layout", ["apply_model", "v1", "v0"])
def test_weight_sync_sends_every_parameter_under_its_hf_name(tiny_model, layout):
    model, _ = tiny_model
    engine = FakeEngine(layout)
    sync = VLLMWeightSync(model, engine)
    with torch.no_grad():  # an "update"
        model.model.layers[0].self_attn.q_proj.weight.add_(1.0)
    assert sync.push() == len(list(model.parameters()))
    sent = dict(engine.received)
    expected = dict(model.named_parameters())  # tied weights once, as a checkpoint names them
    assert list(sent) == list(expected)
    assert all(not n.startswith(("module.", "_orig_mod.")) for n in sent)
    for name, param in expected.items():
        assert sent[name].shape == param.shape and torch.equal(sent[name], param.detach()), name
    assert "model.layers.0.self_attn.q_proj.weight" in sent and "model.embed_tokens.weight" in sent
    assert engine.resets == 1 and sync.pushes == 1


def test_weight_sync_looks_through_wrappers_and_takes_the_policy(tiny_model):
    model, _ = tiny_model
    engine = FakeEngine()
    compiled = torch.compile(model)  # not run: only its parameter names matter
    assert next(iter(dict(compiled.named_parameters()))).startswith("_orig_mod.")
    VLLMWeightSync(compiled, engine).push()
    assert [n for n, _ in engine.received] == [n for n, _ in model.named_parameters()]


def test_weight_sync_errors_are_clear(tiny_model):
    model, _ = tiny_model
    with pytest.raises(RuntimeError, match="VLLM_ENABLE_V1_MULTIPROCESSING=0"):
        VLLMWeightSync(model, NS(llm_engine=NS(engine_core=NS()))).push()  # an engine in another process
    with pytest.raises(RuntimeError, match="loaded none of the"):
        VLLMWeightSync(model, FakeEngine(returns=set())).push()
    with pytest.raises(RuntimeError):
        find_vllm_model(object())


# ----------------------------------------------------------------------------- token mode (a test double of vllm.LLM)
class FakeSamplingParams:
    """Test double of ``vllm.SamplingParams``: keeps the keywords it is given as attributes."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.__dict__.update(kwargs)


class HFBackedFakeLLM:
    """Test double of ``vllm.LLM`` on the CPU: ``generate(prompts, sampling_params, use_tqdm=...)`` takes
    ``TokensPrompt`` dicts and returns ``RequestOutput``-shaped objects (``outputs[0].token_ids``,
    ``.logprobs``: one ``{token_id: Logprob}`` per sampled id, ``.stop_reason``, ``.finish_reason``).

    The ids come from ``replay`` (prompt ids -> the reply ids sampled after that prompt, in row order:
    the G rows of a group share their first prompt) when given, else
    greedily from the tiny hf ``model`` itself, stopping at ``sampling_params.stop_token_ids`` (kept in
    ``token_ids``, as vLLM does) or at ``max_tokens``. The log-probs are the hf model's
    ``log_softmax(logits / temperature)`` of the sampled ids, one unpadded forward per prompt: what
    ``logprobs=0`` returns under ``logprobs_mode="processed_logprobs"``."""

    def __init__(self, model, replay: dict | None = None):
        self.hf = model
        self.replay = replay
        self.prompts: list[list[int]] = []

    @torch.no_grad()
    def _greedy(self, ids: list[int], params) -> list[int]:
        out: list[int] = []
        for _ in range(params.max_tokens):
            logits = self.hf(torch.tensor([ids + out])).logits[0, -1]
            out.append(int(logits.argmax()))
            if out[-1] in params.stop_token_ids:
                break
        return out

    @torch.no_grad()
    def generate(self, prompts, sampling_params, use_tqdm=True):
        results = []
        for prompt in prompts:
            ids = list(prompt["prompt_token_ids"])
            self.prompts.append(ids)
            reply = self.replay[tuple(ids)].pop(0) if self.replay is not None else self._greedy(ids, sampling_params)
            temperature = sampling_params.temperature or 1.0
            logits = self.hf(torch.tensor([ids + reply])).logits[0, len(ids) - 1 : -1].float()
            lps = torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(reply)[:, None])[:, 0]
            stopped = reply[-1] in sampling_params.stop_token_ids
            done = NS(
                token_ids=reply,
                logprobs=[{t: NS(logprob=float(lp), rank=1)} for t, lp in zip(reply, lps)],
                finish_reason="stop" if stopped else "length",
                stop_reason=reply[-1] if stopped else None,
            )
            results.append(NS(prompt_token_ids=ids, outputs=[done]))
        return results


def _replay_table(records) -> dict:
    """prompt ids -> the reply ids of every turn after it, in row order, of token-trajectory records (a reply
    is a run of trained ids; the collector calls the rows of a turn in row order)."""
    table = {}
    for ids, mask in zip(records.get(K.TOKENS_TRAJECTORY, as_list=True), records.get(K.MASKS_TRAJECTORY, as_list=True)):
        k, n = 0, len(ids)
        while k < n:
            if not mask[k]:
                k += 1
                continue
            end = k
            while end < n and mask[end]:
                end += 1
            table.setdefault(tuple(ids[:k].tolist()), []).append(ids[k:end].tolist())
            k = end
    return table


def _vllm_token_policy(model, tok, engine, **kwargs):
    policy, sync = build_rollout_policy(
        "vllm", model, tok, engine=engine, sampling_params_cls=FakeSamplingParams, trajectory="tokens", **kwargs
    )
    assert sync is None  # an engine passed in is kept current by its first policy's sync
    return policy


def _favour_end_of_turn(model, tok, bias: float):
    """Add ``bias`` to the end-of-turn logit of every forward pass (the same model on both paths), so
    that some replies stop at it before the token budget."""
    end = int(tok.eos_token_id)

    def hook(_module, _inp, out):
        out[..., end] += bias
        return out

    return model.lm_head.register_forward_hook(hook)


def test_token_mode_gives_the_hf_token_paths_training_batch_for_the_same_sampled_ids(tiny_model):
    model, tok = tiny_model
    _favour_end_of_turn(model, tok, 2.0)  # some replies stop at the end id, the others at the budget
    prime, temperature, levels, group = prime_text(True), 0.7, [3, 5], 3
    sampling = {"max_new_tokens": 8, "temperature": temperature, "reply_prime": prime}
    hf_policy, _ = build_rollout_policy("hf", model, tok, trajectory="tokens", **sampling)
    torch.manual_seed(0)
    hf = collect_rollouts(make_env("frozenlake", num_envs=6), hf_policy, level_seeds=levels, group_size=group)
    assert int(hf[K.NUM_TURNS].max()) >= 2 and int(hf[K.TRAJECTORY_REFITS].sum()) == 0  # multi-turn, no refit
    ended = sum(
        int((t[m] == tok.eos_token_id).sum())
        for t, m in zip(*(hf.get(k, as_list=True) for k in (K.TOKENS_TRAJECTORY, K.MASKS_TRAJECTORY)))
    )
    assert 0 < ended < int(hf[K.NUM_TURNS].sum())  # both kinds of reply: stopped at the end id and budget-cut

    engine = HFBackedFakeLLM(model, replay=_replay_table(hf))
    policy = _vllm_token_policy(model, tok, engine, **sampling)
    assert isinstance(policy, VLLMTokenPolicy) and policy.input_mode == "tokens" and policy.model is engine
    assert policy.chat_template == hf_policy.chat_template and policy.reply_prime == prime
    vl = collect_rollouts(make_env("frozenlake", num_envs=6), policy, level_seeds=levels, group_size=group)
    # every turn's prompt was a row's token trajectory so far: as many engine calls as hf turns
    assert len(engine.prompts) == int(hf[K.NUM_TURNS].sum())

    # the same records: the hf token path's keys (less its KV-cache counts) plus the engine's log-probs
    hf_keys = set(hf.keys(True, True)) - set(K.KV_COUNT_KEYS)
    assert set(vl.keys(True, True)) - {K.LOG_PROBS_TRAJECTORY} == hf_keys
    for key in (K.EPISODE_RETURN, K.NUM_TURNS, K.NUM_TOKENS, K.SUCCESS, K.FORMAT_VALID, K.TRAJECTORY_REFITS):
        assert torch.equal(vl[key], hf[key]), key
    for key in (K.TOKENS_TRAJECTORY, K.MASKS_TRAJECTORY, K.TOKENS_LAST_PROMPT, K.TOKENS_LAST_RESPONSE):
        for a, b in zip(vl.get(key, as_list=True), hf.get(key, as_list=True), strict=True):
            assert torch.equal(a, b), key
    assert [h.content for h in vl[K.HISTORY_FULL].unbind(0)] == [h.content for h in hf[K.HISTORY_FULL].unbind(0)]

    # the same training batch: ids, masks and behaviour log-probs of the training model
    actor = make_logprob_policy(model, tok, reply_prime=prime, temperature=temperature)
    b_hf, b_vl = (compute_behaviour_log_probs(actor, r) for r in (hf, vl))
    for key in (K.TOKENS_FULL, K.MASKS_ASSISTANT, K.MASKS_ATTENTION):
        for a, b in zip(b_vl.get(key, as_list=True), b_hf.get(key, as_list=True), strict=True):
            assert torch.equal(a, b), key
    gaps, sampled = [], 0
    for lp_vl, lp_hf, mask, engine_lp, ids in zip(
        b_vl.get(K.LOG_PROBS_FULL, as_list=True),
        b_hf.get(K.LOG_PROBS_FULL, as_list=True),
        b_vl.get(K.MASKS_ASSISTANT, as_list=True),
        vl.get(K.LOG_PROBS_TRAJECTORY, as_list=True),
        vl.get(K.TOKENS_TRAJECTORY, as_list=True),
        strict=True,
    ):
        assert torch.allclose(lp_vl, lp_hf, atol=1e-5, rtol=0)
        # the engine's log-probs of the sampled ids: the hf scoring at the rollout temperature, 0 elsewhere
        assert engine_lp.shape == ids.shape and bool((engine_lp[~mask] == 0).all())
        gaps.append((engine_lp[mask] - lp_hf[mask]).abs().max())
        sampled += int(mask.sum())
    assert sampled == int(hf[K.NUM_TOKENS].sum()) and float(torch.stack(gaps).max()) < 1e-5


@pytest.mark.parametrize("bias", [0.0, 1.0])  # greedy replies: all budget-cut / all stopped at the end id
def test_token_mode_samples_from_the_engine_and_stops_at_the_hf_end_ids(tiny_model, bias):
    """The test double samples greedily from the hf model itself: the same trajectories as the hf
    token path at temperature 0, and the engine is asked with the hf path's stop ids and logprobs=0."""
    model, tok = tiny_model
    _favour_end_of_turn(model, tok, bias)
    sampling = {"max_new_tokens": 8, "temperature": 0.0, "reply_prime": prime_text(True)}
    hf_policy, _ = build_rollout_policy("hf", model, tok, trajectory="tokens", **sampling)
    hf = collect_rollouts(make_env("frozenlake", num_envs=4), hf_policy, level_seeds=[7, 8], group_size=2)
    engine = HFBackedFakeLLM(model)
    policy = _vllm_token_policy(model, tok, engine, **sampling)
    params = policy.sampling_params.kwargs
    assert params == {
        "max_tokens": 8,
        "temperature": 0.0,
        "logprobs": 0,
        "stop_token_ids": sorted(stop_token_ids(model, tok)),
        "ignore_eos": True,
        "detokenize": False,
    }
    vl = collect_rollouts(make_env("frozenlake", num_envs=4), policy, level_seeds=[7, 8], group_size=2)
    for a, b in zip(vl.get(K.TOKENS_TRAJECTORY, as_list=True), hf.get(K.TOKENS_TRAJECTORY, as_list=True), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(vl[K.NUM_TOKENS], hf[K.NUM_TOKENS])


def test_reply_from_output_cuts_at_the_first_end_id():
    def out(ids, stop_reason=None, logprobs=True):
        lps = [{t: NS(logprob=-0.5 * (k + 1))} for k, t in enumerate(ids)] if logprobs else None
        return NS(token_ids=ids, logprobs=lps, stop_reason=stop_reason)

    ids, lps = reply_from_output(out([4, 7, 9, 7]), {7})
    assert ids.tolist() == [4, 7] and lps.tolist() == [-0.5, -1.0]
    ids, lps = reply_from_output(out([4, 5]), {7})  # cut by max_tokens: kept as it is
    assert ids.tolist() == [4, 5] and lps.tolist() == [-0.5, -1.0]
    ids, lps = reply_from_output(out([4, 5], stop_reason=7), {7})  # the stop id only in stop_reason
    assert ids.tolist() == [4, 5, 7] and torch.isnan(lps[2]) and lps[:2].tolist() == [-0.5, -1.0]
    ids, lps = reply_from_output(out([4, 5], logprobs=False), {7})
    assert ids.tolist() == [4, 5] and bool(torch.isnan(lps).all())
    with pytest.raises(ValueError, match="end-of-turn id"):
        token_sampling_kwargs({"max_tokens": 4}, [])


def test_token_policy_keeps_each_rows_engine_log_probs_and_refuses_a_history_prompt(tiny_model):
    model, tok = tiny_model
    replies = {(1, 2): [5, 2], (1, 2, 5, 2, 6): [8, 2], (9, 9): [3, 2]}
    engine = NS(
        generate=lambda prompts, params, use_tqdm=True: [
            NS(outputs=[NS(token_ids=replies[tuple(p["prompt_token_ids"])], logprobs=None)]) for p in prompts
        ]
    )
    policy = VLLMTokenPolicy(engine, tok, sampling_params=None, stop_ids={2})

    def call(prompt, env_index=0):
        row = TensorDict({"tokens": {"prompt": torch.tensor(prompt)}, "env_index": torch.tensor(env_index)}, [])
        return policy(lazy_stack([row]))

    out = call([1, 2])
    assert out.get(K.TOKENS_RESPONSE, as_list=True)[0].tolist() == [5, 2]
    assert torch.isnan(out.get(LOG_PROBS_RESPONSE, as_list=True)[0]).all()  # the engine gave none
    call([1, 2, 5, 2, 6])  # the next turn extends the trajectory: the first reply's values are kept
    lp = policy.trajectory(0)[K.LOG_PROBS_TRAJECTORY]
    assert lp.shape == (7,) and lp[[0, 1, 4]].tolist() == [0.0, 0.0, 0.0] and bool(torch.isnan(lp[[2, 3, 5, 6]]).all())
    policy.release([0])
    with pytest.raises(KeyError):
        policy.trajectory(0)
    row = TensorDict({"env_index": torch.tensor(0)}, [])
    row.set(K.HISTORY_PROMPT, History(role="user", content="hi", batch_size=(1,)))
    with pytest.raises(ValueError, match="trajectory='history'"):
        policy(lazy_stack([row]))


def test_token_mode_bad_input_and_missing_vllm(monkeypatch, tiny_model):
    model, tok = tiny_model
    with pytest.raises(ValueError, match="rollout.trajectory must be one of tokens, history, got 'text'"):
        make_vllm_generation_policy(model, tok, trajectory="text", engine=object())
    _no_vllm(monkeypatch)
    # an engine without vllm.SamplingParams to build its parameters: says what to install
    with pytest.raises(VLLMUnavailableError, match="pip install 'ragen_torchrl\\[vllm\\]'"):
        make_vllm_generation_policy(model, tok, engine=object())


def test_weight_sync_takes_the_token_policys_engine(tiny_model):
    model, tok = tiny_model
    engine = FakeEngine()
    policy = _vllm_token_policy(model, tok, engine, max_new_tokens=4, temperature=1.0)
    VLLMWeightSync(model, policy).push()
    assert [n for n, _ in engine.received] == [n for n, _ in model.named_parameters()] and engine.resets == 1


# ----------------------------------------------------------------------------- the GPU smoke script
def test_gpu_smoke_script_parses_and_its_model_helper_builds_a_small_model(tmp_path):
    script = ROOT / "benchmarks" / "gpu_smoke.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_smoke_model.py"),
            str(tmp_path / "m"),
            "--layers",
            "2",
            "--hidden",
            "64",
            "--intermediate",
            "128",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--vocab",
            "300",
            "--episodes",
            "40",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
    )
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_key_value_heads"]) == (2, 64, 2)
    assert config["model_type"] == "qwen2" and (tmp_path / "m" / "tokenizer_config.json").exists()
    assert str(tmp_path / "m") in out.stdout
    from helpers import load_tiny

    model, tok = load_tiny(str(tmp_path / "m"))
    assert "{% generation %}" in tok.chat_template and model.config.vocab_size >= len(tok)


# ----------------------------------------------------------------------------- GPU only
@pytest.mark.skipif(not HAS_VLLM_GPU, reason="needs vLLM (pip install 'ragen_torchrl[vllm]') and a CUDA GPU")
def test_vllm_policy_collects_and_follows_the_pushed_weights(tiny_model):  # pragma: no cover - GPU only
    model, tok = tiny_model
    model.cuda()
    policy, sync = build_rollout_policy(
        "vllm", model, tok, max_new_tokens=8, temperature=0, gpu_memory_utilization=0.2, enforce_eager=True
    )
    env = make_env("frozenlake", num_envs=4)
    records = collect_rollouts(env, policy, level_seeds=[1, 2], group_size=2)
    assert records.batch_size[0] == 4 and int(records["num_tokens"].sum()) > 0
    # greedy replies of the engine equal the hf path's before and after a weight change
    hf = make_generation_policy(model, tok, max_new_tokens=8, temperature=0)
    td = env.reset()
    assert [h.content for h in policy(td.clone())["history", "full"].unbind(0)] == [
        h.content for h in hf(td.clone())["history", "full"].unbind(0)
    ]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    sync.push()
    assert [h.content for h in policy(td.clone())["history", "full"].unbind(0)] == [
        h.content for h in hf(td.clone())["history", "full"].unbind(0)
    ]
