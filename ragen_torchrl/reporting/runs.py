"""Loading training runs: a run dir's ``summary.json``, else its TensorBoard events.

A run dir is what ``ragen-train`` writes (Hydra's ``outputs/<date>/<time>/``): ``summary.json``
(config, start/end validation, per-iteration scalars), ``scalars.csv`` (every logged TensorBoard
scalar per iteration), ``tb/`` (TensorBoard events), ``checkpoints/last.pt`` and ``.hydra/config.yaml``.
A **result set** (``docs/results/<name>/``) holds ``report.md``, its plots and the raw data
``runs/<run>/{summary.json,scalars.csv}``; naming it stands for its runs. :func:`load_run` reads

* the **summary** when there is one; the per-iteration scalars come from ``scalars.csv`` when the run
  has one (:func:`read_scalars_csv`), else from the summary's history; validation points between start
  and end (``trainer.val_every``) are the ``val/*`` scalars (else read from ``tb/`` when it exists);
* else the **TensorBoard events**: the per-iteration scalars under their history names
  (``rollout/success``, ``timing/update``, ``collapse/...``), the validation scalars ``val/<stat>``;
  the config then comes from ``.hydra/config.yaml`` (interpolations such as ``${oc.env:...}``
  kept as their text, never resolved), else is empty.

Only JSON, YAML and TensorBoard event files are read: a report never unpickles a checkpoint, so a
run dir from elsewhere cannot run code in it. What is read stays inside the run dir (a symlink that
leads out of it, ``.hydra/config.yaml -> ~/.ssh/id_rsa``, is refused), within size limits
(:data:`MAX_SUMMARY_BYTES`, :data:`~ragen_torchrl.safe_io.MAX_YAML_BYTES`), YAML without aliases
and with bounded nodes (:func:`~ragen_torchrl.safe_io.load_yaml_bounded`); a ``summary.json`` field of
the wrong type (``"val_end": "x"``, a history iteration ``"one"``, ``"provenance": 3``) is a
:class:`RunError` naming the file and the field. Anything under ``tb/`` named like an event file but
not a file is skipped with a warning.

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
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..safe_io import MAX_YAML_BYTES, UnsafeFileError, inside, load_yaml_bounded, read_bytes_inside

__all__ = [
    "Run",
    "RunError",
    "find_runs",
    "is_result_set",
    "is_run_dir",
    "load_run",
    "load_runs",
    "read_scalars_csv",
    "result_set_runs",
]

#: the per-iteration scalars of a run: ``iteration,<tag>,...``, tags sorted, empty cell = not logged
SCALARS_CSV = "scalars.csv"
#: bytes of a ``summary.json`` or ``scalars.csv`` that is read
MAX_SUMMARY_BYTES = 256 << 20

log = logging.getLogger(__name__)


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
        source: ``"summary.json"``, ``"summary.json + scalars.csv"`` or ``"tensorboard"``.
        summary: the rest of ``summary.json`` (totals, provenance, ...), ``{}`` without one.

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
    summary: dict[str, Any] = field(default_factory=dict)

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
    def start_success(self) -> float | None:
        """Validation success before training (``None`` when not measured)."""
        pts = self.val_series()
        return pts[0][1] if pts and pts[0][0] == 0 else None

    @property
    def final_success(self) -> float | None:
        """The last validation success (``None`` when never measured)."""
        pts = self.val_series()
        return pts[-1][1] if pts else None


def _has_train(values: Mapping[str, Any]) -> bool:
    return any(not k.startswith(("val/", "stop/")) for k in values)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _event_files(run_dir: Path) -> list[Path]:
    """The event files under ``tb/``: regular files inside the run dir (a dir named like one is skipped)."""
    tb = run_dir / "tb"
    if not tb.is_dir():
        return []
    out = []
    for f in sorted(tb.rglob("events.out.tfevents*")):
        if not f.is_file():
            log.warning("%s: named like a TensorBoard event file but not a file; skipped", f)
            continue
        try:
            out.append(inside(f, run_dir))
        except UnsafeFileError as e:
            raise RunError(str(e)) from None
    return out


def _read_inside(path: Path, run_dir: Path, limit: int) -> bytes:
    try:
        return read_bytes_inside(path, run_dir, limit)
    except UnsafeFileError as e:
        raise RunError(str(e)) from None
    except OSError as e:
        raise RunError(f"{path}: unreadable ({e.strerror or e})") from None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_summary(summary: Mapping[str, Any], path: Path) -> None:
    """Every field the report reads has the type the trainer writes, else :class:`RunError` naming it.

    Example:
        >>> _check_summary({"config": {}, "val_end": {"success": 0.5}, "history": [{"iteration": 1}]}, Path("s.json"))
        >>> for bad in ({"val_end": "x"}, {"history": [{"iteration": "one"}]}, {"provenance": {"git": {"commit": 7}}}):
        ...     try:
        ...         _check_summary(bad, Path("s.json"))
        ...     except RunError as e:
        ...         print(e)
        s.json: field 'val_end': of type str, expected an object of validation stats or null
        s.json: field 'history[0].iteration': 'one' is not an integer
        s.json: field 'provenance.git.commit': of type int, expected a string or null
    """

    def bad(field: str, why: str) -> RunError:
        return RunError(f"{path}: field {field!r}: {why}")

    def mapping(value: Any, field: str, what: str) -> Mapping:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise bad(field, f"of type {type(value).__name__}, expected {what} or null")
        return value

    for key in ("val_start", "val_end", "val_peak"):
        mapping(summary.get(key), key, "an object of validation stats")
    history = summary.get("history")
    if history is not None and not isinstance(history, list):
        raise bad("history", f"of type {type(history).__name__}, expected a list of per-iteration objects")
    for i, h in enumerate(history or []):
        if isinstance(h, Mapping) and "iteration" in h:
            it = h["iteration"]
            if not _number(it) or not math.isfinite(it) or it != int(it) or abs(it) > 1 << 62:
                raise bad(f"history[{i}].iteration", f"{it!r} is not an integer"[:200])
    for key in ("iterations", "seconds"):
        v = summary.get(key)
        if v is not None and (not _number(v) or not math.isfinite(v) or abs(v) > 1 << 62):
            raise bad(key, f"{v!r} is not a finite number"[:200])
    prov = mapping(summary.get("provenance"), "provenance", "an object")
    git = mapping(prov.get("git"), "provenance.git", "an object")
    if git.get("commit") is not None and not isinstance(git["commit"], str):
        raise bad("provenance.git.commit", f"of type {type(git['commit']).__name__}, expected a string or null")
    mapping(prov.get("versions"), "provenance.versions", "an object")
    mapping(prov.get("machine"), "provenance.machine", "an object")
    for key in ("load_start", "load_end"):
        v = prov.get(key)
        if v is not None and not (isinstance(v, list) and v and all(_number(x) and math.isfinite(x) for x in v)):
            raise bad(f"provenance.{key}", "expected a list of load averages or null")
    for name, phase in mapping(summary.get("phases"), "phases", "an object of phases").items():
        for k, v in mapping(phase, f"phases.{name}", "an object {wall, cpu}").items():
            if v is not None and not (_number(v) and math.isfinite(v)):
                raise bad(f"phases.{name}.{k}", f"{v!r} is not a finite number"[:200])
    mapping(summary.get("totals"), "totals", "an object of totals")


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a ``summary.json`` or TensorBoard events under ``tb/``.

    Example:
        >>> import tempfile
        >>> is_run_dir(tempfile.mkdtemp())
        False
    """
    p = Path(path)
    return p.is_dir() and ((p / "summary.json").is_file() or bool(_event_files(p)))


