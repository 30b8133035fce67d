#!/usr/bin/env bash
# Prepare, on this machine, what scripts/gpu_validate.sh needs on a lent GPU machine that
# cannot download anything, into .gpu-carry/ (ignored by git, about 1 MiB):
#   .gpu-carry/debs    the Debian packages of the C build's dependencies (jansson, liburing,
#                      pkg-config): the machine's image has none of them
#   .gpu-carry/wheels  scikit-build-core, the Python package's build backend: the image lists
#                      it, so this wheel is used only where it turns out missing (its own needs,
#                      packaging and pathspec, are in the image)
# Everything else the build needs is in that image (CMake, ninja, a C compiler, numpy,
# PyTorch). Then call the device tool's `run` with carry [".gpu-carry"] and the command
#   TIO_GPU_CARRY=.gpu-carry bash scripts/gpu_validate.sh $OUT
# (scripts/gpu_validate.sh's header has the rest).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu-carry/debs .gpu-carry/wheels
mkdir -p .gpu-carry/debs .gpu-carry/wheels
apt-get update -qq
(cd .gpu-carry/debs && apt-get download -qq libjansson4 libjansson-dev liburing2 liburing-dev \
    pkgconf pkgconf-bin libpkgconf3)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 -d .gpu-carry/wheels \
    'scikit-build-core>=0.10'
ls -l .gpu-carry/debs .gpu-carry/wheels
du -sh .gpu-carry
