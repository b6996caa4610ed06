"""Vision-language policies: prompt encoding with images, cached multi-turn sampling, teacher-forced scoring.

A visual env's episode is one token sequence, built turn by turn as the text path's token-level
trajectories are: the first prompt (system + user message with its image, then the generation
prompt), each reply's ids as sampled (ending with the end-of-turn token), then each env turn
(``"\\n"`` + the next user message with its image + the generation prompt; a reply the token
budget cut gets its end-of-turn token there, untrained; a reply prime such as ``"<think>"`` follows
each generation prompt, read, never sampled). :class:`~ragen_torchrl.models.vl_processor.VLProcessor`
renders one such segment with the chat template, expands each image placeholder to the image's
token count (``t * h * w / merge**2`` of its ``image_grid_thw``) and runs the image processor.

:class:`VLConversation` plays one row's episode with a Qwen2-VL-style model
(``Qwen2VLForConditionalGeneration`` and relatives): a KV cache is kept across turns, and each
image is run through the vision tower once, in the turn it arrives (its features are handed to
the model with ``mm_encoder_outputs``). Positions are Qwen2-VL's multimodal rope ids
(``model.model.get_rope_index``): an image's tokens get (time, row, column) ids, and the text after
an image continues from the image's start plus its largest side in merged patches (not from its
token count), so positions are computed by the model's own rule over the whole sequence and
passed explicitly; decoded tokens take the last text position + 1 on all three axes.
:class:`VLBatchRollout` plays many rows together (what the trainer's rollouts use,
:class:`~ragen_torchrl.collectors.vl_policy.VLRolloutPolicy`): each image's features are computed
once, each turn re-encodes the rows' sequences in one left-padded forward and decodes all rows per
forward. Neither samples a vision placeholder token (:func:`suppress_vision_tokens`).

Training data: :func:`vl_sequence` lays a demonstration out as the rollouts lay out a trajectory
(the warm start), :meth:`VLProcessor.batch_inputs` gives a padded batch's image inputs (the losses).

The processor itself is :mod:`ragen_torchrl.models.vl_processor`'s, and loading a text or
Qwen2-VL-style checkpoint (:func:`~ragen_torchrl.models.loading.load_policy`) is
:mod:`ragen_torchrl.models.loading`'s; both modules' names are importable from here too.

:func:`score_conversation` is the teacher-forced pass over a whole conversation with all its
images (no cache): the behaviour / reference / training log-probs. Its log-probs of the sampled
tokens equal the rollout's (a test checks within 1e-4).

Example:
    >>> import tempfile, torch
    >>> from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
    >>> path = build_tiny_vl_model(["The board is in the image."] * 20,
    ...     TinyVLConfig(vocab_size=300, hidden_size=32, num_layers=1, vision_depth=1), tempfile.mkdtemp())
    >>> model, processor = load_tiny_vl(path)
    >>> image = torch.zeros(3, 56, 56, dtype=torch.uint8)
    >>> row = VLConversation(model, processor)
    >>> reply = row.play([("system", "rules"), ("user", "The board is in the image.")], [image], max_new_tokens=3)
    >>> scored = score_conversation(model, row.input_ids(), row.pixel_values(), row.image_grid_thw())
    >>> bool(torch.allclose(scored[row.sampled_mask()], row.log_probs()[row.sampled_mask()], atol=1e-4))
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..envs.visual import image_chat
from .inverse_cdf import inverse_cdf_sample
from .loading import is_vision_language, load_policy, load_vl_policy
from .vl_processor import VL_CHAT_TEMPLATE, VLProcessor, load_vl_processor

__all__ = [
    "VL_CHAT_TEMPLATE",
    "VLBatchRollout",
    "VLConversation",
    "VLProcessor",
    "is_vision_language",
    "load_policy",
    "load_vl_policy",
    "load_vl_processor",
    "sample_step",
    "score_conversation",
    "stop_token_ids",
    "suppress_vision_tokens",
    "vl_sequence",
]


def stop_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids a vision-language reply stops at: every ``model.generation_config.eos_token_id``
    (one id or a list), as ``generate`` and the text rollouts stop; the tokenizer's
    ``eos_token_id`` when the generation config names none.

    Example:
        >>> class Config:
        ...     eos_token_id = [7, 3]
        >>> class Model:
        ...     generation_config = Config()
        >>> class Tokenizer:
        ...     eos_token_id = 7
        >>> sorted(stop_token_ids(Model(), Tokenizer()))
        [3, 7]
    """
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = frozenset(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None)
    if not ids:
        raise ValueError("neither the model's generation_config nor the tokenizer names an end-of-sequence token")
    return ids


