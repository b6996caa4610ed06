"""Crash-safe training checkpoints: the pure file logic behind ``Trainer.save_checkpoint``.

A run dir's ``checkpoints/`` folder holds at most two checkpoints, the newest ``last.pt``
and the one before it, ``prev.pt``, so a damaged newest file never loses the run:

* **write** (:func:`save_rotating`): the state goes to ``last.tmp``, is flushed and
  ``os.fsync``-ed (the bytes are on disk before any rename can point at them), then loaded
  back (:func:`verify_checkpoint`). Only a verified new file replaces anything:
  ``last.pt`` becomes ``prev.pt`` (the older ``prev.pt`` goes now, not earlier) and
  ``last.tmp`` becomes ``last.pt``, both by atomic ``os.replace``, and the folder is synced.
  A kill at any point leaves at least one good checkpoint; a kill mid-write leaves a
  stale ``last.tmp`` that the next resume removes.
* **read** (:func:`load_latest`): ``last.pt`` first; a damaged one is reported by name
  (logged as an error) and ``prev.pt`` is used instead. :class:`NoCheckpointError`
  (a :class:`~ragen_torchrl.trainer.config_checks.ConfigError`: the CLI exits 2) when no file loads.
* **config** (:func:`check_resume_config`): the config stored in the checkpoint is compared
  with the one given on resume. Changes that alter what the run means (:data:`PROTECTED`:
  seed, algorithm, env, batch shape P x G, filter, model, warm start, T3, validation set)
  are refused unless ``trainer.resume_allow_changes=true``; every change is logged.
* **best** (:func:`save_best`, with ``trainer.keep_best``): ``best.pt``, the state at the validation
  that set the run's peak (written like ``last.pt``: temp file, fsync, verify, atomic replace), never
  rotated away; ``ragen-eval RUN --which best`` reads it when ``policy_best/`` is missing.
* **layout**: one ``torch.save`` file per checkpoint, not ``torchrl.checkpoint``'s layout (a directory
  of per-component payloads and a ``manifest.json`` per step, ``checkpoint-<step>`` names, kept by
  ``CheckpointRotation``): every reader (``trainer.resume``, ``ragen-eval``, ``ragen-experiment``'s resume
  check) and every run dir already written use these names, each read is one ``weights_only`` load
  checked field by field, and ``CheckpointRotation``'s keep-best picks the highest metric of the *latest*
  step on a tie over every checkpoint it sees, where the run's peak is the *first* validation to reach the
  maximum on the full level set (:mod:`~ragen_torchrl.validation_peak`).
* **safety**: a checkpoint holds only tensors, numbers, strings, ``None`` and containers of
  them (the NumPy RNG state is stored as a tensor), and every read uses
  ``torch.load(weights_only=True)``, which refuses any other object instead of running its
  code. A file that holds one raises :class:`UnsafeCheckpointError` (never a fallback to
  ``prev.pt``: the run dir has been tampered with); through the CLIs it exits 2.

Example:
    >>> import tempfile, torch
    >>> d = tempfile.mkdtemp()
    >>> for it in range(3):
    ...     _ = save_rotating({"iteration": it, "model": {"w": torch.full((2,), float(it))},
    ...                        "optimizer": {}, "rng": {}}, d)
    >>> sorted(p.name for p in Path(d).iterdir())
    ['last.pt', 'prev.pt']
    >>> state, path = load_latest(d)
    >>> state["iteration"], path.name
    (2, 'last.pt')
    >>> _ = (Path(d) / "last.pt").write_bytes(b"truncated")   # a damaged newest checkpoint
    >>> state, path = load_latest(d)
    >>> state["iteration"], path.name
    (1, 'prev.pt')
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..flat_config import flatten_config
from ..moved_keys import MOVED_KEYS
from ..safe_io import UnsafeFileError, create_exclusive, inside
from .config_checks import ConfigError

log = logging.getLogger(__name__)

LAST = "last.pt"
PREV = "prev.pt"
#: with ``trainer.keep_best``: the state at the validation that set the run's peak
BEST = "best.pt"
TMP_SUFFIX = ".tmp"
#: keys every checkpoint has; a file without them is not a (complete) checkpoint
REQUIRED_KEYS = ("iteration", "model", "optimizer", "rng")

#: config keys (and every key below them) whose change alters what a resumed run means
PROTECTED = (
    "seed",
    "algo",
    "env",
    "filter",
    "model",
    "sft",
    "t3",
    "trainer.prompts_per_iter",
    "trainer.group_size",  # the batch shape P x G
    "trainer.val_levels",
    "trainer.val_temperature",  # the validation metric (and its stop rule)
    "rollout.max_new_tokens",
    "rollout.temperature",
    "rollout.top_k",  # the sampling distribution
    "rollout.top_p",
    "rollout.min_p",
    "rollout.prime_think",  # the prompt format
)
#: keys under a protected one that only say where/how fast a run executes
#: (and the old places of moved diagnostics: a checkpoint may name one, and a diagnostic does not change the run)
HARMLESS = ("model.device", "model.threads", "model.cache_dir") + tuple(
    old for old, (new, _) in MOVED_KEYS.items() if new.startswith("diagnostics.")
)
ALLOW_KEY = "trainer.resume_allow_changes"


class DamagedCheckpointError(RuntimeError):
    """A checkpoint file does not load (truncated, corrupted, or not a checkpoint); names the file."""


class UnsafeCheckpointError(DamagedCheckpointError):
    """A checkpoint holds objects other than tensors, numbers, strings and containers (code to
    run on load); it is refused without running anything. Names the file and the first object."""


class InvalidCheckpointError(ConfigError):
    """A checkpoint that loads but whose contents are not what the trainer wrote (a field of the wrong
    type, structure or shape); names the file and the field (a config error: the CLIs exit 2)."""


class NoCheckpointError(ConfigError, FileNotFoundError):
    """``trainer.resume`` names a dir without any loadable checkpoint (a config error: the CLI exits 2)."""


def _fsync_dir(path: Path) -> None:
    """Persist a rename: fsync the directory entry (POSIX; a no-op where dirs can't be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def plain(obj: Any) -> Any:
    """``obj`` with NumPy scalars as Python numbers and NumPy arrays as tensors, so that
    ``torch.load(weights_only=True)`` reads it back; containers without such values are returned
    as they are (a model's ``state_dict`` keeps its ``_metadata``).

    Example:
        >>> plain({"a": np.float64(0.5), "b": [np.int64(2), "x"], "c": (1, None)})
        {'a': 0.5, 'b': [2, 'x'], 'c': (1, None)}
    """
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        items = {k: plain(v) for k, v in obj.items()}
        return obj if all(items[k] is v for k, v in obj.items()) else items
    if isinstance(obj, (list, tuple)):
        items = [plain(v) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


def write_synced(state: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """``torch.save`` ``state`` to ``path``, then flush and ``os.fsync`` it before returning.

    Without the fsync a power loss after the rename can leave a renamed but empty file.

    Example:
        >>> import tempfile
        >>> p = write_synced({"x": 1}, Path(tempfile.mkdtemp()) / "a.pt")
        >>> torch.load(p, weights_only=True)
        {'x': 1}
    """
    path = Path(path)
    if os.path.lexists(path):  # a stale temp file, or a link planted in a run dir from elsewhere
        path.unlink()
    with create_exclusive(path) as f:  # O_EXCL | O_NOFOLLOW: never written through a symlink
        torch.save(plain(state), f)
        f.flush()
        os.fsync(f.fileno())
    return path


def read_checkpoint(path: str | os.PathLike, *, mmap: bool = False) -> dict[str, Any]:
    """Load a checkpoint on CPU, or raise :class:`DamagedCheckpointError` naming the file.

    Only tensors, numbers, strings and containers load (``weights_only=True``): a file with any
    other object raises :class:`UnsafeCheckpointError` and nothing in it runs.
    ``mmap=True`` reads the archive's index and pickled structure but maps tensor data
    lazily: a cheap check that a file is complete (a truncated archive loses its index).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "last.pt"
        >>> _ = p.write_bytes(b"PK\\x03\\x04 cut short")
        >>> try:
        ...     read_checkpoint(p)
        ... except DamagedCheckpointError as e:
        ...     print(str(e).startswith(f"damaged checkpoint {p}: "))
        True
    """
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        raise UnsafeCheckpointError(
            f"refused checkpoint {path}: {_refusal(e)}; a checkpoint holds only tensors, numbers, strings and "
            "containers (it is loaded with torch.load(weights_only=True), which runs no code)"
        ) from None
    except Exception as e:  # torch/zipfile raise many types for a damaged file
        text = " ".join(str(e).split())
        raise DamagedCheckpointError(f"damaged checkpoint {path}: {type(e).__name__}: {text}") from e
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, Mapping) or k not in state]
    if missing:
        raise DamagedCheckpointError(f"damaged checkpoint {path}: not a training checkpoint (missing {missing})")
    return state


def _refusal(e: BaseException) -> str:
    """What torch's weights-only error refused, in a few words (its message is a page of advice).

    Example:
        >>> _refusal(pickle.UnpicklingError("Weights only load failed.\\n\\nUnsupported global: GLOBAL posix.system was not ..."))
        'it holds posix.system (a global that would run on load)'
    """
    text = str(e)
    match = re.search(r"GLOBAL ([\w.]+)", text)
    if match:
        return f"it holds {match.group(1)} (a global that would run on load)"
    lines = [line.strip() for line in text.splitlines() if line.strip() and "Weights only load failed" not in line]
    return (lines or ["not loadable with weights_only=True"])[0].split(". ")[0].rstrip(".")


def verify_checkpoint(path: str | os.PathLike) -> int:
    """The stored iteration if ``path`` loads (memory-mapped, so cheap even for a large model).

    Raises :class:`DamagedCheckpointError` otherwise.
    """
    state = read_checkpoint(path, mmap=True)
    iteration = int(state["iteration"])
    del state  # drop the mapping before the file is renamed
    return iteration


def remove_stale_tmp(ckpt_dir: str | os.PathLike) -> list[Path]:
    """Delete half-written ``*.tmp`` files a killed run left behind; returns what was removed.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "last.tmp").write_bytes(b"half")
        >>> [p.name for p in remove_stale_tmp(d)], list(d.iterdir())
        (['last.tmp'], [])
    """
    removed = []
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return removed
    for p in sorted(ckpt_dir.glob(f"*{TMP_SUFFIX}")):
        log.warning("removing %s: a checkpoint write that never finished (the run was killed mid-write)", p)
        p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def save_rotating(state: Mapping[str, Any], ckpt_dir: str | os.PathLike) -> Path:
    """Write ``state`` as the new ``last.pt``, keeping the previous one as ``prev.pt``.

    Order (each step leaves at least one good checkpoint if the process dies right after):
    write + fsync ``last.tmp``; verify it loads; verify the current ``last.pt`` (a damaged
    one is deleted instead of replacing the good ``prev.pt``); ``last.pt -> prev.pt``;
    ``last.tmp -> last.pt``; fsync the folder.

    Raises :class:`DamagedCheckpointError` (older checkpoints untouched) when the new file
    does not load back.
    """
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    last, prev = ckpt_dir / LAST, ckpt_dir / PREV
    tmp = last.with_suffix(TMP_SUFFIX)
    write_synced(state, tmp)
    try:
        verify_checkpoint(tmp)
    except DamagedCheckpointError:
        tmp.unlink(missing_ok=True)
        raise
    if last.exists():
        try:
            verify_checkpoint(last)
            os.replace(last, prev)  # the older prev.pt is dropped only now, after the new file verified
        except DamagedCheckpointError as e:
            log.error("%s; deleting it and keeping %s as the previous checkpoint", e, prev)
            last.unlink(missing_ok=True)
    os.replace(tmp, last)  # atomic: readers see the old last.pt or the new one, never a partial file
    _fsync_dir(ckpt_dir)
    return last


def save_best(state: Mapping[str, Any], ckpt_dir: str | os.PathLike) -> Path:
    """Write ``state`` as ``best.pt`` (replacing the one before): temp file, fsync, verify, atomic rename.

    A new file that does not load back raises :class:`DamagedCheckpointError` and leaves the older
    ``best.pt`` as it was.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> for it in (3, 7):
        ...     path = save_best({"iteration": it, "model": {}, "optimizer": {}, "rng": {}}, d)
        >>> path.name, read_checkpoint(path)["iteration"], sorted(p.name for p in Path(d).iterdir())
        ('best.pt', 7, ['best.pt'])
    """
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    best = ckpt_dir / BEST
    tmp = best.with_suffix(TMP_SUFFIX)
    write_synced(state, tmp)
    try:
        verify_checkpoint(tmp)
    except DamagedCheckpointError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, best)
    _fsync_dir(ckpt_dir)
    return best


