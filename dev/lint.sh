#!/usr/bin/env bash
# Lint everything CI lints: Python (ruff check, ruff format --check), the shell scripts
# (shellcheck: scripts/*.sh, dev/*.sh and .ci/run) and the Dockerfiles (hadolint). Runs
# every linter, then fails if any of them failed. Tools come from the virtual environment
# (VENV, default .venv; requirements-dev.txt installs them) or else from PATH.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=${VENV:-.venv}

tool() { # the venv's copy of a tool, else the one on PATH
    if [ -x "${VENV}/bin/$1" ]; then
        printf '%s\n' "${VENV}/bin/$1"
    elif command -v "$1" >/dev/null 2>&1; then
        command -v "$1"
    else
        echo "lint.sh: $1 is not installed: pip install -r requirements-dev.txt" >&2
        return 1
    fi
}

failed=()
run() { # run NAME COMMAND...: run one linter, remember a failure, go on
    local name=$1
    shift
    echo "== ${name}"
    if ! "$@"; then
        failed+=("${name}")
    fi
}

shell_files=(scripts/*.sh dev/*.sh)
[ -f .ci/run ] && shell_files+=(.ci/run)
docker_files=()
for f in Dockerfile Dockerfile.*; do
    [ -f "${f}" ] && docker_files+=("${f}")
done

RUFF=$(tool ruff)
run "ruff check" "${RUFF}" check .
run "ruff format --check" "${RUFF}" format --check .
run "shellcheck" "$(tool shellcheck)" --external-sources "${shell_files[@]}"
if [ "${#docker_files[@]}" -gt 0 ]; then
    run "hadolint" "$(tool hadolint)" "${docker_files[@]}"
fi

if [ "${#failed[@]}" -gt 0 ]; then
    echo "lint.sh: FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "lint.sh: all clean"
