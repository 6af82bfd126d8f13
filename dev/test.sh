#!/usr/bin/env bash
# Set up the test environment (a .venv with msdet, the pinned requirements and the PyTorch
# YOLOX original used as the parity reference; installed again only when a requirements file
# changed) and run the test suite. Extra arguments go to
# pytest, e.g. `bash dev/test.sh tests/models -k parity`, or `-m "not slow"` for the
# fast tier. PYTHON picks the interpreter (default python3; 3.10-3.12); MSDET_TEST_WORKERS the
# number of pytest workers (default 2 on two or more cores, 0 runs one process).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

if [ ! -x "${VENV}/bin/python" ]; then
    "${PYTHON}" -m venv "${VENV}"
fi
# Install only when the requirements changed since the last install into this venv: a
# current environment starts the tests at once.
STAMP="${VENV}/.msdet-test-requirements"
WANTED=$(cat requirements.txt requirements-dev.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "${STAMP}" 2>/dev/null)" != "${WANTED}" ]; then
    "${VENV}/bin/python" -m pip install --quiet --upgrade pip
    # Building yolox without build isolation needs setuptools, which venvs of Python 3.12+ lack.
    "${VENV}/bin/python" -m pip install --quiet -r requirements-dev.txt -e . setuptools wheel
    # YOLOX 0.3.0 pins onnx/onnxruntime versions that do not exist for Python 3.11, hence
    # --no-deps; it builds a small C++ op (MAX_JOBS=1 keeps memory low on small machines).
    if ! "${VENV}/bin/python" -c "import yolox" 2>/dev/null; then
        MAX_JOBS=1 "${VENV}/bin/python" -m pip install --quiet --no-deps --no-build-isolation yolox==0.3.0
    fi
    echo "${WANTED}" >"${STAMP}"
fi

# The parity tests must run wherever this script runs: a missing reference is a failure.
export MSDET_REQUIRE_TORCH=1
# Two pytest workers where there are two cores (MSDET_TEST_WORKERS=0: one process). Most of
# a slow test is MindSpore compiling graphs on one thread, so two of them share two cores
# well; each worker takes whole files (--dist loadfile), so a module's fixtures run once, in
# the order tests/conftest.py gives them (the longest files first: --no-loadscope-reorder).
WORKERS=${MSDET_TEST_WORKERS:-$(($(nproc) >= 2 ? 2 : 0))}
PARALLEL=()
if [ "${WORKERS}" -gt 0 ]; then
    PARALLEL=(-n "${WORKERS}" --dist loadfile --no-loadscope-reorder)
fi
exec "${VENV}/bin/python" -m pytest "${PARALLEL[@]}" "$@"
