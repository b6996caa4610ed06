"""Sampling settings of the rollout policies: checks and their meaning, without importing torch.

The rollouts sample the full distribution by default (RAGEN-2, arXiv 2604.06268: temperature 1,
top-p 1, no top-k); ``top_k`` / ``top_p`` / ``min_p`` truncate it. The trainer's config check
(:func:`ragen_torchrl.trainer.config.check_rollout_sampling`) uses these before anything heavy is
imported; :func:`ragen_torchrl.collectors.hf_generate_kwargs` and
:func:`ragen_torchrl.collectors.vllm_sampling_kwargs` turn them into each backend's keywords.

Example:
    >>> sampling_truncation(top_k=None, top_p=1.0, min_p=None) is None
    True
"""

from __future__ import annotations

__all__ = [
    "ATTENTIONS",
    "SAMPLERS",
    "check_attention",
    "check_sampler",
    "check_sampling",
    "device_type",
    "per_device",
    "sampling_truncation",
]

#: ``rollout.sampler`` values: ``inverse_cdf`` draws each token by inverse CDF
#: (:class:`~ragen_torchrl.models.inverse_cdf.InverseCDFSampler`, ~20x cheaper than ``torch.multinomial`` on CPU),
#: ``multinomial`` leaves it to ``transformers``' ``torch.multinomial``; the same distribution, different
#: seeded token streams. The default is :func:`per_device`: ``inverse_cdf`` on the CPU, where it was
#: measured, ``multinomial`` on an accelerator, where no benchmark has compared them.
SAMPLERS = ("inverse_cdf", "multinomial")

#: ``rollout.attention`` values of the token rollout's first-turn decoding: ``cascade`` reads each GRPO
#: group's shared prompt once per step (:mod:`~ragen_torchrl.models.cascade_attention`, measured on the CPU,
#: where reading the cache is the cost), ``sdpa`` leaves every row to ``transformers``' SDPA (the fused
#: kernels of a GPU). The default is :func:`per_device`: ``cascade`` on the CPU, ``sdpa`` elsewhere.
ATTENTIONS = ("cascade", "sdpa")


def device_type(device) -> str:
    """The device type ``model.device`` names: ``auto`` is ``cuda`` when ``torch.cuda.is_available()``,
    else ``cpu``; ``cuda:1`` is ``cuda``. Only ``auto`` imports torch.

    Example:
        >>> device_type("cuda:1"), device_type("cpu"), device_type("auto") in ("cpu", "cuda")
        ('cuda', 'cpu', True)
    """
    device = str(device)
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device.split(":", 1)[0]


def per_device(device, cpu_value, accelerator_value):
    """``cpu_value`` when ``device`` (``model.device``, see :func:`device_type`) is the CPU, else
    ``accelerator_value``: the defaults of the settings tuned on a CPU only. The config's
    ``${per_device:${model.device},<cpu>,<accelerator>}`` resolver (``rollout.sampler``,
    ``rollout.attention``; ``ragen-train --cfg job model.device=cuda --resolve`` prints the values).

    Example:
        >>> per_device("cpu", "inverse_cdf", "multinomial"), per_device("cuda", "cascade", "sdpa")
        ('inverse_cdf', 'sdpa')
    """
    return cpu_value if device_type(device) == "cpu" else accelerator_value


def check_attention(attention, *, prefix: str = "rollout.") -> None:
    """Raise ``ValueError`` naming the key unless ``attention`` is one of :data:`ATTENTIONS`.

    Example:
        >>> check_attention("flash")
        Traceback (most recent call last):
        ...
        ValueError: rollout.attention must be one of cascade, sdpa, got 'flash'
    """
    if attention not in ATTENTIONS:
        raise ValueError(f"{prefix}attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")


def check_sampler(sampler, *, prefix: str = "rollout.") -> None:
    """Raise ``ValueError`` naming the key unless ``sampler`` is one of :data:`SAMPLERS`.

    Example:
        >>> check_sampler("gumbel")
        Traceback (most recent call last):
        ...
        ValueError: rollout.sampler must be one of inverse_cdf, multinomial, got 'gumbel'
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"{prefix}sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")


def check_sampling(top_k=None, top_p: float = 1.0, min_p=None, *, prefix: str = "rollout.") -> None:
    """Raise ``ValueError`` naming the key unless ``top_k`` is ``None``/0 (off) or a positive integer,
    ``top_p`` is in (0, 1] and ``min_p`` is ``None`` or in [0, 1).

    Example:
        >>> check_sampling(top_k=-1)
        Traceback (most recent call last):
        ...
        ValueError: rollout.top_k must be null/0 (no top-k) or a positive integer, got -1
    """
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise ValueError(f"{prefix}top_k must be null/0 (no top-k) or a positive integer, got {top_k!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"{prefix}top_p must be in (0, 1] (1.0 = no nucleus truncation), got {top_p!r}")
    if min_p is not None and (isinstance(min_p, bool) or not isinstance(min_p, (int, float)) or not 0 <= min_p < 1):
        raise ValueError(f"{prefix}min_p must be null (off) or in [0, 1), got {min_p!r}")


def sampling_truncation(top_k=None, top_p: float = 1.0, min_p=None) -> str | None:
    """What of the policy's distribution a sampler with these settings cuts off, in words;
    ``None`` when it samples the full distribution.

    Example:
        >>> sampling_truncation(), sampling_truncation(top_k=50, top_p=0.9)
        (None, 'top_k=50, top_p=0.9')
    """
    parts = []
    if top_k:
        parts.append(f"top_k={top_k}")
    if top_p < 1:
        parts.append(f"top_p={top_p:g}")
    if min_p:
        parts.append(f"min_p={min_p:g}")
    return ", ".join(parts) or None
