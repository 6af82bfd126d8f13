"""A command line against a checkpoint's description: values read as Hydra reads them."""

from __future__ import annotations

from msdet.models.description import Description, contradictions


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
