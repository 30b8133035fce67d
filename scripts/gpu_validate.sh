#!/usr/bin/env bash
# Validate teraio's GPU path on a machine with an NVIDIA GPU (CUDA driver, PyTorch with CUDA).
#
#   bash scripts/gpu_validate.sh [OUTDIR] [PHASES]
#
# On a lent machine of this workplace (nothing can be downloaded there): first, here,
#   bash scripts/gpu_prepare.sh        # Debian packages the build needs, into .gpu-carry/
# then run on the device with carry [".gpu-carry"] and the command
#   TIO_DEPS_DEBS=.gpu-carry/debs bash scripts/gpu_validate.sh $OUT
# The default phases ("env train") fit in about 7 minutes on one H100 or H200 and print one
# table (summary.txt): the three questions about training on the GPU,
#   (a) a 1.1B-parameter Llama-style model (preset 1b, sequence 2048) at 50% of its memory with
#       the pinned host tier, against plain PyTorch: bitwise-equal losses, steady
#       max_memory_allocated, step time;
#   (b) the same with the SSD tier;
#   (c) the same model on a GPU made too small for its plain step (--gpu-memory-cap; the plain
#       run must run out of memory), trained with the host and SSD tiers, its step time beside
#       the simulator's prediction for the profiled trace (Offloader.predicted_step_s).
#
# PHASES (default "env train"; "build", "ctest", "io", "cpu" and "titan" are extra) picks what
# runs:
#   env    the machine: GPU, driver, disks, GPUDirect Storage (nvidia-fs), compilers
#   build  libteraio and the CLI (CMake, Release) in $TIO_GPU_BUILD (default /tmp/tio-gpu-build)
#   ctest  the C test suite; with a GPU the cuda and cufile backends run their conformance tests
#          against the real libcudart / libcufile instead of the fakes
#   io     teraio probe, then bench-io moving device memory (cudaMalloc) to and from the SSD
#          with the cuda and cufile backends, host memory with uring as the anchor
#   train  installs the Python package and trains examples/train_llama_tiny.py on the GPU:
#          plain twice (determinism), then teraio at 50% of the peak with the SSD tier, the
#          pinned host tier and both; compares losses and final parameters bit for bit with
#          the plain run and reports torch.cuda.max_memory_allocated() of the steady steps,
#          the step time and teraio's counters (scripts/gpu_train_summary.py; TIO_GPU_RUNS,
#          one "NAME ARGS..." per line, replaces the list of runs)
#   cpu    bench/torch_bench.py on this machine's CPU: plain against teraio at 50% of the peak
#   titan  TorchTitan 0.3 (not in the default phases; meant to fit in about 3 minutes on an
#          H100): its Llama 3 debug model trained by TorchTitan's own launcher and trainer
#          through teraio.titan (torchrun -m torchtitan.train --module teraio.titan --config
#          llama3_debugmodel), once without teraio, then at 50% of the peak with the pinned
#          host tier and with the SSD tier; prints each run's rank summary (teraio report) as
#          it goes, then compares what TorchTitan logged each step (loss, gradient norm) bit
#          for bit with the plain run (scripts/gpu_titan_summary.py), all also into
#          summary.txt. Needs the torchtitan package and the packages it imports: installed
#          from PyPI (torchtitan with --no-deps, the installed torch kept) where missing, or
#          from TIO_TITAN_WHEELS=DIR (wheels fetched elsewhere with pip download) where nothing
#          can be downloaded. TIO_TITAN_STEPS (10) and TIO_TITAN_ARGS (more TorchTitan or
#          --teraio.* options, e.g. --config llama3_debugmodel_flex) size it.
#
# Every phase writes OUTDIR/<phase>.log; the train phase writes OUTDIR/train.json (one object
# per run) and OUTDIR/summary.txt. Exit status: 0 when every phase that ran passed.
#
# Missing build dependencies (pkg-config, jansson, liburing) can be supplied as Debian packages:
# TIO_DEPS_DEBS=DIR extracts every DIR/*.deb under /tmp/tio-deps and points pkg-config there.
# TIO_GPU_PRESET (default large), TIO_GPU_BATCH (8), TIO_GPU_SEQ (512), TIO_GPU_STEPS (8) size
# the training runs; TIO_GPU_SSD (default /tmp/tio-gpu-ssd) is the SSD directory.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${1:-${OUT:-/tmp/tio-gpu-out}}
PHASES=${2:-env train}
BUILD=${TIO_GPU_BUILD:-/tmp/tio-gpu-build}
SSD=${TIO_GPU_SSD:-/tmp/tio-gpu-ssd}
PRESET=${TIO_GPU_PRESET:-1b}
BATCH=${TIO_GPU_BATCH:-2}
SEQ=${TIO_GPU_SEQ:-2048}
STEPS=${TIO_GPU_STEPS:-6}
CAP=${TIO_GPU_CAP:-24GiB}               # (c): the device memory of the "too small" GPU
CAP_BUDGET=${TIO_GPU_CAP_BUDGET:-14GiB} # (c): teraio's budget in it (the rest: what teraio
                                        # does not manage, allocator slack, workspaces)
