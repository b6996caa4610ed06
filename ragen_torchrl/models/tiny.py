"""An offline tiny policy: a tokenizer trained in-process and a small Qwen2 model.

No machine here can download weights, so the default policy is built locally:

* a byte-level BPE tokenizer trained with ``tokenizers`` on text from the tasks
  (observations, instructions, demonstration replies). Byte-level BPE decodes exactly
  back to the text it encoded, which torchrl's history mode needs (it decodes the
  generated tokens and parses the chat text back into messages);
* distinct pad (``<|pad|>``) and end-of-turn (``<|im_end|>``) tokens: torchrl strips pad
  tokens, so a shared pad/eos id would delete every end-of-turn token;
* a ChatML chat template whose ``{% generation %}`` block contains ``<|im_end|>``, so the
  end-of-turn token is inside the assistant mask and gets trained;
* a small Qwen2-architecture model from config.

Both are saved with ``save_pretrained`` and reloaded with ``from_pretrained``, so the
tiny model goes through the same loading path as a real Hugging Face checkpoint.

Example:
    >>> import tempfile
    >>> from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model
    >>> path = build_tiny_model(["Player at (1, 2). Goal at (3, 3)."] * 20,
    ...                         TinyModelConfig(vocab_size=300, hidden_size=32, num_layers=1),
    ...                         tempfile.mkdtemp())
    >>> from transformers import AutoTokenizer
    >>> tok = AutoTokenizer.from_pretrained(path)
    >>> tok.pad_token != tok.eos_token
    True
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from .build_cache import build_once

PAD_TOKEN = "<|pad|>"
BOT_TOKEN = "<|im_start|>"
EOT_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, BOT_TOKEN, EOT_TOKEN]
#: reasoning/answer tags are single (non-special) tokens so replies stay short
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "<interact>", "</interact>", " ||"]

#: ChatML with the end-of-turn token inside the generation block (trained).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class TinyModelConfig:
    """Size of the tiny tokenizer and model (defaults: ~1M parameters)."""

    vocab_size: int = 768
    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name != "seed" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"model.{name} must be a positive integer, got {value!r}")
        for size, parts in (("hidden_size", "num_heads"), ("num_heads", "num_kv_heads")):
            if getattr(self, size) % getattr(self, parts):
                raise ValueError(
                    f"model.{size} ({getattr(self, size)}) must be divisible by model.{parts} ({getattr(self, parts)})"
                )

    @classmethod
    def from_model_config(cls, model) -> TinyModelConfig:
        """The sizes of a ``model=tiny`` config node (a mapping with this class's size keys).

        Example:
            >>> TinyModelConfig.from_model_config({"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
            ...     "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "device": "cpu"}).hidden_size
            32
        """
        sizes = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads")
        return cls(**{k: model[k] for k in sizes})


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 512):
    """Train a byte-level BPE tokenizer on ``corpus`` and wrap it for ``transformers``.

    Example:
        >>> tok = train_tokenizer(["Left Up Right Down"] * 10, vocab_size=280)
        >>> tok.decode(tok("<think>go Left</think>")["input_ids"])
        '<think>go Left</think>'
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # split only at spaces (each piece keeps its leading space), not at digits or
    # punctuation, so frequent pieces such as "(2,1)," become single tokens; decoding is
    # byte-exact either way
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(" ", behavior="merged_with_next"),
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    tok.add_tokens(TAG_TOKENS)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOT_TOKEN,
        bos_token=None,
        unk_token=None,
        padding_side="left",
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_fingerprint(corpus: list[str], cfg) -> str:
    """The cache key of a tiny model: its size config (a dataclass) and the tokenizer corpus.

    Example:
        >>> build_fingerprint(["a b"], TinyModelConfig()) == build_fingerprint(["a b"], TinyModelConfig())
        True
    """
    h = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode())
    for line in corpus:
        h.update(line.encode("utf-8", "replace"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def build_tiny_model(
    corpus: Iterable[str], cfg: TinyModelConfig | None = None, cache_dir: str | os.PathLike = "."
) -> str:
    """Build (or reuse) the tiny tokenizer + model and return the saved directory.

    The directory name carries a hash of ``cfg`` and the corpus, so a second call with
    the same inputs returns at once. Writes to a temporary directory first and renames
    it, so an interrupted build never leaves a half-written model behind.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = cfg or TinyModelConfig()
    corpus = list(corpus)
    if not corpus:
        raise ValueError("the tokenizer corpus is empty")
    target = Path(cache_dir).expanduser() / f"tiny-qwen2-{build_fingerprint(corpus, cfg)}"

    def build():
        tokenizer = train_tokenizer(corpus, cfg.vocab_size)
        config = Qwen2Config(**text_config_kwargs(cfg, tokenizer), tie_word_embeddings=True)
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            model = Qwen2ForCausalLM(config)
        save_build(target, model, tokenizer)

    return build_once(target, build, ready=is_saved_build)


def text_config_kwargs(cfg, tokenizer) -> dict:
    """The text model's Qwen2 config fields: ``cfg``'s sizes, ``tokenizer``'s vocabulary and special ids.

    Example:
        >>> kw = text_config_kwargs(TinyModelConfig(), train_tokenizer(["a b c"], 300))
        >>> kw["num_hidden_layers"], kw["num_key_value_heads"], kw["bos_token_id"]
        (4, 2, None)
    """
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def is_saved_build(target: Path) -> bool:
    """Whether ``target`` holds a finished :func:`save_build` (its model config and its tokenizer)."""
    return (target / "config.json").exists() and (target / "tokenizer.json").exists()


def save_build(target: Path, model, tokenizer, *extra) -> str:
    """Save a freshly built ``model`` (its generation config given ``tokenizer``'s pad/end ids), ``tokenizer``
    and any ``extra`` part with ``save_pretrained`` (an image processor) to ``target``, atomically.

    Everything is written to a temporary sibling directory renamed to ``target`` at the end, so a
    concurrent build or an interrupted one never leaves a half-written model under the cache key.
    """
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    for part in (tokenizer, *extra, model):
        part.save_pretrained(tmp)
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished first: keep theirs
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)
