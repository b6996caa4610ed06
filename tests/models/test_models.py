"""The offline tiny policy (tokenizer + Qwen2 model) and the loading path of any HF model."""

from __future__ import annotations

import os
import time

import pytest
import torch

from ragen_torchrl.models import tiny as tiny_mod
from ragen_torchrl.models.loading import load_pretrained, prepare_tokenizer, resolve_device, wrapper_chat_template
from ragen_torchrl.models.tiny import (
    CHAT_TEMPLATE,
    EOT_TOKEN,
    PAD_TOKEN,
    TAG_TOKENS,
    TinyModelConfig,
    build_tiny_model,
    train_tokenizer,
)

SMALL = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2)

CHAT = [
    {"role": "system", "content": "You play FrozenLake."},
    {"role": "user", "content": "P___\n_O__\n___G\nPlayer (0,0) Goal (2,3)"},
    {"role": "assistant", "content": "<think>go right first</think><answer>Right || Right</answer>"},
    {"role": "user", "content": "Invalid reply.\n__P_\n_O__\n___G"},
    {"role": "assistant", "content": "<think>down now</think><answer>Down</answer>"},
]


def fixed_input(tokenizer) -> torch.Tensor:
    ids = tokenizer.apply_chat_template(CHAT, tokenize=True, return_dict=True)["input_ids"]
    return torch.tensor([ids])


# --------------------------------------------------------------------------- save / reload
def test_build_saves_the_seeded_model_and_reload_is_exact(tiny_model_dir):
    from transformers import AutoConfig, Qwen2ForCausalLM

    model, tok = load_pretrained(tiny_model_dir, device="cpu", dtype="float32")
    assert not model.training  # eval mode: dropout off, as GRPOLoss expects
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 1
    assert model.config.vocab_size == len(tok)
    ids = fixed_input(tok)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()

    # the saved weights are the ones the build made from its seed
    with torch.random.fork_rng():
        torch.manual_seed(0)
        rebuilt = Qwen2ForCausalLM(AutoConfig.from_pretrained(tiny_model_dir)).eval()
    with torch.no_grad():
        assert torch.equal(rebuilt(input_ids=ids).logits, logits)


def test_save_pretrained_then_load_pretrained_round_trip(tiny_model_dir, tmp_path):
    model, tok = load_pretrained(tiny_model_dir, device="cpu", dtype="float32")
    # change the weights, so the reload cannot pass by re-running the seeded init
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)

    model2, tok2 = load_pretrained(str(tmp_path), device="cpu", dtype="float32")
    ids = fixed_input(tok)
    assert torch.equal(fixed_input(tok2), ids)
    with torch.no_grad():
        assert torch.equal(model2(input_ids=ids).logits, model(input_ids=ids).logits)
    sd1, sd2 = model.state_dict(), model2.state_dict()
    assert sd1.keys() == sd2.keys()
    assert all(torch.equal(sd1[k], sd2[k]) for k in sd1)
    assert tok2.pad_token_id == tok.pad_token_id and tok2.eos_token_id == tok.eos_token_id
    assert tok2.chat_template == tok.chat_template == CHAT_TEMPLATE


def test_pad_token_is_distinct_from_eos(tiny_model):
    model, tok = tiny_model
    assert tok.pad_token == PAD_TOKEN and tok.eos_token == EOT_TOKEN
    assert tok.pad_token_id is not None and tok.eos_token_id is not None
    assert tok.pad_token_id != tok.eos_token_id
    assert tok.padding_side == "left"
    assert model.generation_config.pad_token_id == tok.pad_token_id
    assert model.generation_config.eos_token_id == tok.eos_token_id
    assert model.config.pad_token_id == tok.pad_token_id


# --------------------------------------------------------------------------- tokenizer
TEXTS = [
    "Player (1, 2). Goal at (3, 3).",
    "plain ASCII with  double  spaces and a trailing space ",
    "x , y . z ! ? don't",
    "naïve café — Grüße, 日本語, Ελληνικά",
    "emoji 🙂🚀👍🏽 and 🇫🇷",
    "line one\nline two\n\n\tindented\r\nend\n",
    "<think>go Left</think><answer>Left || Up</answer>",
    "a <think> b </think> c",
    "",
]


@pytest.fixture(scope="module")
def small_tokenizer():
    return train_tokenizer(["Left Up Right Down", "Player (1, 2). Goal at (3, 3)."] * 10, vocab_size=280)


@pytest.mark.parametrize("text", TEXTS)
def test_train_tokenizer_decodes_exactly_what_it_encodes(small_tokenizer, text):
    ids = small_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert small_tokenizer.decode(ids) == text


