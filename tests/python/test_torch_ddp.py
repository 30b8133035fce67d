"""DDP with 2 gloo ranks on CPU: training under teraio gives the same losses and parameters as
DDP without teraio (one executor per rank, per-rank SSD directories via "{rank}")."""
import contextlib
import os
import sys

from _dist import EXAMPLES, spawn_ranks, torch

import teraio  # noqa: E402

STEPS = 5


def _run(rank, world, init, out_dir, use_teraio):
    sys.path.insert(0, EXAMPLES)
    from llama_tiny import LlamaConfig, LlamaTiny, make_batch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from train_llama_tiny import param_digest

    cfg = LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344)
    model = LlamaTiny(cfg, seed=0)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, foreach=True)
    off = None
    if use_teraio:
        off = teraio.Offloader(ddp, opt, memory_budget=0.5,
                               ssd_dirs=[os.path.join(out_dir, "ssd{rank}")], host_memory="16MiB",
                               options=teraio.OffloadOptions(min_tensor_bytes="16KiB"))
    losses = []
    for i in range(STEPS):
        tokens = make_batch(cfg, 2, 32, i, seed=1000 + rank)
        ctx = off.step() if off else contextlib.nullcontext()
        with ctx:
            loss = ddp(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(loss.reshape(-1, cfg.vocab),
                                                     tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
    rep = {}
    if off:
        off.restore()
        rep = {k: v for k, v in off.report().items() if k not in ("plan", "engine")}
        rep["last_divergence"] = off.last_divergence
    return dict(losses=losses, params=param_digest(model), report=rep)


def _body(rank, world, init, out_dir):
    return {"plain": _run(rank, world, init, out_dir, False),
            "teraio": _run(rank, world, init, out_dir, True)}


def test_ddp_two_gloo_ranks(tmp_path):
    res = spawn_ranks(_body, tmp_path)
    for r, x in enumerate(res):
        print(f"\nrank {r}: plain {x['plain']['losses']}\nrank {r}: teraio {x['teraio']['losses']}"
              f"\nrank {r}: report {x['teraio']['report']}")
        assert x["teraio"]["losses"] == x["plain"]["losses"]
        assert x["teraio"]["params"] == x["plain"]["params"]
        # DDP: 2 warm-up steps (bucket rebuild in the second), 1 profiled, the rest offloaded
        assert x["teraio"]["report"]["steps_offloaded"] == STEPS - 3
        assert x["teraio"]["report"]["steps_diverged"] == 0
        assert x["teraio"]["report"]["bytes_offloaded"] > 0
    # DDP keeps the replicas identical
    assert res[0]["teraio"]["params"] == res[1]["teraio"]["params"]


DDP_BUDGET = 3 << 20  # tracked bytes; this model's unconstrained tracked peak is ~6 MiB


def _run_budget(rank, world, init, out_dir, use_teraio):
    """As _run, with an absolute budget, recording the tracked peaks after every step."""
    import warnings

    sys.path.insert(0, EXAMPLES)
    from llama_tiny import LlamaConfig, LlamaTiny, make_batch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from train_llama_tiny import param_digest

    cfg = LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344)
    model = LlamaTiny(cfg, seed=0)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    off = None
    if use_teraio:
        off = teraio.Offloader(ddp, opt, memory_budget=DDP_BUDGET,
                               ssd_dirs=[os.path.join(out_dir, "ssd{rank}")],
                               options=teraio.OffloadOptions(min_tensor_bytes="16KiB"))
    losses, peaks = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in range(STEPS):
            tokens = make_batch(cfg, 2, 32, i, seed=1000 + rank)
            with off.step() if off else contextlib.nullcontext():
                out = ddp(tokens[:, :-1])
                loss = torch.nn.functional.cross_entropy(out.reshape(-1, cfg.vocab),
                                                         tokens[:, 1:].reshape(-1))
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.item())
            if off:
                r = off.report()
                peaks.append([r["unplanned_peak_bytes"], r["peak_managed_bytes"],
                              r["unplanned_bytes_offloaded"]])
    rep = {}
    if off:
        off.restore()
        rep = {k: v for k, v in off.report().items() if k not in ("plan", "engine")}
    return dict(losses=losses, params=param_digest(model), report=rep, peaks=peaks)


def _body_budget(rank, world, init, out_dir):
    return {"plain": _run_budget(rank, world, init, out_dir, False),
            "teraio": _run_budget(rank, world, init, out_dir, True)}


def test_ddp_unplanned_steps_stay_within_the_budget(tmp_path):
    """DDP's warm-up and profiled steps (no plan yet) are kept within an absolute budget, as on
    one process: the gradient buckets its allreduce uses are never moved (the collective may
    still be running when its operator returns), everything else is offloaded reactively. The
    results are DDP's without teraio, bitwise; the tracked peak stays within the budget in every
    step."""
    res = spawn_ranks(_body_budget, tmp_path)
    for r, x in enumerate(res):
        t = x["teraio"]
        print(f"\nrank {r}: per step [unplanned peak, planned peak, unplanned bytes offloaded]: "
              f"{t['peaks']}")
        assert t["losses"] == x["plain"]["losses"]
        assert t["params"] == x["plain"]["params"]
        rep = t["report"]
        assert rep["steps_offloaded"] == STEPS - 3 and rep["steps_diverged"] == 0, rep
        assert rep["unconstrained_peak_bytes"] > DDP_BUDGET, rep
        # every unplanned step (2 warm-up, 1 profiled) kept within the budget, offloading
        assert 0 < t["peaks"][0][0] and 0 < t["peaks"][0][2], t["peaks"]
        for unplanned_peak, planned_peak, _ in t["peaks"]:
            assert unplanned_peak <= DDP_BUDGET, t["peaks"]
            assert planned_peak <= DDP_BUDGET, t["peaks"]
    assert res[0]["teraio"]["params"] == res[1]["teraio"]["params"]
