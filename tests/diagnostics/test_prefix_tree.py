"""Prefix-tree layout for tree-attention scoring: hand-built cases and random invariants."""

from __future__ import annotations

import doctest
import random

import pytest
import torch

from ragen_torchrl.diagnostics import prefix_tree as pt_mod
from ragen_torchrl.diagnostics.prefix_tree import build_prefix_tree, chunk_sorted_by_budget


def _seqs(*lists):
    return [torch.tensor(x) for x in lists]


def test_hand_built_tree():
    # sequences: 1 2 3 | 1 2 | 1 4 | 5
    # nodes (creation order): 1, 12, 123, 14, 5; nodes with a child: 1, 12 -> slots root, 1, 12
    tree = build_prefix_tree(_seqs([1, 2, 3], [1, 2], [1, 4], [5]))
    assert tree.node_tokens.tolist() == [1, 2, 3, 4, 5]
    assert tree.input_tokens.tolist() == [-1, 1, 2]
    assert tree.depth.tolist() == [0, 1, 2]
    # node -> slot whose logits predict it: 1 <- root, 2 <- "1", 3 <- "12", 4 <- "1", 5 <- root
    assert tree.node_parent.tolist() == [0, 1, 2, 1, 0]
    assert tree.ancestors.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert tree.path.tolist() == [
        [1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 0, 0, 1, 0],
        [0, 0, 0, 0, 1],
    ]
    assert tree.predictors.tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]]
    assert tree.lengths.tolist() == [3, 2, 2, 1]
    assert (tree.num_inputs, tree.num_nodes, tree.num_tokens) == (3, 5, 8)


def test_random_trees_reconstruct_their_sequences():
    rng = random.Random(0)
    for _ in range(200):
        seqs = [[rng.randint(0, 2) for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 10))]
        tree = build_prefix_tree(_seqs(*seqs))
        distinct_prefixes = {tuple(s[:k]) for s in seqs for k in range(1, len(s) + 1)}
        assert tree.num_nodes == len(distinct_prefixes)
        assert tree.num_inputs == 1 + len({tuple(s[:k]) for s in seqs for k in range(1, len(s))})
        for i, s in enumerate(seqs):
            nodes = tree.path[i].nonzero().flatten()
            assert int(tree.path[i].sum()) == len(s) == int(tree.predictors[i].sum())
            # the node tokens along the path, ordered by depth, spell the sequence
            depth_of = tree.depth[tree.node_parent[nodes]]
            assert tree.node_tokens[nodes[depth_of.argsort()]].tolist() == s
        # a slot's ancestors are exactly the slots on its path: depth + 1 of them
        assert (tree.ancestors.sum(1) == tree.depth + 1).all()


def test_chunks_respect_the_budget_and_keep_shared_prefixes_together():
    rng = random.Random(1)
    for _ in range(200):
        seqs = _seqs(*[[rng.randint(0, 2) for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 12))])
        budget = rng.randint(1, 12)
        groups = chunk_sorted_by_budget(seqs, budget)
        assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
        for a, b in zip(groups, groups[1:]):
            assert build_prefix_tree([seqs[i] for i in a]).num_inputs <= budget or len(a) == 1
            # greedy: the next group's first sequence would not have fitted
            assert build_prefix_tree([seqs[i] for i in a + b[:1]]).num_inputs > budget
        assert build_prefix_tree([seqs[i] for i in groups[-1]]).num_inputs <= budget or len(groups[-1]) == 1
    # identical and prefix-sharing sequences never cost extra slots
    same = _seqs([4, 5, 6], [4, 5, 6], [4, 5], [4, 5, 7])
    assert chunk_sorted_by_budget(same, budget=3) == [[2, 0, 1, 3]]


def test_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        build_prefix_tree([])
    with pytest.raises(ValueError, match="non-empty"):
        build_prefix_tree([torch.tensor([1]), torch.tensor([], dtype=torch.long)])
    with pytest.raises(ValueError, match="budget"):
        chunk_sorted_by_budget(_seqs([1]), budget=0)


def test_docstring_examples():
    result = doctest.testmod(pt_mod)
    assert result.attempted > 0 and result.failed == 0
