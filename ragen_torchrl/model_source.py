"""Whether a model source can be loaded, checked before anything heavy is imported (no torch).

``model.name_or_path`` (and ``algo.critic_path``, a LoRA adapter's base) is a local model directory,
a Hugging Face hub name in the local cache, or a hub name to download; the config check
(:func:`ragen_torchrl.trainer.config_paths.check_paths`) and the loaders
(:mod:`ragen_torchrl.models.loading`) use :func:`check_model_source` to say which, or why none.

Example:
    >>> looks_like_local_path("./my-model"), looks_like_local_path("Qwen/Qwen2.5-0.5B-Instruct")
    (True, False)
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

__all__ = [
    "ModelSourceError",
    "adapter_base",
    "check_model_source",
    "hub_offline_by_env",
    "hub_reachable",
    "looks_like_local_path",
]


class ModelSourceError(ValueError):
    """``model.name_or_path`` names nothing that can be loaded (a missing local path, a hub
    name on an offline machine); the message names the key and says which case it is."""


#: a Hugging Face hub repo id: ``name`` or ``org/name`` (letters, digits, ``-_.``; no ``--``/``..``)
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$")
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def looks_like_local_path(name_or_path: str) -> bool:
    """Whether ``name_or_path`` can only be a filesystem path (never a hub repo id).

    Absolute, home (``~``) and ``./``/``../`` paths, backslashes, and more than one ``/``
    are paths; ``org/name`` and ``name`` may be either (a local directory wins when it exists).

    Example:
        >>> [looks_like_local_path(p) for p in ("/nonexistent", "./m", "~/m", "a/b/c", "Qwen/Qwen2.5-0.5B")]
        [True, True, True, True, False]
    """
    s = str(name_or_path)
    return (
        s.startswith(("/", "~", "./", "../", ".\\"))
        or s in (".", "..")
        or "\\" in s
        or s.count("/") > 1
        or s.endswith("/")
        or bool(re.match(r"^[A-Za-z]:", s))
    )


def hub_offline_by_env() -> bool:
    """``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set to a true value."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARS)


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether a TCP connection to the hub endpoint (``HF_ENDPOINT``, default huggingface.co)
    opens within ``timeout`` seconds: a cheap offline check (no request is sent)."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _hub_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an odd name the cache lookup rejects: not cached
        return False


def check_model_source(name_or_path: str, key: str = "model.name_or_path", *, probe_hub: bool = True) -> str:
    """Check, before anything is loaded, that ``name_or_path`` can be loaded; say which kind it is.

    Returns ``"local"`` (an existing model directory), ``"hub-cached"`` (a hub repo id already
    in the local Hugging Face cache) or ``"hub"`` (a hub repo id to download).

    Raises:
        ModelSourceError: a path that does not exist (or is no model directory: no
            ``config.json``), a malformed repo id, or a hub name that is not cached while the
            machine is offline (``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` set, or, with
            ``probe_hub``, the hub endpoint unreachable within 2 s).

    Example:
        >>> check_model_source("/nonexistent")
        Traceback (most recent call last):
        ...
        ragen_torchrl.model_source.ModelSourceError: model.name_or_path=/nonexistent: the local path does not exist
    """
    s = str(name_or_path).strip()
    if not s:
        raise ModelSourceError(f"{key} is empty: give a local model directory or a Hugging Face hub name")
    path = Path(s).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelSourceError(f"{key}={s}: {path} is a file; a model is a directory (save_pretrained layout)")
        if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
            adapter_base(path)  # a LoRA adapter dir: its base checkpoint must be a local dir too
            return "local"
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"{key}={s}: {path} is not a model directory (no config.json in it)")
        return "local"
    if looks_like_local_path(s):
        raise ModelSourceError(f"{key}={s}: the local path does not exist")
    if not _REPO_ID.match(s) or "--" in s or ".." in s:
        raise ModelSourceError(
            f"{key}={s}: neither an existing local path nor a valid Hugging Face hub name (org/name)"
        )
    if _hub_cached(s):
        return "hub-cached"
    if hub_offline_by_env():
        raise ModelSourceError(
            f"{key}={s}: not a local path, and the hub model is not in the local Hugging Face "
            f"cache while offline mode is on ({'/'.join(_OFFLINE_VARS)})"
        )
    if probe_hub and not hub_reachable():
        raise ModelSourceError(
            f"{key}={s}: not a local path (no such directory), not in the local Hugging Face "
            "cache, and the hub is unreachable: this machine may be offline. Download the "
            "model elsewhere and pass its local directory"
        )
    return "hub"


def adapter_base(path: str | os.PathLike) -> Path:
    """The base checkpoint dir of the LoRA adapter dir ``path`` (its ``adapter_config.json``'s
    ``base_model_name_or_path``), which must be an existing local model dir: a path read from a file is
    never looked up on a hub.

    Raises:
        ModelSourceError: the adapter config is unreadable or names no existing local model dir.
    """
    cfg_file = Path(path) / "adapter_config.json"
    try:
        base = json.loads(cfg_file.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as e:
        raise ModelSourceError(f"{cfg_file}: unreadable adapter config ({e})") from None
    if not isinstance(base, str) or not (Path(base).expanduser() / "config.json").is_file():
        raise ModelSourceError(
            f"{cfg_file}: base_model_name_or_path={base!r} is not a local model dir (a path read from a file is "
            "never downloaded): put the base checkpoint there or edit the adapter config"
        )
    return Path(base).expanduser()
