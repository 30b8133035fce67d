#!/usr/bin/env bash
# clang-tidy over src/, tools/, bench/ and teraio._core with the checks of .clang-tidy, on
# BUILD/compile_commands.json (default: build). Run by scripts/test.sh; runnable alone after a
# build.
#
# Two classes of file:
#  * strict (every .c file of src/, tools/, bench/ and python/teraio/_core not matched by tidy_lax
#    below): any warning of the configured checks fails the run (--warnings-as-errors='*'), in
#    the file and in the headers of include/ and src/ it pulls in;
#  * lax (tidy_lax): only the WarningsAsErrors classes of .clang-tidy fail the run; other
#    warnings are counted and left in BUILD/clang-tidy.log.
# To make a file strict once clang-tidy reports nothing in it, remove it from tidy_lax.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=${TIO_TIDY_JOBS:-$(nproc)}

tidy_lax='^$' # every file is strict; a file named here would be checked lax
tidy_skip='^$' # every file is checked; a file named here would not be

# bench/ is built (TIO_BUILD_BENCH, on by default) into the same compile_commands.json
files=$(git ls-files 'src/*.c' 'tools/*.c' 'bench/*.c' | grep -Ev "$tidy_skip" || true)
strict_files=$(echo "$files" | grep -Ev "$tidy_lax" || true)
lax_files=$(echo "$files" | grep -E "$tidy_lax" || true)

# Strict files: any diagnostic fails. The header filter keeps to headers of the project's own;
# a warning in a header counts against every strict file that includes it.
echo "$strict_files" | xargs -r -P "$jobs" -n 8 clang-tidy -p "$build" --quiet \
    --warnings-as-errors='*' >"$build/clang-tidy-strict.log" 2>&1 || true
if grep -E "(warning|error):" "$build/clang-tidy-strict.log"; then
    echo "clang-tidy: diagnostics above in files that must stay clean (scripts/tidy.sh)"
    exit 1
fi
echo "clang-tidy: $(echo "$strict_files" | grep -c . || true) files of src/, tools/ and bench/ clean"

echo "$lax_files" | xargs -r -P "$jobs" -n 8 clang-tidy -p "$build" --quiet \
    >"$build/clang-tidy.log" 2>&1 || true
if grep -E "error:" "$build/clang-tidy.log"; then
    echo "clang-tidy: errors above"
    exit 1
fi
echo "clang-tidy: no errors in the lax files" \
     "($(grep -c 'warning:' "$build/clang-tidy.log" || true) warnings in $build/clang-tidy.log)"

# teraio._core (built by pip), strict: its compile commands come from a configure-only build
# folder.
cmake -S . -B build-py -G Ninja -DTIO_BUILD_PYTHON=ON -DTIO_TORCH_ALLOC=OFF -DTIO_BUILD_TESTS=OFF \
      -DTIO_BUILD_CLI=OFF -DTIO_BUILD_BENCH=OFF -DPython_EXECUTABLE="$(command -v python)" >/dev/null
core_files=$(git ls-files 'python/teraio/_core/*.c')
echo "$core_files" | xargs -r -P "$jobs" -n 8 clang-tidy -p build-py --quiet \
    --warnings-as-errors='*' >"$build/clang-tidy-core.log" 2>&1 || true
if grep -E "(warning|error):" "$build/clang-tidy-core.log"; then
    echo "clang-tidy: diagnostics above in teraio._core, which must stay clean (scripts/tidy.sh)"
    exit 1
fi
echo "clang-tidy: $(echo "$core_files" | grep -c . || true) files of teraio._core clean"
