"""A hostile program through DeepCoderEnv is a wrong answer (reward 0), never an env error
(the format penalty) and never a file left in the temporary directory."""

from __future__ import annotations

import tempfile

import tensordict

tensordict.set_list_to_stack(True).set()

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

from ragen_torchrl.envs.deepcoder import DeepCoderEnv  # noqa: E402
from ragen_torchrl.envs.games.sandbox import bwrap_available  # noqa: E402

ISOLATIONS = ["weak"] + (["bwrap"] if bwrap_available() else [])
pytestmark = pytest.mark.filterwarnings("ignore:DeepCoder sandbox. isolation=weak")

# 1,100 nested directories, then files written until the time limit kills it
HOSTILE = """
import os
os.mkdir('x')
for _ in range(1100):
    os.mkdir('n')
    os.rename('x', 'n/x')
    os.rename('n', 'x')
i = 0
while True:
    try:
        with open(f'f{i}', 'wb') as f:
            f.write(b'z' * 4096)
    except OSError:
        pass
    i += 1
"""


@pytest.mark.parametrize("mode", ISOLATIONS)
def test_a_program_that_defeats_rmtree_is_a_wrong_answer(mode, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the sandbox makes its run dirs
    env = DeepCoderEnv(num_envs=1, isolation=mode, timeout_s=0.5, memory_mb=256)
    td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    reply = env.format_reply("nest", [f"```python\n{HOSTILE}\n```"])
    msg = History(role=["assistant"], content=[reply], batch_size=(1,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    nxt = env.step(td)["next"]
    assert nxt["reward"].item() == 0.0 and nxt["done"].item() and not nxt["success"].item()
    assert nxt["action_is_valid"].all()
    assert list(tmp_path.iterdir()) == []