def checkpoint_files(ckpt_dir: str | os.PathLike) -> list[Path]:
    """The checkpoints of a run, newest first (``last.pt``, ``prev.pt``), those that exist."""
    ckpt_dir = Path(ckpt_dir)
    return [p for p in (ckpt_dir / LAST, ckpt_dir / PREV) if p.is_file()]


def load_latest(
    ckpt_dir: str | os.PathLike, *, what: str = "resume", clean: bool = True
) -> tuple[dict[str, Any], Path]:
    """The newest checkpoint that loads, and its path; removes stale ``.tmp`` files first (``clean``:
    a resume, which holds the run dir's lock; a reader such as ``ragen-eval`` leaves them alone, since
    a ``.tmp`` may be the write of a run still in progress).

    A checkpoint file that resolves outside the run dir (``ckpt_dir``'s parent) is refused.

    A damaged ``last.pt`` is logged as an error naming the file and ``prev.pt`` is used.
    ``what`` prefixes the :class:`NoCheckpointError` raised when nothing loads (e.g.
    ``"trainer.resume=<dir>"``), which lists each file and why it failed.
    """
    ckpt_dir = Path(ckpt_dir)
    if clean:
        remove_stale_tmp(ckpt_dir)
    files = checkpoint_files(ckpt_dir)
    if not files:
        raise NoCheckpointError(f"{what}: no checkpoint in {ckpt_dir} (expected {LAST} or {PREV})")
    errors = []
    for path in files:
        try:
            inside(path, ckpt_dir.parent)  # the run dir: a link out of it is a tampered dir, not a fallback
        except UnsafeFileError as e:
            raise NoCheckpointError(f"{what}: {e}") from None
        try:
            state = read_checkpoint(path)
        except UnsafeCheckpointError as e:
            raise NoCheckpointError(f"{what}: {e}") from None
        except DamagedCheckpointError as e:
            errors.append(str(e))
            log.error("%s", e)
            continue
        if errors:
            log.warning("falling back to the previous checkpoint %s (iteration %d)", path, int(state["iteration"]))
        return state, path
    raise NoCheckpointError(f"{what}: no loadable checkpoint in {ckpt_dir}: " + "; ".join(errors))


