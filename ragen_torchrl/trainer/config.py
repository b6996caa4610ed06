"""Validation of a composed training config, before any model is built.

:func:`validate_config` is the first thing :class:`~ragen_torchrl.trainer.loop.Trainer`
does, and ``ragen-train`` / ``ragen-sft`` run it once more before Hydra creates the run
dir; every failure is a :class:`ConfigError` naming the key and the bad value, and the
CLI exits with status 2. In order, it checks:

* **unknown keys** (:func:`check_unknown_keys`): every key must be one the config files
  define (``ragen_torchrl/configs/config.yaml`` and the files of the selected group options).
  Hydra's struct mode already rejects ``foo=1``; this also rejects ``+foo=1`` (Hydra's
  explicit "add a key" syntax), which would otherwise be silently ignored.
* **types and finiteness**: every float anywhere in the config is finite (NaN and inf
  are rejected); integers are integers (``seed=abc`` fails here); booleans are booleans.
* **ranges**: learning rates in (0, 1], probabilities in [0, 1], penalties <= 0, clip
  ranges in (0, 1), dual-clip > 1, the SNR filter's value range (RAGEN-2 §3.3), ...
* **nonsense combinations**: a group of one sample for a group-relative algorithm (every
  advantage would be 0), T3 on an env without a stall rule, DAPO's dynamic-sampling
  criterion, GSPO with a token-level dual clip.
* **sizes** (:data:`LIMITS`, :func:`estimate_iteration_tokens`): every size-like key is
  bounded (``env.size=100000`` would allocate 10^10 cells), and so are the tokens one
  iteration can generate and the tiny model's training memory.
* **paths** (:func:`check_paths`): the model source exists (or, for a hub name, is cached or
  the hub is reachable), the cache and run dirs are writable, a resumed run dir holds a
  checkpoint. Nothing is created on disk.

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"trainer": {"prompts_per_iter": -1}})
    >>> try:
    ...     check_positive_int(cfg, "trainer.prompts_per_iter")
    ... except ValueError as e:
    ...     print(e)
    trainer.prompts_per_iter must be a positive integer, got -1
"""

from __future__ import annotations

import difflib
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


class ConfigError(ValueError):
    """A config value is out of range or of the wrong type."""


class MissingPathError(ConfigError, FileNotFoundError):
    """A path the config names does not exist (e.g. ``trainer.resume`` without a checkpoint)."""


#: upper bounds of size-like keys: each is far above any sensible run and far below what
#: exhausts memory (``env.size=100000`` asks for 10^10 cells). Keys absent from a config are
#: skipped; ``env.dim`` is Sokoban's (height, width) pair or PreferenceEstimation's vector size.
LIMITS: dict[str, int] = {
    "trainer.prompts_per_iter": 4096,
    "trainer.group_size": 256,
    "trainer.val_levels": 65536,
    "trainer.total_iterations": 10_000_000,
    "trainer.log_text_samples": 1024,
    "rollout.max_new_tokens": 32768,
    "rollout.chunk_size": 4096,
    "algo.ppo_epochs": 100,
    "algo.mini_batch_size": 65536,
    "algo.max_length": 1 << 20,
    "algo.critic_chunk_size": 4096,
    "algo.overlong.max_length": 1 << 20,
    "algo.dynamic_sampling.max_extra_rollouts": 100,
    "sft.episodes": 1_000_000,
    "sft.steps": 10_000_000,
    "sft.batch_size": 4096,
    "diagnostics.mi.num_pairs": 1024,  # cross-scoring is quadratic in the pairs
    "model.threads": 1024,
    "model.vocab_size": 1 << 18,
    "model.hidden_size": 16384,
    "model.intermediate_size": 65536,
    "model.num_layers": 256,
    "model.num_heads": 256,
    "model.num_kv_heads": 256,
    "env.size": 64,  # FrozenLake side (size x size cells)
    "env.dim": 64,  # Sokoban side / PreferenceEstimation dimensions
    "env.num_boxes": 64,
    "env.num_steps": 100_000,
    "env.search_depth": 100_000,
    "env.max_nodes": 1_000_000,
    "env.max_turn": 100,
    "env.max_actions_per_turn": 100,
    "env.max_actions_per_traj": 10_000,
    "env.num_circuits": 26,
    "env.num_digits": 10,
    "env.num_symbols": 10,
    "env.list_candidates": 100_000,  # circuits are named A..Z
    "env.n_inputs": 8,  # 2^n truth-table rows per candidate formula
    "env.num_items": 10_000,
    "env.oracle_particles": 1_000_000,
    "env.num_seen": 10_000,
    "env.num_candidates": 10_000,
    "env.num_numbers": 6,  # Countdown's solvability search is factorial in it
    "env.max_number": 1_000_000,
    "env.max_target": 1_000_000_000,
    "env.limit": 100_000_000,
}
#: rows of one iteration (P x G)
MAX_ROWS = 65536
#: tokens one iteration may generate, P x G x env.max_turn x rollout.max_new_tokens (about
#: 16 bytes each for ids, log-probs and masks: 2^26 tokens ~ 1 GiB before any activations)
MAX_ITERATION_TOKENS = 1 << 26
#: positions of the tiny model (``TinyModelConfig.max_position_embeddings``)
TINY_MAX_POSITIONS = 4096

