"""Loading any Hugging Face causal LM (or the tiny offline one) as a policy.

Example:
    >>> from ragen_torchrl.models.loading import resolve_device
    >>> resolve_device("cpu", "auto")
    (device(type='cpu'), torch.float32)
"""

from __future__ import annotations

import logging
import warnings

import torch

from .tiny import CHAT_TEMPLATE, PAD_TOKEN

log = logging.getLogger(__name__)


def resolve_device(device: str = "auto", dtype: str = "auto") -> tuple[torch.device, torch.dtype]:
    """``auto`` picks CUDA with bf16 when present, else CPU with fp32.

    Raises:
        ValueError: unknown dtype name, or CUDA requested but not available.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("model.device is 'cuda' but CUDA is not available on this machine")
    if dtype == "auto":
        return dev, (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in names:
        raise ValueError(f"unknown model.dtype {dtype!r}; valid: auto, {', '.join(names)}")
    return dev, names[dtype]


def prepare_tokenizer(tokenizer, model=None):
    """Make a tokenizer safe for multi-turn RL with torchrl.

    * a pad token distinct from the end-of-turn token (torchrl strips pad tokens; a
      shared id would delete every end-of-turn token) — added, and the model's
      embeddings resized, when missing;
    * a chat template with a ``{% generation %}`` block (needed for the assistant-token
      mask): ChatML models without one get our ChatML template, which keeps the
      end-of-turn token inside the trained span.
    """
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        tokenizer.add_special_tokens({"pad_token": PAD_TOKEN})
        if model is not None:
            model.resize_token_embeddings(len(tokenizer))
    tokenizer.padding_side = "left"
    template = tokenizer.chat_template or ""
    if "{% generation %}" not in template and "{%- generation %}" not in template:
        if "<|im_start|>" in tokenizer.get_vocab():
            tokenizer.chat_template = CHAT_TEMPLATE
        else:
            warnings.warn(
                "the tokenizer's chat template has no {% generation %} block; assistant-token masks "
                "will be unavailable. Set tokenizer.chat_template to a template with one.",
                stacklevel=2,
            )
    if model is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return tokenizer


def wrapper_chat_template(tokenizer) -> str | None:
    """The tokenizer's own chat template when it can produce assistant masks, else ``None``.

    Pass it as ``chat_template=`` to torchrl's LLM wrappers: without it, torchrl picks a
    built-in template by matching the tokenizer's ``name_or_path`` against model-family
    names ("qwen", "llama", ...), so a directory such as ``tiny-qwen2-<hash>`` (or any
    path containing such a word) silently swaps in a different template, whose assistant
    mask leaves out the end-of-turn token (or whose format differs from SFT's altogether).
    """
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and ("{% generation %}" in template or "{%- generation %}" in template):
        return template
    return None


def load_pretrained(path: str, device: str = "auto", dtype: str = "auto"):
    """Load tokenizer + causal LM through ``from_pretrained`` and put the model in eval mode.

    torchrl's GRPOLoss expects the policy in eval mode (dropout off) so that behaviour
    and current log-probs match.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev, dt = resolve_device(device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dt)
    tokenizer = prepare_tokenizer(tokenizer, model)
    model.to(dev).eval()
    return model, tokenizer
