#!/usr/bin/env python3
"""Benchmarks of the PyTorch layer (numbers go to docs/bench/torch.md, never to assertions).

1. Hook overhead per operator (us): one training step of the example model plain, under the
   recording dispatch mode (profiling), and under the executing mode with a plan that moves
   nothing (policy "none": every operator still goes through identity, the plan check and the C
   executor). overhead = (t_mode - t_plain) / operators; medians over --reps steps.
2. End-to-end CPU training throughput (tokens/s over the steady-state steps) and peak RSS, each
   configuration in its own process: no offloading; teraio at 50% of the unconstrained peak (SSD
   tier in --ssd-dir); torch.autograd.graph.save_on_cpu; activation checkpointing of every block.

    python bench/torch_bench.py --preset small --ssd-dir /tmp/tio-bench --reps 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def micro_overhead(reps, n_ops=2000):
    """Per-operator cost of the hook on a chain of cheap operators (x = x + 1 on 16 floats)."""
    import torch

    import teraio
    from teraio.torch._mode import StepDriver, StepMode

    x0 = torch.zeros(16)

    def chain():
        x = x0
        for _ in range(n_ops):
            x = torch.add(x, 1)
        return x

    d = StepDriver([], record=True)
    with StepMode(d):
        chain()
    d.end()
    trace = teraio._core.RtTrace.build(d.prog.tensors, d.prog.kernels, {"source": "bench"})
    plan = teraio._core.RtPlan.build(trace, "none", [])
    eng = teraio._core.RtEngine([], 1 << 20)
    rt = teraio._core.Runtime(trace, plan, eng)
    t = {"plain": [], "record": [], "execute": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        chain()
        t["plain"].append(time.perf_counter() - t0)
        d = StepDriver([], record=True)
        t0 = time.perf_counter()
        with StepMode(d):
            chain()
        d.end()
        t["record"].append(time.perf_counter() - t0)
        d = StepDriver([], record=False, program=d.prog, runtime=rt)
        t0 = time.perf_counter()
        with StepMode(d):
            chain()
        d.end()
        assert d.diverged is None, d.diverged
        t["execute"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) / n_ops * 1e6 for k, v in t.items()}
    return {"micro_us_per_op": med, "record_overhead_us": med["record"] - med["plain"],
            "execute_overhead_us": med["execute"] - med["plain"]}


def hook_overhead(preset, reps, batch, seq):
    import torch

    import teraio
    from llama_tiny import LlamaConfig, LlamaTiny, make_batch
    from teraio.torch._mode import StepDriver, StepMode, collect_globals
    from train_llama_tiny import PRESETS

    cfg = LlamaConfig(**PRESETS[preset])
    model = LlamaTiny(cfg)
    opt = torch.optim.AdamW(model.parameters(), foreach=False)

    def step(i):
        loss = model.loss(make_batch(cfg, batch, seq, i))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step(0)
    times = {"plain": [], "record": [], "execute": []}
    # a plan with no moves, from a recorded step: the executor runs but moves nothing
    d = StepDriver(collect_globals(model, opt), record=True)
    with StepMode(d):
        step(1)
    d.end()
    prog = d.prog
    trace = teraio._core.RtTrace.build(prog.tensors, prog.kernels, {"source": "bench"})
    plan = teraio._core.RtPlan.build(trace, "none", [])
    eng = teraio._core.RtEngine([], 1 << 20)
    rt = teraio._core.Runtime(trace, plan, eng)
    for i in range(reps):
        t0 = time.perf_counter()
        step(2 + i)
        times["plain"].append(time.perf_counter() - t0)
        d = StepDriver(collect_globals(model, opt), record=True)
        t0 = time.perf_counter()
        with StepMode(d):
            step(2 + i)
        d.end()
        times["record"].append(time.perf_counter() - t0)
        d = StepDriver(collect_globals(model, opt), record=False, program=prog, runtime=rt)
        t0 = time.perf_counter()
        with StepMode(d):
            step(2 + i)
        d.end()
        assert d.diverged is None, d.diverged
        times["execute"].append(time.perf_counter() - t0)
    n = len(prog.kernels)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "preset": preset, "operators": n, "step_s": med,
        "record_us_per_op": (med["record"] - med["plain"]) / n * 1e6,
        "execute_us_per_op": (med["execute"] - med["plain"]) / n * 1e6,
    }


def worker(cfg):
    import resource

    import torch

    from llama_tiny import LlamaConfig, LlamaTiny, make_batch
    from train_llama_tiny import PRESETS

    c = LlamaConfig(**PRESETS[cfg["preset"]])
    model = LlamaTiny(c)
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    mode = cfg["mode"]
    os.makedirs(cfg["ssd_dir"], exist_ok=True)
    off = None
    if mode == "teraio":
        import teraio

        off = teraio.Offloader(model, opt, memory_budget=0.5, ssd_dirs=[cfg["ssd_dir"]],
                               min_tensor_bytes="256KiB")
    if mode == "checkpoint":
        from torch.utils.checkpoint import checkpoint

        for blk in model.layers:
            fwd = blk.forward
            blk.forward = (lambda f: lambda x, cos, sin: checkpoint(f, x, cos, sin,
                                                                    use_reentrant=False))(fwd)
    import contextlib

    times = []
    for i in range(cfg["steps"]):
        tokens = make_batch(c, cfg["batch"], cfg["seq"], i)
        if off is not None:
            ctx = off.step()
        elif mode == "save_on_cpu":
            ctx = torch.autograd.graph.save_on_cpu(pin_memory=False)
        else:
            ctx = contextlib.nullcontext()
        t0 = time.perf_counter()
        with ctx:
            loss = model.loss(tokens)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
        times.append(time.perf_counter() - t0)
    steady = times[3:] if len(times) > 3 else times
    out = {"mode": mode, "step_s": statistics.median(steady),
           "tokens_per_s": cfg["batch"] * cfg["seq"] / statistics.median(steady),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if off is not None:
        r = off.report()
        out.update({k: r[k] for k in ("peak_managed_bytes", "unconstrained_peak_bytes",
                                      "memory_budget", "stall_s", "bytes_offloaded")})
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--ssd-dir", default="/tmp/tio-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
        return
    print(json.dumps(micro_overhead(max(a.reps, 7))))
    print(json.dumps(hook_overhead(a.preset, a.reps, a.batch, a.seq)))
    os.makedirs(a.ssd_dir, exist_ok=True)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    # configurations interleaved round by round, so that load drift on a shared machine hits all
    results = {}
    for _ in range(a.rounds):
        for mode in ("plain", "teraio", "save_on_cpu", "checkpoint"):
            cfg = dict(preset=a.preset, mode=mode, steps=a.steps, batch=a.batch, seq=a.seq,
                       ssd_dir=a.ssd_dir)
            r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)],
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                print(json.dumps({"mode": mode, "error": r.stderr[-500:]}))
                continue
            results.setdefault(mode, []).append(json.loads(r.stdout.strip().splitlines()[-1]))
    base = statistics.median(x["step_s"] for x in results.get("plain", [{"step_s": 0}]))
    for mode, runs in results.items():
        step = statistics.median(x["step_s"] for x in runs)
        out = dict(runs[-1], mode=mode, rounds=len(runs), step_s=step,
                   tokens_per_s=a.batch * a.seq / step, vs_plain=base / step if step else 0,
                   all_step_s=[x["step_s"] for x in runs])
        print(json.dumps(out))

if __name__ == "__main__":
    main()