#: algorithms whose advantage compares a sample with its group (a group of one has A = 0)
GROUP_RELATIVE = ("grpo", "drgrpo", "dapo", "gspo")
#: keys the code reads although not every config file defines them (``+key=value`` may add them)
OPTIONAL_KEYS = (
    "algo.aggregation",
    "algo.max_length",
    "algo.overlong.enabled",
    "algo.overlong.max_length",
    "algo.overlong.cache_length",
    "t3.outside_trigger",
    "trainer.resume_allow_changes",
)

_BOOL_KEYS = (
    "sft.enabled",
    "t3.enabled",
    "diagnostics.mi.enabled",
    "env.require_think",
    "env.nonnegative",
    "algo.bi_level",
    "algo.whiten_advantages",
    "algo.overlong.enabled",
    "algo.dynamic_sampling.enabled",
    "trainer.resume_allow_changes",
    "t3.outside_trigger",
)


def _get(cfg: DictConfig, key: str):
    return OmegaConf.select(cfg, key, throw_on_missing=False)


def _has(cfg: DictConfig, key: str) -> bool:
    parent, _, leaf = key.rpartition(".")
    node = _get(cfg, parent) if parent else cfg
    return isinstance(node, (DictConfig, Mapping)) and leaf in node


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _limit_error(key: str, value: Any, limit: int) -> ConfigError:
    return ConfigError(f"{key}={value!r} exceeds the limit {limit} (ragen_torchrl.trainer.config.LIMITS)")


def check_positive_int(
    cfg: DictConfig, key: str, *, allow_zero: bool = False, optional: bool = False, maximum: int | None = None
) -> None:
    """``cfg[key]`` is an int >= 1 (>= 0 with ``allow_zero``), at most ``maximum`` (default
    :data:`LIMITS`); ``optional`` lets ``null`` pass."""
    value = _get(cfg, key)
    if optional and value is None:
        return
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ConfigError(f"{key} must be {kind} integer, got {value!r}")
    limit = LIMITS.get(key) if maximum is None else maximum
    if limit is not None and value > limit:
        raise _limit_error(key, value, limit)


def check_probability(cfg: DictConfig, key: str) -> None:
    value = _get(cfg, key)
    if value is None:
        return
    if not _is_number(value) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"{key} must be a probability in [0, 1], got {value!r}")


def check_positive_float(
    cfg: DictConfig, key: str, *, allow_zero: bool = False, maximum: float | None = None, optional: bool = False
) -> None:
    """``cfg[key]`` is a finite number > 0 (>= 0 with ``allow_zero``) and <= ``maximum``."""
    value = _get(cfg, key)
    if optional and value is None:
        return
    if not _is_number(value) or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(
            f"{key} must be a finite {'non-negative' if allow_zero else 'positive'} number, got {value!r}"
        )
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key} must be at most {maximum}, got {value!r}")


def check_float_range(cfg: DictConfig, key: str, low: float, high: float, *, why: str = "") -> None:
    """``cfg[key]``, when present and not null, is a finite number in [low, high]."""
    value = _get(cfg, key)
    if value is None:
        return
    if not _is_number(value) or not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(f"{key} must be a finite number in [{low}, {high}]{why}, got {value!r}")


def check_bool(cfg: DictConfig, key: str, *, optional: bool = True) -> None:
    value = _get(cfg, key)
    if value is None and optional:
        return
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}")


def check_choice(cfg: DictConfig, key: str, choices) -> None:
    value = _get(cfg, key)
    if value is not None and value not in choices:
        raise ConfigError(f"{key} must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_finite(cfg: DictConfig) -> None:
    """Every float anywhere in ``cfg`` is finite (NaN/inf reach the optimizer or the env otherwise).

    Example:
        >>> from omegaconf import OmegaConf
        >>> check_finite(OmegaConf.create({"algo": {"clip_epsilon": [0.2, float("nan")]}}))
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config.ConfigError: algo.clip_epsilon[1] must be a finite number, got nan
    """

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if prefix == "" and k == "hydra":
                    continue
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{prefix}[{i}]")
        elif isinstance(node, float) and not math.isfinite(node):
            raise ConfigError(f"{prefix} must be a finite number, got {node!r}")

    walk(OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False), "")


