"""benchmarks/step_floor.py runs on any local checkpoint and adds its parts up as it prints them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("step_floor", ROOT / "benchmarks" / "step_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_floor_is_the_sum_of_its_parts_and_the_ratio_is_printed(tmp_path, capsys):
    bench = load_bench()
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(tmp_path / "m")
    threads = torch.get_num_threads()
    try:
        bench.main([f"--model={tmp_path / 'm'}", "--rows=4", "--prompts=2", "--prompt-tokens=8", "--new-tokens=3",
                    "--reply-tokens=2", "--threads=1", "--repeats=1", "--step-seconds=x=2.0"])  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    # 2 layers x 7 projections + the tied LM head: 15 weights
    assert len(bench.linear_weights(LlamaForCausalLM(config))) == 15
    total, decode, prefill, loss, adamw = map(float, re.search(
        r"floor of one step: ([\d.]+) s = 3 x decode ([\d.]+) \+ prefill ([\d.]+) \+ loss ([\d.]+) \+ AdamW ([\d.]+)", out
    ).groups())  # fmt: skip
    assert abs(total - (decode + prefill + loss + adamw)) <= 0.02
    assert f"floor / x (2.00 s): {total / 2:.2f}"[:-1] in out
    assert "prefill, 16 tokens" in out and "loss forward + backward, 24 tokens" in out
