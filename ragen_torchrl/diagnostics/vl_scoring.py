"""In-batch cross-scoring of reasonings against contexts that hold images (a vision-language policy).

The image-conditioned half of :func:`~ragen_torchrl.diagnostics.cross_scoring.cross_score`: for
``M`` reasonings ``z_i`` and ``N`` contexts ``x_j`` whose images are part of ``X`` (RAGEN-2, arXiv
2604.06268: the MI proxies ask how much better the true input explains the reasoning than the
batch's average input does; a board image is that input), :func:`cross_score_vl` returns the same
``[M, N]`` matrices of teacher-forced ``log p(z_i | x_j)`` (per-token mean and per-sequence sum)
with a Qwen2-VL-style model (``Qwen2VLForConditionalGeneration`` and relatives), so
:func:`~ragen_torchrl.diagnostics.mi.mi_proxies` turns them into the same proxy family.

A context is a :class:`VLContext`: its token ids with every image placeholder already expanded to
the image's tokens (:meth:`~ragen_torchrl.models.vision.VLProcessor.encode_segment`), ending with
the opening reasoning tag, plus the pixel inputs of its images (``pixel_values``,
``image_grid_thw`` as :meth:`~ragen_torchrl.models.vision.VLProcessor.images` gives them).

Each distinct context is encoded once: its images go through the vision tower once, its prefix
``x_j[:-1]`` is run once with those features (``mm_encoder_outputs``) keeping the KV cache, and the
reasonings are then scored in chunks of up to ``batch_size`` rows against expanded views of that
cache. Positions are Qwen2-VL's multimodal rope ids of the context (``model.model.get_rope_index``,
the model's own rule); reasoning token ``t`` continues the text at the context's last position
``+ 1 + t`` on all three axes, which is what the model assigns to text after the last image. The
result equals a teacher-forced pass over each concatenated sequence
(:func:`~ragen_torchrl.models.vision.score_conversation`), which a test checks.

Example:
    >>> import tempfile, torch
    >>> from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
    >>> path = build_tiny_vl_model(["The board is in the image. <think> red green"] * 20,
    ...     TinyVLConfig(vocab_size=300, hidden_size=32, num_layers=1, vision_depth=1), tempfile.mkdtemp())
    >>> model, processor = load_tiny_vl(path)
    >>> images = [torch.full((3, 56, 56), v, dtype=torch.uint8) for v in (0, 255)]
    >>> contexts = [vl_context(processor, [("user", "The board is in the image.")], [im]) for im in images]
    >>> reasonings = [torch.tensor(processor.tokenizer(w, add_special_tokens=False)["input_ids"]) for w in ("red", "green")]
    >>> mean_lp, sum_lp = cross_score_vl(model, contexts, reasonings)
    >>> tuple(mean_lp.shape), bool((sum_lp < 0).all())
    ((2, 2), True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from ..envs.visual import image_chat
from ..models.kv_cache import forward_kwargs, model_device, output_cache, pad_right, select_cache
from ..models.vision import VLProcessor, suppress_vision_tokens
from .cross_scoring import _entropy_cols, _unique, _validate
from .token_scoring import _model_dtype, _own_entropy, _score_dtype, _scoring_model, _token_log_probs

__all__ = ["VLContext", "cross_score_vl", "vl_context", "vl_context_key"]


class VLContext(NamedTuple):
    """One context ``x`` of a vision-language cross-scoring matrix.

    ``input_ids`` is ``[T]`` long (image placeholders expanded, ending with the opening reasoning
    tag), ``pixel_values`` the processor's patches of the context's images (``None`` when it has
    none) and ``image_grid_thw`` ``[K, 3]`` long, one row per image in the order of their
    placeholders.
    """

    input_ids: torch.Tensor
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor


def vl_context(
    processor: VLProcessor,
    messages: Sequence[tuple[str, str]],
    images: Sequence[torch.Tensor],
    think_tag: str = "<think>",
) -> VLContext:
    """The :class:`VLContext` of a conversation prefix: ``messages`` as ``(role, text)`` pairs, each
    user message showing one of ``images`` (uint8 ``[3, H, W]``, in order), rendered with the chat
    template and its generation prompt, then ``think_tag``.

    Example:
        >>> import tempfile, torch
        >>> from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
        >>> path = build_tiny_vl_model(["The board is in the image. <think>"] * 20,
        ...     TinyVLConfig(vocab_size=300, hidden_size=32, num_layers=1, vision_depth=1), tempfile.mkdtemp())
        >>> _, processor = load_tiny_vl(path)
        >>> ctx = vl_context(processor, [("user", "Go.")], [torch.zeros(3, 56, 56, dtype=torch.uint8)])
        >>> ctx.image_grid_thw.tolist(), int((ctx.input_ids == processor.image_token_id).sum())
        ([[1, 4, 4]], 4)
    """
    vision = processor.images(list(images))
    ids = processor.encode_segment(image_chat(messages), vision["image_grid_thw"], first=True)
    ids += processor.tokenizer(think_tag, add_special_tokens=False)["input_ids"]
    return VLContext(torch.tensor(ids, dtype=torch.long), vision["pixel_values"], vision["image_grid_thw"])


def vl_context_key(context: VLContext) -> tuple:
    """A hashable key equal for contexts with the same tokens and the same images (pixel bytes).

    Example:
        >>> import torch
        >>> a = VLContext(torch.tensor([1, 2]), torch.zeros(4, 6), torch.tensor([[1, 2, 2]]))
        >>> b = VLContext(torch.tensor([1, 2]), torch.ones(4, 6), torch.tensor([[1, 2, 2]]))
        >>> vl_context_key(a) == vl_context_key(a._replace(pixel_values=torch.zeros(4, 6))), vl_context_key(a) == vl_context_key(b)
        (True, False)
    """
    pixels = b"" if context.pixel_values is None else context.pixel_values.detach().cpu().contiguous().numpy().tobytes()
    return (
        tuple(torch.as_tensor(context.input_ids).tolist()),
        tuple(map(tuple, torch.as_tensor(context.image_grid_thw).tolist())),
        hashlib.sha1(pixels).hexdigest(),
    )


def _validate_contexts(contexts: Sequence[VLContext], image_token_id: int) -> list[VLContext]:
    if len(contexts) == 0:
        raise ValueError("contexts is empty")
    out = []
    for k, c in enumerate(contexts):
        if not isinstance(c, VLContext):
            raise ValueError(f"contexts[{k}] must be a VLContext, got {type(c).__name__}")
        ids = torch.as_tensor(c.input_ids)
        if ids.dim() != 1 or ids.numel() == 0 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise ValueError(f"contexts[{k}].input_ids must be a non-empty 1-D tensor of token ids")
        grids = torch.as_tensor(c.image_grid_thw).reshape(-1, 3).long()
        n_img = int((ids == image_token_id).sum())
        if (n_img > 0) != (c.pixel_values is not None and len(grids) > 0):
            raise ValueError(
                f"contexts[{k}] has {n_img} image tokens but {'no' if c.pixel_values is None else len(grids)} images"
            )
        if ids[-1] == image_token_id:
            raise ValueError(f"contexts[{k}] ends with an image token (a context ends with the reasoning tag)")
        out.append(VLContext(ids.detach().cpu().long(), c.pixel_values, grids))
    return out


def _context_positions(model: Any, ctx: VLContext) -> torch.Tensor:
    """``[3, 1, T]`` multimodal rope ids of a context (text-only: ``arange`` on all three axes)."""
    ids = ctx.input_ids.view(1, -1)
    types = (ids == model.config.image_token_id).int()
    if not bool(types.any()):
        return torch.arange(ids.shape[1]).view(1, 1, -1).expand(3, 1, -1)
    positions, _ = model.model.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=ctx.image_grid_thw)
    return positions


def _score_context(model, ctx, reasonings, batch_size, cache_name, sum_lp, ent, col, ent_cols) -> None:
    """Column ``col`` of ``sum_lp``: every reasoning under one context, its images encoded once."""
    device = model_device(model)
    positions = _context_positions(model, ctx).to(device)
    plen = ctx.input_ids.numel() - 1
    base = None
    if plen > 0:
        kwargs: dict[str, Any] = {}
        if ctx.pixel_values is not None:
            features = model.model.get_image_features(
                ctx.pixel_values.to(device, _model_dtype(model)), ctx.image_grid_thw.to(device), return_dict=True
            )
            kwargs["mm_encoder_outputs"] = {"image": features}
        from transformers import DynamicCache

        out = model(
            input_ids=ctx.input_ids[:plen].view(1, -1).to(device),
            position_ids=positions[..., :plen],
            use_cache=True,
            **{cache_name: DynamicCache(config=model.config)},
            **kwargs,
        )
        base = output_cache(out)
        if base is None:
            raise RuntimeError("the model did not return a KV cache")
        del out
    last_tok = ctx.input_ids[-1:].to(device)
    last_pos = positions[..., -1:]  # [3, 1, 1]
    for start in range(0, len(reasonings), batch_size):
        zi = torch.arange(start, min(start + batch_size, len(reasonings)))
        z_ids, z_lens = pad_right([reasonings[i] for i in zi.tolist()], device)
        rows, lz = z_ids.shape
        inp = torch.cat([last_tok.expand(rows, 1), z_ids], dim=1)
        z_mask = torch.arange(lz, device=device).unsqueeze(0) < z_lens.unsqueeze(1)
        attn = torch.cat([torch.ones(rows, plen + 1, dtype=torch.long, device=device), z_mask.long()], dim=1)
        # the context's last token keeps its own position; reasoning token t is text after it
        pos = torch.cat([last_pos, last_pos + 1 + torch.arange(lz, device=device)], dim=-1).expand(3, rows, -1)
        kwargs = {} if base is None else {cache_name: select_cache(base, torch.zeros(rows, dtype=torch.long), plen)}
        out = model(input_ids=inp, attention_mask=attn, position_ids=pos, use_cache=base is not None, **kwargs)
        # the policy's distribution: the vision placeholders are never sampled (as in the rollouts and losses)
        logits = suppress_vision_tokens(out.logits[:, :lz], model)
        sum_lp[zi, col] = _token_log_probs(logits, z_ids, z_mask).cpu()
        _own_entropy(ent, logits, z_mask, zi, torch.full_like(zi, col), ent_cols)
        del out, kwargs


def cross_score_vl(
    model: Any,
    contexts: Sequence[VLContext],
    reasonings: Sequence[torch.Tensor],
    *,
    batch_size: int = 64,
    entropy_cols: Sequence[int] | torch.Tensor | None = None,
    dtype: torch.dtype | str | None = None,
) -> tuple[torch.Tensor, ...]:
    """Teacher-forced log-likelihood of every reasoning under every image-holding context.

    Args:
        model: a Qwen2-VL-style ``...ForConditionalGeneration`` (``model.model.get_rope_index``,
            ``model.model.get_image_features`` and the ``mm_encoder_outputs`` keyword). It runs
            under ``torch.no_grad`` and temporarily in eval mode, restored afterwards.
        contexts: ``N`` :class:`VLContext` (build them with :func:`vl_context`). Contexts with the
            same tokens and images (:func:`vl_context_key`) are scored once.
        reasonings: ``M`` non-empty 1-D integer tensors, the token ids of ``z_i``.
        batch_size: maximum number of reasonings per forward pass.
        entropy_cols: optional ``[M]`` column index per reasoning; then a third output holds each
            reasoning's mean token entropy under that column's context.
        dtype: score with a temporary copy of the model in this dtype (e.g. ``"float32"`` for a
            bfloat16 policy), as :func:`~ragen_torchrl.diagnostics.cross_scoring.cross_score` does;
            ``None`` (default): the model's own.

    Returns:
        ``(mean_lp, sum_lp)`` (and the ``[M]`` entropies with ``entropy_cols``), float32 CPU
        ``[M, N]`` tensors (float64 for a float64 model), exactly as
        :func:`~ragen_torchrl.diagnostics.cross_scoring.cross_score` returns them.

    Raises:
        ValueError: empty inputs, a context whose image tokens and images disagree, an empty or
            non-integer reasoning, bad ``entropy_cols``, ``batch_size`` or ``dtype``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    model = _scoring_model(model, dtype)
    ctx = _validate_contexts(contexts, model.config.image_token_id)
    zs = _validate("reasonings", reasonings)
    ent_cols = _entropy_cols(entropy_cols, len(zs), len(ctx))
    ctx_first, ctx_of = _unique([vl_context_key(c) for c in ctx])
    cache_name, _ = forward_kwargs(model)
    m, n = len(zs), len(ctx_first)
    sum_u = torch.zeros(m, n, dtype=_score_dtype(_model_dtype(model)))
    ent = torch.full((m,), float("nan"))
    u_ent_cols = None if ent_cols is None else ctx_of[ent_cols]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for col, j in enumerate(ctx_first):
                _score_context(model, ctx[j], zs, batch_size, cache_name, sum_u, ent, col, u_ent_cols)
    finally:
        model.train(was_training)
        # a later forward without explicit positions must not reuse this pass's rope offsets
        model.model.rope_deltas = None
    sum_lp = sum_u[:, ctx_of]
    z_len = torch.tensor([z.numel() for z in zs], dtype=sum_lp.dtype)
    if ent_cols is not None:
        return sum_lp / z_len.unsqueeze(1), sum_lp, ent
    return sum_lp / z_len.unsqueeze(1), sum_lp
