"""MindSpore ``GeneratorDataset`` pipelines for training and evaluation.

Training samples are deterministic functions of (seed, epoch, index): :class:`EpochSampler`
hands out *encoded* indices ``epoch * len(source) + i`` and :class:`TrainSamples` decodes
them and seeds ``numpy.random.default_rng([seed, epoch, i])``, the only randomness a sample
uses. So a sample does not depend on the number of workers, threads vs processes, the
order in which workers run, or whether training was resumed.

Images are BGR, 0-255 (``data.layout: bgr255``), as YOLOX: uint8 HWC for training (the
training step casts and transposes them in-graph), float32 CHW for evaluation; targets are
``(class_index, cx, cy, w, h)`` in input pixels, zero-padded to ``data.max_objects`` rows,
with a mask marking the real ones: static shapes, numeric columns only (data sinking).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import mindspore.dataset as ds
import numpy as np

from msdet.data.buckets import TrimToBucket
from msdet.data.coco import CocoSource
from msdet.data.config import first_no_aug_epoch, resolve_num_workers
from msdet.data.image_io import ImageReadError
from msdet.data.transforms import (
    PAD_VALUE,
    filter_boxes,
    horizontal_flip,
    hsv_jitter,
    letterbox,
    mixup,
    mosaic_canvas,
    random_affine,
    resize_to_fit,
    xyxy_to_cxcywh,
)

log = logging.getLogger(__name__)

TRAIN_COLUMNS = ("images", "targets", "mask")
EVAL_COLUMNS = ("images", "index", "scale")
LAYOUTS = ("bgr255",)
# How far the pipeline looks for a readable replacement before giving up on the dataset.
MAX_REPLACEMENTS = 100


@dataclass(frozen=True)
class AugmentParams:
    """The ``data.aug`` config group: probabilities and ranges of YOLOX's augmentations."""

    mosaic_prob: float = 1.0
    mixup_prob: float = 1.0
    hsv_prob: float = 1.0
    flip_prob: float = 0.5
    degrees: float = 10.0
    translate: float = 0.1
    shear: float = 2.0
    mosaic_scale: tuple[float, float] = (0.1, 2.0)
    mixup_scale: tuple[float, float] = (0.5, 1.5)

    @classmethod
    def from_config(cls, aug_cfg: Any) -> AugmentParams:
        """Read ``data.aug`` (a DictConfig or dict); unknown keys are an error."""
        values = dict(aug_cfg)
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown data.aug keys: {sorted(unknown)}")
        for key in ("mosaic_scale", "mixup_scale"):
            if key in values:
                values[key] = tuple(float(v) for v in values[key])
        return cls(**{k: v if isinstance(v, tuple) else float(v) for k, v in values.items()})


class EpochSampler(ds.Sampler):
    """Per-epoch permutation of ``range(num_samples)``, sharded, yielding encoded indices.

    MindSpore calls ``__iter__`` once per epoch of an iterator; each call takes the next
    epoch (starting at ``start_epoch``) and yields ``epoch * num_samples + i`` for this
    rank's slice of a permutation drawn from (seed, epoch). Every rank draws the same
    permutation and takes its own contiguous slice of ``num_samples // world_size``
    positions, so ranks never overlap and all have the same length.

    MindSpore deep-copies the sampler when it creates an iterator: the counter of the
    original object does not move. An iterator over N epochs (``Model.train``) covers
    ``start_epoch .. start_epoch + N - 1``; a caller that creates one iterator per epoch
    must call :meth:`set_epoch` before creating each.
    """

    def __init__(
        self,
        num_samples: int,
        seed: int,
        start_epoch: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.source_len = int(num_samples)
        self.seed = int(seed)
        self.epoch = int(start_epoch)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.shuffle = bool(shuffle)
        self.per_rank = self.source_len // self.world_size
        # ds.Sampler's num_samples is how many indices one epoch yields (this rank's share).
        super().__init__(num_samples=self.per_rank)

    def __len__(self) -> int:
        return self.per_rank

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``__iter__`` (of iterators created from now on) yield ``epoch``."""
        self.epoch = int(epoch)

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """This rank's source positions in ``epoch`` (not encoded), in iteration order."""
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.source_len)
        else:
            order = np.arange(self.source_len)
        start = self.rank * self.per_rank
        return order[start : start + self.per_rank]

    def __iter__(self) -> Iterator[int]:
        epoch = self.epoch
        self.epoch += 1
        offset = epoch * self.source_len
        for i in self.epoch_indices(epoch):
            yield offset + int(i)

    def is_shuffled(self) -> bool:
        return self.shuffle

    def is_sharded(self) -> bool:
        return self.world_size > 1