# -- contents ----------------------------------------------------------------------------------
#: the largest iteration a checkpoint may carry (``trainer.total_iterations``' limit)
MAX_ITERATION = 10_000_000
#: optional fields of a checkpoint and the types each may have (``None`` allowed for every one)
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "history": (list,),
    "guard": (Mapping,),
    "val_stop": (Mapping,),
    "val_peak": (Mapping,),
    "objective": (Mapping,),
    "collapse": (Mapping,),
    "refills": (int,),
    "model_path": (str,),
    "clock": (Mapping,),
    "scalars": (Mapping,),
    "config": (Mapping,),
}


def _invalid(path, field: str, why: str) -> InvalidCheckpointError:
    return InvalidCheckpointError(f"invalid checkpoint {path}: field {field!r}: {why}")


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_rng(rng: Any, path) -> None:
    """Each RNG state restores into a throwaway generator (the process's own are left alone)."""
    if not isinstance(rng, Mapping):
        raise _invalid(path, "rng", f"a {_type_name(rng)}, not a mapping of RNG states")
    for name in ("python", "numpy", "torch"):
        if name not in rng:
            raise _invalid(path, f"rng.{name}", "missing")
    try:
        random.Random().setstate(tuple(rng["python"]) if isinstance(rng["python"], list) else rng["python"])
    except (TypeError, ValueError, OverflowError) as e:
        raise _invalid(path, "rng.python", f"not a Python RNG state ({e})") from None
    nps = rng["numpy"]
    fields = ("bit_generator", "key", "pos", "has_gauss", "cached_gaussian")
    if not isinstance(nps, Mapping) or any(k not in nps for k in fields):
        raise _invalid(path, "rng.numpy", f"expected a mapping with {', '.join(fields)}")
    if not isinstance(nps["key"], torch.Tensor) or nps["key"].dtype.is_floating_point:
        raise _invalid(path, "rng.numpy.key", "not an integer tensor")
    try:
        key = nps["key"].numpy().astype(np.uint32)
        np.random.RandomState().set_state(
            (nps["bit_generator"], key, nps["pos"], nps["has_gauss"], nps["cached_gaussian"])
        )
    except (TypeError, ValueError, OverflowError, RuntimeError) as e:
        raise _invalid(path, "rng.numpy", f"not a NumPy RNG state ({' '.join(str(e).split())})") from None
    state = rng["torch"]
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.dim() != 1:
        raise _invalid(path, "rng.torch", "not a torch RNG state (a 1-D uint8 tensor)")
    try:
        torch.Generator().set_state(state)
    except (TypeError, ValueError, RuntimeError) as e:
        raise _invalid(path, "rng.torch", f"not a torch RNG state ({' '.join(str(e).split())})") from None
    cuda = rng.get("cuda")
    if cuda is not None and (
        not isinstance(cuda, (list, tuple))
        or not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1 for t in cuda)
    ):
        raise _invalid(path, "rng.cuda", "not a list of CUDA RNG states (1-D uint8 tensors)")


