"""The processor of a Qwen2-VL-style checkpoint: its tokenizer and image processor, the chat template.

:class:`VLProcessor` renders one turn segment of a visual episode with the chat template, expands each
image placeholder to the image's token count (``t * h * w / merge**2`` of its ``image_grid_thw``),
runs the image processor (each image's ``pixel_values`` cached by its bytes) and gives a padded
batch's image inputs (:meth:`VLProcessor.batch_inputs`); :func:`load_vl_processor` builds it from a
saved checkpoint; :data:`VL_CHAT_TEMPLATE` is the ChatML template with Qwen2-VL's vision block that a
checkpoint without a fitting one gets (:func:`~ragen_torchrl.models.loading.load_vl_policy`).

Sampling and scoring with it are :mod:`ragen_torchrl.models.vision`'s; loading a policy is
:mod:`ragen_torchrl.models.loading`'s.

Example:
    >>> class Tokenizer:
    ...     unk_token_id = 0
    ...     def convert_tokens_to_ids(self, token):
    ...         return 5 if token == IMAGE_PAD else 0
    >>> VLProcessor(Tokenizer(), image_processor=None).image_token_id
    5
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["IMAGE_PAD", "VL_CHAT_TEMPLATE", "VLProcessor", "load_vl_processor"]

IMAGE_PAD = "<|image_pad|>"

#: ChatML over string or content-list messages; images render as Qwen2-VL's vision block
VL_CHAT_TEMPLATE = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'image' -%}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ render(message['content']) + '<|im_end|>' }}"
    "{% endgeneration %}{{ '\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + render(message['content']) + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


class VLProcessor:
    """Tokenizer + image processor of a Qwen2-VL-style checkpoint (what ``Qwen2VLProcessor`` does for
    one prompt, without its video processor).

    The image processor's output for an image depends only on the image's pixels, and a board
    state is seen many times (every warm-start step and every loss pass re-reads the same boards),
    so :meth:`images` keeps each image's ``pixel_values`` in a least-recently-used cache keyed by
    the image's bytes, bounded by ``cache_mb`` (0 switches it off).

    Args:
        tokenizer: a tokenizer with a chat template that renders ``{"type": "image"}`` parts as
            ``<|vision_start|><|image_pad|><|vision_end|>``.
        image_processor: Qwen2-VL's image processor (``merge_size``, ``image_grid_thw`` output).
        cache_mb: the most megabytes of processed images kept (``pixel_values`` of one 112 x 112
            board: 0.3 MB).
    """

    def __init__(self, tokenizer: Any, image_processor: Any, cache_mb: float = 512.0) -> None:
        if cache_mb < 0:
            raise ValueError(f"cache_mb must be >= 0, got {cache_mb}")
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.cache_bytes = int(cache_mb * 2**20)
        self._cache: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._cached_bytes = 0
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        if self.image_token_id is None or self.image_token_id == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {IMAGE_PAD} token: not a Qwen2-VL-style vision-language tokenizer")

    @property
    def end_of_turn_id(self) -> int:
        """The token the chat template closes an assistant message with (``<|im_end|>`` in ChatML).

        What the text rollouts append after a reply the token budget cut (the first token of the
        template's text after the reply, :mod:`~ragen_torchrl.collectors.token_trajectory`), and what
        the warm start trains at the end of each reply; the tokenizer's ``eos_token_id`` when the
        template writes nothing there.
        """
        template = self.tokenizer.chat_template
        if getattr(self, "_end_of_turn", (None,))[0] != template:  # once per template (it may be replaced)
            self._end_of_turn = (template, _end_of_turn_id(self.tokenizer))
        return self._end_of_turn[1]

    def images(self, images: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        """``pixel_values`` and ``image_grid_thw`` of uint8 ``[3, H, W]`` images (empty when there are none).

        The images the cache does not hold go through the image processor in one call; the result
        equals one call on all the images (the processor treats each image on its own).
        """
        if not images:
            return {"pixel_values": None, "image_grid_thw": torch.zeros(0, 3, dtype=torch.long)}
        arrays = [img.detach().cpu().contiguous().numpy() for img in images]
        if not self.cache_bytes:
            out = self.image_processor(images=arrays, return_tensors="pt")
            return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"].long()}
        keys = [(a.shape, str(a.dtype), hashlib.blake2b(a.tobytes(), digest_size=16).digest()) for a in arrays]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        fresh: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        if missing:
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            out = self.image_processor(images=[arrays[first[k]] for k in missing], return_tensors="pt")
            grids = out["image_grid_thw"].long()
            sizes = grids.prod(-1).tolist()
            for k, pixels, grid in zip(missing, out["pixel_values"].split(sizes), grids):
                fresh[k] = (pixels, grid)
        parts = [self._cache[k] if k in self._cache else fresh[k] for k in keys]
        for k in keys:
            if k in self._cache:
                self._cache.move_to_end(k)
        for k, entry in fresh.items():
            self._remember(k, entry)
        return {
            "pixel_values": torch.cat([p for p, _ in parts]),
            "image_grid_thw": torch.stack([g for _, g in parts]),
        }

    def _remember(self, key: tuple, entry: tuple[torch.Tensor, torch.Tensor]) -> None:
        size = entry[0].numel() * entry[0].element_size()
        if size > self.cache_bytes:
            return
        self._cache[key] = entry
        self._cached_bytes += size
        while self._cached_bytes > self.cache_bytes:
            _, (old, _) = self._cache.popitem(last=False)
            self._cached_bytes -= old.numel() * old.element_size()

    def image_token_count(self, grid_thw: torch.Tensor) -> int:
        return int(grid_thw.prod()) // self.image_processor.merge_size**2

    def batch_inputs(
        self, tokens: torch.Tensor, images: torch.Tensor, counts: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """The model's image keywords for a ``[N, T]`` batch of sequences: ``pixel_values``,
        ``image_grid_thw`` and ``mm_token_type_ids`` (``{}`` when no row has an image).

        ``images``: uint8 ``[N, K, 3, H, W]`` (row ``i``'s first ``counts[i]`` are real, in the order
        their placeholders appear in ``tokens``; all ``K`` when ``counts`` is ``None``) or a list of
        ``[K_i, 3, H, W]`` tensors. Raises ``ValueError`` when a row's image tokens do not match its images.
        """
        if isinstance(images, torch.Tensor):
            counts = torch.full((images.shape[0],), images.shape[1]) if counts is None else counts.reshape(-1)
            rows = [images[i, : int(c)] for i, c in enumerate(counts.tolist())]
        else:
            rows = list(images)
        if len(rows) != tokens.shape[0]:
            raise ValueError(f"{tokens.shape[0]} token rows but images for {len(rows)} rows")
        flat = [img for row in rows for img in row]
        if not flat:
            return {}
        vision = self.images(flat)
        types = (tokens == self.image_token_id).int()
        per_image = [self.image_token_count(g) for g in vision["image_grid_thw"]]
        start = 0
        for i, row in enumerate(rows):
            want = sum(per_image[start : start + len(row)])
            start += len(row)
            if int(types[i].sum()) != want:
                raise ValueError(
                    f"row {i} holds {int(types[i].sum())} image tokens but its {len(row)} images need {want}"
                )
        return {
            "pixel_values": vision["pixel_values"].to(tokens.device),
            "image_grid_thw": vision["image_grid_thw"].to(tokens.device),
            "mm_token_type_ids": types,
        }

    def encode_segment(self, chat: list[dict], grids: torch.Tensor, *, first: bool) -> list[int]:
        """Token ids of ``chat`` (HF messages with image parts) rendered as one turn segment: the
        messages, then the generation prompt; a later segment starts with the ``"\\n"`` that ends
        the previous assistant message. Each image placeholder is expanded to its image's tokens."""
        text = self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        if not first:
            text = "\n" + text
        parts = text.split(IMAGE_PAD)
        if len(parts) - 1 != len(grids):
            raise ValueError(f"the chat has {len(parts) - 1} image placeholders but {len(grids)} images were given")
        ids: list[int] = []
        for i, part in enumerate(parts):
            ids += self.tokenizer(part, add_special_tokens=False)["input_ids"]
            if i < len(grids):
                ids += [self.image_token_id] * self.image_token_count(grids[i])
        return ids


def load_vl_processor(path: str | os.PathLike) -> VLProcessor:
    """The :class:`VLProcessor` of a saved checkpoint (``AutoTokenizer`` + ``AutoImageProcessor``)."""
    from transformers import AutoImageProcessor, AutoTokenizer

    return VLProcessor(AutoTokenizer.from_pretrained(path), AutoImageProcessor.from_pretrained(path))


_REPLY = "\x00reply\x00"  # a reply text no template writes on its own


def _end_of_turn_id(tokenizer: Any) -> int:
    """The first token of the text the chat template writes after an assistant message's content."""
    chat = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _REPLY}]
    text = tokenizer.apply_chat_template(chat, tokenize=False)
    after = text[text.rfind(_REPLY) + len(_REPLY) :] if _REPLY in text else ""
    ids = tokenizer(after, add_special_tokens=False)["input_ids"] if after else []
    end = int(ids[0]) if ids else tokenizer.eos_token_id
    if end is None:
        raise ValueError("the chat template writes nothing after a reply and the tokenizer has no eos_token_id")
    return int(end)