def _rope_positions(model: Any, input_ids: torch.Tensor, image_token_id: int, grids: torch.Tensor) -> torch.Tensor:
    """Qwen2-VL's ``[3, 1, T]`` multimodal rope ids of one sequence (the model's own rule)."""
    types = (input_ids == image_token_id).int()
    if not bool(types.any()):
        return torch.arange(input_ids.shape[-1]).view(1, 1, -1).expand(3, 1, -1)
    positions, _ = model.model.get_rope_index(input_ids, mm_token_type_ids=types, image_grid_thw=grids)
    return positions


def score_conversation(
    model: Any,
    input_ids: torch.Tensor,
    pixel_values: torch.Tensor | None,
    image_grid_thw: torch.Tensor,
    *,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Teacher-forced log-probs ``[T]`` of a ``[T]`` sequence with its images, one pass, no cache:
    entry ``t`` is ``log p(input_ids[t] | input_ids[:t], images)`` (entry 0 is 0). Differentiable."""
    ids = input_ids.reshape(1, -1)
    types = (ids == model.config.image_token_id).int()
    kwargs: dict[str, Any] = {}
    if pixel_values is not None and len(image_grid_thw):
        kwargs = dict(pixel_values=pixel_values, image_grid_thw=image_grid_thw, mm_token_type_ids=types)
    # positions from the model's own rule (get_rope_index when there are images), no stale rope_deltas
    model.model.rope_deltas = None
    logits = suppress_vision_tokens(model(input_ids=ids, use_cache=False, **kwargs).logits[0, :-1].float(), model)
    logits = logits / temperature
    picked = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
    return torch.cat([picked.new_zeros(1), picked])


def suppress_vision_tokens(logits: torch.Tensor, model: Any) -> torch.Tensor:
    """``logits`` (``[..., V]``) with the vision placeholder tokens (``model.config``'s image, video,
    vision-start and vision-end ids) at the dtype's lowest value: the policy never samples them.

    A sampled ``<|image_pad|>`` would be an image placeholder without an image; so the policy's
    distribution is the softmax over every other token, in the rollouts, the behaviour scoring and
    the losses alike (their log-probs agree).

    Example:
        >>> class Config:
        ...     image_token_id, video_token_id, vision_start_token_id, vision_end_token_id = 1, 2, 3, None
        >>> class Model:
        ...     config = Config()
        >>> suppress_vision_tokens(torch.zeros(5), Model()).tolist()[:1], bool(suppress_vision_tokens(torch.zeros(5), Model())[1] < -1e30)
        ([0.0], True)
    """
    ids = _vision_token_ids(model.config)
    if not ids:
        return logits
    index = torch.tensor(ids, device=logits.device)
    return logits.index_fill(-1, index, torch.finfo(logits.dtype).min)


def _vision_token_ids(config: Any) -> list[int]:
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    return [int(i) for i in (getattr(config, n, None) for n in names) if i is not None]


def sample_step(
    logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoding step for ``[N, V]`` logits: the tokens (sampled at ``temperature``, argmax at 0),
    their log-probs and the entropies of the (tempered) distributions, each ``[N]``.

    Example:
        >>> tokens, log_p, entropy = sample_step(torch.tensor([[0.0, 0.0], [9.0, 0.0]]), 0.0)
        >>> tokens.tolist(), [round(x, 3) for x in entropy.tolist()]
        ([0, 0], [0.693, 0.001])
    """
    log_p = torch.log_softmax(logits.float().cpu() / (temperature or 1.0), -1)
    probs = log_p.exp()
    if temperature:
        tokens = inverse_cdf_sample(probs, generator)  # ~20x cheaper than torch.multinomial on CPU
    else:
        tokens = log_p.argmax(-1)
    entropy = -(probs * log_p.clamp_min(torch.finfo(log_p.dtype).min)).sum(-1)
    return tokens, log_p.gather(-1, tokens[:, None])[:, 0], entropy


def _segment(
    processor: VLProcessor,
    messages: Sequence[tuple[str, str]],
    images: Sequence[torch.Tensor],
    before: list[int],
    prime: str,
) -> tuple[list[int], dict[str, torch.Tensor]]:
    """A turn segment's ids after the sequence ``before`` and its images' processor output.

    The first segment is the rendered messages and the generation prompt; a later one starts with
    the end of the previous reply's turn (the template's end-of-turn token when the reply did not
    sample it: the token budget cut it, or it stopped at another end id; then ``"\\n"``).
    ``prime`` (``"<think>"``) follows the generation prompt: read, never sampled.
    """
    vision = processor.images(images)
    ids = processor.encode_segment(image_chat(messages), vision["image_grid_thw"], first=not before)
    end = processor.end_of_turn_id
    if before and before[-1] != end:
        ids = [end, *ids]
    if prime:
        ids += processor.tokenizer(prime, add_special_tokens=False)["input_ids"]
    return ids, vision


def vl_sequence(
    processor: VLProcessor, conversation: Sequence[dict], images: Sequence[torch.Tensor], *, prime: str = ""
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids, trained mask, images)`` of a conversation laid out as :class:`VLConversation` lays out a rollout.

    ``conversation``: message dicts with string contents (a demonstration); ``images``: one uint8
    ``[3, H, W]`` image per user message, in order. Each assistant reply is its text (the ``prime``
    it starts with left in the prompt) tokenised, plus the end-of-turn token: those ids are trained.
    Messages after the last reply (an env turn nothing answered) teach nothing and are left out with
    their images; ``images`` of the result (uint8 ``[K, 3, H, W]``) are the ones the ids hold.

    Example:
        >>> import tempfile
        >>> from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model
        >>> path = build_tiny_vl_model(["go left"] * 20, TinyVLConfig(vocab_size=300, hidden_size=32,
        ...     num_layers=1, vision_depth=1), tempfile.mkdtemp())
        >>> proc = load_vl_processor(path)
        >>> image = torch.zeros(3, 56, 56, dtype=torch.uint8)
        >>> chat = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "left"},
        ...         {"role": "user", "content": "again"}]
        >>> ids, mask, used = vl_sequence(proc, chat, [image, image])
        >>> used.shape[0]   # the last user message has no reply: left out
        1
        >>> proc.tokenizer.decode(ids[mask])
        'left<|im_end|>'
        >>> int((ids == proc.image_token_id).sum())   # 56 x 56 px: 2 x 2 image tokens
        4
    """
    tok = processor.tokenizer
    ids: list[int] = []
    mask: list[bool] = []
    pending: list[tuple[str, str]] = []
    pending_images: list[torch.Tensor] = []
    remaining = list(images)
    used: list[torch.Tensor] = []
    for message in conversation:
        role, content = message["role"], message["content"]
        if role != "assistant":
            pending.append((role, content))
            if role == "user":
                if not remaining:
                    raise ValueError("the conversation has more user messages than images")
                pending_images.append(remaining.pop(0))
            continue
        segment, _ = _segment(processor, pending, pending_images, ids, prime)
        reply = content[len(prime) :] if prime and content.startswith(prime) else content
        answer = tok(reply, add_special_tokens=False)["input_ids"] + [processor.end_of_turn_id]
        ids += segment + answer
        mask += [False] * len(segment) + [True] * len(answer)
        used += pending_images
        pending, pending_images = [], []
    if remaining:
        raise ValueError(f"{len(remaining)} images left over: one image per user message")
    shown = torch.stack(used) if used else torch.zeros(0, 3, 1, 1, dtype=torch.uint8)
    return torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.bool), shown


class _Sampler:
    """What a vision-language rollout samples with: the model, its processor, the temperature
    (0: greedy; log-probs are of the tempered distribution), a generator and the reply prime."""

    def __init__(
        self,
        model: Any,
        processor: VLProcessor,
        *,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
        prime: str = "",
    ) -> None:
        if not temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature!r}")
        self.model, self.processor, self.temperature, self.generator = model, processor, temperature, generator
        self.prime = prime
        #: a reply ends at any of these (the generation config's end ids, as the text rollouts)
        self.stop_ids = stop_token_ids(model, processor.tokenizer)
        self._start()

    def _start(self) -> None:
        """Set up the subclass's empty rollout state."""


