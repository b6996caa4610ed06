"""The final evaluation (``trainer.final_eval``): a run's end policies on many held-out levels, level by level.

One 256-level validation has a standard error of about 0.025 on a success rate near 0.8, as large as
the spread between seeds; the final evaluation plays ``trainer.final_eval.levels`` levels (thousands, say)
with the final policy (``policy/``) and, when ``trainer.keep_best`` kept one, the best policy
(``policy_best/``), each in every mode of ``trainer.final_eval.modes``: ``greedy`` (temperature 0) and
``sampled`` (``trainer.final_eval.temperature``, null = ``trainer.val_temperature``). Every policy and mode
plays the same levels (:func:`final_eval_level_seeds`: validation-split seeds, disjoint from training and
from the validation levels, which chose the best policy) with the same sampling seeds (one per batch,
:func:`batch_seed`, from the run's ``seed``), so a difference between two of them is a paired one.

The levels are played ``trainer.final_eval.batch_levels`` at a time (one env and its records of that many
rows), and only each level's outcome is kept (:func:`level_rows`), so memory does not grow with the
number of levels. The policies are loaded from their exported dirs, one at a time, and rolled out as
``ragen-eval`` rolls out (:func:`eval_rollout_policy`, ``rollout.backend=hf``): ``ragen-eval RUN --final-eval``
gives the numbers ``Trainer.fit`` wrote, and evaluates the policies of a run trained without it.

Files, in the run dir (:func:`write_final_eval`):

* ``final_eval.json``: the settings (env, levels, first level seed, batch size, seed, temperature per
  mode, the policies' dirs) and ``results[policy][mode]`` = ``{success, success_stderr, n, reward_mean,
  format_valid, tokens, turns, seconds}`` (:func:`level_stats`; ``summary.json``'s ``final_eval`` holds
  the same);
* ``final_eval_levels.csv``: one row per policy, mode and level: ``policy, mode, level, level_seed,
  success, reward, turns, tokens, format_valid`` (``level`` is the index in the final evaluation's set).

Example (a scripted policy on 3 FrozenLake levels, 2 at a time):
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import lazy_stack
    >>> from torchrl.data.llm import History
    >>> from ragen_torchrl.envs import make_env
    >>> def right(td):
    ...     reply = History(role="assistant", content="<answer>Right</answer>")
    ...     full = td["history", "prompt"].extend(lazy_stack([reply.unsqueeze(0)] * td.shape[0]), inplace=False, dim=-1)
    ...     return td.set(("history", "full"), full).set(("tokens", "response"), [torch.tensor([1])] * td.shape[0])
    >>> rows = evaluate_levels(lambda n: make_env("frozenlake", num_envs=n), right, 3, seed=0, batch_levels=2,
    ...                        progress=False)
    >>> [r["level"] for r in rows], rows[0]["level_seed"] == FINAL_EVAL_SEED_OFFSET
    ([0, 1, 2], True)
    >>> sorted(level_stats(rows))
    ['format_valid', 'n', 'reward_mean', 'success', 'success_stderr', 'tokens', 'turns']
"""

from __future__ import annotations

import csv
import io
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from ..collectors.rollout_policy import build_rollout_policy
from ..envs import make_env
from ..envs.splits import DEMO_SEED_OFFSET, VAL_SEED_OFFSET
from ..keys import EPISODE_RETURN, FORMAT_VALID, LEVEL_SEED, NUM_TOKENS, NUM_TURNS, SUCCESS
from ..models.loading import load_policy
from ..models.priming import prime_text
from ..safe_io import write_text_atomic
from .config_checks import ConfigError
from .config_fields import FINAL_EVAL_MODES
from .config_schema import FinalEvalConfig
from .config_typing import check_fields
from .model_setup import env_kwargs
from .policy_eval import BEST_POLICY_DIR, POLICY_DIR, evaluate_policy
from .summary import write_json_atomic

__all__ = [
    "FINAL_EVAL_FILE",
    "FINAL_EVAL_LEVELS_FILE",
    "FINAL_EVAL_SEED_OFFSET",
    "LEVEL_COLUMNS",
    "batch_seed",
    "check_final_eval",
    "eval_rollout_policy",
    "evaluate_levels",
    "final_eval_level_seeds",
    "final_eval_of_run",
    "final_evaluation",
    "level_rows",
    "level_stats",
    "mode_temperatures",
    "result_lines",
    "run_policy_dirs",
    "save_final_eval",
    "write_final_eval",
]

