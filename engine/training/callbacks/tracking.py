"""Experiment trackers beside TensorBoard: MLflow and SwanLab, chosen with ``train.track``
(optional packages: ``pip install msdet[tracking]``).

Each tracker records a run as TensorBoard and results.csv do: the composed config as its
parameters (once), each epoch's row of results.csv as metrics (step: the epoch), the val
grid at each evaluation, and, once the final evaluation of best.ckpt is written, its metrics
(``final_*``) and the run's pictures (results.png, val_predictions.jpg, the confusion
matrix and the PR/P/R/F1 curves) with metrics.json. Rank 0 only (``engine.training.hooks``).

Where they write: MLflow to ``train.mlflow_uri`` (null: ``$MLFLOW_TRACKING_URI``, else a
SQLite store beside the run folders, ``<runs>/train/mlflow.db``, its artifacts in
``<runs>/train/mlflow-artifacts``: ``mlflow ui --backend-store-uri sqlite:///...`` shows
them); SwanLab in ``train.swanlab_mode`` (offline: ``<runs>/train/swanlog``, which
``swanlab sync`` uploads). The tracker's run is named after the run folder; a resumed run
opens a new one, tagged with the epoch it resumed from.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import time
from typing import Any

from msdet.engine.evaluation.plots import FILES as PLOT_FILES
from msdet.engine.evaluation.plots import VAL_PREDICTIONS_FILE as VAL_GRID
from msdet.engine.training.callbacks.base import RECORD, EpochCallback, TrainState
from msdet.engine.training.run_record import RESULTS_PNG

log = logging.getLogger("train")

# The run folder's pictures, logged once the final evaluation wrote them.
PICTURES = (RESULTS_PNG, VAL_GRID, *PLOT_FILES.values())
FINAL_METRICS = ("mAP", "mAP50", "mAP75")
MLFLOW_BATCH = 100  # MLflow takes at most 100 parameters per call


def tracker_folder(run_dir: str) -> str:
    """The folder that holds the run folder (``runs/train``): the trackers' local stores
    live there, beside the runs they compare."""
    return os.path.dirname(os.path.abspath(run_dir))


def config_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The composed config as flat ``key: text`` parameters (``train.epochs: "7"``)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(config_params(value, name))
        else:
            out[name] = str(value)
    return out


def epoch_metrics(row: dict[str, Any]) -> dict[str, float]:
    """An epoch's row of results.csv as metrics: every number but the epoch, NaN (not
    evaluated) left out."""
    return {
        k: float(v)
        for k, v in row.items()
        if k != "epoch" and isinstance(v, (int, float)) and math.isfinite(float(v))
    }


class TrackerCallback(EpochCallback):
    """What every tracker does when (module docstring); each tracker says how, in its
    ``open(run_name, start_epoch)``, ``log_metrics(values, step)``, ``log_picture(key,
    path, step)``, ``log_file(path, folder)``, ``close(status)`` and ``where()`` (a phrase
    for the log). Reads the row ``EpochSummary`` appended, as TensorBoard does."""

    phase = RECORD
    name = ""

    def __init__(self, state: TrainState, cfg: dict[str, Any], run_dir: str):
        super().__init__(state)
        self.config = cfg  # the composed config, resolved, as a plain dict
        self.run_dir = run_dir
        self.opened = False

    def on_train_begin(self, run_context: Any) -> None:
        self.start()

    def start(self) -> None:
        """Open the tracker's run and record the config; a run ended without
        :meth:`finished` (an error, a signal) is closed as failed when the process exits."""
        if self.opened:
            return
        self.open(os.path.basename(os.path.abspath(self.run_dir)), self.state.start_epoch)
        self.opened = True
        atexit.register(self._close_failed)
        log.info("%s: %s", self.name, self.where())

    def end_epoch(self, epoch: int, run_context: Any) -> None:
        row = self.state.history[-1] if self.state.history else None
        if row is None or self.state.failure or not self.opened:  # as ResultsCallback
            return
        self.log_metrics(epoch_metrics(row), epoch)
        grid = os.path.join(self.run_dir, VAL_GRID)
        if self.state.evaluated and os.path.isfile(grid):
            self.log_picture("val_predictions", grid, epoch)

    def finished(self, metrics: dict[str, Any] | None) -> None:
        """The run ended and its final evaluation is written: its metrics, the pictures,
        metrics.json; the tracker's run closes as finished."""
        if not self.opened:
            return
        step = self.state.history[-1]["epoch"] if self.state.history else self.state.epochs
        final = {f"final_{k}": float(metrics[k]) for k in FINAL_METRICS if k in (metrics or {})}
        if final:
            self.log_metrics(final, step)
        for name in PICTURES:
            path = os.path.join(self.run_dir, name)
            if os.path.isfile(path):
                self.log_file(path, "pictures")
        metrics_file = os.path.join(self.run_dir, "metrics.json")
        if os.path.isfile(metrics_file):
            self.log_file(metrics_file, "")
        self.close("FINISHED")
        self.opened = False
        atexit.unregister(self._close_failed)

    def _close_failed(self) -> None:
        if self.opened:
            self.close("FAILED")
            self.opened = False


