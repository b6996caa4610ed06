"""What a training run reports: rollout statistics, the iteration line, TensorBoard logging.

Besides TensorBoard, a run dir gets ``scalars.csv`` (:func:`write_scalars_csv`: every scalar the
run logged, one row per iteration) and, in TensorBoard's HParams tab, the run's flattened config,
provenance and final/peak metrics (:func:`write_hparams`), so runs compare side by side there.

Example:
    >>> iteration_line(3, 60, {"rollout/reward_mean": 0.5, "rollout/success": 0.5, "rollout/tokens": 40.0,
    ...                        "train/loss": 0.01, "timing/total": 4.2})
    '[iter    3/60] reward +0.500 success 0.500 tokens 40 loss +0.0100 4.2s'
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensordict import TensorDictBase
from torchrl.record.loggers import TensorboardLogger

from ..keys import EPISODE_RETURN, FORMAT_VALID, HISTORY_FULL, NUM_TOKENS, NUM_TURNS, SUCCESS
from ..safe_io import write_text_atomic
from ..validation_peak import can_set_peak, peak_of
from .episode_frames import frame_strip

__all__ = [
    "NullLogger",
    "ResumableTensorboardLogger",
    "SCALARS_FILE",
    "ValidationPeak",
    "conversation_text",
    "flatten",
    "hparam_metrics",
    "iteration_line",
    "log_episode_images",
    "make_tensorboard_logger",
    "read_scalars_csv",
    "run_hparams",
    "skipped_update_reason",
    "summarize",
    "write_hparams",
    "write_scalars_csv",
]

SCALARS_FILE = "scalars.csv"


def summarize(records: TensorDictBase) -> dict[str, float]:
    """Rollout statistics of a batch of trajectory records."""
    ret = records.get(EPISODE_RETURN).float()
    succ = records.get(SUCCESS).float()
    n = ret.numel()
    return {
        "reward_mean": ret.mean().item(),
        "reward_std": ret.std().item() if n > 1 else 0.0,
        "success": succ.mean().item(),
        "success_stderr": math.sqrt(max(succ.mean().item() * (1 - succ.mean().item()), 0.0) / max(n, 1)),
        "turns": records.get(NUM_TURNS).float().mean().item(),
        "tokens": records.get(NUM_TOKENS).float().mean().item(),
        "format_valid": records.get(FORMAT_VALID).float().mean().item(),
        "num_trajectories": float(n),
    }


def skipped_update_reason(stats: dict[str, float]) -> str | None:
    """Why an iteration took no optimizer step (``None`` when it did), from its stats.

    Example:
        >>> skipped_update_reason({"filter/skipped_update": 1.0, "filter/num_groups": 16.0,
        ...                        "filter/zero_variance_groups": 16.0})
        'the filter kept none of the 16 groups (16 with zero reward variance)'
        >>> skipped_update_reason({"train/optimizer_steps": 1.0, "train/loss": 0.5}) is None
        True
    """
    if stats.get("filter/skipped_update"):
        n = stats.get("filter/num_groups", float("nan"))
        z = stats.get("filter/zero_variance_groups", float("nan"))
        return f"the filter kept none of the {n:.0f} groups ({z:.0f} with zero reward variance)"
    if stats.get("dapo/skipped_update"):
        calls = stats.get("dynamic_sampling/extra_rollouts", 0.0)
        return f"no group carries signal after {calls:.0f} refill rollouts (DAPO dynamic sampling)"
    if stats.get("train/optimizer_steps", 1.0) == 0:
        skipped = stats.get("train/skipped_nonfinite", 0.0)
        return f"non-finite loss or gradient in all {skipped:.0f} mini-batches"
    return None


def iteration_line(step: int, total: int, stats: dict[str, float]) -> str:
    """The console line of one training iteration; a skipped update says so and why.

    Example:
        >>> stats = {"rollout/reward_mean": 0.25, "rollout/success": 0.5, "rollout/tokens": 40.0,
        ...          "timing/total": 1.25, "train/loss": -0.0123, "train/optimizer_steps": 1.0}
        >>> iteration_line(3, 10, stats)
        '[iter    3/10] reward +0.250 success 0.500 tokens 40 loss -0.0123 1.2s'
        >>> iteration_line(3, 10, {**stats, "train/optimizer_steps": 0.0, "train/skipped_nonfinite": 2.0})[53:]
        'update skipped: non-finite loss or gradient in all 2 mini-batches 1.2s'
    """
    reason = skipped_update_reason(stats)
    update = f"update skipped: {reason}" if reason else f"loss {stats.get('train/loss', float('nan')):+.4f}"
    return (
        f"[iter {step:4d}/{total}] reward {stats['rollout/reward_mean']:+.3f} "
        f"success {stats['rollout/success']:.3f} tokens {stats['rollout/tokens']:.0f} "
        f"{update} {stats['timing/total']:.1f}s"
        + (f" kept {stats['filter/kept_ratio']:.2f}" if "filter/kept_ratio" in stats else "")
    )


class ResumableTensorboardLogger(TensorboardLogger):
    """torchrl's ``TensorboardLogger`` whose ``SummaryWriter`` is opened with ``purge_step``, and
    which keeps every scalar it logs (:attr:`scalars`, what ``scalars.csv`` is written from).

    With ``purge_step=s`` TensorBoard hides every event an earlier writer logged at a step
    ``>= s`` (``SummaryWriter(purge_step=...)``), so the iterations a resumed run re-runs are
    not shown twice; :meth:`load_scalars` drops the same steps from the scalars a checkpoint kept.
    ``purge_step=None`` is the plain logger.

    Example:
        >>> import tempfile
        >>> logger = ResumableTensorboardLogger("tb", tempfile.mkdtemp(), purge_step=3)
        >>> logger.purge_step, type(logger.experiment).__name__
        (3, 'SummaryWriter')
        >>> logger.load_scalars({1: {"a": 1.0}, 3: {"a": 2.0}}); logger.log_scalar("b", 0.5, step=2)
        >>> logger.scalars
        {1: {'a': 1.0}, 2: {'b': 0.5}}
    """

    def __init__(self, exp_name: str, log_dir: str, purge_step: int | None = None) -> None:
        self.purge_step = purge_step  # read by _create_experiment, which the base __init__ calls
        #: step -> {tag: value}: every scalar logged through :meth:`log_scalar`
        self.scalars: dict[int, dict[str, float]] = {}
        super().__init__(exp_name=exp_name, log_dir=log_dir)

    def _create_experiment(self):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(os.path.join(self.log_dir, self.exp_name)), purge_step=self.purge_step)

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        super().log_scalar(name, value, step=step)
        self.scalars.setdefault(int(step or 0), {})[name] = float(value)

    def load_scalars(self, scalars: Mapping[int, Mapping[str, float]] | None) -> None:
        """Restore the scalars a checkpoint kept, less the steps a resumed run logs again (``>= purge_step``)."""
        keep = ((int(s), dict(v)) for s, v in (scalars or {}).items())
        self.scalars = {s: v for s, v in keep if self.purge_step is None or s < self.purge_step}


def make_tensorboard_logger(run_dir: str | os.PathLike, purge_step: int | None = None) -> TensorboardLogger:
    """The run's TensorBoard logger (``run_dir/tb``); see :class:`ResumableTensorboardLogger`."""
    return ResumableTensorboardLogger(exp_name="tb", log_dir=str(run_dir), purge_step=purge_step)


