import pytest
import torch

from ragen_torchrl.data.minibatch import group_minibatches


def test_whole_groups_cover_every_row_once():
    groups = torch.tensor([3, 3, 3, 3, 7, 7, 7, 7, 1, 1, 1, 1, 5, 5, 5, 5])
    for seed in range(20):
        batches = group_minibatches(groups, 8, generator=torch.Generator().manual_seed(seed))
        rows = torch.cat(batches)
        assert sorted(rows.tolist()) == list(range(16))
        assert [len(b) for b in batches] == [8, 8]
        for b in batches:
            ids = groups[b]
            for g in ids.unique():
                assert (ids == g).sum() == 4  # never split


def test_group_order_is_shuffled_and_reproducible():
    groups = torch.arange(10).repeat_interleave(2)
    first = [
        tuple(group_minibatches(groups, 2, generator=torch.Generator().manual_seed(s))[0].tolist()) for s in range(10)
    ]
    assert len(set(first)) > 1
    a = group_minibatches(groups, 4, generator=torch.Generator().manual_seed(3))
    b = group_minibatches(groups, 4, generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_uneven_groups_and_oversized_group():
    groups = torch.tensor([0, 0, 0, 0, 0, 1, 2, 2])  # group 0 is larger than the mini-batch
    batches = group_minibatches(groups, 3, generator=torch.Generator().manual_seed(0))
    assert sorted(torch.cat(batches).tolist()) == list(range(8))
    sizes = sorted(len(b) for b in batches)
    assert 5 in sizes and all(s <= 5 for s in sizes)


def test_column_vector_ids_and_empty():
    assert group_minibatches(torch.zeros(0, dtype=torch.long), 4) == []
    batches = group_minibatches(torch.tensor([[0], [0], [1], [1]]), 2)
    assert sorted(torch.cat(batches).tolist()) == [0, 1, 2, 3]


def test_bad_size_is_a_clear_error():
    with pytest.raises(ValueError, match="mini_batch_size"):
        group_minibatches(torch.tensor([0, 1]), 0)
