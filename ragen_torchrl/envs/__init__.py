"""Environments: TorchRL chat envs over pure-Python game cores, and the registry.

Example:
    >>> from ragen_torchrl.envs import make_env, available_envs
    >>> "frozenlake" in available_envs()
    True
    >>> env = make_env("frozenlake", num_envs=4, success_rate=0.98)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .active.tasks import (
    CircuitDecodingEnv,
    GuessNumbersEnv,
    MovieRecommendationEnv,
    PreferenceEstimationEnv,
    SituationPuzzlesEnv,
)
from .bandit import BanditEnv
from .countdown import CountdownEnv
from .deepcoder import DeepCoderEnv
from .frozenlake import FrozenLakeEnv
from .metamathqa import MetaMathQAEnv
from .searchqa import SearchQAEnv
from .sokoban import SokobanEnv
from .text_env import RowTransformedEnv, TextGameEnv
from .visual import VisualFrozenLakeEnv, VisualSokobanEnv
from .webshop import WebShopEnv

_REGISTRY: dict[str, Callable[..., TextGameEnv]] = {
    "frozenlake": FrozenLakeEnv,
    "sokoban": SokobanEnv,
    "bandit": BanditEnv,
    "countdown": CountdownEnv,
    "metamathqa": MetaMathQAEnv,
    "guess_numbers": GuessNumbersEnv,
    "circuit_decoding": CircuitDecodingEnv,
    "preference_estimation": PreferenceEstimationEnv,
    "movie_recommendation": MovieRecommendationEnv,
    "situation_puzzles": SituationPuzzlesEnv,
    "searchqa": SearchQAEnv,
    "webshop": WebShopEnv,
    "deepcoder": DeepCoderEnv,
    "sokoban_visual": VisualSokobanEnv,
    "frozenlake_visual": VisualFrozenLakeEnv,
}


def register_env(name: str, builder: Callable[..., TextGameEnv]) -> None:
    """Register ``builder(**cfg) -> TextGameEnv`` under ``name`` for :func:`make_env`."""
    _REGISTRY[name] = builder


def available_envs() -> list[str]:
    """Names accepted by :func:`make_env`."""
    return sorted(_REGISTRY)


def env_builder(name: str) -> Callable[..., TextGameEnv] | None:
    """The builder registered under ``name`` (its class for a shipped env), ``None`` when none is.

    Example:
        >>> env_builder("bandit").__name__, env_builder("no_such_env")
        ('BanditEnv', None)
    """
    return _REGISTRY.get(name)


def make_env(name: str, **cfg: Any) -> TextGameEnv:
    """Build a registered environment by name.

    Raises:
        ValueError: unknown name (the message lists the valid names).
    """
    try:
        builder = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(available_envs())}") from None
    return builder(**cfg)


__all__ = [
    "DeepCoderEnv",
    "FrozenLakeEnv",
    "RowTransformedEnv",
    "SearchQAEnv",
    "TextGameEnv",
    "WebShopEnv",
    "make_env",
    "register_env",
    "available_envs",
    "env_builder",
]
