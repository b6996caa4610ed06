"""Command-line entry points: ``ragen-train`` and ``ragen-sft`` (Hydra apps).

``ragen-train`` runs the default experiment (FrozenLake, GRPO, tiny model) and writes
TensorBoard logs and checkpoints under Hydra's run dir ``outputs/<date>/<time>/``::

    ragen-train
    ragen-train env=frozenlake trainer.total_iterations=20 algo.lr=1e-4
    ragen-train trainer.resume=outputs/2026-11-29/21-00-00

``ragen-sft`` only builds the warm-started policy (cached for later runs).

Configs are read from ``RAGEN_CONFIG_DIR`` when set, else from the ``configs/`` folder of
the source checkout.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

CONFIG_DIR = os.environ.get("RAGEN_CONFIG_DIR", str(Path(__file__).resolve().parents[2] / "configs"))


def _run_dir() -> str:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.output_dir


def _train(cfg) -> None:
    from .config import ConfigError
    from .loop import Trainer

    try:
        trainer = Trainer(cfg, _run_dir())
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"run dir: {trainer.run_dir}  (tensorboard --logdir {trainer.run_dir})", flush=True)
    trainer.fit()


def _sft(cfg) -> None:
    from .config import ConfigError, validate_config
    from .loop import Trainer

    try:
        validate_config(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    cfg.trainer.total_iterations = 0
    trainer = Trainer(cfg, _run_dir())
    stats = trainer.validate(step=0)
    print(f"warm-started model: {trainer.model_path}")
    print(f"validation success {stats['success']:.3f} ± {stats['success_stderr']:.3f}, "
          f"format-valid {stats['format_valid']:.3f}")


def _hydra_main(task):
    import hydra

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    return hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")(task)


def train_main() -> None:
    """Entry point of ``ragen-train``."""
    _hydra_main(_train)()


def sft_main() -> None:
    """Entry point of ``ragen-sft``."""
    _hydra_main(_sft)()
