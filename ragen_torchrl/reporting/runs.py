"""Loading training runs: a run dir's ``summary.json``, else its TensorBoard events.

A run dir is what ``ragen-train`` writes (Hydra's ``outputs/<date>/<time>/``): ``summary.json``
(config, start/end validation, per-iteration scalars), ``tb/`` (TensorBoard events),
``checkpoints/last.pt`` and ``.hydra/config.yaml``. :func:`load_run` reads

* the **summary** when there is one; validation points between start and end (``trainer.val_every``)
  are the ``val/*`` scalars of its history entries (else read from ``tb/`` when it exists);
* else the **TensorBoard events**: the per-iteration scalars under their history names
  (``rollout/success``, ``timing/update``, ``collapse/...``), the validation scalars ``val/<stat>``;
  the config then comes from ``.hydra/config.yaml`` (interpolations such as ``${oc.env:...}``
  kept as their text, never resolved), else is empty.

Only JSON, YAML (``yaml.safe_load``) and TensorBoard event files are read: a report never
unpickles a checkpoint, so a run dir from elsewhere cannot run code in it.

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "summary.json").write_text(json.dumps({
    ...     "config": {"seed": 0, "filter": {"name": "none"}},
    ...     "val_start": {"success": 0.5}, "val_end": {"success": 0.75},
    ...     "history": [{"iteration": 1, "timing/update": 2.0}, {"iteration": 2, "timing/update": None}],
    ...     "iterations": 2}))
    >>> run = load_run(d)
    >>> run.source, run.final_success, run.start_success, run.series("timing/update")
    ('summary.json', 0.75, 0.5, [(1, 2.0)])
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..trainer.checkpoint import flatten_config  # noqa: F401 (one copy: the resume check uses it too)

__all__ = ["Run", "RunError", "find_runs", "flatten_config", "is_run_dir", "load_run", "load_runs"]


class RunError(ValueError):
    """A path that is not a readable run dir (the CLI prints it as one line and exits 2)."""


@dataclass
class Run:
    """One training run: its config, per-iteration scalars and validation points.

    Attributes:
        path: the run dir.
        config: the resolved (nested) config; ``{}`` when none was found.
        history: one dict of scalars per training iteration, each with its ``"iteration"`` (1-based).
        val: validation points ``(iteration, stats)``, iteration 0 = before training, sorted.
        iterations: the planned number of iterations (``None`` when unknown).
        source: ``"summary.json"`` or ``"tensorboard"``.

    Example:
        >>> run = Run(Path("r"), {}, [{"iteration": 1, "x": 1.0}, {"iteration": 2, "x": float("nan")}],
        ...           [(0, {"success": 0.25}), (2, {"success": 0.5})])
        >>> run.series("x"), run.val_series("success"), run.final_success, run.last_iteration
        ([(1, 1.0)], [(0, 0.25), (2, 0.5)], 0.5, 2)
    """

    path: Path
    config: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    val: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    iterations: int | None = None
    source: str = "summary.json"

    def series(self, key: str) -> list[tuple[int, float]]:
        """``(iteration, value)`` of a per-iteration scalar, finite values only."""
        return [(int(h["iteration"]), float(h[key])) for h in self.history if _finite(h.get(key))]

    def val_series(self, key: str = "success") -> list[tuple[int, float]]:
        """``(iteration, value)`` of a validation statistic, finite values only."""
        return [(it, float(s[key])) for it, s in self.val if _finite(s.get(key))]

    def has(self, key: str) -> bool:
        """Whether the per-iteration scalar ``key`` was logged (finite) at least once."""
        return any(_finite(h.get(key)) for h in self.history)

    @property
    def last_iteration(self) -> int:
        """The last iteration that ran (0 when none did)."""
        its = [int(h["iteration"]) for h in self.history] + [it for it, _ in self.val]
        return max(its, default=0)

    @property
    def total_iterations(self) -> int:
        """The planned number of iterations, else the last one that ran."""
        return self.iterations if self.iterations else self.last_iteration

    @property
    def start_success(self) -> float | None:
        """Validation success before training (``None`` when not measured)."""
        pts = self.val_series()
        return pts[0][1] if pts and pts[0][0] == 0 else None

    @property
    def final_success(self) -> float | None:
        """The last validation success (``None`` when never measured)."""
        pts = self.val_series()
        return pts[-1][1] if pts else None


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _event_files(run_dir: Path) -> list[Path]:
    tb = run_dir / "tb"
    return sorted(tb.rglob("events.out.tfevents*")) if tb.is_dir() else []


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a ``summary.json`` or TensorBoard events under ``tb/``.

    Example:
        >>> import tempfile
        >>> is_run_dir(tempfile.mkdtemp())
        False
    """
    p = Path(path)
    return p.is_dir() and ((p / "summary.json").is_file() or bool(_event_files(p)))