# ----------------------------------------------------------------------------- unknown keys
def _tree(node: Any) -> Any:
    """Key tree of a YAML mapping (leaves are ``None``), without Hydra's ``defaults`` list."""
    if not isinstance(node, dict):
        return None
    return {str(k): _tree(v) for k, v in node.items() if k != "defaults"}


def _union(a: Any, b: Any) -> Any:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return a if isinstance(a, dict) else b
    out = dict(a)
    for k, v in b.items():
        out[k] = _union(out[k], v) if k in out else v
    return out


#: first-line header of a group preset whose keys are global (``env: {...}``, ``sft: {...}``)
GLOBAL_PACKAGE = "@package _global_"


def config_schema(config_dir: str | os.PathLike) -> dict[str, Any]:
    """The keys the config files in ``config_dir`` define.

    Returns ``{"main": tree of config.yaml, "groups": {group: {option: (name, tree)}}}``
    where a tree maps each key to its sub-tree (``None`` for a leaf).
    """
    import yaml

    root = Path(config_dir)
    main = _tree(yaml.safe_load((root / "config.yaml").read_text()) or {})
    groups: dict[str, dict[str, tuple[Any, Any]]] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        opts = {}
        for f in sorted(d.glob("*.yaml")):
            text = f.read_text()
            data = yaml.safe_load(text) or {}
            if isinstance(data, dict) and GLOBAL_PACKAGE in text.split("\n", 1)[0]:
                # a preset that also pins keys outside its group (e.g. env=guess_numbers_small sets
                # the warm start its task needs): its group's keys are under the group's name
                data = dict(data)
                own = data.pop(d.name, None) or {}
                main = _union(main, _tree(data))
                data = own
            opts[f.stem] = (data.get("name") if isinstance(data, dict) else None, _tree(data))
        if opts:
            groups[d.name] = opts
    return {"main": main, "groups": groups}


def allowed_keys(cfg: DictConfig, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The key tree ``cfg`` may have: config.yaml, plus per group the union of the options
    whose ``name`` matches the composed node's (all options when none matches; e.g.
    ``algo=dapo_ragen`` has ``name: ppo`` and shares PPO's keys), plus :data:`OPTIONAL_KEYS`."""
    allowed = dict(schema["main"] or {})
    allowed.pop("hydra", None)
    for group, opts in schema["groups"].items():
        node = _get(cfg, group)
        name = node.get("name") if isinstance(node, DictConfig) else None
        chosen = [t for n, t in opts.values() if n is None or n == name] or [t for _, t in opts.values()]
        tree: Any = {}
        for t in chosen:
            tree = _union(tree, t)
        allowed[group] = _union(allowed.get(group), tree)
    for key in OPTIONAL_KEYS:
        parts = key.split(".")
        node = allowed
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if node is None:
                break
        else:
            node.setdefault(parts[-1], None)
    return allowed


def unknown_keys(cfg: DictConfig, allowed: Mapping[str, Any]) -> list[str]:
    """Dotted keys of ``cfg`` that ``allowed`` (a key tree) does not have.

    Example:
        >>> from omegaconf import OmegaConf
        >>> unknown_keys(OmegaConf.create({"a": {"b": 1, "c": 2}, "foo": 1}), {"a": {"b": None}})
        ['a.c', 'foo']
    """
    out: list[str] = []

    def walk(node: Any, tree: Any, prefix: str) -> None:
        if not isinstance(node, Mapping) or not isinstance(tree, dict):
            return
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if prefix == "" and k == "hydra":
                continue
            if k not in tree:
                out.append(key)
            else:
                walk(v, tree[k], key)

    walk(
        OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False) if OmegaConf.is_config(cfg) else cfg,
        allowed,
        "",
    )
    return out


