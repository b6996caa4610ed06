"""``build_once``: two processes asking for the same cached build build it once."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ragen_torchrl.models.build_cache import build_once

# a child process: build TARGET with a slow build that records each call in TARGET.calls
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from ragen_torchrl.models.build_cache import build_once

    target = Path(sys.argv[1])
    # both children call build_once at the same moment, after their (slow) imports
    (target.parent / f"arrived{sys.argv[2]}").touch()
    while len(list(target.parent.glob("arrived*"))) < 2:
        time.sleep(0.01)

    def build():
        with open(str(target) + ".calls", "a") as f:
            f.write("built\\n")
        time.sleep(1.0)  # long enough for the other process to arrive while this one builds
        tmp = target.with_name(target.name + ".tmp")
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
        tmp.rename(target)

    print(build_once(target, build))
    """
)


def test_two_processes_build_the_same_target_once(tmp_path):
    target = tmp_path / "sft-abc"
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(target), str(i)], stdout=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [str(target), str(target)]
    assert (tmp_path / "sft-abc.calls").read_text() == "built\n"
    assert (target / "config.json").is_file()


def test_a_build_that_leaves_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="finished without leaving a model there"):
        build_once(tmp_path / "sft-x", lambda: None)
    # the lock is released: a later build goes ahead
    assert build_once(
        tmp_path / "sft-x",
        lambda: (tmp_path / "sft-x").mkdir() or (tmp_path / "sft-x" / "config.json").write_text("{}"),
    )
