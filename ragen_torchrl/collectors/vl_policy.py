"""The rollout policy of a vision-language model: all rows per forward pass, each image encoded once.

:class:`VLRolloutPolicy` plays the rows of a visual env (:mod:`ragen_torchrl.envs.visual`) with a
:class:`~ragen_torchrl.models.vision.VLBatchRollout` that keeps each row's episode under its
``env_index``: at every call it reads each row's conversation (``("history", "prompt")``) and
board image (``"image"``), appends the messages the row's episode does not hold yet (the first
prompt, then each env turn's user message with that turn's image), runs the rows' new images
through the vision tower once (the features are kept for the later turns) and samples all rows'
replies together, one batched forward per token.

It honours :func:`~ragen_torchrl.collectors.collect_rollouts`' policy contract (writes
``("history", "full")`` and ``("tokens", "response")``) and owns its trajectories
(``owns_trajectories``): when a row's episode ends the collector stores
:meth:`VLRolloutPolicy.trajectory` in the row's record: the token sequence exactly as read and
sampled (``("tokens", "trajectory")``), the sampled positions (``("masks", "trajectory_assistant")``),
the rollout's log-probs of the sampled tokens (``("log_probs", "trajectory")``) and the episode's
images (``("images", "trajectory")``), which the losses score the sequence with.

Example:
    >>> import tempfile, tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from ragen_torchrl.collectors import collect_rollouts
    >>> from ragen_torchrl.envs import make_env
    >>> from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
    >>> path = build_tiny_vl_model(["The board is in the image."] * 20,
    ...     TinyVLConfig(vocab_size=300, hidden_size=32, num_layers=1, vision_depth=1), tempfile.mkdtemp())
    >>> model, processor = load_tiny_vl(path)
    >>> policy = VLRolloutPolicy(model, processor, max_new_tokens=4)
    >>> env = make_env("frozenlake_visual", num_envs=2, max_turn=2)
    >>> records = collect_rollouts(env, policy, level_seeds=[5], group_size=2)
    >>> records["images", "trajectory"][0].shape[1:], bool((records["num_turns"] >= 1).all())
    (torch.Size([3, 112, 112]), True)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from tensordict import TensorDictBase, lazy_stack
from tensordict.nn import TensorDictModuleBase
from torchrl.data.llm import History

from ..envs.messages import chat_dicts
from ..keys import (
    ENV_INDEX,
    HISTORY_FULL,
    HISTORY_PROMPT,
    IMAGE,
    IMAGES_TRAJECTORY,
    LOG_PROBS_TRAJECTORY,
    MASKS_TRAJECTORY,
    TOKENS_RESPONSE,
    TOKENS_TRAJECTORY,
)
from ..models.vision import VLBatchRollout, VLProcessor
from .policy_protocol import TrajectoryOwner

__all__ = ["VLRolloutPolicy"]


class _RowEntropy:
    """The entropy of the last call's rows, in :class:`~ragen_torchrl.models.entropy_recorder.EntropyRecorder`'s
    interface (what the collector reads)."""

    def __init__(self) -> None:
        self.sums: list[float] = []
        self.counts: list[int] = []

    def clear(self) -> None:
        self.sums, self.counts = [], []

    @property
    def num_steps(self) -> int:
        return sum(self.counts)

    def row_sums(self, lengths) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor(self.sums, dtype=torch.float64), torch.tensor(self.counts, dtype=torch.long)


class VLRolloutPolicy(TensorDictModuleBase, TrajectoryOwner):
    """Samples each visual-env row's reply with its own cached :class:`~ragen_torchrl.models.vision.VLConversation`.

    Args:
        model: a Qwen2-VL-style ``...ForConditionalGeneration``.
        processor: its :class:`~ragen_torchrl.models.vision.VLProcessor`.
        max_new_tokens: most tokens sampled per reply.
        temperature: sampling temperature (the behaviour log-probs are of the tempered softmax); 0: greedy.
        reply_prime: text after the generation prompt (``"<think>"`` under ``rollout.prime_think``): read, not sampled.
        seed: seed of the sampling generator (``None``: torch's global generator).

    Reads ``("history", "prompt")``, ``"image"`` and ``env_index``; writes ``("history", "full")``
    and ``("tokens", "response")``; rows are generated together (callers chunk large batches). A
    :class:`~ragen_torchrl.collectors.policy_protocol.TrajectoryOwner` (``input_mode="vl"``: it reads the
    conversation, the collector keeps no token trajectories).
    """

    #: the collector takes each finished row's trajectory from :meth:`trajectory`
    owns_trajectories = True
    input_mode = "vl"

    def __init__(
        self,
        model: torch.nn.Module,
        processor: VLProcessor,
        *,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        reply_prime: str = "",
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        if not temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature!r}")
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.max_new_tokens, self.temperature, self.reply_prime = max_new_tokens, float(temperature), reply_prime
        self.generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        self.in_keys = [HISTORY_PROMPT, IMAGE, ENV_INDEX]
        self.out_keys = [HISTORY_FULL, TOKENS_RESPONSE]
        self._rollout = VLBatchRollout(
            model, processor, temperature=self.temperature, generator=self.generator, prime=reply_prime
        )
        #: env_index -> how many messages of the row's history its episode holds
        self._seen: dict[int, int] = {}
        self.entropy_recorder = _RowEntropy()

    def clear(self) -> None:
        """Forget every row (a new collection)."""
        self._rollout.release(list(self._rollout.rows))
        self._seen.clear()

    def release(self, env_indices: Iterable[int]) -> None:
        """Forget these rows (their trajectories must have been read with :meth:`trajectory`)."""
        env_indices = [int(e) for e in env_indices]
        self._rollout.release(env_indices)
        for e in env_indices:
            self._seen.pop(e, None)

    def trajectory(self, env_index: int) -> dict:
        """The record entries of the row's episode so far (see the module docstring)."""
        ids, sampled, log_probs, images = self._rollout.trajectory(env_index)
        return {
            TOKENS_TRAJECTORY: ids,
            MASKS_TRAJECTORY: sampled,
            LOG_PROBS_TRAJECTORY: log_probs,
            IMAGES_TRAJECTORY: images,
        }

    @torch.no_grad()
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        conversations = chat_dicts(tensordict.get(HISTORY_PROMPT))
        images = tensordict.get(IMAGE)
        env_index = [int(e) for e in tensordict.get(ENV_INDEX).reshape(-1).tolist()]
        messages, shown, starts, entropy = {}, {}, {}, {}
        for row, (e, chat) in enumerate(zip(env_index, conversations, strict=True)):
            if self._seen.get(e, 0) > len(chat):  # a new episode in this slot
                self.release([e])
            seen = self._seen.get(e, 0)
            new = [(m["role"], m["content"]) for m in chat[seen:]]
            users = sum(role == "user" for role, _ in new)
            if users != 1:
                raise ValueError(
                    f"row env_index={e}: {users} new user messages since its last reply; a visual env adds one "
                    "user message (with its image) per turn"
                )
            messages[e], shown[e] = new, images[row]
            starts[e] = len(self._rollout.rows[e].ids) if e in self._rollout.rows else 0
            entropy[e] = self._rollout.entropy(e) if e in self._rollout.rows else (0.0, 0)
            self._seen[e] = len(chat) + 1  # the reply is the next message of the row's history
        texts = self._rollout.play(messages, shown, self.max_new_tokens)
        self.entropy_recorder.clear()
        replies = []
        for e in env_index:
            # this turn's sampled ids (the row's episode, not its whole trajectory with its images)
            ep = self._rollout.rows[e]
            replies.append(
                torch.tensor([t for t, s in zip(ep.ids[starts[e] :], ep.sampled[starts[e] :]) if s], dtype=torch.long)
            )
            total, count = self._rollout.entropy(e)
            self.entropy_recorder.sums.append(total - entropy[e][0])
            self.entropy_recorder.counts.append(count - entropy[e][1])
        prompt = tensordict.get(HISTORY_PROMPT)
        reply_msgs = lazy_stack([History(role="assistant", content=texts[e]).unsqueeze(0) for e in env_index])
        out = lazy_stack(list(tensordict.unbind(0)))  # ragged replies: set row by row
        out.set(HISTORY_FULL, prompt.extend(reply_msgs, inplace=False, dim=-1))
        for td_row, reply in zip(out.tensordicts, replies):
            td_row.set(TOKENS_RESPONSE, reply)
        return out
