#!/usr/bin/env bash
# Data-parallel training on NUM_CARDS cards of this node, launched with msrun (Ascend: HCCL,
# CPU: mccl), or with a rank table when RANK_TABLE_FILE is set (Ascend only).
#
#   scripts/run_distributed_train.sh NUM_CARDS [key=value overrides for train.py ...]
#
# Environment (all optional):
#   MASTER_ADDR  scheduler address, the IP of node 0        (default 127.0.0.1)
#   MASTER_PORT  scheduler port, free on node 0              (default 8118)
#   NUM_NODES    nodes in the job, each running this script  (default 1)
#   NODE_RANK    this node, 0..NUM_NODES-1; global rank = NODE_RANK * NUM_CARDS + card
#   RANK_TABLE_FILE  an HCCL rank table: launch one process per card without msrun
#   CLUSTER_TIMEOUT  seconds msrun waits for all workers to join (default 600)
#   HCCL_EXEC_TIMEOUT  seconds an HCCL collective waits for the other ranks before the job
#                    fails (Ascend; default here 7200, HCCL's own 1836): ranks wait for
#                    rank 0 while it scores the gathered evaluation and saves checkpoints
#   HCCL_CONNECT_TIMEOUT  seconds HCCL waits for every rank to connect (Ascend; 120-7200,
#                    default here 1800; MindSpore sets 600 when unset, HCCL's own is 120):
#                    each rank compiles its graphs before the first collective, and one
#                    YOLOX graph takes 170-341 s on a 910
#   TRAIN_ENTRY  the Python script every card runs (default: msdet's train.py)
#
# Everything lands in the run folder (run.dir=..., else runs/train/<date>-<time>):
# launch.txt (how the job was started), logs/worker_<rank>.log per rank,
# logs/scheduler.log and logs/msrun.log (msrun), and what rank 0 writes (train.log,
# checkpoints/, results, TensorBoard). Several nodes must share one run.dir.
#
# A rank that fails ends the job: the script names the rank, stops the other workers and
# exits non-zero within a few seconds (msrun alone would wait for its scheduler's 30 s
# heartbeat timeout and report the process id, not the rank).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(dirname "${SCRIPT_DIR}")
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"

msdet_help_if_asked "$@"
if [ $# -lt 1 ]; then
    msdet_usage >&2
    msdet_die "NUM_CARDS is missing"
fi
NUM_CARDS=$1
shift
OVERRIDES=("$@")

MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-8118}
NUM_NODES=${NUM_NODES:-1}
NODE_RANK=${NODE_RANK:-0}
CLUSTER_TIMEOUT=${CLUSTER_TIMEOUT:-600}
HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-7200}
HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1800}
TRAIN_ENTRY=${TRAIN_ENTRY:-$(msdet_entry "${REPO_ROOT}" train)}
STOP_GRACE_S=10 # how long stopped processes get before SIGKILL
POLL_S=1