def check_checkpoint_state(
    state: Mapping[str, Any], path: str | os.PathLike, *, resume: bool = True
) -> Mapping[str, Any]:
    """``state`` unchanged when its contents are what :func:`save_rotating` writes for a training run,
    else :class:`InvalidCheckpointError` naming ``path`` and the field; runs before any model is built.

    Checked: ``model`` a mapping of names to tensors and the optional fields' types
    (:data:`OPTIONAL_FIELDS`); for a ``resume`` also ``iteration`` an int in ``[0, MAX_ITERATION]``,
    ``optimizer`` an optimizer state dict (``state``, ``param_groups``) or empty, and ``rng`` the states
    :func:`rng_state` captures (each restored into a throwaway generator). ``ragen-eval`` reads the
    weights only (``resume=False``). Tensor shapes are checked against the model by :func:`check_model_state`.

    Example:
        >>> good = {"iteration": 3, "model": {"w": torch.zeros(2)}, "optimizer": {}, "rng": rng_state()}
        >>> check_checkpoint_state(good, "last.pt")["iteration"]
        3
        >>> for bad in ({"iteration": "two"}, {"rng": {}}, {"model": {"w": [1.0]}}):
        ...     try:
        ...         check_checkpoint_state({**good, **bad}, "last.pt")
        ...     except InvalidCheckpointError as e:
        ...         print(e)
        invalid checkpoint last.pt: field 'iteration': a str, not an integer in [0, 10000000]
        invalid checkpoint last.pt: field 'rng.python': missing
        invalid checkpoint last.pt: field 'model.w': a list, not a tensor
    """
    it = state.get("iteration")
    if resume and (isinstance(it, bool) or not isinstance(it, int)):
        raise _invalid(path, "iteration", f"a {_type_name(it)}, not an integer in [0, {MAX_ITERATION}]")
    if resume and not 0 <= it <= MAX_ITERATION:
        raise _invalid(path, "iteration", f"{it} is not in [0, {MAX_ITERATION}]")
    model = state.get("model")
    if not isinstance(model, Mapping):
        raise _invalid(path, "model", f"a {_type_name(model)}, not a state dict")
    for name, value in model.items():
        if not isinstance(name, str):
            raise _invalid(path, "model", f"a key of type {_type_name(name)}, not a parameter name")
        if not isinstance(value, torch.Tensor):
            raise _invalid(path, f"model.{name}", f"a {_type_name(value)}, not a tensor")
    for name, types in OPTIONAL_FIELDS.items():
        value = state.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise _invalid(path, name, f"a {_type_name(value)}, not a {' or '.join(t.__name__ for t in types)}")
    if not resume:
        return state
    optim = state.get("optimizer")
    if not isinstance(optim, Mapping):
        raise _invalid(path, "optimizer", f"a {_type_name(optim)}, not an optimizer state dict")
    if optim:
        if not isinstance(optim.get("state"), Mapping):
            raise _invalid(path, "optimizer.state", f"a {_type_name(optim.get('state'))}, not a mapping")
        groups = optim.get("param_groups")
        if not isinstance(groups, list) or not all(
            isinstance(g, Mapping) and isinstance(g.get("params"), list) for g in groups
        ):
            raise _invalid(path, "optimizer.param_groups", "not a list of parameter groups with their params")
    _check_rng(state.get("rng"), path)
    return state


