#!/usr/bin/env bash
# Quick check of msdet on another MindSpore (the full suite runs on requirements-dev.txt's
# pin): a venv with msdet, requirements.txt and that MindSpore, then imports, the config, the
# doctor, the training step's tests, one tiny training run on each training loop
# (runtime.loop=model: Model.train in graph mode; runtime.loop=jit: msdet's loop, PyNative
# mode, the step compiled by mindspore.jit) with their step losses compared, eval.py on the
# checkpoint, and export.py to MINDIR (its check reloads the file and compares outputs). Also
# the check of another supported Python: CI runs 2.7 on Python 3.10 and 2.9 on 3.12.
#
#   bash dev/check_mindspore.sh 2.9 [3.12]   # newest 2.9.x [on Python 3.12]; or 2.7.0
#
# VENV (default .venv-ms<VERSION>) chooses the venv; PYTHON an interpreter, else the Python
# version given (pythonX.Y, or a pyenv install of it), else python3. Exits 3 when the Python
# asked for is not on this machine. Prints the seconds each part took.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSION=${1:?usage: check_mindspore.sh VERSION [PYTHON_VERSION] (e.g. 2.9 3.12)}
PY_VERSION=${2:-}
VENV=${VENV:-.venv-ms${VERSION}}

find_python() { # PYTHON, else an interpreter of PY_VERSION: pythonX.Y or a pyenv install
    local candidate
    if [ -n "${PYTHON:-}" ] || [ -z "${PY_VERSION}" ]; then
        printf '%s\n' "${PYTHON:-python3}"
        return 0
    fi
    for candidate in "python${PY_VERSION}" \
        "$(pyenv root 2>/dev/null)"/versions/"${PY_VERSION}".*/bin/python"${PY_VERSION}"; do
        if "${candidate}" -c "import sys; assert sys.version.startswith('${PY_VERSION}.')" \
            >/dev/null 2>&1; then
            printf '%s\n' "${candidate}"
            return 0
        fi
    done
    return 1
}
if ! PYTHON=$(find_python); then
    echo "check_mindspore.sh: no working Python ${PY_VERSION} on this machine; not checked" >&2
    exit 3
fi
if [[ "${VERSION}" =~ ^[0-9]+\.[0-9]+$ ]]; then
    SPEC="mindspore==${VERSION}.*" # the newest release of that minor version
else
    SPEC="mindspore==${VERSION}"
fi

started=${SECONDS}
mark=${SECONDS}
lap() { # lap NAME: print the seconds since the last lap
    echo "== MindSpore ${VERSION}: $1 took $((SECONDS - mark)) s"
    mark=${SECONDS}
}

echo "== MindSpore ${VERSION} (${SPEC}) on $("${PYTHON}" --version 2>&1) -> ${VENV}"
if [ ! -x "${VENV}/bin/python" ]; then
    "${PYTHON}" -m venv "${VENV}"
fi
"${VENV}/bin/python" -m pip install --quiet --upgrade pip
"${VENV}/bin/python" -m pip install --quiet -e . "${SPEC}" "pytest>=8"
lap "install"

"${VENV}/bin/python" -c "import mindspore, numpy, cv2, pycocotools, hydra, tensorboardX; print('mindspore', mindspore.__version__, 'numpy', numpy.__version__)"
"${VENV}/bin/python" -m msdet.tools.doctor | grep -E "mindspore|pairs with|verdict"
# Every MindSpore name msdet's code reaches (device-only paths included) is in this release,
# and the device-side set-up runs against each Ascend chip stood in on this CPU.
"${VENV}/bin/python" -m pytest -q -p no:cacheprovider -m "not slow and not torch" \
    tests/common/test_config.py tests/engine/training/test_step.py \
    tests/test_mindspore_surface.py tests/engine/runtime/test_standin.py
# The loops' callback protocol and the version workarounds, slow tests included.
"${VENV}/bin/python" -m pytest -q -p no:cacheprovider -m "not torch" \
    tests/engine/training/test_jit_loop.py tests/engine/runtime/test_mindspore_compat.py
lap "imports, doctor and tests"

run_dir=$(mktemp -d)
trap 'rm -rf "${run_dir}"' EXIT
step() { # step NAME COMMAND...: run a command into NAME.log, its tail shown if it fails
    local name=$1
    shift
    "$@" >"${run_dir}/${name}.log" 2>&1 || { tail -n 40 "${run_dir}/${name}.log"; exit 1; }
}
# MindSpore's own kernels everywhere: msdet's compiled ones would be measured first (auto).
TINY=(runtime=cpu runtime.cpu_kernels=native model.depthwise=false data.num_train=12
    data.num_val=4 data.img_size=64 eval.img_size=64 train.img_scale=1 train.batch_size=4
    eval.batch_size=4 train.epochs=1 train.warmup_epochs=0 train.no_aug_epochs=0
    train.log_interval=1 "data.cache_dir=${run_dir}/cache")
for loop in model jit; do
    step "${loop}" "${VENV}/bin/python" train.py "${TINY[@]}" "runtime.loop=${loop}" \
        "run.dir=${run_dir}/${loop}"
    test -f "${run_dir}/${loop}/checkpoints/last.ckpt"
    # The step lines are the run's log file's (the console shows a progress bar).
    grep -oE "  step [0-9]+/[0-9]+  loss .*" "${run_dir}/${loop}/train.log" \
        >"${run_dir}/${loop}.losses"
    lap "training on runtime.loop=${loop} ($(wc -l <"${run_dir}/${loop}.losses") steps)"
done
# On CPU both loops run the same kernels in the same order: the losses are equal as printed.
if ! diff "${run_dir}/model.losses" "${run_dir}/jit.losses"; then
    echo "== MindSpore ${VERSION}: the two training loops' losses differ" >&2
    exit 1
fi
test -s "${run_dir}/model.losses"

ckpt="${run_dir}/jit/checkpoints/last.ckpt"
step eval "${VENV}/bin/python" eval.py runtime=cpu runtime.cpu_kernels=native \
    data.num_train=12 data.num_val=4 data.img_size=64 eval.img_size=64 eval.batch_size=4 \
    "data.cache_dir=${run_dir}/cache" "ckpt=${ckpt}" "run.dir=${run_dir}/eval"
test -f "${run_dir}/eval/metrics.json"
lap "eval.py"
step export "${VENV}/bin/python" export.py runtime=cpu runtime.cpu_kernels=native \
    "ckpt=${ckpt}" export.val=false "export.out=${run_dir}/exported" "run.dir=${run_dir}/export"
ls "${run_dir}"/exported/*.mindir >/dev/null
lap "export.py"
echo "== MindSpore ${VERSION}: passed in $((SECONDS - started)) s"
