#!/usr/bin/env python3
"""DeepSpeed's DeepNVMe async_io (libaio, O_DIRECT) on the same directory as bench/io_vs_fio.sh.

usage: python bench/io_deepnvme.py --dir DIR [--size 2GiB] [--reps 3] [--json OUT]

Needs deepspeed, torch (CPU is enough), libaio-dev and ninja (the op is compiled at first use).
For each rw x block (1, 4, 16, 64 MiB) x depth (8, 32), one pinned tensor of --size bytes is
written (or read back) with aio_handle(block_size=block, queue_depth=depth) and wait(); the
median of --reps runs of bandwidth and CPU seconds per GiB (getrusage of this process, all
threads, over the timed call) is printed as JSON lines.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time


def cpu_now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def parse_size(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for k, v in units.items():
        if s.endswith(k):
            return int(float(s[: -len(k)]) * v)
    return int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch
    from deepspeed.ops.op_builder import AsyncIOBuilder

    size = parse_size(a.size)
    t0 = time.time()
    aio = AsyncIOBuilder().load(verbose=False)
    print(f"async_io op loaded in {time.time() - t0:.1f} s", file=sys.stderr)
    path = os.path.join(a.dir, "deepnvme.dat")
    rows = []
    for rw in ("write", "read"):
        for block_mib in (1, 4, 16, 64):
            for depth in (8, 32):
                bws, cpus = [], []
                for _ in range(a.reps):
                    h = aio.aio_handle(block_mib << 20, depth, False, False, 1)
                    buf = h.new_cpu_locked_tensor(size, torch.empty(0, dtype=torch.uint8))
                    buf.fill_(7)
                    if rw == "read" and not os.path.exists(path):
                        h.sync_pwrite(buf, path)
                    w0, c0 = time.perf_counter(), cpu_now()
                    if rw == "write":
                        h.async_pwrite(buf, path)
                    else:
                        h.async_pread(buf, path)
                    assert h.wait() == 1
                    wall, cpu = time.perf_counter() - w0, cpu_now() - c0
                    bws.append(size / wall)
                    cpus.append(cpu / (size / 2**30))
                    h.free_cpu_locked_tensor(buf)
                    del h
                row = {"tool": "deepnvme", "rw": rw, "block": f"{block_mib}M", "depth": depth,
                       "bytes_per_s": statistics.median(bws),
                       "cpu_s_per_gib": statistics.median(cpus)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if os.path.exists(path):
        os.unlink(path)
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
