#!/usr/bin/env bash
# Validate teraio's GPU path on a machine with an NVIDIA GPU (CUDA driver, PyTorch with CUDA).
#
#   bash scripts/gpu_validate.sh [OUTDIR] [PHASES]
#
# On a lent GPU machine of this workplace (nothing can be downloaded there, a lease is 15
# minutes in all, machine start included, one command at most 10): first, here,
#   bash scripts/gpu_prepare.sh        # Debian packages and a build-tool wheel, into .gpu-carry/
# then call the device tool's `run` with carry [".gpu-carry"], timeout_s 540 and the command
#   TIO_GPU_CARRY=.gpu-carry bash scripts/gpu_validate.sh /tmp/tio-out; rc=$?; cp /tmp/tio-out/summary.txt /tmp/tio-out/train.json $OUT/; tar -czf $OUT/logs.tgz -C /tmp/tio-out .; exit $rc
# (at most 8 files come back from $OUT: the logs travel as one archive). The default phases
# ("env install train") end within TIO_GPU_DEADLINE_S (default 450 s, so 8 minutes with the
# last table), whatever happens: every phase and every training run runs under its own
# `timeout`, cut to the time left. summary.txt (the phases with their times, then the training
# tables) is rewritten after each phase and each run, so a run cut off still leaves a table,
# and each run's rows are printed as it completes; the whole summary is printed last.
#
# Sizing (the default runs, TIO_GPU_SET=xl; docs/bench/gpu.md has the table): the one recorded
# GPU run (docs/bench/gpu.md, an H100, the synchronous design, slower than today's) measured
# the `xl` preset (0.42B parameters, batch 4 x 1024 tokens): plain step 241 ms, steady
# max_memory_allocated 9933 MiB; at a 50% budget 7.8 GB moved each way per step, 834 ms per
# step over the pinned host tier and 5944 ms over the SSD tier (the VM's disk, ~2 GB/s). The
# five runs below take, by those numbers, 6 x 0.24 s (plain), 2 x 0.24 + 4 x 0.83 s (host),
# 5 x 5.9 s (SSD), under 1 s to run out of 7 GiB (plain capped), 5 x 5.9 s (capped, both
# tiers, at most the SSD's rate): about 66 s of steps. Each process's start (import, model
# initialisation on the CPU, final parameter digest: 2.5 + 8.2 + 2.7 s of CPU for xl on one
# core of the development machine, plus the CUDA context) adds ~15 s per run, env ~15 s, and
# the install phase's build from nothing took 193 s in the rehearsal on 2 busy cores (the GPU
# machine has 16): about 6 minutes at the most, 3-4 with a 16-core build. The two runs of (d)
# come last (the `medium` preset, 4 steps and one checkpoint of ~0.3 GB each: mostly the
# process's start, ~15 s each, unmeasured on a GPU). Each run's own limit (after the ':' in its
# name) is 3-4x its estimate, and the deadline holds regardless.
# TIO_GPU_SET=1b trains the 1.1B-parameter preset at sequence 2048 instead (plain, host, SSD):
# never run on a GPU; an estimated ~25 GB moved each way per step puts its SSD run past its
# limit.
#
# The questions, in one table (summary.txt):
#   (a) a_host: 50% of the model's memory on the pinned host tier, against plain PyTorch:
#       bitwise-equal losses and final parameters, steady max_memory_allocated, step time;
#   (b) b_ssd: the same with the SSD tier;
#   (c) c_*: the same model on a GPU made too small for its plain step (--gpu-memory-cap; the
#       plain run must run out of memory), trained with the host and SSD tiers, its step time
#       beside the simulator's prediction for the profiled trace (Offloader.predicted_step_s).
# A second table gives each teraio run's counters from Offloader.report() per offloaded step:
# stalls by reason (demand offloads against waits for prefetches and memory pressure), the
# training thread's time issuing I/O, demand offloads, urgent reads, deferred prefetches,
# kernels that ran over the budget.
#   (d) s_*: a checkpoint between steps (--save-after 3, the `medium` preset: seconds): the
#       file Offloader.save() writes with half the model's memory offloaded to the pinned host
#       tier (the offloaded tensors read from there, none brought back to the GPU), against
#       torch.save's in the plain run, byte for byte (sha256), in a third table.
#
# TIO_GPU_REHEARSE=1 rehearses the whole script on this machine's CPU: the same phases,
# deadlines, timeouts, tables and parsing, with the `tiny` preset on the CPU and a 240 s
# deadline (tests/python/test_gpu_scripts.py runs it; docs/bench/gpu.md has its phase times).
#
# PHASES (default "env install train"; "build", "ctest", "io", "cpu" and "titan" are extra):
#   env      the machine: GPU, driver, disks, GPUDirect Storage (nvidia-fs), compilers
#   install  builds and installs the Python package (libteraio and teraio._core) into
#            $TIO_GPU_WORK/site, first on PYTHONPATH for the later phases
#   train    trains examples/train_llama_tiny.py on the GPU, one run per line of the set
#            (TIO_GPU_RUNS, one "NAME[:LIMIT_S] ARGS..." per line, replaces it): compares
#            losses and final parameters bit for bit with the plain run, reports
#            torch.cuda.max_memory_allocated() of the steady steps, the step time and teraio's
#            counters (scripts/gpu_train_summary.py)
#   build    libteraio and the CLI (CMake, Release) in $TIO_GPU_WORK/build
#   ctest    the C test suite (the cuda and cufile conformance tests run against the fakes)
#   io       teraio probe, then bench-io moving device memory (cudaMalloc) to and from the SSD
#            with the cuda and cufile backends, host memory with uring as the anchor
#   cpu      bench/torch_bench.py on this machine's CPU: plain against teraio at 50% of the peak
#   titan    TorchTitan's Llama 3 debug model trained by TorchTitan's own launcher and trainer
#            through teraio.titan (about 3 minutes on an H100): plain, then at 50% of the peak
#            with the pinned host tier and with the SSD tier, compared bit for bit
#            (scripts/gpu_titan_summary.py). Needs torchtitan and what it imports: from PyPI
#            where missing, or TIO_TITAN_WHEELS=DIR (pip download elsewhere). TIO_TITAN_STEPS
#            (10) and TIO_TITAN_ARGS (more TorchTitan or --teraio.* options) size it.
# The extras fit no lease together with the default phases: run them in a call of their own,
# e.g. PHASES="install build ctest io" with TIO_GPU_DEADLINE_S=540.
#
# Every phase writes OUTDIR/<phase>.log; train writes OUTDIR/train.json (one object per run,
# with its wall time and whether it was cut off), train-<run>.err, train-summary.txt and
# summary.txt. Exit status: 0 when every phase that ran passed (a run cut off by its limit
# fails its phase).
#
# TIO_GPU_CARRY=DIR: what scripts/gpu_prepare.sh gathered. DIR/debs/*.deb (pkg-config, jansson,
# liburing) are extracted under $TIO_GPU_WORK/deps where the machine lacks them
# (TIO_GPU_FORCE_DEBS=1: always, to rehearse it), and DIR/wheels/*.whl (scikit-build-core)
# installed under $TIO_GPU_WORK/tools where the Python lacks them. TIO_DEPS_DEBS=DIR still
# names a folder of .deb files alone. TIO_GPU_WORK (default /tmp/tio-gpu) holds the build,
# TIO_GPU_SSD (default $TIO_GPU_WORK/ssd) is the SSD directory.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${1:-${OUT:-/tmp/tio-gpu-out}}
PHASES=${2:-env install train}
REHEARSE=${TIO_GPU_REHEARSE:-0}
WORK=${TIO_GPU_WORK:-/tmp/tio-gpu}
SSD=${TIO_GPU_SSD:-$WORK/ssd}
PY=${PYTHON:-python3}
if [ "$REHEARSE" = 1 ]; then
    DEADLINE=${TIO_GPU_DEADLINE_S:-240}
    # tiny models: one thread each, which a busy machine of two cores serves best
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
    DEADLINE=${TIO_GPU_DEADLINE_S:-450}
