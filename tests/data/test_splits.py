"""The val split held out of a set that has none: chosen by name, stable as the set grows."""

from __future__ import annotations

import pytest

from msdet.data.splits import hold_out, split_coco


def test_val_is_one_in_five_by_name_and_stays_when_images_are_added():
    names = [f"img{k}.jpg" for k in range(200)]
    train, val = hold_out(names, str)
    assert (len(train), len(val)) == (152, 48)  # sha1 of the name, 1 bucket in 5: about 40
    assert not set(train) & set(val)
    assert hold_out(list(reversed(names)), str)[1] == list(reversed(val))  # order-free
    grown_train, grown_val = hold_out(names + [f"new{k}.jpg" for k in range(50)], str)
    assert set(val) <= set(grown_val) and set(train) <= set(grown_train)


def test_a_tiny_set_keeps_one_image_on_each_side():
    assert [len(part) for part in hold_out(["a.jpg", "b.jpg"], str)] == [1, 1]
    with pytest.raises(ValueError, match="1 image\\(s\\): too few"):
        hold_out(["a.jpg"], str)


def test_a_coco_dict_is_split_with_its_annotations():
    images = [{"id": k, "file_name": f"{k}.jpg"} for k in range(10)]
    anns = [{"id": k, "image_id": k % 10} for k in range(30)]
    train, val = split_coco({"images": images, "annotations": anns, "categories": [1]})
    for part in (train, val):
        ids = {img["id"] for img in part["images"]}
        assert {a["image_id"] for a in part["annotations"]} == ids
        assert len(part["annotations"]) == 3 * len(ids) and part["categories"] == [1]
    assert len(train["images"]) + len(val["images"]) == 10
