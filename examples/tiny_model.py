"""Build the offline tiny policy the other examples default to (no download).

A byte-level BPE tokenizer trained on FrozenLake text and a ~0.1M-parameter Qwen2 model, saved with
``save_pretrained`` so it loads like any Hugging Face checkpoint. The directory name is a hash of
the inputs, so a second call returns at once.

    python examples/tiny_model.py            # prints the model directory
"""

import tempfile

from ragen_torchrl.envs import make_env
from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model
from ragen_torchrl.trainer.demonstrations import tokenizer_corpus


def tiny_model_path(cache_dir: str | None = None) -> str:
    corpus = tokenizer_corpus(make_env("frozenlake", num_envs=1), num_episodes=40, seed=0)
    sizes = TinyModelConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2
    )
    return build_tiny_model(corpus, sizes, cache_dir or tempfile.gettempdir())


if __name__ == "__main__":
    print(tiny_model_path())
