"""Loading a policy: any Hugging Face causal LM (or the tiny offline one), or a Qwen2-VL-style
vision-language checkpoint with its processor (:func:`load_policy` picks by the checkpoint's config).

Example:
    >>> from ragen_torchrl.models.loading import resolve_device
    >>> resolve_device("cpu", "auto")
    (device(type='cpu'), torch.float32)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import torch

from ..model_source import ModelSourceError, adapter_base, looks_like_local_path
from .vl_processor import VL_CHAT_TEMPLATE, load_vl_processor

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
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in names:
        raise ValueError(f"unknown model.dtype {dtype!r}; valid: auto, {', '.join(names)}")
    return dev, names[dtype]


#: ``model.precision``: mixed = fp32 parameters and optimizer state, compute in ``model.dtype``; pure = the parameters in it
PRECISIONS = ("mixed", "pure")

#: below this learning rate most Adam steps of a bf16/fp16 weight round back to the weight (see :func:`low_precision_warning`)
LOW_PRECISION_MIN_LR = 1e-4


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (the name ``model.dtype`` and ``from_pretrained`` take).

    Example:
        >>> dtype_name(torch.bfloat16), dtype_name(torch.float32)
        ('bfloat16', 'float32')
    """
    return str(dtype).removeprefix("torch.")


class Precision(NamedTuple):
    """Where a policy trains and in which dtypes: its parameters' (and so the optimizer state's) and its compute dtype.

    ``mixed`` (``model.precision``, the default) keeps the parameters, their gradients and the AdamW
    moments in float32 and computes in ``model.dtype`` through :func:`torch.autocast` (:meth:`autocast`),
    as TRL trains under bf16 autocast; under FSDP2 the compute dtype is FSDP2's
    ``MixedPrecisionPolicy(param_dtype=...)`` instead (:func:`~ragen_torchrl.trainer.distributed.shard_model`).
    At a learning rate of 1e-6 an Adam step (about ``lr`` per weight) is far below bfloat16's resolution
    (2^-8 of the weight), so bf16 parameters stepped directly mostly stay as they are; fp32 masters keep
    every step. ``pure`` puts the parameters themselves in ``model.dtype``. With a float32 compute dtype
    both are the same plain float32 run (no autocast, nothing copied).

    Example:
        >>> p = resolve_precision("cpu", "bfloat16", "mixed")
        >>> p.param_dtype, p.compute_dtype, p.autocast_enabled
        (torch.float32, torch.bfloat16, True)
        >>> resolve_precision("cpu", "auto", "mixed").autocast_enabled
        False
    """

    device: torch.device
    param_dtype: torch.dtype
    compute_dtype: torch.dtype
    mode: str

    @property
    def autocast_enabled(self) -> bool:
        """Whether the forwards need :func:`torch.autocast`: the parameters are in another dtype than the compute."""
        return self.param_dtype != self.compute_dtype

    def autocast(self, enabled: bool = True) -> contextlib.AbstractContextManager:
        """A block's forwards in the compute dtype (:func:`torch.autocast` on the model's device type) when
        :attr:`autocast_enabled` and ``enabled``; else a null context (the float32 default runs as it is).

        Example:
            >>> p = resolve_precision("cpu", "bfloat16", "mixed")
            >>> with p.autocast():
            ...     y = torch.nn.Linear(4, 4)(torch.ones(1, 4))
            >>> y.dtype
            torch.bfloat16
        """
        if not (enabled and self.autocast_enabled):
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)


