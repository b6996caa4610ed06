"""Token entropy of the policy read off the logits that ``generate`` computes anyway.

The SNR filter's entropy ablations (``filter=snr_entropy``: rank groups by their mean token
entropy; ``metric: entropy_std``: by the spread of entropy inside a group, RAGEN-2 App. C) run
*before* any training forward pass, so the entropy must come from the rollout itself.
:class:`EntropyRecorder` is a ``transformers`` ``LogitsProcessor`` that sees the next-token
logits of every decoding step and stores ``H(softmax(logits))`` per row: no extra forward pass,
and ``O(batch)`` memory per step instead of keeping the ``[batch, steps, vocab]`` logits.

Custom logits processors run before the sampling warpers (temperature, top-p), so the recorder
divides the logits by the rollout temperature itself: the recorded entropy is that of
``softmax(logits / T)``, the distribution sampled, the same quantity the loss's entropy bonus
measures (the losses score at the rollout temperature too).

Example:
    >>> import torch
    >>> rec = EntropyRecorder()
    >>> scores = torch.zeros(2, 4)                  # uniform over 4 tokens
    >>> _ = rec(torch.zeros(2, 1, dtype=torch.long), scores)
    >>> _ = rec(torch.zeros(2, 2, dtype=torch.long), torch.tensor([[0.0, -1e9, -1e9, -1e9]] * 2))
    >>> s, n = rec.row_sums([2, 1])                  # row 0 made 2 tokens, row 1 one
    >>> [round(v, 4) for v in s.tolist()], n.tolist()  # log 4 + 0, and log 4
    ([1.3863, 1.3863], [2, 1])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor

__all__ = ["EntropyRecorder", "attach_entropy_recorder"]


class EntropyRecorder(LogitsProcessor):
    """Records the per-row next-token entropy (nats) at every decoding step.

    Call :meth:`clear` before a ``generate`` call and :meth:`row_sums` after it, with the number
    of tokens each row actually generated (rows that finished early keep being decoded on
    padding; those steps are ignored). ``temperature``: the sampling temperature (the entropy is
    of ``softmax(logits / temperature)``; 0, greedy, records at 1).

    Example:
        >>> rec = EntropyRecorder(temperature=0.5)
        >>> _ = rec(torch.zeros(1, 1, dtype=torch.long), torch.tensor([[2.0, 0.0]]))  # p = [0.982, 0.018]
        >>> round(rec.row_sums([1])[0].item(), 4)
        0.0901
    """

    def __init__(self, temperature: float = 1.0) -> None:
        if isinstance(temperature, bool) or not 0 <= float(temperature) < float("inf"):
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
        self.temperature = float(temperature) or 1.0
        self._steps: list[torch.Tensor] = []

    def clear(self) -> None:
        """Forget the previous call's steps."""
        self._steps = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logits = scores.float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logp = torch.log_softmax(logits, dim=-1)
        # -sum p log p, with 0 * -inf := 0 for masked (-inf) logits
        h = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
        # stays on the model's device: a host copy per decoding step would sync the GPU every token
        self._steps.append(h.detach())
        return scores  # unchanged: recording only

    @property
    def num_steps(self) -> int:
        return len(self._steps)

    def row_sums(self, lengths: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum of the entropies of each row's first ``lengths[i]`` steps, and the counts used.

        Returns:
            ``(sums, counts)``: float64 and long tensors of shape ``[len(lengths)]``.
        """
        n = len(lengths)
        if not self._steps:
            return torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.long)
        mat = torch.stack(self._steps, dim=1).to("cpu", torch.float64)  # [rows, steps], one copy
        if mat.shape[0] != n:
            raise ValueError(f"EntropyRecorder saw {mat.shape[0]} rows, got {n} lengths")
        counts = torch.tensor([min(int(x), mat.shape[1]) for x in lengths], dtype=torch.long)
        keep = torch.arange(mat.shape[1]).unsqueeze(0) < counts.unsqueeze(1)
        return (mat * keep).sum(1), counts


def attach_entropy_recorder(policy) -> EntropyRecorder:
    """Add an :class:`EntropyRecorder` to a torchrl ``TransformersWrapper``'s generate call.

    torchrl's wrapper does not forward ``logits_processor`` from its constructor arguments,
    so the recorder is added to the built wrapper's ``generate_kwargs``. It records at the
    ``temperature`` of those kwargs when they sample (``do_sample``), at 1 when they decode greedily.
    """
    from transformers import LogitsProcessorList

    kwargs = getattr(policy, "generate_kwargs", None)
    if kwargs is None:
        raise TypeError(f"{type(policy).__name__} has no generate_kwargs: not a transformers generation wrapper")
    temperature = kwargs.get("temperature") if kwargs.get("do_sample") else None
    rec = EntropyRecorder(1.0 if temperature is None else float(temperature))
    procs = LogitsProcessorList(list(kwargs.get("logits_processor") or []))
    procs.append(rec)
    kwargs["logits_processor"] = procs
    return rec
