"""The former home of ``ragen-eval`` and its evaluation library, kept as an import path.

The library is :mod:`ragen_torchrl.trainer.policy_eval` (:func:`evaluate_policy`, :func:`export_policy`,
:func:`stats_line`, :class:`EvalError`, the run dir's policy names) and the command line
:mod:`ragen_torchrl.trainer.eval_cli` (:func:`main`, :func:`eval_main`, :func:`resolve_target`, ...);
both are importable from here, so ``from ragen_torchrl.trainer.evaluate import evaluate_policy`` and a
``ragen-eval`` script installed before the split (it imports ``eval_main`` from this module) keep working.

Example:
    >>> from ragen_torchrl.trainer import eval_cli, policy_eval
    >>> eval_main is eval_cli.eval_main and evaluate_policy is policy_eval.evaluate_policy
    True
"""

from __future__ import annotations

from .eval_cli import (
    EVAL_BEST_FILE,
    EVAL_FILE,
    build_parser,
    env_presets,
    eval_main,
    evaluate,
    main,
    parse_overrides,
    resolve_target,
)
from .policy_eval import BEST_POLICY_DIR, POLICY_DIR, EvalError, evaluate_policy, export_policy, stats_line

__all__ = [
    "BEST_POLICY_DIR",
    "EVAL_BEST_FILE",
    "EVAL_FILE",
    "POLICY_DIR",
    "EvalError",
    "build_parser",
    "env_presets",
    "eval_main",
    "evaluate",
    "evaluate_policy",
    "export_policy",
    "main",
    "parse_overrides",
    "resolve_target",
    "stats_line",
]
