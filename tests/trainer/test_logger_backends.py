"""``logger.backend``: each of torchrl's logger types gets the default run's scalars, its hyperparameters once,
and the text samples under the same tags; what a backend cannot store is skipped, not a crash.

Each backend's smoke run is the one-iteration ``trainer=smoke`` run of ``test_eval_cli.py``; what the
backend wrote is read back with that backend's own reader (CSV files, the W&B offline run file,
MLflow's client, TensorBoard's event reader) and compared with ``scalars.csv``.
"""

from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path

import pytest
import torch
from test_eval_cli import make_cfg

from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.loop import Trainer
from ragen_torchrl.trainer.run_log import SCALARS_FILE, RunLog, make_backend_logger, read_scalars_csv

pytestmark = pytest.mark.slow


def needs(package: str):
    return pytest.mark.skipif(
        importlib.util.find_spec(package) is None, reason=f"{package} is not installed (pip install -e '.[test]')"
    )


def smoke(cache_dir: str, run_dir: Path, backend: str) -> dict:
    torch.manual_seed(0)
    return Trainer(make_cfg(cache_dir, f"logger.backend={backend}", "trainer.log_text_samples=1"), run_dir).fit()


def wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B run file (``run-*.wandb``): LevelDB's log format (32 KiB blocks, 7-byte record
    headers: CRC, length, type full/first/middle/last) after W&B's 7-byte file header; read here
    because wandb ships no public reader of offline runs."""
    data, block, out, part, pos = path.read_bytes(), 32768, [], b"", 7
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            continue
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            out.append(part)
    return out


def same(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]]) -> bool:
    """Equal scalars (nan equal to nan), step by step and tag by tag."""
    return a.keys() == b.keys() and all(
        a[s].keys() == b[s].keys()
        and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in ((a[s][t], b[s][t]) for t in a[s]))
        for s in a
    )


def test_csv_backend_writes_every_scalar_the_text_samples_and_the_hparams(ragen_cache_dir, tmp_path):
    run = tmp_path / "run"
    smoke(ragen_cache_dir, run, "csv")
    expected = read_scalars_csv(run / SCALARS_FILE)
    got: dict[int, dict[str, float]] = {}
    root = run / "csv" / "scalars"
    for f in root.rglob("*.csv"):
        tag = f.relative_to(root).with_suffix("").as_posix()
        if tag.startswith("hparams/"):  # the final metrics, logged once with the hparams
            continue
        for line in f.read_text().splitlines():
            step, value = line.split(",")
            got.setdefault(int(step), {})[tag] = float(value)
    print(f"{sum(map(len, expected.values()))} scalars at steps {sorted(expected)}")
    assert expected and "train/loss" in expected[1] and "val/success" in expected[0]
    assert same(got, expected)
    assert (run / "csv" / "texts" / "val" / "conversation_00.txt").is_file()
    hparams = (run / "csv" / "texts" / "hparams0.txt").read_text()
    assert "logger.backend: csv" in hparams and "trainer.total_iterations: 1" in hparams
    assert (root / "hparams" / "val_success_end.csv").is_file()
    assert not (run / "tb").exists()


@needs("wandb")
def test_wandb_backend_offline_writes_every_scalar(ragen_cache_dir, tmp_path, monkeypatch):
    import json

    from wandb.proto import wandb_internal_pb2

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    smoke(ragen_cache_dir, run, "wandb")
    (run_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    for _ in range(120):  # wandb's core process may still be writing the run's last records after finish()
        kinds = set()
        for data in wandb_records(run_file):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(data)
            kinds.add(rec.WhichOneof("record_type"))
        if "config" in kinds:
            break
        time.sleep(0.5)
    got: dict[int, dict[str, float]] = {}
    config: dict[str, str] = {}
    texts = []
    for data in wandb_records(run_file):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item}
            for tag, value in row.items():
                if tag.endswith("step") or tag.startswith("_"):
                    continue
                step_key = tag.rpartition("/")[0] + "/step"
                if isinstance(value, str):
                    texts.append(tag)
                elif isinstance(value, (int, float)) or value is None:
                    got.setdefault(int(row[step_key]), {})[tag] = math.nan if value is None else float(value)
        elif kind == "config":
            config.update({item.key or ".".join(item.nested_key): item.value_json for item in rec.config.update})
    expected = read_scalars_csv(run / SCALARS_FILE)
    assert same(got, expected)
    assert "val/conversation_0" in texts
    assert config["logger.backend"] == '"wandb"' and config["trainer.total_iterations"] == "1"


@needs("mlflow")
def test_mlflow_backend_local_store_writes_every_scalar_and_the_params(ragen_cache_dir, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = tmp_path / "run"
    smoke(ragen_cache_dir, run, "mlflow")
    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    (mlrun,) = client.search_runs([client.get_experiment_by_name("ragen_torchrl").experiment_id])
    expected = read_scalars_csv(run / SCALARS_FILE)
    got: dict[int, dict[str, float]] = {}
    for tag in {t for row in expected.values() for t in row}:
        for m in client.get_metric_history(mlrun.info.run_id, tag):
            got.setdefault(m.step, {})[tag] = m.value
    assert same(got, expected)
    assert mlrun.data.params["logger.backend"] == "mlflow"
    assert "hparams/val_success_end" in mlrun.data.metrics
    artifacts = [a.path for a in client.list_artifacts(mlrun.info.run_id, "text/val/conversation_0")]
    assert artifacts == ["text/val/conversation_0/step_0.txt", "text/val/conversation_0/step_1.txt"]


def test_tensorboard_stays_the_default(ragen_cache_dir):
    assert validate_config(make_cfg(ragen_cache_dir)).logger.backend == "tensorboard"


def test_a_backend_without_images_or_histograms_skips_them(tmp_path, caplog):
    log = RunLog(make_backend_logger("csv", tmp_path), "csv")
    with caplog.at_level("INFO", logger="ragen_torchrl.trainer.run_log"):
        for step in (1, 2):
            log.add_image("val/episode_0/final", torch.zeros(3, 2, 2, dtype=torch.uint8), global_step=step)
            log.log_histogram("grad", torch.ones(4), step=step)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "logger.backend=csv stores no images: they are not logged",
        "logger.backend=csv stores no histograms: they are not logged",
    ]


def test_an_unknown_or_missing_backend_is_a_config_error(ragen_cache_dir, monkeypatch):
    with pytest.raises(ConfigError, match="logger.backend must be one of tensorboard, csv, wandb, mlflow, trackio"):
        validate_config(make_cfg(ragen_cache_dir, "logger.backend=neptune"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    with pytest.raises(ConfigError, match=r"logger.backend=trackio needs the trackio package: pip install trackio"):
        validate_config(make_cfg(ragen_cache_dir, "logger.backend=trackio"))
