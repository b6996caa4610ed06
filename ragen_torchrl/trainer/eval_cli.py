"""``ragen-eval``: evaluate a run dir, a checkpoint file or a Hugging Face model dir on an env's fixed
validation levels, with the numbers a run's own validation gives
(:func:`~ragen_torchrl.trainer.policy_eval.evaluate_policy`, the code path of ``Trainer.validate``).

``ragen-eval`` (:func:`main`)::

    ragen-eval outputs/2026-11-30/12-00-00                 # a run dir: its final policy, its settings
    ragen-eval outputs/.../checkpoints/last.pt --levels 64  # a checkpoint file
    ragen-eval /models/my-policy --env sokoban --json eval.json
    ragen-eval outputs/... --export exported/               # also write the policy as an HF model dir
    ragen-eval outputs/... --dump episode.gif               # a visual env: level 0's episode as a GIF
    ragen-eval outputs/... --dump strip.png --dump-level 3  # level 3's episode as a PNG strip
    ragen-eval last.pt --base-model Qwen/Qwen2.5-0.5B        # a checkpoint whose starting model is on the hub
    ragen-eval outputs/... --which best                     # the peak validation's policy (trainer.keep_best)
    ragen-eval outputs/... --final-eval --levels 2048       # final (and best) policy, greedy and sampled, per level
    ragen-eval outputs/... rollout.max_new_tokens=64 env=sokoban   # Hydra-style overrides, as ragen-train
    ragen-eval /models/my-policy --config-dir my_presets env=mine  # a preset of your own (my_presets/env/mine.yaml)

Overrides are bare ``KEY=VALUE`` in Hydra's syntax (``+KEY=VALUE`` adds a key); they set keys of the
evaluated config, and ``env=NAME`` picks an env preset as ``--env NAME`` does. ``-o KEY=VALUE`` still
works for one release, with a deprecation warning. ``--config-dir DIR`` adds DIR's presets to the
shipped ones (Hydra's ``--config-dir``), for ``env=`` / ``--env`` and a model dir's defaults.

It prints success ± standard error, mean return, turns, tokens and format-valid, and writes
them as JSON (``--json PATH``; a run dir defaults to ``<run dir>/eval.json``; otherwise the
JSON goes to stdout). Bad input exits 2 with one ``ragen-eval: error: ...`` line.

``--final-eval`` runs :mod:`~ragen_torchrl.trainer.final_eval` instead: a run dir's final and (when kept)
best policy (``--which`` picks one), ``--greedy`` and/or ``--sampled`` (neither: ``trainer.final_eval.modes``),
on ``--levels`` of its own held-out levels, into ``final_eval.json`` (``--json``) and
``final_eval_levels.csv`` (``--per-level``): in a run dir, the files ``trainer.final_eval.levels > 0`` writes.

A target may come from elsewhere: what is read stays inside a run dir (a symlink leading out of it
is refused), a checkpoint's fields are checked before use and its weights against the starting
model's names and shapes, a checkpoint's ``model_path`` is loaded only from a local dir (a hub id
only when named with ``--base-model``), the loaded chat template must render probe conversations
within a time limit (:func:`~ragen_torchrl.models.template_guard.check_chat_template`), and
``eval.json`` is written without following a link planted in the run dir.

``--dump PATH`` (visual envs) writes the observed images of one episode (level ``--dump-level``,
default 0: its board at each turn, then the final board) as an animated GIF (``.gif``) or a PNG
strip (``.png``); see :mod:`ragen_torchrl.trainer.episode_frames`.

Example:
    >>> build_parser().parse_args(["outputs/run", "env=sokoban", "--levels", "8"]).overrides
    ['env=sokoban']
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..cli_overrides import add_deprecated_override_option, warn_deprecated_overrides
from ..envs import make_env
from ..model_source import ModelSourceError
from ..models.loading import load_policy
from ..models.lora import LoRASettings, apply_lora, load_adapter_state
from ..models.template_guard import ChatTemplateError, check_chat_template
from ..safe_io import UnsafeFileError, inside
from .checkpoint import (
    BEST,
    DamagedCheckpointError,
    InvalidCheckpointError,
    UnsafeCheckpointError,
    check_checkpoint_state,
    check_model_state,
    checkpoint_files,
    load_latest,
    read_checkpoint,
)
from .config_checks import LIMITS, ConfigError
from .config_paths import CONFIG_DIR
from .config_typing import typed_config
from .episode_frames import DUMP_FORMATS, EpisodeFrames, save_episode
from .final_eval import check_final_eval, eval_rollout_policy, final_evaluation, result_lines, save_final_eval
from .model_setup import env_kwargs
from .policy_eval import BEST_POLICY_DIR, POLICY_DIR, EvalError, evaluate_policy, export_policy, stats_line
from .stored_config import check_stored_config, load_yaml_config
from .summary import json_safe, read_summary, write_json_atomic

__all__ = [
    "EVAL_BEST_FILE",
    "EVAL_FILE",
    "build_parser",
    "env_presets",
    "eval_main",
    "evaluate",
    "main",
    "parse_overrides",
    "resolve_target",
]

#: where ``ragen-eval RUN`` writes its result by default
EVAL_FILE = "eval.json"
#: ``ragen-eval RUN --which best`` writes here by default
EVAL_BEST_FILE = "eval_best.json"


def _compose(overrides: list[str], config_dir: str | None = None):
    if config_dir is not None:  # what Hydra's --config-dir does: the folder joins the search path
        overrides = [*overrides, f"hydra.searchpath=[{Path(config_dir).resolve().as_uri()}]"]
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            return compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise EvalError(_one_line(e)) from None


def env_presets(config_dir: str | None = None) -> list[str]:
    """The env presets (``configs/env/*.yaml``, and ``env/*.yaml`` of ``config_dir``) a model dir can be evaluated on.

    Example:
        >>> "frozenlake" in env_presets()
        True
    """
    dirs = [Path(CONFIG_DIR)] + ([Path(config_dir)] if config_dir is not None else [])
    return sorted({p.stem for d in dirs for p in (d / "env").glob("*.yaml")})


def _env_node(preset: str, config_dir: str | None = None):
    if preset not in env_presets(config_dir):
        raise EvalError(f"unknown env preset {preset!r}; available: {', '.join(env_presets(config_dir))}")
    return _compose([f"env={preset}"], config_dir).env


def parse_overrides(items: list[str]) -> list[tuple[str, Any, bool]]:
    """Hydra-style ``KEY=VALUE`` overrides as ``(key, value, add)`` (``add``: written ``+KEY=`` or ``++KEY=``).

    Values are typed as Hydra types them (``64`` an int, ``null`` None, ``[a,b]`` a list, quotes a string).

    Raises:
        EvalError: not an override, a deletion (``~KEY``), or a sweep (``a=1,2``: one evaluation per call).

    Example:
        >>> parse_overrides(["rollout.max_new_tokens=64", "+extra.note='a b'", "env=sokoban"])
        [('rollout.max_new_tokens', 64, False), ('extra.note', 'a b', True), ('env', 'sokoban', False)]
        >>> parse_overrides(["seed=0,1"])
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.policy_eval.EvalError: seed=0,1: one value per key (ragen-eval runs one evaluation, not a sweep)
    """
    parser = OverridesParser.create()
    out = []
    for item in items:
        try:
            o = parser.parse_override(item)
        except Exception as e:  # noqa: BLE001 - Hydra's parse errors have several types
            raise EvalError(f"{item}: not a KEY=VALUE override ({_one_line(e)})") from None
        if o.is_delete():
            raise EvalError(f"{item}: ragen-eval sets keys; it deletes none")
        if o.is_sweep_override():
            raise EvalError(f"{item}: one value per key (ragen-eval runs one evaluation, not a sweep)")
        out.append((o.key_or_group, o.value(), o.is_add() or o.is_force_add()))
    return out


def _is_run_dir(path: Path) -> bool:
    return (path / "summary.json").is_file() or (path / "checkpoints").is_dir() or (path / POLICY_DIR).is_dir()


def _run_config(run_dir: Path) -> tuple[dict[str, Any], tuple | None]:
    """The run's config (summary.json, else its checkpoint, else Hydra's ``.hydra/config.yaml``,
    each checked by :func:`~ragen_torchrl.trainer.stored_config.check_stored_config`, never
    resolved) and the checkpoint read for it (``None`` when none was read)."""
    try:
        if (run_dir / "summary.json").is_file():
            try:
                return check_stored_config(read_summary(run_dir)["config"], run_dir / "summary.json"), None
            except (ValueError, RecursionError) as e:
                if isinstance(e, ConfigError):
                    raise
                raise EvalError(_one_line(e)) from None
        ckpt = _latest_checkpoint(run_dir, required=False)
        if ckpt is not None and ckpt[0].get("config"):
            return check_stored_config(ckpt[0]["config"], ckpt[1]), ckpt
        hydra_cfg = run_dir / ".hydra" / "config.yaml"
        if hydra_cfg.is_file():
            return load_yaml_config(hydra_cfg, root=run_dir), ckpt
    except ConfigError as e:
        raise EvalError(str(e)) from None
    raise EvalError(f"{run_dir}: no config found (no summary.json, checkpoint or .hydra/config.yaml)")


def _latest_checkpoint(run_dir: Path, *, required: bool = True):
    if not checkpoint_files(run_dir / "checkpoints"):
        if required:
            raise EvalError(f"{run_dir}: no {POLICY_DIR}/ and no checkpoint in checkpoints/ to evaluate")
        return None
    try:
        return load_latest(run_dir / "checkpoints", what=str(run_dir), clean=False)  # the run may be training
    except ConfigError as e:
        raise EvalError(str(e)) from None


def _load_checkpoint_policy(state: dict[str, Any], where: Path, device: str, dtype: str, base_model: str | None = None):
    """The checkpoint's weights on its starting model: ``base_model`` (named on the command line, a
    hub id allowed) or else the checkpoint's ``model_path``, which must be a local model dir: a name
    read from a file is never looked up on the hub."""
    base = base_model or state.get("model_path")
    if not base:
        raise EvalError(f"{where}: the checkpoint does not name its starting model (model_path); pass --base-model")
    if base_model is None and not (Path(str(base)).expanduser() / "config.json").is_file():
        raise EvalError(
            f"{where}: cannot load the checkpoint's starting model {str(base)[:200]!r}: not a local model dir, and a "
            "model named by a file is never looked up on the hub (pass --base-model NAME to load it from there)"
        )
    try:
        model, tokenizer, processor = load_policy(str(base), device, dtype)
    except ModelSourceError as e:
        raise EvalError(
            f"{where}: cannot load the checkpoint's starting model (its weights are applied on it): {_one_line(e)}"
        ) from None
    lora = OmegaConf.select(OmegaConf.create(state.get("config") or {}), "model.lora", default=None)
    if lora is not None and lora.get("enabled"):
        # a LoRA run's checkpoint holds its adapters only: the same adapters on the starting model, then their weights
        try:
            model = apply_lora(model, LoRASettings.from_config(lora))
            load_adapter_state(model, state["model"])
        except ImportError:
            raise EvalError(f"{where}: a LoRA run's checkpoint needs peft: pip install 'ragen-torchrl[lora]'") from None
        except (KeyError, ValueError, TypeError) as e:
            raise EvalError(f"{where}: the adapters do not fit the starting model {base}: {_one_line(e)}") from None
        return model.eval(), tokenizer, processor
    try:
        check_model_state(state["model"], model, where)
        model.load_state_dict(state["model"])
    except (RuntimeError, ValueError) as e:
        raise EvalError(f"{where}: the weights do not fit the starting model {base}: {_one_line(e)}") from None
    return model.eval(), tokenizer, processor


def _checked_state(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """The fields ``ragen-eval`` reads (weights, starting model, config) of the right types, else :class:`EvalError`."""
    try:
        return check_checkpoint_state(state, path, resume=False)
    except InvalidCheckpointError as e:
        raise EvalError(str(e)) from None


def resolve_target(
    target: str | os.PathLike, env: str | None = None, which: str = "last", config_dir: str | None = None
) -> dict[str, Any]:
    """What ``ragen-eval TARGET`` evaluates: ``{"kind", "config", "policy", "run_dir", "checkpoint"}``.

    ``kind`` is ``"run"`` (a run dir: its config, and with ``which="last"`` its final ``policy/`` or, when
    that is missing or older, ``checkpoints/last.pt``; with ``which="best"`` the peak validation's
    ``policy_best/`` or, when that is missing or older, ``checkpoints/best.pt``), ``"checkpoint"`` (a checkpoint file: its config
    and weights) or ``"model"`` (an HF model dir: the config files' defaults with ``env``).
    ``policy`` is a model dir to load, or ``None`` when the weights come from ``checkpoint``.

    Raises:
        EvalError: the target does not exist or is none of the three.

    Example:
        >>> resolve_target("/nonexistent/run")
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.policy_eval.EvalError: /nonexistent/run: no such file or directory
    """
    path = Path(target).expanduser()
    if which not in ("last", "best"):
        raise EvalError(f"--which must be last or best, got {which!r}")
    if not path.exists():
        raise EvalError(f"{target}: no such file or directory")
    if which == "best" and not (path.is_dir() and _is_run_dir(path)):
        raise EvalError(f"{target}: --which best needs a run dir (its policy_best/ or checkpoints/best.pt)")
    if path.is_file():
        try:
            state = read_checkpoint(path)
        except UnsafeCheckpointError as e:
            raise EvalError(str(e)) from None
        except DamagedCheckpointError as e:
            raise EvalError(f"{target}: not a training checkpoint ({str(e).split(': ', 1)[-1]})") from None
        _checked_state(state, path)
        if not state.get("config"):
            raise EvalError(f"{target}: the checkpoint holds no config")
        try:
            cfg = OmegaConf.create(check_stored_config(state["config"], path))
        except ConfigError as e:
            raise EvalError(str(e)) from None
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
        out = {"kind": "checkpoint", "policy": None, "run_dir": run_dir, "checkpoint": (state, path)}
    elif _is_run_dir(path):
        config, ckpt = _run_config(path)
        cfg = OmegaConf.create(config)
        name = BEST_POLICY_DIR if which == "best" else POLICY_DIR
        policy, last = path / name, path / "checkpoints" / ("best.pt" if which == "best" else "last.pt")
        _inside(policy, path)
        saved = (policy / "config.json").is_file() or (policy / "adapter_config.json").is_file()
        fresh = (policy / "config.json").is_file() and (
            not last.is_file() or policy.stat().st_mtime >= last.stat().st_mtime
        )
        if which == "best" and not saved and not last.is_file():
            raise EvalError(
                f"{target}: no {BEST_POLICY_DIR}/ and no checkpoints/best.pt (the run kept no best policy: "
                "train with trainer.keep_best=true)"
            )
        if fresh:
            ckpt = None
        elif which == "best":
            ckpt = _best_checkpoint(path)
        elif ckpt is None:  # each checkpoint file is read once
            ckpt = _latest_checkpoint(path)
        if ckpt is not None:
            _checked_state(*ckpt)
        out = {"kind": "run", "policy": policy if fresh else None, "run_dir": path, "checkpoint": ckpt}
    elif (path / "config.json").is_file():
        cfg = _compose([f"model.name_or_path={path}", "sft.enabled=false"], config_dir)
        out = {"kind": "model", "policy": path, "run_dir": None, "checkpoint": None}
    else:
        raise EvalError(
            f"{target}: not a run dir (no summary.json, checkpoints/ or policy/), a checkpoint file, "
            "or a model dir (no config.json)"
        )
    if env is not None:
        OmegaConf.set_struct(cfg, False)
        cfg.env = _env_node(env, config_dir)
    out["config"] = _typed(cfg)
    return out


def _best_checkpoint(run_dir: Path):
    """``checkpoints/best.pt`` of ``run_dir`` and its path (read like any checkpoint, never through a link)."""
    path = run_dir / "checkpoints" / BEST
    _inside(path, run_dir)
    try:
        return read_checkpoint(path), path
    except DamagedCheckpointError as e:
        raise EvalError(str(e)) from None


def _inside(path: Path, root: Path) -> None:
    try:
        inside(path, root)
    except UnsafeFileError as e:
        raise EvalError(str(e)) from None


def _typed(cfg) -> Any:
    """``cfg`` merged onto the typed schema: a key a stored config lacks gets its default, a value of the
    wrong type is an :class:`EvalError` naming the key."""
    try:
        return typed_config(cfg)
    except ConfigError as e:
        raise EvalError(_one_line(e)) from None


def _one_line(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _set(cfg, key: str, value: Any, add: bool = False) -> None:
    missing = object()
    current = OmegaConf.select(cfg, key, default=missing)
    if current is missing and not add:
        raise EvalError(f"{key}=...: no such config key (+{key}=... adds one)")
    if isinstance(current, DictConfig) and isinstance(value, str):
        raise EvalError(
            f"{key}={value}: ragen-eval evaluates with the target's own {key} config; only env=NAME picks a preset"
        )
    OmegaConf.update(cfg, key, value, merge=False, force_add=True)


def build_parser() -> argparse.ArgumentParser:
    """The ``ragen-eval`` argument parser.

    Example:
        >>> build_parser().parse_args(["outputs/run", "--levels", "8"]).levels
        8
    """
    p = argparse.ArgumentParser(
        prog="ragen-eval",
        description="Evaluate a run dir, a checkpoint file or an HF model dir on an env's fixed validation levels.",
    )
    p.add_argument("target", help="run dir, checkpoint file (checkpoints/last.pt) or Hugging Face model dir")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides in Hydra's syntax, as ragen-train takes them (rollout.max_new_tokens=64; "
        "+KEY=VALUE adds a key; env=NAME picks an env preset)",
    )
    p.add_argument(
        "--which",
        choices=("last", "best"),
        help="a run dir's final policy (last, the default) or the peak validation's (best: policy_best/, "
        "checkpoints/best.pt; trainer.keep_best=true); --final-eval without it: both, when the run kept a best",
    )
    p.add_argument(
        "--final-eval",
        action="store_true",
        help="the final evaluation (trainer.final_eval), not a validation: --levels held-out levels disjoint from "
        "the validation levels, per level; writes final_eval.json and final_eval_levels.csv",
    )
    p.add_argument("--greedy", action="store_true", help="--final-eval: the greedy mode (temperature 0)")
    p.add_argument("--sampled", action="store_true", help="--final-eval: the sampled mode (at --temperature)")
    p.add_argument("--per-level", metavar="FILE", help="--final-eval: the per-level CSV (default: a run dir's)")
    p.add_argument(
        "--config-dir",
        metavar="DIR",
        help="a folder of presets added to the shipped ones (Hydra's --config-dir), e.g. DIR/env/mine.yaml for env=mine",
    )
    p.add_argument(
        "--env", help="env preset (configs/env/*.yaml); for a model dir the default is the config's (frozenlake)"
    )
    p.add_argument("--levels", type=int, help="levels (default: trainer.val_levels; --final-eval: final_eval's)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default: trainer.val_temperature)")
    p.add_argument("--seed", type=int, help="torch seed of the evaluation (default: the run's seed)")
    p.add_argument("--json", help="write the results here (default: <run dir>/eval.json for a run dir, else stdout)")
    p.add_argument("--export", help="also write the evaluated policy as a Hugging Face model dir here")
    p.add_argument(
        "--base-model",
        metavar="NAME_OR_PATH",
        help="a checkpoint's starting model (its weights are applied on it; a hub id allowed); default: the "
        "checkpoint's model_path, which must then be a local model dir (a name read from a file is never "
        "looked up on the hub)",
    )
    add_deprecated_override_option(p)
    p.add_argument(
        "--dump",
        metavar="PATH",
        help="visual envs: write one episode's observed images as an animated GIF (.gif) or a PNG strip (.png)",
    )
    p.add_argument("--dump-level", type=int, default=0, metavar="K", help="the level whose episode --dump writes")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _bounded_int(value: Any, key: str) -> int:
    """An int in ``[1, LIMITS[key]]`` (a stored config may say ``val_levels: 1e12``), else :class:`EvalError`.

    Example:
        >>> _bounded_int(8, "trainer.val_levels")
        8
        >>> _bounded_int(1e12, "trainer.val_levels")
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.policy_eval.EvalError: trainer.val_levels must be an integer in [1, 65536], got 1000000000000.0
    """
    limit = LIMITS[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value != int(value)
        or not 1 <= value <= limit
    ):
        raise EvalError(f"{key} must be an integer in [1, {limit}], got {value!r}")
    return int(value)


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``ragen-eval`` for parsed ``args``; returns the result written as JSON.

    Raises:
        EvalError: bad input (the CLI prints it and exits 2).
    """
    config_dir = getattr(args, "config_dir", None)
    if config_dir is not None and not Path(config_dir).is_dir():
        raise EvalError(f"--config-dir {config_dir}: no such directory")
    overrides = parse_overrides([*getattr(args, "overrides", []), *args.override])
    env = args.env
    for key, value, _ in overrides:
        if key == "env" and isinstance(value, str):  # a preset choice, as ragen-train reads env=NAME
            env = value
    final = getattr(args, "final_eval", False)
    if not final and any(getattr(args, k, None) for k in ("greedy", "sampled", "per_level")):
        raise EvalError("--greedy, --sampled and --per-level go with --final-eval")
    which = getattr(args, "which", None)
    tgt = resolve_target(args.target, env, which or "last", config_dir)
    # the overrides go onto a plain copy, typed again after them (their values checked like the run's)
    cfg = OmegaConf.create(OmegaConf.to_container(tgt["config"]))
    for key, value, add in overrides:
        if not (key == "env" and isinstance(value, str)):
            _set(cfg, key, value, add)
    if final:
        return _final_evaluate(args, tgt, cfg, env, config_dir)
    if args.levels is not None:
        if int(args.levels) < 1:
            raise EvalError(f"--levels must be >= 1, got {args.levels}")
        _set(cfg, "trainer.val_levels", int(args.levels))
    if args.temperature is not None:
        _set(cfg, "trainer.val_temperature", float(args.temperature))
    if args.seed is not None:
        _set(cfg, "seed", int(args.seed))
    cfg = _typed(cfg)
    levels = _bounded_int(cfg.trainer.val_levels, "trainer.val_levels")
    temperature = float(cfg.trainer.val_temperature)
    seed = int(cfg.seed)
    env_name = str(cfg.env.name)
    max_new_tokens = _bounded_int(cfg.rollout.max_new_tokens, "rollout.max_new_tokens")
    chunk = _bounded_int(cfg.rollout.chunk_size, "rollout.chunk_size")
    if not math.isfinite(temperature) or temperature < 0:
        raise EvalError(f"--temperature must be >= 0, got {temperature}")
    frames = _dump_frames(args, levels)

    try:
        env = make_env(env_name, num_envs=levels, **env_kwargs(cfg.env))
    except (TypeError, ValueError, KeyError) as e:
        raise EvalError(f"env={env_name}: {e}") from None
    if cfg.model.threads:
        torch.set_num_threads(int(cfg.model.threads))
    model, tokenizer, processor, source = _load_model(tgt, cfg, args)
    policy = _rollout_policy(cfg, model, tokenizer, processor, temperature)
    stats, _ = evaluate_policy(
        env,
        policy,
        levels,
        seed=seed,
        chunk_size=chunk,
        progress=not args.no_progress,
        desc="evaluation",
        frames=frames,
    )
    result = {
        "target": str(args.target),
        "kind": tgt["kind"],
        "which": which or "last",
        "policy": source,
        "env": env_name,
        "levels": levels,
        "temperature": temperature,
        "seed": seed,
        "max_new_tokens": max_new_tokens,
        "stats": stats,
    }
    if args.export:
        result["exported"] = str(export_policy(model, tokenizer, args.export))
    if frames is not None:
        result["dump"] = str(_write_dump(args, frames, env_name))
    return result


def _load_model(tgt: dict[str, Any], cfg, args: argparse.Namespace):
    """``(model, tokenizer, processor, source)`` of a resolved target; anything that does not load is an EvalError."""
    device, dtype = str(cfg.model.device), str(cfg.model.dtype)
    try:
        if tgt["policy"] is not None:
            model, tokenizer, processor = load_policy(str(tgt["policy"]), device, dtype)
            source = str(tgt["policy"])
        else:
            state, ckpt_path = tgt["checkpoint"]
            model, tokenizer, processor = _load_checkpoint_policy(
                state, ckpt_path, device, dtype, getattr(args, "base_model", None)
            )
            source = str(ckpt_path)
        for renderer in (tokenizer, processor):  # a chat template that never finishes would hang every rollout
            check_chat_template(renderer, source)
    except EvalError:
        raise
    except ChatTemplateError as e:
        raise EvalError(str(e)) from None
    except ModelSourceError as e:
        raise EvalError(_one_line(e)) from None
    except Exception as e:  # transformers raises many types for a dir that is no loadable model
        where = tgt["policy"] if tgt["policy"] is not None else tgt["checkpoint"][1]
        raise EvalError(f"cannot load the model {where}: {type(e).__name__}: {_one_line(e)}") from None
    return model, tokenizer, processor, source


def _rollout_policy(cfg, model, tokenizer, processor, temperature: float):
    try:  # a vision-language policy (its image processor loaded with it) rolls out on the env's images
        return eval_rollout_policy(cfg, model, tokenizer, processor, temperature)
    except ValueError as e:  # a bad rollout.trajectory / kv_cache / kv_cache_max_tokens (names the key)
        raise EvalError(_one_line(e)) from None


def _final_evaluate(args: argparse.Namespace, tgt: dict[str, Any], cfg, env: str | None, config_dir) -> dict:
    """``ragen-eval --final-eval``: ``--levels``, ``--greedy`` / ``--sampled``, ``--temperature`` and ``--seed``
    set ``trainer.final_eval`` and ``seed``; returns the result, its per-level rows under ``level_rows``."""
    if args.dump is not None or args.export:
        raise EvalError("--dump and --export evaluate one policy: leave out --final-eval")
    modes = [m for m in ("greedy", "sampled") if getattr(args, m, False)]
    given = {"levels": args.levels, "modes": modes or None, "temperature": args.temperature}
    for key, value in [*((f"trainer.final_eval.{k}", v) for k, v in given.items()), ("seed", args.seed)]:
        if value is not None:
            _set(cfg, key, value, add=True)
    cfg = _typed(cfg)
    try:
        check_final_eval(cfg)
    except ConfigError as e:
        raise EvalError(f"{e} (--levels N)" if cfg.trainer.final_eval.levels == 0 else str(e)) from None
    for key in ("rollout.max_new_tokens", "rollout.chunk_size"):
        _bounded_int(OmegaConf.select(cfg, key), key)
    which, run_dir = getattr(args, "which", None), tgt["run_dir"]
    targets = {"best" if which == "best" else "final": tgt}
    kept = tgt["kind"] == "run" and ((run_dir / BEST_POLICY_DIR).is_dir() or (run_dir / "checkpoints" / BEST).exists())
    if which is None and kept:
        targets["best"] = resolve_target(args.target, env, "best", config_dir)
    if cfg.model.threads:
        torch.set_num_threads(int(cfg.model.threads))

    def load(t: dict[str, Any]):
        model, tokenizer, processor, source = _load_model(t, cfg, args)
        _rollout_policy(cfg, model, tokenizer, processor, 0.0)  # a bad rollout setting: an EvalError before any play
        return model, tokenizer, processor, source

    def env_for(n: int):
        try:
            return make_env(str(cfg.env.name), num_envs=n, **env_kwargs(cfg.env))
        except (TypeError, ValueError, KeyError) as e:
            raise EvalError(f"env={cfg.env.name}: {e}") from None

    loaders = {name: (lambda t=t: load(t)) for name, t in targets.items()}
    result, rows = final_evaluation(cfg, loaders, progress=not args.no_progress, env_for=env_for)
    return {"target": str(args.target), "kind": tgt["kind"], **result, "level_rows": rows}


def _dump_frames(args: argparse.Namespace, levels: int) -> EpisodeFrames | None:
    """The recorder of ``--dump``'s episode (``None`` without ``--dump``); bad options are :class:`EvalError`."""
    if args.dump is None:
        return None
    if Path(args.dump).suffix.lower() not in DUMP_FORMATS:
        raise EvalError(f"--dump {args.dump}: the file must end with one of {', '.join(DUMP_FORMATS)}")
    if not 0 <= int(args.dump_level) < levels:
        raise EvalError(f"--dump-level must be in [0, {levels}) (the evaluated levels), got {args.dump_level}")
    return EpisodeFrames([int(args.dump_level)])


def _write_dump(args: argparse.Namespace, frames: EpisodeFrames, env_name: str) -> Path:
    images = frames.frames.get(int(args.dump_level))
    if not images:
        raise EvalError(
            f"--dump needs a visual env (one that writes images, e.g. frozenlake_visual); {env_name} does not"
        )
    return save_episode(images, args.dump)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ragen-eval``; returns the exit status (0, or 2 on bad input).

    Example:
        >>> main(["/nonexistent/run"])
        2
    """
    args = build_parser().parse_intermixed_args(argv)
    warn_deprecated_overrides("ragen-eval", str(args.target), args.override)
    try:
        result = evaluate(args)
    except EvalError as e:
        print(f"ragen-eval: error: {e}", file=sys.stderr, flush=True)
        return 2
    except OSError as e:  # e.g. an unwritable --export dir
        print(f"ragen-eval: error: {e}", file=sys.stderr, flush=True)
        return 2
    if args.final_eval:  # its lines, then final_eval.json and final_eval_levels.csv (a run dir's by default)
        rows = result.pop("level_rows")
        print("\n".join(result_lines(result)), flush=True)
        run_dir = Path(args.target) if result["kind"] == "run" else None
        try:
            written = save_final_eval(result, rows, run_dir=run_dir, json_path=args.json, levels_path=args.per_level)
        except OSError as e:
            print(f"ragen-eval: error: cannot write the final evaluation: {e}", file=sys.stderr, flush=True)
            return 2
        for path in written:
            print(f"wrote {path}", flush=True)
        if not args.json and run_dir is None:
            print(json.dumps(json_safe(result), indent=2, allow_nan=False), flush=True)
        return 0
    print(
        f"{result['kind']} {result['policy']}: env {result['env']}, {result['levels']} levels, "
        f"temperature {result['temperature']:g}, seed {result['seed']}",
        flush=True,
    )
    print(stats_line(result["stats"]), flush=True)
    default = EVAL_BEST_FILE if args.which == "best" else EVAL_FILE
    out = args.json or (str(Path(args.target) / default) if result["kind"] == "run" else None)
    if out:
        try:
            write_json_atomic(out, result)
        except OSError as e:
            print(f"ragen-eval: error: cannot write {out}: {e}", file=sys.stderr, flush=True)
            return 2
        print(f"wrote {out}", flush=True)
    else:
        print(json.dumps(json_safe(result), indent=2, allow_nan=False), flush=True)
    if result.get("exported"):
        print(f"exported the policy to {result['exported']}", flush=True)
    return 0


def eval_main() -> None:
    """Console entry point of ``ragen-eval``."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    sys.exit(main())
