"""python -m msdet.tools.doctor: facts and verdict."""

from __future__ import annotations

import os

import pytest

from msdet.tools import doctor


def test_this_machine_is_ready(capsys):
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert "mindspore       2.10.0" in out and "devices usable  CPU" in out
    assert "pairs with      CANN 9.1" in out
    assert "verdict: ready" in out


def test_help_describes_the_check_and_runs_nothing(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "build_report", lambda: pytest.fail("--help ran the check"))
    with pytest.raises(SystemExit) as stop:
        doctor.main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m msdet.tools.doctor") and "CANN" in out


def test_numpy_2_and_wrong_mindspore_are_flagged(monkeypatch):
    real = doctor.package_version
    fake = {"numpy": "2.1.0", "mindspore": "2.3.0"}
    monkeypatch.setattr(doctor, "package_version", lambda name: fake.get(name, real(name)))
    report = doctor.build_report()
    text = "\n".join(report.problems)
    assert "numpy 2.1.0" in text and "numpy<2" in text
    assert "MindSpore 2.7 to 2.10" in text and "this is 2.3.0" in text
    assert "mindspore==2.10.0" in text


@pytest.mark.parametrize(
    "version, pairs",
    [
        ("2.9.0", "CANN 9.0.0, driver 26.0.RC1"),
        ("2.8.0", "CANN 8.5"),
        ("2.7.2", "CANN 8.5.0, driver 25.5.0"),
        ("2.7.1.post1", "CANN 8.3.RC1, driver 25.3.RC1"),
    ],
)
def test_an_older_supported_mindspore_is_a_note_with_its_cann(monkeypatch, version, pairs):
    """A cluster pinned to an older CANN runs an older MindSpore: supported, not a problem."""
    real = doctor.package_version
    monkeypatch.setattr(
        doctor, "package_version", lambda name: version if name == "mindspore" else real(name)
    )
    report = doctor.Report()
    doctor.check_mindspore(report)
    assert ("mindspore", version) in report.facts
    assert ("pairs with", pairs) in report.facts
    assert not [p for p in report.problems if "MindSpore" in p or "mindspore" in p]
    assert any(f"MindSpore {version}: supported" in n for n in report.notes)


def fake_ascend(root, cann: str | None = "9.1.0", driver: str | None = "25.5.0", toolkit=None):
    """An Ascend install under ``root``: driver/version.info and a toolkit whose
    compiler/version.info holds ``cann`` (CANN's layout: ascend-toolkit/latest unless
    ``toolkit`` names another folder under ``root``); returns the toolkit folder."""
    if driver:
        (root / "driver").mkdir(parents=True)
        (root / "driver" / "version.info").write_text(f"Version={driver}\n")
    folder = root / (toolkit or "ascend-toolkit/latest")
    (folder / "compiler").mkdir(parents=True)
    if cann:
        (folder / "compiler" / "version.info").write_text(f"Version={cann}\ntimestamp=0\n")
    return folder


def test_set_env_sh_toolkit_home_finds_the_driver_above_it(tmp_path):
    """After CANN's set_env.sh, ASCEND_HOME_PATH is the toolkit, not the Ascend root."""
    toolkit = fake_ascend(tmp_path / "Ascend", "9.1.0", "25.5.0")
    env = {"ASCEND_HOME_PATH": str(toolkit)}
    assert doctor.ascend_paths(env) == (str(tmp_path / "Ascend"), str(toolkit))
    assert doctor.ascend_versions(env) == {"ascend_driver": "25.5.0", "cann": "9.1.0"}
    # CANN 9 images: the toolkit is <root>/cann-<version>, ascend-toolkit/latest links to it
    other = fake_ascend(tmp_path / "A2", "9.1.0", "26.0.RC1", toolkit="cann-9.1.0-beta.3")
    assert doctor.ascend_versions({"ASCEND_HOME_PATH": str(other)}) == {
        "ascend_driver": "26.0.RC1", "cann": "9.1.0"}  # fmt: skip
    # the root itself, as users set it by hand, and no variable at all (CANN's default root)
    root = tmp_path / "Ascend"
    assert doctor.ascend_paths({"ASCEND_HOME_PATH": str(root)}) == (
        str(root), str(root / "ascend-toolkit" / "latest"))  # fmt: skip
    assert doctor.ascend_versions({"ASCEND_HOME_PATH": str(root)})["cann"] == "9.1.0"
    assert doctor.ascend_paths({}) == (
        "/usr/local/Ascend",
        "/usr/local/Ascend/ascend-toolkit/latest",
    )


def test_ascend_matrix_mismatch_is_explained(monkeypatch, tmp_path):
    toolkit = fake_ascend(tmp_path, "8.3.RC1", "25.5.0")
    monkeypatch.setattr(doctor, "ascend_present", lambda: True)
    report = doctor.Report()
    doctor.check_ascend(report, "2.7.2", {"ASCEND_HOME_PATH": str(toolkit)})
    assert ("Ascend driver", "25.5.0") in report.facts and ("CANN", "8.3.RC1") in report.facts
    assert any("expects CANN 8.5.0" in p for p in report.problems)


def test_mindspore_2_10_wants_the_cann_its_kernels_were_built_with(monkeypatch, tmp_path):
    assert doctor.KNOWN_MATRIX["2.10.0"][0] == "9.1"
    assert doctor.bundled_kernels_cann() == "9.1.0"  # the installed wheel's own record
    fake_ms = tmp_path / "mindspore"
    (fake_ms / os.path.dirname(doctor.BUNDLED_KERNELS_VERSION)).mkdir(parents=True)
    (fake_ms / doctor.BUNDLED_KERNELS_VERSION).write_text("custom_opp_compiler_version=9.0.0\n")
    assert doctor.bundled_kernels_cann(str(fake_ms)) == "9.0.0"
    assert doctor.bundled_kernels_cann(str(tmp_path / "nothing")) is None
    monkeypatch.setattr(doctor, "ascend_present", lambda: True)
    for cann, problems in (("9.1.0", []), ("9.0.0", ["expects CANN 9.1", "AllFinite"])):
        toolkit = fake_ascend(tmp_path / cann, cann, "25.5.0")
        report = doctor.Report()
        doctor.check_ascend(report, "2.10.0", {"ASCEND_HOME_PATH": str(toolkit)})
        text = " ".join(report.problems)
        assert all(p in text for p in problems) and bool(report.problems) == bool(problems), text
        assert ("CANN", cann) in report.facts and ("Ascend driver", "25.5.0") in report.facts


def _kernel_facts(threads=2):
    report = doctor.Report()
    doctor.check_cpu_kernels(report, threads)
    return dict(report.facts), report


def test_cpu_kernels_report_the_compiler_the_library_and_autos_choice(monkeypatch, tmp_path):
    """Each state of msdet's CPU kernels on a machine, read without building or measuring:
    not built, built but not measured at this thread count, measured."""
    import json

    from msdet.engine.runtime import kernel_choice
    from msdet.ops import cpu_kernels

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
