"""An offline tiny vision-language policy: a small Qwen2-VL and its processor, built in-process.

Like :mod:`ragen_torchrl.models.tiny`, nothing is downloaded:

* the tokenizer is the tiny model's byte-level BPE trained on the task text
  (:func:`~ragen_torchrl.models.tiny.train_tokenizer`), extended with Qwen2-VL's special tokens
  (:data:`VL_SPECIAL_TOKENS`: ``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``,
  ``<|video_pad|>``);
* the image processor is Qwen2-VL's (its PIL backend) constructed directly (patch 14, 2 x 2 merge,
  so a 28 px tile is one image token) with small ``min_pixels`` / ``max_pixels``, so a board
  image whose sides are multiples of 28 is never resized;
* the chat template (:data:`VL_CHAT_TEMPLATE`) is the tiny model's ChatML, whose messages may
  also be content lists: an ``{"type": "image"}`` part renders as
  ``<|vision_start|><|image_pad|><|vision_end|>`` (the processor expands the pad to one token per
  merged patch group), a text part as its text; the assistant reply and its ``<|im_end|>`` are in
  the ``{% generation %}`` block, as in the text template;
* the model is ``Qwen2VLForConditionalGeneration`` from a small :class:`TinyVLConfig`.

The tokenizer, image processor and model are saved with ``save_pretrained`` and come back with
``AutoTokenizer`` / ``AutoImageProcessor`` / ``AutoModelForImageTextToText.from_pretrained``
(:func:`load_tiny_vl`), the path a real Qwen2-VL checkpoint takes. ``Qwen2VLProcessor`` is not
used: it also needs a video processor, which needs ``torchvision`` (not a dependency); the
prompt expansion it does is :class:`~ragen_torchrl.models.vision.VLProcessor`.

Example:
    >>> import tempfile
    >>> path = build_tiny_vl_model(["The board is in the image."] * 20,
    ...                            TinyVLConfig(vocab_size=300, hidden_size=32, num_layers=1, vision_depth=1),
    ...                            tempfile.mkdtemp())
    >>> model, processor = load_tiny_vl(path)
    >>> type(model).__name__, processor.tokenizer.convert_ids_to_tokens(model.config.image_token_id)
    ('Qwen2VLForConditionalGeneration', '<|image_pad|>')
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from .build_cache import build_once
from .tiny import (
    TinyModelConfig,
    build_fingerprint,
    is_saved_build,
    save_build,
    text_config_kwargs,
    train_tokenizer,
)
from .vision import VL_CHAT_TEMPLATE, load_vl_processor

__all__ = [
    "TINY_VL_PREFIX",
    "VL_CHAT_TEMPLATE",
    "VL_SPECIAL_TOKENS",
    "TinyVLConfig",
    "build_tiny_vl_model",
    "load_tiny_vl",
    "tiny_image_processor",
]

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"
#: Qwen2-VL's special tokens, added to the trained tokenizer
VL_SPECIAL_TOKENS = [VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD]
#: directory-name prefix of built models (the rest is a hash of the config and the corpus)
TINY_VL_PREFIX = "tiny-qwen2vl-"


@dataclass(frozen=True)
class TinyVLConfig(TinyModelConfig):
    """Sizes of the tiny vision-language model (text tower as :class:`~ragen_torchrl.models.tiny.TinyModelConfig`).

    ``mrope_section`` splits the text attention head's rotary frequencies between the temporal,
    height and width positions of Qwen2-VL's multimodal rope; ``None`` splits
    ``head_dim // 2`` as evenly as possible (temporal first). ``max_image_tokens`` bounds the
    image processor's ``max_pixels`` (``28 * 28`` pixels per token).

    Example:
        >>> TinyVLConfig(hidden_size=128, num_heads=4).rope_sections()
        [6, 5, 5]
        >>> TinyVLConfig(hidden_size=30, num_heads=4)
        Traceback (most recent call last):
        ...
        ValueError: model.hidden_size (30) must be divisible by model.num_heads (4)
    """

    vision_depth: int = 2
    vision_embed_dim: int = 64
    vision_num_heads: int = 4
    max_image_tokens: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.vision_embed_dim % self.vision_num_heads:
            raise ValueError(
                f"model.vision_embed_dim ({self.vision_embed_dim}) must be divisible by "
                f"model.vision_num_heads ({self.vision_num_heads})"
            )
        if (self.hidden_size // self.num_heads) % 2 or self.hidden_size // self.num_heads < 6:
            raise ValueError(
                f"model.hidden_size / model.num_heads = {self.hidden_size // self.num_heads} must be even and >= 6 "
                "(multimodal rope splits half the head between 3 position axes)"
            )

    def rope_sections(self) -> list[int]:
        """Qwen2-VL's ``mrope_section``: ``head_dim // 2`` rotary pairs over (time, height, width)."""
        half = self.hidden_size // self.num_heads // 2
        base, extra = divmod(half, 3)
        return [base + (i < extra) for i in range(3)]

    @classmethod
    def from_model_config(cls, model) -> TinyVLConfig:
        """The sizes of a ``model=tiny_vl`` config node (a mapping holding this class's fields).

        Example:
            >>> TinyVLConfig.from_model_config({"hidden_size": 64, "num_heads": 4, "device": "cpu"}).hidden_size
            64
        """
        return cls(**{k: model[k] for k in asdict(cls()) if k in model and k != "seed"})


