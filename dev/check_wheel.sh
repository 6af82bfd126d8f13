#!/usr/bin/env bash
# Check msdet as `pip install .` gives it to a user: build a wheel of this repository, install
# it with its dependencies (requirements.txt) into a new venv in a temporary folder outside
# the repository, and from a working folder there run the installed `msdet` command: train
# one short epoch on the built-in synthetic set, evaluate its best checkpoint, predict on a
# val image, and evaluate again through the wheel's scripts/run_eval.sh. Each step's output
# files are checked and its time printed; the first failing step ends the check, named.
#
#   bash dev/check_wheel.sh        # PYTHON=python3.12 picks the interpreter (default python3)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
# The wheel alone: a PYTHONPATH naming a clone would hide what the install lacks.
unset PYTHONPATH

work=$(mktemp -d "${TMPDIR:-/tmp}/msdet-check-wheel.XXXXXX")
current="setting up"
finish() {
    local status=$?
    rm -rf "${work}"
    if [ "${status}" -ne 0 ]; then
        echo "check_wheel.sh: FAILED at: ${current} (exit ${status})" >&2
    fi
}
trap finish EXIT

step() { # step NAME COMMAND...: run one step and print its time (set -e: a failure ends the check)
    current=$1
    local started=${SECONDS}
    shift
    echo "== ${current}"
    "$@"
    echo "== ${current}: $((SECONDS - started)) s"
}

require() { # require FILE...: each file exists and is not empty
    local file
    for file in "$@"; do
        if [ ! -s "${file}" ]; then
            echo "check_wheel.sh: ${file} is missing or empty" >&2
            return 1
        fi
    done
}

build_wheel() {
    # From a copy of the source: setuptools writes build/ and msdet.egg-info/ beside it.
    mkdir -p "${work}/src"
    tar -C "${REPO}" --exclude=./.git --exclude='./.venv*' --exclude=./.cache \
        --exclude=./runs --exclude=./outputs --exclude=./build --exclude='*.egg-info' \
        --exclude=__pycache__ --exclude=./tests --exclude=./docs -cf - . |
        tar -C "${work}/src" -xf -
    "${PYTHON}" -m pip wheel --quiet --no-deps -w "${work}/dist" "${work}/src"
}

install_wheel() {
    local wheels=("${work}"/dist/msdet-*.whl)
    "${PYTHON}" -m venv "${work}/venv"
    "${work}/venv/bin/python" -m pip install --quiet "${wheels[0]}"
}

installed_package() { # msdet comes from the venv, its configs with it
    local config_dir
    config_dir=$("${work}/venv/bin/python" -c 'from msdet.common.config import CONFIG_DIR; print(CONFIG_DIR)')
    echo "configs: ${config_dir}"
    case "${config_dir}" in
        "${work}/venv/"*) require "${config_dir}/config.yaml" "${config_dir}/model/yolox_nano.yaml" ;;
        *)
            echo "check_wheel.sh: msdet was imported from outside the venv" >&2
            return 1
            ;;
    esac
    "${msdet}" --help
}

started=${SECONDS}
step "build the wheel" build_wheel
step "install it into a new venv" install_wheel

msdet=${work}/venv/bin/msdet
mkdir -p "${work}/run"
cd "${work}/run"
# The smallest run that exercises everything: 16 + 8 images of 64 px, two steps, the final
# evaluation; MindSpore's own kernels (runtime.cpu_kernels=native: no C++ build).
cpu=(runtime=cpu runtime.cpu_kernels=native)
data=(data.num_train=16 data.num_val=8 data.cache_dir=cache)

step "the installed package" installed_package
step "msdet train" "${msdet}" train "${cpu[@]}" "${data[@]}" "data.img_size=[64,64]" \
    train.img_scale=1 train.batch_size=8 train.epochs=1 train.warmup_epochs=0 \
    train.no_aug_epochs=0 train.tensorboard=false eval.batch_size=8 run.dir=train
step "train's files" require train/checkpoints/best.ckpt train/checkpoints/last.ckpt \
    train/metrics.json train/results.csv train/config.yaml train/train.log
ckpt=train/checkpoints/best.ckpt
step "msdet eval" "${msdet}" eval "ckpt=${ckpt}" "${cpu[@]}" "${data[@]}" run.dir=eval
step "eval's files" require eval/metrics.json eval/detections.json eval/eval.log
images=(cache/shapes-*/val/*.jpg)
step "msdet predict" "${msdet}" predict "ckpt=${ckpt}" "source=${images[0]}" "${cpu[@]}" \
    run.dir=predict
step "predict's files" require predict/predictions.json "predict/$(basename "${images[0]}")"
site=$("${work}/venv/bin/python" -c 'import os, msdet.commands as c; print(os.path.dirname(os.path.dirname(c.__file__)))')
step "scripts/run_eval.sh of the wheel" env PATH="${work}/venv/bin:${PATH}" \
    bash "${site}/scripts/run_eval.sh" "${ckpt}" "${cpu[@]}" "${data[@]}" run.dir=eval_script
step "run_eval.sh's files" require eval_script/metrics.json eval_script/launch.txt eval_script/console.log
cd /
step "remove the venv and the runs" rm -rf "${work}"
echo "check_wheel.sh: passed in $((SECONDS - started)) s"
