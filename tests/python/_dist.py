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


_FAULT_LOG = None  # the rank's fault log, kept open for faulthandler


def _fault_log(out_dir, rank):
    return os.path.join(out_dir, f"fault{rank}.log")


def _worker(rank, world, init, out_dir, body):
    import faulthandler

    global _FAULT_LOG
    # a rank that aborts writes every thread's stack to its fault log (spawn_ranks prints it):
    # the parent tells an abort from another death by its first line, since the dump of an
    # abort's threads may itself crash and the rank then dies of SIGSEGV, not SIGABRT
    _FAULT_LOG = open(_fault_log(out_dir, rank), "a")  # spawn_ranks empties it per attempt
    faulthandler.enable(file=_FAULT_LOG, all_threads=True)
    torch.set_num_threads(1)  # two ranks on a 2-core machine
    try:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    except RuntimeError as ex:  # before the test's body: spawn_ranks may retry (init_failed)
        if "connectFullMesh" in str(ex):
            open(_init_mark(out_dir, rank), "w").close()
        raise
    try:
        res = body(rank, world, init, out_dir)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


def _init_mark(out_dir, rank):
    return os.path.join(out_dir, f"initfail{rank}")


def init_failed(out_dir, world):
    """Whether a rank's gloo could not connect the ranks (connectFullMesh) while the process
    group was being made, before the test's body ran."""
    return any(os.path.exists(_init_mark(out_dir, r)) for r in range(world))


def aborted_ranks(processes, out_dir=None):
    """The ranks among the spawned processes that aborted, after waiting for all: died of
    SIGABRT, or of another signal while dumping an abort (their fault log in out_dir begins
    with Python's "Fatal Python error: Aborted"). Each dead rank's fault log goes to stderr."""
    for p in processes:
        p.join()
    out = []
    for r, p in enumerate(processes):
        log = ""
        if out_dir is not None and p.exitcode is not None and p.exitcode < 0:
            try:
                with open(_fault_log(out_dir, r)) as f:
                    log = f.read()
            except OSError:
                pass
            if log:
                print(f"rank {r} (exit status {p.exitcode}) fault log:\n{log}", file=sys.stderr)
        if p.exitcode == -signal.SIGABRT or (
                p.exitcode is not None and p.exitcode < 0
                and log.lstrip().startswith("Fatal Python error: Aborted")):
            out.append(r)
    return out


def spawn_ranks(body, out_dir, world=2):
    """Runs body(rank, world, init, out_dir) in `world` spawned ranks (body: a module-level
    function returning something JSON can write); returns the ranks' results in rank order."""
    import torch.multiprocessing as mp

    for r in range(world):
        (out_dir / f"ssd{r}").mkdir(exist_ok=True)
    retried = set()  # the causes retried already: each at most once
    for attempt in (1, 2, 3):
        for r in range(world):
            open(_fault_log(out_dir, r), "w").close()
            if os.path.exists(_init_mark(out_dir, r)):
                os.remove(_init_mark(out_dir, r))
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
            # once, loudly (also when the abort's dump of the threads crashed and the rank
            # died of SIGSEGV: its fault log tells); a second abort, or any other death, fails
            # the test. Open question (docs/decisions.md, released CPU storages under FSDP);
            # faulthandler above writes the stacks. The rank that aborted is found by its exit
            # status and fault log, not by which failure the join saw first: its peer may raise
            # first ("Connection closed by peer"), a consequence of the abort, not another
            # failure.
            # Also retried once: gloo failing to connect the ranks while the process group is
            # made (a rank's connectFullMesh: "Connection closed by peer"), seen once on the
            # loaded 2-core machine on the attempt after an abort; the test's body had not run.
            aborted = aborted_ranks(ctx.processes, out_dir)
            if aborted and "abort" not in retried:
                retried.add("abort")
                msg = (f"spawn_ranks: rank {aborted[0]} aborted (SIGABRT) on attempt {attempt}; "
                       "retrying once")
            elif not aborted and init_failed(out_dir, world) and "init" not in retried:
                retried.add("init")
                msg = (f"spawn_ranks: gloo could not connect the ranks on attempt {attempt} "
                       "(connectFullMesh), before the test's body ran; retrying once")
            else:
                raise
            print(msg, file=sys.stderr)
            warnings.warn(msg, RuntimeWarning)
    return [json.load(open(out_dir / f"rank{r}.json")) for r in range(world)]
