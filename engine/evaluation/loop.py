"""The evaluation loop: a network and its NMS over a val dataset, the detections gathered
from every rank, scored with pycocotools (:class:`~msdet.engine.evaluation.coco.CocoEvaluator`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from msdet.engine.evaluation.coco import CocoEvaluator
from msdet.engine.evaluation.detections import relabel_detections
from msdet.engine.evaluation.speed import SpeedMeter


class RankGather:
    """Concatenates equally shaped numpy arrays from every rank (``ops.AllGather`` in a
    graph), rank 0's rows first. Every rank must call it with the same shapes."""

    def __init__(self):
        import mindspore as ms
        from mindspore import nn, ops

        class _Gather(nn.Cell):
            def __init__(self):
                super().__init__()
                self.gather = ops.AllGather()

            def construct(self, *arrays):
                return tuple(self.gather(a) for a in arrays)

        self._ms = ms
        self._cell = _Gather()

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        outs = self._cell(*(self._ms.Tensor(np.ascontiguousarray(a)) for a in arrays))
        return [o.asnumpy() for o in outs]


def to_host(array: Any) -> np.ndarray:
    """A Tensor's values, or an array as it is (``ops.nms.HostNMS`` returns numpy)."""
    return array.asnumpy() if hasattr(array, "asnumpy") else np.asarray(array)


def _wait_for(outputs: Any) -> None:
    """Block until a network's outputs (a Tensor, arrays, or a tuple of them) are ready."""
    for out in outputs if isinstance(outputs, (tuple, list)) else (outputs,):
        if hasattr(out, "asnumpy"):
            out.asnumpy()


def evaluate_on_dataset(
    detector: Any,
    nms: Any,
    dataset: Any,
    source: Any,
    out_dir: str | None,
    keep_images: int = 0,
    gather: RankGather | None = None,
    verbose: bool = True,
    plots: bool = False,
    labels: Sequence[int] | None = None,
    val_loss: Any = None,
) -> tuple[dict[str, Any] | None, list[tuple[int, np.ndarray, int, float]]]:
    """Run ``detector`` (decoded predictions; or an exported file's outputs,
    ``engine.inference.exported``) and ``nms`` over an eval dataset and score it.

    ``dataset`` yields ``(images, index, scale)`` batches (``data.pipeline.build_eval_dataset``);
    ``source`` is its :class:`data.coco.CocoSource`. The first batch is a warm-up for the
    speed line (graph compilation must not count). The rank given an ``out_dir`` shows the
    progress over the batches (``common.progress``). Returns the metrics (see
    :meth:`CocoEvaluator.evaluate`) and, for the first ``keep_images`` images, tuples
    ``(source index, dets, count, scale)`` for drawing. ``verbose``: print the summary
    (it is written to ``coco_summary.txt`` either way); ``plots``: the evaluation plots too
    (:meth:`CocoEvaluator.evaluate`). ``labels``: the dataset's class of each of the
    network's (:func:`~msdet.models.description.class_label_map`; -1: not scored); None:
    the network's classes are the dataset's. ``val_loss``: a
    :class:`~msdet.engine.evaluation.val_loss.ValidationLoss` given each batch's predictions
    (not on the speed line's clock); its means become ``metrics["val_loss"]``.

    Several ranks: each evaluates its shard of the val set (``build_eval_dataset(...,
    rank, world_size)``), ``gather`` brings every rank's detections together, and the rank
    given an ``out_dir`` scores them; the others return ``None`` metrics. Detections are
    scored in source order, so the result equals one process evaluating the whole set.
    """
    import mindspore as ms  # the evaluator's numpy parts stay importable without it

    from msdet.common.progress import Progress
    from msdet.data.pipeline import source_position

    speed = SpeedMeter()
    kept: list[tuple[int, np.ndarray, int, float]] = []
    rows: dict[str, list[np.ndarray]] = {"index": [], "dets": [], "counts": [], "scale": []}
    iterator = dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)
    bar = Progress(
        dataset.get_dataset_size(), "evaluation", "batch", 10, mode=None if out_dir else "off"
    )
    first = True
    while True:
        with speed.measure("data_wait"):  # pre-processing itself runs in the pipeline
            batch = next(iterator, None)
        if batch is None:
            break
        images, index, scale = batch
        with speed.measure("inference"):
            preds = detector(ms.Tensor(images))
            _wait_for(preds)
        if val_loss is not None:
            val_loss.add(preds, index, scale)
        with speed.measure("nms"):
            dets, counts = (to_host(t) for t in nms(preds))
        if labels is not None:
            dets, counts = relabel_detections(dets, counts, labels)
        unreadable = index <= -2  # an image without detections: its ground truth counts
        counts = np.where(unreadable, 0, counts)
        index = source_position(index)
        real = index >= 0
        if first:  # warm-up: compilation of both graphs happened here
            speed.reset()
            first = False
        speed.add_images(int(real.sum()))
        for key, value in zip(rows, (index, dets, counts, scale)):
            rows[key].append(value)
        drawable = real & ~unreadable
        for i, d, c, s in zip(index[drawable], dets[drawable], counts[drawable], scale[drawable]):
            if len(kept) < keep_images:
                kept.append((int(i), d, int(c), float(s)))
        bar.update()
    bar.close()
    index, dets, counts, scale = (np.concatenate(v) for v in rows.values())
    if gather is not None:
        index, dets, counts, scale = gather(
            index.astype(np.int32), dets.astype(np.float32), counts.astype(np.int32), scale
        )
    if out_dir is None:
        return None, kept
    order = np.argsort(np.where(index >= 0, index, np.iinfo(np.int32).max), kind="stable")
    order = order[index[order] >= 0]
    infos = [source.image_info(int(i)) for i in index[order]]
    evaluator = CocoEvaluator(source.coco, source.category_ids, source.class_names, out_dir)
    evaluator.update(
        dets[order],
        counts[order],
        [info["id"] for info in infos],
        scale[order],
        np.array([[info["height"], info["width"]] for info in infos]).reshape(-1, 2),
    )
    metrics = evaluator.evaluate(speed, verbose, plots)
    losses = val_loss.means() if val_loss is not None else None
    if losses is not None:
        metrics["val_loss"] = losses
    return metrics, kept