fi
RESERVE=10 # seconds kept back at the end for the last table
mkdir -p "$OUTDIR" "$SSD" "$WORK" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
PHASES_FILE=$OUTDIR/phases.txt
failed=()
# the clock the deadline counts from, started by the script and shared by its phases' children
[ "${3:-}" = __phase ] || TIO_GPU_START=$(date +%s)
export TIO_GPU_START

elapsed() { echo $(($(date +%s) - TIO_GPU_START)); }
left() { echo $((DEADLINE - $(elapsed) - RESERVE)); }
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

# summary.txt: what ran where, each phase with its time, the training tables so far. Rewritten
# whole (into a temporary file, then renamed) after every phase and every run.
write_summary() {
    {
        local where="on the GPU"
        [ "$REHEARSE" = 1 ] && where="REHEARSAL on the CPU"
        echo "gpu_validate.sh $where, deadline ${DEADLINE} s, $(elapsed) s so far"
        cat "$PHASES_FILE"
        if [ -s "$OUTDIR/train-summary.txt" ]; then
            echo
            cat "$OUTDIR/train-summary.txt"
        fi
    } >"$OUTDIR/summary.txt.tmp" && mv -f "$OUTDIR/summary.txt.tmp" "$OUTDIR/summary.txt"
}

setup_deps() {
    local debs=${TIO_DEPS_DEBS:-}
    [ -z "$debs" ] && [ -n "${TIO_GPU_CARRY:-}" ] && debs=$TIO_GPU_CARRY/debs
    if [ -n "$debs" ] && { [ "${TIO_GPU_FORCE_DEBS:-0}" = 1 ] ||
        ! { command -v pkg-config >/dev/null && pkg-config --exists jansson liburing; }; }; then
        local d=$WORK/deps f
        if [ ! -f "$d/.done" ]; then
            rm -rf "$d" && mkdir -p "$d" || return 1
            for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$d" || return 1; done
            sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\\1=$d/usr#" \
                "$d"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc || return 1
            touch "$d/.done"
        fi
        export PATH=$d/usr/bin:$PATH
        export LD_LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
        export PKG_CONFIG=$d/usr/bin/pkgconf
        export PKG_CONFIG_PATH=$d/usr/lib/x86_64-linux-gnu/pkgconfig
        echo "build dependencies from $debs (extracted in $d)"
    fi
    # the build backend, where the Python lacks it (the wheel gpu_prepare.sh fetched)
    if [ -n "${TIO_GPU_CARRY:-}" ] && ls "$TIO_GPU_CARRY"/wheels/*.whl >/dev/null 2>&1; then
        if ! "$PY" -c "import scikit_build_core" 2>/dev/null; then
            if [ ! -d "$WORK/tools" ]; then
                "$PY" -m pip install -q --no-index --no-deps --target "$WORK/tools" \
                    "$TIO_GPU_CARRY"/wheels/*.whl || return 1
            fi
            export PYTHONPATH=$WORK/tools${PYTHONPATH:+:$PYTHONPATH}
            echo "scikit-build-core from $TIO_GPU_CARRY/wheels"
        fi
    fi
    # the package the install phase builds (it comes first; later phases import it)
    export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
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

say_phase() { echo "$*" | tee -a "$PHASES_FILE"; }

# A phase runs as `bash THIS_SCRIPT __phase NAME` under `timeout`, cut to the time left.
run_phase() { # name
    local name=$1 t0=$SECONDS limit rc
    limit=$(left)
    if [ "$limit" -lt 5 ]; then
        say_phase "phase $name: SKIPPED (no time left before the ${DEADLINE} s deadline)"
        failed+=("$name")
        write_summary
        return
    fi
    echo "=== $name ($(date -u +%H:%M:%S), limit ${limit} s)"
    # the phase's log to OUTDIR/NAME.log, what it reports as it goes (fd 3) to the console
    TIO_GPU_PHASE_END=$(($(elapsed) + limit)) timeout -k 5 "$limit" \
        bash "$0" "$OUTDIR" "$PHASES" __phase "$name" 3>&1 >"$OUTDIR/$name.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then
        say_phase "phase $name: ok ($((SECONDS - t0)) s)"
    else
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            say_phase "phase $name: CUT OFF at its limit of ${limit} s, see $name.log"
        else
            say_phase "phase $name: FAILED ($((SECONDS - t0)) s, exit $rc), see $name.log"
        fi
        tail -n 30 "$OUTDIR/$name.log"
        failed+=("$name")
    fi
    write_summary
}

phase_env() {
    set -x
    date -u
    uname -a
    nvidia-smi || true
    nvidia-smi -q | grep -iE "product name|driver version|cuda version|bus id" || true
    "$PY" -c 'import torch, sys; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")'
    "$PY" -c 'import scikit_build_core, numpy; print("scikit-build-core", scikit_build_core.__version__, "numpy", numpy.__version__)' || true
    cc --version | head -1 || true
    cmake --version | head -1 || true
    command -v ninja pkg-config fio || true
    pkg-config --modversion jansson liburing || true
    "$PY" -c 'import sysconfig, os; i = sysconfig.get_paths()["include"]; print("Python.h", i, os.path.exists(os.path.join(i, "Python.h")))'
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    lsblk -d -o NAME,ROTA,TRAN,SIZE,MODEL || true
    df -h /tmp "$SSD" || true
    findmnt -T "$SSD" || true
    cat /proc/driver/nvidia-fs/stats 2>/dev/null || echo "no nvidia-fs (GPUDirect Storage kernel module) loaded"
    ls /etc/cufile.json 2>/dev/null && grep -iE '"allow_compat_mode"|"use_poll_mode"' /etc/cufile.json || true
    nproc
    free -g
    set +x
}

phase_install() {
    rm -rf "$WORK/site"
    "$PY" -m pip install -q --no-build-isolation --no-deps --no-compile --target "$WORK/site" \
        "$ROOT" || return 1
    # the package just built, not one installed before
    "$PY" -c 'import teraio, teraio._core, sys; print("teraio from", teraio.__file__); sys.exit(not teraio.__file__.startswith(sys.argv[1]))' "$WORK/site"
}

phase_build() {
    cmake -S "$ROOT" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIO_WERROR=ON \
        -DTIO_BUILD_PYTHON=OFF &&
        cmake --build "$WORK/build" -j "$(nproc)"
}

phase_ctest() {
    (cd "$WORK/build" && ctest --output-on-failure -j "$(nproc)" --timeout 120) || return 1
    # the conformance suite names every backend it ran or skipped
    (cd "$WORK/build" && ctest -R "conformance|cufile|probe" -V --timeout 300 |
        grep -iE "backend|skip|cuda|cufile|device" | head -80)
}

phase_io() {
    local t=$WORK/build/teraio dir=$SSD/bench rc=0
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

need_teraio() { # the phases that train import the package the install phase built
    "$PY" -c "import teraio._core" || {
        echo "teraio does not import: run the install phase first (or install the package)"
        return 1
    }
}

# The training sets: one run per line, "NAME[:LIMIT_S] ARGS..." (train_llama_tiny.py options
# after the common ones; a later --steps wins). A run without --budget that completes is the
# baseline of the later runs with the same --preset (the first such run). A run with
# --gpu-memory-cap and no --budget must run out of device memory: that is its result.
# TIO_GPU_HOST (the pinned host tier), TIO_GPU_CAP (the "too small" GPU) and TIO_GPU_CAP_BUDGET
# (teraio's budget in it) override the sizes.
train_set() {
    local s=$SSD/run
    if [ "$REHEARSE" = 1 ]; then # the CPU cannot be capped: no plain capped run there
        cat <<EOF
plain:60 --preset tiny --save-after 3
a_host:60 --preset tiny --budget 0.5 --host-memory 64MiB --save-after 3
b_ssd:60 --preset tiny --budget 0.5 --ssd-dir $s --steps 5
c_teraio:60 --preset tiny --budget 4MiB --host-memory 1MiB --ssd-dir $s --steps 5
EOF
        return
    fi
    case ${TIO_GPU_SET:-xl} in
    xl) # docs/bench/gpu.md: 241 ms plain, 834 ms host, 5944 ms SSD per step on an H100
        local host=${TIO_GPU_HOST:-8GiB} cap=${TIO_GPU_CAP:-7GiB} budget=${TIO_GPU_CAP_BUDGET:-4608MiB}
        cat <<EOF
plain:60 --preset xl
a_host:90 --preset xl --budget 0.5 --host-memory $host
b_ssd:150 --preset xl --budget 0.5 --ssd-dir $s --steps 5
c_plain_capped:60 --preset xl --gpu-memory-cap $cap --steps 3
c_teraio_capped:150 --preset xl --gpu-memory-cap $cap --budget $budget --host-memory 2GiB --ssd-dir $s --steps 5
s_plain:45 --preset medium --steps 4 --save-after 3
s_host:60 --preset medium --steps 4 --budget 0.5 --host-memory 1GiB --save-after 3
EOF
        ;;
    1b) # unmeasured on a GPU: estimated ~50 GB peak at sequence 2048
        cat <<EOF
plain:120 --preset 1b --batch 2 --seq 2048
a_host:150 --preset 1b --batch 2 --seq 2048 --budget 0.5 --host-memory ${TIO_GPU_HOST:-32GiB}
b_ssd:150 --preset 1b --batch 2 --seq 2048 --budget 0.5 --ssd-dir $s --steps 5
EOF
        ;;
    *)
        echo "TIO_GPU_SET=${TIO_GPU_SET}: unknown (xl or 1b)" >&2
        return 1
        ;;
    esac
}

phase_train() {
    local j=$OUTDIR/train.json ex=$ROOT/examples/train_llama_tiny.py runs
    need_teraio || return 1
    runs=$(train_set) || return 1
    [ -n "${TIO_GPU_RUNS:-}" ] && runs=$TIO_GPU_RUNS
    : >"$j"
    rm -f "$OUTDIR/train-summary.txt"
    local common=(--batch 4 --seq 1024 --steps 6 --steady-after 3 --json)
    if [ "$REHEARSE" = 1 ]; then
        common=(--device cpu --batch 2 --seq 32 --steps 6 --steady-after 3 --json
            --min-tensor-bytes 4KiB)
    else
        common=(--device cuda "${common[@]}")
    fi
    # the same allocator settings for every run: fewer fragments when teraio frees and
    # re-allocates tensors of many sizes
    export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
    local end=${TIO_GPU_PHASE_END:-$DEADLINE} head name cap args out rc t0 \
        limit wall cut bad=0
    while read -r head args; do
        [ -n "$head" ] || continue
        name=${head%%:*}
        cap=${TIO_GPU_RUN_LIMIT_S:-120}
        [ "$name" != "$head" ] && cap=${head#*:}
        limit=$((end - $(elapsed) - 5))
        if [ "$limit" -lt 5 ]; then
            echo "--- $name: SKIPPED, no time left" | tee /dev/fd/3
            printf '{"run": "%s", "args": "%s", "result": null, "skipped": true}\n' \
                "$name" "$args" >>"$j"
            bad=1
            continue
        fi
        [ "$limit" -gt "$cap" ] && limit=$cap
        echo "--- $name: $args (limit ${limit} s, $(date -u +%H:%M:%S))"
        rm -rf "${SSD:?}/run" && mkdir -p "$SSD/run"
        t0=$SECONDS
        # shellcheck disable=SC2086 # args are split on purpose
        out=$(timeout -k 5 "$limit" "$PY" "$ex" "${common[@]}" $args \
            2>"$OUTDIR/train-$name.err")
        rc=$?
        wall=$((SECONDS - t0))
        cut=false
        { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && cut=true
        if [ "$rc" -eq 0 ] || { [ "$rc" -eq 3 ] && [ "${out#\{}" != "$out" ]; }; then
            printf '{"run": "%s", "args": "%s", "wall_s": %d, "limit_s": %d, "result": %s}\n' \
                "$name" "$args" "$wall" "$limit" "$out" >>"$j"
        else
            echo "run $name failed (exit $rc$($cut && echo ", cut off at ${limit} s")):"
            tail -20 "$OUTDIR/train-$name.err"
            printf '{"run": "%s", "args": "%s", "wall_s": %d, "limit_s": %d, "timed_out": %s, %s}\n' \
                "$name" "$args" "$wall" "$limit" "$cut" '"result": null' >>"$j"
        fi
        summarize "$j" >"$OUTDIR/train-summary.txt" 2>&1 || bad=1
        write_summary
        # this run's rows, as they come
        grep -E "^\| $name \|" "$OUTDIR/train-summary.txt" | sed "s/^/[${wall} s] /" >&3
    done <<<"$runs"
    cat "$OUTDIR/train-summary.txt"
    summarize "$j" >/dev/null 2>&1 || bad=1
    return $bad
}

# CPU training throughput on this machine (bench/torch_bench.py; TIO_GPU_CPU_BENCH overrides
# its arguments): the same benchmark as docs/bench/torch.md, on a machine with more cores.
phase_cpu() {
    need_teraio || return 1
    # shellcheck disable=SC2086 # split on purpose
    "$PY" "$ROOT/bench/torch_bench.py" ${TIO_GPU_CPU_BENCH:---preset medium --threads 1 --steps 10 --rounds 3 --seq 512 --skip-micro --modes plain,teraio} --ssd-dir "$SSD/cpu"
}

summarize() {
    "$PY" "$ROOT/scripts/gpu_train_summary.py" "$1"
}

# TorchTitan through teraio.titan. Results go to summary.txt as they come, the rest to
# titan.log. One run per line: NAME TorchTitan/teraio options.
TITAN_RUNS="plain --teraio.no-enable
host --teraio.memory_budget 0.5 --teraio.host_memory 4GiB
ssd --teraio.memory_budget 0.5 --teraio.ssd_dirs $SSD/titan"

phase_titan() {
    say() { printf '%s\n' "$*" | tee -a "$OUTDIR/titan-summary.txt" >&3; }
    need_teraio || return 1
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
                    tee -a "$OUTDIR/titan-summary.txt" >&3
            fi
        else
            say "titan $name: FAILED after $((SECONDS - t0)) s (see titan.log)"
            rc=1
        fi
    done <<<"$TITAN_RUNS"
    "$PY" "$ROOT/scripts/gpu_titan_summary.py" "$d" | tee -a "$OUTDIR/titan-summary.txt" >&3
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    return $rc
}

# ---- the entry of one phase (run_phase starts it under its timeout) ----------------------------
if [ "${3:-}" = __phase ]; then
    setup_deps || exit 1
    "phase_$4"
    exit $?
fi

for p in $PHASES; do
    case $p in
    env | install | train | build | ctest | io | cpu | titan) ;;
    *)
        echo "unknown phase '$p' (env install train build ctest io cpu titan)" >&2
        exit 2
        ;;
    esac
done
: >"$PHASES_FILE"
: >"$OUTDIR/titan-summary.txt"
rm -f "$OUTDIR/train-summary.txt"
write_summary
for p in env install build ctest io train cpu titan; do
    has "$p" && run_phase "$p"
done
[ -s "$OUTDIR/titan-summary.txt" ] && {
    echo
    cat "$OUTDIR/titan-summary.txt"
} >>"$OUTDIR/summary.txt"
echo
cat "$OUTDIR/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed phases: ${failed[*]}"
    exit 1
fi
echo "all phases passed"
