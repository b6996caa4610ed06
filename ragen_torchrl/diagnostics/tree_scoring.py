"""The prefix-tree scorer of :func:`~ragen_torchrl.diagnostics.cross_scoring.cross_score`.

``method="tree"``: the reasonings are laid out as prefix trees (:mod:`.prefix_tree`) and each
tree is scored in one pass per context with a tree attention mask on top of the context's KV
cache (:mod:`ragen_torchrl.models.kv_cache`), so a prefix shared by several reasonings is computed once.
:func:`tree_supported` tells whether a model takes the custom 4-D mask this needs.

Example:
    >>> from transformers import Qwen2Config, Qwen2ForCausalLM
    >>> tree_supported(Qwen2ForCausalLM(Qwen2Config(vocab_size=8, hidden_size=8,
    ...     intermediate_size=8, num_hidden_layers=1, num_attention_heads=2)))
    True
"""

from __future__ import annotations

import torch

from ..models.kv_cache import (
    context_chunks,
    model_device,
    prefix_mask,
    prefix_passes,
    select_cache,
    shared_prefix_supported,
)
from .entropy import token_entropy
from .prefix_tree import build_prefix_tree, chunk_sorted_by_budget
from .token_scoring import _model_dtype, _score_dtype

__all__ = ["tree_supported"]


def tree_supported(model: torch.nn.Module) -> bool:
    """Whether ``method="tree"`` is exact for ``model``.

    The tree pass hands the model a custom 4-D attention mask next to the context's KV cache:
    exact where :func:`~ragen_torchrl.models.kv_cache.shared_prefix_supported` holds.

    Example:
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> tree_supported(Qwen2ForCausalLM(Qwen2Config(vocab_size=8, hidden_size=8,
        ...     intermediate_size=8, num_hidden_layers=1, num_attention_heads=2)))
        True
    """
    return shared_prefix_supported(model)


def _tree(model, contexts, reasonings, batch_size, cache_name, has_logits_to_keep, ent_cols=None):
    device = model_device(model)
    m, n = len(reasonings), len(contexts)
    ent = torch.full((m,), float("nan"))
    dtype = _model_dtype(model)
    sum_lp = torch.zeros(m, n, dtype=_score_dtype(dtype))
    # A pass feeds at most as many query tokens as a per-pair pass of `batch_size`
    # reasonings would: `budget` slots per forward, split over the contexts of the pass.
    # Each tree is capped at about one context length of slots: every slot attends to all
    # slots of its tree through the dense mask, so a bigger tree would spend more on masked
    # attention than the shared prefixes save (measured: trees of 128-256 slots fastest at
    # 240-token contexts, of ~100 at the tiny policy's 100-200-token contexts).
    mean_len = sum(z.numel() for z in reasonings) / m
    budget = max(1, round(batch_size * mean_len))
    mean_ctx = sum(c.numel() for c in contexts) / n
    groups = chunk_sorted_by_budget(reasonings, max(1, min(budget, round(mean_ctx))))
    trees = [build_prefix_tree([reasonings[i] for i in g]) for g in groups]
    neg = torch.finfo(dtype).min

    for pcols, plens, base, last_tok in prefix_passes(model, contexts, batch_size, has_logits_to_keep, cache_name):
        for g, tree in zip(groups, trees):
            gi = torch.tensor(g)
            s_in = tree.num_inputs
            ctx_per_pass = max(1, budget // s_in)
            inp_tree = tree.input_tokens.to(device)
            anc = tree.ancestors.to(device)
            depth = tree.depth.to(device)
            node_parent, node_tokens = tree.node_parent.to(device), tree.node_tokens.to(device)
            path = tree.path.to(device, torch.float64)
            for local, cols, lens, plen in context_chunks(pcols, plens, ctx_per_pass):
                cb = local.numel()
                inp = inp_tree.unsqueeze(0).repeat(cb, 1)
                inp[:, 0] = last_tok[local]
                # Additive 4-D mask [cb, 1, S, plen + S]: the real prefix slots, then the tree
                # slots each query may see (itself and its ancestors).
                visible = torch.cat(
                    [
                        prefix_mask(lens, plen).bool().unsqueeze(1).expand(cb, s_in, plen),
                        anc.unsqueeze(0).expand(cb, s_in, s_in),
                    ],
                    dim=2,
                )
                mask = torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill_(~visible, neg)
                pos = (lens - 1).unsqueeze(1) + depth.unsqueeze(0)
                kwargs = {}
                if base is not None and plen > 0:
                    kwargs[cache_name] = select_cache(base, local, plen)
                out = model(input_ids=inp, attention_mask=mask.unsqueeze(1), position_ids=pos, use_cache=True, **kwargs)
                logits = out.logits.to(sum_lp.dtype)
                lse = torch.logsumexp(logits, dim=-1)  # [cb, S]
                node_lp = logits[:, node_parent, node_tokens] - lse[:, node_parent]  # [cb, T]
                # each reasoning's sum over its path; in float64 because the order of the terms
                # differs from a per-pair sum, whose float32 rounding we want to stay within
                lp = (node_lp.double() @ path.T).to(sum_lp.dtype).cpu()
                sum_lp[gi.unsqueeze(0), cols.unsqueeze(1)] = lp
                if ent_cols is not None:
                    own = (ent_cols[gi].unsqueeze(1) == cols.unsqueeze(0)).nonzero()  # (k in g, row)
                    if own.numel():
                        # per-slot entropy of each context row needed (once per row), then each
                        # reasoning's mean over the slots that predict its tokens
                        rows, row_of = own[:, 1].unique(return_inverse=True)
                        rows = rows.to(device)
                        h = token_entropy(
                            logits[rows].reshape(-1, 1, logits.shape[-1]),
                            torch.ones(rows.numel() * s_in, 1, dtype=torch.bool, device=device),
                        )
                        h = h.view(rows.numel(), s_in).double()[row_of.to(device)]
                        pred = tree.predictors[own[:, 0]].to(device, torch.float64)
                        ent[gi[own[:, 0]]] = ((h * pred).sum(-1) / tree.lengths[own[:, 0]].to(device)).float().cpu()
                del out, kwargs, logits
    return sum_lp, ent
