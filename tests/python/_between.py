"""Helpers of the tests of what happens between steps: each case runs in a child process (a
segfault fails its test instead of ending pytest), training the example Llama a few steps
plainly and under an Offloader, then running the same code between steps on both.

run_case(body, tmp) runs PRELUDE + body in a child and returns (returncode, stdout + stderr).
The prelude defines:
    fresh()            -> (model, optimizer), seeded, identical on every call
    train(m, o, off, n) n steps; the gradients are zeroed at each step's start, so that they
                        live (and are offloaded) between steps as the parameters and states do
    make_off(m, o, **kw) an Offloader on an SSD directory at half the profiled peak
    batch(i)           step i's tokens
    digest(obj)        sha256 of torch.save(obj)'s bytes
    offloaded(m, o)    how many parameters, gradients and optimizer states hold no memory
"""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRELUDE = r'''
import hashlib, io, os, sys, warnings
import torch
import teraio
from teraio.examples.llama_tiny import LlamaConfig, LlamaTiny, make_batch

CFG = LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344)
TMP = sys.argv[1]


def fresh():
    m = LlamaTiny(CFG, seed=0)
    return m, torch.optim.AdamW(m.parameters(), lr=1e-3)


def batch(i):
    return make_batch(CFG, 2, 32, i)


def train(m, o, off, n, start=0):
    import contextlib
    for i in range(start, start + n):
        with off.step() if off is not None else contextlib.nullcontext():
            o.zero_grad(set_to_none=False)
            loss = m.loss(batch(i))
            loss.backward()
            o.step()


def make_off(m, o, budget=0.5, **kw):
    d = os.path.join(TMP, "ssd%d" % len(os.listdir(TMP)))
    os.makedirs(d)
    opts = dict(min_tensor_bytes="16KiB")
    opts.update(kw.pop("options", {}))
    return teraio.Offloader(m, o, memory_budget=budget, ssd_dirs=[d],
                            options=teraio.OffloadOptions(**opts), **kw)


def digest(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return hashlib.sha256(buf.getvalue()).hexdigest()


def tensors(m, o):
    out = []
    for n, p in m.named_parameters():
        out.append(("param " + n, p))
        if p.grad is not None:
            out.append(("grad " + n, p.grad))
    for p, s in o.state.items():
        for k, v in s.items():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                out.append(("state " + k, v))
    return out


def offloaded(m, o):
    return sum(1 for _, t in tensors(m, o) if t.numel() and t.untyped_storage().nbytes() == 0)
'''


def run_case(body, tmp, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "examples"),
                                         env.get("PYTHONPATH", "")])
    code = PRELUDE + "\n" + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code, str(tmp)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout + p.stderr
