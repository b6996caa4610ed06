"""In-batch cross-scoring of reasonings against prompts with any causal LM.

The MI proxies (:mod:`ragen_torchrl.diagnostics.mi`) need, for ``M`` reasonings ``z_i`` and
``N`` prompt columns ``x_j``, the teacher-forced matrix

    ``l[i, j] = mean_t log p(z_i,t | x_j, z_i,<t)``     (and the per-sequence sum)

under the current policy. :func:`cross_score` computes it for any Hugging Face causal LM
(``AutoModelForCausalLM``-like) in two ways:

* ``method="naive"``: score every concatenation ``[x_j | z_i]`` (``M * N`` sequences of length
  ``|x| + |z|``). Simple and obviously right; the reference the cached path is tested against.
* ``method="cached"``: encode every context once, keep its KV cache and score all
  reasonings against it. Contexts are typically ~10x longer than the reasoning, so this does
  ``N * |x| + M * N * |z|`` token-forwards instead of ``M * N * (|x| + |z|)``.
* ``method="tree"``: the cached path, plus the reasonings laid out as one prefix tree
  (:mod:`.prefix_tree`) scored in one pass per context with a tree attention mask: a prefix
  shared by several reasonings ("Goal is up left. ...") is computed once, and the context's
  cache is used as is instead of being replicated per reasoning. Templated reasoning shares
  about half its tokens, so this halves the reasoning passes of a training batch.
* ``method="auto"`` (default): ``"tree"`` where the model takes a custom 4-D attention mask
  (:func:`tree_supported`: sdpa / eager attention, no sliding window), else ``"cached"``.

This module holds the entry point and the naive and cached scorers; the prefix-tree scorer is in
:mod:`.tree_scoring`, the context KV-cache handling in :mod:`ragen_torchrl.models.kv_cache` and the shared
log-probability / entropy pieces in :mod:`.token_scoring`.

Nothing here depends on the trainer: the example below scores a batch of conversations
end to end with a tiny model built in-process. With a real model replace the tokenizer and
model by ``AutoTokenizer.from_pretrained(path)`` / ``AutoModelForCausalLM.from_pretrained(path)``
and build ``x`` as the chat-templated context up to and including the opening reasoning tag
(e.g. ``tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) + "<think>"``)
and ``z`` as the reasoning text between the tags (tags and special tokens removed; drop empty
reasonings before scoring and log the valid rate).

Example:
    >>> import torch
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> from transformers import Qwen2Config, Qwen2ForCausalLM
    >>> from ragen_torchrl.diagnostics.cross_scoring import cross_score
    >>> from ragen_torchrl.diagnostics.mi import mi_proxies
    >>> from ragen_torchrl.diagnostics.mi_sampling import equivalence_from_keys
    >>> words = "<unk> user: assistant: <think> go left right up down the goal is".split()
    >>> tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    >>> tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    >>> _ = torch.manual_seed(0)
    >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(words), hidden_size=32,
    ...     intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    ...     num_key_value_heads=2)).eval()
    >>> conversations = [  # (context up to the opening tag, reasoning inside the tags)
    ...     ("user: the goal is left assistant: <think>", "go left"),
    ...     ("user: the goal is up assistant: <think>", "the goal is up go up"),
    ...     ("user: the goal is down assistant: <think>", "down"),
    ... ]
    >>> ids = lambda s: torch.tensor(tok.encode(s).ids)
    >>> contexts = [ids(x) for x, _ in conversations]      # N = 3 columns
    >>> reasonings = [ids(z) for _, z in conversations]    # M = 3 pairs, pair i <-> column i
    >>> mean_lp, sum_lp = cross_score(model, contexts, reasonings)
    >>> mean_lp.shape
    torch.Size([3, 3])
    >>> metrics = mi_proxies(mean_lp, torch.arange(3), seq_log_probs=sum_lp,
    ...     col_equivalence=equivalence_from_keys([tuple(c.tolist()) for c in contexts]))
    >>> metrics["num_pairs"], round(metrics["mi_upper_bound"], 4)
    (3, 1.0986)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ragen_torchrl.checks import check_choice

from ..models.kv_cache import (
    context_chunks,
    forward_kwargs,
    model_device,
    pad_right,
    prefix_mask,
    prefix_passes,
    select_cache,
)
from .token_scoring import (
    _model_dtype,
    _own_entropy,
    _score_dtype,
    _scoring_model,
    _token_log_probs,
)
from .tree_scoring import _tree, tree_supported

__all__ = ["DEFAULT_BATCH_SIZE", "METHODS", "cross_score", "tree_supported"]


#: Scoring methods of :func:`cross_score` (``"auto"`` = ``"tree"`` where supported, else ``"cached"``).
METHODS = ("auto", "tree", "cached", "naive")


#: Default maximum number of (context, reasoning) rows per forward pass.
DEFAULT_BATCH_SIZE = 64


def _validate(name: str, seqs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if len(seqs) == 0:
        raise ValueError(f"{name} is empty")
    out = []
    for k, s in enumerate(seqs):
        t = torch.as_tensor(s)
        if t.dim() != 1:
            raise ValueError(f"{name}[{k}] must be a 1-D tensor of token ids, got shape {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(
                f"{name}[{k}] is empty (drop pairs with empty reasoning before scoring; "
                "a context must at least contain the opening reasoning tag)"
            )
        if t.is_floating_point() or t.dtype == torch.bool:
            raise ValueError(f"{name}[{k}] must hold integer token ids, got dtype {t.dtype}")
        out.append(t.detach().to("cpu", torch.long))
    return out


def _entropy_cols(entropy_cols, n_reasonings: int, n_contexts: int) -> torch.Tensor | None:
    """``entropy_cols`` as a long CPU tensor of one column index per reasoning (``None`` stays ``None``)."""
    if entropy_cols is None:
        return None
    cols = torch.as_tensor(entropy_cols, dtype=torch.long).reshape(-1).cpu()
    if cols.numel() != n_reasonings or (cols.numel() and (cols.min() < 0 or cols.max() >= n_contexts)):
        raise ValueError(
            f"entropy_cols must hold {n_reasonings} column indices in [0, {n_contexts}), got {cols.tolist()}"
        )
    return cols


def _unique(keys: list) -> tuple[list[int], torch.Tensor]:
    """Position of each distinct key's first occurrence, and each key's index among them."""
    index: dict = {}
    first: list[int] = []
    of = []
    for i, k in enumerate(keys):
        if k not in index:
            index[k] = len(first)
            first.append(i)
        of.append(index[k])
    return first, torch.tensor(of, dtype=torch.long)


def _naive(model, contexts, reasonings, batch_size, ent_cols=None):
    device = model_device(model)
    m, n = len(reasonings), len(contexts)
    ent = torch.full((m,), float("nan"))
    ctx_len = torch.tensor([c.numel() for c in contexts])
    z_len = torch.tensor([z.numel() for z in reasonings])
    sum_lp = torch.zeros(m, n, dtype=_score_dtype(_model_dtype(model)))
    # Column-major pair order keeps one context's pairs together (similar lengths per chunk).
    pairs = [(i, j) for j in range(n) for i in range(m)]
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        ii = torch.tensor([p[0] for p in chunk])
        jj = torch.tensor([p[1] for p in chunk])
        ids, lengths = pad_right([torch.cat([contexts[j], reasonings[i]]) for i, j in chunk], device)
        width = ids.shape[1]
        # Right padding: every real token keeps position 0..len-1 (= what an unpadded forward
        # sees) and the trailing pads are causally invisible to it; the mask hides them anyway.
        pos = torch.arange(width, device=device)
        attn = (pos.unsqueeze(0) < lengths.unsqueeze(1)).long()
        out = model(
            input_ids=ids,
            attention_mask=attn,
            position_ids=pos.unsqueeze(0).expand(len(chunk), -1),
            use_cache=False,
        )
        lz = int(z_len[ii].max())
        t = torch.arange(lz, device=device)
        # The logit at position p predicts token p + 1, so z_t (at |x| + t) comes from |x| - 1 + t.
        src = (ctx_len[jj].to(device).unsqueeze(1) - 1 + t).clamp(max=width - 1)
        tgt_pos = (src + 1).clamp(max=width - 1)
        valid = t.unsqueeze(0) < z_len[ii].to(device).unsqueeze(1)
        logits = out.logits.gather(1, src.unsqueeze(-1).expand(-1, -1, out.logits.shape[-1]))
        targets = ids.gather(1, tgt_pos)
        sum_lp[ii, jj] = _token_log_probs(logits, targets, valid).cpu()
        _own_entropy(ent, logits, valid, ii, jj, ent_cols)
    return sum_lp, ent


def _cached(model, contexts, reasonings, batch_size, cache_name, has_logits_to_keep, ent_cols=None):
    device = model_device(model)
    m, n = len(reasonings), len(contexts)
    ent = torch.full((m,), float("nan"))
    sum_lp = torch.zeros(m, n, dtype=_score_dtype(_model_dtype(model)))

    # Two levels of chunking below the prefix pass, each pass holding at most `batch_size`
    # rows: `cb` contexts x `mb` reasonings. When all M reasonings fit, several contexts
    # share a pass (cb = batch_size // M); otherwise one context at a time and its
    # reasonings in chunks of `batch_size`. With one context per pass its cache rows are an
    # expand() view of the prefix cache: no per-pair copy. Every reasoning pass trims the
    # cache to its own longest prefix.
    per_ctx = min(m, batch_size)
    ctx_per_pass = max(1, batch_size // m) if m <= batch_size else 1
    z_chunks = [list(range(s, min(s + per_ctx, m))) for s in range(0, m, per_ctx)]
    z_padded = [pad_right([reasonings[i] for i in zc], device) for zc in z_chunks]
    z_index = [torch.tensor(zc) for zc in z_chunks]

    for pcols, plens, base, last_tok in prefix_passes(model, contexts, batch_size, has_logits_to_keep, cache_name):
        for local, cols, lens, plen in context_chunks(pcols, plens, ctx_per_pass):
            cb = local.numel()
            pmask = prefix_mask(lens, plen)
            for zc, zi, (z_ids, z_lens) in zip(z_chunks, z_index, z_padded):
                mb = len(zc)
                rows_ctx = torch.arange(cb, device=device).repeat_interleave(mb)  # context-major
                rows_z = torch.arange(mb, device=device).repeat(cb)
                lz = z_ids.shape[1]
                inp = torch.cat([last_tok[local][rows_ctx].unsqueeze(1), z_ids[rows_z]], dim=1)
                z_mask = (torch.arange(lz, device=device).unsqueeze(0) < z_lens.unsqueeze(1)).long()
                ones = torch.ones(rows_ctx.numel(), 1, dtype=torch.long, device=device)
                attn = torch.cat([pmask[rows_ctx], ones, z_mask[rows_z]], dim=1)
                # Explicit positions: the first scored token sits at |x_j| - 1 whatever the
                # padded prefix width, so RoPE sees the positions of the unpadded sequence.
                pos = (lens[rows_ctx] - 1).unsqueeze(1) + torch.arange(lz + 1, device=device)
                kwargs = {}
                if base is not None and plen > 0:
                    kwargs[cache_name] = select_cache(base, local[rows_ctx], plen)
                out = model(input_ids=inp, attention_mask=attn, position_ids=pos, use_cache=True, **kwargs)
                # Position t (the last context token, then z_0 ...) predicts z_t.
                logits = out.logits[:, :lz]
                valid = z_mask[rows_z].bool()
                lp = _token_log_probs(logits, z_ids[rows_z], valid).view(cb, mb).cpu()
                sum_lp[zi.unsqueeze(0), cols.unsqueeze(1)] = lp
                _own_entropy(ent, logits, valid, zi[rows_z.cpu()], cols[rows_ctx.cpu()], ent_cols)
                del out, kwargs
    return sum_lp, ent


def cross_score(
    model: torch.nn.Module,
    contexts: Sequence[torch.Tensor],
    reasonings: Sequence[torch.Tensor],
    *,
    method: str = "auto",
    batch_size: int | None = None,
    entropy_cols: Sequence[int] | torch.Tensor | None = None,
    dtype: torch.dtype | str | None = None,
) -> tuple[torch.Tensor, ...]:
    """Teacher-forced log-likelihood of every reasoning under every context.

    Args:
        model: a causal LM called as
            ``model(input_ids=..., attention_mask=..., position_ids=..., cache=... / past_key_values=..., use_cache=...)``
            returning ``.logits`` (and a ``transformers`` cache when ``use_cache=True``).
            Any ``AutoModelForCausalLM`` works; it runs in its own dtype and device, under
            ``torch.no_grad`` and temporarily in eval mode (the diagnostic must not depend on
            dropout), restored afterwards.
        contexts: ``N`` 1-D integer tensors, the token ids of ``x_j`` (everything up to and
            including the opening reasoning tag). Lengths may differ.
        reasonings: ``M`` non-empty 1-D integer tensors, the token ids of ``z_i``.
        method: ``"auto"`` (default: ``"tree"`` where :func:`tree_supported`, else
            ``"cached"``), ``"tree"`` (KV cache + reasoning prefix tree), ``"cached"``
            (KV cache, one row per pair) or ``"naive"`` (score every concatenation; the
            reference). All agree to float rounding.
        entropy_cols: optional ``[M]`` column index per reasoning; then a third output holds
            each reasoning's mean token entropy under that column's context, read off the
            same passes.
        dtype: score in this dtype instead of the model's own (``None``, default). A
            bfloat16 / float16 policy scored with ``dtype=torch.float32`` runs on a
            temporary float32 copy of its weights (the model itself is untouched): the same
            parameters, evaluated without half-precision rounding, so that the scoring
            methods agree to ~1e-6 again (see Notes). Costs one float32 copy of the weights.
        batch_size: maximum number of (context, reasoning) rows per forward pass
            (default :data:`DEFAULT_BATCH_SIZE` = 64; the tree path feeds at most as many
            tokens per pass). Lower it for large models / long contexts; the cached path
            holds ``batch_size`` copies of a context's KV cache.

    Returns:
        ``(mean_lp, sum_lp)``: two float32 CPU tensors (float64 for a float64 model) of shape ``[M, N]``;
        ``sum_lp[i, j] = sum_t log p(z_i,t | x_j, z_i,<t)`` and ``mean_lp = sum_lp / |z_i|``;
        with ``entropy_cols``, also ``[M]`` float32 mean token entropies (nats).

    Notes:
        The cached path sorts the contexts by length and encodes their prefixes
        ``x_j[:-1]`` right-padded, up to ``batch_size`` contexts per forward pass, keeping
        the KV cache. Each reasoning pass then takes ``cb`` of those contexts times ``mb``
        reasonings (``cb * mb <= batch_size``; one context per pass whenever ``M`` fills the
        batch), replicates the cache rows per pair (an ``expand`` view when the pass has one
        context, a gather otherwise) and scores ``[x_j[-1] | z_i]`` with an attention mask
        that hides the prefix padding and explicit position ids ``|x_j| - 1 + t``. The base
        cache is never modified, so no context is encoded twice. This is exact for
        full-attention models. Sliding-window layers count window distance in cache slots,
        so padding inside a pass would shift their windows; use ``method="naive"`` (or
        equal-length contexts) for such models.

        The tree path groups the sorted reasonings into prefix trees of at most about one
        mean context length of slots and scores each tree against up to
        ``batch_size * mean|z| // slots`` contexts per pass: every slot gets the position
        ``|x_j| - 1 + depth`` and attends to the real prefix slots of its context and to its
        own ancestors in the tree; each tree node's log-probability is read off its parent's
        logits once and summed along every reasoning's path (in float64).

        Float32 agrees with ``"naive"`` to ~2e-6 per entry, float64 to ~1e-14 (the outputs
        are then float64). bfloat16 cannot reach 1e-4:
        even the naive path alone moves by ~1e-4 when the batch size changes (kernels round
        differently per shape); cached vs naive measured up to ~7e-4 nats (mean) and ~6e-3
        (sum) per entry on a tiny Qwen2, against ~2e-3 between bf16 and float32 themselves.
        Log-softmax is always taken in float32.

    Example:
        >>> import torch
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> _ = torch.manual_seed(0)
        >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32,
        ...     intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        ...     num_key_value_heads=2)).eval()
        >>> ctx = [torch.randint(64, (n,)) for n in (9, 5)]
        >>> z = [torch.randint(64, (n,)) for n in (3, 4, 2)]
        >>> mean_c, sum_c = cross_score(model, ctx, z)
        >>> mean_n, sum_n = cross_score(model, ctx, z, method="naive")
        >>> bool(torch.allclose(mean_c, mean_n, atol=1e-4)), tuple(mean_c.shape)
        (True, (3, 2))
    """
    check_choice("method", method, METHODS)
    model = _scoring_model(model, dtype)
    if method == "tree" and not tree_supported(model):
        raise ValueError(
            "method='tree' needs full attention with a custom 4-D mask (sdpa or eager attention, no "
            "sliding window); use method='cached' or 'auto' for this model"
        )
    if method == "auto":
        method = "tree" if tree_supported(model) else "cached"
    if batch_size is None:
        batch_size = DEFAULT_BATCH_SIZE
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ctx = _validate("contexts", contexts)
    zs = _validate("reasonings", reasonings)
    ent_cols = _entropy_cols(entropy_cols, len(zs), len(ctx))
    cache_name, has_logits_to_keep = forward_kwargs(model)
    # Identical token sequences score identically, so each distinct context and reasoning is
    # scored once and the matrix is expanded afterwards. Templated reasoning (the thing this
    # diagnostic looks for) repeats a lot, which makes this the cheapest speed-up there is.
    ctx_first, ctx_of = _unique([tuple(c.tolist()) for c in ctx])
    u_ctx = [ctx[i] for i in ctx_first]
    # a reasoning whose entropy is wanted is distinct per own context (the entropy depends on it)
    z_keys: list = [tuple(z.tolist()) for z in zs]
    if ent_cols is not None:
        z_keys = [(k, int(ctx_of[c])) for k, c in zip(z_keys, ent_cols)]
    z_first, z_of = _unique(z_keys)
    u_zs = [zs[i] for i in z_first]
    u_ent_cols = None if ent_cols is None else ctx_of[ent_cols[torch.tensor(z_first)]]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if method == "naive":
                sum_u, ent_u = _naive(model, u_ctx, u_zs, batch_size, u_ent_cols)
            elif method == "tree":
                sum_u, ent_u = _tree(model, u_ctx, u_zs, batch_size, cache_name, has_logits_to_keep, u_ent_cols)
            else:
                sum_u, ent_u = _cached(model, u_ctx, u_zs, batch_size, cache_name, has_logits_to_keep, u_ent_cols)
    finally:
        model.train(was_training)
    sum_lp = sum_u[z_of][:, ctx_of]
    ent = ent_u[z_of]
    z_len = torch.tensor([z.numel() for z in zs], dtype=sum_lp.dtype)
    if ent_cols is not None:
        return sum_lp / z_len.unsqueeze(1), sum_lp, ent
    return sum_lp / z_len.unsqueeze(1), sum_lp