def resolve_precision(device: str = "auto", dtype: str = "auto", precision: str = "mixed") -> Precision:
    """The :class:`Precision` of ``model.device``, ``model.dtype`` (the compute dtype) and ``model.precision``.

    Raises:
        ValueError: an unknown precision or dtype (the key named), CUDA requested but not available, or
            ``float16`` with ``mixed``: fp16 compute over fp32 parameters needs loss scaling, which the
            update does not do (use ``bfloat16``, or ``model.precision=pure``).

    Example:
        >>> resolve_precision("cpu", "bfloat16", "pure")[1:]
        (torch.bfloat16, torch.bfloat16, 'pure')
        >>> resolve_precision("cpu", "auto", "half")
        Traceback (most recent call last):
        ...
        ValueError: model.precision='half': valid: mixed, pure
    """
    if precision not in PRECISIONS:
        raise ValueError(f"model.precision={precision!r}: valid: {', '.join(PRECISIONS)}")
    dev, compute = resolve_device(device, dtype)
    if precision == "mixed" and compute == torch.float16:
        raise ValueError(
            "model.dtype=float16 with model.precision=mixed: fp16 compute over fp32 parameters needs loss "
            "scaling, which the update does not do; use model.dtype=bfloat16, or model.precision=pure"
        )
    param = torch.float32 if precision == "mixed" else compute
    return Precision(dev, param, compute, precision)


def low_precision_warning(precision: Precision, lr: float, key: str = "algo.lr") -> str | None:
    """The warning for parameters stored in bf16/fp16 (``model.precision=pure``) at a learning rate below
    :data:`LOW_PRECISION_MIN_LR`, else ``None``.

    Example:
        >>> low_precision_warning(resolve_precision("cpu", "bfloat16", "pure"), 1e-6)[:44]
        'model.precision=pure stores the parameters i'
        >>> low_precision_warning(resolve_precision("cpu", "bfloat16", "mixed"), 1e-6) is None
        True
    """
    if precision.param_dtype not in (torch.bfloat16, torch.float16) or float(lr) >= LOW_PRECISION_MIN_LR:
        return None
    eps = torch.finfo(precision.param_dtype).eps
    return (
        f"model.precision=pure stores the parameters in {dtype_name(precision.param_dtype)}: at {key}={lr:g} "
        f"an Adam step (~{key} per weight) is below the dtype's resolution ({eps:.1e} of a weight) for most "
        "weights, so most updates round back to the weight; model.precision=mixed keeps float32 master weights"
    )


def enable_gradient_checkpointing(model: torch.nn.Module) -> torch.nn.Module:
    """Arm transformers' activation checkpointing of every decoder layer (``use_reentrant=False``).

    The policy stays in eval mode (dropout off: behaviour and current log-probs agree), and transformers
    checkpoints a layer only in training mode with gradients on, so an armed model checkpoints nothing
    until a block runs in :func:`checkpointed_layers`: generation and the no-grad scoring never
    recompute anything. The embedding hook transformers adds for reentrant checkpointing is removed
    (the non-reentrant kind does not need inputs that require grad).

    Raises:
        ValueError: the model does not support activation checkpointing.

    Example:
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> m = Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8, intermediate_size=8,
        ...     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)).eval()
        >>> len(checkpoint_layers(enable_gradient_checkpointing(m))), m.training
        (2, False)
    """
    kwargs = {"use_reentrant": False}
    # transformers >= 5 names it activation_checkpointing_enable (gradient_checkpointing_enable: its deprecated alias)
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:  # pragma: no cover - older transformers
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if hasattr(model, "disable_input_require_grads"):
        model.disable_input_require_grads()
    return model


def checkpoint_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers of ``model`` armed for activation checkpointing (:func:`enable_gradient_checkpointing`)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [
        m
        for m in model.modules()
        if isinstance(m, GradientCheckpointingLayer) and getattr(m, "gradient_checkpointing", False)
    ]


