"""Shared pytest fixtures.

* ``tensordict.set_list_to_stack(True)`` is switched on before any test module builds a
  ``History`` (torchrl's LLM history mode needs it).
* torch runs on one CPU thread: the tiny models are far too small to gain from more, and
  several processes share the test machines' cores (OpenMP threads that oversubscribe
  the cores make the end-to-end tests several times slower).
* one tiny tokenizer + model (FrozenLake corpus, hidden 32, 1 layer, vocab ~300) is built
  once per session; tests load their own copy with :func:`helpers.load_tiny`.
* the suite runs on every core with pytest-xdist (``-n auto`` in ``pyproject.toml``); the
  tiny model and the end-to-end tests' model cache are shared by the workers (``_run_dir``).
* the unknown-key check's schema (every YAML file under configs/, parsed at each
  ``validate_config``) is kept per state of the files for the session.
* constants shared by test files (``TINY_RUN``, ``SMALL``, ...) live in ``helpers.py``.
"""

from __future__ import annotations

import logging
import os

import tensordict

tensordict.set_list_to_stack(True).set()

import pytest  # noqa: E402
import torch  # noqa: E402
from helpers import TINY_SIZES, load_tiny  # noqa: E402

torch.set_num_threads(1)


def _run_dir(tmp_path_factory, name: str):
    """A folder of this run shared by its pytest-xdist workers (the parent of their own temp dirs)."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def tiny_corpus() -> list[str]:
    """Tokenizer corpus from FrozenLake demonstrations (what the trainer trains on, smaller)."""
    from ragen_torchrl.envs import make_env
    from ragen_torchrl.trainer.demonstrations import tokenizer_corpus

    return tokenizer_corpus(make_env("frozenlake", num_envs=1), num_episodes=40, seed=0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_corpus) -> str:
    """Directory of the session's tiny model (``save_pretrained`` layout)."""
    from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model

    return build_tiny_model(
        tiny_corpus, TinyModelConfig(**TINY_SIZES, seed=0), _run_dir(tmp_path_factory, "tiny_models")
    )


@pytest.fixture
def tiny_model(tiny_model_dir):
    """A fresh copy of the session's tiny (model, tokenizer): tests may change it freely."""
    torch.manual_seed(0)
    return load_tiny(tiny_model_dir)


@pytest.fixture(scope="session")
def ragen_cache_dir(tmp_path_factory) -> str:
    """``model.cache_dir`` shared by the end-to-end trainer tests (tiny build + SFT once).

    Under pytest-xdist every worker of the run uses the same folder, so a tokenizer or warm start
    one worker built is not built again by another; the caches write to a temporary name and
    rename, so two workers building one entry at once is safe.
    """
    return str(_run_dir(tmp_path_factory, "ragen_cache"))


@pytest.fixture(autouse=True)
def _package_loggers_reach_caplog():
    """Each test starts with the package's loggers enabled and propagating to the root logger.

    A logging configuration applied by an earlier test in the same process (``dictConfig`` disables
    every logger that already exists unless told otherwise; import-linter's CLI does that) must not
    decide whether a later test's ``caplog`` sees our log records.
    """
    logging.disable(logging.NOTSET)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("ragen_torchrl") and isinstance(logger, logging.Logger):
            logger.disabled = False
            logger.propagate = True
    yield