class TrainSamples:
    """The training recipe of YOLOX as a random-access source for ``GeneratorDataset``.

    ``samples[epoch * len(source) + i]`` is sample ``i`` of ``epoch``: with probability
    ``mosaic_prob`` a mosaic of it and three random images, warped by a random affine,
    then (``mixup_prob``, if boxes remain) mixed up with a random image that has objects;
    otherwise the image alone, resized to fit. Then YOLOX's ``TrainTransform``
    (:meth:`train_transform`): HSV jitter (``hsv_prob``), horizontal flip (``flip_prob``),
    letterbox to ``img_size`` and removal of boxes of 1 px or less on a side.
    From epoch :func:`first_no_aug_epoch` on, mosaic and mixup are off (YOLOX's last
    epochs). An image that fails to load is replaced by the next readable one, warned
    about once per file and counted in ``source.unreadable`` (see
    :class:`data.image_io.UnreadableImageStats`).
    """

    def __init__(
        self,
        source: CocoSource,
        img_size: Sequence[int],
        max_objects: int,
        aug: AugmentParams,
        seed: int,
        epochs: int,
        no_aug_epochs: int,
    ):
        self.source = source
        self.img_size = (int(img_size[0]), int(img_size[1]))
        self.max_objects = int(max_objects)
        self.aug = aug
        self.seed = int(seed)
        self.strong_aug_epochs = first_no_aug_epoch(epochs, no_aug_epochs)
        self.with_objects = np.array(
            [i for i in range(len(source)) if source.has_objects(i)], dtype=np.int64
        )
        self._overflow_warned = False

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        epoch, i = divmod(int(key), len(self.source))
        img, boxes, labels = self.sample(epoch, i)
        # uint8 HWC as decoded: a quarter of float32's bytes through the pipeline and to the
        # device; the training step casts and transposes in-graph (engine.training.step).
        return (np.ascontiguousarray(img, dtype=np.uint8), *self.pad_targets(boxes, labels))

    def sample(self, epoch: int, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample ``i`` of ``epoch`` before padding: uint8 BGR [H, W, 3] at ``img_size``,
        boxes float32 [N, 4] xyxy and labels int64 [N]."""
        rng = np.random.default_rng([self.seed, epoch, i])
        aug = self.aug
        n = len(self.source)
        if epoch < self.strong_aug_epochs and rng.random() < aug.mosaic_prob:
            out_h, out_w = self.img_size
            centre_y = int(rng.uniform(0.5 * out_h, 1.5 * out_h))
            centre_x = int(rng.uniform(0.5 * out_w, 1.5 * out_w))
            others = rng.integers(0, n, 3)
            parts = [self._load(epoch, i, own=True)] + [self._load(epoch, j) for j in others]
            canvas, boxes, labels = mosaic_canvas(parts, (centre_x, centre_y), self.img_size)
            img, boxes = random_affine(
                canvas,
                boxes,
                rng,
                self.img_size,
                aug.degrees,
                aug.translate,
                aug.mosaic_scale,
                aug.shear,
            )
            # YOLOX 0.3.0 keeps every warped box here, however thin: they decide whether
            # mixup applies, and the final filter may give them back (train_transform).
            if len(boxes) and len(self.with_objects) and rng.random() < aug.mixup_prob:
                partner = self._load(epoch, int(rng.choice(self.with_objects)), need_objects=True)
                img, boxes, labels = mixup(img, boxes, labels, partner, rng, aug.mixup_scale)
        else:
            # As YOLOX's pull_item: the image resized to fit first, jittered after.
            img, boxes, labels = self._load(epoch, i, own=True)
            img, boxes = resize_to_fit(img, boxes, self.img_size)
        return self.train_transform(img, boxes, labels, rng)

    def train_transform(
        self, img: np.ndarray, boxes: np.ndarray, labels: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """YOLOX 0.3.0's ``TrainTransform``: HSV jitter (``hsv_prob``) and flip
        (``flip_prob``), letterbox to ``img_size``, boxes of 1 px or less on a side dropped.
        An image without boxes is only letterboxed (no jitter, no flip: YOLOX draws
        nothing for it); when every box is dropped, the sample goes back to the image before
        jitter and flip with all its boxes, the thin ones included, as YOLOX does."""
        aug = self.aug
        if len(boxes) == 0:
            img, _ = letterbox(img, self.img_size)
            return img, boxes.reshape(0, 4).astype(np.float32), labels.astype(np.int64)
        before = img, boxes, labels
        if rng.random() < aug.hsv_prob:
            img = hsv_jitter(img, rng)
        if rng.random() < aug.flip_prob:
            img, boxes = horizontal_flip(img, boxes)
        img, ratio = letterbox(img, self.img_size)
        kept, kept_labels = filter_boxes(boxes * np.float32(ratio), labels)
        if len(kept) == 0:
            img, ratio = letterbox(before[0], self.img_size)
            kept, kept_labels = before[1] * np.float32(ratio), before[2]
        return img, kept.astype(np.float32), kept_labels.astype(np.int64)

    def pad_targets(self, boxes: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`pad_targets` to ``data.max_objects``, warning once when boxes are left out."""
        if len(boxes) > self.max_objects and not self._overflow_warned:
            self._overflow_warned = True
            log.warning(
                "a training sample has %d boxes, more than data.max_objects=%d; keeping "
                "the largest (warned once)",
                len(boxes),
                self.max_objects,
            )
        return pad_targets(boxes, labels, self.max_objects)

    def _load(
        self, epoch: int, i: int, own: bool = False, need_objects: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Load image ``i``, or the next readable one (with objects, if asked) after it.

        ``own``: ``i`` is the sample's own image; only then is a failure counted, so each
        broken image counts once per epoch however often it is drawn as a partner.
        """
        n = len(self.source)
        stats = self.source.unreadable
        for step in range(min(n, MAX_REPLACEMENTS)):
            j = (i + step) % n
            if need_objects and not self.source.has_objects(j):
                continue
            try:
                return self.source.load(j)
            except ImageReadError as err:
                if own and step == 0:
                    stats.count(epoch)
                if stats.first_failure(self.source.image_path(j)):
                    log.warning("%s; using another image in its place (warned once)", err)
        raise RuntimeError(
            f"{min(n, MAX_REPLACEMENTS)} consecutive images from {self.source.img_dir} "
            "could not be read; is the image folder right?"
        )


def pad_targets(
    boxes: np.ndarray, labels: np.ndarray, max_objects: int
) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX targets [max_objects, 5] = (class, cx, cy, w, h) of xyxy ``boxes``, zero-padded,
    and the mask [max_objects] of real rows. Beyond ``max_objects`` the largest boxes are
    kept."""
    if len(boxes) > max_objects:
        areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        keep = np.sort(np.argsort(-areas, kind="stable")[:max_objects])
        boxes, labels = boxes[keep], labels[keep]
    targets = np.zeros((max_objects, 5), dtype=np.float32)
    mask = np.zeros((max_objects,), dtype=np.float32)
    count = len(boxes)
    targets[:count, 0] = labels
    targets[:count, 1:] = xyxy_to_cxcywh(boxes)
    mask[:count] = 1.0
    return targets, mask


class EvalSamples:
    """Letterboxed evaluation images for one rank, padded with blanks to whole batches.

    Item ``j`` is ``(image float32 [3, H, W], index int32, scale float32)``: the source
    position (-1 for padding; :func:`unreadable_index` of it for an unreadable image, which
    is evaluated as an image without detections: its ground truth still counts) and the
    letterbox ratio.
    """

    def __init__(self, source: CocoSource, img_size: Sequence[int], positions: Sequence[int]):
        self.source = source
        self.img_size = (int(img_size[0]), int(img_size[1]))
        self.positions = np.asarray(positions, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        i = int(self.positions[int(j)])
        if i >= 0:
            try:
                img = self.source.load_as_annotated(i)
            except ImageReadError as err:
                log.warning(
                    "%s; it is evaluated as an image without detections (its ground truth "
                    "counts as missed)",
                    err,
                )
                blank = np.full((*self.img_size, 3), PAD_VALUE, dtype=np.uint8)
                return (
                    _to_chw(blank),
                    np.array(unreadable_index(i), np.int32),
                    np.array(1.0, np.float32),
                )
            else:
                img, ratio = letterbox(img, self.img_size)
                return _to_chw(img), np.array(i, np.int32), np.array(ratio, np.float32)
        blank = np.full((*self.img_size, 3), PAD_VALUE, dtype=np.uint8)
        return _to_chw(blank), np.array(-1, np.int32), np.array(1.0, np.float32)


def warn_size_mismatches(source: CocoSource) -> None:
    """One warning (once per source) counting the images that are not the size their
    annotation says: evaluation resizes them to it (:meth:`CocoSource.load_as_annotated`)."""
    found = source.size_mismatches()
    if not found or source.size_mismatches_reported:
        return
    source.size_mismatches_reported = True
    i, (w, h), (aw, ah) = found[0]
    log.warning(
        "%d of %d images in %s are not the size their annotation says (the first: %s, "
        "%dx%d pixels, annotated %dx%d): evaluated resized to the annotated size, as "
        "training scales their boxes to the pixels",
        len(found),
        len(source),
        source.img_dir,
        source.image_info(i)["file_name"],
        w,
        h,
        aw,
        ah,
    )


def unreadable_index(position: int) -> int:
    """The index column's value for the unreadable image at ``position``: below -1 (the
    padding value), so that batches keep static shapes and the evaluator still knows which
    image it was (:func:`source_position`)."""
    return -2 - int(position)


def source_position(index: np.ndarray) -> np.ndarray:
    """The source positions of an index column: ``i >= 0`` read images, ``-1`` padding,
    below that unreadable images (decoded back to their position)."""
    index = np.asarray(index)
    return np.where(index <= -2, -2 - index, index)


def _to_chw(img: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)


def _check_layout(data_cfg: Any) -> None:
    """``data.layout``: the one YOLOX feeds, or an error naming it."""
    if data_cfg.layout not in LAYOUTS:
        raise ValueError(
            f"data.layout={data_cfg.layout!r} is not supported; msdet feeds YOLOX's "
            f"layout {LAYOUTS[0]!r} (BGR, 0-255, CHW)"
        )


def build_train_dataset(
    data_cfg: Any,
    source: CocoSource,
    batch_size: int,
    epochs: int,
    no_aug_epochs: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    start_epoch: int = 0,
    buckets: Sequence[int] = (),
    img_size: Sequence[int] | None = None,
) -> ds.Dataset:
    """The training dataset: batches of ``("images", "targets", "mask")`` at ``img_size``
    (``(h, w)``: the training run's ``train.input_size``; None: ``data.img_size``). Sizes
    come checked from the config (``msdet.common.config``).

    images uint8 [B, H, W, 3] (BGR 0-255), targets float32 [B, max_objects, 5]
    (class, cx, cy, w, h in input pixels, zero rows for padding), mask float32
    [B, max_objects]. One epoch is ``len(source) // world_size // batch_size`` steps
    (incomplete batches are dropped). The returned dataset has an ``epoch_sampler``
    attribute (the :class:`EpochSampler`, see its note on :meth:`EpochSampler.set_epoch`);
    unreadable-image counts are in ``source.unreadable``. With more than one of
    ``buckets`` (:func:`data.buckets.target_buckets`) each batch's targets and mask keep
    only the rows of its bucket (:class:`data.buckets.TrimToBucket`).
    """
    _check_layout(data_cfg)
    if img_size is None:
        img_size = data_cfg.img_size
    sampler = EpochSampler(len(source), seed, start_epoch, rank, world_size, shuffle=True)
    if len(sampler) < batch_size:
        raise ValueError(
            f"{source.ann_file}: {len(source)} images give {len(sampler)} per rank, fewer "
            f"than one batch of {batch_size}"
        )
    samples = TrainSamples(
        source,
        img_size,
        int(data_cfg.max_objects),
        AugmentParams.from_config(data_cfg.aug),
        seed,
        epochs,
        no_aug_epochs,
    )
    dataset = ds.GeneratorDataset(
        samples,
        column_names=list(TRAIN_COLUMNS),
        sampler=sampler,
        num_parallel_workers=resolve_num_workers(data_cfg.num_workers, world_size),
        python_multiprocessing=bool(data_cfg.python_multiprocessing),
    )
    dataset = dataset.batch(batch_size, drop_remainder=True)
    if len(buckets) > 1:
        dataset = dataset.map(TrimToBucket(buckets), input_columns=["targets", "mask"])
    dataset.epoch_sampler = sampler
    return dataset


def eval_positions(num_images: int, batch_size: int, rank: int, world_size: int) -> np.ndarray:
    """Source positions evaluated by ``rank``: every ``world_size``-th image from ``rank``,
    then -1 padding so that every rank runs the same whole number of batches."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    per_rank = -(-num_images // world_size)
    length = max(1, -(-per_rank // batch_size)) * batch_size
    positions = np.full(length, -1, dtype=np.int64)
    own = np.arange(rank, num_images, world_size)
    positions[: len(own)] = own
    return positions


def build_eval_dataset(
    data_cfg: Any,
    source: CocoSource,
    img_size: Sequence[int],
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
) -> ds.Dataset:
    """The evaluation dataset: batches of ``("images", "index", "scale")`` at ``img_size``
    (``(h, w)``, as checked by the config: ``eval.img_size``, or an exported file's input).

    images float32 [B, 3, H, W] letterboxed (top-left, pad 114), index int32 [B] (source
    position; -1 for padding, :func:`unreadable_index` for unreadable images), scale float32 [B] (letterbox ratio:
    divide predicted boxes by it). With ``world_size > 1`` each rank gets a disjoint share.
    """
    _check_layout(data_cfg)
    positions = eval_positions(len(source), batch_size, rank, world_size)
    warn_size_mismatches(source)
    dataset = ds.GeneratorDataset(
        EvalSamples(source, img_size, positions),
        column_names=list(EVAL_COLUMNS),
        shuffle=False,
        num_parallel_workers=resolve_num_workers(data_cfg.num_workers, world_size),
        python_multiprocessing=bool(data_cfg.python_multiprocessing),
    )
    return dataset.batch(batch_size, drop_remainder=True)
