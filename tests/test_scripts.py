"""The shell launchers and the container files, without launching a job or building an image.

Bad input must stop a launcher before anything starts, with an error naming the parameter;
the docker command must mount what the host has; the Dockerfiles must COPY only files
that exist and survive .dockerignore, and install exactly the pinned requirements. (Their
lint, shellcheck and hadolint, is dev/lint.sh.)
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from msdet.engine.runtime.mindspore_compat import FIRST_UNSUPPORTED, OLDEST, TESTED
from tests.support import ROOT as REPO_ROOT

ROOT = Path(REPO_ROOT)
SCRIPTS = ROOT / "scripts"
LAUNCHERS = (
    "run_standalone_train.sh",
    "run_distributed_train.sh",
    "run_eval.sh",
    "docker_run.sh",
)
# The developer scripts: in the repository's dev/, not in the wheel (tests/test_packaging.py).
DEV_SCRIPTS = ("test.sh", "lint.sh", "check_mindspore.sh", "check_wheel.sh")
DOCKERFILES = ("Dockerfile", "Dockerfile.ascend")


def run_script(name: str, *args: str, cwd=ROOT, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "RANK_"))}
    full_env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full_env["PATH"]
    full_env.update(env)
    return subprocess.run(
        ["bash", str(SCRIPTS / name), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# ---- lint ----------------------------------------------------------------------------------


def test_scripts_exist_and_are_executable():
    paths = [SCRIPTS / name for name in LAUNCHERS] + [ROOT / "dev" / name for name in DEV_SCRIPTS]
    for path in paths:
        assert path.is_file() and os.access(path, os.X_OK), path.name
        assert path.read_text().startswith("#!/usr/bin/env bash\n"), path.name
    # scripts/ ships in the wheel: the launchers and what they share, nothing for developers.
    assert sorted(p.name for p in SCRIPTS.glob("*.sh")) == sorted([*LAUNCHERS, "common.sh"])


def test_ci_runs_developer_scripts_that_exist():
    ci = (ROOT / ".ci" / "run").read_text()
    named = set(re.findall(r"\bdev/([\w${}]+\.sh)", ci))
    checks = ci.split("checks=(", 1)[1].split(")", 1)[0].split()
    kinds = {check.split(":")[0] for check in checks}
    assert kinds == {"mindspore", "wheel"}
    # every supported MindSpore but the suite's, and every supported Python but the default
    releases = {c.split(":")[1] for c in checks if c.startswith("mindspore:")}
    pythons = {c.split(":")[2] for c in checks if c.count(":") == 2}
    assert releases == {"2.7", "2.8", "2.9"} and pythons == {"3.10", "3.12"}
    scripts = {n.replace("${kind}", kind) for n in named for kind in kinds}
    assert scripts == set(DEV_SCRIPTS)
    assert all((ROOT / "dev" / name).is_file() for name in scripts)


# shellcheck and hadolint run in dev/lint.sh (CI's lint step), not here as well.


# ---- launcher errors: clear, named, and before anything starts --------------------------------


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {}, "NUM_CARDS is missing"),
        (("two",), {}, "NUM_CARDS must be an integer, got 'two'"),
        (("0",), {}, "NUM_CARDS must be at least 1, got 0"),
        (("2", "runtime.distributed=false"), {}, "do not pass runtime.distributed=false"),
        (("2",), {"MASTER_PORT": "80"}, "MASTER_PORT must be in [1024, 65535], got 80"),
        (("2",), {"MASTER_PORT": "http"}, "MASTER_PORT must be an integer"),
        (("2",), {"NUM_NODES": "2", "NODE_RANK": "2"}, "NODE_RANK must be in [0, 1], got 2"),
        (("2",), {"NUM_NODES": "2"}, "pass the same run.dir=<shared folder> on every node"),
        (("2",), {"RANK_TABLE_FILE": "/no/such/rank_table.json"}, "RANK_TABLE_FILE=/no/such"),
        (("2",), {"TRAIN_ENTRY": "/no/such/train.py"}, "TRAIN_ENTRY=/no/such/train.py"),
        (("2",), {"HCCL_EXEC_TIMEOUT": "1h"}, "HCCL_EXEC_TIMEOUT must be an integer, got '1h'"),
        (
            ("2",),
            {"HCCL_CONNECT_TIMEOUT": "60"},
            "HCCL_CONNECT_TIMEOUT must be in [120, 7200], got 60",
        ),
    ],
)
def test_distributed_launcher_rejects_bad_input(tmp_path, args, env, message):
    out = run_script("run_distributed_train.sh", *args, cwd=tmp_path, **env)
    assert out.returncode == 2
    assert message in out.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started


@pytest.mark.skipif(Path("/dev/davinci0").exists(), reason="this host has Ascend cards")
def test_rank_table_needs_ascend(tmp_path):
    table = tmp_path / "rank_table.json"
    table.write_text("{}")
    out = run_script("run_distributed_train.sh", "2", cwd=tmp_path, RANK_TABLE_FILE=str(table))
    assert out.returncode == 2
    assert "rank tables are HCCL (Ascend) only" in out.stderr


def test_distributed_launcher_refuses_a_port_in_use(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        out = run_script("run_distributed_train.sh", "2", cwd=tmp_path, MASTER_PORT=port)
    assert out.returncode == 2
    assert f"MASTER_PORT={port} is already in use" in out.stderr
    assert not (tmp_path / "runs").exists()


def test_distributed_launcher_needs_mindspore_on_path(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python").symlink_to(shutil.which("python3", path="/usr/bin:/bin") or "/bin/false")
    env = {"PATH": f"{fake_bin}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    out = subprocess.run(
        ["bash", str(SCRIPTS / "run_distributed_train.sh"), "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "cannot import mindspore: activate the msdet environment" in out.stderr


@pytest.mark.parametrize(
    ("script", "args", "env", "message"),
    [
        ("run_standalone_train.sh", (), {"DEVICE_ID": "x"}, "DEVICE_ID must be an integer"),
        ("run_standalone_train.sh", ("runtime=ascend_8p",), {}, "scripts/run_distributed_train.sh"),
        ("run_standalone_train.sh", ("runtime.distributed=true",), {}, "one card"),
        ("run_eval.sh", (), {}, "CKPT is missing"),
        ("run_eval.sh", ("missing.ckpt",), {}, "CKPT=missing.ckpt is not a file"),
    ],
)
def test_one_card_launchers_reject_bad_input(tmp_path, script, args, env, message):
    out = run_script(script, *args, cwd=tmp_path, **env)
    assert out.returncode == 2
    assert message in out.stderr
    assert not (tmp_path / "runs").exists()


def test_run_eval_rejects_a_second_checkpoint(tmp_path):
    (tmp_path / "a.ckpt").write_bytes(b"")
    out = run_script("run_eval.sh", "a.ckpt", "ckpt=b.ckpt", cwd=tmp_path)
    assert out.returncode == 2 and "do not pass ckpt=b.ckpt" in out.stderr


def test_help_is_the_header_comment():
    for name in ("run_standalone_train.sh", "run_distributed_train.sh", "docker_run.sh"):
        out = run_script(name, "--help")
        assert out.returncode == 0 and "set -euo" not in out.stdout
        assert out.stdout.splitlines()[0].strip(), name
    assert "RANK_TABLE_FILE" in run_script("run_distributed_train.sh", "--help").stdout


# ---- docker_run.sh: what the container gets --------------------------------------------------


def docker_command(tmp_path, *args: str, **env: str) -> list[str]:
    env = {"DRY_RUN": "1", "HOST_ROOT": str(tmp_path / "host"), **env}
    out = run_script("docker_run.sh", *args, cwd=tmp_path, **env)
    assert out.returncode == 0, out.stderr
    return shlex.split(out.stdout)


def test_docker_run_on_a_cpu_host(tmp_path):
    data = tmp_path / "coco"
    data.mkdir()
    cmd = docker_command(tmp_path, "model=yolox_s", "train.epochs=3", DATA_DIR=str(data))
    assert cmd[:2] == ["docker", "run"]
    assert not any(a.startswith("--device") for a in cmd)
    assert "msdet:cpu" in cmd
    image = cmd.index("msdet:cpu")
    assert cmd[image + 1 :] == ["python", "train.py", "model=yolox_s", "train.epochs=3"]
    mounts = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-v"]
    assert f"{tmp_path}/runs:/workspace/runs" in mounts
    assert f"{data}:/data:ro" in mounts
    assert not (tmp_path / "runs").exists()  # a dry run creates nothing
    assert cmd[cmd.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"


def test_docker_run_mounts_the_ascend_devices_and_driver_that_exist(tmp_path):
    host = tmp_path / "host"
    (host / "dev").mkdir(parents=True)
    for dev in ("davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"):
        (host / "dev" / dev).touch()
    (host / "usr/local/Ascend/driver").mkdir(parents=True)
    fake_npu_smi(host, "910B3")
    cmd = docker_command(
        tmp_path, "runtime=ascend_8p", NUM_CARDS="2", MASTER_PORT="9000", NODE_RANK="0"
    )
    devices = [a.split("=", 1)[1] for a in cmd if a.startswith("--device=")]
    assert devices == [
        f"{host}/dev/davinci0:/dev/davinci0",
        f"{host}/dev/davinci1:/dev/davinci1",
        f"{host}/dev/davinci_manager:/dev/davinci_manager",
        f"{host}/dev/devmm_svm:/dev/devmm_svm",
        f"{host}/dev/hisi_hdc:/dev/hisi_hdc",
    ]
    mounts = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-v"]
    assert f"{host}/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro" in mounts
    assert f"{host}/usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi:ro" in mounts
    assert not any("dcmi" in m for m in mounts)  # absent on this host: not mounted
    assert "--group-add" in cmd and "--network=host" in cmd
    assert "MASTER_PORT=9000" in cmd
    image = cmd.index("msdet:ascend-910b")  # the image built for this chip generation
    assert cmd[image + 1 :] == ["scripts/run_distributed_train.sh", "2", "runtime=ascend_8p"]


def fake_npu_smi(host: Path, chip: str | None) -> None:
    """An executable ``npu-smi`` under ``host`` whose ``info`` table names ``chip`` (as the
    real one prints it), or that fails when ``chip`` is None; and one NPU device file."""
    (host / "dev").mkdir(parents=True, exist_ok=True)
    (host / "dev" / "davinci0").touch()
    smi = host / "usr/local/sbin/npu-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    table = (
        "+---------------------------+---------------+------------------------------+\n"
        "| NPU   Name                | Health        | Power(W)    Temp(C)          |\n"
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB) |\n"
        "+===========================+===============+==============================+\n"
        f"| 0     {chip}               | OK            | 93.5        40               |\n"
        "| 0                         | 0000:C1:00.0  | 0           0    / 0         |\n"
    )
    body = f"cat <<'EOF'\n{table}EOF\n" if chip else "exit 1\n"
    smi.write_text("#!/usr/bin/env bash\n" + body)
    smi.chmod(0o755)


@pytest.mark.parametrize(
    "name, image",
    [("910B3", "msdet:ascend-910b"), ("910A", "msdet:ascend-910"), ("910ProB", "msdet:ascend-910"),
     ("910_9391", "msdet:ascend-a3"), ("310P3", "msdet:ascend-310p")],
)  # fmt: skip
def test_docker_run_picks_the_image_of_the_hosts_chip_generation(tmp_path, name, image):
    fake_npu_smi(tmp_path / "host", name)
    cmd = docker_command(tmp_path)
    assert cmd[cmd.index(image) + 1 :] == ["python", "train.py"]


def test_docker_run_needs_the_chip_generation_when_npu_smi_cannot_tell(tmp_path):
    fake_npu_smi(tmp_path / "host", None)
    env = {"DRY_RUN": "1", "HOST_ROOT": str(tmp_path / "host")}
    out = run_script("docker_run.sh", cwd=tmp_path, **env)
    assert out.returncode == 2 and "set ASCEND_CHIP=910|910b|a3|310p" in out.stderr
    assert "msdet:ascend-910" in docker_command(tmp_path, ASCEND_CHIP="910")
    out = run_script("docker_run.sh", cwd=tmp_path, ASCEND_CHIP="910c", **env)
    assert (
        out.returncode == 2 and "ASCEND_CHIP=910c: must be one of 910, 910b, a3, 310p" in out.stderr
    )
    assert "my:image" in docker_command(tmp_path, IMAGE="my:image")


def test_docker_run_rejects_bad_input(tmp_path):
    out = run_script("docker_run.sh", cwd=tmp_path, DRY_RUN="1", DATA_DIR="/no/such/dir")
    assert out.returncode == 2 and "DATA_DIR=/no/such/dir is not a folder" in out.stderr
    out = run_script("docker_run.sh", cwd=tmp_path, DRY_RUN="1", NUM_CARDS="eight")
    assert out.returncode == 2 and "NUM_CARDS must be an integer" in out.stderr
    out = run_script("docker_run.sh", cwd=tmp_path, DOCKER="no-such-docker")
    assert out.returncode == 2 and "DOCKER=no-such-docker is not installed" in out.stderr


# ---- Dockerfiles --------------------------------------------------------------------------------


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / dockerfile).read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (m.group(1).upper(), m.group(2).strip())
        for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)
    ]


def dockerignored(path: str) -> bool:
    """Whether .dockerignore drops ``path`` (the simple patterns this repo uses)."""
    patterns = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    ignored = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").removeprefix("**/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        names = parts if "/" not in pattern else prefixes
        if any(fnmatch.fnmatchcase(p, pattern) for p in names):
            ignored = not negate
    return ignored


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_copies_existing_files_and_installs_the_pinned_requirements(dockerfile):
    steps = instructions(dockerfile)
    copies = [args.split() for op, args in steps if op == "COPY"]
    assert copies, "no COPY"
    for words in copies:
        sources = [w for w in words[:-1] if not w.startswith("--")]
        for src in sources:
            assert (ROOT / src).exists(), f"{dockerfile}: COPY {src} does not exist"
            if src != ".":
                assert not dockerignored(src), f"{dockerfile}: {src} is in .dockerignore"
    installs = [args for op, args in steps if op == "RUN" and "pip install" in args]
    # The dependencies in a layer of their own, then msdet itself over the copied source.
    assert len(installs) == 2
    assert installs[0].endswith(
        'pip install --no-cache-dir -r requirements.txt "mindspore==${MINDSPORE_VERSION}"'
    ), installs[0]
    pinned = [a for op, a in steps if op == "ARG" and a.startswith("MINDSPORE_VERSION=")]
    assert pinned == [f"MINDSPORE_VERSION={TESTED}"]  # the version the suite runs on
    assert installs[1].endswith("pip install --no-cache-dir --no-deps -e ."), installs[1]
    assert [op for op, _ in steps].index("COPY") < [s for s in steps].index(("RUN", installs[1]))
    assert steps[-1] == ("CMD", '["python", "train.py"]')
    users = [args for op, args in steps if op == "USER"]
    assert users and users[-1] not in ("0", "root"), "the image must end as a non-root user"


def test_requirements_bound_every_package_and_pin_the_tested_mindspore_for_tests():
    reqs = [
        ln.split("#")[0].strip()
        for ln in (ROOT / "requirements.txt").read_text().splitlines()
        if ln.split("#")[0].strip()
    ]
    assert "mindspore>=2.7,<2.11" in reqs  # mindspore_compat's supported range
    assert (OLDEST, FIRST_UNSUPPORTED) == ((2, 7), (2, 11))
    dev = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert f"mindspore=={TESTED}" in dev and TESTED == "2.10.0"
    assert any(r.startswith("numpy") and "<2" in r for r in reqs)
    assert all(re.search(r"(==|<|>=)", r) for r in reqs), reqs  # nothing floats freely


def test_ascend_image_is_built_per_chip_on_the_cann_of_mindspores_own_kernels():
    steps = instructions("Dockerfile.ascend")
    args = dict(a.split("=", 1) for op, a in steps if op == "ARG" and "=" in a)
    assert args["BASE_IMAGE"] == "${CANN_IMAGE}:${CANN_VERSION}-${CHIP}-ubuntu22.04-py3.11"
    assert args["CANN_IMAGE"] == "quay.io/ascend/cann" and args["CHIP"] == "910b"
    # The CANN the installed MindSpore's Ascend C kernels were built with (AllFinite is off
    # under another major.minor): the wheel's own record, read by the doctor.
    from msdet.tools.doctor import bundled_kernels_cann, major_minor

    assert major_minor(args["CANN_VERSION"]) == major_minor(bundled_kernels_cann()) == "9.1"
    assert steps[[op for op, _ in steps].index("FROM")] == ("FROM", "${BASE_IMAGE}")
    runs = [a for op, a in steps if op == "RUN"]
    assert 'case "${CHIP}" in 910|910b|a3|310p)' in runs[0]  # any other CHIP stops the build
    assert ("LABEL", 'io.msdet.ascend-chip="${CHIP}"') in steps
    assert instructions("Dockerfile")[1] == ("FROM", "${PYTHON_IMAGE}")


def test_dockerignore_keeps_the_source_and_drops_local_state():
    for kept in (
        "train.py",
        "eval.py",
        "predict.py",
        "export.py",
        "requirements.txt",
        "configs/config.yaml",
        "pyproject.toml",
        "engine/runtime/process.py",
        "bench/device.py",
        "models/yolox.py",
        "data/pipeline.py",
        "ops",
        "scripts/run_distributed_train.sh",
        "scripts/common.sh",
    ):
        assert (ROOT / kept).exists(), kept
        assert not dockerignored(kept), kept
    for dropped in (
        ".git",
        ".venv",
        "runs/train/exp/train.log",
        "engine/__pycache__/cli.cpython-311.pyc",
        "rank_0/om/analyze_fail.ir",
        "best.ckpt",
        "tests/test_scripts.py",
        "dev/test.sh",
        "dev/cann_tables.py",
        ".cache/msdet",
    ):
        assert dockerignored(dropped), dropped
