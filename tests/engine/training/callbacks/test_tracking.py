"""MLflow and SwanLab beside TensorBoard: the config, each epoch's results.csv row and the
run's pictures, read back from what each tracker's local store holds."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest
import yaml

from msdet.common.config import load_config
from msdet.engine.training.callbacks.tracking import (
    MlflowTracking,
    SwanlabTracking,
    config_params,
    epoch_metrics,
)
from msdet.engine.training.run_record import COLUMNS, write_results
from tests.support.training import train_state

FINAL = {"mAP": 0.31, "mAP50": 0.52, "mAP75": 0.28}


def row(epoch: int, evaluated: bool) -> dict:
    """An epoch's results.csv row: loss terms falling, mAP where evaluated (NaN else)."""
    values = {c: 10.0 / (epoch + i) for i, c in enumerate(COLUMNS)}
    values["epoch"] = epoch
    for key in ("mAP", "mAP50", *(c for c in COLUMNS if c.startswith("val_loss_"))):
        values[key] = 0.2 * epoch if evaluated else math.nan
    return values


def finished_run(tmp_path):
    """A run folder under ``<tmp>/train`` as a 2-epoch run leaves it (epoch 2 evaluated):
    results.csv/png, the val grid, a plot and metrics.json; and the config it ran."""
    run_dir = tmp_path / "train" / "exp3"
    run_dir.mkdir(parents=True)
    rows = [row(1, False), row(2, True)]
    write_results(rows, str(run_dir))
    picture = np.zeros((48, 64, 3), np.uint8)
    cv2.rectangle(picture, (8, 8), (40, 30), (0, 200, 255), -1)
    cv2.imwrite(str(run_dir / "val_predictions.jpg"), picture)
    cv2.imwrite(str(run_dir / "confusion_matrix.png"), picture[::-1])
    (run_dir / "metrics.json").write_text(json.dumps(FINAL))
    cfg = load_config("train", ["train.epochs=2", "train.track=mlflow,swanlab"])
    from omegaconf import OmegaConf

    return run_dir, rows, OmegaConf.to_container(cfg, resolve=True)


def drive(tracker, rows) -> None:
    """The calls a 2-epoch run makes: begin, each epoch's end (epoch 2 evaluated), and the
    final evaluation's metrics."""
    tracker.on_train_begin(None)
    for r in rows:
        tracker.state.history.append(r)
        tracker.state.evaluated = not math.isnan(r["mAP"])
        tracker.end_epoch(r["epoch"], None)
    tracker.finished(FINAL)


def test_the_config_and_an_epochs_row_as_a_tracker_takes_them():
    params = config_params({"train": {"epochs": 7, "track": ["mlflow"]}, "ckpt": None})
    assert params == {"train.epochs": "7", "train.track": "['mlflow']", "ckpt": "None"}
    metrics = epoch_metrics({"epoch": 3, "loss_total": 8.5, "mAP": math.nan, "lr": 0.01})
    assert metrics == {"loss_total": 8.5, "lr": 0.01}


@pytest.mark.slow  # MLflow's first store creates its database (seconds)
def test_mlflow_holds_the_config_the_rows_and_the_pictures(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow is not installed here: pip install mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir, rows, cfg = finished_run(tmp_path)
    tracker = MlflowTracking(train_state(epochs=2), cfg, str(run_dir))
    drive(tracker, rows)
    uri = f"sqlite:///{tmp_path / 'train' / 'mlflow.db'}"
    assert tracker.uri == uri  # beside the run folders
    client = MlflowClient(uri)
    run = client.get_run(tracker.run_id)
    assert (run.info.run_name, run.info.status) == ("exp3", "FINISHED")
    assert run.data.params["train.epochs"] == "2"
    assert run.data.params["model.name"] == "yolox_nano"
    assert run.data.tags["msdet_run_dir"] == str(run_dir)

    def history(key):
        return [(m.step, m.value) for m in client.get_metric_history(tracker.run_id, key)]

    assert history("loss_total") == [(1, rows[0]["loss_total"]), (2, rows[1]["loss_total"])]
    assert history("mAP") == [(2, pytest.approx(0.4))]  # epoch 1 was not evaluated
    assert history("final_mAP50") == [(2, pytest.approx(0.52))]
    pictures = {a.path for a in client.list_artifacts(tracker.run_id, "pictures")}
    assert pictures == {"pictures/results.png", "pictures/val_predictions.jpg",
                        "pictures/confusion_matrix.png"}  # fmt: skip
    top = {a.path for a in client.list_artifacts(tracker.run_id)}
    assert "metrics.json" in top and "images" in top  # the val grid of epoch 2, by step
    local = tmp_path / "train" / "mlflow-artifacts"
    (grid,) = local.glob(f"{tracker.run_id}/artifacts/images/val_predictions+step+2+*.png")
    assert cv2.imread(str(grid)).shape == (48, 64, 3)

    # A run that ends without its final evaluation (an error, a signal) is closed as failed.
    again = MlflowTracking(train_state(epochs=2), cfg, str(run_dir))
    again.on_train_begin(None)
    again._close_failed()
    assert client.get_run(again.run_id).info.status == "FAILED"


@pytest.mark.slow
def test_swanlab_offline_holds_the_config_the_rows_and_the_pictures(tmp_path):
    pytest.importorskip(
        "swanlab",
        reason="swanlab is not installed here: pip install 'swanlab<0.6.5' (later releases "
        "need protobuf<7, which MindSpore 2.10 cannot load)",
    )
    from swanlab.log.backup.datastore import DataStore

    run_dir, rows, cfg = finished_run(tmp_path)
    tracker = SwanlabTracking(train_state(epochs=2), cfg, str(run_dir))
    drive(tracker, rows)
    (folder,) = (tmp_path / "train" / "swanlog").glob("run-*")
    store = DataStore()
    store.open_for_scan(str(folder / "backup.swanlab"))
    records = []
    while (text := store.scan()) is not None:
        records.append(json.loads(text))
    scalars: dict[str, list] = {}
    for r in records:
        if r["model_type"] == "Scalar":
            scalars.setdefault(r["data"]["key"], []).append(
                (r["data"]["step"], r["data"]["metric"]["data"])
            )
    assert scalars["loss_total"] == [(1, rows[0]["loss_total"]), (2, rows[1]["loss_total"])]
    assert scalars["mAP"] == [(2, pytest.approx(0.4))]
    assert scalars["final_mAP"] == [(2, pytest.approx(0.31))]
    images = {r["data"]["key"] for r in records if r["model_type"] == "Column"
              and r["data"]["column_type"] == "IMAGE"}  # fmt: skip
    assert images == {"pictures/val_predictions", "pictures/results",
                      "pictures/confusion_matrix"}  # fmt: skip
    experiment = next(r["data"] for r in records if r["model_type"] == "Experiment")
    assert experiment["name"] == "exp3"
    config = yaml.safe_load((folder / "files" / "config.yaml").read_text())
    assert config["train"]["value"]["epochs"] == 2
    assert config["model"]["value"]["name"] == "yolox_nano"
    assert len(list((folder / "media").rglob("*.png"))) >= 3