def check_model_state(model_state: Mapping[str, torch.Tensor], model: torch.nn.Module, path) -> None:
    """The checkpoint's weights fit ``model``: the same parameter names and every tensor's shape, else
    :class:`InvalidCheckpointError` naming ``path`` and the first field that differs.

    Example:
        >>> net = torch.nn.Linear(2, 3)
        >>> check_model_state({"weight": torch.zeros(3, 2), "bias": torch.zeros(3)}, net, "last.pt")
        >>> try:
        ...     check_model_state({"weight": torch.zeros(2, 2), "bias": torch.zeros(3)}, net, "last.pt")
        ... except InvalidCheckpointError as e:
        ...     print(e)
        invalid checkpoint last.pt: field 'model.weight': shape (2, 2), the model's is (3, 2)
    """
    expected = model.state_dict()
    missing = [k for k in expected if k not in model_state]
    if missing:
        raise _invalid(path, f"model.{missing[0]}", f"missing ({len(missing)} of the model's tensors are)")
    for name, value in model_state.items():
        if name not in expected:
            raise _invalid(path, f"model.{name}", "not a tensor of the model")
        if tuple(value.shape) != tuple(expected[name].shape):
            raise _invalid(
                path, f"model.{name}", f"shape {tuple(value.shape)}, the model's is {tuple(expected[name].shape)}"
            )