# ---- check the request before starting anything ------------------------------------------
msdet_require_int NUM_CARDS "${NUM_CARDS}" 1
NUM_CARDS=$((10#${NUM_CARDS}))
msdet_require_int NUM_NODES "${NUM_NODES}" 1
msdet_require_int NODE_RANK "${NODE_RANK}" 0 $((NUM_NODES - 1))
msdet_require_int MASTER_PORT "${MASTER_PORT}" 1024 65535
msdet_require_int CLUSTER_TIMEOUT "${CLUSTER_TIMEOUT}" 1
msdet_require_int HCCL_EXEC_TIMEOUT "${HCCL_EXEC_TIMEOUT}" 1
msdet_require_int HCCL_CONNECT_TIMEOUT "${HCCL_CONNECT_TIMEOUT}" 120 7200
export HCCL_EXEC_TIMEOUT HCCL_CONNECT_TIMEOUT # read by HCCL in every rank (ignored on CPU and GPU)
[ -f "${TRAIN_ENTRY}" ] || msdet_die "TRAIN_ENTRY=${TRAIN_ENTRY} is not a file"
msdet_forbid_override runtime.distributed "this script sets runtime.distributed=true" "${OVERRIDES[@]}"

ASCEND_CARDS=$(msdet_ascend_cards)
if [ "${ASCEND_CARDS}" -gt 0 ] && [ "${NUM_CARDS}" -gt "${ASCEND_CARDS}" ]; then
    msdet_die "NUM_CARDS=${NUM_CARDS} but this node has ${ASCEND_CARDS} Ascend cards (/dev/davinci*)"
fi
if [ -n "${RANK_TABLE_FILE:-}" ]; then
    [ -f "${RANK_TABLE_FILE}" ] || msdet_die "RANK_TABLE_FILE=${RANK_TABLE_FILE} does not exist"
    [ "${ASCEND_CARDS}" -gt 0 ] ||
        msdet_die "RANK_TABLE_FILE is set but there is no Ascend card here: rank tables are HCCL (Ascend) only; unset it to launch with msrun"
    RANK_TABLE_FILE=$(cd "$(dirname "${RANK_TABLE_FILE}")" && pwd)/$(basename "${RANK_TABLE_FILE}")
fi

RUN_DIR=$(msdet_run_dir_override "${OVERRIDES[@]}")
if [ -z "${RUN_DIR}" ]; then
    if [ "${NUM_NODES}" -gt 1 ]; then
        msdet_die "NUM_NODES=${NUM_NODES}: pass the same run.dir=<shared folder> on every node"
    fi
    RUN_DIR=$(msdet_new_run_dir "${TRAIN_ENTRY}")
    OVERRIDES+=("run.dir=${RUN_DIR}")
fi
msdet_require_mindspore

# A port another program holds makes msrun's scheduler fail after the workers started;
# only the node that hosts the scheduler (node 0) can check it.
if [ -z "${RANK_TABLE_FILE:-}" ] && [ "${NODE_RANK}" -eq 0 ]; then
    if ! python - "${MASTER_ADDR}" "${MASTER_PORT}" <<'EOF'; then
import errno, socket, sys
addr, port = sys.argv[1], int(sys.argv[2])
with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the scheduler does
    try:
        s.bind((addr, port))
    except OSError as err:
        sys.exit(1 if err.errno == errno.EADDRINUSE else 0)  # other errors: msrun's to judge
EOF
        msdet_die "MASTER_PORT=${MASTER_PORT} is already in use on ${MASTER_ADDR}: choose a free port (MASTER_PORT=...)"
    fi
fi

LOG_DIR="${RUN_DIR}/logs"
mkdir -p "${LOG_DIR}"
RECORD="${RUN_DIR}/launch.txt"
[ "${NODE_RANK}" -eq 0 ] || RECORD="${RUN_DIR}/launch_node${NODE_RANK}.txt"
WORLD=$((NUM_CARDS * NUM_NODES))
FIRST_RANK=$((NODE_RANK * NUM_CARDS))
TYPED=("${BASH_SOURCE[0]}" "${NUM_CARDS}" "$@")
START_S=${SECONDS}

# ---- process bookkeeping (Linux /proc, so that no procps is needed) ----------------------
declare -A RANK_OF=() # worker pid -> global rank
SCHED_PID=""
TAIL_PIDS=()
CHILD_PIDS=() # rank-table path: our own children, index = card

# Print the PIDs whose parent is $1.
children_of() {
    local stat line rest
    for stat in /proc/[0-9]*/stat; do
        { read -r line <"${stat}"; } 2>/dev/null || continue # builtins only: no fork per process
        rest=${line##*) }                                    # "state ppid pgrp ..."
        rest=${rest#* }
        if [ "${rest%% *}" = "$1" ]; then printf '%s\n' "${stat//[^0-9]/}"; fi
    done
}

# proc_env PID NAME: the value of NAME in the environment PID started with.
proc_env() {
    local kv
    {
        while IFS= read -r -d '' kv; do
            if [[ ${kv} == "$2="* ]]; then
                printf '%s\n' "${kv#*=}"
                return 0
            fi
        done <"/proc/$1/environ"
    } 2>/dev/null
    return 1
}

# proc_state PID: R, S, D, Z (zombie), ... from /proc/PID/stat.
proc_state() {
    local line rest
    { read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
    rest=${line##*) }
    printf '%s\n' "${rest%% *}"
}

# Learn which msrun child is which: workers (rank from RANK_ID), scheduler, log tails.
discover_msrun_children() {
    local pid role comm state
    for pid in $(children_of "${MSRUN_PID}"); do
        [ -n "${RANK_OF[${pid}]:-}" ] && continue
        [ "${pid}" = "${SCHED_PID}" ] && continue
        state=$(proc_state "${pid}") || continue
        if [ "${state}" = Z ]; then
            # Dead before we could read its environment. msrun reaps a dead worker within
            # a second but its scheduler only at the very end: a lasting zombie is the latter.
            if [ -z "${SCHED_PID}" ] && [ "${NODE_RANK}" -eq 0 ]; then SCHED_PID=${pid}; fi
            continue
        fi
        role=$(proc_env "${pid}" MS_ROLE) || role=""
        { read -r comm <"/proc/${pid}/comm"; } 2>/dev/null || comm=""
        if [ "${role}" = MS_WORKER ] && [ "${comm}" != tail ]; then
            RANK_OF[${pid}]=$(proc_env "${pid}" RANK_ID) || RANK_OF[${pid}]="?"
            msdet_say "rank ${RANK_OF[${pid}]}: pid ${pid}, log ${LOG_DIR}/worker_${RANK_OF[${pid}]}.log"
        elif [ "${role}" = MS_SCHED ] && [ "${comm}" != tail ]; then
            SCHED_PID=${pid}
        elif [ "${comm}" = tail ] && [[ " ${TAIL_PIDS[*]} " != *" ${pid} "* ]]; then
            TAIL_PIDS+=("${pid}")
        fi
    done
}

# Running (a zombie, exited but not yet reaped by msrun, is not).
alive() {
    local state
    kill -0 "$1" 2>/dev/null || return 1
    state=$(proc_state "$1") || return 1
    [ "${state}" != Z ]
}

# "exit code 1" / "killed by signal 9 (KILL)" for a waitpid-style code (negative = signal).
describe_code() {
    local code=$1
    if [ "${code}" -lt 0 ]; then
        printf 'killed by signal %d (%s)' "$((-code))" "$(kill -l "$((-code))" 2>/dev/null || echo '?')"
    elif [ "${code}" -gt 128 ]; then
        printf 'exit code %d (signal %s?)' "${code}" "$(kill -l "$((code - 128))" 2>/dev/null || echo '?')"
    else
        printf 'exit code %d' "${code}"
    fi
}

report_failed_rank() {
    local rank=$1 pid=$2 code=$3 log="${LOG_DIR}/worker_$1.log"
    msdet_say "rank ${rank} (pid ${pid}) FAILED: $(describe_code "${code}"); stopping the other ranks"
    if [ -f "${log}" ]; then
        msdet_say "last lines of ${log}:"
        grep -v -E '^\[(WARNING|INFO)\] (DISTRIBUTED|DEVICE)' "${log}" | tail -n 15 | sed 's/^/    /' >&2 || true
    fi
}

# Stop everything this job started: msrun first (its SIGINT handler kills its workers,
# scheduler and log tails), then whatever is left, with SIGKILL after STOP_GRACE_S.
stop_job() {
    local pid waited=0
    if [ -n "${MSRUN_PID:-}" ] && alive "${MSRUN_PID}"; then
        kill -INT "${MSRUN_PID}" 2>/dev/null || true
    fi
    for pid in "${!RANK_OF[@]}" "${CHILD_PIDS[@]}"; do
        kill -TERM -- "-${pid}" 2>/dev/null || kill -TERM "${pid}" 2>/dev/null || true
    done
    while [ "${waited}" -lt "${STOP_GRACE_S}" ] && any_alive; do
        sleep 1
        waited=$((waited + 1))
    done
    for pid in "${!RANK_OF[@]}" "${CHILD_PIDS[@]}"; do
        kill -KILL -- "-${pid}" 2>/dev/null || kill -KILL "${pid}" 2>/dev/null || true
    done
    for pid in "${SCHED_PID}" "${TAIL_PIDS[@]}" "${MSRUN_PID:-}"; do
        if [ -n "${pid}" ]; then kill -KILL "${pid}" 2>/dev/null || true; fi
    done
    for pid in "${MSRUN_PID:-}" "${CHILD_PIDS[@]}"; do # reap our own children
        if [ -n "${pid}" ]; then wait "${pid}" 2>/dev/null || true; fi
    done
}

any_alive() {
    local pid
    for pid in "${MSRUN_PID:-}" "${!RANK_OF[@]}" "${CHILD_PIDS[@]}" "${SCHED_PID}"; do
        if [ -n "${pid}" ] && alive "${pid}"; then return 0; fi
    done
    return 1
}

finish_failed() {
    msdet_say "distributed job FAILED after $((SECONDS - START_S)) s ($1); logs in ${LOG_DIR}"
    exit 1
}

on_signal() {
    trap - INT TERM
    msdet_say "interrupted: stopping all ranks"
    stop_job
    exit 130
}
trap on_signal INT TERM

# The ranks of this node share its CPU cores: data.num_workers=auto (data/config.py) divides
# them by this count (msrun does not tell its workers its --local_worker_num).
export MSDET_LOCAL_RANKS="${NUM_CARDS}"

# ---- rank table (Ascend only): one process per card, watched by this script ----------------
launch_with_rank_table() {
    local card rank pid code done_count
    local -a cmd=(python "${TRAIN_ENTRY}" "${OVERRIDES[@]}" runtime.distributed=true)
    msdet_record_launch "${RECORD}" -- "${TYPED[@]}" -- "${cmd[@]}"
    msdet_say "rank table ${RANK_TABLE_FILE}: ${NUM_CARDS} cards here, ranks ${FIRST_RANK}..$((FIRST_RANK + NUM_CARDS - 1)) of ${WORLD}"
    for ((card = 0; card < NUM_CARDS; card++)); do
        rank=$((FIRST_RANK + card))
        RANK_TABLE_FILE=${RANK_TABLE_FILE} RANK_SIZE=${WORLD} RANK_ID=${rank} DEVICE_ID=${card} \
            "${cmd[@]}" >"${LOG_DIR}/worker_${rank}.log" 2>&1 &
        CHILD_PIDS[card]=$!
        msdet_say "rank ${rank}: pid $!, log ${LOG_DIR}/worker_${rank}.log"
    done
    tail -n +1 -F --pid="${CHILD_PIDS[0]}" "${LOG_DIR}/worker_${FIRST_RANK}.log" 2>/dev/null &
    TAIL_PIDS+=("$!")
    declare -A finished=()
    while :; do
        done_count=0
        for ((card = 0; card < NUM_CARDS; card++)); do
            pid=${CHILD_PIDS[card]}
            if [ -n "${finished[${pid}]:-}" ]; then
                done_count=$((done_count + 1))
                continue
            fi
            alive "${pid}" && continue
            code=0
            wait "${pid}" || code=$?
            finished[${pid}]=1
            done_count=$((done_count + 1))
            if [ "${code}" -ne 0 ]; then
                report_failed_rank "$((FIRST_RANK + card))" "${pid}" "${code}"
                stop_job
                finish_failed "rank $((FIRST_RANK + card))"
            fi
        done
        [ "${done_count}" -eq "${NUM_CARDS}" ] && break
        sleep "${POLL_S}"
    done
}

# ---- msrun (dynamic cluster): Ascend, GPU and CPU --------------------------------------------
launch_with_msrun() {
    local -a msrun_cmd
    if command -v msrun >/dev/null 2>&1; then
        msrun_cmd=(msrun)
    else
        msrun_cmd=(python -m mindspore.parallel.cluster.run)
    fi
    msrun_cmd+=(
        "--worker_num=${WORLD}" "--local_worker_num=${NUM_CARDS}"
        "--master_addr=${MASTER_ADDR}" "--master_port=${MASTER_PORT}" "--node_rank=${NODE_RANK}"
        "--log_dir=${LOG_DIR}" "--join=True" "--cluster_time_out=${CLUSTER_TIMEOUT}"
        "--tail_worker_log=${FIRST_RANK}"
        "${TRAIN_ENTRY}" "${OVERRIDES[@]}" runtime.distributed=true
    )
    msdet_record_launch "${RECORD}" -- "${TYPED[@]}" -- "${msrun_cmd[@]}"
    msdet_say "msrun: ${NUM_CARDS} workers on this node (ranks ${FIRST_RANK}..$((FIRST_RANK + NUM_CARDS - 1)) of ${WORLD}), scheduler ${MASTER_ADDR}:${MASTER_PORT}, run folder ${RUN_DIR}"

    # msrun's own messages (stderr) also go to logs/msrun.log, where the watcher reads them.
    local msrun_log="${LOG_DIR}/msrun.log"
    : >"${msrun_log}"
    "${msrun_cmd[@]}" 2> >(tee -a "${msrun_log}" >&2) &
    MSRUN_PID=$!

    local line pid code rank workers_gone_s=0 sched_gone_s=0 live
    while alive "${MSRUN_PID}"; do
        # msrun starts everything at once: after the first half minute there is nothing new.
        if [ "${#RANK_OF[@]}" -lt "${NUM_CARDS}" ] || [ $((SECONDS - START_S)) -lt 30 ]; then
            discover_msrun_children
        fi
        # msrun polls its workers every second and logs the first one that exits non-zero
        # (by process id), then kills the others and waits for its scheduler's heartbeat
        # timeout: act on that line at once.
        if line=$(grep -m1 -E 'Worker process [0-9]+ exit with exception' "${msrun_log}"); then
            pid=$(sed -E 's/.*Worker process ([0-9]+) exit.*/\1/' <<<"${line}")
            code=$(sed -E 's/.*Error code: (-?[0-9]+).*/\1/' <<<"${line}")
            [[ ${code} =~ ^-?[0-9]+$ ]] || code=1
            rank=${RANK_OF[${pid}]:-?}
            report_failed_rank "${rank}" "${pid}" "${code}"
            stop_job
            finish_failed "rank ${rank}"
        fi
        live=0
        for pid in "${!RANK_OF[@]}"; do
            alive "${pid}" && live=$((live + 1))
        done
        # The scheduler leaves only after every worker: gone before them means it failed.
        if [ -n "${SCHED_PID}" ] && ! alive "${SCHED_PID}" && [ "${live}" -gt 0 ]; then
            sched_gone_s=$((sched_gone_s + POLL_S))
            if [ "${sched_gone_s}" -ge "${STOP_GRACE_S}" ]; then
                msdet_say "the msrun scheduler (pid ${SCHED_PID}) exited while ${live} workers still run; see ${LOG_DIR}/scheduler.log"
                stop_job
                finish_failed "scheduler"
            fi
        fi
        # All workers ended but msrun still waits for its scheduler: bound that wait.
        if [ "${#RANK_OF[@]}" -eq "${NUM_CARDS}" ] && [ "${live}" -eq 0 ]; then
            workers_gone_s=$((workers_gone_s + POLL_S))
            if [ "${workers_gone_s}" -ge 60 ]; then
                msdet_say "all workers ended but msrun did not return within 60 s"
                stop_job
                finish_failed "msrun did not return"
            fi
        fi
        # Poll quickly until every worker is known, so that even an early failure is
        # reported with its rank.
        if [ "${#RANK_OF[@]}" -lt "${NUM_CARDS}" ] && [ $((SECONDS - START_S)) -lt 30 ]; then
            sleep 0.2
        else
            sleep "${POLL_S}"
        fi
    done
    code=0
    wait "${MSRUN_PID}" || code=$?
    if [ "${code}" -ne 0 ]; then
        local hint
        hint=$(grep -h -o -E 'Timed out node list is: [^,]*' "${LOG_DIR}/scheduler.log" 2>/dev/null | head -n 1) || true
        [ -n "${hint}" ] && msdet_say "scheduler: ${hint} (ranks that stopped sending heartbeats)"
        finish_failed "msrun $(describe_code "${code}")"
    fi
}

if [ -n "${RANK_TABLE_FILE:-}" ]; then
    launch_with_rank_table
else
    launch_with_msrun
fi
msdet_say "distributed training finished: ${WORLD} ranks in $((SECONDS - START_S)) s; run folder ${RUN_DIR}"
