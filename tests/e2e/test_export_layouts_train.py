"""Every labelling tool's export trains: given as ``data=FOLDER``, each layout of
tests/support/exports.py goes through the training pipeline and takes one optimizer step of
YOLOX-nano at 64 px, all in one process (the layouts share their classes and shapes, so
one compiled step serves them all: ~30 s on 2 cores)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.exports import LAYOUTS

SETTINGS = [
    "data.img_size=[64,64]",
    "train.img_scale=1",
    "data.num_workers=1",
    "data.python_multiprocessing=false",
    "data.max_objects=16",
]
BATCH = 2


@pytest.mark.slow
def test_every_export_takes_a_training_step(tmp_path):
    from msdet.common.config import load_config
    from msdet.data.build import build_sources
    from msdet.data.pipeline import build_train_dataset
    from msdet.engine.runtime.process import Runtime
    from msdet.engine.training.step import build_train_step
    from msdet.models.loss import YOLOXLoss
    from msdet.models.yolox import build_model

    rt = Runtime(device="CPU", mode="graph", amp_level="O0", sink=False, sink_size=-1)
    step = net = None
    trained = {}
    for name, (writer, _, (n_train, _)) in sorted(LAYOUTS.items()):
        root = writer(tmp_path / name)
        cfg = load_config(
            "train", [f"data={root}", f"data.cache_dir={tmp_path / 'cache'}", *SETTINGS]
        )
        train, _ = build_sources(cfg.data)
        assert (len(train), train.class_names) == (n_train, ["disc", "square"])
        if step is None:
            net = build_model(cfg.model, train.num_classes)
            tcfg = cfg.train
            loss = YOLOXLoss(
                train.num_classes,
                iou_weight=float(tcfg.loss.iou_weight),
                assigner_rule=str(tcfg.assigner.rule),
                center_radius=tcfg.assigner.center_radius,
            )
            lrs = np.full(len(LAYOUTS), 0.01, np.float32)
            step = build_train_step(net, loss, lrs, tcfg, rt, skip_nonfinite=True)
        dataset = build_train_dataset(cfg.data, train, BATCH, 1, 0, seed=0, img_size=(64, 64))
        images, targets, mask = next(dataset.create_tuple_iterator())
        assert float(mask.asnumpy().sum()) > 0  # the batch holds the layout's boxes
        before = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
        outputs = step(images, targets, mask)
        total = float(outputs[0].asnumpy())
        moved = sum(not np.array_equal(before[p.name], p.asnumpy()) for p in net.trainable_params())
        # The update reaches the whole network (a parameter whose gradient is 0 on a batch
        # without some class or scale keeps its value).
        trained[name] = bool(np.isfinite(total) and total > 0 and moved > 0.9 * len(before))
    assert trained == {name: True for name in LAYOUTS}