@contextlib.contextmanager
def checkpointed_layers(model: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
    """Checkpoint the armed layers' activations in the block's forwards (a training forward and its backward).

    Only the layers themselves switch to training mode (the flag transformers reads), not their
    submodules: dropout stays off. A model that is not armed runs as it is.

    Example:
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> m = enable_gradient_checkpointing(Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8,
        ...     intermediate_size=8, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)).eval())
        >>> with checkpointed_layers(m):
        ...     [l.training for l in checkpoint_layers(m)], m.model.layers[0].self_attn.training
        ([True], False)
    """
    layers = checkpoint_layers(model) if enabled else []
    before = [m.training for m in layers]
    for m in layers:
        m.training = True
    try:
        yield
    finally:
        for m, was in zip(layers, before):
            m.training = was


@contextlib.contextmanager
def without_checkpointing(model: torch.nn.Module) -> Iterator[None]:
    """Disarm activation checkpointing for the block: for passes that read and write a KV cache, which a
    checkpointed layer would drop (transformers sets ``cache=None`` there) and a recompute would append to twice.

    Example:
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> m = enable_gradient_checkpointing(Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8,
        ...     intermediate_size=8, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)))
        >>> with without_checkpointing(m):
        ...     len(checkpoint_layers(m))
        0
        >>> len(checkpoint_layers(m))
        1
    """
    layers = checkpoint_layers(model)
    for m in layers:
        m.gradient_checkpointing = False
    try:
        yield
    finally:
        for m in layers:
            m.gradient_checkpointing = True


def prepare_tokenizer(tokenizer, model=None):
    """Ready a checkpoint's tokenizer for multi-turn RL without changing the checkpoint.

    Nothing is added to the vocabulary and no embedding is resized: a checkpoint whose pad token is
    its end-of-turn token (SmolLM2, Qwen2.5, Llama-3 publish it so) keeps it. Padding is told apart
    from tokens by attention masks and by each row's own length (the token trajectories and the
    turn cache cut a reply at its first end-of-turn token), never by the pad id. In memory only:

    * padding on the left (generation appends on the right);
    * a tokenizer without a pad token pads with its end-of-turn token (``eos``), and the model's
      generation config gets that pad id, so ``generate`` does not warn on every call.

    The chat template is the checkpoint's own, whatever its format
    (:mod:`~ragen_torchrl.models.chat_template` finds the assistant tokens); exports copy the
    checkpoint's tokenizer files unchanged (:func:`copy_tokenizer_files`).

    Example:
        >>> from ragen_torchrl.models.tiny import train_tokenizer
        >>> tok = train_tokenizer(["a b"] * 5, vocab_size=270)
        >>> n = len(tok)
        >>> tok.pad_token = tok.eos_token            # a checkpoint that pads with its end-of-turn token
        >>> len(prepare_tokenizer(tok)) == n, tok.pad_token == tok.eos_token, tok.padding_side
        (True, True, 'left')
    """
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model is not None and getattr(model.generation_config, "pad_token_id", None) is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return tokenizer


#: the tokenizer files of a saved checkpoint, copied byte for byte into every export
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def copy_tokenizer_files(tokenizer, path: str | os.PathLike) -> list[str]:
    """Copy the tokenizer files of the checkpoint ``tokenizer`` was loaded from into ``path``, unchanged.

    The in-memory tokenizer is not saved (its left padding and a pad token set for a tokenizer
    without one are run-time choices, not the checkpoint's). A tokenizer that was not loaded from a
    local directory holding such files is saved with ``save_pretrained``. Returns the file names written.

    Example:
        >>> import tempfile
        >>> from ragen_torchrl.models.tiny import train_tokenizer
        >>> src, dst = tempfile.mkdtemp(), tempfile.mkdtemp()
        >>> tok = train_tokenizer(["a b"] * 5, vocab_size=270)
        >>> _ = tok.save_pretrained(src)
        >>> from transformers import AutoTokenizer
        >>> sorted(copy_tokenizer_files(AutoTokenizer.from_pretrained(src), dst))[:2]
        ['chat_template.jinja', 'tokenizer.json']
    """
    import shutil

    src = Path(str(getattr(tokenizer, "name_or_path", "") or "")).expanduser()
    names = [n for n in TOKENIZER_FILES if src.is_dir() and (src / n).is_file() and not (src / n).is_symlink()]
    if "tokenizer_config.json" not in names:
        return list(tokenizer.save_pretrained(str(path)))
    for n in names:
        shutil.copyfile(src / n, Path(path) / n)
    return names


def wrapper_chat_template(tokenizer) -> str | None:
    """The tokenizer's own chat template (any format), or ``None`` when it has none.

    Pass it as ``chat_template=`` to torchrl's LLM wrappers: without it, torchrl picks a
    built-in template by matching the tokenizer's ``name_or_path`` against model-family
    names ("qwen", "llama", ...), so a directory such as ``tiny-qwen2-<hash>`` (or any
    path containing such a word) silently swaps in a different template.

    Example:
        >>> class Tok:
        ...     chat_template = "{{ messages }}"
        >>> wrapper_chat_template(Tok())
        '{{ messages }}'
    """
    template = getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) and template else None