FINAL_EVAL_FILE = "final_eval.json"
FINAL_EVAL_LEVELS_FILE = "final_eval_levels.csv"
#: the first level seed of the final evaluation: in the validation split, 2**29 above its first level,
#: so above every validation level (``trainer.val_levels`` <= 65536) and below the demonstrations
FINAL_EVAL_SEED_OFFSET = VAL_SEED_OFFSET + (1 << 29)
#: the columns of ``final_eval_levels.csv``
LEVEL_COLUMNS = ("policy", "mode", "level", "level_seed", "success", "reward", "turns", "tokens", "format_valid")

#: ``(model, tokenizer, processor, source)`` of one policy, loaded when called
PolicyLoader = Callable[[], tuple[Any, Any, Any, str]]


def final_eval_level_seeds(levels: int) -> list[int]:
    """The level seeds of a final evaluation on ``levels`` levels: the same for every run, policy and mode.

    Example:
        >>> from ragen_torchrl.envs.splits import level_split, val_level_seeds
        >>> seeds = final_eval_level_seeds(4)
        >>> seeds[1] - seeds[0], {level_split(s) for s in seeds}, set(seeds) & set(val_level_seeds(65536))
        (1, {'val'}, set())
    """
    if not 0 <= int(levels) <= DEMO_SEED_OFFSET - FINAL_EVAL_SEED_OFFSET:
        raise ValueError(f"levels must be in [0, {DEMO_SEED_OFFSET - FINAL_EVAL_SEED_OFFSET}], got {levels}")
    return [FINAL_EVAL_SEED_OFFSET + i for i in range(int(levels))]


def batch_seed(seed: int, batch: int) -> int:
    """The torch seed of batch ``batch`` of a final evaluation with run seed ``seed`` (string-seeded: stable).

    Example:
        >>> batch_seed(0, 0) == batch_seed(0, 0), batch_seed(0, 0) != batch_seed(0, 1)
        (True, True)
    """
    return random.Random(f"final_eval:{int(seed)}:{int(batch)}").getrandbits(63)


def mode_temperatures(cfg: DictConfig) -> dict[str, float]:
    """The temperature of each mode of ``trainer.final_eval.modes``, in their order (greedy: 0).

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"trainer": {"val_temperature": 0.5,
        ...                         "final_eval": {"modes": ["sampled", "greedy"], "temperature": None}}})
        >>> mode_temperatures(cfg)
        {'sampled': 0.5, 'greedy': 0.0}
    """
    fe = cfg.trainer.final_eval
    sampled = cfg.trainer.val_temperature if fe.temperature is None else fe.temperature
    out = {}
    for mode in fe.modes:
        if mode not in FINAL_EVAL_MODES:
            raise ValueError(f"trainer.final_eval.modes: unknown mode {mode!r}; choose from {list(FINAL_EVAL_MODES)}")
        out[str(mode)] = 0.0 if mode == "greedy" else float(sampled)
    return out


def check_final_eval(cfg: DictConfig) -> None:
    """A typed config's ``trainer.final_eval`` checked, each key by its own check, and at least one level.

    Example:
        >>> from ragen_torchrl.trainer.config_typing import typed_config
        >>> check_final_eval(typed_config({"trainer": {"final_eval": {"levels": 8}}}))
        >>> check_final_eval(typed_config({"trainer": {"final_eval": {"levels": 8, "modes": ["beam"]}}}))
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config_checks.ConfigError: trainer.final_eval.modes=['beam']: unknown mode 'beam'; a list of greedy and/or sampled, e.g. [greedy,sampled]
        >>> check_final_eval(typed_config({}))
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config_checks.ConfigError: trainer.final_eval.levels=0: the final evaluation needs at least one level
    """
    check_fields(cfg, FinalEvalConfig(), "trainer.final_eval.")
    if cfg.trainer.final_eval.levels < 1:
        raise ConfigError(
            f"trainer.final_eval.levels={cfg.trainer.final_eval.levels}: the final evaluation needs at least one level"
        )


