"""Turn the ``data`` config group into its train and val :class:`CocoSource` splits."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from msdet.common.cache import cache_error, dataset_cache_dir, make_cache_folder
from msdet.common.paths import windows_path_hint
from msdet.data.coco import MIN_BOX_SIDE, CocoSource, drop_grouping_categories
from msdet.data.folders import find_layout
from msdet.data.image_io import ImageReadError, read_image
from msdet.data.synthetic import categories_for, ensure_shapes_dataset, shapes_root

log = logging.getLogger(__name__)

# More of a split's image files missing than this is a wrong folder, not a few lost files.
MAX_MISSING_FRACTION = 0.5


def dataset_root(data_cfg: Any) -> str:
    """The folder ``data_cfg``'s splits live in, their paths relative to it.

    ``data.name == "shapes"``: the built-in synthetic set (kinds ``data.classes``, shapes
    at least ``data.min_object_size`` px), generated on first use into ``data.root`` or,
    when that is null, ``<data.cache_dir>/shapes-<seed>-<train>-<val>[-<kinds>][-min<N>]``.
    Any other name: ``data.root``, which must exist (``FileNotFoundError`` naming it).
    """
    if data_cfg.name == "shapes":
        classes = tuple(data_cfg.classes or ()) or None
        min_size = int(data_cfg.min_object_size)
        root = data_cfg.root or shapes_root(
            dataset_cache_dir(data_cfg.cache_dir),
            int(data_cfg.seed),
            int(data_cfg.num_train),
            int(data_cfg.num_val),
            classes,
            min_size,
        )
        setting = "data.root" if data_cfg.root else "data.cache_dir"
        make_cache_folder(os.path.dirname(os.path.abspath(root)), setting)
        try:
            return ensure_shapes_dataset(
                root,
                int(data_cfg.num_train),
                int(data_cfg.num_val),
                int(data_cfg.seed),
                classes,
                min_size,
            )
        except FileExistsError:
            raise  # a folder of that name that is not a generated set: its message says so
        except OSError as err:
            raise cache_error(root, err, setting) from err
    if not data_cfg.root:
        raise ValueError(f"data.root must be set for dataset {data_cfg.name!r}")
    root = os.path.abspath(str(data_cfg.root))
    if not os.path.exists(root):
        hint = windows_path_hint(str(data_cfg.root), "data.root")
        raise FileNotFoundError(
            f"dataset root not found: {root} (data.root)" + (f": {hint}" if hint else "")
        )
    return root


def split_paths(
    data_cfg: Any,
    splits: tuple[str, ...] = ("train", "val"),
    skipped: dict[str, list[str]] | None = None,
    notes: list[str] | None = None,
    found: dict[str, str] | None = None,
) -> dict[str, tuple[str, str]]:
    """split -> (annotation file, image folder), absolute.

    The dataset is found (and the shapes set generated) by :func:`dataset_root`; each
    split is ``data.<split>.{ann_file,img_dir}`` relative to it. Paths left null (a dataset
    given as ``data=path/to/folder``) are found in the folder (:mod:`msdet.data.folders`:
    the layouts of the labelling tools, converted to COCO once where they are not COCO).
    ``skipped``, when given, receives per split the files its conversion left out, each
    with its problem; ``notes`` what was done to read the folder (the log has them too);
    ``found`` the folder the dataset resolved to (``root``) and the layout read (``layout``),
    which checkpoints record (``data.record``)."""
    root = dataset_root(data_cfg)
    given = {s: (data_cfg[s].ann_file, data_cfg[s].img_dir) for s in splits}
    if all(ann is not None and img is not None for ann, img in given.values()):
        if found is not None:
            generated = data_cfg.name == "shapes"
            found.update(root=root, layout="the built-in shapes set" if generated
                         else "COCO files named by data.train and data.val")  # fmt: skip
        return {
            s: (os.path.join(root, str(a)), os.path.join(root, str(i)))
            for s, (a, i) in given.items()
        }
    layout = find_layout(root, data_cfg.cache_dir, splits)
    if found is not None:
        found.update(root=root, layout=layout.tool or layout.kind)
    if skipped is not None:
        skipped.update(layout.skipped)
    if notes is not None:
        notes.extend([f"{root} as {layout.tool or layout.kind}", *layout.notes])
    paths = {}
    for split, (ann, img) in given.items():
        found_ann, found_img = layout.splits[split]
        paths[split] = (
            os.path.join(root, str(ann)) if ann is not None else found_ann,
            os.path.join(root, str(img)) if img is not None else found_img,
        )
    log.info(
        "data=%s: %s, %s",
        root,
        layout.tool or layout.kind,
        "; ".join(f"{s} {a} with images in {i}" for s, (a, i) in paths.items()),
    )
    for note in layout.notes:
        log.info("data=%s: %s", root, note)
    return paths


def build_sources(
    data_cfg: Any, found: dict[str, str] | None = None
) -> tuple[CocoSource, CocoSource]:
    """The (train, val) sources of ``data_cfg`` (:func:`split_paths`, which fills ``found``).
    A missing annotation file or image folder raises ``FileNotFoundError`` naming the path."""
    paths = split_paths(data_cfg, found=found)
    train = CocoSource("", *paths["train"])
    val = CocoSource("", *paths["val"])
    if train.category_ids != val.category_ids:
        raise ValueError(
            f"train and val have different categories: {train.ann_file} has ids "
            f"{train.category_ids}, {val.ann_file} has {val.category_ids}"
        )
    if train.class_names != val.class_names:
        differ = [
            f"id {c}: {a!r} / {b!r}"
            for c, a, b in zip(train.category_ids, train.class_names, val.class_names)
            if a != b
        ]
        raise ValueError(
            f"train and val name their categories differently: {train.ann_file} has "
            f"{train.class_names}, {val.ann_file} has {val.class_names} ({', '.join(differ)}): "
            "checkpoints would carry one split's names and evaluation report the other's; "
            "give both files the same categories"
        )
    for note in train.notes:
        log.info("%s: %s", train.ann_file, note)
    check_images_present(train, "data.train.img_dir")
    check_images_present(val, "data.val.img_dir")
    check_has_boxes(train)
    return train, val


def check_has_boxes(source: CocoSource) -> None:
    """Refuse a split without a single box to train on, saying why (no annotations, all of
    them malformed: the first reasons, or all crowd regions or too thin)."""
    if any(source.has_objects(i) for i in range(len(source))):
        return
    kept = len(source.coco.dataset["annotations"])
    skipped = source.skipped_annotations
    if not kept and not skipped:
        why = "it has no annotations"
    elif not kept:
        why = (
            f"all {len(skipped)} annotations are skipped as malformed: "
            + "; ".join(skipped[:3])
            + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        )
    else:
        why = (
            f"its {kept} well-formed annotations are crowd regions, boxes of {MIN_BOX_SIDE:g} "
            "px or less, or on images left out"
            + (f" ({len(skipped)} more are malformed: {skipped[0]})" if skipped else "")
        )
    raise ValueError(f"{source.ann_file}: no usable box to train on: {why}")


def build_val_source(data_cfg: Any) -> CocoSource:
    """The val source of ``data_cfg`` alone (eval.py needs no train split)."""
    val = CocoSource("", *split_paths(data_cfg, ("val",))["val"])
    check_images_present(val, "data.val.img_dir")
    return val


def check_images_present(source: CocoSource, key: str, probe: int = 8) -> None:
    """Refuse a split whose image files are mostly missing (a wrong ``img_dir``: another
    split's folder holds a few of its files at most), naming the folder and the first
    missing files, before any step runs; leave out the missing images of a split that has
    most of them, with a warning that counts them (the split's length is then the real
    count: no other image is drawn in their place). Existence is checked for every file,
    decoding for the first ``probe`` present ones."""
    paths = [source.image_path(i) for i in range(len(source))]
    present = [i for i, p in enumerate(paths) if os.path.isfile(p)]
    missing = [p for p in paths if not os.path.isfile(p)]
    if paths and not present:
        raise FileNotFoundError(
            f"none of the {len(paths)} images of {source.ann_file} is in {source.img_dir} "
            f"(the first: {paths[0]}): check {key} (and data.root)"
        )
    if len(missing) > MAX_MISSING_FRACTION * len(paths):
        shown = ", ".join(os.path.relpath(p, source.img_dir) for p in missing[:3])
        raise FileNotFoundError(
            f"{len(missing)} of the {len(paths)} images of {source.ann_file} are not in "
            f"{source.img_dir} (e.g. {shown}): check {key} (and data.root); a split may miss "
            f"at most {MAX_MISSING_FRACTION:.0%} of its files, which are then left out"
        )
    if missing:
        log.warning(
            "%d of %d images of %s are missing from %s (e.g. %s); they are left out: %s has "
            "the other %d",
            len(missing),
            len(paths),
            source.ann_file,
            source.img_dir,
            missing[0],
            "training" if key.startswith("data.train") else "evaluation",
            len(present),
        )
        source.keep_images(present)
    errors = []
    for path in [paths[i] for i in present[:probe]]:
        try:
            read_image(path)
            return
        except ImageReadError as err:
            errors.append(str(err))
    if errors:
        raise ImageReadError(
            f"the first {len(errors)} images in {source.img_dir} cannot be decoded ({errors[0]}): "
            f"check {key} and the files"
        )


def dataset_classes(data_cfg: Any) -> tuple[list[str], list[int]]:
    """Class names and category ids (in training order: sorted ids) of ``data_cfg``'s
    dataset, without building or generating it: the built-in set's from its config, a COCO
    folder's from the categories of its val annotation file, read as training reads them (a
    category that only groups the others, as in Roboflow's exports, is not a class)."""
    if data_cfg.name == "shapes":
        categories = list(categories_for(tuple(data_cfg.classes or ()) or None))
    else:
        path = split_paths(data_cfg, ("val",))["val"][0]
        try:
            with open(path, encoding="utf-8") as f:
                dataset = json.load(f)
            dataset.setdefault("annotations", [])
            drop_grouping_categories(dataset)
            categories = dataset["categories"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"no categories in {path} ({err})") from err
    ordered = sorted(categories, key=lambda c: int(c["id"]))
    return [str(c["name"]) for c in ordered], [int(c["id"]) for c in ordered]
