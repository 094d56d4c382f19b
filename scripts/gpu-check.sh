#!/usr/bin/env bash
# The one command that proves gpusafe's GPU path, on a GPU machine with no
# network. It uses the Python found there (${PYTHON:-python3}), which must
# already have cuda-bindings (with NVRTC), numpy, rich, llvmlite and
# pyelftools; the repo goes on PYTHONPATH, nothing is installed.
#
#   scripts/gpu-check.sh                  every sample under gpusafe --device cuda,
#                                         and under compute-sanitizer if installed
#   scripts/gpu-check.sh --device cpu     a dry run on the CPU device (no GPU)
#   scripts/gpu-check.sh --help           the other options (--samples, --strict, ...)
#
# Prints one table (expected finding, gpusafe's finding and time,
# compute-sanitizer's finding and time, per sample) and a one-line verdict.
# Exit status 0 only if every gpusafe run matched samples/expectations.json;
# 1 if one did not; 2 if a prerequisite is missing. Bounded: each run has a
# timeout, the whole check a time budget, and this script a hard limit.
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"

if ! command -v "$PY" >/dev/null 2>&1; then
    echo "gpu-check: no Python at '$PY' (set PYTHON=/path/to/python)" >&2
    exit 2
fi
PY="$(command -v "$PY")"
case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac  # not realpath: a venv's python is a symlink

export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
cd "$ROOT" || exit 2

# The script keeps to a 270 s budget itself; this is the backstop.
if command -v timeout >/dev/null 2>&1; then
    exec timeout --kill-after=10 290 "$PY" "$ROOT/scripts/gpu_check.py" --python "$PY" "$@"
fi
exec "$PY" "$ROOT/scripts/gpu_check.py" --python "$PY" "$@"
