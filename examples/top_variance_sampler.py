"""``TopVarianceGroupSampler``: the SNR selection at sampling time, over everything a buffer holds.

python examples/top_variance_sampler.py
"""

import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer

from ragen_torchrl.transforms import TopVarianceGroupSampler


def main():
    # a persistent buffer: the same selection at sampling time, over everything stored
    sampler = TopVarianceGroupSampler(strategy="top_k_abs", value=1)  # the single top group
    rb = ReplayBuffer(storage=LazyTensorStorage(1024), sampler=sampler, batch_size=8)
    rb.extend(
        TensorDict(
            group_id=torch.tensor([0, 0, 1, 1, 2, 2]),
            episode_return=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 2.0]),
            batch_size=[6],
        )
    )
    batch = rb.sample()
    print(sorted(set(batch["group_id"].tolist())))  # -> [2]: the group with the largest variance
    return batch


if __name__ == "__main__":
    main()
