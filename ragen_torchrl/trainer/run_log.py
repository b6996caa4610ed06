"""The run log on any torchrl logger, the run's ``scalars.csv`` and its HParams summary.

The run log (:class:`RunLog`, built by :func:`make_run_log`) wraps whichever of torchrl's logger
types ``logger.backend`` names (:data:`~ragen_torchrl.trainer.logger_backends.LOGGER_BACKENDS`: tensorboard, the default, csv, wandb, mlflow,
trackio) and writes the same scalars, text samples, images and histograms under the same tags to
each; at the end the run's flattened config, provenance and final/peak metrics go to the backend
once, in its own way (TensorBoard's HParams tab, :func:`write_hparams`; a W&B run config; MLflow
params). Whatever the backend, a run dir gets ``scalars.csv`` (:func:`write_scalars_csv`: every scalar
the run logged, one row per iteration).

What the run reports (the rollout statistics, the iteration and final-validation lines, the
validation peak) is computed in :mod:`ragen_torchrl.trainer.run_stats`; its names are importable
from here too.

Example:
    >>> run_hparams({"config": {"algo": {"lr": 2e-4}, "env": {"name": "frozenlake"}}, "provenance": {}})
    {'algo.lr': 0.0002, 'env.name': 'frozenlake'}
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensordict import TensorDictBase
from torchrl.record.loggers import TensorboardLogger

from ..keys import EPISODE_RETURN, HISTORY_FULL
from ..safe_io import write_text_atomic
from .episode_frames import frame_strip
from .logger_backends import check_backend
from .run_stats import ValidationPeak, final_validation_line, iteration_line, skipped_update_reason, summarize

log = logging.getLogger(__name__)

__all__ = [
    "NullLogger",
    "ResumableTensorboardLogger",
    "RunLog",
    "SCALARS_FILE",
    "ValidationPeak",
    "conversation_text",
    "final_validation_line",
    "flatten",
    "hparam_metrics",
    "iteration_line",
    "log_episode_images",
    "make_backend_logger",
    "make_run_log",
    "purge_csv_scalars",
    "read_scalars_csv",
    "run_hparams",
    "skipped_update_reason",
    "summarize",
    "write_hparams",
    "write_scalars_csv",
]

SCALARS_FILE = "scalars.csv"


class ResumableTensorboardLogger(TensorboardLogger):
    """torchrl's ``TensorboardLogger`` whose ``SummaryWriter`` is opened with ``purge_step``.

    With ``purge_step=s`` TensorBoard hides every event an earlier writer logged at a step
    ``>= s`` (``SummaryWriter(purge_step=...)``), so the iterations a resumed run re-runs are
    not shown twice. ``purge_step=None`` is the plain logger.

    Example:
        >>> import tempfile
        >>> logger = ResumableTensorboardLogger("tb", tempfile.mkdtemp(), purge_step=3)
        >>> logger.purge_step, type(logger.experiment).__name__
        (3, 'SummaryWriter')
    """

    def __init__(self, exp_name: str, log_dir: str, purge_step: int | None = None) -> None:
        self.purge_step = purge_step  # read by _create_experiment, which the base __init__ calls
        super().__init__(exp_name=exp_name, log_dir=log_dir)

    def _create_experiment(self):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(os.path.join(self.log_dir, self.exp_name)), purge_step=self.purge_step)


#: where each backend writes inside the run dir (wandb: its offline/online run dirs; mlflow: its SQLite store)
BACKEND_DIRS = {"tensorboard": "tb", "csv": "csv", "wandb": "wandb", "mlflow": "mlflow.db", "trackio": None}


def purge_csv_scalars(scalars_dir: str | os.PathLike, purge_step: int) -> int:
    r"""Drop the rows at steps ``>= purge_step`` from every ``<tag>.csv`` of torchrl's ``CSVLogger``
    (``step,value`` lines): what ``purge_step`` does for TensorBoard, for a resumed run's CSV log.

    Returns the number of rows dropped.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "loss.csv").write_text("1,0.5\n2,0.25\n3,0.125\n")
        >>> purge_csv_scalars(d, 2), (d / "loss.csv").read_text()
        (2, '1,0.5\n')
    """
    dropped = 0
    for path in sorted(Path(scalars_dir).rglob("*.csv")):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [ln for ln in lines if not ln.strip() or int(float(ln.split(",", 1)[0])) < int(purge_step)]
        if len(kept) != len(lines):
            dropped += len(lines) - len(kept)
            write_text_atomic(path, "".join(kept))
    return dropped


def make_backend_logger(
    backend: str, run_dir: str | os.PathLike, *, purge_step: int | None = None, project: str = "ragen_torchrl"
):
    """The torchrl logger of ``backend`` (one of :data:`~ragen_torchrl.trainer.logger_backends.LOGGER_BACKENDS`) writing into ``run_dir``.

    * ``tensorboard``: :class:`ResumableTensorboardLogger` in ``run_dir/tb``;
    * ``csv``: ``CSVLogger`` in ``run_dir/csv`` (``scalars/<tag>.csv`` as ``step,value`` lines, ``texts/``);
      a resumed run first drops the rows at steps ``>= purge_step`` (:func:`purge_csv_scalars`);
    * ``wandb``: ``WandbLogger`` in ``run_dir/wandb``, run named after the run dir, in W&B project
      ``project``; ``WANDB_MODE=offline`` keeps it local;
    * ``mlflow``: ``MLFlowLogger`` on ``$MLFLOW_TRACKING_URI``, else a SQLite store ``run_dir/mlflow.db``
      with artifacts in ``run_dir/mlruns`` (MLflow >= 3.10 has no file-store backend), experiment ``project``;
    * ``trackio``: ``TrackioLogger`` in project ``project``.

    Raises:
        ValueError: an unknown backend, or one whose package is not installed (naming ``logger.backend``).

    Example:
        >>> import tempfile
        >>> type(make_backend_logger("csv", tempfile.mkdtemp())).__name__
        'CSVLogger'
        >>> make_backend_logger("neptune", tempfile.mkdtemp())
        Traceback (most recent call last):
        ...
        ValueError: logger.backend must be one of tensorboard, csv, wandb, mlflow, trackio, got 'neptune'
    """
    check_backend(backend)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if backend == "tensorboard":
        return ResumableTensorboardLogger(exp_name="tb", log_dir=str(run_dir), purge_step=purge_step)
    if backend == "csv":
        from torchrl.record.loggers import CSVLogger

        if purge_step is not None and (run_dir / "csv" / "scalars").is_dir():
            purge_csv_scalars(run_dir / "csv" / "scalars", purge_step)
        return CSVLogger(exp_name="csv", log_dir=str(run_dir))
    if backend == "wandb":
        from torchrl.record.loggers import WandbLogger

        # the package metadata torchrl adds by default duplicates provenance (in the hparams) and is slow
        return WandbLogger(exp_name=run_dir.name, log_dir=str(run_dir), project=project, log_env_packages=False)
    if backend == "mlflow":
        from torchrl.record.loggers import MLFlowLogger

        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{run_dir.resolve() / BACKEND_DIRS['mlflow']}"
        artifacts = None if os.environ.get("MLFLOW_TRACKING_URI") else (run_dir.resolve() / "mlruns").as_uri()
        return MLFlowLogger(exp_name=project, tracking_uri=uri, artifact_location=artifacts)
    from torchrl.record.loggers import TrackioLogger

    return TrackioLogger(exp_name=run_dir.name, project=project)


class RunLog:
    r"""The run's log on one torchrl logger of any backend (:func:`make_backend_logger`), with the tags of every backend.

    The trainer writes scalars (:meth:`log_scalar`), text samples (:meth:`add_text`), images
    (:meth:`add_image`), histograms (:meth:`log_histogram`) and, once at the end, the run's
    hyperparameters and final metrics (:meth:`log_hparams`) through it; each goes to the backend
    in that backend's own way, under the same tag. What a backend cannot store (images in CSV and
    trackio, histograms in CSV and MLflow) is skipped, said once in an info log. Every scalar is also
    kept in :attr:`scalars` (``step -> {tag: value}``), what ``scalars.csv`` is written from and what
    a checkpoint keeps; :meth:`load_scalars` restores them less the steps a resumed run logs again
    (``>= purge_step``).

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> log = RunLog(make_backend_logger("csv", run), "csv", purge_step=3)
        >>> log.load_scalars({1: {"a": 1.0}, 3: {"a": 2.0}}); log.log_scalar("b", 0.5, step=2)
        >>> log.scalars
        {1: {'a': 1.0}, 2: {'b': 0.5}}
        >>> (run / "csv" / "scalars" / "b.csv").read_text()
        '2,0.5\n'
        >>> log.add_image("val/episode_0/final", None, global_step=2)   # CSV stores no images: skipped
        >>> log.skipped
        {'images'}
    """

    def __init__(self, logger, backend: str, purge_step: int | None = None) -> None:
        self.logger = logger
        self.backend = backend
        self.purge_step = purge_step
        #: step -> {tag: value}: every scalar logged through :meth:`log_scalar`
        self.scalars: dict[int, dict[str, float]] = {}
        #: the kinds of record this backend cannot store, skipped (each said once in the log)
        self.skipped: set[str] = set()
        self._closed = False

    @property
    def experiment(self):
        """The backend's own object (a ``SummaryWriter``, a ``wandb`` run, ...)."""
        return self.logger.experiment

    def _skip(self, kind: str) -> None:
        if kind not in self.skipped:
            self.skipped.add(kind)
            log.info("logger.backend=%s stores no %s: they are not logged", self.backend, kind)

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """One scalar at ``step`` (an iteration)."""
        self.scalars.setdefault(int(step or 0), {})[name] = float(value)
        if not self._closed:
            self.logger.log_scalar(name, float(value), step=step)

    def add_text(self, tag: str, text: str, global_step: int | None = None) -> None:
        """A text sample (a conversation, a turn's reply) under ``tag`` at ``global_step``."""
        if self._closed:
            return
        if self.backend in ("tensorboard", "csv"):
            self.experiment.add_text(tag, text, global_step=global_step)
        elif self.backend == "mlflow":
            import mlflow

            mlflow.log_text(text, f"text/{tag}/step_{int(global_step or 0)}.txt")
        else:  # wandb, trackio
            self.logger.log_str(tag, text, step=global_step)

    def add_image(self, tag: str, image, global_step: int | None = None, dataformats: str = "CHW") -> None:
        """An image (uint8, ``dataformats`` ``CHW`` or ``HWC``) under ``tag`` at ``global_step``."""
        if self._closed:
            return
        if self.backend == "tensorboard":
            self.experiment.add_image(tag, image, global_step=global_step, dataformats=dataformats)
            return
        if self.backend not in ("wandb", "mlflow"):
            self._skip("images")
            return
        array = image.detach().cpu().numpy() if hasattr(image, "detach") else image
        if dataformats == "CHW":
            array = array.transpose(1, 2, 0)
        if self.backend == "wandb":
            import wandb

            # torchrl's WandbLogger steps each tag group by "<group>/step": the image follows the same convention
            prefix, sep, _ = tag.rpartition("/")
            self.experiment.log({tag: wandb.Image(array), f"{prefix}{sep}step": int(global_step or 0)})
        else:
            import mlflow

            mlflow.log_image(array, f"images/{tag}/step_{int(global_step or 0)}.png")

    def log_histogram(self, name: str, data, step: int | None = None) -> None:
        """A histogram of ``data`` under ``name`` at ``step`` (skipped where the backend has none)."""
        if self._closed:
            return
        try:
            self.logger.log_histogram(name, data, step=step)
        except NotImplementedError:  # CSVLogger and MLFlowLogger refuse histograms
            self._skip("histograms")

    def log_hparams(self, hparams: Mapping[str, Any], metrics: Mapping[str, float], step: int = 0) -> None:
        """The run's hyperparameters (flat ``{"dotted.key": value}``) and final metrics, once, the backend's way.

        TensorBoard: an HParams-tab session in the run's own event file (:func:`write_hparams`); CSV:
        torchrl's ``hparams`` text file and the metrics as scalars; W&B: the run config and its summary;
        MLflow: run params (long values cut to MLflow's 6000 characters) and metrics at ``step``; trackio:
        its config and the metrics as scalars.
        """
        if self._closed:
            return
        plain = {k: (v if isinstance(v, (bool, int, float, str)) else str(v)) for k, v in hparams.items()}
        if self.backend == "tensorboard":
            write_hparams(self.experiment, plain, metrics, step=step)
            return
        if self.backend == "wandb":
            self.logger.log_hparams(plain)
            self.experiment.summary.update(dict(metrics))
            return
        if self.backend == "mlflow":
            import mlflow

            mlflow.log_params({k: str(v)[:6000] for k, v in plain.items()})
            mlflow.log_metrics(dict(metrics), step=int(step))
            return
        self.logger.log_hparams(plain)  # csv: a text file "hparams"; trackio: its config
        for k, v in metrics.items():
            self.logger.log_scalar(k, float(v), step=step)

    def load_scalars(self, scalars: Mapping[int, Mapping[str, float]] | None) -> None:
        """Restore the scalars a checkpoint kept, less the steps a resumed run logs again (``>= purge_step``)."""
        keep = ((int(s), dict(v)) for s, v in (scalars or {}).items())
        self.scalars = {s: v for s, v in keep if self.purge_step is None or s < self.purge_step}

    def flush(self) -> None:
        """Write what the backend buffers."""
        if not self._closed:
            self.logger.flush()

    def close(self) -> None:
        """Flush and close the backend (a W&B or MLflow run ends); later writes only update :attr:`scalars`."""
        if not self._closed:
            self.logger.close()
            self._closed = True


def make_run_log(
    backend: str, run_dir: str | os.PathLike, purge_step: int | None = None, project: str = "ragen_torchrl"
) -> RunLog:
    """The run's :class:`RunLog` on ``backend`` (see :func:`make_backend_logger`).

    Example:
        >>> import tempfile
        >>> make_run_log("tensorboard", tempfile.mkdtemp(), purge_step=5).logger.purge_step
        5
    """
    logger = make_backend_logger(backend, run_dir, purge_step=purge_step, project=project)
    return RunLog(logger, backend, purge_step=purge_step)


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


class NullLogger:
    """The run log of a rank that does not write (every rank but 0): the calls of :class:`RunLog`, nothing written.

    Example:
        >>> NullLogger().log_scalar("loss", 1.0, step=1); NullLogger().add_text("t", "x", global_step=1)
    """

    def __init__(self) -> None:
        self.scalars: dict[int, dict[str, float]] = {}

    def __getattr__(self, name: str):
        if name.startswith("_"):  # copy/pickle protocol lookups are not logging calls
            raise AttributeError(name)
        return lambda *args, **kwargs: None


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