# -- config comparison on resume -------------------------------------------------------------
_ABSENT = "<absent>"


def is_protected(key: str) -> bool:
    """Does changing ``key`` alter what a resumed run means (see :data:`PROTECTED`)?

    Example:
        >>> is_protected("algo.lr"), is_protected("trainer.group_size"), is_protected("model.device")
        (True, True, False)
        >>> is_protected("trainer.total_iterations"), is_protected("seedling")
        (False, False)
    """

    def under(k: str, prefixes) -> bool:
        return any(k == p or k.startswith(p + ".") for p in prefixes)

    return under(key, PROTECTED) and not under(key, HARMLESS)


def config_changes(stored: Mapping[str, Any], given: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, stored value, given value)`` for every leaf that differs, sorted by key.

    A key present on one side only shows ``"<absent>"`` on the other.

    Example:
        >>> config_changes({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3, "d": 4}})
        [('a.c', 2, 3), ('a.d', '<absent>', 4)]
    """
    old, new = flatten_config(stored), flatten_config(given)
    keys = sorted(old.keys() | new.keys())
    return [(k, old.get(k, _ABSENT), new.get(k, _ABSENT)) for k in keys if old.get(k, _ABSENT) != new.get(k, _ABSENT)]


def check_resume_config(
    stored: Mapping[str, Any], given: Mapping[str, Any], *, allow_changes: bool = False
) -> list[tuple[str, Any, Any]]:
    """Compare the checkpoint's config with the resuming one; refuse meaning-changing edits.

    Every change is logged. Changes to :func:`is_protected` keys raise :class:`ConfigError`
    naming each key with its old and new value, unless ``allow_changes`` (the config's
    ``trainer.resume_allow_changes``), in which case they are logged as warnings. A key
    found in one config only (a checkpoint from another code version) is logged, not refused.
    Returns the changes.

    Example:
        >>> stored = {"seed": 0, "trainer": {"total_iterations": 10, "group_size": 4}}
        >>> check_resume_config(stored, {"seed": 0, "trainer": {"total_iterations": 20, "group_size": 4}})
        [('trainer.total_iterations', 10, 20)]
        >>> try:
        ...     check_resume_config(stored, {"seed": 0, "trainer": {"total_iterations": 10, "group_size": 8}})
        ... except ConfigError as e:
        ...     print(str(e).replace(" (", "\\n("))
        resuming with a config that changes the run: trainer.group_size: 4 -> 8
        (set trainer.resume_allow_changes=true to resume anyway)
    """
    changes = config_changes(stored, given)
    # a key on one side only comes from another code version (a new key's default keeps the old
    # behaviour): logged, not refused, or every new config key would block old checkpoints
    refused = [c for c in changes if is_protected(c[0]) and _ABSENT not in (c[1], c[2])]
    for key, old, new in changes:
        if (key, old, new) in refused:
            continue
        if _ABSENT in (old, new):
            log.warning(
                "resume: config key %s only in the %s config (%r -> %r): not compared",
                key,
                "given" if old == _ABSENT else "stored",
                old,
                new,
            )
        else:
            log.info("resume: config change %s: %r -> %r", key, old, new)
    if refused and not allow_changes:
        listed = ", ".join(f"{k}: {o} -> {n}" for k, o, n in refused)
        raise ConfigError(
            f"resuming with a config that changes the run: {listed} (set {ALLOW_KEY}=true to resume anyway)"
        )
    for key, old, new in refused:
        log.warning("resume: %s=true, accepting a change that alters the run: %s: %r -> %r", ALLOW_KEY, key, old, new)
    return changes


def rng_state() -> dict[str, Any]:
    """The Python, NumPy, torch (and CUDA) RNG states, for a checkpoint.

    Only tensors, numbers and strings, so ``torch.load(weights_only=True)`` reads them: the NumPy
    state's key array is stored as an int64 tensor.
    """
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": str(name),
            "key": torch.from_numpy(key.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def restore_rng_state(rng: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` captured (the CUDA part only where CUDA is present).

    Example:
        >>> import io
        >>> state = rng_state()
        >>> a, b = torch.rand(2), np.random.rand(2)
        >>> buf = io.BytesIO(); torch.save(state, buf); _ = buf.seek(0)
        >>> restore_rng_state(torch.load(buf, weights_only=True))   # plain types only
        >>> torch.equal(a, torch.rand(2)), bool((b == np.random.rand(2)).all())
        (True, True)
    """
    random.setstate(rng["python"])
    nps = rng["numpy"]
    key = nps["key"].numpy().astype(np.uint32)
    np.random.set_state((nps["bit_generator"], key, nps["pos"], nps["has_gauss"], nps["cached_gaussian"]))
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