def conversation_text(records: TensorDictBase, index: int) -> str:
    """One trajectory as readable text (for TensorBoard)."""
    hist = records[index].get(HISTORY_FULL)
    lines = [f"**{r}**: {c}" for r, c in zip(hist.role, hist.content)]
    ret = records[index].get(EPISODE_RETURN).item()
    return "\n\n".join(lines) + f"\n\n(return {ret:.2f})"


def log_episode_images(
    writer: Any,
    records: TensorDictBase,
    frames: Mapping[int, Sequence[Any]],
    step: int,
    prefix: str = "val/episode",
) -> int:
    """Log visual episodes to TensorBoard: each turn's observed image next to the reply the policy gave.

    For every ``row -> images`` of ``frames`` (the observed uint8 ``[3, H, W]`` images of trajectory
    ``row`` of ``records``: one per turn, then the final board, as
    :class:`~ragen_torchrl.trainer.episode_frames.EpisodeFrames` records them), writes under
    ``{prefix}_{row}/turn_{k}`` the image the policy saw at turn ``k`` (``add_image``) and, under the
    same tag, the policy's reply to it (reasoning and action, ``add_text``); the final board under
    ``{prefix}_{row}/final`` and all frames side by side under ``{prefix}_{row}/strip``. Returns the
    number of images written.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data.llm import History
        >>> class Writer:
        ...     def __init__(self): self.images, self.texts = [], []
        ...     def add_image(self, tag, image, global_step, dataformats): self.images.append(tag)
        ...     def add_text(self, tag, text, global_step): self.texts.append(tag)
        >>> chat = [{"role": "user", "content": "board"}, {"role": "assistant", "content": "<answer>Up</answer>"}]
        >>> records = TensorDict(batch_size=[1]).to_lazystack(0)
        >>> _ = records.set(("history", "full"), History.from_chats([chat]))
        >>> w = Writer()
        >>> log_episode_images(w, records, {0: [torch.zeros(3, 4, 4, dtype=torch.uint8)] * 2}, step=5)
        3
        >>> w.images, w.texts
        (['val/episode_0/turn_0', 'val/episode_0/final', 'val/episode_0/strip'], ['val/episode_0/turn_0'])
    """
    written = 0
    for row, images in sorted(frames.items()):
        if not images:
            continue
        hist = records[row].get(HISTORY_FULL)
        replies = [c for r, c in zip(hist.role, hist.content) if r == "assistant"]
        for k, image in enumerate(images):
            final = k == len(images) - 1 and k >= len(replies)
            tag = f"{prefix}_{row}/final" if final else f"{prefix}_{row}/turn_{k}"
            writer.add_image(tag, image, global_step=step, dataformats="CHW")
            if not final and k < len(replies):
                # a code block: TensorBoard's markdown would drop the <think>/<answer> tags as HTML
                writer.add_text(tag, f"turn {k}\n\n```\n{replies[k]}\n```", global_step=step)
        writer.add_image(f"{prefix}_{row}/strip", frame_strip(images), global_step=step, dataformats="CHW")
        written += len(images) + 1
    return written


