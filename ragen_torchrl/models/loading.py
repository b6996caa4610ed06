"""Loading any Hugging Face causal LM (or the tiny offline one) as a policy.

Example:
    >>> from ragen_torchrl.models.loading import resolve_device
    >>> resolve_device("cpu", "auto")
    (device(type='cpu'), torch.float32)
"""

from __future__ import annotations

import logging
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

log = logging.getLogger(__name__)


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
        ragen_torchrl.models.loading.ModelSourceError: model.name_or_path=/nonexistent: the local path does not exist
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


def resolve_device(device: str = "auto", dtype: str = "auto") -> tuple[torch.device, torch.dtype]:
    """``auto`` picks CUDA with bf16 when present, else CPU with fp32.

    Raises:
        ValueError: unknown dtype name, or CUDA requested but not available.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("model.device is 'cuda' but CUDA is not available on this machine")
    if dtype == "auto":
        return dev, (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in names:
        raise ValueError(f"unknown model.dtype {dtype!r}; valid: auto, {', '.join(names)}")
    return dev, names[dtype]


def prepare_tokenizer(tokenizer, model=None):
    """Ready a checkpoint's tokenizer for multi-turn RL without changing the checkpoint.

    Nothing is added to the vocabulary and no embedding is resized: a checkpoint whose pad token is
    its end-of-turn token (SmolLM2, Qwen2.5, Llama-3 publish it so) keeps it. Padding is told apart
    from tokens by attention masks and by each row's own length (the token trajectories and the
    turn cache cut a reply at its first end-of-turn token), never by the pad id. In memory only:

    * padding on the left (generation appends on the right);
    * a tokenizer without a pad token pads with its end-of-turn token (``eos``), and the model's
      generation config gets that pad id, so ``generate`` does not warn on every call.

    The chat template is the checkpoint's own, whatever its format
    (:mod:`~ragen_torchrl.models.chat_template` finds the assistant tokens); exports copy the
    checkpoint's tokenizer files unchanged (:func:`copy_tokenizer_files`).

    Example:
        >>> from ragen_torchrl.models.tiny import train_tokenizer
        >>> tok = train_tokenizer(["a b"] * 5, vocab_size=270)
        >>> n = len(tok)
        >>> tok.pad_token = tok.eos_token            # a checkpoint that pads with its end-of-turn token
        >>> len(prepare_tokenizer(tok)) == n, tok.pad_token == tok.eos_token, tok.padding_side
        (True, True, 'left')
    """
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model is not None and getattr(model.generation_config, "pad_token_id", None) is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return tokenizer


#: the tokenizer files of a saved checkpoint, copied byte for byte into every export
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def copy_tokenizer_files(tokenizer, path: str | os.PathLike) -> list[str]:
    """Copy the tokenizer files of the checkpoint ``tokenizer`` was loaded from into ``path``, unchanged.

    The in-memory tokenizer is not saved (its left padding and a pad token set for a tokenizer
    without one are run-time choices, not the checkpoint's). A tokenizer that was not loaded from a
    local directory holding such files is saved with ``save_pretrained``. Returns the file names written.

    Example:
        >>> import tempfile
        >>> from ragen_torchrl.models.tiny import train_tokenizer
        >>> src, dst = tempfile.mkdtemp(), tempfile.mkdtemp()
        >>> tok = train_tokenizer(["a b"] * 5, vocab_size=270)
        >>> _ = tok.save_pretrained(src)
        >>> from transformers import AutoTokenizer
        >>> sorted(copy_tokenizer_files(AutoTokenizer.from_pretrained(src), dst))[:2]
        ['chat_template.jinja', 'tokenizer.json']
    """
    import shutil

    src = Path(str(getattr(tokenizer, "name_or_path", "") or "")).expanduser()
    names = [n for n in TOKENIZER_FILES if src.is_dir() and (src / n).is_file() and not (src / n).is_symlink()]
    if "tokenizer_config.json" not in names:
        return list(tokenizer.save_pretrained(str(path)))
    for n in names:
        shutil.copyfile(src / n, Path(path) / n)
    return names


def wrapper_chat_template(tokenizer) -> str | None:
    """The tokenizer's own chat template (any format), or ``None`` when it has none.

    Pass it as ``chat_template=`` to torchrl's LLM wrappers: without it, torchrl picks a
    built-in template by matching the tokenizer's ``name_or_path`` against model-family
    names ("qwen", "llama", ...), so a directory such as ``tiny-qwen2-<hash>`` (or any
    path containing such a word) silently swaps in a different template.

    Example:
        >>> class Tok:
        ...     chat_template = "{{ messages }}"
        >>> wrapper_chat_template(Tok())
        '{{ messages }}'
    """
    template = getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) and template else None


def resolved_chat_template(wrapper) -> str | None:
    """The template string a torchrl LLM wrapper renders with: its ``chat_template``, else the
    torchrl template its ``chat_template_name`` names; ``None`` when it leaves the choice to
    torchrl's model-family detection.

    Example:
        >>> class Wrapper:
        ...     chat_template, chat_template_name = "{{ messages }}", None
        >>> resolved_chat_template(Wrapper())
        '{{ messages }}'
    """
    if getattr(wrapper, "chat_template", None) is not None:
        return wrapper.chat_template
    name = getattr(wrapper, "chat_template_name", None)
    if name is not None:
        from torchrl.data.llm.history import _CHAT_TEMPLATES

        return _CHAT_TEMPLATES[name]
    return None


def adapter_base(path: str | os.PathLike) -> Path:
    """The base checkpoint dir of the LoRA adapter dir ``path`` (its ``adapter_config.json``'s
    ``base_model_name_or_path``), which must be an existing local model dir: a path read from a file is
    never looked up on a hub.

    Raises:
        ModelSourceError: the adapter config is unreadable or names no existing local model dir.
    """
    import json

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


def _probe_template(tokenizer, path) -> None:
    """The template is code from elsewhere: one probe render under a time limit, refused as a model source."""
    from .template_guard import ChatTemplateError, check_chat_template

    try:
        check_chat_template(tokenizer, str(path))
    except ChatTemplateError as e:
        raise ModelSourceError(str(e)) from None


def load_pretrained(path: str, device: str = "auto", dtype: str = "auto"):
    """Load tokenizer + causal LM through ``from_pretrained`` and put the model in eval mode.

    A LoRA adapter dir (``adapter_config.json``, as a LoRA run exports its ``policy/``) loads as its base
    checkpoint (:func:`adapter_base`) with the adapter injected (:func:`~ragen_torchrl.models.lora.load_adapter_dir`).

    torchrl's GRPOLoss expects the policy in eval mode (dropout off) so that behaviour
    and current log-probs match.

    Raises:
        ModelSourceError: ``path`` is a missing local path, or ``from_pretrained`` cannot
            find or download it (the message says which, and that the machine may be offline).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev, dt = resolve_device(device, dtype)
    from .lora import is_adapter_dir, load_adapter_dir

    if is_adapter_dir(Path(str(path)).expanduser()):  # a LoRA adapter dir: its base model with the adapter
        model, tokenizer = load_pretrained(str(adapter_base(path)), device, dtype)
        model = load_adapter_dir(model, Path(str(path)).expanduser())
        if (Path(str(path)).expanduser() / "tokenizer_config.json").is_file():
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
            _probe_template(tokenizer, path)
            tokenizer = prepare_tokenizer(tokenizer, model)
        model.to(dev).eval()
        return model, tokenizer
    if not Path(str(path)).expanduser().exists() and looks_like_local_path(str(path)):
        # fail with the real reason, not a hub repo-id traceback
        raise ModelSourceError(f"{path}: the local path does not exist")
    try:
        # a checkpoint from elsewhere never runs its own code (auto_map entries are refused, not asked about)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        _probe_template(tokenizer, path)  # before the weights: a template that never finishes costs nothing to refuse
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt, trust_remote_code=False)
    except ValueError as e:
        if "trust_remote_code" not in str(e):
            raise
        raise ModelSourceError(
            f"{path}: the model dir asks to run its own code (auto_map in its config); a checkpoint's code never "
            "runs here: use a checkpoint of an architecture transformers ships"
        ) from None
    except OSError as e:
        where = "a local directory" if Path(str(path)).expanduser().exists() else "a Hugging Face hub name"
        hint = "" if where.startswith("a local") else " (if it is a hub name, this machine may be offline)"
        raise ModelSourceError(f"cannot load the model {path!r} as {where}{hint}: {e}") from e
    tokenizer = prepare_tokenizer(tokenizer, model)
    model.to(dev).eval()
    return model, tokenizer
