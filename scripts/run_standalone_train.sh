#!/usr/bin/env bash
# Train on one card (or on the CPU):
#
#   scripts/run_standalone_train.sh [key=value overrides for train.py ...]
#   DEVICE_ID=3 scripts/run_standalone_train.sh runtime=ascend model=yolox_s data=coco data.root=/data/coco
#
# DEVICE_ID picks the Ascend card (default 0; ignored on CPU). The run folder is
# run.dir=... or a new runs/<command>/<date>-<time>; besides what train.py writes there
# (train.log, checkpoints/, results, TensorBoard) it gets launch.txt (how the run was
# started) and console.log (everything the run printed, MindSpore's own messages included).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(dirname "${SCRIPT_DIR}")
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"

msdet_help_if_asked "$@"
MSDET_TYPED=("${BASH_SOURCE[0]}" "$@")
msdet_run_one_card "$(msdet_entry "${REPO_ROOT}" train)" "$@"
