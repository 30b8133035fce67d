#!/usr/bin/env bash
# The ways teraio is installed, each into a fresh venv, each giving a working Offloader:
#   1. a wheel built with `python -m build` (pip's build isolation: PyTorch not importable
#      while building, so no teraio._torch_alloc), installed with pip;
#   2. `pip install .` (build isolation too);
# (the README's `pip install --no-build-isolation .` is what scripts/setup.sh does for .venv,
# which every other test uses). The fresh venvs see .venv's packages (torch, numpy) after
# their own, through a .pth file, so nothing is downloaded but the build backend.
# Usage: scripts/check_package.sh   (after scripts/setup.sh; ~1 minute on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. .venv/bin/activate
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shared=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

see_shared() {  # $1: venv. After teraio is installed there (pip would take .venv's for it)
    local sp
    sp=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$shared" >"$sp/zz-teraio-dev.pth"  # torch, numpy; after the venv's own packages
}

check() {  # $1: venv, $2: what was installed
    see_shared "$1"
    (cd "$work" && "$1/bin/python" - "$1" "$2" <<'PY'
import os, sys, tempfile, warnings
venv, what = sys.argv[1], sys.argv[2]
import teraio
assert os.path.realpath(teraio.__file__).startswith(os.path.realpath(venv)), teraio.__file__
import torch
from teraio.examples.llama_tiny import LlamaConfig, LlamaTiny, make_batch, train_steps

def run(offload):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344)
    model = LlamaTiny(cfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    off = None
    if offload:
        off = teraio.Offloader(model, opt, memory_budget=0.5, ssd_dirs=[tempfile.mkdtemp()],
                               options=teraio.OffloadOptions(
                                   cpu_allocator=True, min_tensor_bytes="16KiB",
                                   ssd_bandwidth="1GB/s"))
    losses = train_steps(model, opt, off, lambda i: make_batch(cfg, 2, 32, i), 5)
    return losses, off

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    got, off = run(True)
ref, _ = run(False)
rep = off.report()
off.close()
msgs = [str(x.message) for x in w]
assert got == ref, (got, ref)
assert rep["steps_offloaded"] == 3 and rep["bytes_offloaded"] > 0, rep
try:
    from teraio import _torch_alloc
    built = hasattr(_torch_alloc, "torch_version")
except ImportError:
    built = False
if not built:  # build isolation: the fallback, said once
    assert rep["cpu_allocator"] is None and rep["cpu_mmap_threshold"] == 65536, rep
    assert any("--no-build-isolation" in m for m in msgs), msgs
print(f"{what}: Offloader works (bitwise equal to plain, {rep['bytes_offloaded']} bytes "
      f"offloaded; teraio._torch_alloc {'built' if built else 'not built: fallback warned'})")
PY
    )
}

echo "[package] python -m build --wheel (build isolation)"
python -m build --wheel --outdir "$work/dist" -C build-dir="$work/build-wheel" . >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log"; exit 1; }
whl=$(ls "$work"/dist/teraio-*.whl)
if unzip -l "$whl" | grep -E 'teraio/_torch_alloc/|teraio/_core/'; then
    echo "the wheel ships source folders (above): they would shadow missing modules"; exit 1
fi
python3 -m venv "$work/v1"
"$work/v1/bin/python" -m pip install -q --no-deps "$whl" 2>&1 | { grep -v '^WARNING: Location' || true; }
check "$work/v1" "wheel from python -m build"

echo "[package] pip install . (build isolation)"
python3 -m venv "$work/v2"
"$work/v2/bin/python" -m pip install -q --no-deps -C build-dir="$work/build-pip" "$root" \
    2>&1 | { grep -v '^WARNING: Location' || true; }
check "$work/v2" "pip install ."
