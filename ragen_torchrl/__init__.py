"""ragen_torchrl: TorchRL-native multi-turn LLM agent RL.

Detects template collapse (mutual-information proxies), prevents it (SNR-aware
filtering) and truncates belief-trapped trajectories (T3).

Subpackages (each lists its public names in ``__all__``; they are imported on first use,
so ``import ragen_torchrl`` stays cheap):

* :mod:`ragen_torchrl.keys`: the TensorDict key contract (every env step, record and
  training-batch key with its dtype, shape and meaning; ``KEY_TABLE``);
* :mod:`ragen_torchrl.envs`: chat envs and the registry (``make_env``);
* :mod:`ragen_torchrl.collectors`: grouped collection (G samples per level, ``collect_rollouts``);
* :mod:`ragen_torchrl.transforms`: ``SNRFilter``, ``GroupAdvantage``, ``T3Truncation``, ...;
* :mod:`ragen_torchrl.data`: ``TopVarianceGroupSampler``, ``group_minibatches``;
* :mod:`ragen_torchrl.objectives`: the losses (GRPO, Dr.GRPO, DAPO, GSPO, PPO) and their
  log-prob plumbing (``make_logprob_policy``, ``compute_behaviour_log_probs``);
* :mod:`ragen_torchrl.diagnostics`: ``CollapseMonitor``, MI proxies, entropy metrics;
* :mod:`ragen_torchrl.models`: model loading, the tiny test model, ``EntropyRecorder``.

Example:
    >>> import ragen_torchrl
    >>> from ragen_torchrl.transforms import SNRFilter
    >>> SNRFilter is ragen_torchrl.transforms.SNRFilter
    True
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__version__ = "0.1.0"

SUBPACKAGES = ("keys", "envs", "collectors", "transforms", "data", "objectives", "diagnostics", "models", "trainer")

__all__ = [
    "__version__",
    "collectors",
    "data",
    "diagnostics",
    "envs",
    "keys",
    "lazy_exports",
    "models",
    "objectives",
    "trainer",
    "transforms",
]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package whose public names live in submodules.

    ``exports`` maps each public name to the submodule (relative, e.g. ``".snr"``) defining
    it; the submodule is imported when the name is first read (PEP 562), which keeps
    package imports cheap and free of import cycles.
    """

    def __getattr__(name: str) -> Any:
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(module, package), name)

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(vars(sys.modules[package])))

    return __getattr__, __dir__


def __getattr__(name: str) -> Any:
    # subpackages on first use: ``ragen_torchrl.transforms`` after a bare ``import ragen_torchrl``
    if name in SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
