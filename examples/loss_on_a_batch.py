"""A loss on a batch you built: group advantage, behaviour log-probs, then ``DAPOLoss``.

Every loss documents its input contract; ``entropy`` and ``clip_fraction`` on the output are over
assistant tokens; ``compute_behaviour_log_probs`` accepts wrappers built with ``pad_output=True`` or
torchrl's default ``False``.

    python examples/loss_on_a_batch.py [MODEL_PATH]
"""

import sys

import tensordict

tensordict.set_list_to_stack(True).set()

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

from ragen_torchrl.models import load_pretrained  # noqa: E402
from ragen_torchrl.objectives import (  # noqa: E402
    DAPOLoss,
    attach_training_data,
    compute_behaviour_log_probs,
    make_logprob_policy,
)
from ragen_torchrl.transforms import GroupAdvantage  # noqa: E402


def main(model_path: str):
    model, tokenizer = load_pretrained(model_path, device="cpu", dtype="float32")
    actor = make_logprob_policy(model, tokenizer)  # scores conversations (no generation)

    chats = [
        [{"role": "user", "content": "P_G"}, {"role": "assistant", "content": "<answer>Right</answer>"}],
        [{"role": "user", "content": "P_G"}, {"role": "assistant", "content": "<answer>Left</answer>"}],
    ]
    batch = TensorDict(
        group_id=torch.tensor([0, 0]), episode_return=torch.tensor([1.0, 0.0]), batch_size=[2]
    ).to_lazystack(0)
    batch.set(("history", "full"), History.from_chats(chats))
    batch = GroupAdvantage()(batch)  # "advantage" [2, 1, 1]: +0.707 / -0.707
    # the loss's input contract: tokens, behaviour log-probs and the assistant mask per row
    batch = attach_training_data(batch, compute_behaviour_log_probs(actor, batch))

    loss = DAPOLoss(actor, masking_strategy="rlhf")  # clip (0.2, 0.28), token_mean, entropy_coeff 0.001
    out = loss(batch)
    (out.loss_objective + out.loss_entropy).backward()
    print(out.clip_fraction.item(), out.entropy.item())  # both over assistant tokens only
    return model, batch, out


if __name__ == "__main__":
    from tiny_model import tiny_model_path

    main(sys.argv[1] if len(sys.argv) > 1 else tiny_model_path())
