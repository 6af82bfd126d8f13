"""labels.png for a training run: drawn from the train split's annotations into the run
folder, at the input training uses."""

from __future__ import annotations

import cv2
import pytest

from msdet.data.coco import CocoSource
from msdet.data.folders import find_layout
from msdet.data.labels_plot import write_labels_plot
from tests.support.exports import voc


@pytest.mark.slow  # matplotlib draws for a second
def test_a_runs_labels_plot_is_written_into_its_folder(tmp_path):
    layout = find_layout(str(voc(tmp_path / "voc")), str(tmp_path / "cache"))
    source = CocoSource("", *layout.splits["train"])
    path = write_labels_plot(source, (64, 64), str(tmp_path / "run"))
    assert path == str(tmp_path / "run" / "labels.png")
    image = cv2.imread(path)
    assert image.shape == (900, 1200, 3) and image.std() > 10
