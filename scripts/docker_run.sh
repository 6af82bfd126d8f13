#!/usr/bin/env bash
# Train in the msdet container (Dockerfile: CPU, Dockerfile.ascend: Ascend):
#
#   scripts/docker_run.sh [key=value overrides for train.py ...]
#   DATA_DIR=/data/coco scripts/docker_run.sh model=yolox_s data=coco data.root=/data
#   NUM_CARDS=8 scripts/docker_run.sh runtime=ascend_8p model=yolox_s data=coco data.root=/data
#
# Environment (all optional):
#   IMAGE       the image (default msdet:cpu, or where Ascend cards exist msdet:ascend-<chip>,
#               the tag Dockerfile.ascend's build for that chip generation gets)
#   ASCEND_CHIP the chip generation of that tag: 910 (Atlas training series), 910b, a3 or
#               310p (default: read from `npu-smi info`; an image for one generation has no
#               kernels for another)
#   DATA_DIR    host dataset folder, mounted read-only at /data
#   OUTPUT_DIR  host folder for run folders, mounted at /workspace/runs (default ./runs)
#   CACHE_DIR   host folder for the generated shapes set (default ./.cache/msdet)
#   NUM_CARDS   run scripts/run_distributed_train.sh NUM_CARDS inside (host network);
#               MASTER_ADDR, MASTER_PORT, NODE_RANK, NUM_NODES are passed through
#   DEVICE_ID   the Ascend card of a one-card run
#   DOCKER      the container CLI (default docker; podman works the same)
#   DRY_RUN=1   print the docker command instead of running it
#   HOST_ROOT   prefix of the host paths probed for Ascend devices and drivers (tests)
#
# Where Ascend cards exist, the container gets the NPU devices (/dev/davinci*,
# /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc) and, read-only, the driver
# (/usr/local/Ascend/driver, /usr/local/sbin/npu-smi, /usr/local/dcmi,
# /etc/ascend_install.info, /etc/hccn.conf): each only when present on the host. The run
# runs as the calling user, so the run folders on the host belong to that user.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"

msdet_help_if_asked "$@"

HOST_ROOT=${HOST_ROOT:-}
DOCKER=${DOCKER:-docker}
OUTPUT_DIR=${OUTPUT_DIR:-runs}
CACHE_DIR=${CACHE_DIR:-.cache/msdet}
WORKDIR=/workspace # WORKDIR of both images

if [ "${DRY_RUN:-0}" != 1 ] && ! command -v "${DOCKER}" >/dev/null 2>&1; then
    msdet_die "DOCKER=${DOCKER} is not installed (set DOCKER=podman, or DRY_RUN=1 to print the command)"
fi

ascend_devices=()
for dev in "${HOST_ROOT}"/dev/davinci[0-9]*; do
    if [ -e "${dev}" ]; then ascend_devices+=("${dev}"); fi
done
# The chip generation of the first NPU, from the chip name in `npu-smi info`'s table
# (910B3 -> 910b, 910_9391 -> a3, 910A / 910ProB -> 910, 310P3 -> 310p); empty if unknown.
ascend_chip() {
    local smi="${HOST_ROOT}/usr/local/sbin/npu-smi" name
    [ -x "${smi}" ] || smi=$(command -v npu-smi || true)
    [ -n "${smi}" ] || return 0
    name=$("${smi}" info 2>/dev/null | awk -F'|' '$2 ~ /^ *[0-9]+ +[0-9A-Za-z_]+ *$/ { split($2, f, " "); print f[2]; exit }') || true
    case "${name}" in
        910B* | Ascend910B*) echo 910b ;;
        910_93* | Ascend910_93*) echo a3 ;;
        910* | Ascend910*) echo 910 ;;
        310P* | Ascend310P*) echo 310p ;;
    esac
}

if [ -z "${IMAGE:-}" ]; then
    if [ "${#ascend_devices[@]}" -gt 0 ]; then
        ASCEND_CHIP=${ASCEND_CHIP:-$(ascend_chip)}
        case "${ASCEND_CHIP}" in
            910 | 910b | a3 | 310p) IMAGE=msdet:ascend-${ASCEND_CHIP} ;;
            "") msdet_die "cannot tell this host's Ascend chip generation from npu-smi info: set ASCEND_CHIP=910|910b|a3|310p (or IMAGE=...)" ;;
            *) msdet_die "ASCEND_CHIP=${ASCEND_CHIP}: must be one of 910, 910b, a3, 310p (the tags of Dockerfile.ascend's builds)" ;;
        esac
    else
        IMAGE=msdet:cpu
    fi
fi

# The absolute path of a folder to mount, created first (Docker would create a missing
# mount source owned by root); a dry run creates nothing.
abs_dir() {
    if [ "${DRY_RUN:-0}" = 1 ]; then
        realpath -m "$1"
    else
        mkdir -p "$1" && (cd "$1" && pwd)
    fi
}

cmd=("${DOCKER}" run --rm --init --ipc=host --user "$(id -u):$(id -g)")
if [ -t 0 ] && [ -t 1 ]; then cmd+=(-it); fi
cmd+=(-v "$(abs_dir "${OUTPUT_DIR}"):${WORKDIR}/runs")
cmd+=(-v "$(abs_dir "${CACHE_DIR}"):${WORKDIR}/.cache/msdet" -e "MSDET_CACHE_DIR=${WORKDIR}/.cache/msdet")
cmd+=(-e HOME=/tmp)
if [ -n "${DATA_DIR:-}" ]; then
    [ -d "${DATA_DIR}" ] || msdet_die "DATA_DIR=${DATA_DIR} is not a folder"
    cmd+=(-v "$(cd "${DATA_DIR}" && pwd):/data:ro")
fi

# Ascend: device nodes, then driver files, each only where the host has it.
if [ "${#ascend_devices[@]}" -gt 0 ]; then
    for dev in "${ascend_devices[@]}" "${HOST_ROOT}"/dev/{davinci_manager,devmm_svm,hisi_hdc}; do
        if [ -e "${dev}" ]; then cmd+=("--device=${dev}:${dev#"${HOST_ROOT}"}"); fi
    done
    for path in /usr/local/Ascend/driver /usr/local/sbin/npu-smi /usr/local/dcmi /etc/ascend_install.info /etc/hccn.conf; do
        if [ -e "${HOST_ROOT}${path}" ]; then cmd+=(-v "${HOST_ROOT}${path}:${path}:ro"); fi
    done
    # The driver's device nodes belong to its group (HwHiAiUser): join it by number.
    manager="${HOST_ROOT}/dev/davinci_manager"
    if [ -e "${manager}" ]; then cmd+=(--group-add "$(stat -c %g "${manager}")"); fi
fi

if [ -n "${NUM_CARDS:-}" ]; then
    msdet_require_int NUM_CARDS "${NUM_CARDS}" 1
    cmd+=(--network=host)
    for var in MASTER_ADDR MASTER_PORT NODE_RANK NUM_NODES CLUSTER_TIMEOUT; do
        if [ -n "${!var:-}" ]; then cmd+=(-e "${var}=${!var}"); fi
    done
    cmd+=("${IMAGE}" scripts/run_distributed_train.sh "${NUM_CARDS}" "$@")
else
    if [ -n "${DEVICE_ID:-}" ]; then
        msdet_require_int DEVICE_ID "${DEVICE_ID}" 0
        cmd+=(-e "DEVICE_ID=${DEVICE_ID}")
    fi
    cmd+=("${IMAGE}" python train.py "$@")
fi

if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' "${cmd[@]}"
    printf '\n'
    exit 0
fi
exec "${cmd[@]}"
