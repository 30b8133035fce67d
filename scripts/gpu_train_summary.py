#!/usr/bin/env python3
"""Summarise the training runs of scripts/gpu_validate.sh (OUTDIR/train.json, one object per run)
as one Markdown table.

A run without --budget that completed is the baseline of the later runs with the same --preset
(the first such run); every other completed run is compared with it bit for bit (losses and
final parameters, or the losses of the common steps when it ran fewer), by
torch.cuda.max_memory_allocated() over the steady steps and by the median steady step time
(throughput = baseline step / run step). A run that ran out of device memory under
--gpu-memory-cap shows "out of memory"; that is its result. Teraio's runs also show what the
simulator predicted for a planned step (Offloader.predicted_step_s), the bytes moved per
offloaded step and the stall time. A run with --gpu-memory-cap and no --budget must run out of
device memory (the cap must be below the plain step's need); a run cut off by its time limit
(timed_out, from scripts/gpu_validate.sh) or skipped shows so.

A second table gives each run's wall time (the whole process, when gpu_validate.sh recorded it)
and teraio's counters from Offloader.report() per offloaded step: the stall time split into
demand offloads and the rest (waits for prefetches and for memory pressure), the training
thread's time issuing I/O, and the counts of demand offloads, urgent reads, deferred
prefetches and kernels that ran over the budget.

A third table, when runs saved a checkpoint between steps (--save-after N), compares each
teraio run's file (Offloader.save(), the offloaded tensors streamed from their tiers) byte for
byte (sha256) with the file torch.save wrote in the first plain run of the same --preset and
--save-after, with the save's time and the most bytes of globals it held
(report()["save_peak_bytes"]).

Exit status 1 if a run failed without a result, was cut off or skipped, differs from its
baseline (its checkpoint included), or a capped plain run did not run out of memory.
"""
import json
import statistics
import sys

MiB = 2**20


def preset(args):
    a = args.split()
    return a[a.index("--preset") + 1] if "--preset" in a else "tiny"


def med(r):
    s = r.get("steady_step_seconds") or []
    return statistics.median(s) if s else float("nan")


def row(cells):
    return "| " + " | ".join(cells) + " |"


