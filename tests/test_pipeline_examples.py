"""The files in ``examples/`` run, and give what their comments say.

Each example is a script (``python examples/<name>.py [MODEL_PATH]``) whose ``main`` returns what
it built; here ``main`` runs on the session's tiny offline model, and the results are checked
against hand-computed values. The docs show the files themselves (``docs/pipeline.md`` includes
them), so the text a user reads is the code the suite runs.
"""

from __future__ import annotations

import math
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TESTED = {
    "collapse_monitor",
    "env_rollout",
    "grouped_collection",
    "loss_on_a_batch",
    "snr_filter_replay_buffer",
    "tiny_model",
    "top_variance_sampler",
}


@pytest.fixture
def example(monkeypatch):
    """Load ``examples/<name>.py`` as a module namespace (its dir on ``sys.path``, as ``python examples/x.py``)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return lambda name: runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=f"example_{name}")


def test_every_example_is_tested_and_shown_in_the_docs():
    assert {p.stem for p in EXAMPLES.glob("*.py")} == TESTED
    page = (REPO / "docs" / "pipeline.md").read_text(encoding="utf-8")
    for name in sorted(TESTED):
        assert f'--8<-- "examples/{name}.py"' in page, name


def test_snr_filter_replay_buffer(example):
    rb, batch, stats = example("snr_filter_replay_buffer")["main"]()
    # RAGEN-2: keep groups by reward variance until top_p 0.9 of the total; variances 0.5, 0, 2:
    # 0.9 * 2.5 = 2.25 -> group 2 (2.0), then group 0 (2.5 >= 2.25); group 1 (no variance) never
    assert rb[:]["group_id"].tolist() == [0, 0, 2, 2]
    assert stats["kept_ratio"] == pytest.approx(2 / 3)
    # the advantage over whole kept groups: (R - mean) / std, std unbiased = 1/sqrt(2) and sqrt(2)
    adv = batch["advantage"].reshape(-1).tolist()
    assert adv == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2), 1 / math.sqrt(2)], abs=1e-5)


def test_top_variance_sampler(example):
    batch = example("top_variance_sampler")["main"]()
    # variances 0.5, 0, 2: the single top group is group 2; every sampled row comes from it
    assert set(batch["group_id"].tolist()) == {2}
    assert batch.batch_size == (8,)


def test_env_rollout(example, tiny_model_dir):
    torch.manual_seed(0)
    data, batches = example("env_rollout")["main"](tiny_model_dir)
    # 2 rows x 6 steps of at most 3 turns: every row finished at least once and restarted
    assert data["next", "reward"].shape == (2, 6, 1, 1)
    assert bool(data["next", "done"].any(dim=1).all())
    assert [b.numel() for b in batches] == [4, 4]


def test_grouped_collection(example, tiny_model_dir, capsys):
    torch.manual_seed(0)
    records = example("grouped_collection")["main"](tiny_model_dir)
    assert capsys.readouterr().out.splitlines() == ["[0, 0, 0, 0, 1, 1, 1, 1]", "torch.Size([8])"]
    assert bool((records["num_tokens"] > 0).all()) and bool((records["entropy"] > 0).all())
    assert bool((records["num_turns"] >= 1).all()) and bool((records["num_turns"] <= 5).all())


def test_collapse_monitor(example, tiny_model_dir):
    m = example("collapse_monitor")["main"](tiny_model_dir)
    # every turn has non-empty reasoning: valid rate 1 in both sampling schemes
    assert m["collapse/first_turn/valid_rate"] == 1.0 and m["collapse/trajectory/valid_rate"] == 1.0
    assert math.isfinite(m["collapse/first_turn/mi_estimate"])
    assert math.isfinite(m["collapse/trajectory/mi_estimate"])


def test_loss_on_a_batch(example, tiny_model_dir):
    model, batch, out = example("loss_on_a_batch")["main"](tiny_model_dir)
    # ratio 1 before any update: DAPO's token mean of -A over the assistant tokens, nothing clipped
    n = [int(m.sum()) for m in batch.get(("masks", "all_assistant_mask"), as_list=True)]
    a = batch.get("advantage").reshape(-1).tolist()
    assert a == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-5)
    assert out.loss_objective.item() == pytest.approx(-(a[0] * n[0] + a[1] * n[1]) / sum(n), abs=1e-5)
    assert out.clip_fraction.item() == 0.0
    assert out.entropy.item() > 0
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_tiny_model_is_the_suites_tiny_model(example, tiny_model_dir, tmp_path):
    # the examples' default model is built from the same corpus and sizes as the suite's: same hash
    path = example("tiny_model")["tiny_model_path"](str(tmp_path))
    assert Path(path).name == Path(tiny_model_dir).name
    assert (Path(path) / "config.json").is_file()


def test_an_example_runs_as_a_script(tmp_path):
    # `python examples/<name>.py` from any directory, with no PYTHONPATH tricks beyond the suite's own
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "top_variance_sampler.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[2]"  # after any log lines torchrl prints at import
