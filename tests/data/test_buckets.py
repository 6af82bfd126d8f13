"""Target-count buckets: the settings, the trimming of a batch, and the pipeline's batches."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from msdet.data.buckets import (
    MAX_GRAPHS,
    TrimToBucket,
    bucket_rows,
    check_graph_count,
    target_buckets,
)
from msdet.data.pipeline import build_train_dataset
from tests.support.data import epochs_of, make_cfg


def cfg(buckets, max_objects=50):
    return OmegaConf.create({"max_objects": max_objects, "target_buckets": buckets})


def test_buckets_end_at_max_objects_and_empty_means_off():
    assert target_buckets(cfg([16, 32])) == (16, 32, 50)
    assert target_buckets(cfg([])) == (50,)
    assert target_buckets(cfg(None)) == (50,)


@pytest.mark.parametrize(
    "buckets, message",
    [
        ([32, 16], "ascending"),
        ([16, 16], "ascending"),
        ([50], r"\[1, data.max_objects=50\)"),
        ([0, 8], r"\[1, data.max_objects=50\)"),
        ([8.5], "integers"),
        (["8"], "integers"),
        (16, "a list of row counts"),
        ("16", "a list of row counts"),
    ],
)
def test_bad_buckets_name_the_key(buckets, message):
    with pytest.raises(ValueError, match="data.target_buckets") as err:
        target_buckets(cfg(buckets))
    assert err.match(message)


def test_a_batch_goes_to_the_smallest_bucket_that_holds_its_fullest_image():
    mask = np.zeros((3, 50), np.float32)
    mask[0, :5] = mask[1, :17] = mask[2, :2] = 1
    assert bucket_rows(mask, (16, 32, 50)) == 32
    assert bucket_rows(mask[[0, 2]], (16, 32, 50)) == 16
    assert bucket_rows(np.zeros((2, 50), np.float32), (16, 32, 50)) == 16  # no boxes at all
    mask[1, :40] = 1
    assert bucket_rows(mask, (16, 32, 50)) == 50
    with pytest.raises(ValueError, match="more than the largest bucket"):
        bucket_rows(mask, (16, 32))


def test_trimming_keeps_every_real_row_and_refuses_real_rows_after_padding():
    rng = np.random.default_rng(0)
    targets = np.zeros((4, 50, 5), np.float32)
    mask = np.zeros((4, 50), np.float32)
    for b, n in enumerate((3, 11, 0, 7)):
        targets[b, :n] = rng.uniform(1, 100, (n, 5))
        mask[b, :n] = 1
    trimmed_targets, trimmed_mask = TrimToBucket((8, 16, 50))(targets, mask)
    assert trimmed_targets.shape == (4, 16, 5) and trimmed_mask.shape == (4, 16)
    np.testing.assert_array_equal(trimmed_targets, targets[:, :16])
    assert trimmed_mask.sum() == mask.sum() == 21
    assert trimmed_targets.flags["C_CONTIGUOUS"]
    full = TrimToBucket((50,))(targets, mask)
    assert full[0] is targets and full[1] is mask
    mask[2, 30] = 1  # a real row behind padding: the pipeline never writes that
    with pytest.raises(ValueError, match="not the first rows"):
        TrimToBucket((8, 16, 32, 50))(targets, mask)


def test_graph_count_is_bounded_naming_both_settings():
    assert check_graph_count(11, (32, 64, 120)) == 33
    with pytest.raises(ValueError, match=r"train.multiscale_range.*data.target_buckets"):
        check_graph_count(MAX_GRAPHS // 2 + 1, (16, 50))


def test_pipeline_batches_take_their_buckets_rows_and_lose_no_box(shapes_root, train_source):
    """Mosaic makes batches of different fullness: with buckets each batch has the rows of
    its own bucket and exactly the boxes of the same batch without buckets."""
    aug = {"aug.mosaic_prob": 0.5, "aug.mixup_prob": 0.0}
    plain = build_train_dataset(make_cfg(shapes_root, **aug), train_source, 2, 10, 2, seed=0)
    buckets = (4, 8, 16, 24)  # make_cfg pads to 24
    trimmed = build_train_dataset(
        make_cfg(shapes_root, **aug), train_source, 2, 10, 2, seed=0, buckets=buckets
    )
    (full,) = epochs_of(plain, 1)
    (cut,) = epochs_of(trimmed, 1)
    assert len(full) == len(cut) > 0
    rows_seen = set()
    for (images, targets, mask), (images_cut, targets_cut, mask_cut) in zip(full, cut):
        rows = targets_cut.shape[1]
        rows_seen.add(rows)
        assert rows == bucket_rows(mask, buckets) and mask_cut.shape == (2, rows)
        np.testing.assert_array_equal(images_cut, images)
        np.testing.assert_array_equal(targets_cut, targets[:, :rows])
        assert mask_cut.sum() == mask.sum()
    assert len(rows_seen) >= 2  # the test saw batches of more than one bucket
