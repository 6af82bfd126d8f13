#!/usr/bin/env bash
# Evaluate a checkpoint (COCO mAP on the val split) on one card or on the CPU:
#
#   scripts/run_eval.sh CKPT [key=value overrides for eval.py ...]
#   scripts/run_eval.sh runs/train/exp/checkpoints/best.ckpt data=coco data.root=/data/coco
#
# Give the model and data the checkpoint was trained with (model=..., data=...). DEVICE_ID
# picks the Ascend card (default 0). The run folder (run.dir=... or a new
# runs/<command>/<date>-<time>) gets metrics.json, detections.json, eval.log, launch.txt and
# console.log.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(dirname "${SCRIPT_DIR}")
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"

msdet_help_if_asked "$@"
case "${1:-}" in
    "")
        msdet_die "CKPT is missing: scripts/run_eval.sh CKPT [overrides ...]"
        ;;
esac
CKPT=$1
shift
[ -f "${CKPT}" ] || msdet_die "CKPT=${CKPT} is not a file"
msdet_forbid_override ckpt "the checkpoint is the first argument" "$@"
MSDET_TYPED=("${BASH_SOURCE[0]}" "${CKPT}" "$@")
msdet_run_one_card "$(msdet_entry "${REPO_ROOT}" eval)" "ckpt=${CKPT}" "$@"