def final_validation_line(val_start: dict | None, val_end: dict, seconds: float, peak: dict | None = None) -> str:
    """The line a run prints at its end: validation success at the start and at the end, and the peak.

    ``peak`` is :meth:`ValidationPeak.as_dict` (the paper's table metric: the best validation of the run).

    Example:
        >>> start = {"success": 0.25, "success_stderr": 0.02}
        >>> end = {"success": 0.5, "success_stderr": 0.03, "num_trajectories": 256}
        >>> final_validation_line(start, end, 61.0)
        'validation success: start 0.250 ± 0.020 -> end 0.500 ± 0.030 (256 levels, 61s)'
        >>> final_validation_line(None, end, 61.0)
        'validation success at the end: 0.500 ± 0.030'
        >>> peak = {"success": 0.625, "stderr": 0.061, "iteration": 40, "levels": 64}
        >>> final_validation_line(start, end, 61.0, peak)[-52:]
        '256 levels, 61s), peak 0.625 ± 0.061 at iteration 40'
    """
    if val_start is None:
        line = f"validation success at the end: {val_end['success']:.3f} ± {val_end['success_stderr']:.3f}"
    else:
        line = (
            f"validation success: start {val_start['success']:.3f} ± {val_start['success_stderr']:.3f} -> "
            f"end {val_end['success']:.3f} ± {val_end['success_stderr']:.3f} "
            f"({val_end.get('num_trajectories', 0):.0f} levels, {seconds:.0f}s)"
        )
    if peak:
        line += f", peak {peak['success']:.3f} ± {peak['stderr']:.3f} at iteration {peak['iteration']}"
    return line


class ValidationPeak:
    """The best validation success of a run and when it happened (RAGEN-2's table metric).

    RAGEN-2 (arXiv 2604.06268) reports the **peak** validation success over training; the trainer
    feeds every validation (at the start, every ``trainer.val_every`` iterations, at the end) to
    :meth:`update`, and those that :func:`~ragen_torchrl.validation_peak.can_set_peak` (after iteration 0,
    on all ``levels`` of the fixed set) compete for it: a periodic validation on fewer levels
    (``trainer.val_every_levels``) never sets it. The first validation reaching the maximum keeps it (a
    tie does not move the peak to a later iteration).

    Args:
        levels: the full validation set's size (``trainer.val_levels``).

    Example:
        >>> peak = ValidationPeak(levels=8)
        >>> [peak.update(it, {"success": s, "success_stderr": 0.1}, levels=n)
        ...  for it, s, n in [(0, 0.75, 8), (10, 0.5, 8), (20, 0.875, 4), (30, 0.5, 8), (40, 0.625, 8)]]
        [False, True, False, False, True]
        >>> peak.as_dict()
        {'success': 0.625, 'stderr': 0.1, 'iteration': 40, 'levels': 8}
    """

    def __init__(self, levels: int) -> None:
        self.full_levels = int(levels)
        self.success: float | None = None
        self.stderr: float | None = None
        self.iteration: int | None = None
        self.levels: int | None = None

    def update(self, iteration: int, stats: dict, levels: int) -> bool:
        """Record one validation's stats (``success``, ``success_stderr``) on ``levels`` levels; True on a new peak."""
        success = float(stats["success"])
        current = [] if self.success is None else [(self.iteration, self.success, self.levels)]
        best = peak_of([*current, (int(iteration), success, int(levels))], self.full_levels)
        if best is None or best == (self.iteration, self.success):
            return False
        self.success, self.iteration = success, int(iteration)
        self.stderr = float(stats.get("success_stderr", math.nan))
        self.levels = int(levels)
        return True

    def as_dict(self) -> dict | None:
        """``{"success", "stderr", "iteration", "levels"}``, or ``None`` while no validation could set the peak."""
        if self.success is None:
            return None
        return {"success": self.success, "stderr": self.stderr, "iteration": self.iteration, "levels": self.levels}

    def state_dict(self) -> dict | None:
        """What a checkpoint keeps (a resumed run continues the same peak)."""
        return self.as_dict()

    def load_state_dict(self, state: dict | None) -> None:
        """Restore :meth:`state_dict` (``None``: no peak yet); a stored peak that cannot set it here is dropped."""
        self.__init__(self.full_levels)
        if state and can_set_peak(int(state["iteration"]), int(state["levels"]), self.full_levels):
            self.success, self.stderr = float(state["success"]), float(state["stderr"])
            self.iteration, self.levels = int(state["iteration"]), int(state["levels"])