class MlflowTracking(TrackerCallback):
    """MLflow, through its client (no global active run): ``train.mlflow_uri``,
    ``train.track_project`` as the experiment."""

    name = "mlflow"

    def __init__(self, state: TrainState, cfg: dict[str, Any], run_dir: str):
        super().__init__(state, cfg, run_dir)
        train = cfg["train"]
        self.project = str(train["track_project"])
        self.local = None
        uri = train.get("mlflow_uri") or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            self.local = tracker_folder(run_dir)
            uri = "sqlite:///" + os.path.join(self.local, "mlflow.db")
        self.uri = str(uri)

    def where(self) -> str:
        return f"run {self.run_id} of experiment {self.project} at {self.uri}"

    def open(self, run_name: str, start_epoch: int) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(self.uri)
        found = self.client.get_experiment_by_name(self.project)
        if found is not None:
            experiment = found.experiment_id
        else:
            artifacts = None
            if self.local is not None:  # a local store keeps its files beside it
                artifacts = "file://" + os.path.join(self.local, "mlflow-artifacts")
            experiment = self.client.create_experiment(self.project, artifact_location=artifacts)
        tags = {"msdet_run_dir": os.path.abspath(self.run_dir)}
        if start_epoch:
            tags["msdet_resumed_after_epoch"] = str(start_epoch)
        self.run_id = self.client.create_run(experiment, run_name=run_name, tags=tags).info.run_id
        params = [Param(k, v[:6000]) for k, v in config_params(self.config).items()]
        for i in range(0, len(params), MLFLOW_BATCH):
            self.client.log_batch(self.run_id, params=params[i : i + MLFLOW_BATCH])

    def log_metrics(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, int(step)) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def log_picture(self, key: str, path: str, step: int) -> None:
        import cv2

        image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
        self.client.log_image(self.run_id, image, key=key, step=int(step))

    def log_file(self, path: str, folder: str) -> None:
        self.client.log_artifact(self.run_id, path, artifact_path=folder or None)

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status)


class SwanlabTracking(TrackerCallback):
    """SwanLab in ``train.swanlab_mode`` (offline by default), ``train.track_project`` as
    the project."""

    name = "swanlab"

    def __init__(self, state: TrainState, cfg: dict[str, Any], run_dir: str):
        super().__init__(state, cfg, run_dir)
        train = cfg["train"]
        self.project = str(train["track_project"])
        self.mode = str(train["swanlab_mode"])
        self.logdir = os.path.join(tracker_folder(run_dir), "swanlog")

    def where(self) -> str:
        return f"project {self.project}, {self.mode} mode, logs in {self.logdir}"

    def open(self, run_name: str, start_epoch: int) -> None:
        import swanlab

        self.swanlab = swanlab
        tags = [f"resumed after epoch {start_epoch}"] if start_epoch else None
        # msdet's console stays its own (no console capture); no pip freeze at start.
        settings = swanlab.Settings(log_proxy_type="none", requirements_collect=False)
        self.run = swanlab.init(project=self.project, experiment_name=run_name,
                                config=self.config, mode=self.mode, logdir=self.logdir,
                                tags=tags, settings=settings)  # fmt: skip

    def log_metrics(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=int(step))

    def log_picture(self, key: str, path: str, step: int) -> None:
        self.run.log({f"pictures/{key}": self.swanlab.Image(path)}, step=int(step))

    def log_file(self, path: str, folder: str) -> None:
        if path.endswith((".png", ".jpg")):  # SwanLab keeps media, not files
            step = self.state.history[-1]["epoch"] if self.state.history else 0
            key = os.path.splitext(os.path.basename(path))[0]
            self.run.log({f"{folder or 'files'}/{key}": self.swanlab.Image(path)}, step=int(step))

    def close(self, status: str) -> None:
        from swanlab.data import State

        if status == "FINISHED":
            self.swanlab.finish(State.SUCCESS)
        else:
            self.swanlab.finish(State.CRASHED, error=f"the run ended without its final "
                                                    f"evaluation ({status})")  # fmt: skip


TRACKERS = {"mlflow": MlflowTracking, "swanlab": SwanlabTracking}
