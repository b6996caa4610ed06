"""LoRA adapters on the policy (``model.lora.enabled``), through ``peft``.

The adapters are injected into the loaded model in place (``peft.inject_adapter_in_model``): the policy
keeps its own class, so every wrapper, the turn cache and the shared-prefix passes call it as they call
any Hugging Face model. Only the adapter weights are trainable; the base weights are frozen.

* the KL reference is the same model with its adapters switched off (:func:`reference_scope`), not a
  deep copy: one set of base weights in memory;
* checkpoints hold the adapter weights only (:func:`adapter_state`);
* the exported policy is a PEFT adapter dir (``adapter_config.json`` + ``adapter_model.safetensors``,
  loadable with ``peft.PeftModel.from_pretrained`` on the base checkpoint, or by ``ragen-eval`` /
  :func:`load_adapter_dir`), and on request a merged model (:func:`merged_state_dict`).

``lora_B`` starts at zero (peft's default), so at step 0 the adapted policy computes exactly the base
model's logits and loss.

Example:
    >>> import torch
    >>> from transformers import Qwen2Config, Qwen2ForCausalLM
    >>> torch.manual_seed(0) and None
    >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=40, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    >>> x = torch.tensor([[1, 2, 3]])
    >>> before = model(x).logits
    >>> model = apply_lora(model, LoRASettings(rank=4, alpha=8, target_modules=("q_proj", "v_proj")))
    >>> sorted({n.split(".")[-3] for n, p in model.named_parameters() if p.requires_grad})
    ['lora_A', 'lora_B']
    >>> bool(torch.equal(model(x).logits, before))      # lora_B = 0: the base model's logits
    True
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "LoRASettings",
    "adapter_state",
    "apply_lora",
    "has_lora",
    "is_adapter_dir",
    "load_adapter_dir",
    "load_adapter_state",
    "merged_state_dict",
    "reference_scope",
    "save_adapter",
]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_ADAPTER = "default"


@dataclass(frozen=True)
class LoRASettings:
    """What ``model.lora`` configures: rank, alpha (scale ``alpha / rank``), dropout and the target modules
    (module name suffixes such as ``q_proj``, or ``"all-linear"``).

    Example:
        >>> LoRASettings(rank=0)
        Traceback (most recent call last):
        ...
        ValueError: model.lora.rank must be a positive integer, got 0
    """

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] | str = ("q_proj", "k_proj", "v_proj", "o_proj")
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"model.lora.rank must be a positive integer, got {self.rank!r}")
        if not isinstance(self.alpha, (int, float)) or isinstance(self.alpha, bool) or self.alpha <= 0:
            raise ValueError(f"model.lora.alpha must be a positive number, got {self.alpha!r}")
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.lora.dropout must be in [0, 1), got {self.dropout!r}")
        targets = self.target_modules
        if isinstance(targets, str):
            if targets != "all-linear":
                raise ValueError(
                    f"model.lora.target_modules must be a list of module names or 'all-linear', got {targets!r}"
                )
        elif not targets or not all(isinstance(t, str) and t for t in targets):
            raise ValueError(f"model.lora.target_modules must be a non-empty list of module names, got {targets!r}")

    @classmethod
    def from_config(cls, node: Mapping) -> LoRASettings:
        """The settings of a ``model.lora`` config node.

        Example:
            >>> LoRASettings.from_config({"enabled": True, "rank": 8, "alpha": 16, "dropout": 0.0,
            ...     "target_modules": ["q_proj"]}).target_modules
            ('q_proj',)
        """
        targets = node["target_modules"]
        return cls(
            rank=node["rank"],
            alpha=node["alpha"],
            dropout=node["dropout"],
            target_modules=targets if isinstance(targets, str) else tuple(targets),
        )

    def peft_config(self):
        from peft import LoraConfig

        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(r=self.rank, lora_alpha=self.alpha, lora_dropout=self.dropout, target_modules=targets)


def _tuner_layers(model: torch.nn.Module) -> list:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


def has_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` carries LoRA adapters (:func:`apply_lora`)."""
    return bool(getattr(model, "peft_config", None)) and bool(_tuner_layers(model))