class NullLogger:
    """The logger of a rank that does not write (every rank but 0): same calls, nothing written.

    Example:
        >>> NullLogger().log_scalar("loss", 1.0, step=1); NullLogger().experiment.flush()
    """

    class _Writer:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    def __init__(self) -> None:
        self.experiment = self._Writer()
        self.scalars: dict[int, dict[str, float]] = {}

    def log_scalar(self, *args, **kwargs) -> None:
        return None

    def load_scalars(self, scalars) -> None:
        return None


# --------------------------------------------------------------------------- scalars.csv
def write_scalars_csv(path: str | os.PathLike, scalars: Mapping[int, Mapping[str, float]]) -> Path:
    """Write every logged scalar as CSV: ``iteration,<tag>,...`` (tags sorted), one row per logged step.

    Rows are in step order; a cell is empty where that tag was not logged at that step; values
    are written with ``repr`` so ``float(cell)`` gives back the exact float (``nan``/``inf``
    included). The file is replaced atomically. :func:`read_scalars_csv` reads it back.

    Example:
        >>> import tempfile
        >>> p = write_scalars_csv(Path(tempfile.mkdtemp()) / "scalars.csv",
        ...                       {2: {"train/loss": 0.1}, 0: {"val/success": 0.25}})
        >>> print(p.read_text(), end="")
        iteration,train/loss,val/success
        0,,0.25
        2,0.1,
    """
    path = Path(path)
    tags = sorted({t for row in scalars.values() for t in row})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["iteration", *tags])
    for step in sorted(scalars):
        row = scalars[step]
        w.writerow([int(step), *(repr(float(row[t])) if t in row else "" for t in tags)])
    return write_text_atomic(path, buf.getvalue())  # a resumed run dir may come from elsewhere: no link followed


def read_scalars_csv(path: str | os.PathLike) -> dict[int, dict[str, float]]:
    """Read :func:`write_scalars_csv`'s file back: ``{iteration: {tag: value}}`` (empty cells left out).

    Raises:
        ValueError: the header does not start with ``iteration``, or a cell is not a number
            (naming the file, the line and the column).

    Example:
        >>> import tempfile
        >>> p = write_scalars_csv(Path(tempfile.mkdtemp()) / "s.csv", {1: {"a": 0.1 + 0.2, "b": float("inf")}})
        >>> read_scalars_csv(p) == {1: {"a": 0.30000000000000004, "b": float("inf")}}
        True
    """
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if not header or header[0] != "iteration":
            raise ValueError(f"{path}: line 1: the header must start with 'iteration' (got {header!r})")
        out: dict[int, dict[str, float]] = {}
        for line, row in enumerate(rows, start=2):
            try:
                step = int(row[0])
                out[step] = {t: float(v) for t, v in zip(header[1:], row[1:]) if v != ""}
            except (ValueError, IndexError) as e:
                raise ValueError(f"{path}: line {line}: not a row of numbers ({e})") from e
    return out


