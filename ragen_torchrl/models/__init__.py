"""Models: loading any Hugging Face causal LM as a policy, the tiny offline model, entropy recording,
generation that keeps each row's KV cache across turns.

Example:
    >>> from ragen_torchrl.models import resolve_device
    >>> resolve_device("cpu", "auto")
    (device(type='cpu'), torch.float32)
"""

from __future__ import annotations

from ..model_source import ModelSourceError, check_model_source
from .entropy_recorder import EntropyRecorder, attach_entropy_recorder
from .loading import (
    load_pretrained,
    prepare_tokenizer,
    resolve_device,
    wrapper_chat_template,
)
from .tiny import TinyModelConfig, build_tiny_model, train_tokenizer
from .turn_cache import DEFAULT_MAX_CACHED_TOKENS, TurnCachePolicy, check_turn_cache_settings, reusable_length

__all__ = [
    "DEFAULT_MAX_CACHED_TOKENS",
    "EntropyRecorder",
    "ModelSourceError",
    "TinyModelConfig",
    "TurnCachePolicy",
    "attach_entropy_recorder",
    "build_tiny_model",
    "check_model_source",
    "check_turn_cache_settings",
    "load_pretrained",
    "prepare_tokenizer",
    "resolve_device",
    "reusable_length",
    "train_tokenizer",
    "wrapper_chat_template",
]