def check_unknown_keys(cfg: DictConfig, config_dir: str | os.PathLike | None = None) -> None:
    """Reject keys no config file defines (``+foo=1``, ``+algo.lrr=0.1``), with close matches.

    Skipped when ``config_dir`` (default: the CLI's ``RAGEN_CONFIG_DIR`` / ``ragen_torchrl/configs/``) has
    no ``config.yaml``.
    """
    if config_dir is None:
        from .cli import CONFIG_DIR as config_dir
    if not (Path(config_dir) / "config.yaml").is_file():
        return
    allowed = allowed_keys(cfg, config_schema(config_dir))
    bad = unknown_keys(cfg, allowed)
    if not bad:
        return
    hints = []
    for key in bad:
        parent, _, leaf = key.rpartition(".")
        tree: Any = allowed
        for part in parent.split(".") if parent else []:
            tree = tree.get(part) if isinstance(tree, dict) else None
        close = difflib.get_close_matches(leaf, list(tree) if isinstance(tree, dict) else [], n=1)
        hints.append(f"{key} (did you mean {parent + '.' if parent else ''}{close[0]}?)" if close else key)
    raise ConfigError(
        f"unknown config key(s): {', '.join(hints)}; no file in {config_dir} defines "
        f"{'it' if len(bad) == 1 else 'them'} (the code would silently ignore "
        f"{'it' if len(bad) == 1 else 'them'})"
    )


# ----------------------------------------------------------------------------- ranges
def check_clip_epsilon(cfg: DictConfig) -> None:
    """``algo.clip_epsilon``: a number or a ``(low, high)`` pair, ``low`` in (0, 1) (the ratio's
    lower bound ``1 - low`` must stay positive) and ``high`` in (0, 1]. GSPO's tiny sequence
    ranges (3e-4, 4e-4) are fine; ``5`` (or ``20`` for 0.2) is a mistake."""
    clip = _get(cfg, "algo.clip_epsilon")
    if clip is None:
        return
    clips = list(clip) if isinstance(clip, (ListConfig, list, tuple)) else [clip]
    if len(clips) not in (1, 2) or any(not _is_number(c) or not math.isfinite(c) or c <= 0 for c in clips):
        raise ConfigError(f"algo.clip_epsilon must be a positive number or a pair (low, high) of them, got {clip!r}")
    low, high = clips[0], clips[-1]
    if low >= 1:
        raise ConfigError(
            f"algo.clip_epsilon low must be < 1 (the ratio's lower clip 1 - low must stay > 0), got {clip!r}"
        )
    if high > 1:
        raise ConfigError(
            f"algo.clip_epsilon high must be <= 1 (a ratio clip above 2 is almost always a typo, "
            f"e.g. 20 for 0.2), got {clip!r}"
        )


def check_group_size(cfg: DictConfig) -> None:
    """A group-relative advantage (GRPO, Dr.GRPO, DAPO, GSPO) needs G >= 2: with one sample per
    group ``R - mean_g R = 0`` for every row, so the policy learns from the entropy bonus alone.
    PPO (a critic's baseline, also ``algo=dapo_ragen``) allows G = 1."""
    name = str(_get(cfg, "algo.name") or "grpo").lower()
    g = _get(cfg, "trainer.group_size")
    if name in GROUP_RELATIVE and g == 1:
        raise ConfigError(
            f"trainer.group_size=1 with algo.name={name}: a group-relative advantage is 0 for every "
            "sample of a one-sample group (nothing to learn from); use group_size >= 2, or algo=ppo "
            "(a critic baseline)"
        )


