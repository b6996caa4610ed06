"""``SNRFilter`` in a torchrl ``ReplayBuffer`` (RAGEN-2, arXiv 2604.06268, SNR-aware filtering).

A write-time transform: ``extend()`` keeps whole prompt groups by reward variance; the group
advantage is then computed on the kept groups.

    python examples/snr_filter_replay_buffer.py
"""

import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer

from ragen_torchrl.transforms import GroupAdvantage, SNRFilter


def main():
    # trajectory records: one row per trajectory, G = 2 samples per prompt group
    records = TensorDict(
        group_id=torch.tensor([0, 0, 1, 1, 2, 2]),
        episode_return=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 2.0]),
        batch_size=[6],
    )
    # write-time filter: extend() keeps whole groups by reward variance (RAGEN-2: top_p 0.9)
    filt = SNRFilter()
    rb = ReplayBuffer(storage=LazyTensorStorage(64), transform=filt, batch_size=4)
    rb.extend(records)
    _, stats = filt.filter(records)  # the same rule called directly returns its statistics too
    print(rb[:]["group_id"].tolist(), stats["kept_ratio"])
    # -> [0, 0, 2, 2] 0.666...  (group 1 has no reward variance: never written)
    batch = GroupAdvantage()(rb[:])  # group-normalised advantage over the kept, whole groups
    return rb, batch, stats


if __name__ == "__main__":
    main()