def test_trained_tokenizer_tag_tokens_are_single_tokens(small_tokenizer):
    for tag in TAG_TOKENS:
        assert len(small_tokenizer(tag, add_special_tokens=False)["input_ids"]) == 1, tag
    for special in (PAD_TOKEN, EOT_TOKEN, "<|im_start|>"):
        assert len(small_tokenizer(special, add_special_tokens=False)["input_ids"]) == 1, special
    # no BOS/EOS is added silently
    assert (
        small_tokenizer("Left", add_special_tokens=True)["input_ids"]
        == small_tokenizer("Left", add_special_tokens=False)["input_ids"]
    )


def test_tiny_tokenizer_round_trips_unicode(tiny_model):
    _, tok = tiny_model
    for text in TEXTS:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


# --------------------------------------------------------------------------- chat template mask
def test_chat_template_assistant_mask_covers_content_and_end_of_turn(tiny_model):
    _, tok = tiny_model
    out = tok.apply_chat_template(CHAT, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids = torch.tensor(out["input_ids"])
    mask = torch.tensor(out["assistant_masks"], dtype=torch.bool)
    assert ids.shape == mask.shape

    expected = []
    for message in CHAT:
        if message["role"] == "assistant":
            expected += tok(message["content"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert ids[mask].tolist() == expected
    assert tok.decode(ids[mask]) == "".join(m["content"] + EOT_TOKEN for m in CHAT if m["role"] == "assistant")

    # nothing else is masked: no header, no system/user token, not the newline after <|im_end|>
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    assert not mask[ids == im_start].any()
    eot_positions = (ids == tok.eos_token_id).nonzero().reshape(-1).tolist()
    assert len(eot_positions) == len(CHAT)
    # <|im_end|> of system and user turns is not masked, of assistant turns it is
    roles = [m["role"] for m in CHAT]
    assert [bool(mask[p]) for p in eot_positions] == [r == "assistant" for r in roles]
    for p in eot_positions:
        if p + 1 < len(ids):
            assert not mask[p + 1]
    # the masked spans are exactly two contiguous runs (one per assistant turn)
    edges = (mask[1:].int() - mask[:-1].int()).tolist()
    assert edges.count(1) == 2 and edges.count(-1) == 2
    user_text = tok.decode(ids[~mask])
    assert "FrozenLake" in user_text and "Invalid reply." in user_text
    assert "go right first" not in user_text


def test_wrapper_chat_template_is_the_tokenizer_template(tiny_model):
    _, tok = tiny_model
    assert wrapper_chat_template(tok) == CHAT_TEMPLATE

    class NoGeneration:  # any template is the policy's (the assistant tokens are found by construction)
        chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

    class NoTemplate:
        chat_template = None

    assert wrapper_chat_template(NoGeneration()) == NoGeneration.chat_template
    assert wrapper_chat_template(NoTemplate()) is None


# --------------------------------------------------------------------------- cache
def test_build_tiny_model_returns_cached_path_without_rebuilding(tiny_model_dir, tiny_corpus, monkeypatch):
    from ragen_torchrl.models.tiny import TinyModelConfig

    config_file = os.path.join(tiny_model_dir, "config.json")
    weights = [f for f in os.listdir(tiny_model_dir) if f.endswith(".safetensors") or f.endswith(".bin")]
    assert weights
    before = {f: os.stat(os.path.join(tiny_model_dir, f)).st_mtime_ns for f in os.listdir(tiny_model_dir)}

    def no_rebuild(*args, **kwargs):
        raise AssertionError("build_tiny_model retrained the tokenizer although the model is cached")

    monkeypatch.setattr(tiny_mod, "train_tokenizer", no_rebuild)
    t0 = time.perf_counter()
    again = build_tiny_model(tiny_corpus, TinyModelConfig(**SMALL, seed=0), os.path.dirname(tiny_model_dir))
    assert time.perf_counter() - t0 < 5.0
    assert again == tiny_model_dir
    after = {f: os.stat(os.path.join(tiny_model_dir, f)).st_mtime_ns for f in os.listdir(tiny_model_dir)}
    assert after == before
    assert os.path.exists(config_file)
    # no temporary build directories were left behind
    assert not [d for d in os.listdir(os.path.dirname(tiny_model_dir)) if ".tmp" in d]


def test_cache_key_depends_on_config_and_corpus():
    fp = tiny_mod.build_fingerprint
    base = TinyModelConfig(**SMALL)
    assert fp(["a", "b"], base) == fp(["a", "b"], TinyModelConfig(**SMALL))
    assert fp(["a", "b"], base) != fp(["a", "c"], base)
    assert fp(["a", "b"], base) != fp(["ab"], base)
    assert fp(["a"], base) != fp(["a"], TinyModelConfig(**{**SMALL, "hidden_size": 64}))
    assert fp(["a"], base) != fp(["a"], TinyModelConfig(**SMALL, seed=1))


def test_build_tiny_model_rejects_empty_corpus(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        build_tiny_model([], TinyModelConfig(**SMALL), tmp_path)


@pytest.mark.parametrize(
    "bad",
    [
        {"hidden_size": 0},
        {"vocab_size": -5},
        {"num_layers": 1.5},
        {"intermediate_size": "64"},
        {"num_heads": 0},
        {"hidden_size": 30, "num_heads": 4},  # not divisible
        {"num_heads": 4, "num_kv_heads": 3},  # not divisible
    ],
)
def test_tiny_model_config_rejects_bad_sizes(bad):
    with pytest.raises(ValueError):
        TinyModelConfig(**{**SMALL, **bad})


# --------------------------------------------------------------------------- device / dtype
def test_resolve_device_auto_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == (torch.device("cpu"), torch.float32)
    assert resolve_device("auto", "auto") == (torch.device("cpu"), torch.float32)
    assert resolve_device("cpu", "bf16") == (torch.device("cpu"), torch.bfloat16)
    assert resolve_device("cpu", "float16") == (torch.device("cpu"), torch.float16)
    with pytest.raises(ValueError, match="CUDA"):
        resolve_device("cuda")


@pytest.mark.parametrize("dtype", ["float64", "half", "int8", ""])
def test_resolve_device_rejects_unknown_dtype(dtype):
    with pytest.raises(ValueError, match="dtype"):
        resolve_device("cpu", dtype)


# --------------------------------------------------------------------------- prepare_tokenizer
def _chatml_tokenizer_without_pad():
    """A word-level ChatML tokenizer whose pad token is its eos token (like many HF models)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<|im_start|>", "<|im_end|>", "user", "assistant", "system", "hi", "ok", "\n"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)} | {"[UNK]": len(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|im_end|>", unk_token="[UNK]", padding_side="right"
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    return tok


def _model_for(tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return Qwen2ForCausalLM(cfg)


def test_prepare_tokenizer_never_changes_the_checkpoint():
    tok = _chatml_tokenizer_without_pad()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # no generation block
    assert tok.pad_token_id == tok.eos_token_id
    n_before = len(tok)
    model = _model_for(tok)
    rows = model.get_input_embeddings().weight.shape[0]
    out = prepare_tokenizer(tok, model)
    assert out is tok
    # pad == eos is kept: no token added, no embedding row, the checkpoint's own template
    assert tok.pad_token_id == tok.eos_token_id and len(tok) == n_before
    assert model.get_input_embeddings().weight.shape[0] == rows
    assert tok.chat_template == "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert tok.padding_side == "left"  # in memory only (exports copy the files)


def test_prepare_tokenizer_without_a_pad_token_pads_with_eos():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({"</s>": 0, "a": 1, "[UNK]": 2}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    plain = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="</s>", unk_token="[UNK]")
    prepare_tokenizer(plain)
    assert plain.pad_token_id == plain.eos_token_id == 0 and len(plain) == 3


def test_a_model_dir_that_ships_its_own_code_never_runs_it(tiny_model_dir, tmp_path):
    import json
    import shutil
    import subprocess
    import sys

    marker = tmp_path / "ran"
    outputs = []
    for model_type in ("qwen2", "evil"):  # a known architecture (loads natively) and an unknown one (refused)
        evil = tmp_path / model_type
        shutil.copytree(tiny_model_dir, evil)
        (evil / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
        config = json.loads((evil / "config.json").read_text())
        config["auto_map"] = {"AutoConfig": "modeling_evil.C", "AutoModelForCausalLM": "modeling_evil.M"}
        config["model_type"] = model_type
        (evil / "config.json").write_text(json.dumps(config))
        # a subprocess that would answer "y" if transformers asked whether to run the code
        code = (
            "from ragen_torchrl.models.loading import load_pretrained\nfrom ragen_torchrl.model_source import ModelSourceError\n"
            f"try:\n    m, _ = load_pretrained({str(evil)!r}, device='cpu', dtype='float32'); print('loaded', type(m).__name__)\n"
            "except ModelSourceError as e:\n    print('refused:', e)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], input="y\n", capture_output=True, text=True, timeout=300)
        outputs.append(out.stdout)
    assert "loaded Qwen2ForCausalLM" in outputs[0]
    assert "refused:" in outputs[1] and "its own code" in outputs[1], outputs[1]
    assert not marker.exists()
