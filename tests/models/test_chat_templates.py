"""Checkpoints with the published templates of Llama-3.1/3.2, Qwen2.5, Gemma-3 and SmolLM2 (none with a
``{% generation %}`` block; tiny random models built offline with each family's special tokens): the
assistant tokens are found by construction, every trained token of every turn was sampled, two training
iterations run, and the exported policy is the checkpoint unchanged but for its weights."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest
import torch
from helpers import RecordingPolicy
from hydra import compose, initialize_config_dir

from ragen_torchrl import keys as K
from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.models.chat_template import ChatTemplateError, assistant_token_masks, trainable_chat_template
from ragen_torchrl.models.loading import TOKENIZER_FILES, load_pretrained
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.demonstrations import tokenizer_corpus
from ragen_torchrl.trainer.loop import Trainer

TEMPLATES = Path(__file__).parent / "templates"
TAGS = ["<think>", "</think>", "<answer>", "</answer>"]

#: special tokens, bos / eos / pad and the generation config's end ids, as the published checkpoints have them
FAMILIES = {
    "llama3": dict(
        specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"],
        bos="<|begin_of_text|>", eos="<|eot_id|>", pad=None, ends=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
        eot="<|eot_id|>",
    ),
    "qwen2_5": dict(
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        bos=None, eos="<|im_end|>", pad="<|endoftext|>", ends=["<|im_end|>", "<|endoftext|>"], eot="<|im_end|>",
    ),
    "gemma3": dict(
        specials=["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
        bos="<bos>", eos="<eos>", pad="<pad>", ends=["<eos>", "<end_of_turn>"], eot="<end_of_turn>",
    ),
    "smollm2": dict(
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        bos="<|im_start|>", eos="<|im_end|>", pad="<|im_end|>", ends=["<|im_end|>"], eot="<|im_end|>",
    ),
}  # fmt: skip


def build_checkpoint(family: str, path: Path) -> Path:
    """A tiny random Llama-architecture checkpoint with ``family``'s tokens, template and end ids, saved."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    spec = FAMILIES[family]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=spec["specials"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(
        tokenizer_corpus(make_env("frozenlake", num_envs=1), num_episodes=30) + ["model\nuser\n"], trainer
    )
    core.add_tokens(TAGS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=spec["bos"], eos_token=spec["eos"], pad_token=spec["pad"], padding_side="right"
    )
    tok.chat_template = (TEMPLATES / f"{family}.jinja").read_text()
    ends = tok.convert_tokens_to_ids(spec["ends"])
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=ends, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = ends
    model.generation_config.pad_token_id = tok.pad_token_id
    path.mkdir(parents=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("templates")
    return {family: build_checkpoint(family, root / family) for family in FAMILIES}


CONV = [
    {"role": "system", "content": "FrozenLake. Reach G."},
    {"role": "user", "content": "Player (1,1) Goal (2,2)."},
    {"role": "assistant", "content": "<think>go down</think><answer>Down</answer>"},
    {"role": "user", "content": "Player (2,1) Goal (2,2)."},
    {"role": "assistant", "content": "<think>right</think><answer>Right</answer>"},
]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_assistant_tokens_are_each_reply_and_its_end_of_turn_token(checkpoints, family):
    _, tok = load_pretrained(str(checkpoints[family]), device="cpu", dtype="float32")
    assert "{% generation %}" not in tok.chat_template
    trainable_chat_template(tok, prime="<think>")  # the prime survives every one of these templates
    ((ids, mask),) = assistant_token_masks(tok, [CONV])
    eot = FAMILIES[family]["eot"]
    spans, start = [], None  # runs of trained tokens
    for i, m in enumerate([*mask.tolist(), False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append(tok.decode(ids[start:i]))
            start = None
    assert spans == [CONV[2]["content"] + eot, CONV[4]["content"] + eot]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_trained_token_of_every_turn_was_sampled(checkpoints, family):
    model, tok = load_pretrained(str(checkpoints[family]), device="cpu", dtype="float32")
    policy = make_generation_policy(model, tok, max_new_tokens=6, temperature=1.0, reply_prime="<think>")
    recording = RecordingPolicy(policy)  # what the policy read and sampled at each turn, per env row
    torch.manual_seed(0)
    recs = collect_rollouts(make_env("frozenlake", num_envs=4, max_turn=3), recording, [3, 5], 2)
    ends = set(model.generation_config.eos_token_id)
    for i in range(4):
        ids, mask = recs[i].get(K.TOKENS_TRAJECTORY), recs[i].get(K.MASKS_TRAJECTORY)
        turns = recording.seen[i]
        assert len(turns) == int(recs[i].get(K.NUM_TURNS))
        for prompt, reply in turns:
            assert torch.equal(ids[: prompt.numel()], prompt)
            assert torch.equal(ids[prompt.numel() : prompt.numel() + reply.numel()], reply)
            assert not set(reply[:-1].tolist()) & ends  # a reply stops at its first end id, whichever it is
            assert tok.decode(prompt[-1:]) == "<think>"
        assert torch.equal(ids[mask], torch.cat([r for _, r in turns]))  # every trained token was sampled


def test_a_template_that_drops_the_reasoning_is_refused_with_a_clear_message(checkpoints):
    _, tok = load_pretrained(str(checkpoints["qwen2_5"]), device="cpu", dtype="float32")
    stripping = tok.chat_template.replace("message.content", "message.content.split('</think>')[-1]")
    with pytest.raises(ChatTemplateError, match="writes assistant messages verbatim"):
        trainable_chat_template(tok, stripping, prime="<think>")
    # one that keeps the reasoning but not the opening tag: the prime would be lost
    untagged = tok.chat_template.replace("message.content", "message.content.replace('<think>', '')")
    with pytest.raises(ChatTemplateError):
        trainable_chat_template(tok, untagged, prime="<think>")
    refusing = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        trainable_chat_template(tok, refusing + tok.chat_template)


def _cfg(path: Path, cache: Path, run: Path):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                "model=hf",
                f"model.name_or_path={path}",
                f"model.cache_dir={cache}",
                "model.device=cpu",
                "model.threads=1",
                "trainer=smoke",
                "trainer.val_levels=2",
                "trainer.log_text_samples=0",
                "sft.steps=2",
                "sft.episodes=4",
                "rollout.max_new_tokens=8",
                "sft.reply_budget=warn",
                "diagnostics.mi.enabled=false",
                f"hydra.run.dir={run}",
            ],
        )


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_two_iterations_train_and_the_export_is_the_checkpoint_unchanged(checkpoints, family, tmp_path):
    src = checkpoints[family]
    trainer = Trainer(_cfg(src, tmp_path / "cache", tmp_path / "run"), run_dir=tmp_path / "run")
    summary = trainer.fit()
    assert [h["iteration"] for h in summary["history"]] == [1, 2]
    assert all(h["train/assistant_tokens"] > 0 for h in summary["history"])
    policy = Path(summary["final_policy"])
    for name in TOKENIZER_FILES:  # the checkpoint's own tokenizer files, byte for byte
        if (src / name).is_file():
            assert filecmp.cmp(src / name, policy / name, shallow=False), name
    before, after = json.loads((src / "config.json").read_text()), json.loads((policy / "config.json").read_text())
    assert after["vocab_size"] == before["vocab_size"] and after["pad_token_id"] == before["pad_token_id"]
    model, tok = load_pretrained(str(policy), device="cpu", dtype="float32")
    assert model.get_input_embeddings().weight.shape[0] == before["vocab_size"] and len(tok) == before["vocab_size"]
    x = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.allclose(model(x).logits, trainer.model(x).logits, atol=1e-5)  # save -> from_pretrained


def test_torchrls_wrapper_is_refused_for_a_checkpoint_that_pads_with_its_end_of_turn(checkpoints):
    model, tok = load_pretrained(str(checkpoints["smollm2"]), device="cpu", dtype="float32")
    assert tok.pad_token_id == tok.eos_token_id
    for kwargs in ({"trajectory": "history"}, {"kv_cache": False}):
        with pytest.raises(ValueError, match="pads with its end-of-turn token"):
            make_generation_policy(model, tok, **kwargs)
    make_generation_policy(model, tok)  # the default token trajectories cut replies at their own end token
