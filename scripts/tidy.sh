#!/usr/bin/env bash
# clang-tidy over src/ and tools/ with the checks of .clang-tidy, on BUILD/compile_commands.json
# (default: build). Run by scripts/test.sh; runnable alone after a build.
#
# Two classes of directory:
#  * clean (tidy_clean below): every warning of the configured checks fails the run
#    (--warnings-as-errors='*'), in the .c files and in the headers of those directories;
#  * the rest: only the WarningsAsErrors classes of .clang-tidy fail the run; other warnings
#    are counted and left in BUILD/clang-tidy.log.
# To add a directory once clang-tidy reports nothing in it, append it to tidy_clean, e.g.
# tidy_clean=(src/io src/sim); its .c files move from the second run to the first, and the
# header filter of the first run is built from the same list.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=${TIO_TIDY_JOBS:-$(nproc)}

tidy_clean=(src/io)

clean_re=$(IFS='|'; echo "${tidy_clean[*]}")
clean_files=$(git ls-files 'src/*.c' 'tools/*.c' | grep -E "^($clean_re)/" || true)
other_files=$(git ls-files 'src/*.c' 'tools/*.c' | grep -Ev "^($clean_re)/" || true)

# Clean directories: any diagnostic fails. The header filter keeps this run to headers of the
# clean directories (a warning in another directory's header is that directory's).
echo "$clean_files" | xargs -r -P "$jobs" -n 4 clang-tidy -p "$build" --quiet \
    --warnings-as-errors='*' --header-filter="(^|/)($clean_re)/" \
    >"$build/clang-tidy-clean.log" 2>&1 || true
if grep -E "(warning|error):" "$build/clang-tidy-clean.log"; then
    echo "clang-tidy: diagnostics above in ${tidy_clean[*]}, which must stay clean"
    exit 1
fi
echo "clang-tidy: ${tidy_clean[*]} clean ($(echo "$clean_files" | grep -c . || true) files)"

echo "$other_files" | xargs -r -P "$jobs" -n 8 clang-tidy -p "$build" --quiet \
    >"$build/clang-tidy.log" 2>&1 || true
if grep -E "error:" "$build/clang-tidy.log"; then
    echo "clang-tidy: errors above"
    exit 1
fi
echo "clang-tidy: no errors elsewhere ($(grep -c 'warning:' "$build/clang-tidy.log" || true)" \
     "warnings in $build/clang-tidy.log)"
