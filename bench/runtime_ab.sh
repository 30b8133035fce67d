#!/usr/bin/env bash
# The executor's training-thread time per kernel (bench_runtime) of this checkout beside another
# revision's, in one run: REF's tree (default main) is built in a temporary directory with this
# checkout's bench/bench_runtime.c, then both binaries run alternately, ROUNDS rounds (default
# 5), each a --runs 3 median per size; the table gives the median over the rounds and the ratio.
#
#   bash bench/runtime_ab.sh [REF] [ROUNDS] [-- bench_runtime options, e.g. --budget 0.7]
#
# Needs this checkout built in build/ (cmake --build build --target bench_runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
ref=main
rounds=5
if [ $# -gt 0 ] && [ "$1" != "--" ]; then ref=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rounds=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
case $rounds in '' | *[!0-9]* | 0)
    echo "runtime_ab: ROUNDS must be a positive integer, not '$rounds'" >&2
    exit 1
    ;;
esac
new=build/bench_runtime
[ -x "$new" ] || { echo "runtime_ab: $new missing: cmake --build build --target bench_runtime" >&2; exit 1; }
rev=$(git rev-parse --verify --quiet "$ref^{commit}") || { echo "runtime_ab: unknown revision '$ref'" >&2; exit 1; }
tmp=$(mktemp -d /tmp/tio-runtime-ab-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
git archive "$rev" | tar -x -C "$tmp"
cp bench/bench_runtime.c "$tmp/bench/"
echo "building $ref (${rev:0:10}) in $tmp" >&2
cmake -S "$tmp" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIO_BUILD_TESTS=OFF \
    -DTIO_BUILD_PYTHON=OFF >/dev/null
cmake --build "$tmp/build" --target bench_runtime >/dev/null
old=$tmp/build/bench_runtime
out=$tmp/results.tsv
for r in $(seq 1 "$rounds"); do
    # alternate which build runs first, so that neither always gets the quieter moment
    if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
    for which in $order; do
        bin=$old; [ "$which" = new ] && bin=$new
        "$bin" --tsv --runs 3 "$@" | sed "s/^/$which\t/" >>"$out"
    done
    echo "round $r of $rounds done" >&2
done
python3 - "$out" "$ref" "${rev:0:10}" "$(git rev-parse --short=10 HEAD)" "$*" <<'EOF'
import statistics, sys
path, ref, rev, head, opts = sys.argv[1:6]
rows = {}
for line in open(path):
    which, layers, tensors, kernels, cpu, wall, off, pre, dem, over = line.split("\t")
    r = rows.setdefault(int(layers), {"tensors": tensors, "kernels": kernels})
    r.setdefault(which, []).append((float(cpu), float(wall), int(dem), int(over)))
print(f"bench_runtime {opts or '(defaults)'}: {ref} ({rev}) beside this checkout ({head}), "
      f"median over {len(next(iter(rows.values()))['old'])} rounds\n")
print(f"| blocks | tensors | kernels | {ref} thread CPU us/kernel | this | {ref}/this "
      f"| {ref} wall us/kernel | this | demand offloads ({ref} / this) |")
print("|---|---|---|---|---|---|---|---|---|")
med = {}
for layers in sorted(rows):
    r = rows[layers]
    oc, nc = (statistics.median(x[0] for x in r[w]) for w in ("old", "new"))
    ow, nw = (statistics.median(x[1] for x in r[w]) for w in ("old", "new"))
    od, nd = (statistics.median(x[2] for x in r[w]) for w in ("old", "new"))
    med[layers] = (oc, nc)
    print(f"| {layers} | {r['tensors']} | {r['kernels']} | {oc:.2f} | {nc:.2f} | {oc / nc:.1f}x "
          f"| {ow:.2f} | {nw:.2f} | {od:g} / {nd:g} |")
if len(med) >= 2:
    lo, hi = min(med), max(med)
    print(f"\nthread CPU per kernel, {hi} blocks over {lo}: {ref} {med[hi][0] / med[lo][0]:.2f}x, "
          f"this {med[hi][1] / med[lo][1]:.2f}x")
EOF
