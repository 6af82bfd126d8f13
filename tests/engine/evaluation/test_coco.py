"""CocoEvaluator gives the APs one can work out by hand, in the dataset's category ids."""

from __future__ import annotations

import contextlib
import io
import json
import os

import numpy as np
import pytest
from pycocotools.cocoeval import COCOeval

from msdet.engine.evaluation.coco import CocoEvaluator
from msdet.engine.evaluation.detections import detections_to_original, prediction_records
from msdet.engine.evaluation.speed import SpeedMeter, format_speed
from tests.support.evaluation import (
    CATEGORY_IDS,
    CLASS_NAMES,
    SCALE,
    evaluate,
    ground_truth,
    model_detections,
)


def test_perfect_detections_give_ap_one(tmp_path, caplog):
    import logging

    _, objects = ground_truth()
    with caplog.at_level(logging.DEBUG, logger="msdet.engine.evaluation.coco"):
        metrics = evaluate(
            tmp_path,
            *model_detections(objects),
            speed={"data_wait": 0.01, "inference": 20.0, "nms": 2.5},
        )
    assert metrics["mAP"] == pytest.approx(1.0)
    assert metrics["mAP50"] == metrics["mAP75"] == pytest.approx(1.0)
    assert metrics["mAP_large"] == pytest.approx(1.0)
    assert metrics["mAP_small"] == metrics["mAP_medium"] == -1.0  # no such objects
    assert metrics["per_class"] == pytest.approx({"disc": 1.0, "box": 1.0, "triangle": 1.0})
    assert metrics["images"] == 4 and metrics["detections"] == 4
    # The console (INFO): the headline on one line, the per-class table, the speed.
    console = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)
    assert console.startswith(
        "mAP 1.000  mAP50 1.000  mAP75 1.000  (small -, medium -, large 1.000)"
    )
    assert "triangle" in console and "Average Precision" not in console
    assert "Speed: 20.0 ms inference, 2.5 ms NMS per image" in console
    # pycocotools' twelve lines: in the log file (DEBUG) and coco_summary.txt.
    summary = (tmp_path / "coco_summary.txt").read_text()
    assert (
        "Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 1.000" in summary
    )
    assert summary.count("Average Precision") == 6 and summary.count("Average Recall") == 6
    assert summary in caplog.text + "\n"
    assert json.loads((tmp_path / "metrics.json").read_text()) == json.loads(json.dumps(metrics))


def test_boxes_shifted_to_iou_0_739_match_half_the_thresholds(tmp_path):
    # A 100 px box shifted 15 px: IoU = 85 * 100 / (2 * 100 * 100 - 85 * 100) = 85 / 115 =
    # 0.739, a match at IoU thresholds 0.50 .. 0.70 (5 of 10) and a miss at 0.75 .. 0.95.
    _, objects = ground_truth()
    metrics = evaluate(tmp_path, *model_detections(objects, shift=15.0))
    assert metrics["mAP50"] == pytest.approx(1.0)
    assert metrics["mAP75"] == pytest.approx(0.0)
    assert metrics["mAP"] == pytest.approx(0.5)


