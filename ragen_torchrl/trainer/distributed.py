"""Training on several processes with ``torch.distributed``: who collects, who trains on what, who writes.

``torchrun --nproc_per_node=N -m ragen_torchrl.train ...`` starts N ranks; each builds a
:class:`~ragen_torchrl.trainer.loop.Trainer`, which joins the process group (``gloo`` on CPU,
``nccl`` on CUDA, chosen from ``model.device``) through :meth:`Distributed.from_env`. What
each rank does in one iteration:

* **Rollout, sharded by whole prompt groups.** The P groups of an iteration are cut into N
  contiguous parts (:func:`shard_bounds`); rank r plays part r. Each part's sampling noise comes
  from its own seed (:func:`part_seed`: seed, iteration, part), not from the global RNG, so a
  single process with ``rollout.shards=N`` plays exactly the rollouts of an N-rank run.
* **All-gathered: the trajectory records** (text, returns, group ids; a few kB per row). Every
  rank then holds the global batch, in single-process order, so group statistics, the SNR filter's
  kept ratio, DAPO's refill decision, advantages and the mini-batch plan are computed identically
  on every rank over the global batch, and the global RNG streams stay equal across ranks.
* **Update, sharded by rows.** Every global mini-batch is split across ranks (rank r takes rows
  ``r, r+N, ...``: :func:`local_rows`); each rank scores behaviour and reference log-probs only for
  its rows, runs the loss on them and scales it by its share of the mini-batch's aggregation unit
  (rows for ``prompt_mean``/``dr_grpo``, assistant tokens for ``token_mean``: :func:`loss_unit`)
  times N. Averaging the gradients over ranks then gives exactly the single-process gradient of
  the global mini-batch (:func:`share_weight`). The Hugging Face model stays unwrapped (torchrl's
  wrappers call its ``generate`` and ``forward`` directly), so gradients are averaged by one
  bucketed ``all_reduce`` after ``backward`` (:meth:`Distributed.average_gradients`), what DDP's
  reducer does, without its compute/communication overlap. With ``trainer.fsdp=true`` the model
  is sharded with FSDP2 (``fully_shard``), which reduce-scatters gradients itself.
* **Rank 0 alone** writes TensorBoard, checkpoints, ``summary.json`` and the exported policy,
  runs validation (its result is broadcast so every rank applies the same stop rules) and the
  MI diagnostics (logged only). Loss metrics are reduced (share-weighted sums) before logging.

Example:
    >>> shard_bounds(8, world_size=2)
    [(0, 4), (4, 8)]
    >>> local_rows(torch.tensor([5, 2, 7, 1, 0]), world_size=2, rank=1).tolist()
    [2, 1]
    >>> share_weight(3, 12)
    0.25
    >>> Distributed().world_size, Distributed().is_main
    (1, True)
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

__all__ = [
    "Distributed",
    "local_rows",
    "loss_unit",
    "part_seed",
    "shard_bounds",
    "share_weight",
    "unscored_rows",
    "unit_count",
]

#: minutes a rank may wait in a collective (rank 0's validation or warm start) before the run fails
PROCESS_GROUP_TIMEOUT_MIN = 180

#: aggregation -> what the loss averages over (so a rank's share of a mini-batch is counted in it)
_UNITS = {"prompt_mean": "rows", "dr_grpo": "rows", "token_mean": "tokens"}


def shard_bounds(n: int, world_size: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` parts of ``n`` items for ``world_size`` ranks, sizes differing by at most 1.

    Example:
        >>> shard_bounds(5, 2)
        [(0, 3), (3, 5)]
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    base, extra = divmod(n, world_size)
    bounds, start = [], 0
    for r in range(world_size):
        end = start + base + (1 if r < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def part_seed(seed: int, iteration: int, part: int, stream: int = 0) -> int:
    """The sampling seed of one collection part: a pure function of its arguments (any process, any run).

    ``stream`` separates the main batch (0) from DAPO's refills (the refill count).

    Example:
        >>> part_seed(0, 3, 1) == part_seed(0, 3, 1) != part_seed(0, 3, 0)
        True
    """
    # str seeding hashes with SHA-512: stable across processes (unlike hash(), salted per process)
    return random.Random(f"ragen-part:{seed}:{iteration}:{part}:{stream}").getrandbits(63)


def local_rows(idx: torch.Tensor, world_size: int, rank: int) -> torch.Tensor:
    """This rank's rows of a mini-batch: every ``world_size``-th, from position ``rank``."""
    return torch.as_tensor(idx).reshape(-1)[rank::world_size]


