"""teraio's main job on its built-in default (the README's first command runs this).

Three parts:
  1. real training of a small Llama-style model on CPU, on a text corpus shipped in the
     package, under a memory budget with offloading to a local directory, against the same
     training without teraio (losses must be bitwise equal);
  2. simulation of the paper's Llama3-8B and Llama3-70B settings on the paper's server:
     teraio against the baselines, as a table;
  3. a report folder with plots (memory characterization, bandwidth sweep, timeline,
     throughput bars) tied together by an HTML page.

    python -m teraio.demo [--out teraio-demo] [--steps 8] [--skip-training]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from teraio import report

# The paper's settings (PAPER.md s.9.1): fp32, AdamW, 2-stage pipeline on 2x H100 NVL,
# GPU 0's trace. One configuration per model for the demo; `teraio compare --paper` runs all.
PAPER_RUNS = [
    {"name": "llama3-8b", "preset": "llama3-8b", "batch": 64, "seq": 2048},
    {"name": "llama3-70b", "preset": "llama3-70b", "batch": 16, "seq": 2048},
]
SYSTEMS = ["ideal", "zero-offload", "zero-infinity", "teraio-ssd", "teraio-mixed"]
HW = "paper-2xh100nvl"


def banner(text: str) -> None:
    print(f"\n\033[1m{'=' * 78}\n{text}\n{'=' * 78}\033[0m", flush=True)


def part_training(out: Path, steps: int) -> dict | None:
    banner("Part 1/3: real training on CPU under a memory budget, offloading to "
           f"{out / 'swap'}")
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: PyTorch is not installed ({e}); install it with "
              "TIO_SETUP_TORCH=1 bash scripts/setup.sh")
        return None
    from teraio import demo_training
    return demo_training.run(out, steps=steps)


def part_simulation(out: Path) -> list[dict]:
    banner(f"Part 2/3: the paper's settings simulated on its server ({HW})")
    rows = []
    for run in PAPER_RUNS:
        trace = out / f"{run['name']}.tio"
        t0 = time.perf_counter()
        info = report.run_cli("model", "--preset", run["preset"], "--batch", str(run["batch"]),
                              "--seq", str(run["seq"]), "-o", str(trace))
        print(f"{run['name']}: batch {run['batch']}, seq {run['seq']}: {info['kernels']:,} "
              f"kernels, peak {info['peak_bytes'] / 1e9:.0f} GB = "
              f"{100 * info['memory_ratio']:.0f}% of the GPU "
              f"(generated in {time.perf_counter() - t0:.1f} s)", flush=True)
        run["trace"] = str(trace)
        for system in SYSTEMS:
            r = report.run_cli("simulate", str(trace), "--hw", HW, "--policy", system)
            rows.append({"model": run["name"], "system": system, **r})
    header = f"{'model':<12} {'system':<15} {'tokens/s':>10} {'% ideal':>8} {'stall s':>8} " \
             f"{'GPU peak':>9} {'host peak':>10}"
    print("\n" + header + "\n" + "-" * len(header))
    for r in rows:
        tps = "OOM" if r.get("oom") else f"{r.get('tokens_per_s', 0):.1f}"
        frac = "-" if r.get("oom") else f"{100 * r.get('fraction_of_ideal', 0):.1f}%"
        print(f"{r['model']:<12} {r['system']:<15} {tps:>10} {frac:>8} "
              f"{r.get('stall_s', 0):>8.2f} {r.get('gpu_peak_bytes', 0) / 1e9:>7.1f}GB "
              f"{r.get('host_peak_bytes', 0) / 1e9:>8.1f}GB")
    return rows


def part_report(out: Path) -> Path:
    banner("Part 3/3: the report")
    rdir = out / "report"
    page = report.Page(f"teraio demo report ({HW})")
    for run in PAPER_RUNS:
        trace = run.get("trace") or str(out / f"{run['name']}.tio")
        hw_info = report.run_cli("hw", "show", HW)
        rdir.mkdir(parents=True, exist_ok=True)
        report.characterization(trace, int(hw_info["gpu_memory_bytes"]), rdir, run["name"], page)
        report.simulation(trace, HW, SYSTEMS, None, rdir, run["name"], page)
        if run["name"] == "llama3-8b":
            report.sweep(trace, HW, rdir, run["name"], page)
    index = page.write(rdir)
    for png in sorted(rdir.glob("*.png")):
        print(f"  plot: {png}")
    print(f"report: {index}")
    return index


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m teraio.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="teraio-demo", help="output folder (default teraio-demo)")
    ap.add_argument("--steps", type=int, default=12, help="training steps (default 12)")
    ap.add_argument("--skip-training", action="store_true", help="skip part 1")
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        if not a.skip_training:
            part_training(out, a.steps)
        part_simulation(out)
        part_report(out)
    except report.ReportError as e:
        print(f"teraio demo: {e}", file=sys.stderr)
        return 2
    print(f"\ndone in {time.perf_counter() - t0:.0f} s; everything is in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