def check_algo(cfg: DictConfig) -> None:
    """Ranges of the ``algo`` node's numbers and options."""
    if _get(cfg, "algo") is None:
        return
    name = str(_get(cfg, "algo.name") or "grpo").lower()
    check_positive_float(cfg, "algo.lr", maximum=1.0)
    if _has(cfg, "algo.critic_lr"):
        check_positive_float(cfg, "algo.critic_lr", maximum=1.0)
    for key in ("algo.entropy_coeff", "algo.kl_coeff", "algo.max_grad_norm"):
        if _has(cfg, key):
            check_positive_float(cfg, key, allow_zero=True)
    for key in ("algo.weight_decay", "algo.gamma", "algo.lam", "algo.turn_gamma", "algo.turn_lam"):
        check_float_range(cfg, key, 0.0, 1.0)
    if _has(cfg, "algo.adv_eps"):
        # GRPO/DAPO/GSPO divide by std + eps: eps = 0 turns a constant group into 0/0
        check_positive_float(cfg, "algo.adv_eps", allow_zero=name not in ("grpo", "dapo", "gspo"), maximum=1.0)
    if _has(cfg, "algo.value_clip"):
        check_positive_float(cfg, "algo.value_clip", optional=True)
    if _has(cfg, "algo.value_coeff"):
        check_positive_float(cfg, "algo.value_coeff", allow_zero=True)
    check_clip_epsilon(cfg)
    dual = _get(cfg, "algo.dual_clip")
    if dual is not None and (not _is_number(dual) or not math.isfinite(dual) or not dual > 1):
        # verl's dual-clip bound c must exceed 1 (objectives.metrics.check_dual_clip, checked again below)
        raise ConfigError(
            f"algo.dual_clip must be null (off) or a finite number > 1 (the reference uses 3.0), got {dual!r}"
        )
    if name == "gspo" and dual is not None:
        raise ConfigError(
            f"algo.dual_clip is a token-level option; GSPO clips the sequence ratio and takes null, got {dual!r}"
        )
    check_choice(cfg, "algo.minibatch", ("group", "row"))
    check_choice(cfg, "algo.critic", ("separate", "head"))
    for key in ("algo.ppo_epochs", "algo.mini_batch_size"):
        check_positive_int(cfg, key)
    for key in ("algo.max_length", "algo.critic_chunk_size", "algo.overlong.max_length"):
        if _has(cfg, key):
            check_positive_int(cfg, key, optional=True)
    if name == "drgrpo" and _get(cfg, "algo.max_length") is None:
        raise ConfigError("algo.max_length (L_max, the generation budget of a trajectory) is required for drgrpo")
    if _get(cfg, "algo.overlong.enabled"):
        l_max = _get(cfg, "algo.overlong.max_length") or _get(cfg, "algo.max_length")
        if l_max is None:
            raise ConfigError(
                "algo.overlong.enabled needs algo.overlong.max_length or algo.max_length (L_max, the generation budget)"
            )
        check_positive_int(cfg, "algo.overlong.cache_length", allow_zero=True, maximum=int(l_max))
    if _get(cfg, "algo.dynamic_sampling") is not None:
        if _has(cfg, "algo.dynamic_sampling.max_extra_rollouts"):
            check_positive_int(cfg, "algo.dynamic_sampling.max_extra_rollouts", allow_zero=True)
        if _has(cfg, "algo.dynamic_sampling.oversample"):
            check_float_range(cfg, "algo.dynamic_sampling.oversample", 1.0, 100.0)
        if _has(cfg, "algo.dynamic_sampling.tol"):
            check_positive_float(cfg, "algo.dynamic_sampling.tol", allow_zero=True, maximum=1.0)


def check_algo_options(cfg: DictConfig) -> None:
    """The ``algo`` checks that need the objectives package (torchrl): the algorithm name,
    the dual-clip bound and DAPO's dynamic-sampling criterion, with the objectives' own helpers."""
    if _get(cfg, "algo") is None:
        return
    from ..objectives import ALGORITHMS
    from ..objectives.dapo import CRITERIA
    from ..objectives.metrics import check_dual_clip

    name = str(_get(cfg, "algo.name") or "grpo").lower()
    if name not in ALGORITHMS:
        raise ConfigError(f"algo.name must be one of {', '.join(ALGORITHMS)}, got {name!r}")
    try:
        check_dual_clip(_get(cfg, "algo.dual_clip"))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if _get(cfg, "algo.dynamic_sampling") is not None:
        check_choice(cfg, "algo.dynamic_sampling.criterion", CRITERIA)


def check_env(cfg: DictConfig) -> None:
    """Ranges and size bounds of the ``env`` node (keys absent from the chosen env are skipped)."""
    if _get(cfg, "env") is None:
        return
    for key in ("env.success_rate", "env.p_frozen", "env.noise_repeat", "env.success_threshold"):
        check_probability(cfg, key)
    if _has(cfg, "env.format_penalty"):
        # a penalty: a positive value would reward malformed replies
        check_float_range(cfg, "env.format_penalty", -100.0, 0.0, why=" (a penalty: <= 0)")
    check_float_range(cfg, "env.threshold", -1.0, 1.0, why=" (a cosine similarity)")
    val_fraction = _get(cfg, "env.val_fraction")
    if val_fraction is not None and (not _is_number(val_fraction) or not 0.0 <= val_fraction < 1.0):
        raise ConfigError(f"env.val_fraction must be in [0, 1), got {val_fraction!r}")
    for key in (
        "env.size",
        "env.num_boxes",
        "env.search_depth",
        "env.max_nodes",
        "env.max_turn",
        "env.max_actions_per_turn",
        "env.max_actions_per_traj",
        "env.num_circuits",
        "env.n_inputs",
        "env.num_digits",
        "env.num_symbols",
        "env.num_items",
        "env.oracle_particles",
        "env.num_seen",
        "env.num_candidates",
        "env.max_number",
        "env.max_target",
    ):
        if _has(cfg, key):
            check_positive_int(cfg, key)
    digits, symbols = _get(cfg, "env.num_digits"), _get(cfg, "env.num_symbols")
    if isinstance(digits, int) and isinstance(symbols, int) and digits > symbols:
        raise ConfigError(
            f"env.num_digits ({digits}) must be at most env.num_symbols ({symbols}): the code's digits are distinct"
        )
    if _has(cfg, "env.list_candidates"):
        check_positive_int(cfg, "env.list_candidates", allow_zero=True, optional=True)
    for key in ("env.num_steps", "env.num_numbers", "env.limit"):
        if _has(cfg, key):
            check_positive_int(cfg, key, optional=True)
    size = _get(cfg, "env.size")
    if size is not None and size < 2:
        raise ConfigError(f"env.size must be at least 2 (a start and a goal cell), got {size!r}")
    dim = _get(cfg, "env.dim")
    if dim is not None:
        dims = list(dim) if isinstance(dim, (ListConfig, list, tuple)) else [dim]
        limit = LIMITS["env.dim"]
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
            raise ConfigError(f"env.dim must be a positive integer or a (height, width) pair of them, got {dim!r}")
        if any(d > limit for d in dims):
            raise _limit_error("env.dim", dim, limit)


