"""The README's "Use the components in your own TorchRL pipeline" examples, executed.

Each example is a string here, run with ``exec`` exactly as a user would paste it (the
CollapseMonitor and loss examples get ``model_path``, the tiny offline model, instead of a
hub id). Once the README carries the section, every example must appear in it verbatim,
so the README cannot drift from what the suite runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "Use the components in your own TorchRL pipeline"

SNR_FILTER_IN_A_REPLAY_BUFFER = """\
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer
from ragen_torchrl.transforms import GroupAdvantage, SNRFilter

# trajectory records: one row per trajectory, G = 2 samples per prompt group
records = TensorDict(
    group_id=torch.tensor([0, 0, 1, 1, 2, 2]),
    episode_return=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 2.0]),
    batch_size=[6],
)
# write-time filter: extend() keeps whole groups by reward variance (RAGEN-2: top_p 0.9)
rb = ReplayBuffer(storage=LazyTensorStorage(64), transform=SNRFilter(), batch_size=4)
rb.extend(records)
print(rb[:]["group_id"].tolist(), rb.transform[0].last_stats["kept_ratio"])
# -> [0, 0, 2, 2] 0.666...  (group 1 has no reward variance: never written)
batch = GroupAdvantage()(rb[:])  # group-normalised advantage over the kept, whole groups
"""

TOP_VARIANCE_GROUP_SAMPLER = """\
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer
from ragen_torchrl.data import TopVarianceGroupSampler

# a persistent buffer: the same selection at sampling time, over everything stored
sampler = TopVarianceGroupSampler(strategy="top_k_abs", value=1)  # the single top group
rb = ReplayBuffer(storage=LazyTensorStorage(1024), sampler=sampler, batch_size=8)
rb.extend(TensorDict(group_id=torch.tensor([0, 0, 1, 1, 2, 2]),
                     episode_return=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 2.0]), batch_size=[6]))
batch = rb.sample()
print(sorted(set(batch["group_id"].tolist())))  # -> [2]: the group with the largest variance
"""

COLLAPSE_MONITOR = """\
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from tensordict import TensorDict
from torchrl.data.llm import History
from ragen_torchrl.diagnostics import CollapseMonitor

model = AutoModelForCausalLM.from_pretrained(model_path)  # any HF causal LM, e.g. "Qwen/Qwen2.5-0.5B-Instruct"
tokenizer = AutoTokenizer.from_pretrained(model_path)     # with a chat template

def chat(obs, reasoning):
    return [{"role": "user", "content": obs},
            {"role": "assistant", "content": f"<think>{reasoning}</think><answer>Right</answer>"}]

# records: the conversations at ("history", "full") and a prompt-group id per trajectory
records = TensorDict(group_id=torch.tensor([0, 0, 1, 1]), batch_size=[4]).to_lazystack(0)
records.set(("history", "full"), History.from_chats([
    chat("P_G", "the goal is right"), chat("P_G", "go right"),
    chat("G_P", "the goal is left"), chat("G_P", "go left"),
]))
metrics = CollapseMonitor(model, tokenizer, num_pairs=4)(records)
print(metrics["collapse/first_turn/mi_estimate"], metrics["collapse/trajectory/valid_rate"])
"""

LOSS_ON_A_HAND_BUILT_BATCH = """\
import torch
from tensordict import TensorDict
from torchrl.data.llm import History
from ragen_torchrl.models import load_pretrained
from ragen_torchrl.objectives import (DAPOLoss, attach_training_data, compute_behaviour_log_probs,
                                      make_logprob_policy)
from ragen_torchrl.transforms import GroupAdvantage

model, tokenizer = load_pretrained(model_path, device="cpu", dtype="float32")
actor = make_logprob_policy(model, tokenizer)  # scores conversations (no generation)

chats = [
    [{"role": "user", "content": "P_G"}, {"role": "assistant", "content": "<answer>Right</answer>"}],
    [{"role": "user", "content": "P_G"}, {"role": "assistant", "content": "<answer>Left</answer>"}],
]
batch = TensorDict(group_id=torch.tensor([0, 0]), episode_return=torch.tensor([1.0, 0.0]),
                   batch_size=[2]).to_lazystack(0)
