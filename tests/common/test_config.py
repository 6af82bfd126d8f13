"""The one config loader: every group option composes, overrides reach their keys, and a
key or value msdet cannot use is an error naming it, before any work."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from msdet.common.config import COMMANDS, load_config, parse_overrides, scaled_size, suggestion
from msdet.common.schema import ConfigError
from tests.support import ROOT

CONFIGS = os.path.join(ROOT, "configs")


def options(group: str) -> list[str]:
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONFIGS, group)) if f.endswith(".yaml"))


def test_default_composition():
    cfg = load_config("train")
    assert cfg.model.name == "yolox_nano" and cfg.data.name == "shapes"
    assert cfg.runtime.device == "auto" and cfg.train.epochs > 0
    assert list(cfg.eval.img_size) == list(cfg.data.img_size) == [320, 320]
    assert cfg.run.root == "runs" and cfg.run.name is None and cfg.run.dir is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "group,expected",
    [
        (
            "model",
            [
                "yolox_darknet53",
                "yolox_l",
                "yolox_m",
                "yolox_nano",
                "yolox_s",
                "yolox_tiny",
                "yolox_x",
            ],
        ),  # fmt: skip
        ("data", ["coco", "shapes", "shapes_stars"]),
        ("runtime", ["ascend", "ascend_8p", "auto", "cpu"]),
        ("train", ["parity", "shapes", "yolox"]),
    ],
)
def test_every_option_composes_and_passes_the_schema(group, expected):
    assert options(group) == expected
    # What tells the options apart: the runtime files by their device, shapes_stars (a
    # shapes set, name "shapes") by its classes, the others by their name.
    devices = {"ascend": "Ascend", "ascend_8p": "Ascend", "auto": "auto", "cpu": "CPU"}
    for name in expected:
        cfg = load_config("train", [f"{group}={name}"])
        if group == "runtime":
            assert cfg.runtime.device == devices[name]
        elif name == "shapes_stars":
            assert cfg.data.name == "shapes" and list(cfg.data.classes) == ["star", "cross", "ring"]
        else:
            assert cfg[group].name == name


@pytest.mark.slow
def test_runtime_groups_differ_where_they_should():
    cpu = load_config("train", ["runtime=cpu"]).runtime
    ascend = load_config("train", ["runtime=ascend"]).runtime
    eight = load_config("train", ["runtime=ascend_8p"]).runtime
    assert cpu.device == "CPU" and not cpu.distributed
    assert ascend.device == "Ascend" and ascend.amp == "O2" and ascend.sink is True
    assert eight.device == "Ascend" and eight.distributed is True


def test_darknet53_trains_with_the_yolox_recipe_unchanged():
    """exp/default/yolov3.py changes only the model: its recipe is yolox_base's."""
    darknet = load_config("train", ["model=yolox_darknet53", "train=yolox"])
    assert darknet.model.backbone == "darknet53" and darknet.model.act == "lrelu"
    assert darknet.train == load_config("train", ["model=yolox_l", "train=yolox"]).train


def test_overrides_reach_nested_keys_and_sizes_become_pairs():
    cfg = load_config(
        "train",
        [
            "model=yolox_s",
            "train.epochs=300",
            "runtime.device=Ascend",
            "data.aug.mosaic_prob=0.25",
            "eval.img_size=416",
            "+train.patience=3",
        ],  # fmt: skip
    )
    assert cfg.model.width == 0.5 and cfg.train.epochs == 300 and cfg.train.patience == 3
    assert cfg.runtime.device == "Ascend" and cfg.data.aug.mosaic_prob == 0.25
    assert list(cfg.eval.img_size) == [416, 416] and list(cfg.data.img_size) == [320, 320]
    assert list(load_config("train", ["data.img_size=256"]).eval.img_size) == [256, 256]


