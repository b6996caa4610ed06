"""``logger.backend``: which of torchrl's logger types the run log writes to, checked without importing torch.

The config check (:class:`~ragen_torchrl.trainer.config_schema.LoggerConfig`) and the run log
(:mod:`ragen_torchrl.trainer.run_log`, which builds the logger) share these.

Example:
    >>> LOGGER_BACKENDS[0]
    'tensorboard'
"""

from __future__ import annotations

import importlib.util

__all__ = ["BACKEND_PACKAGES", "LOGGER_BACKENDS", "check_backend"]

#: ``logger.backend``: torchrl's logger types (``torchrl.record.loggers.get_logger``)
LOGGER_BACKENDS = ("tensorboard", "csv", "wandb", "mlflow", "trackio")
#: the package each backend needs (``None``: torch's own TensorBoard writer, always there)
BACKEND_PACKAGES = {"tensorboard": None, "csv": None, "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}


def check_backend(backend: str, key: str = "logger.backend") -> None:
    """``backend`` is one of :data:`LOGGER_BACKENDS` and its package is installed, else ``ValueError`` naming ``key``.

    Example:
        >>> check_backend("csv")
    """
    if backend not in LOGGER_BACKENDS:
        raise ValueError(f"{key} must be one of {', '.join(LOGGER_BACKENDS)}, got {backend!r}")
    package = BACKEND_PACKAGES[backend]
    if package is not None and importlib.util.find_spec(package) is None:
        raise ValueError(f"{key}={backend} needs the {package} package: pip install {package}")
