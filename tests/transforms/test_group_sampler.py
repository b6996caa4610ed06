"""TopVarianceGroupSampler inside real torchrl replay buffers."""

import pytest
import tensordict
import torch
from tensordict import TensorDict, lazy_stack
from torchrl.data import LazyStackStorage, LazyTensorStorage, ReplayBuffer

from ragen_torchrl.transforms.group_sampler import TopVarianceGroupSampler

tensordict.set_list_to_stack(True).set()


def batch(group_ids, returns):
    n = len(group_ids)
    return TensorDict(
        group_id=torch.tensor(group_ids),
        episode_return=torch.tensor(returns, dtype=torch.float32),
        num_tokens=torch.arange(n) + 1,
        batch_size=[n],
    )


# unbiased variance per group (the default metric): 0 -> {1, 0} .5, 1 -> {1, 1} 0, 2 -> {0, 2} 2
# top_p .9 linear: thr .9 * 2.5 - .01 = 2.24 -> groups 2, 0 -> storage rows 0, 1, 4, 5
# (std: .7071, 0, 1.4142, thr .9 * 2.1213 - .01 = 1.8992 -> the same groups 2, 0)
FIRST = batch([0, 0, 1, 1, 2, 2], [1.0, 0.0, 1.0, 1.0, 0.0, 2.0])


def make_rb(size=32, batch_size=64, **kw):
    return ReplayBuffer(storage=LazyTensorStorage(size), sampler=TopVarianceGroupSampler(**kw), batch_size=batch_size)


def test_samples_only_top_groups_and_recomputes_after_write():
    rb = make_rb()
    rb.extend(FIRST)
    assert rb.sampler.kept_rows(rb.storage).tolist() == [0, 1, 4, 5]
    sample, info = rb.sample(return_info=True)
    assert set(info["index"].tolist()) <= {0, 1, 4, 5}
    assert set(sample["group_id"].tolist()) == {0, 2}  # 64 draws from 4 rows: both groups appear
    assert rb.sampler.selection(rb.storage)[1]["kept_groups"] == 2.0
    # group 3 {0, 10}: variance 50. Scores .5, 0, 2, 50, sum 52.5,
    # thr .9 * 52.5 - .01 = 47.24: 50 >= thr -> group 3 alone -> rows 6, 7
    rb.extend(batch([3, 3], [0.0, 10.0]))
    assert rb.sampler.kept_rows(rb.storage).tolist() == [6, 7]
    assert set(rb.sample()["group_id"].tolist()) == {3}


def test_reference_std_metric_keeps_more_groups():
    # reference code ranks by std: scores .7071, 0, 1.4142, 7.0711 (group 3 {0, 10}), sum 9.1924,
    # thr .9 * 9.1924 - .01 = 8.2632: 7.0711 -> 8.4853 >= thr -> groups 3, 2 -> rows 4..7
    rb = make_rb(metric="reward_std")
    rb.extend(FIRST)
    rb.extend(batch([3, 3], [0.0, 10.0]))
    assert rb.sampler.kept_rows(rb.storage).tolist() == [4, 5, 6, 7]
    assert set(rb.sample()["group_id"].tolist()) == {2, 3}


def test_overwrite_in_full_circular_buffer_recomputes():
    rb = make_rb(size=4, batch_size=8)
    rb.extend(batch([0, 0, 1, 1], [0.0, 1.0, 1.0, 1.0]))  # only group 0 varies: rows 0, 1
    assert rb.sampler.kept_rows(rb.storage).tolist() == [0, 1]
    # overwrites rows 0, 1 with a constant group; the length stays 4, the write counter changes
    rb.extend(batch([2, 2], [5.0, 5.0]))
    assert len(rb) == 4
    assert rb.sampler.kept_rows(rb.storage).tolist() == []
    assert not rb.can_sample()
    with pytest.raises(RuntimeError, match="no group of the 4 stored rows was selected"):
        rb.sample()


def test_without_replacement_epochs():
    rb = make_rb(batch_size=2, without_replacement=True)
    rb.extend(FIRST)
    first = rb.sample(return_info=True)[1]["index"].tolist()
    second = rb.sample(return_info=True)[1]["index"].tolist()
    assert sorted(first + second) == [0, 1, 4, 5]  # one epoch over the 4 kept rows
    third = rb.sampler.sample(rb.storage, 6)[0].tolist()  # crosses into the next epoch
    assert set(third) <= {0, 1, 4, 5} and len(third) == 6


def test_generator_makes_sampling_reproducible():
    def draw():
        rb = ReplayBuffer(
            storage=LazyTensorStorage(32),
            sampler=TopVarianceGroupSampler(),
            batch_size=16,
            generator=torch.Generator().manual_seed(3),
        )
        rb.extend(FIRST)
        return rb.sample(return_info=True)[1]["index"].tolist()

    assert draw() == draw()


def test_lazy_stack_storage_with_ragged_records_and_other_metric():
    rows = [
        TensorDict(
            group_id=torch.tensor(g),
            episode_return=torch.tensor(r),
            num_tokens=torch.tensor(n),
            tokens=torch.arange(n),
            text=f"t{i}",
        )
        for i, (g, r, n) in enumerate(zip([0, 0, 1, 1], [0.0, 1.0, 1.0, 1.0], [2, 4, 10, 30]))
    ]
    rb = ReplayBuffer(storage=LazyStackStorage(10), sampler=TopVarianceGroupSampler(), batch_size=4)
    rb.extend(lazy_stack(rows))
    assert set(rb.sample().get("group_id").tolist()) == {0}
    # length ablation: mean lengths 3 vs 20; top_k .5 of 2 groups -> 1 group: group 1
    rb = ReplayBuffer(
        storage=LazyStackStorage(10),
        batch_size=4,
        sampler=TopVarianceGroupSampler(metric="length", strategy="top_k", value=0.5),
    )
    rb.extend(lazy_stack(rows))
    sample = rb.sample()
    assert set(sample.get("group_id").tolist()) == {1}
    assert set(sample.get("text").tolist()) <= {"t2", "t3"}


def test_state_dict_dumps_loads_and_empty(tmp_path):
    rb = make_rb()
    rb.extend(FIRST)
    rb.sample()
    assert rb.sampler.state_dict() == {"writes": 1}
    rb.dumps(tmp_path)
    restored = make_rb()
    restored.loads(tmp_path)
    assert restored.sampler.state_dict() == {"writes": 1}
    assert set(restored.sample()["group_id"].tolist()) == {0, 2}
    other = TopVarianceGroupSampler()
    other.load_state_dict(rb.sampler.state_dict())
    assert other.kept_rows(rb.storage).tolist() == [0, 1, 4, 5]
    rb.empty()
    assert not rb.can_sample() and rb.sampler.selection(rb.storage)[1] == {}


def test_from_config_and_validation():
    sampler = TopVarianceGroupSampler.from_config({"strategy": "top_k", "value": 0.5, "enabled": False})
    assert (sampler.strategy, sampler.value, sampler.largest) == ("top_k", 0.5, True)
    assert "TopVarianceGroupSampler(metric=reward_variance" in repr(sampler)  # paper-text default
    # out-of-range values are config errors here too (via SNRFilter)
    with pytest.raises(ValueError, match=r"value must be in \(0, 1\] for strategy top_k, got 4"):
        TopVarianceGroupSampler.from_config({"strategy": "top_k", "value": 4})
    with pytest.raises(ValueError, match="top_p, top_k"):
        TopVarianceGroupSampler(strategy="bogus")
    with pytest.raises(ValueError, match="without_replacement"):
        TopVarianceGroupSampler(without_replacement=1)
