"""Shared by the 2-rank gloo tests (test_torch_ddp.py, test_torch_fsdp.py, ...): the examples
folder, and one spawn that runs a test's body in every rank inside a gloo process
group, with per-rank SSD directories ("ssd{rank}") and each rank's result handed back as JSON."""
import json
import os
import signal
import sys
import warnings

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


def _worker(rank, world, init, out_dir, body):
    import faulthandler

    faulthandler.enable(all_threads=True)  # a rank that aborts prints every thread's stack
    torch.set_num_threads(1)  # two ranks on a 2-core machine
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        res = body(rank, world, init, out_dir)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


def aborted_ranks(processes):
    """The ranks among the spawned processes that died of SIGABRT, after waiting for all."""
    for p in processes:
        p.join()
    return [r for r, p in enumerate(processes) if p.exitcode == -signal.SIGABRT]


def spawn_ranks(body, out_dir, world=2):
    """Runs body(rank, world, init, out_dir) in `world` spawned ranks (body: a module-level
    function returning something JSON can write); returns the ranks' results in rank order."""
    import torch.multiprocessing as mp

    for r in range(world):
        (out_dir / f"ssd{r}").mkdir(exist_ok=True)
    for attempt in (1, 2):
        init = "file://" + str(out_dir / f"rendezvous{attempt}")
        ctx = mp.spawn(_worker, args=(world, init, str(out_dir), body), nprocs=world,
                       join=False)
        try:
            while not ctx.join():
                pass
            break
        except (mp.ProcessExitedException, mp.ProcessRaisedException):
            # Seen in ~1 of 15 runs of the FSDP2 file on the 2-core machine, with and without
            # teraio's page discards: a rank aborts with "terminate called without an active
            # exception" (a joinable C++ thread destroyed: gloo/c10d), no Python error. Retried
            # once, loudly; a second abort, or any other death, fails the test. Open question
            # (docs/decisions.md, released CPU storages under FSDP); faulthandler above prints
            # the stacks. The rank that aborted is found by its exit status, not by which
            # failure the join saw first: its peer may raise first ("Connection closed by
            # peer"), which is a consequence of the abort, not another failure.
            aborted = aborted_ranks(ctx.processes)
            if attempt == 2 or not aborted:
                raise
            msg = (f"spawn_ranks: rank {aborted[0]} aborted (SIGABRT) on attempt 1; "
                   "retrying once")
            print(msg, file=sys.stderr)
            warnings.warn(msg, RuntimeWarning)
    return [json.load(open(out_dir / f"rank{r}.json")) for r in range(world)]
