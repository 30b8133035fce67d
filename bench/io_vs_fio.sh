#!/usr/bin/env bash
# bench/io_vs_fio.sh - teraio's migration engine against fio, same directory, sizes and depth.
#
# For each of read/write x block 1,4,16,64 MiB x depth 8,32: fio (ioengine=io_uring,
# direct=1) and `teraio bench-io` (backend uring, O_DIRECT swap file) run as REPS pairs, the
# order alternating from pair to pair (fio first, then teraio first: drift and "who ran after
# whom" hit both alike); the table gives the medians of bandwidth and CPU seconds per GiB and the
# median of the per-pair ratios, with their range. Each run moves at least SIZE and at least
# 4 x depth x block bytes, so that the queue is kept at its depth for several rounds (1 GiB of
# 64 MiB blocks is 16 requests: at depth 32 that never reaches the depth). Then striping: 1 vs
# 4 directories on the same disk.
#
# Both tools move the data from buffers of the same kind of memory, in two settings (-m):
#   small  4 KiB pages: fio's default malloc'd buffers; bench-io --small-pages.
#   huge   2 MiB pages: fio --iomem=shmhuge (hugetlb pages, reserved here through
#          /proc/sys/vm/nr_hugepages and given back at exit; needs root); bench-io's default
#          buffers from tio_io_alloc (2 MiB-aligned, transparent huge pages advised).
# The kind matters on this machine's virtio disk: it takes at most 254 segments per request,
# a 1 MiB transfer from scattered 4 KiB pages has 256 and is split in two requests; from
# 2 MiB pages it is one or two segments. Measured here: reads of 1 MiB at depth 8 ran at
# ~0.7 GB/s from 4 KiB pages and ~1.4 GB/s from huge pages, for fio and teraio alike.
#
# usage: bench/io_vs_fio.sh [-d DIR] [-s SIZE] [-r REPS] [-m both|small|huge] [-c CLI] [-o OUT.md]
#   -d DIR   directory on the disk to measure (default: $TMPDIR or /tmp) - a subdirectory is
#            created and removed
#   -s SIZE  least bytes per run (default 2GiB; fio --size and teraio --size; raised to
#            4 x depth x block for the cells that need it)
#   -r REPS  pairs per cell, medians reported (default 3)
#   -m MEM   buffer memory of both tools: small, huge or both (default both; "both" without
#            root, or without enough free huge pages, measures small only and says so)
#   -k CELLS only these cells, e.g. -k "small:write:64:8 huge:read:64:32" (mem:rw:MiB:depth),
#            no striping: more pairs where a cell is in doubt
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

DIR="${TMPDIR:-/tmp}"; SIZE=2GiB; REPS=3; CLI=build/teraio; OUT=docs/bench/io.md; MEM=both
CELLS=""
while getopts "d:s:r:m:k:c:o:h" opt; do
    case $opt in
        d) DIR=$OPTARG ;; s) SIZE=$OPTARG ;; r) REPS=$OPTARG ;; c) CLI=$OPTARG ;; o) OUT=$OPTARG ;;
        m) MEM=$OPTARG ;; k) CELLS=" $OPTARG " ;;
        *) sed -n '2,40p' "$0"; exit 1 ;;
    esac
done
case $MEM in
    both | small | huge) ;;
    *) echo "io_vs_fio: -m must be small, huge or both, not '$MEM'" >&2; exit 1 ;;
esac
command -v fio >/dev/null || { echo "io_vs_fio: fio is not installed (apt-get install fio)" >&2; exit 1; }
[ -x "$CLI" ] || { echo "io_vs_fio: $CLI not built (cmake --build build)" >&2; exit 1; }

