"""Evaluation on the fixed validation levels (the code path of ``Trainer.validate`` and ``ragen-eval``) and the
export of a policy as a Hugging Face model dir.

:func:`evaluate_policy` plays one episode on each of the first ``num_levels`` validation levels
(:func:`~ragen_torchrl.envs.splits.val_level_seeds`, untruncated: T3 never applies) with
torch seeded to ``seed`` inside a forked RNG state, so the numbers depend on the policy, the
levels, the temperature and the seed only (not on what ran before), and the caller's RNG
stream is left as it was. ``Trainer.validate`` calls it with the run's ``seed``; so does
``ragen-eval`` (:mod:`ragen_torchrl.trainer.eval_cli`), which therefore reproduces a run's final
validation exactly. :func:`export_policy` writes the ``policy/`` dir of a run (``Trainer.fit``) and
``ragen-eval --export``'s; :func:`stats_line` is the line both print.

Example (a scripted policy on 3 FrozenLake levels):
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import lazy_stack
    >>> from torchrl.data.llm import History
    >>> from ragen_torchrl.envs import make_env
    >>> def right(td):
    ...     reply = History(role="assistant", content="<answer>Right</answer>")
    ...     full = td["history", "prompt"].extend(lazy_stack([reply.unsqueeze(0)] * td.shape[0]), inplace=False, dim=-1)
    ...     return td.set(("history", "full"), full).set(("tokens", "response"), [torch.tensor([1])] * td.shape[0])
    >>> stats, records = evaluate_policy(make_env("frozenlake", num_envs=3), right, 3, seed=0, progress=False)
    >>> stats["num_trajectories"], records["level_seed"].tolist() == val_level_seeds(3)
    (3.0, True)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from tensordict import TensorDictBase
from tqdm.auto import tqdm

from ..collectors.grouped import collect_rollouts
from ..envs.splits import val_level_seeds
from ..keys import DONE
from ..models.loading import copy_tokenizer_files
from ..models.lora import save_adapter
from .episode_frames import EpisodeFrames
from .run_stats import summarize

__all__ = ["BEST_POLICY_DIR", "POLICY_DIR", "EvalError", "evaluate_policy", "export_policy", "stats_line"]

#: the final policy of a run, written by ``Trainer.fit`` (an HF model dir)
POLICY_DIR = "policy"
#: with ``trainer.keep_best``: the policy of the validation that set the run's peak
BEST_POLICY_DIR = "policy_best"


class EvalError(ValueError):
    """Bad ``ragen-eval`` input (missing target, not a model, unknown env, ...): exit 2 with the message."""


class _ProgressEnv:
    """The env, counting finished episodes into a tqdm bar at each step (all else delegated)."""

    def __init__(self, env, bar, frames: EpisodeFrames | None = None) -> None:
        self._env = env
        self._bar = bar
        self._frames = frames

    def __getattr__(self, name: str):
        return getattr(self._env, name)

    def reset(self, *args, **kwargs):
        out = self._env.reset(*args, **kwargs)
        if self._frames is not None:
            self._frames.observe(out)
        return out

    def step(self, td):
        out = self._env.step(td)
        self._bar.update(int(out.get(("next", DONE)).sum()))
        if self._frames is not None:
            self._frames.observe(out.get("next"))
        return out


def evaluate_policy(
    env,
    policy,
    num_levels: int,
    *,
    seed: int,
    chunk_size: int = 128,
    progress: bool = True,
    desc: str = "validation",
    frames: EpisodeFrames | None = None,
    level_seeds: Sequence[int] | None = None,
) -> tuple[dict[str, float], TensorDictBase]:
    """One episode per validation level; returns the stats (:func:`~.reporting.summarize` + ``seconds``) and records.

    ``env`` must have ``num_levels`` rows and no truncation transform. ``level_seeds``: the levels to play
    (``num_levels`` of them) instead of the first ``num_levels`` validation levels. torch is seeded with
    ``seed`` inside :func:`torch.random.fork_rng`, so the result does not depend on the RNG
    state before the call, and the caller's RNG state is unchanged after it. ``progress``
    shows a bar (levels done, rate, ETA) on stderr. ``frames``: an :class:`EpisodeFrames` that
    keeps the observed images of its first rows (level ``k`` plays on env row ``k``).

    Example:
        >>> from ragen_torchrl.envs import make_env
        >>> evaluate_policy(make_env("frozenlake", num_envs=2), None, 0, seed=0)
        Traceback (most recent call last):
        ...
        ValueError: num_levels must be >= 1, got 0
    """
    if int(num_levels) < 1:
        raise ValueError(f"num_levels must be >= 1, got {num_levels}")
    t0 = time.time()
    seeds = val_level_seeds(int(num_levels)) if level_seeds is None else [int(s) for s in level_seeds]
    if len(seeds) != int(num_levels):
        raise ValueError(f"{len(seeds)} level_seeds for num_levels={num_levels}")
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        with tqdm(total=len(seeds), desc=desc, unit="level", disable=not progress, mininterval=1.0, leave=False) as bar:
            records = collect_rollouts(_ProgressEnv(env, bar, frames), policy, seeds, 1, chunk_size=int(chunk_size))
    stats = summarize(records)
    stats["seconds"] = time.time() - t0
    return stats, records


def export_policy(
    model, tokenizer, path: str | os.PathLike, *, state_dict=None, adapter_base: str | None = None
) -> Path:
    """Write ``model`` and ``tokenizer`` (chat template included) as a Hugging Face model dir at ``path``.

    ``state_dict``: the weights to write instead of ``model``'s own (e.g. an FSDP2-sharded model's
    full state dict, gathered on rank 0). ``adapter_base``: ``model`` carries LoRA adapters; write them
    as a PEFT adapter dir on that base checkpoint (:func:`~ragen_torchrl.models.lora.save_adapter`).

    Written to a fresh sibling temp dir first (:func:`tempfile.mkdtemp`) and then renamed, so ``path``
    is never half-written; an existing model dir there is replaced. A non-empty dir that is not a
    model dir, and a symlink, are refused.
    The result loads with ``AutoModelForCausalLM.from_pretrained(path)`` and as ``model.name_or_path``.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "notes.txt").write_text("mine")
        >>> export_policy(None, None, d)
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.policy_eval.EvalError: refusing to export into ... (exists and is not a model dir)
    """
    path = Path(path)
    if path.is_symlink():
        raise EvalError(f"refusing to export into {path} (a symlink; name the dir itself)")
    saved_model = (path / "config.json").is_file() or (path / "adapter_config.json").is_file()
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not saved_model)):
        raise EvalError(f"refusing to export into {path} (exists and is not a model dir)")
    path.parent.mkdir(parents=True, exist_ok=True)
    # a fresh dir of our own (mkdtemp: a new name, mode 0700): a name planted next to the target,
    # a symlink to a victim dir included, is never written into
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # the mode a plain mkdir gives: the exported dir stays readable by others
    try:
        if adapter_base is not None:
            save_adapter(model, tmp, base_model=adapter_base)
        elif state_dict is None:
            model.save_pretrained(tmp)
        else:
            model.save_pretrained(tmp, state_dict=state_dict)
        copy_tokenizer_files(tokenizer, tmp)  # the checkpoint's own tokenizer files (chat template included), unchanged
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def stats_line(stats: dict[str, float]) -> str:
    """The human-readable evaluation line.

    Example:
        >>> stats_line({"success": 0.5, "success_stderr": 0.25, "reward_mean": 1.0, "turns": 2.0,
        ...             "tokens": 30.0, "format_valid": 1.0, "num_trajectories": 4.0})
        'success 0.500 ± 0.250, return 1.000, turns 2.00, tokens 30.0, format-valid 1.000 (4 levels)'
    """
    return (
        f"success {stats['success']:.3f} ± {stats['success_stderr']:.3f}, return {stats['reward_mean']:.3f}, "
        f"turns {stats['turns']:.2f}, tokens {stats['tokens']:.1f}, format-valid {stats['format_valid']:.3f} "
        f"({stats['num_trajectories']:.0f} levels)"
    )