# --------------------------------------------------------------------------- HParams
def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{"dotted.key": value}``; lists and ``None`` become strings (HParams takes scalars).

    Example:
        >>> flatten({"a": {"b": 1, "c": None}, "d": [1, 2], "e": "x"})
        {'a.b': 1, 'a.c': 'null', 'd': '[1, 2]', 'e': 'x'}
    """
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    key = prefix[:-1]
    if obj is None:
        return {key: "null"}
    if isinstance(obj, (bool, int, float, str)):
        return {key: obj}
    return {key: str(list(obj)) if isinstance(obj, tuple) else str(obj)}


#: scalars whose last logged value is a final metric in the HParams tab (when the run logged them)
FINAL_TAGS = (
    "rollout/success",
    "rollout/reward_mean",
    "rollout/tokens",
    "filter/kept_ratio",
    "collapse/trajectory/mi_zscore",
    "collapse/trajectory/retrieval_accuracy",
    "collapse/trajectory/reasoning_token_entropy_mean",
)


def hparam_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The final and peak metrics of a run summary, as ``hparams/...`` scalars for the HParams tab.

    Validation success at the start, end and peak (and the peak's iteration), the last logged value
    of each of :data:`FINAL_TAGS`, the run totals (optimizer steps, trained samples and tokens) and
    the wall and CPU seconds of every phase. Missing values are left out.

    Example:
        >>> hparam_metrics({"val_start": {"success": 0.25}, "val_end": {"success": 0.5},
        ...                 "val_peak": {"success": 0.625, "iteration": 10}, "history": [{"rollout/success": 0.4}],
        ...                 "totals": {"optimizer_steps": 4.0}, "phases": {"total": {"wall": 9.0, "cpu": 8.0}}})
        ... # doctest: +NORMALIZE_WHITESPACE
        {'hparams/val_success_start': 0.25, 'hparams/val_success_end': 0.5, 'hparams/val_success_peak': 0.625,
         'hparams/val_peak_iteration': 10.0, 'hparams/final/rollout/success': 0.4, 'hparams/optimizer_steps': 4.0,
         'hparams/seconds/total_wall': 9.0, 'hparams/seconds/total_cpu': 8.0}
    """
    out: dict[str, float] = {}
    for name, stats in (("start", summary.get("val_start")), ("end", summary.get("val_end"))):
        if stats and stats.get("success") is not None:
            out[f"hparams/val_success_{name}"] = float(stats["success"])
    peak = summary.get("val_peak")
    if peak and peak.get("success") is not None:
        out["hparams/val_success_peak"] = float(peak["success"])
        out["hparams/val_peak_iteration"] = float(peak["iteration"])
    for tag in FINAL_TAGS:
        last = [h[tag] for h in summary.get("history") or [] if isinstance(h.get(tag), (int, float))]
        if last:
            out[f"hparams/final/{tag}"] = float(last[-1])
    for k, v in (summary.get("totals") or {}).items():
        out[f"hparams/{k}"] = float(v)
    for phase, sec in (summary.get("phases") or {}).items():
        out[f"hparams/seconds/{phase}_wall"] = float(sec["wall"])
        out[f"hparams/seconds/{phase}_cpu"] = float(sec["cpu"])
    return {k: v for k, v in out.items() if math.isfinite(v)}


def run_hparams(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The HParams-tab columns of a run: its flattened config and provenance (``provenance.*``).

    Example:
        >>> run_hparams({"config": {"algo": {"lr": 2e-4}}, "provenance": {"git": None, "load_start": [0.5, 1, 1]}})
        {'algo.lr': 0.0002, 'provenance.git': 'null', 'provenance.load_start': '[0.5, 1, 1]'}
    """
    return {**flatten(summary.get("config") or {}), **flatten({"provenance": summary.get("provenance") or {}})}


def write_hparams(writer, hparams: Mapping[str, Any], metrics: Mapping[str, float], step: int = 0) -> None:
    """Write an HParams-tab session (``hparams`` and ``metrics``) into ``writer``'s own event file.

    ``SummaryWriter.add_hparams`` would open a second writer in a timestamped subfolder, a separate
    run in TensorBoard; here the three plugin summaries and the metric scalars go to ``writer``'s
    log dir, so the HParams row is the run itself, next to its scalars.

    Example:
        >>> import tempfile
        >>> from torch.utils.tensorboard import SummaryWriter
        >>> w = SummaryWriter(tempfile.mkdtemp())
        >>> write_hparams(w, {"algo.lr": 2e-4, "filter.name": "none"}, {"hparams/val_success_end": 0.5}, step=3)
        >>> w.close()
    """
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    plain = {k: (v if isinstance(v, (bool, int, float, str)) else str(v)) for k, v in hparams.items()}
    exp, ssi, sei = hparams_summaries(plain, dict(metrics))
    file_writer = writer._get_file_writer()
    for summary in (exp, ssi, sei):
        file_writer.add_summary(summary, global_step=step)
    for k, v in metrics.items():
        writer.add_scalar(k, float(v), global_step=step)
    writer.flush()
