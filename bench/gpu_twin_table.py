#!/usr/bin/env python3
"""Run bench_gpu_twin several times and print the medians per run as the Markdown table of
docs/bench/twin.md (one row per trace and tier).

    python3 bench/gpu_twin_table.py [--build build] [--repeat 3] [--label "current executor"]
                                    [-- extra bench_gpu_twin options]

Exit status: bench_gpu_twin's self-check (non-zero when the twin's kernels alone missed their
ideal by more than 2% in any repetition).
"""
import argparse
import json
import statistics
import subprocess
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="current executor")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    runs, status = {}, 0
    for _ in range(a.repeat):
        p = subprocess.run([f"{a.build}/bench_gpu_twin", "--json", *a.extra],
                           capture_output=True, text=True)
        status = status or p.returncode
        sys.stderr.write(p.stderr)
        for line in p.stdout.splitlines():
            r = json.loads(line)
            runs.setdefault((r["trace"], r["tier"]), []).append(r)
    print(f"| executor | trace | tier | budget | tensors | twin step (s) | ideal (s) | twin / ideal "
          "| predicted (s) | twin / predicted | read stall (s) | pressure stall (s) "
          "| h2d / d2h busy | thread us/kernel |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (trace, tier), rs in runs.items():
        if any("error" in r for r in rs):
            err = next(r["error"] for r in rs if "error" in r).rsplit(": ", 1)[-1].rstrip(")")
            print(f"| {a.label} | {trace} | {tier} | {rs[0]['budget']:.0%} | {rs[0]['tensors']} "
                  f"| failed: {err} | | | | | | | | |")
            continue
        med = {k: statistics.median(r[k] for r in rs) for k in (
            "twin_step_s", "ideal_s", "predicted_step_s", "read_stall_s", "pressure_stall_s",
            "h2d_busy", "d2h_busy", "thread_us_per_kernel")}
        ratio = statistics.median(r["twin_step_s"] / r["ideal_s"] for r in rs)
        pred = statistics.median(r["twin_step_s"] / r["predicted_step_s"] for r in rs)
        print(f"| {a.label} | {trace} | {tier} | {rs[0]['budget']:.0%} | {rs[0]['tensors']} "
              f"| {med['twin_step_s']:.3f} | {med['ideal_s']:.3f} | {ratio:.3f} "
              f"| {med['predicted_step_s']:.3f} | {pred:.2f} | {med['read_stall_s']:.3f} "
              f"| {med['pressure_stall_s']:.3f} | {med['h2d_busy']:.2f} / {med['d2h_busy']:.2f} "
              f"| {med['thread_us_per_kernel']:.1f} |")
    return status


if __name__ == "__main__":
    sys.exit(main())