def find_runs(paths: list[str | Path]) -> list[Path]:
    """The run dirs named by ``paths``; a Hydra sweep dir (with ``multirun.yaml``) stands for its runs.

    Raises :class:`RunError` for no path, a missing path, or a dir that is not a run.

    Example:
        >>> find_runs([])
        Traceback (most recent call last):
        ...
        ragen_torchrl.reporting.runs.RunError: no run dirs given
    """
    if not paths:
        raise RunError("no run dirs given")
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise RunError(f"{p} does not exist")
        if p.is_file() and p.name == "multirun.yaml":
            continue  # `multirun/<date>/<time>/*` also matches the sweep's own file
        if is_run_dir(p):
            out.append(p)
        elif p.is_dir() and (p / "multirun.yaml").is_file():
            out.extend(sorted((q for q in p.iterdir() if is_run_dir(q)), key=lambda q: (len(q.name), q.name)))
        else:
            raise RunError(f"{p} is not a run dir (no summary.json, no TensorBoard events under {p / 'tb'})")
    if not out:
        raise RunError("no run dirs given")
    return out


def _tensorboard_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} from every event file under ``run_dir/tb`` (a later write of a step wins)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, dict[int, float]] = {}
    dirs = sorted({f.parent for f in _event_files(run_dir)})
    for d in dirs:
        acc = EventAccumulator(str(d), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            series = out.setdefault(tag, {})
            for e in acc.Scalars(tag):
                series[int(e.step)] = float(e.value)
    return out


def _val_points(scalars: dict[str, dict[int, float]]) -> dict[int, dict[str, float]]:
    points: dict[int, dict[str, float]] = {}
    for tag, series in scalars.items():
        if tag.startswith("val/"):
            for step, v in series.items():
                points.setdefault(step, {})[tag[len("val/") :]] = v
    return points


def _config_without_summary(run_dir: Path) -> dict[str, Any]:
    """Hydra's copy of the config, as written (never resolved: ``${oc.env:...}`` would read this
    machine's environment); a file that is not a YAML mapping is a :class:`RunError`."""
    hydra_cfg = run_dir / ".hydra" / "config.yaml"
    if not hydra_cfg.is_file():
        return {}
    import yaml

    try:
        cfg = yaml.safe_load(hydra_cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise RunError(f"{hydra_cfg}: unreadable config ({' '.join(str(e).split())})") from None
    if cfg is None:
        return {}
    if not isinstance(cfg, Mapping):
        raise RunError(f"{hydra_cfg}: not a config (a YAML mapping is expected, got {type(cfg).__name__})")
    return dict(cfg)


def _iterations(config: Mapping[str, Any]) -> int | None:
    trainer = config.get("trainer")
    total = trainer.get("total_iterations") if isinstance(trainer, Mapping) else None
    return int(total) if _finite(total) else None


def load_run(path: str | Path) -> Run:
    """Read one run dir (see the module docstring); raises :class:`RunError` when it is not a run."""
    run_dir = Path(path)
    if not is_run_dir(run_dir):
        raise RunError(f"{run_dir} is not a run dir (no summary.json, no TensorBoard events under {run_dir / 'tb'})")
    summary_file = run_dir / "summary.json"
    if summary_file.is_file():
        try:
            summary = json.loads(summary_file.read_text())
        except (OSError, ValueError, RecursionError) as e:
            raise RunError(f"{summary_file}: unreadable summary ({' '.join(str(e).split())[:200]})") from None
        if not isinstance(summary, Mapping):
            raise RunError(f"{summary_file}: not a run summary (a JSON object is expected)")
        if not isinstance(summary.get("config") or {}, Mapping):
            raise RunError(f"{summary_file}: its config is a {type(summary['config']).__name__}, not a mapping")
        config = dict(summary.get("config") or {})
        history = [dict(h) for h in summary.get("history") or [] if isinstance(h, Mapping) and "iteration" in h]
        planned = _iterations(config) or summary.get("iterations")  # the summary's count is what ran
        run = Run(run_dir, config, history, [], planned, "summary.json")
        # validation between start and end: the trainer adds its val/* scalars to that iteration's
        # history entry; older summaries lack them, TensorBoard has them
        points = {int(h["iteration"]): {k[4:]: v for k, v in h.items() if k.startswith("val/")} for h in history}
        points = {it: p for it, p in points.items() if p}
        if not points and _event_files(run_dir):
            points = _val_points(_tensorboard_scalars(run_dir))
        if summary.get("val_start"):
            points[0] = dict(summary["val_start"])
        if summary.get("val_end"):
            points[max([run.last_iteration, *points])] = dict(summary["val_end"])
        run.val = sorted(points.items())
        return run
    scalars = _tensorboard_scalars(run_dir)
    steps: dict[int, dict[str, Any]] = {}
    for tag, series in scalars.items():
        if tag.startswith(("val/", "stop/")):
            continue
        for step, v in series.items():
            steps.setdefault(step, {"iteration": step})[tag] = v
    history = [steps[s] for s in sorted(steps)]
    config = _config_without_summary(run_dir)
    return Run(run_dir, config, history, sorted(_val_points(scalars).items()), _iterations(config), "tensorboard")


def load_runs(paths: list[str | Path]) -> list[Run]:
    """:func:`find_runs`, then :func:`load_run` each.

    Example:
        >>> import tempfile
        >>> try:
        ...     load_runs([tempfile.mkdtemp()])
        ... except RunError as e:
        ...     print(str(e).endswith("is not a run dir (no summary.json, no TensorBoard events under "
        ...                           + str(Path(e.args[0].split()[0]) / "tb") + ")"))
        True
    """
    return [load_run(p) for p in find_runs(paths)]