def resolved_chat_template(wrapper) -> str | None:
    """The template string a torchrl LLM wrapper renders with: its ``chat_template``, else the
    torchrl template its ``chat_template_name`` names; ``None`` when it leaves the choice to
    torchrl's model-family detection.

    Example:
        >>> class Wrapper:
        ...     chat_template, chat_template_name = "{{ messages }}", None
        >>> resolved_chat_template(Wrapper())
        '{{ messages }}'
    """
    if getattr(wrapper, "chat_template", None) is not None:
        return wrapper.chat_template
    name = getattr(wrapper, "chat_template_name", None)
    if name is not None:
        from ..torchrl_compat import CHAT_TEMPLATES

        return CHAT_TEMPLATES[name]
    return None


def _probe_template(tokenizer, path) -> None:
    """The template is code from elsewhere: one probe render under a time limit, refused as a model source."""
    from .template_guard import ChatTemplateError, check_chat_template

    try:
        check_chat_template(tokenizer, str(path))
    except ChatTemplateError as e:
        raise ModelSourceError(str(e)) from None


def load_pretrained(path: str, device: str = "auto", dtype: str = "auto"):
    """Load tokenizer + causal LM through ``from_pretrained`` and put the model in eval mode.

    A LoRA adapter dir (``adapter_config.json``, as a LoRA run exports its ``policy/``) loads as its base
    checkpoint (:func:`adapter_base`) with the adapter injected (:func:`~ragen_torchrl.models.lora.load_adapter_dir`).

    torchrl's GRPOLoss expects the policy in eval mode (dropout off) so that behaviour
    and current log-probs match.

    Raises:
        ModelSourceError: ``path`` is a missing local path, or ``from_pretrained`` cannot
            find or download it (the message says which, and that the machine may be offline).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev, dt = resolve_device(device, dtype)
    from .grouped_sdpa import use_grouped_sdpa
    from .lora import is_adapter_dir, load_adapter_dir

    if is_adapter_dir(Path(str(path)).expanduser()):  # a LoRA adapter dir: its base model with the adapter
        model, tokenizer = load_pretrained(str(adapter_base(path)), device, dtype)
        model = load_adapter_dir(model, Path(str(path)).expanduser())
        if (Path(str(path)).expanduser() / "tokenizer_config.json").is_file():
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
            _probe_template(tokenizer, path)
            tokenizer = prepare_tokenizer(tokenizer, model)
        model.to(dev).eval()
        return model, tokenizer
    if not Path(str(path)).expanduser().exists() and looks_like_local_path(str(path)):
        # fail with the real reason, not a hub repo-id traceback
        raise ModelSourceError(f"{path}: the local path does not exist")
    try:
        # a checkpoint from elsewhere never runs its own code (auto_map entries are refused, not asked about)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        _probe_template(tokenizer, path)  # before the weights: a template that never finishes costs nothing to refuse
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt, trust_remote_code=False)
    except ValueError as e:
        if "trust_remote_code" not in str(e):
            raise
        raise ModelSourceError(
            f"{path}: the model dir asks to run its own code (auto_map in its config); a checkpoint's code never "
            "runs here: use a checkpoint of an architecture transformers ships"
        ) from None
    except OSError as e:
        where = "a local directory" if Path(str(path)).expanduser().exists() else "a Hugging Face hub name"
        hint = "" if where.startswith("a local") else " (if it is a hub name, this machine may be offline)"
        raise ModelSourceError(f"cannot load the model {path!r} as {where}{hint}: {e}") from e
    tokenizer = prepare_tokenizer(tokenizer, model)
    use_grouped_sdpa(model)  # masked grouped-query attention without a key/value copy per query head on a CPU
    model.to(dev).eval()
    return model, tokenizer


#: ``model_type`` values of the Qwen2-VL-style checkpoints this package trains
VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")


def is_vision_language(path: str | os.PathLike) -> bool:
    """Whether the checkpoint dir ``path`` holds a Qwen2-VL-style vision-language model (its
    ``config.json``'s ``model_type`` or ``architectures``); ``False`` for anything else, a hub name included.

    Example:
        >>> import json, tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "config.json").write_text(json.dumps({"architectures": ["Qwen2_5_VLForConditionalGeneration"]}))
        >>> is_vision_language(d), is_vision_language("/no/such/dir")
        (True, False)
    """
    config = Path(str(path)).expanduser() / "config.json"
    if not config.is_file():
        return False
    data = json.loads(config.read_text())
    architectures = [str(a).lower() for a in data.get("architectures") or []]
    return data.get("model_type") in VL_MODEL_TYPES or any(
        a.startswith(("qwen2vl", "qwen2_5_vl")) for a in architectures
    )


def load_vl_policy(path: str | os.PathLike, device: str = "auto", dtype: str = "auto"):
    """``(model, tokenizer, processor)`` of a local Qwen2-VL-style checkpoint, in eval mode.

    Safe loading only: ``AutoModelForImageTextToText`` from safetensors weights
    (``use_safetensors=True``), no remote code. The tokenizer gets the same multi-turn fixes as a
    text policy's (:func:`prepare_tokenizer`: a distinct pad token);
    a chat template without a ``{% generation %}`` block or without image parts is replaced by
    :data:`~ragen_torchrl.models.vl_processor.VL_CHAT_TEMPLATE` (ChatML with Qwen2-VL's vision block).
    """
    from transformers import AutoModelForImageTextToText

    dev, dt = resolve_device(device, dtype)
    try:
        processor = load_vl_processor(path)
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=dt, use_safetensors=True, trust_remote_code=False
        )
    except OSError as e:
        raise ModelSourceError(f"cannot load the vision-language model {path!r}: {e}") from e
    template = processor.tokenizer.chat_template or ""
    masks = "{% generation %}" in template or "{%- generation %}" in template
    if not masks or "image" not in template:
        # the assistant masks need a generation block (Qwen2-VL checkpoints ship a template without one),
        # the prompts a template that renders image parts
        processor.tokenizer.chat_template = VL_CHAT_TEMPLATE
    tokenizer = prepare_tokenizer(processor.tokenizer, model)
    model.to(dev).eval()
    return model, tokenizer, processor


def load_policy(path: str, device: str = "auto", dtype: str = "auto"):
    """``(model, tokenizer, processor)`` of the policy checkpoint at ``path``, in eval mode.

    A local Qwen2-VL / Qwen2.5-VL-style directory (``config.json``'s ``model_type`` or
    ``architectures``, :func:`is_vision_language`) loads as a
    vision-language model with its :class:`~ragen_torchrl.models.vl_processor.VLProcessor`
    (:func:`load_vl_policy`: safetensors only, no remote code); anything
    else as a causal LM (:func:`load_pretrained`) with ``processor=None``.

    Example:
        >>> load_policy("/no/such/model")
        Traceback (most recent call last):
        ...
        ragen_torchrl.model_source.ModelSourceError: /no/such/model: the local path does not exist
    """
    if is_vision_language(path):
        return load_vl_policy(path, device, dtype)
    model, tokenizer = load_pretrained(path, device, dtype)
    return model, tokenizer, None
