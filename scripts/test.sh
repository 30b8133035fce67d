#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run every test: lint, CTest on a normal and an ASan+UBSan build,
# the fuzzers for a bounded time, and pytest (the TorchTitan files in .venv-titan, made by
# scripts/setup_titan.sh). Each runner prints its own summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
# TIO_WERROR=ON: setup.sh configures build/ as the CTest step below does, so build/ is compiled
# once (a changed flag would rebuild every object)
TIO_WERROR=ON TIO_SETUP_TORCH=${TIO_SETUP_TORCH:-1} bash scripts/setup.sh
. .venv/bin/activate
jobs=$(nproc)
# each step prints the minutes:seconds since the start, so a slow run shows where time went
step() { printf '\n\033[1m==> %s\033[0m [%d:%02d]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

step "format check (clang-format 14)"
git ls-files '*.c' '*.h' | grep -v '^tests/data/' | xargs clang-format --dry-run --Werror
echo "clang-format: clean"

step "CTest: RelWithDebInfo build (-Werror)"
cmake -S . -B build -G Ninja -DTIO_WERROR=ON >/dev/null
cmake --build build --parallel "$jobs"
(cd build && ctest --output-on-failure -j "$jobs")

step "clang-tidy (.clang-tidy; a warning of the configured checks fails the run, scripts/tidy.sh)"
TIO_TIDY_JOBS="$jobs" bash scripts/tidy.sh build

step "CTest: ASan+UBSan build"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTIO_SANITIZE="address;undefined" \
      -DTIO_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan --parallel "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -LE "slow|install")

step "CTest: ThreadSanitizer build (clang), the io and threads labels (engine, block cache)"
CC=clang cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTIO_SANITIZE=thread -DTIO_WERROR=ON \
      -DTIO_BUILD_BENCH=OFF >/dev/null
cmake --build build-tsan --parallel "$jobs"
# threads: the block cache, shared by PyTorch's allocating threads (teraio._torch_alloc)
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j "$jobs" \
     -L '^(io|threads)$' --no-tests=ignore)

if ls tests/fuzz/fuzz_*.c >/dev/null 2>&1; then
    step "fuzzing (libFuzzer, ${TIO_FUZZ_SECONDS:-15} s per target)"
    CC=clang cmake -S . -B build-fuzz -G Ninja -DTIO_BUILD_FUZZERS=ON -DTIO_BUILD_TESTS=OFF \
          -DTIO_BUILD_CLI=OFF -DTIO_BUILD_BENCH=OFF >/dev/null
    cmake --build build-fuzz --parallel "$jobs"
    fuzz_one() {  # $1: a fuzzer; prints its stats, or its log's tail and fails on a finding
        local f=$1 name corpus work rc=0
        name=$(basename "$f")
        corpus=tests/fuzz/corpus/${name#fuzz_}
        work=$(mktemp -d)
        cp -r "$corpus"/. "$work"/ 2>/dev/null || true
        "$f" -max_total_time="${TIO_FUZZ_SECONDS:-15}" -max_len=65536 -rss_limit_mb=2048 \
             -timeout=10 -artifact_prefix="$work/" -print_final_stats=1 "$work" \
             >"$work.log" 2>&1 || rc=$?
        if [ "$rc" -ne 0 ]; then  # one printf: the fuzzers beside it print too
            printf '%s\n' "fuzzer $name found a problem (exit $rc):" "$(tail -40 "$work.log")"
            return 1
        fi
        echo "fuzzed $name: $(grep -E "stat::number_of_executed_units" "$work.log" || true)"
        rm -rf "$work" "$work.log"
    }
    # one fuzzer per core at a time: each is single-threaded and runs for a fixed time
    pids=() fuzz_failed=0
    for f in build-fuzz/fuzz_*; do
        fuzz_one "$f" &
        pids+=($!)
        if [ ${#pids[@]} -ge "$jobs" ]; then
            wait "${pids[0]}" || fuzz_failed=1
            pids=("${pids[@]:1}")
        fi
    done
    for p in "${pids[@]}"; do wait "$p" || fuzz_failed=1; done
    [ "$fuzz_failed" -eq 0 ] || exit 1
    echo "fuzzers: no findings"
fi

step "pytest"
# the TorchTitan files run in the next step, in their own venv. One worker per core (pytest-xdist),
# each taking whole files (a file's tests share its module fixtures)
python -m pytest -q -n "$jobs" --dist loadfile tests/python --ignore=tests/python/test_titan.py \
    --ignore=tests/python/test_titan_pp.py --durations=12

step "pytest: TorchTitan in .venv-titan (scripts/setup_titan.sh; torchtitan and triton stay out of .venv)"
bash scripts/setup_titan.sh
log=$(mktemp)
TIO_TITAN_REQUIRED=1 .venv-titan/bin/python -m pytest -q tests/python/test_titan.py \
    tests/python/test_titan_pp.py 2>&1 | tee "$log"
# TIO_TITAN_REQUIRED=1 turns a missing torchtitan into a failure; a skip of any other cause
# would not show it either, so none is allowed here
if tail -n 1 "$log" | grep -q "skipped"; then
    echo "TorchTitan tests: a test was skipped in .venv-titan, where all must run"; exit 1
fi
rm -f "$log"

step "packaging: python -m build and pip install . (build isolation) in fresh venvs"
bash scripts/check_package.sh
step "all tests passed"