def estimate_iteration_tokens(cfg: DictConfig) -> int:
    """Upper bound of the tokens one training iteration generates: P x G x max_turn x max_new_tokens.

    Example:
        >>> from omegaconf import OmegaConf
        >>> estimate_iteration_tokens(OmegaConf.create({"trainer": {"prompts_per_iter": 16, "group_size": 4},
        ...     "env": {"max_turn": 5}, "rollout": {"max_new_tokens": 48}}))
        15360
    """
    p = int(_get(cfg, "trainer.prompts_per_iter") or 1)
    g = int(_get(cfg, "trainer.group_size") or 1)
    turns = int(_get(cfg, "env.max_turn") or 1)
    return p * g * turns * int(_get(cfg, "rollout.max_new_tokens") or 1)


def estimate_tiny_model_bytes(cfg: DictConfig) -> int:
    """Training memory of the tiny model: parameters x 16 bytes (fp32 weights, gradients and
    AdamW's two moments); 0 when a pretrained model is used."""
    m = _get(cfg, "model")
    if m is None or _get(cfg, "model.name_or_path") or _get(cfg, "model.hidden_size") is None:
        return 0
    h, v = int(m.hidden_size), int(m.vocab_size)
    inter, layers = int(m.intermediate_size), int(m.num_layers)
    kv = h // max(int(m.num_heads), 1) * int(m.num_kv_heads)
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h
    return 16 * (2 * v * h + layers * per_layer)


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None


def check_sizes(cfg: DictConfig) -> None:
    """Relations between sizes: rows per iteration, generated tokens, the tiny model's positions
    and its training memory against this machine's RAM."""
    p, g = _get(cfg, "trainer.prompts_per_iter"), _get(cfg, "trainer.group_size")
    if p * g > MAX_ROWS:
        raise ConfigError(
            f"trainer.prompts_per_iter x trainer.group_size = {p} x {g} = {p * g} rows per iteration "
            f"exceeds the limit {MAX_ROWS}"
        )
    tokens = estimate_iteration_tokens(cfg)
    if tokens > MAX_ITERATION_TOKENS:
        raise ConfigError(
            f"one iteration may generate trainer.prompts_per_iter x trainer.group_size x env.max_turn x "
            f"rollout.max_new_tokens = {tokens:,} tokens (about {tokens * 16 / 2**30:.1f} GiB of ids and "
            f"log-probs), over the limit {MAX_ITERATION_TOKENS:,}: lower one of them"
        )
    tiny = _get(cfg, "model.hidden_size") is not None and not _get(cfg, "model.name_or_path")
    if tiny:
        generated = int(_get(cfg, "env.max_turn") or 1) * int(_get(cfg, "rollout.max_new_tokens"))
        if generated > TINY_MAX_POSITIONS:
            raise ConfigError(
                f"env.max_turn x rollout.max_new_tokens = {generated} tokens per trajectory exceeds the "
                f"tiny model's {TINY_MAX_POSITIONS} positions"
            )
        hidden, heads, kv = (_get(cfg, k) for k in ("model.hidden_size", "model.num_heads", "model.num_kv_heads"))
        if hidden % heads:
            raise ConfigError(f"model.hidden_size={hidden} must be divisible by model.num_heads={heads}")
        if heads % kv:
            raise ConfigError(f"model.num_heads={heads} must be divisible by model.num_kv_heads={kv}")
        need, ram = estimate_tiny_model_bytes(cfg), _physical_memory()
        if ram and need > ram // 2:
            raise ConfigError(
                f"the tiny model (model.vocab_size/hidden_size/intermediate_size/num_layers) needs about "
                f"{need / 2**30:.1f} GiB to train, more than half of this machine's "
                f"{ram / 2**30:.1f} GiB"
            )


