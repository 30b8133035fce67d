#!/usr/bin/env bash
# bench/io_vs_fio.sh - teraio's migration engine against fio, same directory, sizes and depth.
#
# For each of read/write x block 1,4,16,64 MiB x depth 8,32: fio (ioengine=io_uring,
# direct=1) and `teraio bench-io` (backend uring, O_DIRECT swap file) run alternately, REPS
# times each; the medians of bandwidth and CPU seconds per GiB are written as a Markdown table
# with the ratio to fio. Then striping: 1 vs 4 directories on the same disk.
#
# usage: bench/io_vs_fio.sh [-d DIR] [-s SIZE] [-r REPS] [-c CLI] [-o OUT.md]
#   -d DIR   directory on the disk to measure (default: $TMPDIR or /tmp) - a subdirectory is
#            created and removed
#   -s SIZE  bytes per run (default 2GiB; fio --size and teraio --size)
#   -r REPS  repetitions, median reported (default 3)
#   -c CLI   the teraio binary (default build/teraio)
#   -o FILE  Markdown output (default docs/bench/io.md)
# Writes on both sides go to blocks that were written before (fio: its laid-out file; teraio:
# bench-io --warmup), so neither pays ext4's unwritten-extent conversion in the timed phase.
# DeepSpeed's DeepNVMe async_io is measured too when DEEPNVME_PYTHON names a Python with
# deepspeed, torch and a built async_io op (bench/io_deepnvme.py; it runs after the fio/teraio
# loop, on the same directory and sizes).
# Needs fio and python3. CPU for fio is (usr_cpu + sys_cpu)% x runtime; for teraio the process's
# getrusage over the timed phase (all threads). Both count the whole process.
set -euo pipefail

DIR="${TMPDIR:-/tmp}"; SIZE=2GiB; REPS=3; CLI=build/teraio; OUT=docs/bench/io.md
while getopts "d:s:r:c:o:h" opt; do
    case $opt in
        d) DIR=$OPTARG ;; s) SIZE=$OPTARG ;; r) REPS=$OPTARG ;; c) CLI=$OPTARG ;; o) OUT=$OPTARG ;;
        *) sed -n '2,18p' "$0"; exit 1 ;;
    esac
done
command -v fio >/dev/null || { echo "io_vs_fio: fio is not installed (apt-get install fio)" >&2; exit 1; }
[ -x "$CLI" ] || { echo "io_vs_fio: $CLI not built (cmake --build build)" >&2; exit 1; }

