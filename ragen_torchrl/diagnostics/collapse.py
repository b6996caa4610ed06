"""Template-collapse monitor: MI proxies and entropy metrics on a batch of conversations.

Works on any batch of trajectory records (a TensorDict whose ``("history", "full")`` holds
the conversations, plus ``group_id``) and any Hugging Face causal LM + tokenizer. For each
sampled (trajectory, turn) pair it builds

* X: the chat-template text up to and including the opening ``<think>`` tag of that turn
  (the generation prompt plus the tag), and
* Z: the reasoning inside ``<think>…</think>`` (tags removed). Turns whose reasoning is
  empty (no tokens) are dropped *before* sampling (RAGEN-2 App. D), so every one of the
  ``num_pairs`` pairs is scored and every column can hold a pair; ``valid_rate`` logs the
  share of non-empty reasoning (:func:`reasoning_valid_rate`),

cross-scores every Z against every sampled X with the model (:func:`cross_score`, which
encodes each context once and reuses its KV cache), and turns the matrix into the proxy
family of :func:`mi_proxies`. Both sampling schemes of the paper are computed:
``first_turn`` (columns = prompt groups) and ``trajectory`` (uniform trajectory, then
uniform turn; each draw its own column, ``N = num_pairs``). Columns with identical prompts
are equivalent (a hit on any counts; chance rises accordingly) and are scored once;
``distinct_columns`` logs how many distinct prompts were scored.

With a vision-language policy (a :class:`~ragen_torchrl.models.vision.VLProcessor` in place of the
tokenizer) the images are part of X: each user message of a conversation shows one image, the
monitor is called with every trajectory's images (``monitor(records, images=...)``), a context
holds the images of its user messages, columns are equivalent only when tokens *and* images agree,
and the matrix comes from :func:`~ragen_torchrl.diagnostics.vl_scoring.cross_score_vl` (each
context's images through the vision tower once). The metrics are the same.

Example (outside any trainer)::

    monitor = CollapseMonitor(model, tokenizer, num_pairs=64)
    metrics = monitor(records)          # {"collapse/first_turn/mi_estimate": ..., ...}

    vl_monitor = CollapseMonitor(vl_model, vl_processor, num_pairs=64)
    metrics = vl_monitor(records, images=images)   # images[b] = trajectory b's images, one per user message
"""

from __future__ import annotations

import time

import torch
from tensordict import TensorDictBase

from ragen_torchrl.checks import check_choice

from ..envs.parsing import THINK_RE
from ..keys import GROUP_ID, HISTORY_FULL
from ..models.vision import VLProcessor
from .cross_scoring import METHODS, cross_score
from .entropy import entropy_metrics
from .mi import MIProxyTracker
from .mi_sampling import (
    equivalence_from_keys,
    reasoning_valid_rate,
    sample_first_turn_pairs,
    sample_trajectory_uniform_pairs,
)
from .vl_scoring import VLContext, cross_score_vl, vl_context, vl_context_key

__all__ = ["CollapseMonitor", "turn_pairs"]


def turn_pairs(history) -> list[tuple[list[dict], str]]:
    """For each assistant turn of one conversation: (messages before it, reasoning text)."""
    roles, contents = list(history.role), list(history.content)
    out = []
    for i, (role, content) in enumerate(zip(roles, contents)):
        if role != "assistant":
            continue
        text = content if "<think>" in content else "<think>" + content
        m = THINK_RE.search(text)
        out.append(
            ([{"role": r, "content": c} for r, c in zip(roles[:i], contents[:i])], m.group(1).strip() if m else "")
        )
    return out


