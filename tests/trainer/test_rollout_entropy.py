"""Per-trajectory token entropy recorded during generation, and rollouts of any group count.

The SNR filter's entropy ablations (``filter=snr_entropy``, ``metric: entropy_std``) read an
``entropy`` column that ``collect_rollouts`` writes from the logits ``generate`` already
computes. The check is against an independent teacher-forced forward pass over the same tokens.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from ragen_torchrl.collectors.grouped import _generate, collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.splits import train_level_seeds
from ragen_torchrl.envs.text_env import sample_seed
from ragen_torchrl.models.loading import load_pretrained


@pytest.fixture(scope="module")
def model_tok(tiny_model_dir):
    return load_pretrained(tiny_model_dir, device="cpu", dtype="float32")


def _entropy_by_forward(model, prompt: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """Sum of H(pi(.|prefix)) over the positions that predict each response token (one row, no padding)."""
    ids = torch.cat([prompt, response]).unsqueeze(0)
    with torch.no_grad():
        logits = model(ids).logits[0].double()
    pred = logits[prompt.numel() - 1 : ids.shape[1] - 1]  # position t predicts token t + 1
    logp = torch.log_softmax(pred, -1)
    return -(logp.exp() * logp).sum(-1).sum()


@pytest.mark.parametrize("chunk_size", [128, 3])
def test_recorded_entropy_matches_a_teacher_forced_forward(model_tok, chunk_size):
    # RAGEN-2 App. C entropy ablation: a group's score is its trajectories' mean token entropy
    model, tok = model_tok
    n = 6
    env = make_env("frozenlake", num_envs=n)
    policy = make_generation_policy(model, tok, max_new_tokens=10, temperature=1.0)
    levels = torch.tensor([11] * 3 + [12] * 3)
    td = env.reset(
        TensorDict(
            level_seed=levels,
            group_id=torch.tensor([0, 0, 0, 1, 1, 1]),
            sample_seed=torch.tensor([sample_seed(int(s), i % 3) for i, s in enumerate(levels)]),
            batch_size=[n],
        )
    )
    torch.manual_seed(0)
    out, sums, counts = _generate(policy, td, chunk_size)
    prompts = out.get(("tokens", "prompt"), as_list=True)
    responses = out.get(("tokens", "response"), as_list=True)
    assert counts.tolist() == [len(r) for r in responses]
    for i in range(n):
        ref = _entropy_by_forward(model, prompts[i], responses[i])
        assert sums[i].item() == pytest.approx(ref.item(), rel=1e-4, abs=1e-4)


def test_collect_rollouts_writes_a_mean_entropy_column(model_tok):
    model, tok = model_tok
    env = make_env("frozenlake", num_envs=4)
    policy = make_generation_policy(model, tok, max_new_tokens=6, temperature=1.0)
    torch.manual_seed(0)
    rec = collect_rollouts(env, policy, train_level_seeds(0, 0, 2), 2)
    h = rec.get("entropy")
    assert h.shape == (4,) and h.dtype == torch.float32
    # a random tiny model is far from deterministic: entropy is positive and at most log |V|
    assert bool((h > 0).all()) and bool((h <= torch.log(torch.tensor(float(len(tok)))) + 1e-4).all())


def test_collect_rollouts_rejects_an_env_of_the_wrong_size(model_tok):
    model, tok = model_tok
    env = make_env("frozenlake", num_envs=8)
    policy = make_generation_policy(model, tok, max_new_tokens=2)
    with pytest.raises(ValueError, match="num_envs=4"):
        collect_rollouts(env, policy, [1, 2], 2)