def test_a_false_positive_ranked_first_gives_ap_two_thirds(tmp_path):
    # Class "box" has 2 objects (images 2 and 4). Ranked: a false positive, then the two
    # hits: precision 0 @ recall 0, 1/2 @ 0.5, 2/3 @ 1.0; interpolated precision is 2/3
    # at every recall level, so AP("box") = 2/3 at every IoU threshold.
    _, objects = ground_truth()
    dets, counts, ids, scales, sizes = model_detections(objects)
    i = ids.index(1)
    dets[i, 1] = [300 * SCALE, 200 * SCALE, 380 * SCALE, 280 * SCALE, 0.95, CATEGORY_IDS.index(3)]
    counts[i] = 2
    metrics = evaluate(tmp_path, dets, counts, ids, scales, sizes)
    assert metrics["per_class"]["box"] == pytest.approx(2 / 3)
    assert metrics["per_class"]["disc"] == pytest.approx(1.0)
    assert metrics["mAP"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    # The 80x80 false positive is a "medium" detection: ignored when scoring large objects.
    assert metrics["mAP_large"] == pytest.approx(1.0)


def test_class_indices_map_to_non_contiguous_category_ids(tmp_path):
    _, objects = ground_truth()
    evaluate(tmp_path, *model_detections(objects))
    written = json.loads((tmp_path / "detections.json").read_text())
    by_image = {d["image_id"]: d for d in written}
    assert {d["category_id"] for d in written} == {1, 3, 7}
    assert by_image[3]["category_id"] == 7 and by_image[2]["category_id"] == 3
    # The letterbox is undone: back to the original pixels of the object.
    assert by_image[3]["bbox"] == pytest.approx([200.0, 150.0, 100.0, 100.0])

    # Labels off by one (index used as id) would score zero on "box" and "triangle".
    dets, counts, ids, scales, sizes = model_detections(objects)
    gt, _ = ground_truth()
    wrong = CocoEvaluator(gt, [1, 3, 7], CLASS_NAMES, out_dir=str(tmp_path / "wrong"))
    dets[..., 5] = np.where(dets[..., 5] == 1, 2, dets[..., 5])  # "box" predicted as "triangle"
    wrong.update(dets, counts, ids, scales, sizes)
    per_class = wrong.evaluate()["per_class"]
    assert per_class["box"] == 0.0 and per_class["triangle"] == pytest.approx(0.5)


def test_no_detections_give_zero_ap_without_crashing(tmp_path, caplog):
    import logging

    _, objects = ground_truth()
    dets, counts, ids, scales, sizes = model_detections(objects)
    with caplog.at_level(logging.INFO, logger="msdet.engine.evaluation.coco"):
        metrics = evaluate(tmp_path, np.zeros_like(dets), np.zeros_like(counts), ids, scales, sizes)
    assert metrics["mAP"] == 0.0 and metrics["mAP50"] == 0.0
    assert metrics["per_class"] == {"disc": 0.0, "box": 0.0, "triangle": 0.0}
    assert metrics["detections"] == 0 and metrics["images"] == 4
    assert json.loads((tmp_path / "detections.json").read_text()) == []
    assert os.path.isfile(tmp_path / "metrics.json")
    assert "No detections" in caplog.text


def test_metrics_agree_with_an_independent_pycocotools_run(tmp_path):
    gt, objects = ground_truth()
    rng = np.random.default_rng(0)
    dets, counts, ids, scales, sizes = model_detections(objects)
    # Jittered boxes, random scores, extra false positives: APs strictly between 0 and 1.
    dets[:, :, :4] += rng.normal(0, 6, dets[:, :, :4].shape).astype(np.float32) * (
        dets[:, :, 4:5] > 0
    )
    dets[:, 1:4] = np.concatenate(
        [
            rng.uniform(0, 150, (4, 3, 2)),
            rng.uniform(150, 200, (4, 3, 2)),
            rng.uniform(0.05, 0.95, (4, 3, 1)),
            rng.integers(0, 3, (4, 3, 1)),
        ],
        -1,
    )
    dets[:, 0, 4] = rng.uniform(0.05, 0.95, 4)
    counts[:] = 4
    metrics = evaluate(tmp_path, dets, counts, ids, scales, sizes)
    assert 0.0 < metrics["mAP"] < 1.0

    with contextlib.redirect_stdout(io.StringIO()):
        coco_dt = gt.loadRes(str(tmp_path / "detections.json"))
        independent = COCOeval(gt, coco_dt, "bbox")
        independent.evaluate()
        independent.accumulate()
        independent.summarize()
    assert [
        metrics[k] for k in ("mAP", "mAP50", "mAP75", "mAP_small", "mAP_medium", "mAP_large")
    ] == (pytest.approx(list(independent.stats[:6]), abs=1e-12))


def test_only_updated_images_are_evaluated(tmp_path):
    _, objects = ground_truth()
    dets, counts, ids, scales, sizes = model_detections(objects)
    metrics = evaluate(tmp_path, dets[:2], counts[:2], ids[:2], scales[:2], sizes[:2])
    assert metrics["images"] == 2
    assert metrics["mAP"] == pytest.approx(1.0)  # the two unseen images are not misses
    assert metrics["per_class"]["triangle"] == -1.0  # no triangle in images 1 and 2


def test_boxes_are_clipped_to_the_original_image():
    # A detection reaching past the letterbox padding (input 200x150 for a 400x300 image).
    dets = np.array([[-10.0, 140.0, 210.0, 160.0, 0.8, 2.0]], np.float32)
    boxes, scores, labels = detections_to_original(dets, 1, SCALE, (300, 400))
    np.testing.assert_allclose(boxes, [[0.0, 280.0, 400.0, 20.0]])
    assert scores[0] == pytest.approx(0.8) and labels.tolist() == [2]
    records = prediction_records(dets, 1, SCALE, (300, 400), CATEGORY_IDS, CLASS_NAMES)
    assert records == [
        {
            "bbox": [0.0, 280.0, 400.0, 20.0],
            "score": 0.8,
            "category_id": 7,
            "category_name": "triangle",
        }
    ]


def test_unknown_category_ids_are_rejected():
    gt, _ = ground_truth()
    with pytest.raises(ValueError, match=r"\[2\]"):
        CocoEvaluator(gt, [1, 2, 3])


def test_speed_meter_reports_ms_per_image():
    meter = SpeedMeter()
    assert meter.ms_per_image() is None  # nothing timed: the one batch was the warm-up
    assert format_speed(None) == (
        "Speed: not measured (the val split is one batch, which warms the graphs up)"
    )
    meter.seconds["inference"] = 0.5
    meter.add_images(10)
    assert meter.ms_per_image()["inference"] == pytest.approx(50.0)
    with meter.measure("nms"):
        pass
    assert 0.0 <= meter.ms_per_image()["nms"] < 1.0
    # Pre-processing runs in the data pipeline: a wait for data shows only when there was one.
    assert format_speed(meter.ms_per_image()).startswith("Speed: 50.0 ms inference, 0.0 ms NMS")
    assert "pre-process" not in format_speed(meter.ms_per_image())
    assert "waiting for data" not in format_speed(meter.ms_per_image())
    meter.seconds["data_wait"] = 0.012
    assert format_speed(meter.ms_per_image()) == (
        "Speed: 50.0 ms inference, 0.0 ms NMS, 1.2 ms waiting for data per image"
    )
    with pytest.raises(ValueError, match="unknown stage"), meter.measure("loss"):
        pass


class _Source:
    """The part of a CocoSource that evaluate_on_dataset reads, over ground_truth()."""

    def __init__(self):
        self.coco, _ = ground_truth()
        self.ids = sorted(self.coco.imgs)
        self.category_ids, self.class_names = CATEGORY_IDS, CLASS_NAMES

    def image_info(self, position):
        return self.coco.imgs[self.ids[position]]


class _Batches:
    """An eval dataset of one batch: image positions 0..3, position 1 unreadable."""

    def __init__(self, index):
        self.index = np.asarray(index, np.int32)

    def get_dataset_size(self):
        return 1

    def create_tuple_iterator(self, num_epochs, output_numpy):
        images = np.zeros((len(self.index), 1), np.float32)
        return iter([(images, self.index, np.full(len(self.index), SCALE, np.float32))])


def test_an_unreadable_val_image_keeps_its_ground_truth(tmp_path):
    """It is evaluated as an image without detections: its objects count as missed (the
    detector's output for its blank stand-in is dropped), so the mAP cannot rise by it."""
    from msdet.data.pipeline import unreadable_index
    from msdet.engine.evaluation.loop import evaluate_on_dataset

    _, objects = ground_truth()
    dets, counts, _, _, _ = model_detections(objects)  # perfect boxes for all four images

    class Detector:
        def __call__(self, images):
            return images

    metrics, _ = evaluate_on_dataset(
        Detector(),
        lambda preds: (dets, counts),  # would find image 2's box, were it read
        _Batches([0, unreadable_index(1), 2, 3]),
        _Source(),
        str(tmp_path),
        verbose=False,
    )
    assert metrics["images"] == 4
    detections = json.loads((tmp_path / "detections.json").read_text())
    assert sorted({d["image_id"] for d in detections}) == [1, 3, 4]
    gt, _ = ground_truth()
    with contextlib.redirect_stdout(io.StringIO()):
        independent = COCOeval(gt, gt.loadRes(str(tmp_path / "detections.json")), "bbox")
        independent.params.imgIds = [1, 2, 3, 4]
        independent.evaluate()
        independent.accumulate()
        independent.summarize()
    assert metrics["mAP50"] == pytest.approx(independent.stats[1], abs=1e-12)
    assert metrics["per_class_AP50"]["box"] < 0.6  # one of the two boxes missed
    assert metrics["per_class_AP50"]["disc"] == pytest.approx(1.0)


def test_images_resized_after_labelling_are_scored_in_the_annotations_coordinates(tmp_path, caplog):
    """Issue: training scaled the boxes of an image whose pixels differ from its annotated
    size, evaluation did not: a perfect detector scored mAP 1.0 on correct files, 0.0 with
    the files at half size. The 'detector' here finds the white object in the letterboxed
    input (what any detector sees), so the test holds whatever the pipeline resizes."""
    import logging

    import cv2

    from msdet.data.coco import CocoSource
    from msdet.data.pipeline import EvalSamples, warn_size_mismatches

    gt, objects = ground_truth()
    (tmp_path / "images").mkdir()
    for img_id, objs in objects.items():
        factor = 0.5 if img_id % 2 else 1.0  # images 1 and 3 were halved after labelling
        canvas = np.zeros((int(300 * factor), int(400 * factor), 3), np.uint8)
        for (x, y, w, h), _ in objs:
            x1, y1, x2, y2 = (round(v * factor) for v in (x, y, x + w, y + h))
            canvas[y1:y2, x1:x2] = 255
        cv2.imwrite(str(tmp_path / "images" / f"{img_id}.png"), canvas)
    dataset = dict(gt.dataset)
    dataset["images"] = [dict(img, file_name=f"{img['id']}.png") for img in gt.dataset["images"]]
    (tmp_path / "val.json").write_text(json.dumps(dataset))
    source = CocoSource(str(tmp_path), "val.json", "images")
    with caplog.at_level(logging.WARNING, logger="msdet.data.pipeline"):
        warn_size_mismatches(source)
        warn_size_mismatches(source)  # once per source
    assert caplog.text.count("2 of 4 images") == 1 and "1.png, 200x150 pixels" in caplog.text

    samples = EvalSamples(source, (320, 320), list(range(len(source))))
    dets = np.zeros((len(source), 5, 6), np.float32)
    counts, scales, ids = np.ones(len(source), np.int32), [], []
    for j in range(len(source)):
        image, index, scale = samples[j]
        ys, xs = np.nonzero(image[0] > 200)  # the white object in the network's input
        cat = objects[source.image_info(int(index))["id"]][0][1]
        dets[j, 0] = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1, 0.9, CATEGORY_IDS.index(cat)]
        scales.append(float(scale))
        ids.append(source.image_info(int(index))["id"])
    ev = CocoEvaluator(source.coco, CATEGORY_IDS, CLASS_NAMES, out_dir=str(tmp_path / "out"))
    ev.update(dets, counts, ids, np.array(scales), np.tile([300, 400], (len(ids), 1)))
    with contextlib.redirect_stdout(io.StringIO()):
        metrics = ev.evaluate()
    assert metrics["mAP50"] == pytest.approx(1.0) and metrics["mAP"] > 0.9