class CollapseMonitor:
    """Computes ``collapse/`` metrics every ``every`` calls (see module docstring).

    Args:
        model: the scoring policy (pre-update), any HF causal LM, or a Qwen2-VL-style
            vision-language model (then ``tokenizer`` is its processor).
        tokenizer: its tokenizer (with a chat template), or a
            :class:`~ragen_torchrl.models.vision.VLProcessor` for a vision-language policy, whose
            contexts hold images (the monitor is then called with ``images=``).
        num_pairs: pairs per scheme (paper: 64).
        every: compute on iterations ``0, every, 2*every, ...`` (paper: 5).
        seed: sampling seed.
        think_tag: the opening reasoning tag appended to the context.
        method: :func:`cross_score` method (default ``"auto"``: the prefix-tree path where
            the model supports it).
        dtype: score in this dtype (e.g. ``"float32"`` for a bfloat16 policy; see
            :func:`cross_score`); ``None`` = the model's own. A vision-language policy has one
            scoring path (:func:`~ragen_torchrl.diagnostics.vl_scoring.cross_score_vl`): ``method``
            does not apply to it.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        num_pairs: int = 64,
        every: int = 5,
        seed: int = 0,
        think_tag: str = "<think>",
        method: str = "auto",
        dtype=None,
    ) -> None:
        if num_pairs < 1 or every < 1:
            raise ValueError(f"num_pairs and every must be >= 1, got {num_pairs}, {every}")
        check_choice("method", method, METHODS)
        self.method, self.dtype = method, dtype
        self.processor = tokenizer if isinstance(tokenizer, VLProcessor) else None
        if self.processor is not None:
            tokenizer = self.processor.tokenizer
        self.model, self.tokenizer = model, tokenizer
        self.num_pairs, self.every, self.think_tag = num_pairs, every, think_tag
        self.generator = torch.Generator().manual_seed(seed)
        self.trackers = {"first_turn": MIProxyTracker(), "trajectory": MIProxyTracker()}

    def should_run(self, iteration: int) -> bool:
        return iteration % self.every == 0

    def _context_ids(self, messages: list[dict]) -> torch.Tensor:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return torch.tensor(self.tokenizer(text + self.think_tag, add_special_tokens=False)["input_ids"])

    def _vl_context(self, messages: list[dict], images) -> VLContext:
        # user message n shows the trajectory's image n, so a context holds the first (#user) images
        n_user = sum(m["role"] == "user" for m in messages)
        if len(images) < n_user:
            raise ValueError(f"a conversation has {n_user} user messages but only {len(images)} images")
        return vl_context(
            self.processor, [(m["role"], m["content"]) for m in messages], images[:n_user], self.think_tag
        )

    def _reasoning_ids(self, text: str) -> torch.Tensor:
        return torch.tensor(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)

    def _scheme(self, name, sample, pairs_of, z_ids, group_ids, images=None) -> dict[str, float]:
        ctx_cache: dict[tuple[int, int], torch.Tensor] = {}

        def ctx(t: int, k: int) -> torch.Tensor:
            if (t, k) not in ctx_cache:
                messages = pairs_of[t][k][0]
                vl = self.processor is not None
                ctx_cache[(t, k)] = self._vl_context(messages, images[t]) if vl else self._context_ids(messages)
            return ctx_cache[(t, k)]

        contexts = [ctx(t, k) for t, k in zip(sample.col_traj_idx.tolist(), sample.col_turn_idx.tolist())]
        # every sampled pair has non-empty reasoning: empty ones were dropped before sampling
        zs = [z_ids[t][k] for t, k in zip(sample.traj_idx.tolist(), sample.turn_idx.tolist())]
        out = {"reasoning_length": float(sum(len(z) for z in zs) / len(zs))}
        # identical prompts (e.g. one trajectory-uniform draw repeated) are equivalent columns:
        # each distinct one is scored once and its scores copied into all of its columns
        if self.processor is None:
            equiv = equivalence_from_keys([tuple(c.tolist()) for c in contexts])
        else:
            equiv = equivalence_from_keys([vl_context_key(c) for c in contexts])
        first = {}
        for j, c in enumerate(equiv.tolist()):
            first.setdefault(c, j)
        distinct = [contexts[j] for j in first.values()]  # class c is distinct[c]
        out["distinct_columns"] = float(len(distinct))
        own = equiv[sample.true_cols] if name == "trajectory" else None
        # the trajectory scheme also yields each reasoning's entropy under its own prompt,
        # read off the same cross-scoring passes (no extra forward)
        if self.processor is None:
            scored = cross_score(self.model, distinct, zs, entropy_cols=own, method=self.method, dtype=self.dtype)
        else:
            scored = cross_score_vl(self.model, distinct, zs, entropy_cols=own, dtype=self.dtype)
        mean_lp, sum_lp = scored[0][:, equiv], scored[1][:, equiv]
        metrics = self.trackers[name](mean_lp, sample.true_cols, seq_log_probs=sum_lp, col_equivalence=equiv)
        out.update(metrics)
        if own is not None:
            out.update(entropy_metrics(scored[2], group_ids[sample.traj_idx]))
        return out

    @torch.no_grad()
    def __call__(self, records: TensorDictBase, images=None) -> dict[str, float]:
        """All ``collapse/`` metrics for one batch (pre-filter, pre-update).

        ``images`` (vision-language policies only, and required there): per trajectory of
        ``records``, its images in the order of its user messages (uint8 ``[3, H, W]`` each, in a
        list or stacked ``[T, 3, H, W]``; user message ``n`` shows image ``n``; extra images, e.g.
        the final board, are ignored).

        Per scheme: ``valid_rate`` (share of non-empty reasoning, :func:`reasoning_valid_rate`),
        ``reasoning_length`` (mean tokens of the scored reasoning; 0 when none is valid) and,
        when at least one reasoning is non-empty, the :func:`mi_proxies` family (with
        ``num_pairs`` = ``min(num_pairs, #valid)`` for first-turn and ``num_pairs`` for the
        trajectory scheme, ``num_columns`` (``num_pairs`` for the trajectory scheme) and
        ``distinct_columns``, the distinct prompts among them).
        """
        t0 = time.time()
        if self.processor is not None and images is None:
            raise ValueError("images= is required: the monitor scores a vision-language policy")
        if self.processor is None and images is not None:
            raise ValueError("images= was given but the monitor scores a text policy (pass a VLProcessor as tokenizer)")
        if images is not None and len(images) != records.batch_size[0]:
            raise ValueError(f"images has {len(images)} trajectories, records has {records.batch_size[0]}")
        histories = records.get(HISTORY_FULL)
        pairs_of = [turn_pairs(histories[i]) for i in range(records.batch_size[0])]
        group_ids = records.get(GROUP_ID).reshape(-1)
        turns = torch.tensor([len(p) for p in pairs_of], dtype=torch.long)
        # Tokenise every reasoning once: validity (non-empty after tokenisation) must be known
        # before sampling, so that empty ones are dropped from the pool, not from the sample.
        z_ids = [[self._reasoning_ids(z) for _, z in p] for p in pairs_of]
        valid_turns = [[z.numel() > 0 for z in row] for row in z_ids]
        first_valid = torch.tensor([bool(row) and row[0] for row in valid_turns], dtype=torch.bool)
        any_valid = any(any(row) for row in valid_turns)
        metrics: dict[str, float] = {}
        for name in ("first_turn", "trajectory"):
            out = {"valid_rate": reasoning_valid_rate(turns, valid_turns, name), "reasoning_length": 0.0}
            # draw from the generator only when there is something to draw, in a fixed order
            if name == "first_turn" and bool(first_valid.any()):
                sample = sample_first_turn_pairs(group_ids, self.num_pairs, self.generator, valid=first_valid)
                out.update(self._scheme(name, sample, pairs_of, z_ids, group_ids, images))
            elif name == "trajectory" and any_valid:
                sample = sample_trajectory_uniform_pairs(turns, self.num_pairs, self.generator, valid_turns=valid_turns)
                out.update(self._scheme(name, sample, pairs_of, z_ids, group_ids, images))
            for k, v in out.items():
                metrics[f"collapse/{name}/{k}"] = float(v)
        metrics["timing/mi_seconds"] = time.time() - t0
        return metrics

    def state_dict(self) -> dict:
        return {k: t.state_dict() for k, t in self.trackers.items()} | {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        for k, t in self.trackers.items():
            if k in state:
                t.load_state_dict(state[k])
        if "generator" in state:
            self.generator.set_state(state["generator"])
