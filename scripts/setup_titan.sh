#!/usr/bin/env bash
# Set up .venv-titan, the venv that TorchTitan's tests (tests/python/test_titan*.py) run in,
# idempotently, after scripts/setup.sh (TIO_SETUP_TORCH=1): scripts/titan-requirements.txt
# (torchtitan 0.3.0 and every package it imports, each pinned, torch==2.13.0 the same CPU build
# as .venv's) installed with --no-deps, then teraio as a wheel of .venv's build.
# A venv of its own because TorchTitan imports triton (at import time, also on CPU), and with
# triton installed torch._dynamo imports it into every process that uses the Offloader (about
# 200 MB more RSS), which tests/python/test_torch_memory.py's RSS goals in .venv do not allow.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1m[setup_titan]\033[0m %s\n' "$*" >&2; }
req=scripts/titan-requirements.txt
venv=.venv-titan

[ -x .venv/bin/python ] && .venv/bin/python -c "import torch, teraio" 2>/dev/null || {
    log "run 'TIO_SETUP_TORCH=1 bash scripts/setup.sh' first: .venv with torch and teraio is missing"
    exit 2
}
if [ ! -x "$venv/bin/python" ]; then
    log "creating the Python venv in $venv"
    python3 -m venv "$venv"
fi
# -qq: errors only (pip's -q also prints a warning per package missing from the local indexes).
if ! cmp -s "$req" "$venv/.requirements"; then
    log "installing $req into $venv (--no-deps: every package is pinned there)"
    "$venv/bin/python" -m pip install -qq --no-deps -r "$req"
    cp "$req" "$venv/.requirements"
fi
# teraio: a wheel of .venv's build (the same torch 2.13.0, so the same teraio._torch_alloc);
# build/py-* is scikit-build-core's build folder, so nothing is compiled twice
log "installing teraio into $venv (a wheel of .venv's build)"
rm -rf build/titan-wheel
.venv/bin/python -m pip wheel -qq --no-build-isolation --no-deps -w build/titan-wheel .
"$venv/bin/python" -m pip install -qq --no-deps --force-reinstall build/titan-wheel/teraio-*.whl
log "ready: $venv (TorchTitan 0.3.0, torch 2.13.0, teraio)"