HOST=${TIO_GPU_HOST:-32GiB}             # pinned host tier
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR" "$SSD"
failed=()

note() { printf '%s\n' "$*" | tee -a "$OUTDIR/summary.txt"; }
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
run_phase() { # name, function
    local name=$1
    shift
    local t0=$SECONDS
    echo "=== $name ($(date -u +%H:%M:%S))"
    if "$@" >"$OUTDIR/$name.log" 2>&1; then
        note "phase $name: ok ($((SECONDS - t0)) s)"
    else
        note "phase $name: FAILED ($((SECONDS - t0)) s), see $name.log"
        tail -n 40 "$OUTDIR/$name.log"
        failed+=("$name")
    fi
}

setup_deps() {
    if [ -n "${TIO_DEPS_DEBS:-}" ] && ! { command -v pkg-config >/dev/null &&
        pkg-config --exists jansson; }; then
        mkdir -p /tmp/tio-deps
        for f in "$TIO_DEPS_DEBS"/*.deb; do dpkg-deb -x "$f" /tmp/tio-deps; done
        export PATH=/tmp/tio-deps/usr/bin:$PATH
        export LD_LIBRARY_PATH=/tmp/tio-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export PKG_CONFIG=/tmp/tio-deps/usr/bin/pkgconf
        export PKG_CONFIG_PATH=/tmp/tio-deps/usr/lib/x86_64-linux-gnu/pkgconfig
        sed -i -E 's#^(prefix|exec_prefix|libdir|includedir)=/usr#\1=/tmp/tio-deps/usr#' \
            "$PKG_CONFIG_PATH"/*.pc
    fi
    # the CUDA runtime and cuFile that PyTorch brings, for the C tests and the CLI
    local d
    for d in $("$PY" - <<'EOF' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
seen = []
for r in roots:
    for pat in ("nvidia/*/lib", "nvidia/*/*/lib", ""):
        for d in glob.glob(os.path.join(r, pat)):
            if glob.glob(os.path.join(d, "libcudart.so*")) or glob.glob(os.path.join(d, "libcufile.so*")):
                if d not in seen:
                    seen.append(d)
print(" ".join(seen))
EOF
    ); do
        export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
    done
}

