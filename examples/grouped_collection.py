"""Grouped collection: P levels played G times each, one record per trajectory (the trainer's data path).

Any policy works if it writes ``("history", "full")`` and ``("tokens", "response")``, as torchrl's
``TransformersWrapper`` in history mode with ``generate=True`` does; otherwise a
``PolicyContractError`` names the missing key.

    python examples/grouped_collection.py [MODEL_PATH]
"""

import sys

from ragen_torchrl.collectors import collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.models import load_pretrained


def main(model_path: str):
    model, tokenizer = load_pretrained(model_path, device="cpu", dtype="float32")
    P, G = 2, 4  # 2 levels, 4 samples of each
    env = make_env("frozenlake", num_envs=P * G)  # one env row per trajectory
    policy = make_generation_policy(model, tokenizer, max_new_tokens=16)
    records = collect_rollouts(env, policy, level_seeds=[3, 7], group_size=G)
    print(records["group_id"].tolist())  # [0, 0, 0, 0, 1, 1, 1, 1]
    print(records["episode_return"].shape)  # one return per trajectory
    return records


if __name__ == "__main__":
    from tiny_model import tiny_model_path

    main(sys.argv[1] if len(sys.argv) > 1 else tiny_model_path())
