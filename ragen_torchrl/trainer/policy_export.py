"""The trained policy as a model dir: :func:`write_policy` (``<run_dir>/policy``, ``policy_best``, and for a
LoRA run with ``model.lora.export_merged`` also ``policy_merged``), in ``model.export_dtype``.

A mixed-precision run trains float32 master weights; its policy is written in the compute dtype
(``model.export_dtype=auto``), as a run in that dtype would write it, and the ``config.json``'s
``dtype`` says so (:func:`set_config_dtype`), so ``from_pretrained(dtype="auto")`` loads the weights as
written.

Example:
    >>> import torch
    >>> cast_state({"w": torch.zeros(2), "step": torch.tensor(3)}, torch.bfloat16)["w"].dtype
    torch.bfloat16
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ..models.loading import Precision, dtype_name
from ..models.lora import merged_state_dict
from .evaluate import export_policy

__all__ = ["MERGED_POLICY_DIR", "cast_state", "export_dtype", "set_config_dtype", "write_policy"]

#: with ``model.lora.export_merged``: the base model with the trained adapter merged in
MERGED_POLICY_DIR = "policy_merged"


def export_dtype(name: str, precision: Precision) -> torch.dtype:
    """The dtype of ``model.export_dtype=name``: ``auto``, the compute dtype (``model.dtype``); else that dtype."""
    return precision.compute_dtype if name == "auto" else getattr(torch, name)


def cast_state(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state`` with its floating tensors in ``dtype`` (the others as they are)."""
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}


def set_config_dtype(path: str | os.PathLike, state: dict[str, torch.Tensor] | None) -> Path:
    """Make the exported ``config.json``'s ``dtype`` that of the weights written (``save_pretrained`` records the
    in-memory model's parameter dtype, float32 under mixed precision), so ``from_pretrained(dtype="auto")``
    loads them as written; rewritten through a temp file and a rename. ``state`` ``None``: the model wrote itself."""
    dtype = next((v.dtype for v in (state or {}).values() if v.is_floating_point()), None)
    config = Path(path) / "config.json"
    if dtype is None or not config.is_file():
        return path
    data = json.loads(config.read_text(encoding="utf-8"))
    name = dtype_name(dtype)
    if data.get("dtype") != name:
        data["dtype"] = name
        data.pop("torch_dtype", None)
        tmp = config.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, config)
    return path


def write_policy(
    policy_dir: Path,
    model: torch.nn.Module,
    tokenizer,
    *,
    state: dict[str, torch.Tensor] | None,
    precision: Precision,
    dtype_option: str = "auto",
    processor=None,
    lora_base: str | None = None,
    merged_dir: Path | None = None,
) -> Path:
    """Rank 0: the policy as a model dir at ``policy_dir``; returns it.

    ``state``: the model's full state dict when it had to be gathered (FSDP2), else ``None`` (the model's own).
    ``dtype_option``: ``model.export_dtype`` (:func:`export_dtype`). ``processor``: a vision-language policy's,
    its image processor written beside the weights. ``lora_base``: the base checkpoint of a LoRA policy, which is
    written as a PEFT adapter dir on it (with its tokenizer files); ``merged_dir`` then also gets the base model
    with the adapter merged in.
    """
    dtype = export_dtype(dtype_option, precision)
    if lora_base is not None:
        if merged_dir is not None:
            merged = cast_state(merged_state_dict(model), dtype)
            set_config_dtype(export_policy(model, tokenizer, merged_dir, state_dict=merged), merged)
        path = export_policy(model, tokenizer, policy_dir, adapter_base=lora_base)
    else:
        if state is None and precision.param_dtype != dtype:
            state = model.state_dict()
        state = cast_state(state, dtype) if state is not None else None  # None: save_pretrained writes the model
        path = set_config_dtype(export_policy(model, tokenizer, policy_dir, state_dict=state), state)
    if processor is not None:  # a vision-language policy loads with its image processor
        processor.image_processor.save_pretrained(path)
    return path
