"""The warning for more torch CPU threads than a busy machine's free cores (``model.threads``)."""

from __future__ import annotations

import os

from ragen_torchrl.trainer.model_setup import oversubscribed_threads


def test_warns_only_when_threads_and_load_exceed_the_cores():
    # free cores = cpus - load: 2 threads fit exactly on 4 cores at load 2.0, not at load 2.5
    assert oversubscribed_threads(2, cpus=4, load=2.0) is None
    message = oversubscribed_threads(2, cpus=4, load=2.5)
    assert message is not None and "model.threads=2" in message and "4 CPU cores" in message and "2.5" in message
    assert "model.threads=1" in message
    # an idle machine's load of a few tenths leaves every core free: all cores' threads fit
    assert oversubscribed_threads(2, cpus=2, load=0.2) is None
    assert oversubscribed_threads(2, cpus=2, load=0.6) is not None
    # one thread never waits for a sibling thread, however busy the machine
    assert oversubscribed_threads(1, cpus=2, load=40.0) is None
    assert oversubscribed_threads(16, cpus=32, load=10.0) is None
    assert oversubscribed_threads(16, cpus=32, load=16.5) is not None


def test_defaults_read_this_machine():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    result = oversubscribed_threads(cpus + 1)  # more threads than cores: always oversubscribed
    assert result is not None and f"on {cpus} CPU cores" in result
