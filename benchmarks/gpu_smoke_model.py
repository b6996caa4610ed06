"""A Qwen2.5-0.5B-shaped model with random weights and the package's offline tokenizer, saved for
``model.name_or_path`` (no download): the model of ``benchmarks/gpu_smoke.sh``.

The tokenizer is the tiny model's (byte-level BPE trained on FrozenLake text, ChatML template with a
``{% generation %}`` block); the transformer has Qwen2.5-0.5B's shape (24 layers, hidden 896, 14
query / 2 key-value heads, MLP 4864, tied embeddings). Its vocabulary is the tokenizer's (a few
thousand tokens), not Qwen's 151,936: every id the model can sample decodes, and generation cost is
dominated by the 24 layers anyway (about 0.36B parameters instead of 0.49B).

    python benchmarks/gpu_smoke_model.py /tmp/qwen05_shape          # the full shape
    python benchmarks/gpu_smoke_model.py /tmp/m --layers 2 --hidden 64 --intermediate 128 --heads 4 --kv-heads 2

Prints the directory it wrote.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def build(
    out_dir: str,
    *,
    layers: int = 24,
    hidden: int = 896,
    intermediate: int = 4864,
    heads: int = 14,
    kv_heads: int = 2,
    vocab: int = 4096,
    episodes: int = 200,
    seed: int = 0,
) -> str:
    """Write tokenizer + randomly initialised Qwen2 model to ``out_dir`` (``save_pretrained``).

    The package's own tiny-model builder (:func:`~ragen_torchrl.models.tiny.build_tiny_model`) at
    this shape; rope and norm settings are transformers' Qwen2 defaults (no effect on throughput).
    """
    import os
    import shutil
    import tempfile

    from ragen_torchrl.envs import make_env
    from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model
    from ragen_torchrl.trainer.demonstrations import tokenizer_corpus

    cfg = TinyModelConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        seed=seed,
    )
    corpus = tokenizer_corpus(make_env("frozenlake", num_envs=1), episodes, seed=seed)
    path = Path(out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        built = build_tiny_model(corpus, cfg, tmp)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(built, path)
    config = json.loads((path / "config.json").read_text())
    print(f"# vocab {config['vocab_size']}, {layers} layers x hidden {hidden}")
    return str(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--intermediate", type=int, default=4864)
    parser.add_argument("--heads", type=int, default=14)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary the tokenizer is trained to")
    parser.add_argument(
        "--episodes", type=int, default=200, help="FrozenLake demonstrations the tokenizer is trained on"
    )
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args(argv)
    print(
        build(
            a.out_dir,
            layers=a.layers,
            hidden=a.hidden,
            intermediate=a.intermediate,
            heads=a.heads,
            kv_heads=a.kv_heads,
            vocab=a.vocab,
            episodes=a.episodes,
            seed=a.seed,
        )
    )


if __name__ == "__main__":
    main()
