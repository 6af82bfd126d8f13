"""A command line against a checkpoint's description: values read as Hydra reads them."""

from __future__ import annotations

import pytest

from msdet.models.description import (
    ClassMismatchError,
    Description,
    class_label_map,
    contradictions,
    numbered_names,
)


def _description() -> Description:
    return Description(
        model={"name": "yolox_nano", "depthwise": False, "width": 0.25, "num_classes": 3},
        class_names=["a", "b", "c"],
        category_ids=[0, 1, 2],
    )


def test_values_that_agree_are_not_contradictions():
    # ``false`` typed on the command line is Hydra's bool False, not the string "false".
    typed = {"model": "yolox_nano", "model.depthwise": "false", "model.width": "0.25"}
    assert contradictions(_description(), typed) == []
    assert contradictions(_description(), {"model.num_classes": "null"}) == []


def test_each_value_that_differs_is_named():
    typed = {"model.depthwise": "true", "model.width": "0.5", "model.num_classes": "80"}
    found = contradictions(_description(), typed)
    assert found == [
        "model.depthwise=true contradicts the checkpoint's depthwise=False",
        "model.width=0.5 contradicts the checkpoint's width=0.25",
        "model.num_classes=80 contradicts the checkpoint's num_classes=3",
    ]
    assert contradictions(_description(), {"model": "yolox_s"}) == [
        "model=yolox_s contradicts the checkpoint, a yolox_nano"
    ]


def test_the_same_names_in_the_same_order_score_as_they_are():
    assert class_label_map(["a", "b", "c"], ["a", "b", "c"], "strict") == [0, 1, 2]
    assert class_label_map(["a", "b", "c"], ["a", "b", "c"], "by_name") == [0, 1, 2]


def test_other_names_are_an_error_naming_both_lists():
    with pytest.raises(ClassMismatchError) as err:
        class_label_map(["disc", "rectangle", "triangle"], ["star", "cross", "ring"], "strict",
                        "best.ckpt", "instances_val.json")  # fmt: skip
    text = str(err.value)
    assert "best.ckpt has ['disc', 'rectangle', 'triangle']" in text
    assert "instances_val.json has ['star', 'cross', 'ring']" in text
    assert "by_name" not in text  # mapping by name cannot help here


def test_the_same_names_in_another_order_say_how_to_map_them_by_name():
    model, data = ["disc", "triangle", "rectangle"], ["disc", "rectangle", "triangle"]
    with pytest.raises(ClassMismatchError, match=r"\['disc', 'triangle', 'rectangle'\], .*"
                       r"another order: eval.class_map=by_name"):  # fmt: skip
        class_label_map(model, data, "strict")
    # Model class k is scored as the dataset's class of its name.
    assert class_label_map(model, data, "by_name") == [0, 2, 1]


def test_by_name_leaves_out_model_classes_the_dataset_lacks_but_not_the_reverse():
    assert class_label_map(["person", "car", "dog"], ["dog", "person"], "by_name") == [1, -1, 0]
    with pytest.raises(ClassMismatchError, match=r"\['truck'\].*not among"):
        class_label_map(["person", "car"], ["car", "truck"], "by_name")
    with pytest.raises(ClassMismatchError, match=r"no class in common"):
        class_label_map(["person", "car"], ["cat"], "by_name")


def test_by_name_matches_names_as_fine_tuning_does():
    """Issue: eval.class_map=by_name was case-sensitive where fine-tuning's mapping is not."""
    model, data = ["Person", "traffic_light", "car"], ["car", "person", "traffic light"]
    assert class_label_map(model, data, "by_name") == [1, 2, 0]


def test_long_lists_show_their_first_differences():
    model = [f"c{i}" for i in range(80)]
    data = list(model)
    data[5], data[40] = "five", "forty"
    with pytest.raises(ClassMismatchError) as err:
        class_label_map(model, data, "strict", "coco.ckpt", "val.json")
    text = str(err.value)
    assert "position 5: 'c5' / 'five'" in text and "position 40: 'c40' / 'forty'" in text
    assert "80 names" in text and "c79" not in text  # not the whole lists
    with pytest.raises(ClassMismatchError, match=r"80 classes.*79 classes"):
        class_label_map(model, model[:79], "strict")


def test_numbered_names_are_no_names():
    assert numbered_names(["class0", "class1"]) and not numbered_names(["class1", "class0"])
    assert not numbered_names(["disc", "rectangle"])
