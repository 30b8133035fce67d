#!/usr/bin/env bash
# Prepare, on this machine, what scripts/gpu_validate.sh needs on a lent GPU machine that
# cannot download anything: the Debian packages of the C build's dependencies (jansson,
# liburing, pkg-config) as .deb files in .gpu-carry/debs (ignored by git). Then run there
#   TIO_DEPS_DEBS=.gpu-carry/debs bash scripts/gpu_validate.sh $OUT
# with .gpu-carry carried along (the device tool's `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpu-carry/debs
mkdir -p "$dir"
grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >>.git/info/exclude
apt-get update -qq
(cd "$dir" && apt-get download -qq libjansson4 libjansson-dev liburing2 liburing-dev \
    pkgconf pkgconf-bin libpkgconf3)
ls -l "$dir"
