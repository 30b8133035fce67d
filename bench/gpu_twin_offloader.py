#!/usr/bin/env python3
"""Write the Offloader trace that bench_gpu_twin runs by default (bench/data/offloader-llama.tio):
a small Llama-style model (python/teraio/examples/llama_tiny.py: 4 layers of width 256, GQA,
SwiGLU) trained for three steps on the CPU under teraio.Offloader, whose profiled step is saved
with Offloader.save_plan. Kernel durations are this machine's CPU operator times.

    .venv/bin/python bench/gpu_twin_offloader.py [OUT.tio]
"""
import os
import shutil
import sys
import tempfile

import torch

import teraio
from teraio.examples.llama_tiny import LlamaConfig, LlamaTiny, make_batch, train_steps


def main(out: str) -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab=2048, dim=256, layers=4, heads=8, kv_heads=4, ffn=688, max_seq=128)
    model = LlamaTiny(cfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tempfile.TemporaryDirectory(prefix="tio-twin-offloader-") as d:
        os.mkdir(os.path.join(d, "ssd"))
        off = teraio.Offloader(model, opt, memory_budget=0.5, ssd_dirs=[os.path.join(d, "ssd")],
                               options=teraio.OffloadOptions(min_tensor_bytes="8KiB"))
        train_steps(model, opt, off, lambda i: make_batch(cfg, batch=4, seq=128, step=i), steps=3)
        off.save_plan(os.path.join(d, "step.plan"))
        shutil.copyfile(os.path.join(d, "step.plan.trace"), out)
        off.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "data", "offloader-llama.tio"))