def tiny_image_processor(max_image_tokens: int = 256):
    """Qwen2-VL's image processor built offline: 14 px patches merged 2 x 2 (28 px per image token),
    between 4 and ``max_image_tokens`` image tokens per image (smaller or larger images are resized).

    Example:
        >>> import numpy as np
        >>> out = tiny_image_processor()(images=[np.zeros((3, 56, 84), dtype=np.uint8)], return_tensors="pt")
        >>> out["image_grid_thw"].tolist(), tuple(out["pixel_values"].shape)  # 4 x 6 patches of 3*2*14*14 values
        ([[1, 4, 6]], (24, 1176))
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    # the PIL backend: the default one needs torchvision, which this package does not require
    return Qwen2VLImageProcessorPil(
        min_pixels=4 * 28 * 28,
        max_pixels=max_image_tokens * 28 * 28,
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )


def build_tiny_vl_model(
    corpus: Iterable[str], cfg: TinyVLConfig | None = None, cache_dir: str | os.PathLike = "."
) -> str:
    """Build (or reuse) the tiny processor + Qwen2-VL model and return the saved directory.

    The directory name carries a hash of ``cfg`` and the corpus, so a second call with the same
    inputs returns at once; the build is written to a temporary directory and renamed.
    """
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    cfg = cfg or TinyVLConfig()
    corpus = list(corpus)
    if not corpus:
        raise ValueError("the tokenizer corpus is empty")
    target = Path(cache_dir).expanduser() / f"{TINY_VL_PREFIX}{build_fingerprint(corpus, cfg)}"

    def build():
        tokenizer = train_tokenizer(corpus, cfg.vocab_size)
        tokenizer.add_special_tokens({"additional_special_tokens": VL_SPECIAL_TOKENS})
        tokenizer.chat_template = VL_CHAT_TEMPLATE
        ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VL_SPECIAL_TOKENS}
        config = Qwen2VLConfig(
            text_config=dict(
                **text_config_kwargs(cfg, tokenizer),
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": cfg.rope_sections()},
            ),
            vision_config=dict(
                depth=cfg.vision_depth,
                embed_dim=cfg.vision_embed_dim,
                hidden_size=cfg.hidden_size,
                num_heads=cfg.vision_num_heads,
                mlp_ratio=2,
                patch_size=14,
                spatial_merge_size=2,
                temporal_patch_size=2,
            ),
            image_token_id=ids[IMAGE_PAD],
            video_token_id=ids[VIDEO_PAD],
            vision_start_token_id=ids[VISION_START],
            vision_end_token_id=ids[VISION_END],
            tie_word_embeddings=True,
        )
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            model = Qwen2VLForConditionalGeneration(config)
        save_build(target, model, tokenizer, tiny_image_processor(cfg.max_image_tokens))

    return build_once(target, build, ready=is_saved_build)


def load_tiny_vl(path: str | os.PathLike, device: str = "cpu", dtype: str = "float32"):
    """``(model, processor)`` of a saved vision-language checkpoint (the tiny one or any Qwen2-VL-style
    directory) in eval mode: the model through ``AutoModelForImageTextToText``, the processor through
    :func:`~ragen_torchrl.models.vision.load_vl_processor`."""
    import torch
    from transformers import AutoModelForImageTextToText

    processor = load_vl_processor(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
    model.eval()
    return model, processor
