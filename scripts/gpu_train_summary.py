#!/usr/bin/env python3
"""Summarise the training runs of scripts/gpu_validate.sh (OUTDIR/train.json, one object per run).

A run without --budget is the baseline of the later runs with the same --preset (the first such
run); every other run is compared with it bit for bit (losses and final parameters), by
torch.cuda.max_memory_allocated() over the steady steps and by the median steady step time.
Exit status 1 if a run failed or differs from its baseline.
"""
import json
import statistics
import sys

MiB = 2**20


def preset(args):
    a = args.split()
    return a[a.index("--preset") + 1] if "--preset" in a else "tiny"


def med(r):
    s = r["steady_step_seconds"]
    return statistics.median(s) if s else float("nan")


def main(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    base, ok = {}, True
    for run in runs:
        name, args, r = run["run"], run["args"], run["result"]
        p = preset(args)
        if r is None:
            print(f"{name}: FAILED (see train-{name}.err)")
            ok = False
            continue
        steady = r["cuda_steady_max_allocated_bytes"]
        if "--budget" not in args.split() and p not in base:
            base[p] = r
            print(f"{name} ({p}, {r.get('cuda_device')}): baseline; steady max_memory_allocated "
                  f"{steady / MiB:.1f} MiB, step {med(r) * 1e3:.1f} ms")
            continue
        b = base.get(p)
        if b is None:
            print(f"{name}: no baseline run for preset {p}")
            ok = False
            continue
        n = min(len(r["losses"]), len(b["losses"]))
        if len(r["losses"]) == len(b["losses"]):
            same = r["losses"] == b["losses"] and r["params"] == b["params"]
            what = "losses and final parameters"
        else:  # fewer steps than the baseline: the final parameters are not comparable
            same = r["losses"][:n] == b["losses"][:n]
            what = f"losses of the {n} common steps"
        ok &= same
        line = (f"{name} ({p}): {what} "
                f"{'IDENTICAL' if same else 'DIFFERENT'} to the baseline; steady max_allocated "
                f"{steady / MiB:.1f} MiB ({steady / b['cuda_steady_max_allocated_bytes'] - 1:+.0%}); "
                f"step {med(r) * 1e3:.1f} ms ({med(b) / med(r):.2f}x the baseline)")
        rep = r.get("report")
        if rep:
            budget, peak = rep.get("memory_budget") or 0, rep.get("peak_managed_bytes") or 0
            # max_allocated also counts what teraio does not manage (tensors under
            # min_tensor_bytes, the allocator's rounding, cuBLAS workspaces): shown, not judged
            line += (f"; budget {budget / MiB:.1f} MiB, tracked peak {peak / MiB:.1f} MiB, "
                     f"backend {rep.get('backend')}, offloaded "
                     f"{rep.get('bytes_offloaded', 0) / MiB:.0f} MiB over "
                     f"{rep.get('steps_offloaded')} steps, stall {rep.get('stall_s', 0):.3f} s, "
                     f"demand offloads {rep.get('demand_offloads')}, tier fallbacks "
                     f"{rep.get('tier_fallbacks')}, kept for want of room {rep.get('tier_full_kept')}")
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