def level_rows(records, first_level: int = 0) -> list[dict[str, Any]]:
    """One dict per trajectory of ``records`` (one episode per level, in level order): its ``level`` (index in
    the final evaluation's set, from ``first_level``), ``level_seed``, ``success``, ``reward`` (the episode
    return), ``turns``, ``tokens`` (generated) and ``format_valid`` (fraction of valid turns).

    Example:
        >>> from tensordict import TensorDict
        >>> recs = TensorDict(level_seed=torch.tensor([7, 8]), success=torch.tensor([True, False]),
        ...                   episode_return=torch.tensor([1.0, -0.1]), num_turns=torch.tensor([2, 5]),
        ...                   num_tokens=torch.tensor([30, 90]), format_valid=torch.tensor([1.0, 0.8]), batch_size=[2])
        >>> level_rows(recs, first_level=4)[1]
        {'level': 5, 'level_seed': 8, 'success': 0.0, 'reward': -0.1, 'turns': 5, 'tokens': 90, 'format_valid': 0.8}
    """
    columns = {
        "level_seed": records.get(LEVEL_SEED).tolist(),
        "success": records.get(SUCCESS).float().tolist(),
        "reward": [round(v, 6) for v in records.get(EPISODE_RETURN).float().tolist()],
        "turns": records.get(NUM_TURNS).long().tolist(),
        "tokens": records.get(NUM_TOKENS).long().tolist(),
        "format_valid": [round(v, 6) for v in records.get(FORMAT_VALID).float().tolist()],
    }
    n = len(columns["level_seed"])
    return [{"level": first_level + i, **{k: v[i] for k, v in columns.items()}} for i in range(n)]


