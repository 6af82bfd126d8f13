# Helpers shared by the launch scripts (sourced, not run). Each function is small and
# prints errors as "<script>: error: ..." naming the parameter that was wrong.
# shellcheck shell=bash

MSDET_SCRIPT_NAME=$(basename "${0}")

# Print an error naming the bad parameter and exit 2 (bad usage), before anything ran.
msdet_die() {
    printf '%s: error: %s\n' "${MSDET_SCRIPT_NAME}" "$*" >&2
    exit 2
}

# The calling script's header comment (line 2 up to `set -euo pipefail`) as its usage text.
msdet_usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${0}"
}

# msdet_help_if_asked "$@": print the usage and exit 0 when the first argument is -h/--help.
msdet_help_if_asked() {
    case "${1:-}" in
        -h | --help)
            msdet_usage
            exit 0
            ;;
    esac
}

msdet_say() {
    printf '%s: %s\n' "${MSDET_SCRIPT_NAME}" "$*" >&2
}

# msdet_require_int NAME VALUE MIN [MAX]: VALUE is a decimal integer within [MIN, MAX].
msdet_require_int() {
    local name=$1 value=$2 min=$3 max=${4:-}
    if ! [[ ${value} =~ ^[0-9]+$ ]]; then
        msdet_die "${name} must be an integer, got '${value}'"
    fi
    # 10# keeps a leading zero from turning the number into octal.
    if [ -z "${max}" ] && ((10#${value} < min)); then
        msdet_die "${name} must be at least ${min}, got ${value}"
    fi
    if [ -n "${max}" ] && ((10#${value} < min || 10#${value} > max)); then
        msdet_die "${name} must be in [${min}, ${max}], got ${value}"
    fi
}

# Number of Ascend NPUs visible on this host (0 without the driver's device files).
msdet_ascend_cards() {
    local dev count=0
    for dev in /dev/davinci[0-9]*; do
        if [ -e "${dev}" ]; then count=$((count + 1)); fi
    done
    printf '%d\n' "${count}"
}

# The run folder given as a run.dir=... override, or empty.
msdet_run_dir_override() {
    local arg dir=""
    for arg in "$@"; do
        case "${arg}" in
            run.dir=* | +run.dir=* | ++run.dir=*) dir=${arg#*run.dir=} ;;
        esac
    done
    printf '%s\n' "${dir}"
}

# msdet_entry ROOT COMMAND: the Python file that runs COMMAND (train, eval): COMMAND.py at the
# root of a clone, else commands/COMMAND.py of an installed msdet (ROOT: site-packages/msdet).
msdet_entry() {
    local root=$1 command=$2
    if [ -f "${root}/${command}.py" ]; then
        printf '%s\n' "${root}/${command}.py"
    else
        printf '%s\n' "${root}/commands/${command}.py"
    fi
}

# A new run folder for ENTRY (train.py -> runs/train/<date>-<time>), where the entry point
# would put its runs (configs/config.yaml: run.root/<command>).
msdet_new_run_dir() {
    local entry=${1:-train.py} kind
    kind=$(basename "${entry}" .py)
    printf 'runs/%s/%s\n' "${kind}" "$(date +%Y%m%d-%H%M%S)"
}

# The overrides must not set KEY: the script owns it (e.g. runtime.distributed).
msdet_forbid_override() {
    local key=$1 why=$2 arg
    shift 2
    for arg in "$@"; do
        case "${arg}" in
            "${key}"=* | "+${key}"=* | "++${key}"=*) msdet_die "do not pass ${arg}: ${why}" ;;
        esac
    done
}

# msdet_record_launch FILE -- TYPED... -- RAN...: write how this run was started (the
# command as typed, the environment it read, and the command that really ran) into FILE.
msdet_record_launch() {
    local file=$1 var
    shift
    [ "$1" = "--" ] && shift
    {
        printf '# msdet launch record: %s on %s, git %s\n' "$(date '+%Y-%m-%dT%H:%M:%S%z')" \
            "$(uname -n)" "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        printf '# working directory: %s\n' "${PWD}"
        printf '# as typed:\n'
        for var in DEVICE_ID MASTER_ADDR MASTER_PORT NODE_RANK NUM_NODES RANK_TABLE_FILE TRAIN_ENTRY; do
            if [ -n "${!var:-}" ]; then printf '%s=%q ' "${var}" "${!var}"; fi
        done
        while [ $# -gt 0 ] && [ "$1" != "--" ]; do
            printf '%q ' "$1"
            shift
        done
        printf '\n'
        [ "${1:-}" = "--" ] && shift
        if [ $# -gt 0 ]; then
            printf '# what ran:\n'
            printf '%q ' "$@"
            printf '\n'
        fi
    } >"${file}"
}

# Fail early, with the fix, when `python` cannot import MindSpore (msrun starts workers
# with the `python` found on PATH).
msdet_require_mindspore() {
    command -v python >/dev/null 2>&1 || msdet_die "no 'python' on PATH: activate the msdet environment"
    python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("mindspore") is None)' ||
        msdet_die "'$(command -v python)' cannot import mindspore: activate the msdet environment (.venv)"
}

# msdet_run_one_card ENTRY.py [overrides...]: run one Python entry point on one card (or
# the CPU) with its output shown and kept in <run dir>/console.log, and the launch recorded
# in <run dir>/launch.txt. DEVICE_ID (default 0) picks the Ascend card. Returns its status.
msdet_run_one_card() {
    local entry=$1 run_dir cards status
    shift
    local -a overrides=("$@")
    DEVICE_ID=${DEVICE_ID:-0}
    msdet_require_int DEVICE_ID "${DEVICE_ID}" 0
    cards=$(msdet_ascend_cards)
    if [ "${cards}" -gt 0 ] && [ ! -e "/dev/davinci$((10#${DEVICE_ID}))" ]; then
        msdet_die "DEVICE_ID=${DEVICE_ID}: there is no /dev/davinci$((10#${DEVICE_ID})) on this host (${cards} cards)"
    fi
    msdet_forbid_override runtime.distributed "one card; use scripts/run_distributed_train.sh for several" "${overrides[@]}"
    local arg
    for arg in "${overrides[@]}"; do
        if [ "${arg}" = runtime=ascend_8p ]; then
            msdet_die "runtime=ascend_8p is for several cards: use scripts/run_distributed_train.sh 8 (one card: runtime=ascend)"
        fi
    done
    run_dir=$(msdet_run_dir_override "${overrides[@]}")
    if [ -z "${run_dir}" ]; then
        run_dir=$(msdet_new_run_dir "${entry}")
        overrides+=("run.dir=${run_dir}")
    fi
    msdet_require_mindspore
    mkdir -p "${run_dir}"
    local -a cmd=(python "${entry}" "${overrides[@]}")
    msdet_record_launch "${run_dir}/launch.txt" -- "${MSDET_TYPED[@]}" -- "${cmd[@]}"
    export DEVICE_ID
    status=0
    # Unbuffered, so that console.log and the screen follow the run as it happens.
    PYTHONUNBUFFERED=1 "${cmd[@]}" 2>&1 | tee -a "${run_dir}/console.log" || status=${PIPESTATUS[0]}
    return "${status}"
}