@pytest.mark.slow
@pytest.mark.parametrize(
    "command,overrides,message",
    [
        ("train", ["modle=x"], "unknown setting modle; did you mean model"),
        ("train", ["train.epoch=3"], "unknown setting train.epoch; did you mean train.epochs?"),
        ("predict", ["+conf=0.5"], "unknown setting conf; did you mean predict.conf"),
        ("predict", ["conf=0.5"], "did you mean predict.conf"),
        ("train", ["model=yolox_q"], "no such model config; did you mean yolox_x"),
        ("train", ["source=x.jpg"], "train.py does not take source (predict.py does)"),
        ("eval", ["train.epochs=3"], "eval.py does not take train.epochs (train.py does)"),
        ("train", ["train.epochs=2.5"], "train.epochs must be an integer >= 1, got 2.5"),
        ("train", ["train.epochs=abc"], "train.epochs must be an integer >= 1, got 'abc'"),
        ("train", ["train.epochs=0"], "train.epochs must be an integer >= 1, got 0"),
        ("train", ["train.batch_size=-2"], "train.batch_size must be an integer >= 1, got -2"),
        ("train", ["data.img_size=250"], "data.img_size must be a size in pixels"),
        ("train", ["data.aug.flip_prob=1.5"], "data.aug.flip_prob must be a number >= 0 and <= 1"),
        ("train", ["runtime.amp=O4"], "runtime.amp must be one of auto, O0, O1, O2, O3"),
        ("train", ["hydra.run.dir=x"], "the run folder is run.dir=PATH"),
        ("train", ["~train.ema"], "cannot be deleted"),
        ("train", ["train.epochs"], "not a setting: settings are key=value"),
        ("train", ["train.lr_per_img=[0.1"], "not a value msdet can read"),
    ],
)
def test_what_msdet_cannot_use_is_an_error_naming_it(command, overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(command, overrides)
    assert message in str(err.value)


def test_paths_and_globs_are_taken_as_typed():
    cfg = load_config("predict", ["source=photos/[ab]*.jpg", "ckpt=runs/a b/best.ckpt"])
    assert cfg.source == "photos/[ab]*.jpg" and cfg.ckpt == "runs/a b/best.ckpt"
    assert load_config("predict", ["source=0"]).source == "0"
    assert load_config("train", ["train.resume=null"]).train.resume is None


def test_the_config_is_in_struct_mode():
    cfg = load_config("train")
    with pytest.raises(Exception, match="epoch"):
        _ = cfg.train.epoch


def test_overrides_are_read_as_typed():
    parsed = parse_overrides(["+train.epochs=3", "source=a[1].jpg", "data.classes=[a,b]"])
    assert [(o.key, o.value, o.verbatim) for o in parsed] == [
        ("train.epochs", 3, False),
        ("source", "a[1].jpg", True),
        ("data.classes", ["a", "b"], False),
    ]


def test_suggestions_come_from_the_whole_key_or_its_last_part():
    keys = ["train.epochs", "predict.conf", "eval.conf_thresh", "train.batch_size"]
    assert suggestion("train.epoch", keys) == "; did you mean train.epochs?"
    assert "predict.conf" in suggestion("conf", keys)
    assert suggestion("zzz", keys) == ""


def test_every_entry_point_takes_the_run_folder_and_the_runtime():
    for name in ("train", "eval", "predict", "export"):
        assert {"run", "runtime"} <= set(COMMANDS[name].sections)


def sizes(cfg) -> tuple[list[int], list[int], list[int]]:
    """(data.img_size, train.input_size, eval.img_size) as plain lists."""
    return list(cfg.data.img_size), list(cfg.train.input_size), list(cfg.eval.img_size)


def test_the_sizes_are_resolved_once_at_load():
    """train.input_size = data.img_size x train.img_scale (sides rounded to multiples of
    32), eval.img_size null -> data.img_size: the default recipe trains at 256 and
    evaluates at 320; a typed data.img_size moves both."""
    assert sizes(load_config("train")) == ([320, 320], [256, 256], [320, 320])
    assert sizes(load_config("train", ["train=parity"])) == ([320, 320], [320, 320], [320, 320])
    assert sizes(load_config("train", ["train=yolox"])) == ([320, 320], [320, 320], [320, 320])
    bigger = load_config("train", ["data.img_size=416"])
    assert sizes(bigger) == ([416, 416], [320, 320], [416, 416])  # 332.8 -> 320
    assert sizes(load_config("train", ["data.img_size=[416,640]"]))[1:] == ([320, 512], [416, 640])
    assert sizes(load_config("train", ["train.img_scale=0.7"]))[1] == [224, 224]  # 224.0
    assert sizes(load_config("train", ["train.img_scale=0.85"]))[1] == [288, 288]  # 272 -> 8.5
    assert sizes(load_config("train", ["train.img_scale=0.05"]))[1] == [32, 32]  # one stride
    typed = load_config("train", ["eval.img_size=[288,352]", "train.img_scale=1.5"])
    assert sizes(typed) == ([320, 320], [480, 480], [288, 352])
    assert sizes(load_config("eval", ["eval.img_size=null", "data.img_size=256"]))[2] == [256, 256]
    assert sizes(load_config("predict", ["eval.img_size=416"]))[2] == [416, 416]
    coco = load_config("train", ["data=coco", "train=yolox"])
    assert sizes(coco) == ([640, 640], [640, 640], [640, 640])


def test_the_scaled_size_rounds_each_side_to_the_nearest_stride():
    assert scaled_size([320, 320], 0.8) == [256, 256]
    assert scaled_size([64, 128], 0.8) == [64, 96]  # 51.2 -> 64, 102.4 -> 96
    assert scaled_size([320, 416], 0.7) == [224, 288]  # 224, 291.2 -> 288
    assert scaled_size([64, 64], 0.2) == [32, 32]  # never below one stride
    assert scaled_size([320, 320], 1.5) == [480, 480]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["train.img_scale=0"], "train.img_scale must be a number > 0 and <= 4, got 0"),
        (["train.img_scale=5"], "train.img_scale must be a number > 0 and <= 4, got 5"),
        (["train.img_scale=big"], "train.img_scale must be a number"),
        (["data.img_size=300"], "data.img_size must be a size in pixels"),
        (["data.img_size=[320]"], "data.img_size must be a size in pixels"),
        (["eval.img_size=[320,100]"], "eval.img_size must be a size in pixels"),
        (["train.input_size=256"], "train.input_size is not a setting but the training input"),
        (["+train.input_size=[256,256]"], "data.img_size x train.img_scale"),
    ],
)
def test_a_bad_size_or_scale_names_its_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config("train", overrides)
    assert message in str(err.value)