def level_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Success mean, its standard error ``sqrt(p (1 - p) / n)`` (as the validations report it), ``n`` and the
    mean return, format-valid fraction, generated tokens and turns over per-level ``rows``.

    Example:
        >>> rows = [{"success": s, "reward": s, "format_valid": 1.0, "tokens": 10, "turns": 2} for s in (1, 1, 1, 0)]
        >>> stats = level_stats(rows)
        >>> stats["success"], round(stats["success_stderr"], 4), stats["n"]   # sqrt(0.75 * 0.25 / 4)
        (0.75, 0.2165, 4)
    """
    n = len(rows)
    if n == 0:
        raise ValueError("level_stats: no levels")

    def mean(key: str) -> float:
        return sum(float(r[key]) for r in rows) / n

    p = mean("success")
    return {
        "success": p,
        "success_stderr": math.sqrt(max(p * (1 - p), 0.0) / n),
        "n": n,
        "reward_mean": mean("reward"),
        "format_valid": mean("format_valid"),
        "tokens": mean("tokens"),
        "turns": mean("turns"),
    }


def evaluate_levels(
    env_for: Callable[[int], Any],
    policy,
    levels: int,
    *,
    seed: int,
    batch_levels: int,
    chunk_size: int = 128,
    progress: bool = True,
    desc: str = "final evaluation",
) -> list[dict[str, Any]]:
    """Play the first ``levels`` levels of :func:`final_eval_level_seeds` with ``policy``, ``batch_levels`` at a
    time; returns their :func:`level_rows`.

    ``env_for(n)``: an env of ``n`` rows (no truncation transform); it is called once per batch size. Batch
    ``b`` runs :func:`~ragen_torchrl.trainer.policy_eval.evaluate_policy` with torch seeded to
    ``batch_seed(seed, b)`` (in a forked RNG state), so the rows depend on the policy, the levels, the batch
    size and ``seed`` only. The module's example plays 3 levels; no level plays nothing:

    Example:
        >>> evaluate_levels(lambda n: None, None, 0, seed=0, batch_levels=4)
        []
    """
    seeds = final_eval_level_seeds(levels)
    batch_levels = max(1, int(batch_levels))
    envs: dict[int, Any] = {}
    rows: list[dict[str, Any]] = []
    batches = math.ceil(len(seeds) / batch_levels)
    for b in range(batches):
        part = seeds[b * batch_levels : (b + 1) * batch_levels]
        if len(part) not in envs:
            envs[len(part)] = env_for(len(part))
        _, records = evaluate_policy(
            envs[len(part)],
            policy,
            len(part),
            seed=batch_seed(seed, b),
            chunk_size=chunk_size,
            progress=progress,
            desc=f"{desc} {b + 1}/{batches}" if batches > 1 else desc,
            level_seeds=part,
        )
        rows.extend(level_rows(records, first_level=b * batch_levels))
        del records  # the batch's conversations: only their outcomes are kept
    return rows


def eval_rollout_policy(cfg: DictConfig, model, tokenizer, processor, temperature: float):
    """The policy ``ragen-eval`` rolls ``model`` out with: transformers ``generate`` at ``temperature``, the
    replies primed (``rollout.prime_think``) and rolled out as the run's ``rollout`` node says (trajectory,
    KV cache, sampler, attention; a vision-language policy: its own rollout).

    Raises:
        ValueError: a bad rollout setting (names the key).

    Example:
        >>> from omegaconf import OmegaConf
        >>> rollout = {"prime_think": True, "trajectory": "turns", "kv_cache": True, "kv_cache_max_tokens": 1024,
        ...            "sampler": "inverse_cdf", "attention": "sdpa", "max_new_tokens": 8}
        >>> eval_rollout_policy(OmegaConf.create({"rollout": rollout}), None, None, None, 0.0)
        Traceback (most recent call last):
        ...
        ValueError: rollout.trajectory must be one of tokens, history, got 'turns'
    """
    r = cfg.rollout
    reply_prime = prime_text(bool(r.prime_think))  # as the run was trained
    mode = {
        "trajectory": str(r.trajectory),
        "kv_cache": r.kv_cache,
        "max_cached_tokens": r.kv_cache_max_tokens,
        "sampler": str(r.sampler),
        "attention": str(r.attention),
    }
    policy, _ = build_rollout_policy(
        "hf",
        model,
        tokenizer,
        max_new_tokens=int(r.max_new_tokens),
        temperature=float(temperature),
        reply_prime=reply_prime,
        processor=processor,
        **({} if processor is not None else mode),
    )
    return policy


def final_evaluation(
    cfg: DictConfig,
    loaders: Mapping[str, PolicyLoader],
    *,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    env_for: Callable[[int], Any] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Evaluate each policy of ``loaders`` (name -> loader; ``final``, ``best``) in each mode of a typed config's
    ``trainer.final_eval`` on its levels; returns the result (``final_eval.json``'s content) and the per-level
    rows (each with its ``policy`` and ``mode``). The policies are loaded one at a time, each released before
    the next; ``echo`` gets one line per policy and mode. ``env_for(n)``: an env of ``n`` rows (default: the
    config's env).

    Raises:
        ValueError: ``trainer.final_eval.levels`` is 0, or a bad setting.

    Example:
        >>> from ragen_torchrl.trainer.config_typing import typed_config
        >>> final_evaluation(typed_config({}), {})
        Traceback (most recent call last):
        ...
        ValueError: trainer.final_eval.levels=0: the final evaluation needs at least one level
    """
    fe = cfg.trainer.final_eval
    levels = int(fe.levels)
    if levels < 1:
        raise ValueError(f"trainer.final_eval.levels={levels}: the final evaluation needs at least one level")
    temperatures = mode_temperatures(cfg)
    env_name = str(cfg.env.name)

    if env_for is None:

        def env_for(n: int):
            return make_env(env_name, num_envs=n, **env_kwargs(cfg.env))

    result: dict[str, Any] = {
        "env": env_name,
        "levels": levels,
        "first_level_seed": FINAL_EVAL_SEED_OFFSET,
        "batch_levels": int(fe.batch_levels),
        "seed": int(cfg.seed),
        "max_new_tokens": int(cfg.rollout.max_new_tokens),
        "temperatures": temperatures,
        "policies": {},
        "results": {},
    }
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    for name, load in loaders.items():
        model, tokenizer, processor, source = load()
        result["policies"][name] = source
        result["results"][name] = {}
        for mode, temperature in temperatures.items():
            t_mode = time.time()
            with torch.no_grad():
                policy_rows = evaluate_levels(
                    env_for,
                    eval_rollout_policy(cfg, model, tokenizer, processor, temperature),
                    levels,
                    seed=int(cfg.seed),
                    batch_levels=int(fe.batch_levels),
                    chunk_size=int(cfg.rollout.chunk_size),
                    progress=progress,
                    desc=f"final evaluation ({name}, {mode})",
                )
            stats = {**level_stats(policy_rows), "seconds": time.time() - t_mode}
            result["results"][name][mode] = stats
            rows.extend({"policy": name, "mode": mode, **r} for r in policy_rows)
            if echo is not None:
                echo(result_lines({"levels": levels, "results": {name: {mode: stats}}})[0])
        del model, tokenizer, processor
    result["seconds"] = time.time() - t0
    return result, rows


def result_lines(result: Mapping[str, Any]) -> list[str]:
    """One console line per policy and mode of a final evaluation's result.

    Example:
        >>> result_lines({"levels": 4, "results": {"final": {"greedy": {"success": 0.75, "success_stderr": 0.2165,
        ...               "n": 4, "format_valid": 1.0, "tokens": 10.0, "turns": 2.0}}}})
        ['[final eval] final, greedy: success 0.750 ± 0.216, format-valid 1.000, tokens 10.0, turns 2.00 (4 levels)']
    """
    return [
        f"[final eval] {name}, {mode}: success {s['success']:.3f} ± {s['success_stderr']:.3f}, "
        f"format-valid {s['format_valid']:.3f}, tokens {s['tokens']:.1f}, turns {s['turns']:.2f} ({s['n']} levels)"
        for name, modes in result["results"].items()
        for mode, s in modes.items()
    ]


