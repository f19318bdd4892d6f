#!/usr/bin/env bash
# Set up wsprof in ./.venv on a fresh machine (Python >= 3.10).
#   bash scripts/setup.sh          # the package, for `wsprof demo`
#   bash scripts/setup.sh --test   # plus test tools, Chromium (browser tests) and gdb (inject)
# torch: left alone when the interpreter already has it (the venv sees system packages);
# otherwise the CPU build torch==2.13.0 on machines without an NVIDIA GPU, the default
# (CUDA) build where nvidia-smi sees a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv --system-site-packages .venv
fi
VPY=.venv/bin/python
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        "$VPY" -m pip install --quiet "torch>=2.1"
    else
        "$VPY" -m pip install --quiet "torch==2.13.0"
    fi
fi
if [ "${1:-}" = "--test" ]; then
    "$VPY" -m pip install --quiet -e ".[test]"
    # Debian packages the tests use: chromium (the report in a real browser), gdb (attach
    # --inject into real processes).
    missing=""
    if ! command -v chromium >/dev/null 2>&1 && ! [ -x /usr/bin/chromium ]; then
        missing="chromium"
    fi
    if ! command -v gdb >/dev/null 2>&1; then
        missing="$missing gdb"
    fi
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq >/dev/null
            # shellcheck disable=SC2086
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
        else
            echo "setup: no$missing; its tests will be skipped (apt-get install$missing)"
        fi
    fi
else
    "$VPY" -m pip install --quiet -e .
fi
echo "setup: ready ($("$VPY" -c 'import torch, wsprof; print("wsprof", wsprof.__version__, "torch", torch.__version__)'))"
