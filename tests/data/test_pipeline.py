"""The GeneratorDataset pipelines on a tiny generated shapes set."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from omegaconf import DictConfig, OmegaConf

from msdet.data.coco import CocoSource
from msdet.data.pipeline import (
    EVAL_COLUMNS,
    TRAIN_COLUMNS,
    AugmentParams,
    EpochSampler,
    TrainSamples,
    build_eval_dataset,
    build_train_dataset,
    eval_positions,
)
from msdet.data.synthetic import ANN_FILES, generate_shapes
from msdet.data.transforms import PAD_VALUE, filter_boxes, letterbox, resize_to_fit
from tests.support.data import NUM_TRAIN, NUM_VAL, SIZE, epochs_of, make_cfg


def plain_cfg(root: str, **overrides) -> DictConfig:
    """No random augmentation at all: a sample is its letterboxed image."""
    aug = {"aug.mosaic_prob": 0.0, "aug.mixup_prob": 0.0, "aug.hsv_prob": 0.0, "aug.flip_prob": 0.0}
    return make_cfg(root, **aug, **overrides)


def letterboxed(source: CocoSource, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sample without augmentation, as YOLOX makes it: resized to fit by the dataset
    (``pull_item``), then letterboxed by ``TrainTransform``."""
    img, boxes, labels = source.load(i)
    img, boxes = resize_to_fit(img, boxes, SIZE)
    out, ratio = letterbox(img, SIZE)
    boxes, labels = filter_boxes(boxes * ratio, labels)
    return out, boxes, labels


def chw(img: np.ndarray) -> np.ndarray:
    return img.transpose(2, 0, 1).astype(np.float32)


def corrupted_copy(tmp_path, position: int) -> CocoSource:
    """A fresh 8-image shapes set whose image at ``position`` is a truncated JPEG."""
    generate_shapes(str(tmp_path), 8, 4, seed=1)
    source = CocoSource(str(tmp_path), ANN_FILES["train"], "train")
    path = source.image_path(position)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    return source


def test_train_batches_have_static_shapes_and_valid_targets(shapes_root, train_source):
    cfg = make_cfg(shapes_root, **{"aug.mosaic_prob": 1.0, "aug.mixup_prob": 1.0})
    dataset = build_train_dataset(cfg, train_source, 4, epochs=10, no_aug_epochs=2, seed=0)
    assert dataset.get_col_names() == list(TRAIN_COLUMNS)
    assert dataset.get_dataset_size() == NUM_TRAIN // 4
    (batches,) = epochs_of(dataset, 1)
    assert len(batches) == NUM_TRAIN // 4
    for images, targets, mask in batches:
        # uint8 HWC: the training step casts and lays them out in-graph.
        assert images.shape == (4, *SIZE, 3) and images.dtype == np.uint8
        assert targets.shape == (4, 24, 5) and targets.dtype == np.float32
        assert mask.shape == (4, 24) and mask.dtype == np.float32
        assert images.min() >= 0 and images.max() <= 255
        real = mask == 1
        assert np.all(targets[~real] == 0)
        for row_mask in real:
            assert row_mask[: row_mask.sum()].all()  # real rows come first
        cls, cx, cy, w, h = (targets[real][:, k] for k in range(5))
        assert set(np.unique(cls)) <= {0.0, 1.0, 2.0}
        assert np.all(w > 1) and np.all(h > 1)
        assert np.all(cx - w / 2 >= -1e-3) and np.all(cx + w / 2 <= SIZE[1] + 1e-3)
        assert np.all(cy - h / 2 >= -1e-3) and np.all(cy + h / 2 <= SIZE[0] + 1e-3)
    assert sum(m.sum() for _, _, m in batches) > NUM_TRAIN  # mosaic + mixup add boxes


@pytest.mark.slow
def test_samples_do_not_depend_on_workers_threads_or_processes(shapes_root, train_source):
    overrides = {"aug.mosaic_prob": 1.0, "aug.mixup_prob": 1.0}
    runs = []
    for workers, processes in ((1, False), (2, False), (2, True)):
        cfg = make_cfg(
            shapes_root, num_workers=workers, python_multiprocessing=processes, **overrides
        )
        dataset = build_train_dataset(cfg, train_source, 8, epochs=10, no_aug_epochs=2, seed=5)
        runs.append(epochs_of(dataset, 2))
    reference = runs[0]
    for run in runs[1:]:
        for epoch_ref, epoch in zip(reference, run):
            for batch_ref, batch in zip(epoch_ref, epoch):
                for a, b in zip(batch_ref, batch):
                    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(reference[0][0][0], reference[1][0][0])  # epochs differ


def test_the_training_size_can_differ_from_the_datas(shapes_root, train_source):
    """build_train_dataset's img_size (the training size, train.input_size) replaces
    data.img_size."""
    cfg = make_cfg(shapes_root)
    dataset = build_train_dataset(cfg, train_source, 4, 10, 2, seed=0, img_size=(96, 64))
    images, targets, mask = epochs_of(dataset, 1)[0][0]
    assert images.shape == (4, 96, 64, 3)
    real = mask == 1
    assert real.any()
    assert targets[real][:, 1].max() <= 64 and targets[real][:, 2].max() <= 96  # cx, cy


