"""The self-test's evaluation set-up: the host's best detections as the ground truth, written
as a COCO file with YOLOX's 80 class slots (the evaluations: the tiny self-test, slow)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from msdet.tools.selftest.evaluation import ground_truth, write_annotations


def det(image_id, score, category_id=3, bbox=(10, 20, 30, 40)):
    return {"image_id": image_id, "category_id": category_id, "bbox": list(bbox), "score": score}


def test_each_images_best_scored_detections_become_its_ground_truth():
    detections = [det(5, 0.2), det(2, 0.9, 7, (0, 0, 4, 5)), det(5, 0.8, 1), det(5, 0.5),
                  det(2, 0.1)]  # fmt: skip
    truth = ground_truth(detections, per_image=2)
    assert [(a["id"], a["image_id"], a["category_id"]) for a in truth] == [
        (1, 2, 7), (2, 2, 3), (3, 5, 1), (4, 5, 3)]  # fmt: skip
    assert truth[0]["bbox"] == [0.0, 0.0, 4.0, 5.0] and truth[0]["area"] == 20.0
    assert {a["iscrowd"] for a in truth} == {0}
    assert [a["bbox"] for a in truth[2:]] == [[10.0, 20.0, 30.0, 40.0]] * 2
    assert ground_truth([]) == []


def test_the_annotation_file_has_the_sets_images_and_80_classes(tmp_path):
    images = [{"id": 2, "file_name": "2.jpg", "width": 64, "height": 48}]
    source = SimpleNamespace(coco=SimpleNamespace(dataset={"images": images}))
    path = tmp_path / "eval_gt.json"
    write_annotations(str(path), source, ground_truth([det(2, 0.9)]))
    data = json.loads(path.read_text())
    assert data["images"] == images and len(data["annotations"]) == 1
    assert len(data["categories"]) == 80
    assert data["categories"][0] == {"id": 1, "name": "class0"}
    assert data["categories"][-1] == {"id": 80, "name": "class79"}