def apply_lora(model: torch.nn.Module, settings: LoRASettings) -> torch.nn.Module:
    """Inject LoRA adapters into ``model`` in place (its class unchanged) and freeze everything else.

    The adapters' random ``lora_A`` init is drawn from a generator seeded by ``settings.seed`` (the
    global RNG is left as it was).

    Raises:
        ValueError: no module of ``model`` matches ``settings.target_modules``.
    """
    from peft import inject_adapter_in_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        try:
            model = inject_adapter_in_model(settings.peft_config(), model, adapter_name=_ADAPTER)
        except ValueError as e:
            raise ValueError(f"model.lora.target_modules={settings.target_modules!r}: {e}") from None
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block ``model`` computes its base model's outputs (every adapter switched off)."""
    layers = _tuner_layers(model)
    trainable = {id(p): p.requires_grad for p in model.parameters()}
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)
        for p in model.parameters():  # enable_adapters also sets requires_grad: put back what it was
            p.requires_grad_(trainable.get(id(p), p.requires_grad))


def reference_scope(actor) -> contextlib.AbstractContextManager:
    """The context in which ``actor`` scores as the KL reference: the base model (adapters off) for a LoRA
    policy's reference actor (``actor.lora_reference``), else a no-op.

    Example:
        >>> class Actor:
        ...     lora_reference = False
        >>> with reference_scope(Actor()):
        ...     pass
    """
    if getattr(actor, "lora_reference", False):
        return adapters_disabled(actor.model)
    return contextlib.nullcontext()


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter weights (the trainable state of a LoRA policy), named as in ``model.state_dict()``."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def load_adapter_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Load :func:`adapter_state`'s weights into ``model``; every adapter tensor must be there.

    Raises:
        KeyError: an adapter tensor is missing or a name is not one of ``model``'s adapter tensors.
    """
    expected = adapter_state(model)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise KeyError(f"adapter state does not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    result = model.load_state_dict(dict(state), strict=False)
    if result.unexpected_keys:  # pragma: no cover (checked above)
        raise KeyError(f"unexpected adapter tensors {result.unexpected_keys[:3]}")


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base model's state dict with every adapter's ``scale * B @ A`` added to its layer's weight,
    under the base model's own parameter names (``model`` is left unchanged).

    Loads into the base checkpoint's class as it is (``from_pretrained`` of the merged export).
    """
    deltas = {}
    for name, module in model.named_modules():
        if hasattr(module, "get_delta_weight") and _ADAPTER in getattr(module, "lora_A", {}):
            deltas[f"{name}.base_layer.weight"] = module.get_delta_weight(_ADAPTER).detach()
    out = {}
    for key, value in model.state_dict().items():
        if "lora_" in key:
            continue
        merged = value + deltas[key].to(value.dtype) if key in deltas else value
        out[key.replace(".base_layer.", ".")] = merged.detach().clone()
    return out


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a PEFT adapter dir (an ``adapter_config.json``, no full model ``config.json``)."""
    path = Path(path)
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def save_adapter(model: torch.nn.Module, path: str | Path, base_model: str) -> Path:
    """Write ``model``'s adapter as a PEFT adapter dir at ``path`` (``base_model``: the base checkpoint's dir)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = model.peft_config[_ADAPTER]
    config.base_model_name_or_path = str(base_model)
    config.save_pretrained(str(path))
    # PEFT's file layout: no adapter name in the tensor names
    weights = {k.replace(f".{_ADAPTER}.", "."): v.contiguous() for k, v in adapter_state(model).items()}
    save_file(weights, str(path / ADAPTER_WEIGHTS))
    return path


def load_adapter_dir(model: torch.nn.Module, path: str | Path) -> torch.nn.Module:
    """Inject the adapter saved at ``path`` (:func:`save_adapter`, or any PEFT LoRA dir) into the base
    ``model`` and load its weights.

    Raises:
        ValueError: the dir's adapter is not LoRA, or its weights do not fit the model.
    """
    from safetensors.torch import load_file

    path = Path(path)
    config = json.loads((path / ADAPTER_CONFIG).read_text())
    if str(config.get("peft_type", "")).upper() != "LORA":
        raise ValueError(f"{path}: only LoRA adapters are supported, got peft_type={config.get('peft_type')!r}")
    targets = config.get("target_modules")
    settings = LoRASettings(
        rank=int(config["r"]),
        alpha=float(config["lora_alpha"]),
        dropout=float(config.get("lora_dropout") or 0.0),
        target_modules=targets if isinstance(targets, str) else tuple(sorted(targets)),
    )
    model = apply_lora(model, settings)
    weights = load_file(str(path / ADAPTER_WEIGHTS))
    state = {}
    for key, value in weights.items():
        head, _, leaf = key.rpartition(".")  # "...q_proj.lora_A.weight" -> "...q_proj.lora_A.default.weight"
        state[f"{head}.{_ADAPTER}.{leaf}"] = value
    try:
        load_adapter_state(model, state)
    except KeyError as e:
        raise ValueError(f"{path}: {e}") from None
    return model