def main(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    base, ok = {}, True
    print(row(["run", "result vs plain", "steady max_allocated", "step", "throughput vs plain",
               "predicted step", "moved per step (out / in)", "stall", "budget / tracked peak"]))
    print(row(["---"] * 9))
    device = None
    for run in runs:
        name, args, r = run["run"], run["args"], run["result"]
        p = preset(args)
        if r is None:
            if run.get("skipped"):
                what = "SKIPPED (no time left)"
            elif run.get("timed_out"):
                what = f"CUT OFF at its limit of {run.get('limit_s')} s (see train-{name}.err)"
            else:
                what = f"FAILED (see train-{name}.err)"
            print(row([name, what] + [""] * 7))
            ok = False
            continue
        device = device or r.get("cuda_device")
        if r.get("oom"):
            print(row([name, f"out of memory after {r.get('steps_done', 0)} step(s)",
                       f"{r.get('cuda_max_allocated_bytes', 0) / MiB:.0f} MiB (max)"] +
                      [""] * 6))
            continue
        steady = r.get("cuda_steady_max_allocated_bytes") or 0
        words = args.split()
        if "--gpu-memory-cap" in words and "--budget" not in words:
            print(row([name, "ran within the cap: NOT out of memory (lower --gpu-memory-cap)",
                       f"{steady / MiB:.0f} MiB", f"{med(r) * 1e3:.0f} ms"] + [""] * 5))
            ok = False
            continue
        if "--budget" not in words and p not in base:
            base[p] = r
            print(row([name, "baseline", f"{steady / MiB:.0f} MiB", f"{med(r) * 1e3:.0f} ms",
                       "1.00x", "", "", "", ""]))
            continue
        b = base.get(p)
        if b is None:
            print(row([name, f"no baseline run for preset {p}"] + [""] * 7))
            ok = False
            continue
        n = min(len(r["losses"]), len(b["losses"]))
        if len(r["losses"]) == len(b["losses"]):
            same = r["losses"] == b["losses"] and r["params"] == b["params"]
            what = "losses and parameters"
        else:  # fewer steps than the baseline: the final parameters are not comparable
            same = r["losses"][:n] == b["losses"][:n]
            what = f"losses of {n} steps"
        ok &= same
        bsteady = b.get("cuda_steady_max_allocated_bytes") or 1
        cells = [name, f"{what} {'IDENTICAL' if same else 'DIFFERENT'}",
                 f"{steady / MiB:.0f} MiB ({steady / bsteady - 1:+.0%})",
                 f"{med(r) * 1e3:.0f} ms", f"{med(b) / med(r):.2f}x"]
        rep = r.get("report") or {}
        pred = rep.get("predicted_step_s")
        steps = max(1, rep.get("steps_offloaded") or 1)
        budget, peak = rep.get("memory_budget") or 0, rep.get("peak_managed_bytes") or 0
        cells += [f"{pred * 1e3:.0f} ms" if pred else "",
                  f"{rep.get('bytes_offloaded', 0) / steps / MiB:.0f} / "
                  f"{rep.get('bytes_prefetched', 0) / steps / MiB:.0f} MiB",
                  f"{rep.get('stall_s', 0) / steps * 1e3:.0f} ms/step",
                  f"{budget / MiB:.0f} / {peak / MiB:.0f} MiB"]
        print(row(cells))
    if device:
        print(f"\ndevice: {device}; max_allocated also counts what teraio does not manage "
              "(tensors under min_tensor_bytes, allocator rounding, cuBLAS workspaces)")
    counters(runs)
    ok = checkpoints(runs) and ok
    return 0 if ok else 1


def _save_after(args):
    a = args.split()
    return a[a.index("--save-after") + 1] if "--save-after" in a else None


def checkpoints(runs):
    """The third table: the checkpoints saved between steps against the plain run's. False if
    one differs or has no plain run to compare with."""
    saved = [run for run in runs if _save_after(run["args"])]
    if not saved:
        return True
    ok, base = True, {}
    print()
    print(row(["run", "checkpoint vs plain (after step)", "save", "save peak (globals)"]))
    print(row(["---"] * 4))
    for run in saved:
        r, key = run["result"] or {}, (preset(run["args"]), _save_after(run["args"]))
        sha = r.get("save_sha256")
        if not sha:
            print(row([run["run"], "no checkpoint (no result)", "", ""]))
            ok = False
            continue
        t = f"{r.get('save_seconds', float('nan')):.2f} s"
        if "--budget" not in run["args"].split():
            base.setdefault(key, sha)
            print(row([run["run"], f"torch.save, the reference ({key[1]})", t, ""]))
            continue
        peak = (r.get("report") or {}).get("save_peak_bytes", 0)
        if key not in base:
            what, ok = f"no plain run with --save-after {key[1]}", False
        elif sha == base[key]:
            what = f"IDENTICAL bytes ({key[1]})"
        else:
            what, ok = f"DIFFERENT bytes ({key[1]})", False
        print(row([run["run"], what, t, f"{peak / MiB:.0f} MiB"]))
    return ok


def counters(runs):
    """The second table: wall time and Offloader.report()'s thread and stall counters."""
    print()
    print(row(["run", "wall", "stall: demand / other", "thread issuing I/O",
               "demand offloads", "urgent reads", "deferred prefetches", "over-budget kernels"]))
    print(row(["---"] * 8))
    for run in runs:
        r = run["result"] or {}
        wall = f"{run['wall_s']} s" if "wall_s" in run else ""
        rep = r.get("report")
        if not rep:
            print(row([run["run"], wall] + [""] * 6))
            continue
        n = max(1, rep.get("steps_offloaded") or 1)
        demand = rep.get("demand_stall_s", 0.0)
        other = max(0.0, rep.get("stall_s", 0.0) - demand)
        print(row([run["run"], wall,
                   f"{demand / n * 1e3:.1f} / {other / n * 1e3:.1f} ms/step",
                   f"{rep.get('io_issue_s', 0.0) / n * 1e3:.1f} ms/step"] +
                  [f"{rep.get(k, 0) / n:.1f}/step" for k in
                   ("demand_offloads", "urgent_reads", "deferred_prefetches",
                    "over_budget_kernels")]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