batch.set(("history", "full"), History.from_chats(chats))
batch = GroupAdvantage()(batch)  # "advantage" [2, 1, 1]: +0.707 / -0.707
# the loss's input contract: tokens, behaviour log-probs and the assistant mask per row
batch = attach_training_data(batch, compute_behaviour_log_probs(actor, batch))

loss = DAPOLoss(actor, masking_strategy="rlhf")  # clip (0.2, 0.28), token_mean, entropy_coeff 0.001
out = loss(batch)
(out.loss_objective + out.loss_entropy).backward()
print(out.clip_fraction.item(), out.entropy.item())  # both over assistant tokens only
"""

EXAMPLES = {
    "snr_filter_in_a_replay_buffer": SNR_FILTER_IN_A_REPLAY_BUFFER,
    "top_variance_group_sampler": TOP_VARIANCE_GROUP_SAMPLER,
    "collapse_monitor": COLLAPSE_MONITOR,
    "loss_on_a_hand_built_batch": LOSS_ON_A_HAND_BUILT_BATCH,
}


def run_example(code: str, **names) -> dict:
    namespace = {"__name__": "__readme__", **names}
    exec(compile(code, "<README example>", "exec"), namespace)  # noqa: S102 - our own example text
    return namespace


def test_snr_filter_in_a_replay_buffer():
    ns = run_example(SNR_FILTER_IN_A_REPLAY_BUFFER)
    # RAGEN-2 §3.3: keep groups by reward variance until top_p 0.9 of the total; variances 0.5, 0, 2:
    # threshold 0.9 * 2.5 - 0.01 = 2.24 -> group 2 (2.0), then group 0 (2.5 >= 2.24); group 1 never
    assert ns["rb"][:]["group_id"].tolist() == [0, 0, 2, 2]
    assert ns["rb"].transform[0].last_stats["kept_ratio"] == pytest.approx(2 / 3)
    # the advantage is computed over whole kept groups: (R - mean) / std, std unbiased = 1/sqrt(2) and sqrt(2)
    adv = ns["batch"]["advantage"].reshape(-1).tolist()
    assert adv == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2), 1 / math.sqrt(2)], abs=1e-5)


def test_top_variance_group_sampler():
    ns = run_example(TOP_VARIANCE_GROUP_SAMPLER)
    # variances 0.5, 0, 2: the single top group is group 2; every sampled row comes from it
    assert set(ns["batch"]["group_id"].tolist()) == {2}
    assert ns["batch"].batch_size == (8,)


def test_collapse_monitor_on_a_hf_causal_lm(tiny_model_dir):
    ns = run_example(COLLAPSE_MONITOR, model_path=tiny_model_dir)
    m = ns["metrics"]
    # every turn has non-empty reasoning: valid rate 1 in both sampling schemes
    assert m["collapse/first_turn/valid_rate"] == 1.0 and m["collapse/trajectory/valid_rate"] == 1.0
    assert math.isfinite(m["collapse/first_turn/mi_estimate"])
    assert math.isfinite(m["collapse/trajectory/mi_estimate"])


def test_loss_on_a_hand_built_batch(tiny_model_dir):
    ns = run_example(LOSS_ON_A_HAND_BUILT_BATCH, model_path=tiny_model_dir)
    out, batch = ns["out"], ns["batch"]
    # ratio 1 before any update: DAPO's token mean of -A over the assistant tokens, nothing clipped
    n = [int(m.sum()) for m in batch.get(("masks", "all_assistant_mask"), as_list=True)]
    a = batch.get("advantage").reshape(-1).tolist()
    assert a == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-5)
    assert out.loss_objective.item() == pytest.approx(-(a[0] * n[0] + a[1] * n[1]) / sum(n), abs=1e-5)
    assert out.clip_fraction.item() == 0.0
    assert out.entropy.item() > 0
    grads = [p.grad for p in ns["model"].parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def readme_section() -> str | None:
    text = README.read_text(encoding="utf-8") if README.exists() else ""
    start = text.find(SECTION)
    if start < 0:
        return None
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start:end]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_readme_shows_the_executed_examples(name):
    section = readme_section()
    if section is None:
        pytest.skip(f"README has no {SECTION!r} section yet")
    assert EXAMPLES[name] in section, f"README example {name!r} differs from the one the suite runs"
