"""torch.compile per block under teraio.Offloader, bitwise against the same compiled model
trained without teraio (same backend), and offloading in the steady steps.

Each transformer block of the example model is compiled on its own (block.compile(), or
torch.compile(block) set in its place, as TorchTitan does); the Offloader runs each compiled
call as one region of the step (teraio/torch/_compile.py) and moves tensors at region
boundaries. Scenarios:

- "accumulate": the whole model compiled, torch.compile(model) (backend aot_eager; under teraio
                split into its blocks, each compiled with the model's options), three
                micro-batches per step (gradients accumulate across region calls);
- "reshape":    torch.compile(block) set as the child (aot_eager), one micro-batch per step;
                the sequence length changes mid-run: the blocks recompile, and the new shape is
                a new kind of step with its own plan; then the first shape again;
- "inductor":   block.compile() with the default backend (inductor: C++ kernels, opaque), one
                micro-batch per step.

Each loop runs in a fresh interpreter (the Offloader installs the process's CPU allocator;
Dynamo's caches start empty).
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_LOOP = r"""
import hashlib, json, os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "examples"))
import torch
from llama_tiny import LlamaConfig, LlamaTiny, make_batch
from train_llama_tiny import PRESETS, param_digest

scenario, offload, ssd = sys.argv[2], sys.argv[3] == "1", sys.argv[4]
STEPS = 8
ACC = 3 if scenario == "accumulate" else 1
backend = "inductor" if scenario == "inductor" else "aot_eager"
torch.manual_seed(0)
cfg = LlamaConfig(**PRESETS["tiny"])
model = LlamaTiny(cfg, seed=0)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if scenario == "accumulate":  # the whole model (split into its blocks under teraio)
    model = torch.compile(model, backend=backend)
for i, blk in enumerate(model.layers):
    if scenario == "reshape":
        model.layers[i] = torch.compile(blk, backend=backend)
    elif scenario == "inductor":
        blk.compile(backend=backend)


def loss_of(tokens):  # LlamaTiny.loss through the (compiled) model's forward
    logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             tokens[:, 1:].reshape(-1))

off = None
if offload:
    import teraio
    off = teraio.Offloader(model, opt, memory_budget=0.5, ssd_dirs=[ssd],
                           options=teraio.OffloadOptions(min_tensor_bytes="4KiB"))


def seq(i):
    if scenario != "reshape":
        return 64
    return 96 if 4 <= i < 7 else 64


losses = []
per_step = []
for i in range(STEPS + (3 if scenario == "reshape" else 0)):
    with off.step() if off is not None else __import__("contextlib").nullcontext():
        for j in range(ACC):
            loss = loss_of(make_batch(cfg, 8, seq(i), i * ACC + j)) / ACC
            loss.backward()
            losses.append(loss.item())
        opt.step()
        opt.zero_grad(set_to_none=True)
    if off is not None:
        per_step.append(off.report()["bytes_offloaded"])
out = {"losses": losses, "params": param_digest(model)}
h = hashlib.sha256()
for p in model.parameters():
    for k, v in sorted(opt.state.get(p, {}).items()):
        h.update(k.encode())
        h.update(v.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
out["states"] = h.hexdigest()
# the graphs Dynamo compiled: the same in both runs (no block ran uncompiled, none compiled twice)
out["graphs"] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
if off is not None:
    off.restore()
with torch.no_grad():  # the compiled blocks outside any step: called as they are
    logits = model(make_batch(cfg, 2, 64, 999)[:, :-1])
out["eval"] = hashlib.sha256(logits.contiguous().view(-1).view(torch.uint8).numpy()
                             .tobytes()).hexdigest()
if off is not None:
    rep = off.report()
    out["report"] = {k: rep[k] for k in ("steps_offloaded", "steps_diverged", "steps_profiled",
                                         "bytes_offloaded", "replans")}
    out["per_step"] = per_step
    prog = off._prog
    out["regions"] = sorted({k[0] for k in prog.kernels if k[0].startswith("teraio.")})
    writer = {}  # tensor -> the first kernel that writes it
    for name, _, _, uses in prog.kernels:
        for j in range(0, len(uses), 2):
            if uses[j + 1] & teraio._core.USE_WRITE:
                writer.setdefault(uses[j], name)
    moved = set()
    for t, frm, to, *_ in off._plan.moves():
        gname = prog.tensors[t][3]
        if gname is not None and gname.startswith("_orig_mod."):  # torch.compile(model)'s
            gname = gname[len("_orig_mod."):]
        if gname is not None and gname.startswith("layers."):
            moved.add("block global")  # a block's parameter, gradient or optimizer state
        elif gname is None and writer.get(t, "").startswith("teraio.region.fwd["):
            moved.add("region activation")  # saved by a compiled block for its backward
    out["moved"] = sorted(moved)
    off.close()
print(json.dumps(out))
"""


def _run(scenario, offload):
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.access("/dev/shm", os.W_OK)
                                     else None) as d:
        p = subprocess.run([sys.executable, "-c", _LOOP, ROOT, scenario, "1" if offload else "0",
                            d], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"{scenario}: exit {p.returncode}\n{p.stderr[-4000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@pytest.mark.parametrize("scenario", ["accumulate", "reshape", "inductor"])
def test_compiled_blocks_bitwise_and_offloading(scenario):
    plain, _ = _run(scenario, False)
    got, err = _run(scenario, True)
    rep = got["report"]
    print(f"\n[{scenario}] {rep} per step {got['per_step']}")
    assert got["losses"] == plain["losses"]
    assert got["params"] == plain["params"]
    assert got["states"] == plain["states"]
    assert got["eval"] == plain["eval"]
    # the blocks ran as regions (forward, backward begin and end), and the plan moved bytes in
    # the steady steps (after the warm-up and profiled steps)
    assert {"teraio.region.fwd[layers.0]", "teraio.region.bwd[layers.1]",
            "teraio.region.bwd_end[layers.0]"} <= set(got["regions"]), got["regions"]
    steady = got["per_step"][-1] - got["per_step"][-3]
    assert steady > 0, got["per_step"]
    assert got["moved"] == ["block global", "region activation"], got["moved"]
    assert rep["steps_offloaded"] >= 3, rep
    assert rep["steps_diverged"] == 0, rep
    per = got["per_step"]
    if scenario == "accumulate":
        # the whole model: one graph for it in the plain run; under teraio its blocks, compiled
        # with its options, one graph for both (they share their code, their parameters are the
        # graph's inputs). Every micro-batch's regions, 3 per step: each step after the
        # profiled one offloads
        assert plain["graphs"] == 1 and got["graphs"] == 1, (plain["graphs"], got["graphs"])
        assert rep["steps_offloaded"] == len(per) - 2 and all(
            b > a for a, b in zip(per[1:], per[2:])), per
    else:
        assert got["graphs"] == plain["graphs"], (got["graphs"], plain["graphs"])
    if scenario == "reshape":
        # steps 0-3 length 64 (one graph: the blocks share their code, their parameters are
        # the graph's inputs), steps 4-6 length 96 (recompiled once, with a dynamic length: one
        # more graph), steps 7-10 length 64 again (the dynamic graph runs it: no more). The new
        # length is a new kind of step: profiled once (step 4), then offloaded (steps 5, 6);
        # back at the first length the first kind's plan runs at once (step 7 offloads), and
        # nothing diverges
        assert plain["graphs"] == 2, plain["graphs"]
        assert rep["steps_profiled"] == 2 and rep["replans"] == 2, rep
        assert per[4] == per[3] and per[4] < per[5] < per[6] < per[7], per
    assert "ran uncompiled" not in err
