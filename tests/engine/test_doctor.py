"""python -m engine.doctor: facts and verdict."""

from __future__ import annotations

from engine import doctor


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
