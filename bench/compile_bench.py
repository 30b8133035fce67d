#!/usr/bin/env python3
"""torch.compile under teraio (numbers go to docs/bench/torch.md, never to assertions).

The example model trained on CPU in four configurations, each in its own process (Dynamo's and
inductor's caches start empty; the Offloader installs the process's CPU allocator), interleaved
round by round:

- eager:            plain PyTorch;
- compiled:         plain PyTorch, each block compiled on its own (block.compile(), as
                    TorchTitan compiles), the anchor of the compiled runs;
- teraio:           eager under a teraio.Offloader (memory_budget 0.5, SSD tier in --ssd-dir);
- teraio-compiled:  the compiled model under the same Offloader (each block one region).

Per configuration: the median wall time of the steady steps (after 3: teraio's warm-up, profiled
and first offloaded steps), the median CPU time of the training thread per step, and under teraio
the operators the Offloader's dispatch mode ran per step (the kernels of its profiled trace,
regions included) and the bytes offloaded per steady step. The CPU time spent in teraio per step
is the training thread's CPU time under teraio minus that of its plain anchor (eager or
compiled), and per operator hooked that difference divided by the operators.

    python bench/compile_bench.py --ssd-dir /tmp/tio-bench --rounds 3
    python bench/compile_bench.py --backend aot_eager --preset small --steps 12
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
MODES = ("eager", "compiled", "teraio", "teraio-compiled")
WARM = 3


def run_one(cfg):
    import torch

    from llama_tiny import LlamaConfig, LlamaTiny, make_batch
    from train_llama_tiny import PRESETS

    torch.set_num_threads(cfg["threads"])
    mode = cfg["mode"]
    c = LlamaConfig(**PRESETS[cfg["preset"]])
    model = LlamaTiny(c, seed=0)
    if mode.endswith("compiled"):
        for blk in model.layers:
            blk.compile(backend=cfg["backend"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    off = None
    if mode.startswith("teraio"):
        import teraio

        off = teraio.Offloader(model, opt, memory_budget=0.5, ssd_dirs=[cfg["ssd"]],
                               options=teraio.OffloadOptions(min_tensor_bytes="64KiB"))
    import contextlib

    wall, tcpu, moved = [], [], []
    for i in range(cfg["steps"]):
        tokens = make_batch(c, cfg["batch"], cfg["seq"], i)
        b0 = off.report()["bytes_offloaded"] if off is not None else 0
        t0, c0 = time.perf_counter(), time.thread_time()
        with off.step() if off is not None else contextlib.nullcontext():
            loss = model.loss(tokens)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
        wall.append(time.perf_counter() - t0)
        tcpu.append(time.thread_time() - c0)
        moved.append((off.report()["bytes_offloaded"] if off is not None else 0) - b0)
    out = {"mode": mode, "step_s": statistics.median(wall[WARM:]),
           "cpu_s": statistics.median(tcpu[WARM:]), "first_step_s": wall[0],
           "moved_bytes": statistics.median(moved[WARM:]), "loss": loss.item()}
    if off is not None:
        prog = off._prog
        out["ops"] = len(prog.kernels)
        out["regions"] = sum(1 for k in prog.kernels if k[0].startswith("teraio.region."))
        rep = off.report()
        out["steps_offloaded"] = rep["steps_offloaded"]
        out["steps_diverged"] = rep["steps_diverged"]
        off.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--ssd-dir", default=None)
    ap.add_argument("--json", default=None, help="write the results here too")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one is not None:
        print(json.dumps(run_one(json.loads(a.one))))
        return
    modes = a.modes.split(",")
    for m in modes:
        if m not in MODES:
            sys.exit(f"compile_bench: unknown mode {m!r} (known: {', '.join(MODES)})")
    runs = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(dir=a.ssd_dir) as ssd:
        for r in range(a.rounds):
            for m in modes:
                cfg = dict(mode=m, preset=a.preset, batch=a.batch, seq=a.seq, steps=a.steps,
                           threads=a.threads, backend=a.backend, ssd=ssd)
                p = subprocess.run([sys.executable, __file__, "--one", json.dumps(cfg)],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(f"compile_bench: {m} failed (exit {p.returncode}):\n"
                             f"{p.stderr[-3000:]}")
                res = json.loads(p.stdout.strip().splitlines()[-1])
                res["load_avg"] = os.getloadavg()[0]
                runs[m].append(res)
                print(f"round {r} {m}: {res}", file=sys.stderr, flush=True)
    med = {}
    for m, rs in runs.items():
        med[m] = {k: statistics.median(x[k] for x in rs) for k in rs[0]
                  if isinstance(rs[0][k], (int, float))}
    print(f"preset {a.preset}, batch {a.batch}, seq {a.seq}, {a.steps} steps ({WARM} warm), "
          f"{a.rounds} rounds, {a.threads} thread(s), backend {a.backend}; medians of rounds")
    print(f"{'mode':17} {'step ms':>9} {'cpu ms':>9} {'teraio cpu ms':>14} {'ops':>6} "
          f"{'us/op':>7} {'MB moved':>9} {'1st step s':>10}")
    for m in modes:
        x = med[m]
        anchor = {"teraio": "eager", "teraio-compiled": "compiled"}.get(m)
        extra = ""
        if anchor in med:
            d = x["cpu_s"] - med[anchor]["cpu_s"]
            extra = f"{d * 1e3:14.1f} {x['ops']:6.0f} {d / x['ops'] * 1e6:7.1f}"
        else:
            extra = f"{'':14} {'':6} {'':7}"
        print(f"{m:17} {x['step_s'] * 1e3:9.1f} {x['cpu_s'] * 1e3:9.1f} {extra} "
              f"{x['moved_bytes'] / 1e6:9.1f} {x['first_step_s']:10.1f}")
    for m, o in (("compiled", "eager"), ("teraio-compiled", "teraio"),
                 ("teraio", "eager"), ("teraio-compiled", "compiled")):
        if m in med and o in med:
            print(f"{m} / {o}: step time x{med[m]['step_s'] / med[o]['step_s']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": runs, "medians": med}, f, indent=1)


if __name__ == "__main__":
    main()
