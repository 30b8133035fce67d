#!/usr/bin/env bash
# Set up everything teraio needs on a fresh Debian 12 machine, idempotently:
# Debian packages, a Python venv in .venv with the build tools, the C build in build/ and the
# Python package (which builds teraio._core) installed into the venv.
# Environment: TIO_SETUP_TORCH=1 also installs the pinned CPU PyTorch (torch==2.13.0) and the
# pinned Hugging Face transformers + accelerate that teraio.hf's test runs its Trainer with.
# TIO_WERROR=ON|OFF configures build/ with warnings as errors (scripts/test.sh) or without.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

need_pkgs=(build-essential cmake ninja-build pkg-config liburing-dev libjansson-dev
           clang libclang-rt-14-dev clang-format clang-tidy valgrind python3-venv fio)
missing=()
for p in "${need_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    log "creating the Python venv in .venv"
    python3 -m venv .venv
fi
. .venv/bin/activate
py_pkgs=(scikit-build-core cmake ninja numpy pytest pytest-xdist matplotlib nvidia-cufile build)
if [ "${TIO_SETUP_TORCH:-0}" = "1" ]; then
    py_pkgs+=("torch==2.13.0" "transformers==5.24.0" "accelerate==1.15.0")
fi
if ! python -c "import scikit_build_core, numpy, pytest, xdist, matplotlib, nvidia.cu13, build" 2>/dev/null \
   || { [ "${TIO_SETUP_TORCH:-0}" = "1" ] && ! python -c "import torch, transformers, accelerate" 2>/dev/null; }; then
    log "installing Python packages into .venv: ${py_pkgs[*]}"
    python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
    python -m pip install -q "${py_pkgs[@]}" 2>&1 | grep -v '^WARNING: Location' || true
fi

log "building the C library, CLI and tests (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${TIO_WERROR:+-DTIO_WERROR=$TIO_WERROR} \
      >/dev/null
cmake --build build --parallel
log "building and installing the Python package into .venv"
python -m pip install -q --no-build-isolation . 2>&1 | grep -v '^WARNING: Location' || true
python -c "import teraio" || { log "the Python package failed to build"; exit 3; }
log "ready: build/teraio and .venv (python -c 'import teraio')"
