"""The 2-stage 1F1B pipeline over gloo (test_torch_pipeline.py's model, one Offloader per stage)
saves each stage's trace and plan (Offloader.save_plan); `teraio simulate` simulates the two
stages together from those files (docs/simulator.md, "Pipeline stages"): the c10d send and
receive operators pair up across the stages, every stage is simulated at its own plan's budget,
and the coupled iteration is the last stage's end."""
import json
import os
import subprocess

import pytest
from _dist import spawn_ranks, torch
from test_analysis import cli
from test_torch_pipeline import BATCH, CLASSES, DIM, MICRO, _stage_module

import teraio  # noqa: E402

STEPS = 3


def _body(rank, world, init, out_dir):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    mod = _stage_module(rank)
    stage = PipelineStage(mod, rank, world, torch.device("cpu"))
    sched = Schedule1F1B(stage, n_microbatches=MICRO, loss_fn=torch.nn.functional.cross_entropy)
    opt = torch.optim.AdamW(mod.parameters(), lr=1e-3, foreach=True)
    off = teraio.Offloader(mod, opt, memory_budget=0.5,
                           ssd_dirs=[os.path.join(out_dir, "ssd{rank}")],
                           options=teraio.OffloadOptions(min_tensor_bytes="8KiB"))
    g = torch.Generator().manual_seed(7)
    for _ in range(STEPS):
        x = torch.randn(BATCH, DIM, generator=g)
        y = torch.randint(0, CLASSES, (BATCH,), generator=g)
        with off.step():
            if rank == 0:
                sched.step(x)
            else:
                sched.step(target=y, losses=[])
            opt.step()
            opt.zero_grad(set_to_none=True)
    path = os.path.join(out_dir, f"stage{rank}.plan")
    off.save_plan(path)
    budget = off.report()["memory_budget"]
    off.restore()
    off.close()
    return dict(plan=path, trace=path + ".trace", budget=budget)


def test_gloo_pipeline_stages_simulated_together(tmp_path):
    exe = cli()
    if not exe:
        pytest.fail("the teraio CLI is not built (build/teraio)")
    res = spawn_ranks(_body, tmp_path)
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({
        "name": "gloo-test", "gpus": 2, "gpu_memory_bytes": 1 << 30, "gpu_reserve_bytes": 0,
        "pcie_h2d_Bps": 1e9, "pcie_d2h_Bps": 1e9, "ssd_count": 1, "ssd_read_Bps": 1e9,
        "ssd_write_Bps": 1e9, "ssd_efficiency": 1.0, "ssd_latency_s": 1e-4,
        "host_memory_bytes": 1 << 34, "host_offload_cap_bytes": 0, "host_memory_Bps": 1e10}))
    args = [exe, "simulate", res[0]["trace"], res[1]["trace"], "--hw", str(hw),
            "--plan", res[0]["plan"], "--plan", res[1]["plan"], "--json", "--demand-evict"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    print(json.dumps({k: v for k, v in out.items() if k != "stages"}),
          [(s["stage_end_s"], s["pipeline_wait_s"]) for s in out["stages"]])
    assert out["pipeline_stages"] == 2 and len(out["stages"]) == 2
    assert out["oom"] is False
    for r, s in enumerate(out["stages"]):
        assert s["pipeline_stage"] == r
        assert s["capacity_bytes"] == res[r]["budget"]  # each stage at its own plan's budget
        assert s["iteration_s"] == out["iteration_s"]
        assert s["stage_end_s"] <= out["iteration_s"]
    # the coupled makespan: no stage finishes earlier than its own kernels (the receives now
    # take the time their messages need, not the time the profiler saw), and the last one
    # defines it
    assert max(s["stage_end_s"] for s in out["stages"]) == pytest.approx(out["iteration_s"])
    assert out["ideal_s"] <= out["iteration_s"]
    # coupled: stage 1's first receive waits for stage 0's first forward and its send
    assert out["stages"][1]["pipeline_wait_s"] > 0