def check_t3(cfg: DictConfig) -> None:
    """``t3.enabled`` needs an env with a T3 stall rule (the active-reasoning envs); the options
    are checked by building the rule (:func:`~ragen_torchrl.transforms.t3_rules.make_rule`)."""
    check_positive_int(cfg, "t3.k", optional=True, maximum=1000)
    if _get(cfg, "t3.cumulative") is not None:
        check_bool(cfg, "t3.cumulative")
    if not _get(cfg, "t3.enabled"):
        return
    from .. import envs
    from ..transforms.t3 import ENV_TASKS
    from ..transforms.t3_rules import make_rule

    env_name = str(_get(cfg, "env.name"))
    builder = getattr(envs, "_REGISTRY", {}).get(env_name)
    task = (
        getattr(builder, "task_name", "") or ENV_TASKS.get(env_name) or ENV_TASKS.get(env_name.removesuffix("_small"))
    )
    if not task:
        t3_envs = sorted(
            {n for n, b in getattr(envs, "_REGISTRY", {}).items() if getattr(b, "task_name", "")} | set(ENV_TASKS)
        )
        raise ConfigError(
            f"t3.enabled=true needs an env with a T3 stall rule ({', '.join(t3_envs)}); env.name={env_name} has none"
        )
    try:
        make_rule(
            task,
            k=_get(cfg, "t3.k"),
            cumulative=_get(cfg, "t3.cumulative"),
            outside_trigger=bool(_get(cfg, "t3.outside_trigger") or False),
        )
    except ValueError as e:
        raise ConfigError(f"t3: {e}") from None