def test_resuming_at_an_epoch_repeats_that_epoch_exactly(shapes_root, train_source):
    cfg = make_cfg(shapes_root)
    full = epochs_of(build_train_dataset(cfg, train_source, 8, 10, 2, seed=1), 2)
    resumed = epochs_of(build_train_dataset(cfg, train_source, 8, 10, 2, seed=1, start_epoch=1), 1)
    for batch_full, batch_resumed in zip(full[1], resumed[0]):
        for a, b in zip(batch_full, batch_resumed):
            np.testing.assert_array_equal(a, b)


def test_set_epoch_moves_iterators_created_afterwards(shapes_root, train_source):
    dataset = build_train_dataset(make_cfg(shapes_root), train_source, 8, 10, 2, seed=1)
    first = epochs_of(dataset, 1)[0]
    again = epochs_of(dataset, 1)[0]  # the sampler was copied: the same epoch 0
    dataset.epoch_sampler.set_epoch(1)
    second = epochs_of(dataset, 1)[0]
    np.testing.assert_array_equal(first[0][0], again[0][0])
    assert not np.array_equal(first[0][0], second[0][0])


def test_mosaic_and_mixup_are_off_in_the_no_aug_epochs(train_source):
    aug = AugmentParams(mosaic_prob=1.0, mixup_prob=1.0, hsv_prob=0.0, flip_prob=0.0)
    samples = TrainSamples(train_source, SIZE, 24, aug, seed=0, epochs=5, no_aug_epochs=2)
    for i in range(6):
        plain_img, plain_boxes, plain_labels = letterboxed(train_source, i)
        for epoch in (2, 3, 4):  # YOLOX: no_aug_epochs + 1 epochs: the image alone
            img, boxes, labels = samples.sample(epoch, i)
            np.testing.assert_array_equal(img, plain_img)
            np.testing.assert_allclose(boxes, plain_boxes, rtol=1e-6)
            np.testing.assert_array_equal(labels, plain_labels)
        mosaic_img, _, _ = samples.sample(1, i)  # still a mosaic epoch
        assert not np.array_equal(mosaic_img, plain_img)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_reads_its_own_slice_through_the_dataset(shapes_root, train_source, rank):
    cfg = plain_cfg(shapes_root)
    dataset = build_train_dataset(cfg, train_source, 4, 10, 2, seed=2, rank=rank, world_size=2)
    assert dataset.get_dataset_size() == NUM_TRAIN // 2 // 4
    (batches,) = epochs_of(dataset, 1)
    expected = dataset.epoch_sampler.epoch_indices(0)
    images = np.concatenate([b[0] for b in batches])
    targets = np.concatenate([b[1] for b in batches])
    assert len(images) == len(expected) == NUM_TRAIN // 2
    for image, target, i in zip(images, targets, expected):
        img, boxes, labels = letterboxed(train_source, int(i))
        np.testing.assert_array_equal(image, img)
        np.testing.assert_array_equal(target[: len(labels), 0], labels)


