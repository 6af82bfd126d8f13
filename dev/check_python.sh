#!/usr/bin/env bash
# Quick check of msdet on another Python version: a venv with msdet and requirements.txt alone
# (plus pytest), then imports, config composition, the entry-point glue, the training step, and
# one tiny training run of train.py. The full suite (with the PyTorch reference) runs on one
# version in dev/test.sh; PyTorch's CPU wheel is not installed here, so the tests that
# need the reference are not part of this check.
#
#   bash dev/check_python.sh 3.10          # or 3.12; PYTHON=/path/to/python overrides
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSION=${1:?usage: check_python.sh VERSION (e.g. 3.10)}
VENV=${VENV:-.venv-py${VERSION}}

find_python() { # an interpreter of VERSION that runs: PYTHON, pythonX.Y, or a pyenv install
    local candidate
    for candidate in "${PYTHON:-}" "python${VERSION}" \
        "$(pyenv root 2>/dev/null)"/versions/"${VERSION}".*/bin/python"${VERSION}"; do
        if [ -n "${candidate}" ] && "${candidate}" -c "import sys; assert sys.version.startswith('${VERSION}.')" >/dev/null 2>&1; then
            printf '%s\n' "${candidate}"
            return 0
        fi
    done
    return 1
}

if ! PYTHON=$(find_python); then
    echo "check_python.sh: no working Python ${VERSION} on this machine; not checked" >&2
    exit 3
fi
echo "== Python ${VERSION}: $("${PYTHON}" --version 2>&1) -> ${VENV}"
if [ ! -x "${VENV}/bin/python" ]; then
    "${PYTHON}" -m venv "${VENV}"
fi
"${VENV}/bin/python" -m pip install --quiet --upgrade pip
"${VENV}/bin/python" -m pip install --quiet -e . "pytest>=8"

"${VENV}/bin/python" -c "import mindspore, numpy, cv2, pycocotools, hydra, tensorboardX; print('mindspore', mindspore.__version__, 'numpy', numpy.__version__)"
"${VENV}/bin/python" -m pytest -q -p no:cacheprovider -m "not slow and not torch" \
    tests/common/test_config.py tests/data/test_config.py tests/engine/test_cli.py \
    tests/engine/training/test_step.py tests/engine/training/test_optim.py
run_dir=$(mktemp -d)
trap 'rm -rf "${run_dir}"' EXIT
"${VENV}/bin/python" train.py runtime=cpu data.num_train=16 data.num_val=4 data.img_size=64 \
    train.batch_size=4 train.epochs=1 train.warmup_epochs=0 train.no_aug_epochs=0 \
    train.max_steps_per_epoch=2 train.tensorboard=false eval.batch_size=4 \
    "data.cache_dir=${run_dir}/cache" "run.dir=${run_dir}/run"
test -f "${run_dir}/run/checkpoints/last.ckpt"
test -f "${run_dir}/run/metrics.json"
echo "== Python ${VERSION}: passed"
