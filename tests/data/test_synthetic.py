"""The shapes generator: deterministic, within its stated ranges, boxes on visible pixels."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

from msdet.data import synthetic
from msdet.data.coco import CocoSource
from msdet.data.synthetic import ANN_FILES, ensure_shapes_dataset, generate_shapes, render_image


def folder_bytes(root: str) -> dict[str, bytes]:
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def test_generation_is_deterministic_and_independent_of_workers(tmp_path):
    generate_shapes(str(tmp_path / "a"), 6, 2, seed=3, workers=1)
    generate_shapes(str(tmp_path / "b"), 6, 2, seed=3, workers=3)
    a, b = folder_bytes(str(tmp_path / "a")), folder_bytes(str(tmp_path / "b"))
    assert sorted(a) == sorted(b) and len(a) == 6 + 2 + 2
    assert all(a[name] == b[name] for name in a)
    generate_shapes(str(tmp_path / "c"), 6, 2, seed=4, workers=1)
    c = folder_bytes(str(tmp_path / "c"))
    assert a["train/000001.jpg"] != c["train/000001.jpg"]


def test_generated_set_reads_as_coco_with_non_contiguous_ids(tmp_path):
    generate_shapes(str(tmp_path), 10, 3, seed=0)
    train = CocoSource(str(tmp_path), ANN_FILES["train"], "train")
    val = CocoSource(str(tmp_path), ANN_FILES["val"], "val")
    assert train.category_ids == [1, 3, 7]
    assert train.class_names == ["disc", "rectangle", "triangle"]
    assert (len(train), len(val)) == (10, 3)
    img, boxes, labels = train.load(0)
    assert img.shape == (train.image_info(0)["height"], train.image_info(0)["width"], 3)
    assert set(labels.tolist()) <= {0, 1, 2}


def test_rendered_images_are_within_the_stated_ranges():
    counts, classes, sides, box_sides = [], Counter(), [], []
    for i in range(60):
        img, objects = render_image(np.random.default_rng([0, 0, i]))
        h, w = img.shape[:2]
        sides += [h, w]
        counts.append(len(objects))
        for obj in objects:
            classes[obj["category_id"]] += 1
            x, y, bw, bh = obj["bbox"]
            assert 0 <= x and 0 <= y and x + bw <= w and y + bh <= h
            assert obj["area"] <= bw * bh
            box_sides.append((min(bw, bh), max(bw, bh) / min(h, w)))
    assert 240 <= min(sides) and max(sides) <= 480 and len(set(sides)) > 30
    assert min(counts) >= 0 and max(counts) <= 10 and 0 in counts and max(counts) >= 8
    assert set(classes) == {1, 3, 7}
    smallest = min(s for s, _ in box_sides)
    largest_fraction = max(f for _, f in box_sides)
    # 8 px shapes (a half-hidden one can show a thinner part), up to half the shorter side
    # (a rotated square's box is up to sqrt(2) times its side).
    assert 3 <= smallest <= 10
    assert 0.4 <= largest_fraction <= 0.5 * np.sqrt(2) + 0.02


@pytest.mark.slow
def test_boxes_are_the_extents_of_each_shapes_visible_pixels(monkeypatch):
    # Without the final noise every shape is one flat colour: the colour that covers exactly
    # `area` pixels around the box is the shape's, and those pixels must span the box.
    monkeypatch.setattr(synthetic, "_add_noise", lambda rng, img: None)
    checked = 0
    for i in range(30):
        img, objects = render_image(np.random.default_rng([1, 0, i]))
        for obj in objects:
            x, y, bw, bh = obj["bbox"]
            x0, y0 = max(x - 3, 0), max(y - 3, 0)
            around = img[y0 : y + bh + 3, x0 : x + bw + 3]
            colours, freq = np.unique(around.reshape(-1, 3), axis=0, return_counts=True)
            (match,) = np.nonzero(freq == obj["area"])
            assert len(match) >= 1, "no colour covers exactly the annotated area"
            ys, xs = np.nonzero(np.all(around == colours[match[0]], axis=2))
            found = [x0 + xs.min(), y0 + ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1]
            assert found == obj["bbox"]
            checked += 1
    assert checked > 50


def test_ensure_generates_once_into_the_final_folder(tmp_path):
    root = str(tmp_path / "shapes-0-4-2")
    assert ensure_shapes_dataset(root, 4, 2, seed=0) == root
    assert sorted(os.listdir(tmp_path)) == ["shapes-0-4-2"]  # no temporary folder left
    stamp = os.path.getmtime(os.path.join(root, ANN_FILES["train"]))
    ensure_shapes_dataset(root, 4, 2, seed=0)
    assert os.path.getmtime(os.path.join(root, ANN_FILES["train"])) == stamp
    with open(os.path.join(root, ANN_FILES["val"])) as f:
        assert len(json.load(f)["images"]) == 2


def test_interrupted_generation_leaves_nothing_behind(tmp_path, monkeypatch):
    def crash(out_dir, *args, **kwargs):
        os.makedirs(os.path.join(out_dir, "train"))
        raise KeyboardInterrupt

    monkeypatch.setattr(synthetic, "generate_shapes", crash)
    with pytest.raises(KeyboardInterrupt):
        ensure_shapes_dataset(str(tmp_path / "shapes"), 4, 2, seed=0)
    assert os.listdir(tmp_path) == []


def test_a_foreign_folder_is_not_mistaken_for_a_generated_set(tmp_path):
    (tmp_path / "shapes" / "train").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="not a generated shapes dataset"):
        ensure_shapes_dataset(str(tmp_path / "shapes"), 4, 2, seed=0)


def test_shapes_are_whole_inside_their_mask():
    # A mask border that touches the shape would cut corners off (rotated rectangles reach
    # past half their side from the centre).
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(200):
        for category in (1, 3, 7):
            placed = synthetic._rasterise(rng, category, 480, 480)
            if placed is None:
                continue
            (x0, y0), mask = placed
            h, w = mask.shape
            if x0 > 0 and y0 > 0 and x0 + w < 480 and y0 + h < 480:
                assert not (
                    mask[0].any() or mask[-1].any() or mask[:, 0].any() or mask[:, -1].any()
                )
                checked += 1
    assert checked > 300


def test_a_second_task_draws_other_kinds_with_their_own_ids_and_folder(tmp_path):
    from msdet.data.synthetic import categories_for, shapes_root

    kinds = categories_for(["star", "cross", "ring"])
    seen = Counter()
    for i in range(40):
        img, objects = render_image(np.random.default_rng([1, 0, i]), kinds)
        for obj in objects:
            seen[obj["category_id"]] += 1
            x, y, bw, bh = obj["bbox"]
            assert 0 <= x and 0 <= y and x + bw <= img.shape[1] and y + bh <= img.shape[0]
            assert 0 < obj["area"] <= bw * bh
    assert set(seen) == {11, 13, 17} and min(seen.values()) > 10
    generate_shapes(str(tmp_path / "stars"), 4, 2, seed=1, classes=("star", "cross", "ring"))
    train = CocoSource(str(tmp_path / "stars"), ANN_FILES["train"], "train")
    assert train.class_names == ["star", "cross", "ring"] and train.category_ids == [11, 13, 17]
    # A ring has a hole: its pixel count is well below its filled disc's.
    for i in range(40):
        _, objects = render_image(np.random.default_rng([1, 0, i]), categories_for(["ring"]))
        for obj in objects:
            if obj["bbox"][2] > 30 and obj["bbox"][3] > 30:
                assert obj["area"] < 0.9 * np.pi / 4 * obj["bbox"][2] * obj["bbox"][3]
    assert shapes_root("c", 0, 10, 2) == os.path.join("c", "shapes-0-10-2")
    assert shapes_root("c", 1, 10, 2, ["star", "ring"]) == os.path.join(
        "c", "shapes-1-10-2-star-ring"
    )
    with pytest.raises(ValueError, match="data.classes must be distinct names from disc"):
        categories_for(["disc", "hexagon"])


def test_min_object_size_sets_the_smallest_shape_and_its_own_folder(tmp_path):
    def smallest_sides(min_size: int) -> list[int]:
        sides = []
        for i in range(40):
            _, objects = render_image(np.random.default_rng([0, 0, i]), min_object_size=min_size)
            # The visible box of an unoccluded shape spans its whole size.
            sides += [max(o["bbox"][2], o["bbox"][3]) for o in objects]
        return sides

    default, large = smallest_sides(8), smallest_sides(24)
    assert min(default) < 16  # the default set has the tiny shapes the option removes
    # Occlusion may hide up to half of a shape, never all of its extent on both axes.
    assert min(large) >= 24 // 2 and np.percentile(large, 10) >= 24
    assert np.median(large) > np.median(default)

    assert synthetic.shapes_root("c", 0, 5, 2).endswith("shapes-0-5-2")
    assert synthetic.shapes_root("c", 0, 5, 2, min_object_size=16).endswith("shapes-0-5-2-min16")
    generate_shapes(str(tmp_path / "s"), 2, 1, seed=0, min_object_size=16)
    with open(tmp_path / "s" / ANN_FILES["val"], encoding="utf-8") as f:
        assert json.load(f)["info"]["min_object_size"] == 16
    with pytest.raises(ValueError, match="data.min_object_size"):
        generate_shapes(str(tmp_path / "bad"), 2, 1, seed=0, min_object_size=4)
