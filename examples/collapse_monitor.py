"""``CollapseMonitor`` on any Hugging Face causal LM: MI proxies and reasoning entropy of a batch of
conversations (template collapse, RAGEN-2, arXiv 2604.06268).

    python examples/collapse_monitor.py [MODEL_PATH]   # e.g. Qwen/Qwen2.5-0.5B-Instruct
"""

import sys

import tensordict

tensordict.set_list_to_stack(True).set()

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from ragen_torchrl.diagnostics import CollapseMonitor  # noqa: E402


def chat(obs, reasoning):
    return [
        {"role": "user", "content": obs},
        {"role": "assistant", "content": f"<think>{reasoning}</think><answer>Right</answer>"},
    ]


def main(model_path: str):
    model = AutoModelForCausalLM.from_pretrained(model_path)  # any HF causal LM
    tokenizer = AutoTokenizer.from_pretrained(model_path)  # with a chat template

    # records: the conversations at ("history", "full") and a prompt-group id per trajectory
    records = TensorDict(group_id=torch.tensor([0, 0, 1, 1]), batch_size=[4]).to_lazystack(0)
    records.set(
        ("history", "full"),
        History.from_chats(
            [
                chat("P_G", "the goal is right"),
                chat("P_G", "go right"),
                chat("G_P", "the goal is left"),
                chat("G_P", "go left"),
            ]
        ),
    )
    metrics = CollapseMonitor(model, tokenizer, num_pairs=4)(records)
    print(metrics["collapse/first_turn/mi_estimate"], metrics["collapse/trajectory/valid_rate"])
    return metrics


if __name__ == "__main__":
    from tiny_model import tiny_model_path

    main(sys.argv[1] if len(sys.argv) > 1 else tiny_model_path())
