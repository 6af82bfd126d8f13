"""engine.inference.export_check: an exported file is scored on a val split only under
its own class names."""

from __future__ import annotations

import pytest

from msdet.common.config import load_config
from msdet.engine.inference.export_check import compare_on_val
from msdet.engine.inference.exported import METADATA_KEY
from msdet.models.description import ClassMismatchError
from tests.support.inference import export_info as info
from tests.support.inference import write_model


def test_a_named_dataset_of_other_classes_is_an_error_and_the_default_one_is_skipped(tmp_path):
    path = tmp_path / "model.onnx"  # described as disc, rectangle, triangle
    write_model(path, {METADATA_KEY: info().to_json()}, dims=(2, 3))
    stars = ["data.classes=[star,cross,ring]", f"data.cache_dir={tmp_path}"]
    cfg = load_config("export", [f"ckpt={tmp_path}/best.ckpt", *stars])
    typed = {"data.classes": "[star,cross,ring]"}
    with pytest.raises(ClassMismatchError) as err:
        compare_on_val(cfg, None, str(path), typed, None, str(tmp_path / "run"))
    text = str(err.value)
    assert "has ['disc', 'rectangle', 'triangle']" in text
    assert "data=shapes has ['star', 'cross', 'ring']" in text  # in id order: 11, 13, 17
    assert "export.val=false" in text
    # Not named on the command line: the default dataset is no claim about the model.
    report = compare_on_val(cfg, None, str(path), {}, None, str(tmp_path / "run"))
    assert "the classes differ" in report["skipped"]
    assert not (tmp_path / "run").exists()  # nothing was evaluated
