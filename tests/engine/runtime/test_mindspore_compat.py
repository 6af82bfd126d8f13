"""engine.runtime.mindspore_compat: the supported versions, their CANN, and the workarounds.

CI runs this file on every supported MindSpore (dev/check_mindspore.sh), where the
MindIR metadata and the Parameter writes take each version's own path.
"""

from __future__ import annotations

import os

import mindspore as ms
import pytest
from mindspore import Parameter, nn

from msdet.engine.runtime import mindspore_compat as compat
from tests.support import run_python


def test_versions_parse_and_the_supported_range_is_2_7_to_2_10():
    assert compat.parse_version("2.7.1.post1") == (2, 7, 1)
    assert compat.parse_version("2.10") == (2, 10, 0)
    with pytest.raises(ValueError, match="not a MindSpore version"):
        compat.parse_version("latest")
    assert [v for v in ("2.6.0", "2.7.0", "2.8.0", "2.9.0", "2.10.0", "2.11.0")
            if compat.supported(v)] == ["2.7.0", "2.8.0", "2.9.0", "2.10.0"]  # fmt: skip
    assert compat.support_note(compat.TESTED) is None
    assert "supported" in compat.support_note("2.9.0")
    assert "this is 2.11.0" in compat.support_note("2.11.0")


def test_each_version_names_the_cann_it_pairs_with():
    assert compat.cann_pairing("2.9.0") == ("9.0.0", "26.0.RC1")
    assert compat.cann_pairing("2.7.2") == ("8.5.0", "25.5.0")
    assert compat.cann_pairing("2.8.0")[0] == "8.5"  # its kernels: a CANN 8.5 build (8.5.T5.0.B029)
    assert compat.cann_pairing("2.10.0")[0] == "9.1"
    assert compat.cann_pairing("2.7.1.post1") == compat.cann_pairing("2.7.1")
    assert compat.cann_pairing("2.5.0") is None


def test_a_missing_feature_names_the_version_that_has_it(monkeypatch):
    monkeypatch.setitem(compat.FEATURES, "probe", ((2, 9, 0), "the probe feature"))
    compat.require("probe", "2.9.0")
    compat.require("probe", "2.10.0")
    with pytest.raises(compat.MindSporeVersionError) as err:
        compat.require("probe", "2.8.0")
    text = str(err.value)
    assert "the probe feature needs MindSpore 2.9.0 or later" in text
    assert "this is MindSpore 2.8.0" in text and "pip install 'mindspore>=2.9.0'" in text


def test_mindir_user_info_is_written_whichever_way_protobuf_presents_it():
    """MindSpore 2.7-2.9's mind_ir_pb2 presents the map as a list of entries (item
    assignment raised TypeError in export.py), 2.10's as a map: both end with one entry."""
    from mindspore.train.mind_ir_pb2 import ModelProto

    model = ModelProto()
    compat.set_mindir_user_info(model, "msdet_export", "first")
    compat.set_mindir_user_info(model, "other", "x")
    compat.set_mindir_user_info(model, "msdet_export", '{"model": "yolox_nano"}')
    parsed = ModelProto.FromString(model.SerializeToString())
    entries = (
        {e.key: e.value for e in parsed.user_info}
        if hasattr(parsed.user_info, "add")
        else dict(parsed.user_info)
    )
    assert entries == {"msdet_export": '{"model": "yolox_nano"}', "other": "x"}


class ReadsSwitch(nn.Cell):
    """x + a Parameter the host writes (as the loss's L1 switch)."""

    def __init__(self):
        super().__init__()
        self.switch = Parameter(ms.Tensor(0.0, ms.float32), name="switch", requires_grad=False)

    def construct(self, x):
        return x + self.switch


JIT_READS_HOST_WRITES = """
import mindspore as ms
from msdet.engine.runtime.mindspore_compat import write_parameter
from tests.engine.runtime.test_mindspore_compat import ReadsSwitch

ms.set_context(mode=ms.PYNATIVE_MODE)
cell = ReadsSwitch()
step = ms.jit(cell)
seen = []
for value in (0.0, 1.0, 5.0):
    write_parameter(cell.switch, value)
    seen.append(float(step(ms.Tensor(10.0, ms.float32)).asnumpy()))
print(seen)
"""


@pytest.mark.slow
def test_a_jit_graph_sees_the_hosts_parameter_writes():
    """The L1 switch, the statistics' generation and the evaluation weights are written
    by the host between steps: a mindspore.jit graph must read the new values (with
    ``Parameter.set_data`` it kept reading the first value on 2.9 and 2.10: 10.0 three
    times; on 2.7.0 freed memory)."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = run_python(["-c", JIT_READS_HOST_WRITES], env=env)
    assert out.strip().splitlines()[-1] == "[10.0, 11.0, 15.0]"
