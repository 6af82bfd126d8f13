"""The schema and the YAML agree: every key of every option has a spec, every spec a key,
and each kind of value is told apart from what it must not be."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from msdet.common.config import GROUPS, flatten, group_options, load_config
from msdet.common.schema import SCHEMA, ConfigError, Spec


def every_key() -> set[str]:
    keys = set()
    for group in GROUPS:
        for option in group_options(group):
            cfg = load_config("tool", [f"{group}={option}"])
            keys |= set(flatten(OmegaConf.to_container(cfg, resolve=False)))
    return keys


@pytest.mark.slow
def test_every_yaml_key_has_a_spec_and_every_spec_a_key():
    keys = every_key()
    assert len(keys) > 100
    assert sorted(keys - set(SCHEMA)) == []
    assert sorted(set(SCHEMA) - keys) == []


@pytest.mark.parametrize(
    "spec,good,bad",
    [
        (Spec("int", low=1), [(1, 1), (300, 300)], [0, -1, 2.5, 2.0, "3", True, None]),
        (Spec("float", low=0, high=1), [(0.5, 0.5), (1, 1.0)], [1.5, -0.1, "x", float("nan")]),
        (Spec("bool"), [(True, True)], [1, "true", None]),
        (
            Spec("size"),
            [(320, [320, 320]), ([416, 640], [416, 640]), ((64, 96), [64, 96])],
            [250, [320], [0, 32], 31, [320, 300], [320] * 3, -32, "320", 320.0, 320.5, None],
        ),
        (Spec("size", null=True), [(None, None), (32, [32, 32])], [16, "big"]),
        (Spec("choice", choices=("a", "b")), [("a", "a")], ["c", 1]),
        (Spec("int", low=1, also=("auto",)), [("auto", "auto"), (4, 4)], ["many", 0]),
        (Spec("float", null=True, above=0), [(None, None), (0.5, 0.5)], [0, -1]),
        (Spec("floats", above=0, length=2), [([0.5, 1.5], [0.5, 1.5])], [[0.5], "0.5", [0, 1]]),
        (Spec("level", low=0, high=3), [(True, 1), (2, 2)], [4, "yes"]),
    ],
)
def test_each_kind_takes_what_it_should(spec, good, bad):
    for value, expected in good:
        assert spec.validate("k", value) == expected
    for value in bad:
        with pytest.raises(ConfigError, match=r"^k must be "):
            spec.validate("k", value)


def test_the_message_says_what_the_key_takes():
    with pytest.raises(ConfigError) as err:
        Spec("int", low=1).validate("train.epochs", 2.5)
    assert str(err.value) == "train.epochs must be an integer >= 1, got 2.5"
    with pytest.raises(ConfigError) as err:
        Spec("int", low=1, also=("auto",)).validate("data.num_workers", "many")
    assert str(err.value) == "data.num_workers must be an integer >= 1, or auto, got 'many'"


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../x", "a\\b", ""])
def test_a_run_name_that_is_not_one_plain_folder_is_refused(name):
    """Issue: run.name=.. wrote the run into runs/ itself."""
    with pytest.raises(ConfigError, match=r"run.name must be a plain folder name .*run.dir=PATH"):
        SCHEMA["run.name"].validate("run.name", name)
    assert SCHEMA["run.name"].validate("run.name", "exp-1.b") == "exp-1.b"
