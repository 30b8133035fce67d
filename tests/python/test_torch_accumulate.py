"""Gradient accumulation and skipped optimizer steps under teraio.Offloader, bitwise against plain
PyTorch (the same seeded loop without teraio), and still offloading.

- micro-batches inside one `with off.step()` (one optimizer step at its end);
- micro-batches as separate `off.step()` blocks (the optimizer steps in every ACC-th block);
- optimizer steps skipped on overflow, GradScaler style (`found_inf` decides, the gradients are
  zeroed either way);
- a real torch.amp.GradScaler on the CPU, with inf injected into a gradient in chosen steps
  (the same operators in every step: only the value added differs), so that it skips
  optimizer.step() there;
- one micro-batch per step with the optimizer in every 4th: each kind profiled once.

Each loop runs in a fresh interpreter: the Offloader installs the process's CPU allocator.
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_LOOP = r"""
import hashlib, json, os, sys, tempfile, warnings
sys.path.insert(0, os.path.join(sys.argv[1], "examples"))
import torch
from llama_tiny import LlamaConfig, LlamaTiny, make_batch
from train_llama_tiny import PRESETS, param_digest

scenario, offload, ssd = sys.argv[2], sys.argv[3] == "1", sys.argv[4]
STEPS = 14
ACC = 4 if scenario == "blocks4" else 3
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=3)
zero, inf = torch.zeros(()), torch.full((), float("inf"))
torch.manual_seed(0)
cfg = LlamaConfig(**PRESETS["tiny"])
model = LlamaTiny(cfg, seed=0)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
off = None
if offload:
    import teraio
    off = teraio.Offloader(model, opt, memory_budget=0.5, ssd_dirs=[ssd],
                           options=teraio.OffloadOptions(min_tensor_bytes="16KiB"))
losses = []


def states():
    h = hashlib.sha256()
    for p in model.parameters():
        for k, v in sorted(opt.state.get(p, {}).items()):
            h.update(k.encode())
            h.update(v.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def micro(i):
    loss = model.loss(make_batch(cfg, 2, 32, i)) / ACC
    loss.backward()
    losses.append(loss.item())


def skip(i):
    return i % 5 == 3 or i == 4  # "overflow" in steps 3, 4 (two in a row), 8, 13


for i in range(STEPS):
    with off.step() if off is not None else __import__("contextlib").nullcontext():
        if scenario == "inside":            # ACC micro-batches in one step
            for j in range(ACC):
                micro(i * ACC + j)
            opt.step()
            opt.zero_grad(set_to_none=True)
        elif scenario in ("blocks", "blocks4"):  # one micro-batch per step, optimizer every ACC-th
            micro(i)
            if i % ACC == ACC - 1:
                opt.step()
                opt.zero_grad(set_to_none=True)
        elif scenario == "skip":            # GradScaler style: no update on overflow
            micro(i)
            if not skip(i):
                opt.step()
            opt.zero_grad(set_to_none=True)
        elif scenario == "scaler":          # torch.amp.GradScaler: skips on inf gradients
            loss = model.loss(make_batch(cfg, 2, 32, i))
            scaler.scale(loss).backward()
            next(model.parameters()).grad.add_(inf if skip(i) else zero)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
out = {"losses": losses, "scale": scaler.get_scale() if scenario == "scaler" else None}
rep = None
if off is not None:
    off.restore()
    rep = off.report()
    off.close()
out["params"] = param_digest(model)
out["states"] = states()
out["report"] = rep and {k: rep.get(k) for k in (
    "steps_offloaded", "steps_diverged", "steps_profiled", "bytes_offloaded", "replans",
    "unplanned_bytes_offloaded", "peak_managed_bytes", "memory_budget", "updates_skipped",
    "updates_beyond_plan", "steps_passthrough")}
out["kinds"] = rep and rep.get("kinds")
print(json.dumps(out))
"""


def _run(scenario, offload):
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.access("/dev/shm", os.W_OK)
                                     else None) as d:
        p = subprocess.run([sys.executable, "-c", _LOOP, ROOT, scenario, "1" if offload else "0",
                            d], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{scenario}: exit {p.returncode}\n{p.stderr[-4000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@pytest.mark.parametrize("scenario", ["inside", "blocks", "skip"])
def test_accumulation_and_skipped_steps_bitwise_and_offloading(scenario):
    plain, _ = _run(scenario, False)
    got, err = _run(scenario, True)
    assert got["losses"] == plain["losses"]
    assert got["params"] == plain["params"]
    assert got["states"] == plain["states"]  # exp_avg, exp_avg_sq, step: exactly plain's
    rep = got["report"]
    print(f"\n[{scenario}] {rep}")
    assert rep["bytes_offloaded"] > 0, rep
    # a plan per kind of step, made once: most steps run planned, none diverges for good
    assert rep["steps_offloaded"] >= 7, rep
    assert rep["steps_diverged"] <= 4, rep


def _bitwise(scenario):
    plain, _ = _run(scenario, False)
    got, err = _run(scenario, True)
    assert got["losses"] == plain["losses"]
    assert got["params"] == plain["params"]
    assert got["states"] == plain["states"]
    assert got["scale"] == plain["scale"]
    print(f"\n[{scenario}] {got['report']}")
    return got["report"], got["kinds"], err


def test_gradscaler_skipped_steps_planned_without_divergence():
    """A real GradScaler skips optimizer.step() in 4 of 14 steps (inf in a gradient): the one
    kind of step is profiled once; each skipped update is skipped inside its plan (the step
    runs planned, nothing is brought back, no warning); bitwise plain PyTorch, scale
    included (512 = 2**10 halved on each of the 4 skips, grown back twice)."""
    rep, kinds, err = _bitwise("scaler")
    assert rep["steps_profiled"] == 1, rep
    assert rep["steps_diverged"] == 0, (rep, err[-2000:])
    assert rep["updates_skipped"] == 4, rep
    assert rep["steps_offloaded"] == 14 - 1 - 1, rep  # all but the warm-up and profiled steps
    assert rep["bytes_offloaded"] > 0, rep
    assert "RuntimeWarning" not in err, err[-2000:]
    assert len(kinds) == 1 and kinds[0]["steps_offloaded"] == 12, kinds


def test_per_micro_batch_steps_profile_each_kind_once():
    """One micro-batch per off.step(), optimizer.step() in every 4th: four kinds (the first
    cycle's blocks before any optimizer state exists; then the block after zero_grad, the
    blocks that accumulate, the block that updates), each profiled once: 4 profiled steps, not
    2N-1 per cycle. The first time the updating block comes, it runs the accumulating blocks'
    plan and its update beyond it, within the budget (updates_beyond_plan), no divergence;
    every kind then runs its plan."""
    rep, kinds, err = _bitwise("blocks4")
    assert rep["steps_profiled"] == 4, rep
    assert rep["steps_diverged"] == 0, (rep, err[-2000:])
    assert rep["updates_beyond_plan"] == 2, rep  # steps 3 and 7; step 11 is profiled
    assert rep["steps_offloaded"] == 14 - 1 - 4, rep
    assert sorted(k["optimizer_steps"] for k in kinds) == [False, False, False, True], kinds
    for k in kinds:  # each kind within its own budget (a fraction of its own peak)
        # (the updating kind, profiled in step 11, has no planned step yet in 14)
        assert k["steps_offloaded"] == 0 or 0 < k["peak_managed_bytes"] <= k["memory_budget"], k
        assert k["memory_budget"] <= 0.5 * k["unconstrained_peak_bytes"] + 1, k
    assert rep["memory_budget"] == max(k["memory_budget"] for k in kinds), rep