phase_env() {
    set -x
    date -u
    uname -a
    nvidia-smi || true
    nvidia-smi -q | grep -iE "product name|driver version|cuda version|bus id" || true
    "$PY" -c 'import torch, sys; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")'
    cc --version | head -1 || true
    cmake --version | head -1 || true
    command -v ninja pkg-config fio || true
    pkg-config --modversion jansson liburing || true
    "$PY" -c 'import sysconfig, os; i = sysconfig.get_paths()["include"]; print("Python.h", i, os.path.exists(os.path.join(i, "Python.h")))'
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    lsblk -d -o NAME,ROTA,TRAN,SIZE,MODEL || true
    df -h /tmp "$SSD" || true
    findmnt -T "$SSD" || true
    cat /sys/block/*/queue/max_segments 2>/dev/null | head -3 || true
    ls -l /dev/nvidia* 2>/dev/null | head -20 || true
    cat /proc/driver/nvidia-fs/stats 2>/dev/null || echo "no nvidia-fs (GPUDirect Storage kernel module) loaded"
    lsmod 2>/dev/null | grep -iE "nvidia|nvme" || true
    ls /etc/cufile.json 2>/dev/null && grep -iE '"allow_compat_mode"|"use_poll_mode"' /etc/cufile.json || true
    nproc
    free -g
    set +x
}

phase_build() {
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIO_WERROR=ON \
        -DTIO_BUILD_PYTHON=OFF &&
        cmake --build "$BUILD" -j "$(nproc)"
}

phase_ctest() {
    (cd "$BUILD" && ctest --output-on-failure -j "$(nproc)" --timeout 120) || return 1
    # the conformance suite names every backend it ran or skipped
    (cd "$BUILD" && ctest -R "conformance|cufile|probe" -V --timeout 300 |
        grep -iE "backend|skip|cuda|cufile|device" | head -80)
}

phase_io() {
    local t=$BUILD/teraio dir=$SSD/bench rc=0
    mkdir -p "$dir"
    "$t" probe || rc=1
    local be rw
    for be in cuda cufile; do
        for rw in write read; do
            "$t" bench-io --dir "$dir" --backend "$be" --device-mem --rw "$rw" --size 2GiB \
                --block 16MiB --depth 8 --verify --json || rc=1
            "$t" bench-io --dir "$dir" --backend "$be" --device-mem --rw "$rw" --size 2GiB \
                --block 16MiB --depth 8 --json || rc=1
        done
    done
    for rw in write read; do # the host-memory anchor on the same disk
        "$t" bench-io --dir "$dir" --backend uring --rw "$rw" --size 2GiB --block 16MiB \
            --depth 8 --json || rc=1
    done
    if command -v fio >/dev/null; then
        fio --name=anchor --directory="$dir" --size=2G --bs=16M --iodepth=8 --rw=read \
            --ioengine=io_uring --direct=1 --output-format=terse | cut -d';' -f1-8 || true
    fi
    return $rc
}

# One training run per line: NAME ARGS... (train_llama_tiny.py options). A run without --budget
# that completes is the baseline of the later runs with the same --preset (the first such run).
# A run with --gpu-memory-cap may run out of device memory: that is its result, not a failure.
DEFAULT_RUNS="plain --preset $PRESET
a_host --preset $PRESET --budget 0.5 --host-memory $HOST
b_ssd --preset $PRESET --budget 0.5 --ssd-dir $SSD/run --steps 4
c_plain_capped --preset $PRESET --gpu-memory-cap $CAP --steps 3
c_teraio_capped --preset $PRESET --gpu-memory-cap $CAP --budget $CAP_BUDGET --host-memory $HOST --ssd-dir $SSD/run --steps 5"

phase_train() {
    "$PY" -m pip install -q --no-build-isolation --no-deps "$ROOT" || return 1
    local j=$OUTDIR/train.json ex=$ROOT/examples/train_llama_tiny.py
    : >"$j"
    local common=(--device cuda --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" --steady-after 3
        --json)
    # the same allocator settings for every run: fewer fragments when teraio frees and
    # re-allocates tensors of many sizes
    export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
    local name args out rc
    while read -r name args; do
        [ -n "$name" ] || continue
        echo "--- $name: $args ($(date -u +%H:%M:%S))"
        rm -rf "${SSD:?}/run" && mkdir -p "$SSD/run"
        # shellcheck disable=SC2086 # args are split on purpose (a later --steps wins)
        out=$("$PY" "$ex" "${common[@]}" $args 2>"$OUTDIR/train-$name.err")
        rc=$?
        if [ "$rc" -eq 0 ] || { [ "$rc" -eq 3 ] && [ "${out#\{}" != "$out" ]; }; then
            printf '{"run": "%s", "args": "%s", "result": %s}\n' "$name" "$args" "$out" >>"$j"
        else
            echo "run $name failed (exit $rc):"
            tail -20 "$OUTDIR/train-$name.err"
            printf '{"run": "%s", "args": "%s", "result": null}\n' "$name" "$args" >>"$j"
        fi
        echo "    $name done after $SECONDS s of the script"
        summarize "$j" >"$OUTDIR/train-summary.txt" 2>&1
    done <<<"${TIO_GPU_RUNS:-$DEFAULT_RUNS}"
    cat "$OUTDIR/train-summary.txt"
    summarize "$j" >/dev/null 2>&1
}

# CPU training throughput on this machine (bench/torch_bench.py; TIO_GPU_CPU_BENCH overrides
# its arguments): the same benchmark as docs/bench/torch.md, on a machine with more cores.
phase_cpu() {
    "$PY" -c "import teraio._core" 2>/dev/null ||
        "$PY" -m pip install -q --no-build-isolation --no-deps "$ROOT" || return 1
    # shellcheck disable=SC2086 # split on purpose
    "$PY" "$ROOT/bench/torch_bench.py" ${TIO_GPU_CPU_BENCH:---preset medium --threads 1 --steps 10 --rounds 3 --seq 512 --skip-micro --modes plain,teraio} --ssd-dir "$SSD/cpu"
}

summarize() {
    "$PY" "$ROOT/scripts/gpu_train_summary.py" "$1"
}

# TorchTitan through teraio.titan. Results go to fd 3 (the script's stdout) and summary.txt as
# they come, the rest to titan.log. One run per line: NAME TorchTitan/teraio options.
TITAN_RUNS="plain --teraio.no-enable
host --teraio.memory_budget 0.5 --teraio.host_memory 4GiB
ssd --teraio.memory_budget 0.5 --teraio.ssd_dirs $SSD/titan"

phase_titan() {
    say() { printf '%s\n' "$*" | tee -a "$OUTDIR/summary.txt" >&3; }
    "$PY" -c "import teraio._core" 2>/dev/null ||
        "$PY" -m pip install -q --no-build-isolation --no-deps "$ROOT" || return 1
    if ! "$PY" -c "import torchtitan.trainer" 2>/dev/null; then
        if [ -n "${TIO_TITAN_WHEELS:-}" ]; then
            "$PY" -m pip install -q --no-index --no-deps "$TIO_TITAN_WHEELS"/*.whl || return 1
        else # torch stays the installed one: pinned in the same pip run
            local tv
            tv=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])') || return 1
            "$PY" -m pip install -q --no-deps torchtitan==0.3.0 &&
                "$PY" -m pip install -q "torch==$tv" tyro spmd_types==0.2.3 torchdata \
                    tensorboard einops torch_checkpointing "datasets<4.8" || return 1
        fi
    fi
    "$PY" -c "import torchtitan.trainer" || { say "titan: torchtitan does not import"; return 1; }
    local d=$OUTDIR/titan steps=${TIO_TITAN_STEPS:-10} name args rc=0 t0
    rm -rf "$d" "${SSD:?}/titan" && mkdir -p "$d" "$SSD/titan"
    while read -r name args; do
        [ -n "$name" ] || continue
        echo "--- titan $name: $args ($(date -u +%H:%M:%S))"
        t0=$SECONDS
        # shellcheck disable=SC2086 # split on purpose
        if "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 -m torchtitan.train \
            --module teraio.titan --config llama3_debugmodel --training.steps "$steps" \
            --debug.seed 42 --debug.deterministic --dump_folder "$d/$name" \
            --teraio.report "$d/$name/rank{rank}.json" $args ${TIO_TITAN_ARGS:-} </dev/null; then
            say "titan $name: ran in $((SECONDS - t0)) s"
            if [ "$name" != plain ]; then
                "$PY" -m teraio.report "$d/$name"/rank*.json | sed 's/^/    /' |
                    tee -a "$OUTDIR/summary.txt" >&3
            fi
        else
            say "titan $name: FAILED after $((SECONDS - t0)) s (see titan.log)"
            rc=1
        fi
    done <<<"$TITAN_RUNS"
    "$PY" "$ROOT/scripts/gpu_titan_summary.py" "$d" | tee -a "$OUTDIR/summary.txt" >&3
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    return $rc
}

setup_deps
has env && run_phase env phase_env
has build && run_phase build phase_build
has ctest && run_phase ctest phase_ctest
has io && run_phase io phase_io
has train && run_phase train phase_train
has cpu && run_phase cpu phase_cpu
has titan && { exec 3>&1; run_phase titan phase_titan; }
[ -f "$OUTDIR/train-summary.txt" ] && tee -a "$OUTDIR/summary.txt" <"$OUTDIR/train-summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed phases: ${failed[*]}"
    exit 1
fi
echo "all phases passed"