def unscored_rows(
    plan: list[list[torch.Tensor]], num_rows: int, world_size: int, rank: int, on_policy: torch.Tensor | None = None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(rows without behaviour log-probs, rows without reference log-probs)`` on this rank; None: none.

    A rank scores only the rows it trains on (its :func:`local_rows` of every mini-batch of
    ``plan``); ``on_policy``, the rows of a mini-batch trained on the rollout policy itself, need no
    behaviour log-probs on any rank. A single process (``world_size=1``) scores every other row.

    Example:
        >>> plan = [[torch.tensor([0, 1]), torch.tensor([2, 3])]]
        >>> [t.tolist() for t in unscored_rows(plan, 5, world_size=2, rank=1, on_policy=torch.tensor([0, 1]))]
        [[0, 1, 2, 4], [0, 2, 4]]
        >>> unscored_rows(plan, 5, world_size=1, rank=0, on_policy=torch.tensor([0, 1]))
        (tensor([0, 1]), None)
    """
    if world_size == 1:
        return on_policy, None
    mine = torch.zeros(num_rows, dtype=torch.bool)
    for epoch in plan:
        for idx in epoch:
            mine[local_rows(idx, world_size, rank)] = True
    unscored = ~mine
    if on_policy is not None:
        unscored[torch.as_tensor(on_policy).reshape(-1)] = True
    return torch.nonzero(unscored).reshape(-1), torch.nonzero(~mine).reshape(-1)


def loss_unit(loss_module: Any) -> str:
    """``"rows"`` or ``"tokens"``: what ``loss_module``'s aggregation averages over.

    Raises:
        ValueError: an aggregation whose mean cannot be split across ranks (e.g. ``"none"``).
    """
    agg = str(getattr(loss_module, "aggregation", "prompt_mean"))
    if agg not in _UNITS:
        raise ValueError(
            f"a multi-rank update needs a loss aggregated as one of {sorted(_UNITS)}, got aggregation={agg!r}"
        )
    return _UNITS[agg]


def unit_count(batch, rows: torch.Tensor, unit: str, mask_key) -> float:
    """How many ``unit`` (rows, or assistant tokens at ``mask_key``) ``rows`` of ``batch`` hold."""
    if unit == "rows":
        return float(len(rows))
    return float(sum(int(batch[int(i)].get(mask_key).sum()) for i in rows))


def share_weight(local: float, total: float) -> float:
    """A rank's share of a mini-batch's loss mean: ``local / total`` (0 when the mini-batch is empty)."""
    return float(local) / float(total) if total > 0 else 0.0


@dataclass
class Distributed:
    """This process's place in the run: rank, world size, and the collectives the trainer uses.

    The default (``world_size=1``) is a single process: every collective is the identity, so the
    trainer runs one code path. :meth:`from_env` joins the process group ``torchrun`` describes.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    owns_group: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def own_parts(self, num_parts: int) -> list[int]:
        """The collection parts this process plays: part r on rank r, every part in a single process.

        Example:
            >>> Distributed().own_parts(3), Distributed(rank=1, world_size=2).own_parts(2)
            ([0, 1, 2], [1])
        """
        return [self.rank] if self.enabled else list(range(num_parts))

    @classmethod
    def from_env(cls, device: str = "cpu", environ: dict | None = None) -> Distributed:
        """Join the process group torchrun's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` describe.

        Without ``WORLD_SIZE`` (or with 1) this is a single process. The backend is ``nccl`` for a
        CUDA ``device`` and ``gloo`` otherwise; an already-initialised group is reused.
        """
        env = os.environ if environ is None else environ
        world = int(env.get("WORLD_SIZE", "1") or 1)
        if world <= 1:
            return cls()
        import torch.distributed as dist

        rank, local = int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0"))
        cuda = str(device).startswith("cuda") or (str(device) == "auto" and torch.cuda.is_available())
        backend = "nccl" if cuda else "gloo"
        owns = False
        if not dist.is_initialized():
            if cuda:
                torch.cuda.set_device(local)
            # rank 0 alone validates and builds the warm start while the others wait in a collective:
            # a long validation of a large model must not trip the default (10 min NCCL) timeout
            dist.init_process_group(backend=backend, timeout=timedelta(minutes=PROCESS_GROUP_TIMEOUT_MIN))
            owns = True
        return cls(rank=rank, world_size=world, local_rank=local, backend=dist.get_backend(), owns_group=owns)

    def device(self, device: str) -> str:
        """``cuda`` (or ``auto`` with a GPU) becomes this rank's GPU (``cuda:<local_rank>``) in a multi-rank run."""
        if self.enabled and (str(device) == "cuda" or (str(device) == "auto" and torch.cuda.is_available())):
            return f"cuda:{self.local_rank}"
        return str(device)

    # -- collectives (identity in a single process) --------------------------------------
    def all_gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (pickled; used for the trajectory records)."""
        if not self.enabled:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank."""
        if not self.enabled:
            return obj
        import torch.distributed as dist

        box = [obj if self.rank == src else None]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def _reduce_device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def sum_floats(self, values: Iterable[float]) -> list[float]:
        """Element-wise sums over ranks of a list of floats (one collective)."""
        values = [float(v) for v in values]
        if not self.enabled or not values:
            return values
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self._reduce_device())
        dist.all_reduce(t)
        return t.cpu().tolist()

    def max_int(self, value: int) -> int:
        """The largest ``value`` over ranks."""
        if not self.enabled:
            return int(value)
        import torch.distributed as dist

        t = torch.tensor([int(value)], dtype=torch.long, device=self._reduce_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def all_true(self, flag: bool) -> bool:
        """True when ``flag`` holds on every rank (e.g. a finite loss), so all ranks take the same branch."""
        if not self.enabled:
            return bool(flag)
        return self.sum_floats([0.0 if flag else 1.0])[0] == 0.0

    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Average the gradients of ``params`` over ranks: one flat ``all_reduce`` per dtype and device.

        A parameter without a gradient (nothing in this rank's rows touched it) counts as zeros,
        so every rank takes part in the same collective.
        """
        if not self.enabled:
            return
        import torch.distributed as dist

        params = [p for p in params if p.requires_grad]
        buckets: dict[tuple, list[torch.nn.Parameter]] = {}
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            buckets.setdefault((p.grad.dtype, p.grad.device), []).append(p)
        for group in buckets.values():
            flat = torch.cat([p.grad.reshape(-1) for p in group])
            dist.all_reduce(flat)
            flat /= self.world_size
            offset = 0
            for p in group:
                n = p.grad.numel()
                p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
                offset += n

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        """Rank 0's weights on every rank (as DDP does at construction)."""
        if not self.enabled:
            return
        import torch.distributed as dist

        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.data, src=0)

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        """Leave the process group when this object joined it."""
        if self.enabled and self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.owns_group = False


# -- optimizer state: by position (torch's format, the one on disk) or by parameter name (DCP's) --
def _param_names(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> list[str]:
    names = {id(p): n for n, p in model.named_parameters()}
    order = [p for g in optimizer.param_groups for p in g["params"]]
    missing = [i for i, p in enumerate(order) if id(p) not in names]
    if missing:
        raise ValueError(
            f"{len(missing)} optimizer parameter(s) are not the model's: an FSDP checkpoint holds the model's only"
        )
    return [names[id(p)] for p in order]


def optimizer_state_by_name(state: dict, optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> dict:
    """torch's optimizer state dict (parameters numbered in order) keyed by parameter name instead.

    ``torch.distributed.checkpoint``'s full state dicts name parameters; checkpoints on disk number
    them, so a run of any world size, with or without FSDP, resumes any other's checkpoint.
    """
    names = _param_names(optimizer, model)
    return {
        "state": {names[int(i)]: v for i, v in state["state"].items()},
        "param_groups": [dict(g, params=[names[int(i)] for i in g["params"]]) for g in state["param_groups"]],
    }


def optimizer_state_by_position(state: dict, optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> dict:
    """The inverse of :func:`optimizer_state_by_name`: parameters numbered in the optimizer's order."""
    index = {n: i for i, n in enumerate(_param_names(optimizer, model))}
    return {
        "state": {index[n]: v for n, v in state["state"].items()},
        "param_groups": [dict(g, params=[index[n] for n in g["params"]]) for g in state["param_groups"]],
    }


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> tuple[dict, dict]:
    """``(model state, optimizer state)`` as one process's whole state dicts (optimizer parameters numbered).

    For an FSDP2-``sharded`` model the full states are gathered to CPU through
    ``torch.distributed.checkpoint``'s state-dict API: a collective (every rank calls it); rank 0 gets
    the optimizer state, the rank that writes it.
    """
    if not sharded:
        return model.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    model_state, optim_state = get_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if optim_state:  # filled on rank 0 only (cpu_offload)
        optim_state = optimizer_state_by_position(optim_state, optimizer, model)
    return model_state, optim_state


def load_full_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, model_state: dict, optim_state: dict, sharded: bool
) -> None:
    """Load :func:`full_state`'s state dicts (whole, any world size) into ``model`` and ``optimizer``."""
    if not sharded:
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optim_state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(
        model,
        optimizer,
        model_state_dict=model_state,
        optim_state_dict=optimizer_state_by_name(optim_state, optimizer, model),
        options=StateDictOptions(full_state_dict=True),
    )


def full_model_state(model: torch.nn.Module, sharded: bool) -> dict | None:
    """An FSDP2-``sharded`` model's whole state gathered to CPU (a collective), for rank 0 to export; else None."""
    if not sharded:
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


# -- FSDP2 -----------------------------------------------------------------------------------
def fsdp_mixed_precision(param_dtype: torch.dtype, compute_dtype: torch.dtype) -> Any:
    """FSDP2's ``MixedPrecisionPolicy`` for parameters stored in ``param_dtype`` and computed in ``compute_dtype``:
    all-gathered in the compute dtype, gradients reduce-scattered in float32 (verl's setting); ``None`` when the
    two are the same (nothing to cast).

    Example:
        >>> fsdp_mixed_precision(torch.float32, torch.float32) is None
        True
        >>> p = fsdp_mixed_precision(torch.float32, torch.bfloat16)
        >>> p.param_dtype, p.reduce_dtype
        (torch.bfloat16, torch.float32)
    """
    if param_dtype == compute_dtype:
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)


def shard_model(model: torch.nn.Module, mp_policy: Any = None) -> torch.nn.Module:
    """Shard ``model`` with FSDP2 (``fully_shard``): every decoder layer, then the root.

    Parameters, gradients and optimizer state are sharded across ranks; FSDP2 all-gathers a
    layer's weights for its forward and reduce-scatters its gradients (averaged over ranks).
    The model keeps its class (FSDP2 swaps in a subclass), so torchrl's wrappers still call it.
    ``mp_policy`` (:func:`fsdp_mixed_precision`): the float32 shards are gathered in the compute
    dtype for every forward (generation and scoring inside :func:`gathered` too); ``None``: as stored.
    """
    from torch.distributed.fsdp import fully_shard

    kwargs = {} if mp_policy is None else {"mp_policy": mp_policy}
    layers = getattr(getattr(model, "model", None), "layers", None)
    for layer in layers if layers is not None else []:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _fsdp_modules(model: torch.nn.Module) -> list[Any]:
    return [m for m in model.modules() if hasattr(m, "unshard") and hasattr(m, "set_reshard_after_forward")]


@contextlib.contextmanager
def gathered(model: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
    """Hold an FSDP2 model's full weights on every rank for the block (no-op for other models).

    Generation, log-prob scoring, validation and diagnostics run a rank-dependent number of
    forwards; with the weights gathered once up front, those forwards need no collective, so the
    ranks cannot deadlock. Training forwards run sharded, outside this block.
    """
    mods = _fsdp_modules(model) if enabled else []
    for m in mods:
        m.set_reshard_after_forward(False)
        m.unshard()
    try:
        yield
    finally:
        for m in mods:
            m.reshard()
            m.set_reshard_after_forward(True)
