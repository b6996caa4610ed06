"""The vLLM rollout backend: everything that runs without vLLM or a GPU.

* without vLLM (or without CUDA) asking for it is a clear error naming the extra and the GPU;
* ``build_rollout_policy("hf", ...)`` is ``make_generation_policy`` (same replies, no weight sync);
* vLLM samples as the hf path does (``vllm_sampling_kwargs`` against ``hf_generate_kwargs`` and
  transformers' own defaults) and writes the same assistant messages (``reparse_replies``);
* ``VLLMWeightSync`` sends every parameter under its Hugging Face name and shape to the engine's
  ``load_weights`` (a stand-in engine records them) and resets the prefix cache;
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

from ragen_torchrl.collectors import (
    check_policy_output,
    collect_rollouts,
    hf_generate_kwargs,
    make_generation_policy,
    wrapper_generate_kwargs,
)
from ragen_torchrl.collectors.rollout_policy import build_rollout_policy
from ragen_torchrl.collectors.vllm_backend import (
    VLLMUnavailableError,
    VLLMWeightSync,
    _RolloutvLLMWrapper,
    find_vllm_model,
    make_vllm_generation_policy,
    reparse_replies,
    vllm_engine_kwargs,
    vllm_sampling_kwargs,
)
from ragen_torchrl.envs import make_env

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
    """A stand-in ``vllm.LLM`` (V1 in-process layout) whose model records what it receives."""

    def __init__(self, layout: str = "v1", returns=None):
        self.received: list[tuple[str, torch.Tensor]] = []
        self.resets = 0
        inner = NS(load_weights=self._load)
        self._returns = returns
        if layout == "v1":
            self.llm_engine = NS(model_executor=NS(driver_worker=NS(worker=NS(model_runner=NS(model=inner)))))
        else:  # V0
            self.llm_engine = NS(model_executor=NS(driver_worker=NS(model_runner=NS(model=inner))))

    def _load(self, weights):
        self.received.extend((name, t.clone()) for name, t in weights)
        return {n for n, _ in self.received} if self._returns is None else self._returns

    def reset_prefix_cache(self):
        self.resets += 1


@pytest.mark.parametrize("layout", ["v1", "v0"])
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
