"""python -m engine.doctor: facts and verdict."""

from __future__ import annotations

import os

import pytest

from msdet.engine.tools import doctor


def test_this_machine_is_ready(capsys):
    assert doctor.main() == 0
    out = capsys.readouterr().out
    assert "mindspore       2.10.0" in out and "devices usable  CPU" in out
    assert "verdict: ready" in out


def test_numpy_2_and_wrong_mindspore_are_flagged(monkeypatch):
    real = doctor.package_version
    fake = {"numpy": "2.1.0", "mindspore": "2.3.0"}
    monkeypatch.setattr(doctor, "package_version", lambda name: fake.get(name, real(name)))
    report = doctor.build_report()
    text = "\n".join(report.problems)
    assert "numpy 2.1.0" in text and "numpy<2" in text
    assert "mindspore==2.10.0" in text


def test_ascend_matrix_mismatch_is_explained(monkeypatch, tmp_path):
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "version.info").write_text("Version=25.5.0\n")
    toolkit = tmp_path / "ascend-toolkit" / "latest"
    toolkit.mkdir(parents=True)
    (toolkit / "version.cfg").write_text("version=8.3.RC1\n")
    monkeypatch.setattr(doctor, "ASCEND_ROOT", str(tmp_path))
    monkeypatch.setattr(doctor, "ascend_present", lambda: True)
    report = doctor.Report()
    doctor.check_ascend(report, "2.7.2")
    assert ("Ascend driver", "25.5.0") in report.facts and ("CANN", "8.3.RC1") in report.facts
    assert any("expects CANN 8.5.0" in p for p in report.problems)


def _kernel_facts(threads=2):
    report = doctor.Report()
    doctor.check_cpu_kernels(report, threads)
    return dict(report.facts), report


def test_cpu_kernels_report_the_compiler_the_library_and_autos_choice(monkeypatch, tmp_path):
    """Each state of msdet's CPU kernels on a machine, read without building or measuring:
    not built, built but not measured at this thread count, measured."""
    import json

    from msdet.ops import cpu_kernels, kernel_choice

    monkeypatch.setenv(cpu_kernels.CACHE_VAR, str(tmp_path))
    facts, report = _kernel_facts()
    if facts["C++ compiler"].startswith("none"):
        pytest.skip("no C++ compiler on this machine")
    assert facts["CPU kernels"].startswith("not built yet") and not report.problems
    library = cpu_kernels.library_path()
    os.makedirs(os.path.dirname(library))
    open(library, "wb").close()
    facts, _ = _kernel_facts()
    assert facts["CPU kernels"] == library
    assert facts["kernel choice"].startswith("not measured yet at 2 threads")
    record = {
        "kernels": ["depthwise", "class_bce"],
        **{d.key: dict.fromkeys(d.variants, 1.0) for d in kernel_choice.DECISIONS.values()},
        "mindspore": doctor.package_version("mindspore"),
    }
    with open(kernel_choice.choice_path(library, 2), "w", encoding="utf-8") as f:
        json.dump(record, f)
    facts, _ = _kernel_facts()
    assert (
        facts["kernel choice"]
        == "depthwise convolutions and the class loss (measured at 2 threads)"
    )
    facts, _ = _kernel_facts(threads=1)  # another thread count is another decision
    assert facts["kernel choice"].startswith("not measured yet at 1 threads")
    monkeypatch.setenv(cpu_kernels.FLAGS_VAR, "-mno-avx512f")  # another build
    facts, _ = _kernel_facts()
    assert facts["kernel flags"] == "-mno-avx512f" and facts["CPU kernels"].startswith("not built")


def test_no_compiler_is_a_note_not_a_problem(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    facts, report = _kernel_facts()
    assert facts["C++ compiler"].startswith("none") and "CPU kernels" not in facts
    assert not report.problems
    assert any("MindSpore's operators only" in note for note in report.notes)