def is_result_set(path: str | Path) -> bool:
    """Whether ``path`` is a result set: a folder with a ``runs/`` folder of run dirs.

    Example:
        >>> import tempfile
        >>> is_result_set(tempfile.mkdtemp())
        False
    """
    runs = Path(path) / "runs"
    return runs.is_dir() and any(is_run_dir(q) for q in runs.iterdir())


def result_set_runs(path: str | Path) -> list[Path]:
    """The run dirs of a result set sorted by name, or ``[path]`` when ``path`` is itself a run dir.

    Raises :class:`RunError` when it is neither.

    Example:
        >>> import tempfile
        >>> try:
        ...     result_set_runs(tempfile.mkdtemp())
        ... except RunError as e:
        ...     print(str(e).endswith("nor a run dir"))
        True
    """
    p = Path(path)
    if is_result_set(p):
        return sorted(q for q in (p / "runs").iterdir() if is_run_dir(q))
    if is_run_dir(p):
        return [p]
    raise RunError(f"{p} is not a result set (no run dirs under {p / 'runs'}) nor a run dir")


def find_runs(paths: list[str | Path]) -> list[Path]:
    """The run dirs named by ``paths``; a Hydra sweep dir (with ``multirun.yaml``) or a result set
    (with ``runs/``) stands for its runs.

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
        elif is_result_set(p):
            out.extend(result_set_runs(p))
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


def read_scalars_csv(path: str | Path, root: str | Path | None = None) -> dict[int, dict[str, float]]:
    """``{iteration: {tag: value}}`` from a ``scalars.csv`` (header ``iteration,<tag>,...``; an empty cell
    is a tag not logged at that iteration). Raises :class:`RunError` naming the file, line and column;
    a file resolving outside ``root`` (default: its folder) or over :data:`MAX_SUMMARY_BYTES` is refused.

    Example:
        >>> import tempfile
        >>> f = Path(tempfile.mkdtemp()) / "scalars.csv"
        >>> _ = f.write_text("iteration,train/success,val/success\\n1,0.25,\\n2,0.5,0.75\\n")
        >>> read_scalars_csv(f)
        {1: {'train/success': 0.25}, 2: {'train/success': 0.5, 'val/success': 0.75}}
    """
    import csv
    import io

    path = Path(path)
    raw = _read_inside(path, Path(root) if root is not None else path.parent, MAX_SUMMARY_BYTES)
    try:
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error) as e:
        raise RunError(f"{path}: unreadable ({' '.join(str(e).split())[:200]})") from None
    if not rows or not rows[0] or rows[0][0] != "iteration":
        raise RunError(f"{path}: line 1: the header must start with 'iteration'")
    tags = rows[0][1:]
    out: dict[int, dict[str, float]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(rows[0]):
            raise RunError(f"{path}: line {line}: {len(row)} cells, the header has {len(rows[0])}")
        try:
            it = int(row[0])
        except ValueError:
            raise RunError(f"{path}: line {line}: iteration {row[0]!r} is not an integer") from None
        values = out.setdefault(it, {})
        for tag, cell in zip(tags, row[1:]):
            if cell == "":
                continue
            try:
                values[tag] = float(cell)
            except ValueError:
                raise RunError(f"{path}: line {line}: {tag} = {cell!r} is not a number") from None
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

    raw = _read_inside(hydra_cfg, run_dir, MAX_YAML_BYTES)
    try:
        cfg = load_yaml_bounded(raw.decode("utf-8"), hydra_cfg)
    except UnsafeFileError as e:
        raise RunError(str(e)) from None
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        raise RunError(f"{hydra_cfg}: unreadable config ({' '.join(str(e).split())[:200]})") from None
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
        raw = _read_inside(summary_file, run_dir, MAX_SUMMARY_BYTES)
        try:
            summary = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            raise RunError(f"{summary_file}: unreadable summary ({' '.join(str(e).split())[:200]})") from None
        if not isinstance(summary, Mapping):
            raise RunError(f"{summary_file}: not a run summary (a JSON object is expected)")
        if not isinstance(summary.get("config") or {}, Mapping):
            raise RunError(f"{summary_file}: its config is a {type(summary['config']).__name__}, not a mapping")
        _check_summary(summary, summary_file)
        config = dict(summary.get("config") or {})
        history = [dict(h) for h in summary.get("history") or [] if isinstance(h, Mapping) and "iteration" in h]
        source = "summary.json"
        if (run_dir / SCALARS_CSV).is_file():
            rows = read_scalars_csv(run_dir / SCALARS_CSV, root=run_dir)
            history = [{"iteration": it, **rows[it]} for it in sorted(rows) if it > 0 or _has_train(rows[it])]
            source = "summary.json + scalars.csv"
        planned = _iterations(config) or summary.get("iterations")  # the summary's count is what ran
        rest = {k: v for k, v in summary.items() if k not in ("config", "history")}
        run = Run(run_dir, config, history, [], planned, source, rest)
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
