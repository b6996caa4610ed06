"""Train/validation splits of levels, shared by the environments.

The trainer draws training level seeds from ``[0, 2**30)``, validation seeds from
``[2**30, 2**31)`` and demonstration seeds from ``[2**31, 2**31 + 2**30)``
(:func:`train_level_seeds`, :func:`val_level_seeds`, :mod:`ragen_torchrl.trainer.demonstrations`).
Disjoint seeds are not enough for disjoint *levels*: a 6x6 one-box Sokoban generator,
for instance, maps 3000 seeds to only ~2400 distinct rooms, so most validation rooms
would also be trained on. The envs therefore split by *content*:

* a level (or data record) is a validation level when the 64-bit hash of its content
  key (:func:`content_hash`) falls in the lowest ``val_fraction`` of the hash range;
* :func:`draw_in_split` makes generated levels for a seed until one lands in the seed's
  split (:func:`level_split`): validation seeds only ever see validation content and
  every other seed (training and demonstrations) only training content;
* :func:`split_records` partitions a data file the same way (the ``ceil(val_fraction*n)``
  smallest hashes are held out, so even a tiny file keeps at least one record on each side);
  :func:`data_pools` gives the ``{"train", "val"}`` record pools of an env's data files
  (after :func:`check_data_paths` and :func:`check_val_fraction`).

Everything is a pure function of the seed and the content, hence deterministic across
runs and machines (``hashlib``, never Python's salted ``hash``).

Example:
    >>> level_split(5), level_split(2**30 + 5), level_split(2**31 + 5)
    ('train', 'val', 'train')
    >>> import random
    >>> make = lambda seed: random.Random(seed).randrange(100)
    >>> a = draw_in_split(make, str, 2**30 + 1, val_fraction=0.5)
    >>> in_val_bucket(str(a), 0.5)
    True
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = [
    "VAL_SEED_OFFSET",
    "DEMO_SEED_OFFSET",
    "train_level_seeds",
    "val_level_seeds",
    "level_split",
    "content_hash",
    "in_val_bucket",
    "draw_in_split",
    "split_records",
    "check_data_paths",
    "check_val_fraction",
    "data_pools",
]

#: training levels use seeds in [0, 2**30); validation levels [2**30, 2**30 + n);
#: demonstrations [2**31, 2**31 + 2**30): the three sets never overlap
VAL_SEED_OFFSET = 1 << 30
#: first demonstration level seed; demonstrations are training data
DEMO_SEED_OFFSET = 1 << 31
#: derived seeds tried by :func:`draw_in_split` before giving up
MAX_DRAWS = 10_000

T = TypeVar("T")


def train_level_seeds(seed: int, iteration: int, num_groups: int) -> list[int]:
    """Level seeds of one training iteration (a pure function of seed and iteration, so resuming reproduces them).

    Example:
        >>> seeds = train_level_seeds(seed=0, iteration=3, num_groups=4)
        >>> len(seeds), all(s < VAL_SEED_OFFSET for s in seeds)
        (4, True)
    """
    rng = random.Random(seed * 1_000_003 + iteration)
    return [rng.randrange(VAL_SEED_OFFSET) for _ in range(num_groups)]


def val_level_seeds(num_levels: int) -> list[int]:
    """The fixed validation levels (disjoint from training seeds).

    Example:
        >>> val_level_seeds(2) == [VAL_SEED_OFFSET, VAL_SEED_OFFSET + 1]
        True
    """
    return [VAL_SEED_OFFSET + i for i in range(num_levels)]


def level_split(level_seed: int) -> str:
    """``"val"`` for seeds in ``[2**30, 2**31)``, else ``"train"`` (training and
    demonstration seeds)."""
    return "val" if VAL_SEED_OFFSET <= int(level_seed) < DEMO_SEED_OFFSET else "train"


def content_hash(key: str) -> int:
    """A stable 64-bit hash of ``key`` (BLAKE2b)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


def in_val_bucket(key: str, val_fraction: float) -> bool:
    """Whether content ``key`` belongs to the validation bucket (a ``val_fraction`` share
    of the hash range)."""
    return content_hash(key) < val_fraction * 2.0**64


def _derived_seed(level_seed: int, attempt: int) -> int:
    # string seeding of random.Random is hashed with SHA-512: stable across runs
    return random.Random(f"split:{int(level_seed)}:{attempt}").getrandbits(48)


