#!/usr/bin/env python3
"""The activations of compiled blocks under teraio (numbers go to docs/bench/torch.md).

The example model, each block compiled on its own (block.compile()), trained on CPU in three
configurations, each in its own process:

- compiled:    plain PyTorch, the anchor;
- teraio:      under a teraio.Offloader (memory_budget 0.5, SSD tier in --ssd-dir), the
               activations handed to teraio by the saved-tensor hooks compiled into the graphs;
- teraio-off:  the same with those hooks handing nothing over (teraio.torch._saved_hooks.ENABLED
               = False): teraio moves the blocks' parameters, gradients and optimizer states,
               and the activations stay in memory from a block's forward to its backward.

Measured at the turn of each step (the loss computed, its backward not started), by this script
and not by teraio: the bytes in memory of the distinct storages the compiled blocks' autograd
nodes (CompiledFunctionBackward) hold for their backward, parameters left out. Reported: the
median over the steady steps (after 3), teraio's tracked peak (report()["peak_managed_bytes"]:
what its accounting sees, which without the hooks leaves the activations out), the bytes
offloaded per steady step, and whether losses and parameters equal the anchor's bit for bit.

    python bench/compile_saved_bench.py --ssd-dir /tmp/tio-bench
    python bench/compile_saved_bench.py --preset small --seq 256 --batch 4 --backend inductor
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
MODES = ("compiled", "teraio", "teraio-off")
WARM = 3


def _saved_bytes(loss, params):
    seen, total, stack, visited = set(), 0, [loss.grad_fn], set()
    while stack:
        n = stack.pop()
        if n is None or id(n) in visited:
            continue
        visited.add(id(n))
        if type(n).__name__ == "CompiledFunctionBackward":
            for t in n.saved_tensors:
                st = t.untyped_storage()
                if st._cdata in params or st._cdata in seen:
                    continue
                seen.add(st._cdata)
                total += st.nbytes()
        stack.extend(f for f, _ in n.next_functions)
    return total


def run_one(cfg):
    import contextlib

    import torch

    from llama_tiny import LlamaConfig, LlamaTiny, make_batch
    from train_llama_tiny import PRESETS

    torch.set_num_threads(1)
    mode = cfg["mode"]
    c = LlamaConfig(**PRESETS[cfg["preset"]])
    model = LlamaTiny(c, seed=0)
    for blk in model.layers:
        blk.compile(backend=cfg["backend"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    off = None
    if mode != "compiled":
        import teraio
        from teraio.torch import _saved_hooks

        _saved_hooks.ENABLED = mode == "teraio"
        off = teraio.Offloader(model, opt, memory_budget=0.5, ssd_dirs=[cfg["ssd"]],
                               options=teraio.OffloadOptions(min_tensor_bytes="4KiB"))
    turn, losses, moved = [], [], []
    for i in range(cfg["steps"]):
        with off.step() if off is not None else contextlib.nullcontext():
            loss = model.loss(make_batch(c, cfg["batch"], cfg["seq"], i))
            turn.append(_saved_bytes(loss, params))
            loss.backward()
            losses.append(loss.item())
            opt.step()
            opt.zero_grad(set_to_none=True)
        if off is not None:
            moved.append(off.report()["bytes_offloaded"])
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    out = {"turn": turn, "losses": losses, "params": h.hexdigest()}
    if off is not None:
        rep = off.report()
        out["peak_managed"] = rep["peak_managed_bytes"]
        out["offloaded_per_step"] = [b - a for a, b in zip(moved, moved[1:])]
        out["diverged"] = rep["steps_diverged"]
        off.close()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--backend", default="aot_eager")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--ssd-dir", default=None)
    ap.add_argument("--json", default=None, help="write every run's values here")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one is not None:
        print(json.dumps(run_one(json.loads(a.one))))
        return 0
    base = a.ssd_dir or tempfile.mkdtemp(prefix="tio-saved-")
    res = {}
    for mode in MODES:
        d = tempfile.mkdtemp(dir=base)
        cfg = dict(mode=mode, preset=a.preset, backend=a.backend, batch=a.batch, seq=a.seq,
                   steps=a.steps, ssd=d)
        p = subprocess.run([sys.executable, __file__, "--one", json.dumps(cfg)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr[-3000:])
            return 1
        res[mode] = json.loads(p.stdout.strip().splitlines()[-1])
    anchor = res["compiled"]
    print("| mode | saved bytes in memory at the turn (MB) | vs compiled | teraio tracked peak (MB)"
          " | MB offloaded per step | bitwise |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for mode in MODES:
        r = res[mode]
        t = statistics.median(r["turn"][WARM:])
        ratio = t / statistics.median(anchor["turn"][WARM:])
        same = r["losses"] == anchor["losses"] and r["params"] == anchor["params"]
        peak = f"{r['peak_managed'] / 1e6:.2f}" if "peak_managed" in r else ""
        per = (f"{statistics.median(r['offloaded_per_step'][WARM:]) / 1e6:.1f}"
               if "offloaded_per_step" in r else "")
        print(f"| {mode} | {t / 1e6:.2f} | {ratio:.2f}x | {peak} | {per} | "
              f"{'yes' if same else 'NO'} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
