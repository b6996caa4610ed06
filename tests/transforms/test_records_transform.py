"""Record transforms in a replay buffer: computed once at write time, never on sampled mini-batches."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs.transforms import Compose

from ragen_torchrl.transforms.advantage import GroupAdvantage
from ragen_torchrl.transforms.snr import SNRFilter


def records() -> TensorDict:
    # groups 0 and 2 have returns {1, 0} (advantage +-0.7071 with the unbiased std); group 1 is flat
    return TensorDict(
        group_id=torch.tensor([0, 0, 1, 1, 2, 2]),
        episode_return=torch.tensor([1.0, 0.0, 0.5, 0.5, 0.0, 1.0]),
        batch_size=[6],
    )


def test_sampled_minibatches_keep_the_advantage_computed_at_write_time():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(16),
        batch_size=2,
        transform=Compose(GroupAdvantage(), SNRFilter(metric="reward_variance")),
    )
    rb.extend(records())
    stored = rb[:]
    assert stored["group_id"].tolist() == [0, 0, 2, 2]  # the flat group was dropped at write time
    adv = stored["advantage"].reshape(-1)
    torch.testing.assert_close(adv, torch.tensor([0.7071, -0.7071, -0.7071, 0.7071]), atol=1e-4, rtol=0)
    for _ in range(5):
        batch = rb.sample()
        # a mini-batch holding one row of two groups must not be re-normalised (it would give 0, 0)
        idx = [stored["episode_return"].tolist().index(r) for r in batch["episode_return"].tolist()]
        assert bool((batch["advantage"].reshape(-1).abs() > 0.7).all()), idx


def test_a_direct_call_still_applies_the_transform():
    adv = GroupAdvantage()(records())["advantage"].reshape(-1)
    assert adv[2:4].tolist() == [0.0, 0.0] and abs(adv[0].item() - 0.7071) < 1e-4