def draw_in_split(
    make: Callable[[int], T],
    key: Callable[[T], str],
    level_seed: int,
    val_fraction: float,
) -> T:
    """Make a level for ``level_seed`` whose content lies in the seed's split.

    Tries ``make(level_seed)`` first, then ``make`` of seeds derived from ``level_seed``
    until ``key(level)`` falls in the right bucket. ``val_fraction == 0`` turns the
    content split off (``make(level_seed)`` is returned as is: seeds are disjoint, levels
    may repeat).

    Raises:
        RuntimeError: no level of the right split within :data:`MAX_DRAWS` tries (the
            generator has too few distinct levels for this ``val_fraction``).
    """
    if val_fraction <= 0.0:
        return make(level_seed)
    want_val = level_split(level_seed) == "val"
    for attempt in range(MAX_DRAWS):
        seed = int(level_seed) if attempt == 0 else _derived_seed(level_seed, attempt)
        level = make(seed)
        if in_val_bucket(key(level), val_fraction) == want_val:
            return level
    raise RuntimeError(
        f"no {'validation' if want_val else 'training'} level for level_seed={level_seed} in {MAX_DRAWS} "
        f"draws (val_fraction={val_fraction}); the generator has too few distinct levels, change val_fraction"
    )


def split_records(
    records: Sequence[T], key: Callable[[T], str], val_fraction: float, source: str
) -> tuple[list[T], list[T]]:
    """Partition data records into ``(train, val)`` by content hash.

    The records whose hash is among the ``ceil(val_fraction * n)`` smallest go to
    validation (records with equal content always land on the same side), so the split
    does not depend on the order of the file. ``val_fraction == 0`` returns the full list
    for both splits (not disjoint).

    Raises:
        ValueError: fewer than two distinct records to split (names ``source``).
    """
    items = list(records)
    if val_fraction <= 0.0:
        return items, items
    hashes = [content_hash(key(r)) for r in items]
    k = max(1, math.ceil(val_fraction * len(items)))
    threshold = sorted(hashes)[min(k, len(items)) - 1]
    train = [r for r, h in zip(items, hashes) if h > threshold]
    val = [r for r, h in zip(items, hashes) if h <= threshold]
    if not train or not val:
        raise ValueError(
            f"{source}: needs at least two distinct records to hold out validation problems "
            f"(val_fraction={val_fraction}); add records, pass val_data_path, or set val_fraction: 0"
        )
    return train, val


def file_stamp(path: str | os.PathLike | None) -> tuple[int, int] | None:
    """``(mtime_ns, size)`` of a data file, or None (no path, no such file, or a hub name).

    Part of the cache key of the envs' cached loaders: the trainer builds a training and a
    validation env from the same config, so a file is parsed once, and again after an edit.

    Example:
        >>> file_stamp("/no/such/file") is None
        True
    """
    if path is None:
        return None
    try:
        st = os.stat(os.path.expanduser(os.fspath(path)))
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def check_val_fraction(val_fraction: Any) -> float:
    """``val_fraction`` as a float in ``[0, 1)``; ``ValueError`` naming the bad value otherwise.

    Example:
        >>> check_val_fraction(0.1), check_val_fraction(0)
        (0.1, 0.0)
    """
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
    return float(val_fraction)


def _check_path(name: str, value: Any, accepts: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ValueError(f"{name} must be {accepts} or null, got {value!r}")
    return os.fspath(value)


def check_data_paths(
    data_path: Any, val_data_path: Any, *, accepts: str = "a file path", training: str = "the training file"
) -> tuple[str | None, str | None]:
    """Check an env's ``data_path`` / ``val_data_path`` pair (each ``accepts`` or ``None``; a
    validation file needs ``training`` as well) and return them as strings.

    Example:
        >>> check_data_paths("train.jsonl", None)
        ('train.jsonl', None)
        >>> check_data_paths(None, "val.jsonl")
        Traceback (most recent call last):
        ...
        ValueError: val_data_path needs data_path (the training file) as well
    """
    data_path = _check_path("data_path", data_path, accepts)
    val_data_path = _check_path("val_data_path", val_data_path, accepts)
    if val_data_path is not None and data_path is None:
        raise ValueError(f"val_data_path needs data_path ({training}) as well")
    return data_path, val_data_path


def data_pools(
    load: Callable[[str], Sequence[T]],
    data_path: str | None,
    val_data_path: str | None,
    key: Callable[[T], str],
    val_fraction: float,
) -> dict[str, tuple[T, ...]] | None:
    """The ``{"train": ..., "val": ...}`` record pools of an env's data, ``None`` without a file.

    With ``val_data_path`` the two files are the two pools; otherwise ``data_path`` is split by
    content hash (:func:`split_records`).

    Example:
        >>> pools = data_pools(lambda path: ("a", "b", "c", "d"), "f.jsonl", None, str, 0.25)
        >>> len(pools["train"]), len(pools["val"])
        (3, 1)
    """
    if data_path is None:
        return None
    train = load(data_path)
    if val_data_path is not None:
        return {"train": train, "val": load(val_data_path)}
    tr, va = split_records(train, key, val_fraction, data_path)
    return {"train": tuple(tr), "val": tuple(va)}