def test_a_model_with_its_classes_in_another_order_is_scored_by_its_label_map(tmp_path):
    """A model whose class k is the dataset's class labels[k] (eval.class_map=by_name): its
    detections count under the dataset's class of that name; a class the dataset lacks
    (-1) is not scored at all."""
    from msdet.engine.evaluation.detections import relabel_detections
    from msdet.engine.evaluation.loop import evaluate_on_dataset

    _, objects = ground_truth()
    dets, counts, _, _, _ = model_detections(objects)
    # The model's order: triangle, disc, box, then a class of its own (dog).
    labels = [2, 0, 1, -1]
    model_label = {0: 1, 1: 2, 2: 0}  # dataset label -> the model's
    as_model = dets.copy()
    for i in range(len(dets)):
        as_model[i, : counts[i], 5] = [model_label[int(v)] for v in dets[i, : counts[i], 5]]
    # Image 1 (box) also gets a confident "dog" first: dropped, not scored as anything.
    as_model[1, 1:] = as_model[1, :-1].copy()
    as_model[1, 0] = [0, 0, 10, 10, 0.99, 3]
    model_counts = counts.copy()
    model_counts[1] += 1

    moved, kept = relabel_detections(as_model, model_counts, labels)
    np.testing.assert_array_equal(kept, counts)
    np.testing.assert_array_equal(moved[:, :, 5], dets[:, :, 5])

    metrics, _ = evaluate_on_dataset(
        lambda images: images,
        lambda preds: (as_model, model_counts),
        _Batches([0, 1, 2, 3]),
        _Source(),
        str(tmp_path),
        verbose=False,
        labels=labels,
    )
    assert metrics["mAP"] == pytest.approx(1.0)
    assert metrics["per_class"] == pytest.approx({"disc": 1.0, "box": 1.0, "triangle": 1.0})
    assert metrics["detections"] == 4
