#!/usr/bin/env python3
"""The table of scripts/gpu_validate.sh's titan phase: DIR/<run>/rank0.json of the runs plain
(TorchTitan without teraio), host and ssd (teraio.titan's rank reports). Per run: steps, the
median step time after the first three (warm-up, profiling, first planned step) against
plain's, whether what TorchTitan logged each step (loss, max loss, gradient norm) is bit for
bit plain's, bytes offloaded, the peak against the budget, steps that diverged from their plan.
Exit 1 when a run is missing, differs from plain, offloaded nothing or went over its budget.

    python3 scripts/gpu_titan_summary.py OUTDIR/titan
"""
import json
import os
import statistics
import sys

RUNS = ("plain", "host", "ssd")


def _median(step_s):
    return statistics.median(step_s[3:] or step_s)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 1
    runs = {}
    for name in RUNS:
        p = os.path.join(argv[1], name, "rank0.json")
        try:
            with open(p) as f:
                runs[name] = json.load(f)
        except (OSError, ValueError) as e:
            print(f"titan {name}: no result ({p}: {e})")
    base = runs.get("plain")
    bad = len(runs) < len(RUNS)
    for name, r in runs.items():
        steps = r.get("titan_steps") or []
        line = f"titan {name}: {len(steps)} steps, median step {_median(r['step_s']):.3f} s"
        if name != "plain":
            over = r["peak_managed_bytes"] > r["memory_budget"]
            line += (f", offloaded {r['bytes_offloaded'] / 2**20:.0f} MiB, peak "
                     f"{r['peak_managed_bytes'] / 2**20:.0f} MiB of budget "
                     f"{r['memory_budget'] / 2**20:.0f} MiB{' OVER' if over else ''}, "
                     f"{r['steps_diverged']} steps diverged")
            bad |= over or r["bytes_offloaded"] == 0
            if base is not None:
                same = len(steps) > 0 and steps == base.get("titan_steps")
                bad |= not same
                line += (f"; {_median(r['step_s']) / _median(base['step_s']):.2f}x plain's "
                         f"step, losses and gradient norms {'IDENTICAL' if same else 'DIFFERENT'}")
        print(line)
    print("titan: " + ("FAILED" if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