class VLConversation(_Sampler):
    """One row's episode with a vision-language model: cached generation, turn by turn.

    :meth:`play` takes the new messages of a turn (the whole conversation on the first call, then
    the user message(s) the env added) with their images, encodes those images once, extends the
    KV cache with the new segment and samples a reply. The sequence, the sampled positions and the
    behaviour log-probs of every token are kept for training (:meth:`input_ids`,
    :meth:`sampled_mask`, :meth:`log_probs`).

    Args:
        model: a Qwen2-VL-style ``...ForConditionalGeneration`` (eval mode is the caller's choice).
        processor: its :class:`VLProcessor`.
        temperature: sampling temperature (log-probs are of the tempered distribution); 0: greedy.
        generator: a ``torch.Generator`` for the sampling (deterministic rollouts).
    """

    def _start(self) -> None:
        self._ids: list[int] = []
        self._sampled: list[bool] = []
        self._log_probs: list[float] = []
        self._pixels: list[torch.Tensor] = []
        self._images: list[torch.Tensor] = []
        self._grids = torch.zeros(0, 3, dtype=torch.long)
        self._cache = None
        self._cached = 0  # tokens already in the KV cache
        self._positions = torch.zeros(3, 1, 0, dtype=torch.long)
        #: vision-tower calls so far (one per turn that brought images)
        self.image_encodings = 0
        #: next-token entropy summed over the sampled tokens, and their count
        self.entropy_sum, self.entropy_count = 0.0, 0

    # -- what the episode holds -------------------------------------------------
    def input_ids(self) -> torch.Tensor:
        return torch.tensor(self._ids, dtype=torch.long)

    def sampled_mask(self) -> torch.Tensor:
        return torch.tensor(self._sampled, dtype=torch.bool)

    def log_probs(self) -> torch.Tensor:
        return torch.tensor(self._log_probs, dtype=torch.float32)

    def pixel_values(self) -> torch.Tensor | None:
        return torch.cat(self._pixels) if self._pixels else None

    def image_grid_thw(self) -> torch.Tensor:
        return self._grids

    def images(self) -> torch.Tensor:
        """The episode's uint8 ``[K, 3, H, W]`` images, in order (one per user message)."""
        return torch.stack(self._images) if self._images else torch.zeros(0, 3, 1, 1, dtype=torch.uint8)

    # -- playing ------------------------------------------------------------------
    @torch.no_grad()
    def play(self, messages: Sequence[tuple[str, str]], images: Sequence[torch.Tensor], max_new_tokens: int) -> str:
        """Append a turn's ``messages`` (user messages get one image each, in order) and sample a reply;
        returns the reply's text (the prime first, special tokens left out)."""
        segment, vision = _segment(self.processor, messages, images, self._ids, self.prime)
        self._ids += segment
        self._sampled += [False] * len(segment)
        self._log_probs += [0.0] * len(segment)
        self._grids = torch.cat([self._grids, vision["image_grid_thw"]])
        self._images += [img.to("cpu", torch.uint8) for img in images]
        kwargs: dict[str, Any] = {}
        if vision["pixel_values"] is not None:
            self._pixels.append(vision["pixel_values"])
            kwargs["mm_encoder_outputs"] = {
                "image": self.model.model.get_image_features(
                    vision["pixel_values"].to(self.model.device), vision["image_grid_thw"], return_dict=True
                )
            }
            self.image_encodings += 1
        self._positions = _rope_positions(
            self.model, self.input_ids().view(1, -1), self.processor.image_token_id, self._grids
        )
        logits = self._forward(self._ids[self._cached :], self._positions[..., self._cached :], **kwargs)
        reply: list[int] = []
        for _ in range(max_new_tokens):
            tokens, picked, entropy = sample_step(logits.view(1, -1), self.temperature, self.generator)
            token = int(tokens[0])
            self.entropy_sum += float(entropy[0])
            self.entropy_count += 1
            reply.append(token)
            self._ids.append(token)
            self._sampled.append(True)
            self._log_probs.append(float(picked[0]))
            next_pos = self._positions[..., -1:] + 1
            self._positions = torch.cat([self._positions, next_pos], -1)
            if token in self.stop_ids:
                break
            logits = self._forward([token], next_pos)
        return self.prime + self.processor.tokenizer.decode(reply, skip_special_tokens=True)

    def _forward(self, ids: list[int], positions: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """Run ``ids`` (the tokens not in the cache yet) through the model; the last position's logits."""
        from transformers import DynamicCache

        if self._cache is None:
            self._cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=torch.tensor([ids], dtype=torch.long, device=self.model.device),
            position_ids=positions.to(self.model.device),
            cache=self._cache,
            use_cache=True,
            logits_to_keep=1,  # only the next token's logits (not [T, V] over the whole segment)
            **kwargs,
        )
        self._cache = out.cache
        self._cached += len(ids)
        return suppress_vision_tokens(out.logits[0, -1], self.model)