WORK=$(mktemp -d "$DIR/tio-bench-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/d0" "$WORK/d1" "$WORK/d2" "$WORK/d3" "$(dirname "$OUT")"
RAW="$WORK/raw.jsonl"
SIZE_BYTES=$(python3 -c "import sys
s=sys.argv[1]; u={'KiB':1<<10,'MiB':1<<20,'GiB':1<<30,'TiB':1<<40}
print(next((int(float(s[:-3])*v) for k,v in u.items() if s.endswith(k)), None) or int(s))" "$SIZE")

fio_run() { # rw block depth
    fio --name=tio --filename="$WORK/d0/fio.dat" --rw="$1" --bs="$2" --iodepth="$3" \
        --ioengine=io_uring --direct=1 --size="$SIZE_BYTES" --output-format=json 2>/dev/null |
    python3 -c "
import json,sys
j=json.load(sys.stdin); t=j['jobs'][0]; d=t['$1']
sec=d['runtime']/1000.0; cpu=(t['usr_cpu']+t['sys_cpu'])/100.0*sec
gib=d['io_bytes']/2**30
print(json.dumps({'tool':'fio','rw':'$1','block':'$2','depth':$3,'bytes_per_s':d['bw_bytes'],'cpu_s_per_gib':cpu/gib}))"
}

tio_run() { # rw block depth ndirs
    local dirs=() i
    for ((i = 0; i < $4; i++)); do dirs+=(--dir "$WORK/d$i"); done
    # --warmup: writes go to swap-file blocks written once before, as fio's rewrite of its
    # laid-out file does (reads are always prefilled, untimed)
    "$CLI" bench-io "${dirs[@]}" --backend uring --rw "$1" --block "$2" --depth "$3" \
        --size "$SIZE_BYTES" --warmup --json |
    python3 -c "
import json,sys
j=json.load(sys.stdin)
print(json.dumps({'tool':'teraio$([ "$4" = 1 ] || echo "-$4dirs")','rw':'$1','block':'$2','depth':$3,'bytes_per_s':j['bytes_per_s'],'cpu_s_per_gib':j['cpu_s_per_gib']}))"
}

# lay out fio's file once (untimed), so every fio run rewrites/reads allocated blocks
fio --name=layout --filename="$WORK/d0/fio.dat" --rw=write --bs=4M --iodepth=8 \
    --ioengine=io_uring --direct=1 --size="$SIZE_BYTES" >/dev/null 2>&1

for rw in write read; do
    for block in 1M 4M 16M 64M; do
        for depth in 8 32; do
            for ((r = 0; r < REPS; r++)); do
                fio_run "$rw" "$block" "$depth" >>"$RAW"
                tio_run "$rw" "${block/M/MiB}" "$depth" 1 | sed "s/\"${block/M/MiB}\"/\"$block\"/" >>"$RAW"
            done
            echo "  $rw $block depth $depth done" >&2
        done
    done
done
for rw in write read; do
    for ((r = 0; r < REPS; r++)); do
        tio_run "$rw" 4MiB 32 1 | sed 's/"4MiB"/"stripe"/' >>"$RAW"
        tio_run "$rw" 4MiB 32 4 | sed 's/"4MiB"/"stripe"/' >>"$RAW"
    done
done

if [ -n "${DEEPNVME_PYTHON:-}" ]; then
    echo "  DeepNVMe (async_io)..." >&2
    "$DEEPNVME_PYTHON" "$(dirname "$0")/io_deepnvme.py" --dir "$WORK/d1" --size "$SIZE" \
        --reps "$REPS" --json "$WORK/ds.jsonl" >/dev/null 2>"$WORK/ds.log" &&
        cat "$WORK/ds.jsonl" >>"$RAW" || { echo "  DeepNVMe failed:" >&2; tail -5 "$WORK/ds.log" >&2; }
fi

python3 - "$RAW" "$OUT" "$SIZE" "$REPS" <<'PY'
import json, statistics, sys, subprocess, platform, datetime
raw, out, size, reps = sys.argv[1:5]
rows = [json.loads(l) for l in open(raw)]
def med(tool, rw, block, depth, key):
    v = [r[key] for r in rows if r['tool'] == tool and r['rw'] == rw and r['block'] == block and r['depth'] == depth]
    return statistics.median(v) if v else float('nan')
kernel = platform.release()
lines = [
 "# Migration engine vs fio (io_uring, O_DIRECT)", "",
 f"Generated by `bench/io_vs_fio.sh` on {datetime.date.today()} (kernel {kernel}); {size} per run,",
 f"median of {reps} runs, fio and teraio alternating on the same directory and disk. Bandwidth in",
 "MB/s (10^6 B/s); CPU in seconds of user + system time per GiB moved (whole process).", "",
 "| rw | block | depth | fio MB/s | teraio MB/s | ratio | fio CPU s/GiB | teraio CPU s/GiB | CPU ratio | DeepNVMe MB/s | DeepNVMe CPU s/GiB |",
 "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
worst_bw, worst_cpu = 9e9, 0
for rw in ("write", "read"):
    for block in ("1M", "4M", "16M", "64M"):
        for depth in (8, 32):
            fb, tb = med('fio', rw, block, depth, 'bytes_per_s'), med('teraio', rw, block, depth, 'bytes_per_s')
            fc, tc = med('fio', rw, block, depth, 'cpu_s_per_gib'), med('teraio', rw, block, depth, 'cpu_s_per_gib')
            db, dc = med('deepnvme', rw, block, depth, 'bytes_per_s'), med('deepnvme', rw, block, depth, 'cpu_s_per_gib')
            ds = f"{db/1e6:.0f} | {dc:.3f}" if db == db else "n/a | n/a"
            worst_bw = min(worst_bw, tb / fb); worst_cpu = max(worst_cpu, tc / fc)
            lines.append(f"| {rw} | {block}iB | {depth} | {fb/1e6:.0f} | {tb/1e6:.0f} | {tb/fb:.2f} | {fc:.3f} | {tc:.3f} | {tc/fc:.2f} | {ds} |")
lines += ["", f"Worst bandwidth ratio: {worst_bw:.2f} (target >= 0.95); worst CPU ratio: {worst_cpu:.2f} (target <= 1.2).", "",
 "## Striping over several directories on one disk", "",
 "4 MiB tensors, depth 32, the same disk: one directory vs four (chunks striped round-robin).", "",
 "| rw | 1 dir MB/s | 4 dirs MB/s | ratio |", "|---|---:|---:|---:|"]
for rw in ("write", "read"):
    a, b = med('teraio', rw, 'stripe', 32, 'bytes_per_s'), med('teraio-4dirs', rw, 'stripe', 32, 'bytes_per_s')
    lines.append(f"| {rw} | {a/1e6:.0f} | {b/1e6:.0f} | {b/a:.2f} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