# The modules that may read train.img_scale: the resolver, the schema that checks it, and
# resume, which resolves an older checkpoint's config with the resolver's own function.
READS_THE_SCALE = {"common/config.py", "common/schema.py", "engine/training/resume.py"}
SIZE_FUNCTIONS = ("scaled_size", "training_size", "input_size")


def test_only_the_resolver_computes_the_training_size():
    """A supplement to the value tests above: outside READS_THE_SCALE no module's code reads
    img_scale (as an attribute or the key "train.img_scale"), and one module defines a
    function that makes a size."""
    root = Path(ROOT)
    readers, definitions = set(), set()
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("tests/", ".")) or "/." in rel:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "img_scale":
                readers.add(rel)
            if isinstance(node, ast.Constant) and node.value == "train.img_scale":
                readers.add(rel)
            if isinstance(node, ast.FunctionDef) and node.name.endswith(SIZE_FUNCTIONS):
                definitions.add(rel)
    assert readers and readers <= READS_THE_SCALE, sorted(readers - READS_THE_SCALE)
    assert definitions == {"common/config.py"}


def test_a_data_path_that_does_not_exist_says_no_such_folder(tmp_path):
    """Issue: data=path/typo said "no such data config", as if a config name was meant."""
    (tmp_path / "boats").mkdir()
    with pytest.raises(ConfigError) as err:
        load_config("train", [f"data={tmp_path}/boast"])
    text = str(err.value)
    assert f"data={tmp_path}/boast: no such folder or file ({tmp_path / 'boast'})" in text
    assert "did you mean boats?" in text and "no such data config" not in text
    for typed in ("datasets/boats", "boats.yaml", "./boats"):
        with pytest.raises(ConfigError, match=rf"data={typed}: no such folder or file"):
            load_config("train", [f"data={typed}"])
    with pytest.raises(ConfigError, match="no such data config; did you mean shapes"):
        load_config("train", ["data=shape"])  # a name: one of configs/data/


def test_a_dataset_of_ones_own_defaults_to_yoloxs_fine_tuning_recipe(tmp_path):
    """Issue 65: data=PATH trained with the toy recipe of the built-in set (0.8x the input
    size, lr 0.04 at batch 8, from scratch). Now YOLOX's recipe: 1.0x, 0.01 per 64 images,
    from the COCO weights when they can be had."""
    own = load_config("train", [f"data={tmp_path}"])
    t = own.train
    assert (t.name, t.img_scale, t.lr_per_img, t.pretrained) == ("yolox", 1.0, 0.01 / 64, "auto")
    assert (t.epochs, t.warmup_epochs, t.no_aug_epochs, t.min_lr_ratio) == (300, 5, 15, 0.05)
    assert t.input_size == list(own.data.img_size)  # 1.0x, not 0.8x
    assert t.recipe == f"yolox (own data: data={tmp_path})" and t.weights_optional
    coco = load_config("train", ["data=coco", "data.root=/data/coco"]).train
    assert coco.recipe == "yolox (own data: data=coco data.root=/data/coco)"


def test_the_users_train_settings_win_over_the_own_data_recipe(tmp_path):
    shorter = load_config("train", [f"data={tmp_path}", "train.epochs=30"]).train
    assert (shorter.name, shorter.epochs, shorter.weights_optional) == ("yolox", 30, True)
    typed = load_config("train", [f"data={tmp_path}", "train.pretrained=yolox_s"]).train
    assert typed.pretrained == "yolox_s" and not typed.weights_optional  # fails if unavailable
    toy = load_config("train", [f"data={tmp_path}", "train=shapes"]).train
    assert (toy.name, toy.img_scale, toy.recipe) == ("shapes", 0.8, "shapes (train=shapes)")


def test_the_built_in_sets_keep_the_toy_recipe():
    t = load_config("train", []).train
    assert (t.name, t.img_scale, t.pretrained, t.weights_optional) == ("shapes", 0.8, None, False)
    assert t.recipe == "shapes (the built-in set's default: data=shapes)"
    stars = load_config("train", ["data=shapes_stars"]).train
    assert stars.recipe == "shapes (the built-in set's default: data=shapes_stars)"
    with pytest.raises(ConfigError, match="train.recipe=yolox: train.recipe is not a setting"):
        load_config("train", ["train.recipe=yolox"])


def test_trackers_are_one_setting_as_typed_or_as_a_list():
    both = load_config("train", ["train.track=mlflow,swanlab"]).train.track
    assert list(both) == ["mlflow", "swanlab"]
    assert list(load_config("train", ["train.track=[swanlab]"]).train.track) == ["swanlab"]
    with pytest.raises(ConfigError, match=r"train.track must be a list of names, each once, of "
                                          r"mlflow, swanlab \(\[\] for none\), got 'wandb'"):  # fmt: skip
        load_config("train", ["train.track=wandb"])