def test_epoch_sampler_shards_without_overlap_and_encodes_the_epoch():
    n, world = 10, 3
    samplers = [
        EpochSampler(n, seed=4, start_epoch=2, rank=r, world_size=world) for r in range(world)
    ]
    epochs = [[list(s) for _ in range(2)] for s in samplers]  # two __iter__ calls each
    for e, epoch in enumerate((2, 3)):
        shards = [np.array(per_rank[e]) for per_rank in epochs]
        assert all(len(shard) == n // world for shard in shards)
        decoded = np.concatenate(shards)
        assert np.all(decoded // n == epoch)
        positions = decoded % n
        assert len(set(positions.tolist())) == len(positions) == (n // world) * world
    assert sorted(np.array(epochs[0][0]) % n) != sorted(np.array(epochs[0][1]) % n)
    unshuffled = EpochSampler(n, seed=0, rank=1, world_size=2, shuffle=False)
    assert list(unshuffled) == [5, 6, 7, 8, 9]
    assert list(unshuffled) == [15, 16, 17, 18, 19]


def test_unreadable_image_is_replaced_counted_and_warned_once(tmp_path, caplog):
    source = corrupted_copy(tmp_path, position=3)
    cfg = plain_cfg(str(tmp_path))
    dataset = build_train_dataset(cfg, source, 4, 10, 2, seed=0)
    with caplog.at_level(logging.WARNING, logger="msdet.data.pipeline"):
        runs = epochs_of(dataset, 2)
    assert len(runs[0]) == 2
    assert source.unreadable.take_epoch_count(0) == 1
    assert source.unreadable.take_epoch_count(1) == 1
    assert source.unreadable.take_epoch_count(0) == 0
    warnings = [r for r in caplog.records if "000004.jpg" in r.getMessage()]
    assert len(warnings) == 1 and "truncated" in warnings[0].getMessage()
    # The replacement is deterministic: the next image takes the broken one's place.
    samples = TrainSamples(source, SIZE, 24, AugmentParams.from_config(cfg.aug), 0, 10, 2)
    img, _, _ = samples.sample(0, 3)
    np.testing.assert_array_equal(img, letterboxed(source, 4)[0])


def test_a_broken_image_counts_once_per_epoch_even_as_a_mosaic_partner(tmp_path):
    source = corrupted_copy(tmp_path, position=2)
    cfg = make_cfg(str(tmp_path), **{"aug.mosaic_prob": 1.0, "aug.mixup_prob": 1.0})
    epochs_of(build_train_dataset(cfg, source, 4, 10, 2, seed=0), 2)
    # 8 samples draw about 40 images per epoch; the broken one is a sample's own image once.
    assert source.unreadable.take_epoch_count(0) == 1
    assert source.unreadable.take_epoch_count(1) == 1


def test_unreadable_counts_reach_the_main_process_from_worker_processes(tmp_path):
    source = corrupted_copy(tmp_path, position=5)
    cfg = plain_cfg(str(tmp_path), num_workers=2, python_multiprocessing=True)
    epochs_of(build_train_dataset(cfg, source, 4, 10, 2, seed=0), 1)
    assert source.unreadable.take_epoch_count(0) == 1


def test_too_many_boxes_keep_the_largest_and_warn_once(train_source, caplog):
    samples = TrainSamples(
        train_source, SIZE, 2, AugmentParams(), seed=0, epochs=1, no_aug_epochs=0
    )
    boxes = np.array([[0, 0, 10, 10], [0, 0, 30, 30], [5, 5, 7, 7], [0, 0, 20, 40]], np.float32)
    with caplog.at_level(logging.WARNING, logger="msdet.data.pipeline"):
        targets, mask = samples.pad_targets(boxes, np.array([0, 1, 2, 0]))
        samples.pad_targets(boxes, np.array([0, 1, 2, 0]))
    np.testing.assert_allclose(targets, [[1, 15, 15, 30, 30], [0, 10, 20, 20, 40]])
    np.testing.assert_array_equal(mask, [1, 1])
    assert sum("more than data.max_objects=2" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    "overrides, batch, message",
    [
        ({"layout": "rgb01"}, 4, "data.layout='rgb01' is not supported"),
        ({}, 32, "fewer than one batch of 32"),
        ({"aug.mosaic_probability": 1.0}, 4, "unknown data.aug keys"),
    ],
)
def test_invalid_settings_fail_clearly(shapes_root, train_source, overrides, batch, message):
    cfg = make_cfg(shapes_root)
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        build_train_dataset(cfg, train_source, batch, 10, 2, seed=0)


def test_eval_batches_are_letterboxed_and_padded(shapes_root, val_source):
    dataset = build_eval_dataset(make_cfg(shapes_root), val_source, SIZE, batch_size=4)
    assert dataset.get_col_names() == list(EVAL_COLUMNS)
    (batches,) = epochs_of(dataset, 1)
    images = np.concatenate([b[0] for b in batches])
    index = np.concatenate([b[1] for b in batches])
    scale = np.concatenate([b[2] for b in batches])
    assert images.shape == (8, 3, *SIZE) and images.dtype == np.float32
    assert index.dtype == np.int32 and scale.dtype == np.float32
    np.testing.assert_array_equal(index, [0, 1, 2, 3, 4, 5, -1, -1])
    for k in range(NUM_VAL):
        info = val_source.image_info(k)
        assert scale[k] == pytest.approx(min(SIZE[0] / info["height"], SIZE[1] / info["width"]))
        np.testing.assert_array_equal(images[k], chw(letterboxed(val_source, k)[0]))
    assert np.all(images[6:] == PAD_VALUE) and np.all(scale[6:] == 1.0)


def test_eval_shards_cover_every_image_once():
    shards = [eval_positions(11, batch_size=2, rank=r, world_size=3) for r in range(3)]
    assert all(len(s) == 4 for s in shards)  # ceil(11 / 3) = 4 images, 2 batches each
    real = np.concatenate([s[s >= 0] for s in shards])
    assert sorted(real.tolist()) == list(range(11))


def test_an_unreadable_eval_image_is_marked_and_keeps_its_position(tmp_path, caplog):
    """Not padding (-1): the evaluator must still count its ground truth."""
    from msdet.data.pipeline import source_position, unreadable_index

    source = corrupted_copy(tmp_path, position=1)
    dataset = build_eval_dataset(plain_cfg(str(tmp_path)), source, SIZE, batch_size=4)
    with caplog.at_level(logging.WARNING, logger="msdet.data.pipeline"):
        (batches,) = epochs_of(dataset, 1)
    index = np.concatenate([b[1] for b in batches])
    np.testing.assert_array_equal(index, [0, unreadable_index(1), 2, 3, 4, 5, 6, 7])
    assert unreadable_index(1) < -1
    np.testing.assert_array_equal(source_position(index), np.arange(8))
    messages = [r.getMessage() for r in caplog.records]
    assert any("000002.jpg" in m and "ground truth counts as missed" in m for m in messages)