# ----------------------------------------------------------------------------- paths
def check_writable_dir(path: str | os.PathLike, key: str) -> None:
    """``path`` is (or can be created as) a directory this process can write, without creating it.

    Probes the nearest existing ancestor by creating and removing a temporary file in it.

    Example:
        >>> import tempfile
        >>> f = tempfile.NamedTemporaryFile()
        >>> check_writable_dir(f.name + "/sub", "model.cache_dir")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config.ConfigError: model.cache_dir=.../sub cannot be created: ... is a file, ...
    """
    p = Path(os.path.expanduser(str(path)))
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{key}={path} is a file, not a directory")
    anc = p
    while not anc.exists() and anc.parent != anc:
        anc = anc.parent
    if not anc.is_dir():
        raise ConfigError(f"{key}={path} cannot be created: {anc} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=anc, prefix=".ragen-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{key}={path} is not writable: cannot create files in {anc} ({e.strerror or e})") from None


def check_resume(cfg: DictConfig) -> None:
    """``trainer.resume`` names an existing, writable run dir holding ``checkpoints/last.pt`` or
    ``checkpoints/prev.pt`` (whether a file actually loads is checked when it is read)."""
    resume = _get(cfg, "trainer.resume")
    if not resume:
        return
    run = Path(os.path.expanduser(str(resume)))
    if not run.is_dir():
        raise MissingPathError(f"trainer.resume={resume}: no such run directory (no checkpoint to resume from)")
    ckpt = run / "checkpoints"
    names = ("last.pt", "prev.pt")
    if not any((ckpt / n).is_file() for n in names):
        raise MissingPathError(f"trainer.resume={resume}: no checkpoint in {ckpt} (expected {' or '.join(names)})")
    check_writable_dir(run, "trainer.resume")


def check_paths(cfg: DictConfig) -> None:
    """The model source exists, the cache dir is writable, a resumed run has a checkpoint."""
    name = _get(cfg, "model.name_or_path")
    if name:
        from ..models.loading import ModelSourceError, check_model_source

        try:
            check_model_source(str(name), "model.name_or_path")
        except ModelSourceError as e:
            raise ConfigError(str(e)) from None
    critic = _get(cfg, "algo.critic_path")
    if critic and str(_get(cfg, "algo.critic") or "separate") == "separate":
        from ..models.loading import ModelSourceError, check_model_source

        try:
            check_model_source(str(critic), "algo.critic_path")
        except ModelSourceError as e:
            raise ConfigError(str(e)) from None
    for key in ("env.data_path", "env.val_data_path", "env.catalog_path"):
        value = _get(cfg, key)
        if value:
            from ..models.loading import looks_like_local_path

            if not Path(os.path.expanduser(str(value))).exists() and (
                looks_like_local_path(str(value)) or key != "env.data_path" or _get(cfg, "env.name") != "metamathqa"
            ):
                raise MissingPathError(f"{key}={value}: the file does not exist")
    cache = _get(cfg, "model.cache_dir")
    if cache:
        check_writable_dir(cache, "model.cache_dir")
    check_resume(cfg)


def check_run_dir(run_dir: str | os.PathLike, key: str = "hydra.run.dir") -> None:
    """The run dir (TensorBoard logs, checkpoints) is writable; see :func:`check_writable_dir`."""
    check_writable_dir(run_dir, key)


# ----------------------------------------------------------------------------- entry point
def validate_config(cfg: DictConfig, *, config_dir: str | os.PathLike | None = None) -> None:
    """Raise :class:`ConfigError` naming the first bad value (see the module docstring).

    Nothing is built or written: this runs before any env, model or run dir exists.

    Args:
        cfg: the composed config.
        config_dir: where the config files are (for the unknown-key check); default the
            CLI's ``RAGEN_CONFIG_DIR`` or ``ragen_torchrl/configs/``.
    """
    check_unknown_keys(cfg, config_dir)
    check_finite(cfg)
    seed = _get(cfg, "seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or abs(seed) >= 2**63:
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    for key in (
        "trainer.prompts_per_iter",
        "trainer.group_size",
        "trainer.val_levels",
        "rollout.max_new_tokens",
        "rollout.chunk_size",
    ):
        check_positive_int(cfg, key)
    for key in ("trainer.total_iterations", "trainer.val_every", "trainer.save_every", "sft.steps", "sft.episodes"):
        check_positive_int(cfg, key, allow_zero=True, maximum=LIMITS.get(key, 10_000_000))
    if _has(cfg, "trainer.log_text_samples"):
        check_positive_int(cfg, "trainer.log_text_samples", allow_zero=True)
    if _has(cfg, "sft.batch_size"):
        check_positive_int(cfg, "sft.batch_size")
    if _has(cfg, "sft.seed"):
        value = _get(cfg, "sft.seed")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"sft.seed must be an integer, got {value!r}")
    for key in _BOOL_KEYS:
        check_bool(cfg, key)
    check_probability(cfg, "sft.noise")
    check_positive_float(cfg, "sft.lr", maximum=1.0)
    for key in ("rollout.temperature", "trainer.val_temperature"):
        check_positive_float(cfg, key, allow_zero=True)
    # cheap checks first (no torch import): most mistakes are reported within a second
    check_algo(cfg)
    check_group_size(cfg)
    check_env(cfg)
    if _get(cfg, "model") is not None:
        for key in (
            "model.vocab_size",
            "model.hidden_size",
            "model.intermediate_size",
            "model.num_layers",
            "model.num_heads",
            "model.num_kv_heads",
        ):
            if _has(cfg, key) and not _get(cfg, "model.name_or_path"):
                check_positive_int(cfg, key)
        if _has(cfg, "model.threads"):
            check_positive_int(cfg, "model.threads", optional=True)
    check_sizes(cfg)
    if _get(cfg, "diagnostics.mi") is not None:
        check_positive_int(cfg, "diagnostics.mi.every")
        check_positive_int(cfg, "diagnostics.mi.num_pairs")
        dtype = _get(cfg, "diagnostics.mi.dtype")
        if dtype not in (None, "float32", "float64", "bfloat16", "float16"):
            raise ConfigError(
                f"diagnostics.mi.dtype must be null, float32, float64, bfloat16 or float16, got {dtype!r}"
            )
    if _get(cfg, "sft.noise_kind") not in (None, "uniform", "heuristic"):
        raise ConfigError(f"sft.noise_kind must be 'uniform' or 'heuristic', got {_get(cfg, 'sft.noise_kind')!r}")
    if _get(cfg, "model.name_or_path") is None and _get(cfg, "model.name") not in ("tiny", None):
        raise ConfigError("model.name_or_path is required unless model=tiny")
    check_paths(cfg)
    # then the checks that import torch / torchrl (a few seconds)
    check_algo_options(cfg)
    if _get(cfg, "model") is not None:
        from ..models.loading import resolve_device

        try:
            resolve_device(str(_get(cfg, "model.device") or "auto"), str(_get(cfg, "model.dtype") or "auto"))
        except (ValueError, RuntimeError) as e:
            raise ConfigError(str(e)) from None
    if _get(cfg, "diagnostics.mi") is not None:
        from ..diagnostics.cross_scoring import METHODS

        if _get(cfg, "diagnostics.mi.method") not in (None, *METHODS):
            raise ConfigError(
                f"diagnostics.mi.method must be one of {METHODS}, got {_get(cfg, 'diagnostics.mi.method')!r}"
            )
    if _get(cfg, "filter") is not None:
        from ..transforms.snr import validate_filter_config

        try:
            validate_filter_config(_get(cfg, "filter"))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    check_t3(cfg)
