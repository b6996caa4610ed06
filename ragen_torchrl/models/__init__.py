"""Models: loading any Hugging Face causal LM as a policy, the tiny offline model, entropy recording,
generation that keeps each row's KV cache across turns.

Names are imported from their submodules on first use.

Example:
    >>> from ragen_torchrl.models import resolve_device
    >>> resolve_device("cpu", "auto")
    (device(type='cpu'), torch.float32)
"""

from .. import lazy_exports

_EXPORTS = {
    "load_pretrained": ".loading",
    "prepare_tokenizer": ".loading",
    "resolve_device": ".loading",
    "wrapper_chat_template": ".loading",
    "check_model_source": ".loading",
    "ModelSourceError": ".loading",
    "TinyModelConfig": ".tiny",
    "build_tiny_model": ".tiny",
    "train_tokenizer": ".tiny",
    "EntropyRecorder": ".entropy_recorder",
    "attach_entropy_recorder": ".entropy_recorder",
    "TurnCachePolicy": ".turn_cache",
    "DEFAULT_MAX_CACHED_TOKENS": ".turn_cache",
    "check_turn_cache_settings": ".turn_cache",
    "reusable_length": ".turn_cache",
}

# the same names as _EXPORTS (a literal list, for static tools)
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
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