WORK=$(mktemp -d "$DIR/tio-bench-XXXXXX")
HP_FILE=/proc/sys/vm/nr_hugepages
HP_OLD=""
cleanup() {
    rm -rf "$WORK"
    if [ -n "$HP_OLD" ]; then echo "$HP_OLD" >"$HP_FILE" 2>/dev/null || true; fi
}
trap cleanup EXIT
mkdir -p "$WORK/d0" "$WORK/d1" "$WORK/d2" "$WORK/d3" "$(dirname "$OUT")"
RAW="$WORK/raw.jsonl"
SIZE_BYTES=$(python3 -c "import sys
s=sys.argv[1]; u={'KiB':1<<10,'MiB':1<<20,'GiB':1<<30,'TiB':1<<40}
print(next((int(float(s[:-3])*v) for k,v in u.items() if s.endswith(k)), None) or int(s))" "$SIZE")

cell_bytes() { # block(MiB) depth: max(SIZE, 4 x depth x block)
    local b=$(($1 * 4 * $2 * 1048576))
    echo $((b > SIZE_BYTES ? b : SIZE_BYTES))
}
MAX_BYTES=$(cell_bytes 64 32)

MEMS="small huge"
[ "$MEM" = both ] || MEMS=$MEM
if [[ " $MEMS " == *" huge "* ]]; then
    # fio --iomem=shmhuge needs hugetlb pages for depth x block (2 GiB at 64 MiB x 32) + slack
    need=1100
    cur=$(cat "$HP_FILE" 2>/dev/null || echo 0)
    if [ "$cur" -lt "$need" ] && { echo "$need" >"$HP_FILE"; } 2>/dev/null; then
        HP_OLD=$cur
    fi
    free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
    if [ "${free:-0}" -lt "$need" ]; then
        msg="io_vs_fio: fio's huge-page buffers need $need free 2 MiB hugetlb pages, $HP_FILE gives ${free:-0} (run as root, or free memory)"
        [ "$MEM" = huge ] && { echo "$msg" >&2; exit 1; }
        echo "$msg: measuring with 4 KiB pages only" >&2
        MEMS=small
    fi
fi

fio_run() { # rw block depth bytes mem
    local iomem=malloc
    [ "$5" = huge ] && iomem=shmhuge
    fio --name=tio --filename="$WORK/d0/fio.dat" --rw="$1" --bs="$2" --iodepth="$3" \
        --ioengine=io_uring --direct=1 --size="$4" --iomem="$iomem" --output-format=json 2>/dev/null |
    python3 -c "
import json,sys
j=json.load(sys.stdin); t=j['jobs'][0]; d=t['$1']
sec=d['runtime']/1000.0; cpu=(t['usr_cpu']+t['sys_cpu'])/100.0*sec
gib=d['io_bytes']/2**30
print(json.dumps({'tool':'fio','mem':'$5','rw':'$1','block':'$2','depth':$3,'bytes_per_s':d['bw_bytes'],'cpu_s_per_gib':cpu/gib}))"
}

tio_run() { # rw block depth ndirs bytes mem
    local dirs=() i pages=()
    [ "$6" = small ] && pages=(--small-pages)
    for ((i = 0; i < $4; i++)); do dirs+=(--dir "$WORK/d$i"); done
    # --warmup: writes go to swap-file blocks written once before, as fio's rewrite of its
    # laid-out file does (reads are always prefilled, untimed)
    "$CLI" bench-io "${dirs[@]}" --backend uring --rw "$1" --block "$2" --depth "$3" \
        --size "$5" --warmup "${pages[@]}" --json |
    python3 -c "
import json,sys
j=json.load(sys.stdin)
print(json.dumps({'tool':'teraio$([ "$4" = 1 ] || echo "-$4dirs")','mem':'$6','rw':'$1','block':'$2','depth':$3,'bytes_per_s':j['bytes_per_s'],'cpu_s_per_gib':j['cpu_s_per_gib']}))"
}

# lay out fio's file once (untimed, as large as the largest cell), so every fio run rewrites or
# reads allocated blocks
fio --name=layout --filename="$WORK/d0/fio.dat" --rw=write --bs=4M --iodepth=8 \
    --ioengine=io_uring --direct=1 --size="$MAX_BYTES" >/dev/null 2>&1

pair=0
for mem in $MEMS; do
for rw in write read; do
    for block in 1 4 16 64; do
        for depth in 8 32; do
            [ -z "$CELLS" ] || [[ "$CELLS" == *" $mem:$rw:$block:$depth "* ]] || continue
            bytes=$(cell_bytes "$block" "$depth")
            for ((r = 0; r < REPS; r++)); do
                pair=$((pair + 1))
                tag="s/\"${block}MiB\"/\"${block}M\"/; s/}\$/, \"pair\": $pair}/"
                if ((r % 2 == 0)); then # fio first, then teraio first in the next pair
                    f=$(fio_run "$rw" "${block}M" "$depth" "$bytes" "$mem" | sed "$tag")
                    t=$(tio_run "$rw" "${block}MiB" "$depth" 1 "$bytes" "$mem" | sed "$tag")
                else
                    t=$(tio_run "$rw" "${block}MiB" "$depth" 1 "$bytes" "$mem" | sed "$tag")
                    f=$(fio_run "$rw" "${block}M" "$depth" "$bytes" "$mem" | sed "$tag")
                fi
                printf '%s\n%s\n' "$f" "$t" >>"$RAW"
            done
            echo "  $mem pages: $rw ${block}MiB depth $depth ($bytes bytes per run) done" >&2
        done
    done
done
done
stripe_mem=${MEMS##* } # the last setting measured
[ -n "$CELLS" ] || for rw in write read; do
    for ((r = 0; r < REPS; r++)); do
        tio_run "$rw" 4MiB 32 1 "$SIZE_BYTES" "$stripe_mem" | sed 's/"4MiB"/"stripe"/' >>"$RAW"
        tio_run "$rw" 4MiB 32 4 "$SIZE_BYTES" "$stripe_mem" | sed 's/"4MiB"/"stripe"/' >>"$RAW"
    done
done

if [ -n "${DEEPNVME_PYTHON:-}" ]; then
    echo "  DeepNVMe (async_io)..." >&2
    "$DEEPNVME_PYTHON" "$(dirname "$0")/io_deepnvme.py" --dir "$WORK/d1" --size "$SIZE" \
        --reps "$REPS" --json "$WORK/ds.jsonl" >/dev/null 2>"$WORK/ds.log" &&
        cat "$WORK/ds.jsonl" >>"$RAW" || { echo "  DeepNVMe failed:" >&2; tail -5 "$WORK/ds.log" >&2; }
fi

python3 - "$RAW" "$OUT" "$SIZE" "$REPS" "$MEMS" <<'PY'
import json, statistics, sys, platform, datetime
raw, out, size, reps, mems = sys.argv[1:6]
rows = [json.loads(l) for l in open(raw) if l.strip()]
def sel(tool, mem, rw, block, depth):
    return [r for r in rows if r['tool'] == tool and r.get('mem', mem) == mem and r['rw'] == rw
            and r['block'] == block and r['depth'] == depth]
def med(tool, mem, rw, block, depth, key):
    v = [r[key] for r in sel(tool, mem, rw, block, depth)]
    return statistics.median(v) if v else float('nan')
def pair_ratios(mem, rw, block, depth, key):
    f = {r['pair']: r[key] for r in sel('fio', mem, rw, block, depth) if 'pair' in r}
    t = {r['pair']: r[key] for r in sel('teraio', mem, rw, block, depth) if 'pair' in r}
    return sorted(t[p] / f[p] for p in f if p in t and f[p] > 0)
TITLE = {"small": "Buffers of 4 KiB pages (fio: malloc; teraio: bench-io --small-pages)",
         "huge": "Buffers of 2 MiB pages (fio: --iomem=shmhuge; teraio: tio_io_alloc, THP advised)"}
lines = [
 "# Migration engine vs fio (io_uring, O_DIRECT)", "",
 f"Generated by `bench/io_vs_fio.sh` on {datetime.date.today()} (kernel {platform.release()}); at least {size} per run",
 "and at least 4 x depth x block (so that every run keeps its queue at depth for several rounds),",
 f"{reps} pairs per cell, fio and teraio back to back on the same directory and disk, the order",
 "alternating from pair to pair, both moving data from buffers of the same kind of memory.",
 "Bandwidth in MB/s (10^6 B/s), the median over the runs; CPU in seconds of user + system time",
 "per GiB moved (whole process). \"ratio\" is the median of the per-pair ratios teraio/fio (a",
 "pair shares the disk's state of the moment), with their range."]
for mem in mems.split():
    lines += ["", f"## {TITLE[mem]}", "",
     "| rw | block | depth | fio MB/s | teraio MB/s | ratio (pairs) | range | fio CPU s/GiB | teraio CPU s/GiB | CPU ratio | DeepNVMe MB/s | DeepNVMe CPU s/GiB |",
     "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    worst_bw, worst_cpu, met_bw, met_cpu, cells = 9e9, 0, 0, 0, 0
    for rw in ("write", "read"):
        for block in ("1M", "4M", "16M", "64M"):
            for depth in (8, 32):
                fb, tb = med('fio', mem, rw, block, depth, 'bytes_per_s'), med('teraio', mem, rw, block, depth, 'bytes_per_s')
                if fb != fb or tb != tb:
                    continue  # not measured (-k)
                fc, tc = med('fio', mem, rw, block, depth, 'cpu_s_per_gib'), med('teraio', mem, rw, block, depth, 'cpu_s_per_gib')
                db, dc = med('deepnvme', mem, rw, block, depth, 'bytes_per_s'), med('deepnvme', mem, rw, block, depth, 'cpu_s_per_gib')
                pr = pair_ratios(mem, rw, block, depth, 'bytes_per_s') or [tb / fb]
                cr = pair_ratios(mem, rw, block, depth, 'cpu_s_per_gib') or [tc / fc]
                r, c = statistics.median(pr), statistics.median(cr)
                ds = f"{db/1e6:.0f} | {dc:.3f}" if db == db else "n/a | n/a"
                worst_bw = min(worst_bw, r); worst_cpu = max(worst_cpu, c)
                cells += 1; met_bw += r >= 0.95; met_cpu += c <= 1.2
                lines.append(f"| {rw} | {block}iB | {depth} | {fb/1e6:.0f} | {tb/1e6:.0f} | {r:.2f} | {pr[0]:.2f}-{pr[-1]:.2f} | {fc:.3f} | {tc:.3f} | {c:.2f} | {ds} |")
    lines += ["", f"Bandwidth ratio >= 0.95 in {met_bw} of {cells} cells (worst {worst_bw:.2f}); CPU ratio <= 1.2 in {met_cpu} of {cells} (worst {worst_cpu:.2f})."]
smem = mems.split()[-1]
if any(r['block'] == 'stripe' for r in rows):  # not with -k
    lines += ["", "## Striping over several directories on one disk", "",
     f"4 MiB tensors, depth 32, the same disk ({smem} pages): one directory vs four (chunks striped round-robin).", "",
     "| rw | 1 dir MB/s | 4 dirs MB/s | ratio |", "|---|---:|---:|---:|"]
    for rw in ("write", "read"):
        a, b = med('teraio', smem, rw, 'stripe', 32, 'bytes_per_s'), med('teraio-4dirs', smem, rw, 'stripe', 32, 'bytes_per_s')
        lines.append(f"| {rw} | {a/1e6:.0f} | {b/1e6:.0f} | {b/a:.2f} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