def write_final_eval(
    result: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    json_path: str | Path | None,
    levels_path: str | Path | None,
) -> list[Path]:
    """Write the result as strict JSON to ``json_path`` and the rows as CSV (:data:`LEVEL_COLUMNS`) to
    ``levels_path`` (either may be ``None``: not written), each atomically; returns the paths written.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> row = {"policy": "final", "mode": "greedy", "level": 0, "level_seed": 5, "success": 1.0, "reward": 1.0,
        ...        "turns": 2, "tokens": 9, "format_valid": 1.0}
        >>> [p.name for p in write_final_eval({"levels": 1}, [row], d / FINAL_EVAL_FILE, d / FINAL_EVAL_LEVELS_FILE)]
        ['final_eval.json', 'final_eval_levels.csv']
        >>> (d / FINAL_EVAL_LEVELS_FILE).read_text().splitlines()[1]
        'final,greedy,0,5,1.0,1.0,2,9,1.0'
    """
    written = []
    if json_path is not None:
        written.append(write_json_atomic(json_path, result))
    if levels_path is not None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=LEVEL_COLUMNS, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        written.append(write_text_atomic(levels_path, buf.getvalue()))
    return written


def save_final_eval(
    result: dict[str, Any],
    rows: Sequence[Mapping[str, Any]],
    *,
    run_dir: str | Path | None = None,
    json_path: str | Path | None = None,
    levels_path: str | Path | None = None,
) -> list[Path]:
    """:func:`write_final_eval` to ``json_path`` and ``levels_path``, each defaulting to a run dir's
    ``final_eval.json`` / ``final_eval_levels.csv`` when ``run_dir`` is given (else not written); sets the
    result's ``levels_file`` (the CSV's name in the run dir, else its path). Returns the paths written.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> result = {"levels": 0}
        >>> [p.name for p in save_final_eval(result, [], run_dir=d)], result["levels_file"]
        (['final_eval.json', 'final_eval_levels.csv'], 'final_eval_levels.csv')
    """
    if run_dir is not None:
        json_path = Path(run_dir) / FINAL_EVAL_FILE if json_path is None else json_path
        if levels_path is None:
            levels_path, result["levels_file"] = Path(run_dir) / FINAL_EVAL_LEVELS_FILE, FINAL_EVAL_LEVELS_FILE
    if levels_path is not None and "levels_file" not in result:
        result["levels_file"] = str(levels_path)
    return write_final_eval(result, rows, json_path, levels_path)


def run_policy_dirs(run_dir: str | Path) -> dict[str, Path]:
    """The exported policies of a run dir a final evaluation plays: ``final`` (``policy/``) and, when the run
    kept one, ``best`` (``policy_best/``); each only when it holds a model (or a LoRA adapter).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "policy").mkdir(); _ = (d / "policy" / "config.json").write_text("{}")
        >>> {k: v.name for k, v in run_policy_dirs(d).items()}
        {'final': 'policy'}
    """
    out = {}
    for name, sub in (("final", POLICY_DIR), ("best", BEST_POLICY_DIR)):
        path = Path(run_dir) / sub
        if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
            out[name] = path
    return out


def final_eval_of_run(
    cfg: DictConfig,
    run_dir: str | Path,
    *,
    device: str | None = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any] | None:
    """``Trainer.fit``'s final evaluation: the run dir's exported policies (:func:`run_policy_dirs`) loaded on
    ``device`` (default ``model.device``) in ``model.dtype``, as ``ragen-eval`` loads them, evaluated by
    :func:`final_evaluation`; writes ``final_eval.json`` and ``final_eval_levels.csv`` into ``run_dir`` and
    returns the result (``None`` when the run exported no policy).

    Example:
        >>> import tempfile
        >>> from ragen_torchrl.trainer.config_typing import typed_config
        >>> final_eval_of_run(typed_config({"trainer": {"final_eval": {"levels": 8}}}), tempfile.mkdtemp()) is None
        True
    """
    dirs = run_policy_dirs(run_dir)
    if not dirs:
        return None
    device = str(cfg.model.device) if device is None else str(device)

    def loader(path: Path) -> PolicyLoader:
        return lambda: (*load_policy(str(path), device, str(cfg.model.dtype)), str(path))

    result, rows = final_evaluation(cfg, {k: loader(p) for k, p in dirs.items()}, progress=progress, echo=echo)
    save_final_eval(result, rows, run_dir=run_dir)
    return result
