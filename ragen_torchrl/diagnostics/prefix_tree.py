"""Token prefix tree of a set of sequences, laid out for one tree-attention forward pass.

Templated reasoning repeats its opening words ("Goal is up left. Left is ..."): the 64
reasonings of a Sokoban / FrozenLake MI batch have about half as many distinct prefixes as
tokens. Teacher-forced scoring of many sequences after one shared context therefore only
needs one forward position per *distinct prefix*: lay the tree's nodes out as one sequence,
let each node attend to the context and to its own ancestors (a tree attention mask, as in
speculative decoding), and read every node's log-probability off its parent's logits. This
is exact for full-attention causal models: each node sees exactly the tokens that precede it
in every sequence it belongs to, at the same positions.

:func:`build_prefix_tree` is the pure layout; :mod:`.cross_scoring` runs it.

Example:
    >>> import torch
    >>> tree = build_prefix_tree([torch.tensor([5, 6, 7]), torch.tensor([5, 6, 8]), torch.tensor([5])])
    >>> tree.node_tokens.tolist()         # distinct prefixes 5, 56, 567, 568
    [5, 6, 7, 8]
    >>> tree.input_tokens.tolist()        # slot 0 = the context's last token; leaves 7, 8 not fed
    [-1, 5, 6]
    >>> tree.depth.tolist(), tree.node_parent.tolist()
    ([0, 1, 2], [0, 1, 2, 2])
    >>> tree.path.tolist()                # which nodes each sequence's tokens are
    [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]]
    >>> tree.num_inputs, tree.num_nodes, tree.num_tokens
    (3, 4, 7)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["PrefixTree", "build_prefix_tree", "chunk_sorted_by_budget"]


@dataclass
class PrefixTree:
    """Layout of the prefix tree of ``M`` sequences (see the module docstring).

    Input slots are what the forward pass is fed: slot 0 is the root (the caller puts the
    context's last token there; it predicts every sequence's first token), then every tree
    node that has a child, parents before children. Leaves predict nothing, so they are
    never fed.

    Attributes:
        input_tokens: ``[S]`` token of each input slot (``-1`` at slot 0, the root).
        depth: ``[S]`` tokens after the root (position offset from the context's last token).
        ancestors: ``[S, S]`` bool, ``ancestors[a, b]``: slot ``a`` may attend to slot ``b``
            (``b`` is ``a`` itself or one of its ancestors; the root is everybody's).
        node_tokens: ``[T]`` token of every tree node (one per distinct non-empty prefix).
        node_parent: ``[T]`` input slot whose logits predict the node's token.
        path: ``[M, T]`` float 0/1, ``path[i, t] = 1`` when node ``t`` is a prefix of sequence
            ``i``: the sequence's summed log-probability is ``path @ node_log_probs``.
        predictors: ``[M, S]`` float 0/1, the input slots whose distributions predict the
            tokens of sequence ``i`` (for its mean token entropy).
        lengths: ``[M]`` sequence lengths.
    """

    input_tokens: torch.Tensor
    depth: torch.Tensor
    ancestors: torch.Tensor
    node_tokens: torch.Tensor
    node_parent: torch.Tensor
    path: torch.Tensor
    predictors: torch.Tensor
    lengths: torch.Tensor

    @property
    def num_inputs(self) -> int:
        return int(self.input_tokens.numel())

    @property
    def num_nodes(self) -> int:
        return int(self.node_tokens.numel())

    @property
    def num_tokens(self) -> int:
        """Tokens of all sequences together (what scoring them one by one would feed)."""
        return int(self.lengths.sum())


def build_prefix_tree(seqs: Sequence[torch.Tensor]) -> PrefixTree:
    """Prefix tree of non-empty 1-D token sequences (duplicates share one path).

    Example:
        >>> import torch
        >>> t = build_prefix_tree([torch.tensor([1, 2]), torch.tensor([1, 2])])
        >>> t.num_nodes, t.path.tolist()
        (2, [[1.0, 1.0], [1.0, 1.0]])
    """
    if len(seqs) == 0:
        raise ValueError("build_prefix_tree needs at least one sequence")
    toks = [[int(v) for v in torch.as_tensor(s).reshape(-1).tolist()] for s in seqs]
    if any(len(t) == 0 for t in toks):
        raise ValueError("every sequence must be non-empty")
    children: list[dict[int, int]] = [{}]  # tree vertex 0 = root; vertex v >= 1 = node v - 1
    vertex_token: list[int] = [-1]
    vertex_parent: list[int] = [-1]
    paths: list[list[int]] = []
    for t in toks:
        v, path = 0, []
        for tok in t:
            nxt = children[v].get(tok)
            if nxt is None:
                nxt = len(vertex_token)
                children[v][tok] = nxt
                children.append({})
                vertex_token.append(tok)
                vertex_parent.append(v)
            path.append(nxt)
            v = nxt
        paths.append(path)
    # input slots: the root, then every vertex with a child, in creation order (parents first)
    fed = [v for v in range(len(vertex_token)) if v == 0 or children[v]]
    slot = {v: s for s, v in enumerate(fed)}
    depth = [0] * len(vertex_token)
    for v in range(1, len(vertex_token)):
        depth[v] = depth[vertex_parent[v]] + 1
    n_in = len(fed)
    anc = torch.zeros(n_in, n_in, dtype=torch.bool)
    for s, v in enumerate(fed):
        if v:
            anc[s] = anc[slot[vertex_parent[v]]]
        anc[s, s] = True
    n_nodes = len(vertex_token) - 1
    path_m = torch.zeros(len(toks), n_nodes)
    pred_m = torch.zeros(len(toks), n_in)
    for i, path in enumerate(paths):
        for v in path:
            path_m[i, v - 1] = 1.0
            pred_m[i, slot[vertex_parent[v]]] = 1.0
    return PrefixTree(
        input_tokens=torch.tensor([vertex_token[v] for v in fed], dtype=torch.long),
        depth=torch.tensor([depth[v] for v in fed], dtype=torch.long),
        ancestors=anc,
        node_tokens=torch.tensor(vertex_token[1:], dtype=torch.long),
        node_parent=torch.tensor([slot[p] for p in vertex_parent[1:]], dtype=torch.long),
        path=path_m,
        predictors=pred_m,
        lengths=torch.tensor([len(t) for t in toks], dtype=torch.long),
    )


def chunk_sorted_by_budget(seqs: Sequence[torch.Tensor], budget: int) -> list[list[int]]:
    """Split sequences into groups whose prefix trees have at most ``budget`` input slots.

    Sequences are sorted lexicographically first, so sequences sharing a prefix land in the
    same group. A sequence longer than the budget gets a group of its own. Returns lists of
    indices into ``seqs``, each group in sorted order.

    Example:
        >>> import torch
        >>> seqs = [torch.tensor(s) for s in ([3, 1], [1, 2, 3], [1, 2, 4], [3, 2])]
        >>> chunk_sorted_by_budget(seqs, budget=3)   # slots: root, 1, 12 | root, 3
        [[1, 2], [0, 3]]
    """
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    toks = [tuple(int(v) for v in torch.as_tensor(s).reshape(-1).tolist()) for s in seqs]
    order = sorted(range(len(toks)), key=lambda i: toks[i])
    groups: list[list[int]] = []
    used, prev = 0, ()
    for i in order:
        t = toks[i]
        shared = 0
        while shared < min(len(t), len(prev)) and t[shared] == prev[shared]:
            shared += 1
        # Slots = root + the prefixes that have a child. In sorted order the group already
        # feeds t's prefixes up to length min(shared, |prev| - 1) (no earlier sequence shares
        # more with t than its predecessor does), so t adds lengths up to |t| - 1 beyond that.
        new = max(0, len(t) - 1 - min(shared, len(prev) - 1))
        if groups and used + new <= budget:
            groups[-1].append(i)
            used += new
        else:
            groups.append([i])
            used = 1 + max(0, len(t) - 1)
        prev = t
    return groups
