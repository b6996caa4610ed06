"""The iteration's scalar collector: prefixed tags, floats, timed blocks that add up, timing/total."""

from __future__ import annotations

import pytest
import torch

from ragen_torchrl.trainer import metrics as metrics_mod
from ragen_torchrl.trainer.metrics import Metrics


class Clock:
    """time.time stand-in returning the given instants in order."""

    def __init__(self, *instants: float) -> None:
        self.instants = list(instants)

    def __call__(self) -> float:
        return self.instants.pop(0)


def test_add_prefixes_and_update_keeps_tags_all_as_floats():
    m = Metrics()
    m.add("train", {"loss": torch.tensor(0.25), "optimizer_steps": 2}).update({"rollout/kv_rows_reused": 3})
    assert m.scalars == {"train/loss": 0.25, "train/optimizer_steps": 2.0, "rollout/kv_rows_reused": 3.0}
    assert all(type(v) is float for v in m.scalars.values())
    m.add("train", {"loss": 0.5})  # a tag recorded again takes the new value
    assert m.scalars["train/loss"] == 0.5


def test_timer_adds_each_block_and_finish_adds_the_total(monkeypatch):
    # made at 10; blocks 11 -> 13 and 14 -> 14.5 add up to 2.5 s; finished at 20
    monkeypatch.setattr(metrics_mod.time, "time", Clock(10.0, 11.0, 13.0, 14.0, 14.5, 20.0))
    m = Metrics()
    with m.timer("update"):
        pass
    with m.timer("update"):
        pass
    assert m.scalars == {"timing/update": 2.5}
    assert m.finish() == {"timing/update": 2.5, "timing/total": 10.0}


def test_a_failing_block_records_no_time(monkeypatch):
    monkeypatch.setattr(metrics_mod.time, "time", Clock(0.0, 1.0))
    m = Metrics()
    with pytest.raises(RuntimeError), m.timer("rollout"):
        raise RuntimeError("env crashed")
    assert m.scalars == {}