class _Episode:
    """One row's episode in a :class:`VLBatchRollout`: its ids, what was sampled, images and their features."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.sampled: list[bool] = []
        self.log_probs: list[float] = []
        self.images: list[torch.Tensor] = []
        self.features: list[torch.Tensor] = []  # the vision tower's output per image, computed once
        self.grids = torch.zeros(0, 3, dtype=torch.long)
        self.entropy_sum, self.entropy_count = 0.0, 0


class VLBatchRollout(_Sampler):
    """Batched multi-turn sampling with a vision-language model: many rows per forward pass.

    Each row keeps its episode (token ids laid out as :class:`VLConversation` lays them out, the
    sampled positions and their log-probs, its images) and each image's vision-tower features, computed
    once, in the turn the image arrives (all rows' new images in one vision-tower call). A turn
    (:meth:`play`) appends each row's new segment, encodes the rows' whole sequences in one
    left-padded forward (the cached image features handed over with ``mm_encoder_outputs``, the
    multimodal rope positions from the model's ``get_rope_index`` with the padding mask) and decodes
    all rows together, one token per row per step, with one KV cache; a row that sampled its
    end-of-turn token stops (its later steps are ignored). Log-probs equal a teacher-forced pass
    within float round-off.

    Args:
        model: a Qwen2-VL-style ``...ForConditionalGeneration``.
        processor: its :class:`VLProcessor`.
        temperature: sampling temperature (0: greedy).
        generator: a ``torch.Generator`` for the sampling.
        prime: text after each generation prompt (``"<think>"``): read, never sampled.

    Example:
        >>> import tempfile
        >>> from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
        >>> path = build_tiny_vl_model(["The board is in the image."] * 20,
        ...     TinyVLConfig(vocab_size=300, hidden_size=32, num_layers=1, vision_depth=1), tempfile.mkdtemp())
        >>> model, processor = load_tiny_vl(path)
        >>> batch = VLBatchRollout(model, processor)
        >>> board = torch.zeros(3, 56, 56, dtype=torch.uint8)
        >>> texts = batch.play({0: [("user", "The board is in the image.")], 1: [("system", "x"), ("user", "y")]},
        ...                    {0: board, 1: board}, max_new_tokens=3)
        >>> sorted(texts), batch.image_encodings
        ([0, 1], 1)
        >>> ids, sampled, log_probs, images = batch.trajectory(1)
        >>> scored = score_conversation(model, ids, processor.images(list(images))["pixel_values"],
        ...                             processor.images(list(images))["image_grid_thw"])
        >>> bool(torch.allclose(scored[sampled], log_probs[sampled], atol=1e-4))
        True
    """

    def _start(self) -> None:
        self.rows: dict[int, _Episode] = {}
        #: vision-tower calls so far (one per turn that brought images)
        self.image_encodings = 0

    def release(self, rows) -> None:
        for r in rows:
            self.rows.pop(int(r), None)

    def trajectory(self, row: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(ids, sampled mask, log-probs, uint8 [K, 3, H, W] images)`` of the row's episode so far."""
        ep = self.rows[int(row)]
        images = torch.stack(ep.images) if ep.images else torch.zeros(0, 3, 1, 1, dtype=torch.uint8)
        return (
            torch.tensor(ep.ids, dtype=torch.long),
            torch.tensor(ep.sampled, dtype=torch.bool),
            torch.tensor(ep.log_probs, dtype=torch.float32),
            images,
        )

    def entropy(self, row: int) -> tuple[float, int]:
        """The summed next-token entropy over the row's sampled tokens, and their count."""
        ep = self.rows[int(row)]
        return ep.entropy_sum, ep.entropy_count

    def _add_segments(self, messages: dict, images: dict) -> None:
        """Append each row's new segment; run all the new images through the vision tower at once."""
        new_pixels, new_grids, owners = [], [], []
        for r, msgs in messages.items():
            ep = self.rows.setdefault(int(r), _Episode())
            shown = [images[r]] if not isinstance(images[r], (list, tuple)) else list(images[r])
            segment, vision = _segment(self.processor, msgs, shown, ep.ids, self.prime)
            ep.ids += segment
            ep.sampled += [False] * len(segment)
            ep.log_probs += [0.0] * len(segment)
            ep.images += [img.to("cpu", torch.uint8) for img in shown]
            ep.grids = torch.cat([ep.grids, vision["image_grid_thw"]])
            if vision["pixel_values"] is not None:
                new_pixels.append(vision["pixel_values"])
                new_grids.append(vision["image_grid_thw"])
                owners += [ep] * len(shown)
        if new_pixels:
            device = self.model.device
            grids = torch.cat(new_grids)
            out = self.model.model.get_image_features(
                torch.cat(new_pixels).to(device), grids.to(device), return_dict=True
            )
            for ep, feats in zip(owners, out.pooler_output, strict=True):
                ep.features.append(feats)
            self.image_encodings += 1

    @torch.no_grad()
    def play(self, messages: dict, images: dict, max_new_tokens: int) -> dict[int, str]:
        """One turn for the rows in ``messages`` (row -> its new ``(role, content)`` messages; ``images``:
        row -> its new image(s), one per user message): sample each row's reply; row -> reply text
        (the prime first, special tokens left out)."""
        from transformers import DynamicCache
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        self._add_segments(messages, images)
        rows = [int(r) for r in messages]
        eps = [self.rows[r] for r in rows]
        device = self.model.device
        pad = self.processor.tokenizer.pad_token_id
        pad = 0 if pad is None else int(pad)
        width = max(len(ep.ids) for ep in eps)
        ids = torch.full((len(eps), width), pad, dtype=torch.long)
        mask = torch.zeros((len(eps), width), dtype=torch.long)
        for i, ep in enumerate(eps):
            ids[i, width - len(ep.ids) :] = torch.tensor(ep.ids)
            mask[i, width - len(ep.ids) :] = 1
        grids = torch.cat([ep.grids for ep in eps])
        features = tuple(f for ep in eps for f in ep.features)
        kwargs: dict[str, Any] = {}
        if features:
            types = (ids == self.processor.image_token_id).int()
            positions, _ = self.model.model.get_rope_index(
                ids, mm_token_type_ids=types, image_grid_thw=grids, attention_mask=mask
            )
            kwargs["mm_encoder_outputs"] = {"image": BaseModelOutputWithPooling(pooler_output=features)}
        else:
            positions = (mask.cumsum(-1) - 1).clamp_min(0).view(1, len(eps), -1).expand(3, -1, -1)
        positions = positions.to(device)
        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,  # only the next token's logits (not [B, T, V] over the whole sequences)
            **kwargs,
        )
        cache, logits = out.cache, suppress_vision_tokens(out.logits[:, -1], self.model)
        last = positions[..., -1:]
        running = torch.ones(len(eps), dtype=torch.bool)
        replies: list[list[int]] = [[] for _ in eps]
        for _ in range(max_new_tokens):
            tokens, picked, entropy = sample_step(logits, self.temperature, self.generator)
            # one conversion per step, not one per row and value
            token_list, picked_list, entropy_list = tokens.tolist(), picked.tolist(), entropy.tolist()
            for i in torch.nonzero(running).reshape(-1).tolist():
                ep, token = eps[i], token_list[i]
                replies[i].append(token)
                ep.ids.append(token)
                ep.sampled.append(True)
                ep.log_probs.append(picked_list[i])
                ep.entropy_sum += entropy_list[i]
                ep.entropy_count += 1
                if token in self.stop_ids:
                    running[i] = False
            if not bool(running.any()):
                break
            last = last + 1
            mask = torch.cat([mask, torch.ones(len(eps), 1, dtype=torch.long)], 1)
            out = self.model(
                input_ids=tokens.view(-1, 1).to(device),
                attention_mask=mask.to(device),
                position_ids=last,
                cache=cache,
                use_cache=True,
            )
            cache, logits = out.cache, suppress_vision_tokens(out.logits[:, -1], self.model)
        tok = self.processor.tokenizer
        return {r: self.prime + tok.decode(reply, skip_special_tokens=True) for r, reply in zip(rows, replies)}
