"""A ragen_torchrl env in plain TorchRL: ``env.rollout`` and ``LLMCollector`` with ``TransformersWrapper``.

Every env is a ``ChatEnv`` in history mode; finished rows restart on new levels, so multi-turn
batches run with ``break_when_any_done=False``.

    python examples/env_rollout.py [MODEL_PATH]   # any HF causal LM with a chat template
"""

import sys

import tensordict

tensordict.set_list_to_stack(True).set()

from torchrl.collectors.llm import LLMCollector  # noqa: E402
from torchrl.modules.llm import TransformersWrapper  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from ragen_torchrl.envs import make_env  # noqa: E402


def main(model_path: str):
    model = AutoModelForCausalLM.from_pretrained(model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    policy = TransformersWrapper(
        model,
        tokenizer=tokenizer,
        input_mode="history",
        generate=True,
        pad_output=False,
        generate_kwargs={"max_new_tokens": 16},
    )
    env = make_env("frozenlake", num_envs=2, max_turn=3)
    env.set_seed(0)  # levels of env.reset() and of the auto-resets of finished rows
    data = env.rollout(6, policy, break_when_any_done=False)  # finished rows restart on new levels
    assert data["next", "reward"].shape == (2, 6, 1, 1)  # (rows, steps, 1, 1)
    assert data["next", "done"].shape == (2, 6, 1)

    collector = LLMCollector(env, policy=policy, dialog_turns_per_batch=4, total_dialog_turns=8)
    batches = [batch for batch in collector]  # 4 dialog turns per batch
    collector.shutdown()
    assert [batch.numel() for batch in batches] == [4, 4]
    return data, batches


if __name__ == "__main__":
    from tiny_model import tiny_model_path

    data, batches = main(sys.argv[1] if len(sys.argv) > 1 else tiny_model_path())
    print("rewards:", data["next", "reward"].reshape(2, 6).tolist())
