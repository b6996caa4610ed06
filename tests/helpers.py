"""Constants and helpers shared by test files in several folders.

``pyproject.toml`` puts ``tests/`` on ``sys.path`` (``[tool.pytest.ini_options] pythonpath``),
so any test file imports these with ``from helpers import ...`` whatever its folder.
Fixtures stay in ``conftest.py``, which pytest loads for every folder below ``tests/``.
"""

from __future__ import annotations

#: ragen-train overrides for a seconds-long end-to-end run: a one-layer model warm-started for two
#: steps on four demonstrations, on the CPU, one thread (tests add what they need on top)
TINY_RUN = [
    "sft.steps=2",
    "sft.episodes=4",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_layers=1",
    "model.vocab_size=300",
    "model.device=cpu",
    "model.threads=1",
]

#: one training iteration of a preset at its default batch shape, small validation set and model
SMALL = [
    "trainer.total_iterations=1",
    "trainer.val_levels=2",
    "trainer.log_text_samples=0",
    *TINY_RUN,
]

#: sizes of the session's tiny model (small enough that a forward pass takes milliseconds)
TINY_SIZES = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2)


def load_tiny(path: str):
    """A fresh (model, tokenizer) from ``path`` on CPU/fp32, in eval mode."""
    from ragen_torchrl.models.loading import load_pretrained

    return load_pretrained(path, device="cpu", dtype="float32")
