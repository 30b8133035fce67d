"""Pipeline parallelism (torch.distributed.pipelining) with 2 stages over gloo on CPU, one
Offloader per stage: a stage's step is everything its rank runs in one schedule.step() plus its
optimizer step. Schedule1F1B and ScheduleGPipe, each bitwise against the same pipeline without
teraio (losses on the last stage, every stage's parameters), bytes offloaded on each rank, the
tracked peak within each rank's budget, per-rank SSD directories ("{rank}"). The P2P send/recv
buffers are c10d operators' tensors: pinned (never moved) by the dispatch mode."""
import contextlib
import hashlib
import os

from _dist import spawn_ranks, torch

import teraio  # noqa: E402

K_COMM, F_PINNED = 1, 2  # include/teraio/trace.h

STEPS = 5
MICRO = 4
DIM, HID, CLASSES, BATCH = 128, 512, 16, 128


def _stage_module(rank):
    """Stage `rank` of a 4-block MLP (2 blocks per stage), the same weights in every run."""
    nn = torch.nn
    torch.manual_seed(100 + rank)
    layers = []
    for _ in range(2):
        layers += [nn.Linear(DIM, HID), nn.GELU(), nn.Linear(HID, DIM)]
    if rank == 1:
        layers += [nn.LayerNorm(DIM), nn.Linear(DIM, CLASSES)]
    return nn.Sequential(*layers)


def _digest(mod):
    h = hashlib.sha256()
    for n, p in mod.named_parameters():
        h.update(n.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _comm_kernels(prog):
    """[(operator, its flags, [(tensor bytes, tensor flags)])] of the profiled step's operators
    in the c10d namespace (the P2P sends and receives)."""
    out = []
    for name, _, flags, uses in prog.kernels:
        if name.startswith("c10d."):
            out.append((name, flags, [(prog.tensors[uses[i]][0], prog.tensors[uses[i]][2])
                                      for i in range(0, len(uses), 2)]))
    return out


def _pipeline(rank, world, out_dir, schedule, use_teraio):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    mod = _stage_module(rank)
    stage = PipelineStage(mod, rank, world, torch.device("cpu"))
    sched_cls = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe}[schedule]
    sched = sched_cls(stage, n_microbatches=MICRO, loss_fn=torch.nn.functional.cross_entropy)
    opt = torch.optim.AdamW(mod.parameters(), lr=1e-3, foreach=True)
    off = None
    if use_teraio:
        off = teraio.Offloader(mod, opt, memory_budget=0.5,
                               ssd_dirs=[os.path.join(out_dir, "ssd{rank}")],
                               options=teraio.OffloadOptions(min_tensor_bytes="8KiB"))
    losses = []
    g = torch.Generator().manual_seed(7)
    for _ in range(STEPS):
        x = torch.randn(BATCH, DIM, generator=g)
        y = torch.randint(0, CLASSES, (BATCH,), generator=g)
        with off.step() if off else contextlib.nullcontext():
            if rank == 0:
                sched.step(x)
            else:
                mb = []
                sched.step(target=y, losses=mb)
                losses.append([m.item() for m in mb])
            opt.step()
            opt.zero_grad(set_to_none=True)
    rep = {}
    if off:
        off.restore()
        rep = {k: v for k, v in off.report().items() if k not in ("plan", "engine")}
        rep["last_divergence"] = off.last_divergence
        rep["comm"] = _comm_kernels(off._prog)
        off.close()
    return dict(losses=losses, params=_digest(mod), report=rep)


def _body(rank, world, init, out_dir):
    out = {}
    for schedule in ("1f1b", "gpipe"):
        out[schedule] = {"plain": _pipeline(rank, world, out_dir, schedule, False),
                         "teraio": _pipeline(rank, world, out_dir, schedule, True)}
    return out


def test_pipeline_two_stages_gloo(tmp_path):
    res = spawn_ranks(_body, tmp_path)
    for schedule in ("1f1b", "gpipe"):
        for r, x in enumerate(res):
            p, t = x[schedule]["plain"], x[schedule]["teraio"]
            print(f"\n{schedule} rank {r}: plain {p['losses']}\n{schedule} rank {r}: teraio "
                  f"{t['losses']}\n{schedule} rank {r}: report {t['report']}")
            assert t["losses"] == p["losses"]
            assert t["params"] == p["params"]
            rep = t["report"]
            assert rep["steps_diverged"] == 0, rep
            assert rep["steps_offloaded"] == STEPS - 2, rep
            assert rep["bytes_offloaded"] > 0, rep
            assert 0 < rep["peak_managed_bytes"] <= rep["memory_budget"], rep
            # the P2P transfers are c10d operators: COMM kernels whose tensors are pinned (never
            # moved, so never offloaded while gloo may still read or write them); big enough
            # (>= min_tensor_bytes) that without the pin the planner could move them
            comm = rep["comm"]
            assert {n for n, _, _ in comm} == {"c10d.send.default", "c10d.recv_.default"}, comm
            assert len(comm) == 2 * MICRO, comm  # each micro-batch: forward and backward
            for name, kflags, tensors in comm:
                assert kflags & K_COMM, comm
                assert tensors and all(f & F_PINNED and b >= 8192 for b, f in tensors), comm
        assert len(res[1][schedule]["plain"]["losses"]) == STEPS
