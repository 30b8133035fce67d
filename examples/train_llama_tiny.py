#!/usr/bin/env python3
"""Train the small Llama-style decoder (examples/llama_tiny.py) with or without teraio.

    python examples/train_llama_tiny.py --steps 6                       # no offloading
    python examples/train_llama_tiny.py --steps 6 --budget 0.5 --ssd-dir /tmp/tio
    python examples/train_llama_tiny.py --steps 6 --budget 0.5 --host-memory 1GiB --json

--budget below 1 is a fraction of the unconstrained tracked peak (measured in the profiled step);
otherwise a size ("200MiB"). --json prints losses, a hash of the final parameters, the teraio
report and the process's peak RSS, for tests and benchmarks: peak_rss_bytes (whole process,
including the final Offloader.restore() that brings every tensor back and the parameter digest),
train_peak_rss_bytes (whole process until the end of the last training step), and their
counterparts for the steps after --steady-after.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from llama_tiny import LlamaConfig, LlamaTiny, make_batch, train_steps  # noqa: E402

PRESETS = {
    "tiny": dict(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344),
    "small": dict(vocab=4096, dim=256, layers=4, heads=8, kv_heads=4, ffn=688),
    "medium": dict(vocab=8192, dim=512, layers=4, heads=8, kv_heads=4, ffn=1536),
    # 4x medium's compute per token, 2x its activation bytes (bench/torch_bench.py)
    "large": dict(vocab=8192, dim=1024, layers=4, heads=16, kv_heads=8, ffn=2816),
    # two layers of a 7B-class decoder (dim 4096, SwiGLU 11008, 32/8 heads; 0.42B parameters):
    # compute per byte moved is what lets a GPU hide the transfers (scripts/gpu_validate.sh)
    "xl": dict(vocab=8192, dim=4096, layers=2, heads=32, kv_heads=8, ffn=11008),
    # a 1.1B-parameter decoder (Llama-3.2-1B's width and depth, 16 heads of 128, a 32k
    # vocabulary): with sequence 2048 it has the compute per byte moved that lets a GPU hide
    # the transfers (scripts/gpu_validate.sh); too large for the CPU tests
    "1b": dict(vocab=32768, dim=2048, layers=16, heads=16, kv_heads=8, ffn=8192),
    # large embeddings, little compute: memory-heavy on a 2-core machine (the RSS test)
    "wide": dict(vocab=65536, dim=512, layers=2, heads=8, kv_heads=4, ffn=1024),
}


def param_digest(model) -> str:
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(preset="tiny", steps=4, batch=2, seq=32, seqs=None, offload=None, foreach=False,
          tied=False, lr=1e-3, seed=0, on_step=None, fraction=None, device="cpu", made=None):
    """Train `steps` steps; returns (losses, model, offloader or None).

    offload: None (plain PyTorch) or a dict of teraio.Offloader keyword arguments.
    seqs: optional per-step sequence lengths (a list), to exercise re-planning.
    device: "cpu" or "cuda"; the model is initialised on CPU (the same values everywhere) and
    moved there, and the batches follow it. made: a dict that receives the model and the
    optimizer ("model", "optimizer") as soon as they exist.
    foreach: AdamW's foreach (PyTorch's CPU default is False: one parameter at a time, which lets
    teraio offload optimizer states between parameters; True runs each _foreach_ pass over all
    parameters, which teraio splits per tensor, but every state is then used in every pass).
    """
    torch.manual_seed(seed)
    cfg = LlamaConfig(**PRESETS[preset], tied=tied)
    model = LlamaTiny(cfg, seed=seed)
    if device != "cpu":
        model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=foreach)
    if made is not None:  # for on_step
        made.update(model=model, optimizer=opt)
    off = None
    if offload is not None:
        import teraio

        off = teraio.Offloader(model, opt, **offload)

    def batch_for(i):
        b = make_batch(cfg, batch, seqs[i] if seqs else seq, i)
        return b if device == "cpu" else b.to(device)

    step_cb = (lambda i, o, _loss: on_step(i, o)) if on_step else None
    losses = train_steps(model, opt, off, batch_for, steps, step_cb)
    return losses, model, off


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Linux: reset the process's peak RSS (VmHWM) so that later steps are measured alone."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _proc_status_bytes(key: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def vm_hwm_bytes() -> int:
    return _proc_status_bytes("VmHWM")


def rss_file_bytes() -> int:
    """Resident pages mapped from files (shared libraries' code and data): clean, shared with
    other processes and reclaimable; how many the kernel maps depends on its page cache (a library
    just written by pip sits in large folios mapped whole), not on training."""
    return _proc_status_bytes("RssFile")


def save_checkpoint(made, off, where):
    """--save-after: the model's and optimizer's state_dict() to a file in a new temporary
    directory under `where`, by off.save() (offloaded tensors streamed from their tiers) or
    torch.save; {"save_sha256", "save_seconds"} (the file is removed)."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="teraio-ckpt-", dir=where)
    path = os.path.join(d, "checkpoint.pt")  # the same name in every run: the same records

    def state():
        return {"model": made["model"].state_dict(), "optimizer": made["optimizer"].state_dict()}

    try:
        t0 = time.perf_counter()
        if off is not None:
            off.save(state, path)
        else:
            torch.save(state(), path)
        dt = time.perf_counter() - t0
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
        return {"save_sha256": h.hexdigest(), "save_seconds": dt}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--budget", default=None, help="fraction of the peak (<1) or a size")
    ap.add_argument("--ssd-dir", action="append", default=[])
    ap.add_argument("--host-memory", default="0")
    ap.add_argument("--min-tensor-bytes", default="64KiB")
    ap.add_argument("--backend", default=None)
    ap.add_argument("--cpu-allocator", default="on", choices=("on", "off"),
                    help="OffloadOptions.cpu_allocator: PyTorch's CPU tensors from teraio's "
                    "block cache, for the whole process (default on here; the Offloader's "
                    "own default is off)")
    ap.add_argument("--cpu-prefault", default="auto", choices=("auto", "on", "off"),
                    help="OffloadOptions.cpu_prefault: the block cache faults memory in on "
                    "another thread (default auto: with 2 CPUs or more)")
    ap.add_argument("--cpu-mmap-threshold", default="auto",
                    help="OffloadOptions.cpu_mmap_threshold ('auto': 64KiB where "
                    "--cpu-allocator on cannot be used; 'none': leave glibc's malloc alone)")
    ap.add_argument("--foreach", action="store_true",
                    help="AdamW(foreach=True): teraio splits each _foreach_ op per tensor")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="cuda: train on the GPU (deterministic algorithms on, so that runs "
                    "with and without teraio can be compared bit for bit); --json then adds "
                    "torch.cuda.max_memory_allocated() overall and for the steady steps")
    ap.add_argument("--gpu-memory-cap", default=None,
                    help="cuda: let this process use at most this much device memory (a size, "
                    "e.g. 24GiB; torch.cuda.set_per_process_memory_fraction), to train as on a "
                    "smaller GPU. Running out of device memory is then a result: --json prints "
                    "{\"oom\": true, ...} and the exit status is 3")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save-after", type=int, default=0,
                    help="after this many steps, save the model's and optimizer's state_dict() "
                    "to a file in a new temporary directory (in the first --ssd-dir if given): "
                    "with --budget by Offloader.save() (streamed from the tiers), else by "
                    "torch.save; --json then adds the file's save_sha256 and save_seconds")
    ap.add_argument("--steady-after", type=int, default=2,
                    help="reset the peak RSS after this many steps (warm-up + profiling) and "
                    "report the peak of the remaining steps as steady_peak_rss_bytes")
    a = ap.parse_args(argv)
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device here")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        if a.gpu_memory_cap:
            import teraio

            total = torch.cuda.get_device_properties(0).total_memory
            cap = teraio.parse_bytes(a.gpu_memory_cap)
            if not 0 < cap <= total:
                ap.error(f"--gpu-memory-cap {a.gpu_memory_cap}: must be above 0 and at most the "
                         f"device's {total} bytes")
            torch.cuda.set_per_process_memory_fraction(cap / total)
    elif a.gpu_memory_cap:
        ap.error("--gpu-memory-cap needs --device cuda")
    offload = None
    if a.budget is not None:
        import teraio

        b = a.budget
        try:
            frac = float(b)
        except ValueError:
            frac = None
        if frac is not None and frac < 1:
            budget = frac  # Offloader: fraction of the profiled unconstrained peak
        else:
            budget = int(frac) if frac is not None else teraio.parse_bytes(b)
        opts = teraio.OffloadOptions(
            min_tensor_bytes=a.min_tensor_bytes, backend=a.backend,
            cpu_allocator=a.cpu_allocator == "on",
            cpu_prefault={"on": True, "off": False}.get(a.cpu_prefault, "auto"),
            cpu_mmap_threshold=None if a.cpu_mmap_threshold.lower() == "none"
            else a.cpu_mmap_threshold)
        offload = dict(memory_budget=budget, ssd_dirs=a.ssd_dir, host_memory=a.host_memory,
                       options=opts)
    times = []
    steady = {}
    made = {}
    saved = {}

    def on_step(i, off):
        times.append(time.perf_counter())
        if i + 1 == a.save_after:
            saved.update(save_checkpoint(made, off, a.ssd_dir[0] if a.ssd_dir else None))
        if i + 1 == a.steady_after:
            steady["before"] = peak_rss_bytes()  # clear_refs also resets ru_maxrss
            steady["reset"] = reset_peak_rss()
            if cuda:
                steady["cuda_before"] = torch.cuda.max_memory_allocated()
                torch.cuda.reset_peak_memory_stats()
        if i + 1 == a.steps:  # the training's peaks, before the final restore() and the digest
            steady["train"] = max(peak_rss_bytes(), steady.get("before", 0))
            steady["train_steady"] = vm_hwm_bytes() if steady.get("reset") else None
            steady["rss_file"] = rss_file_bytes()
            if cuda:
                steady["cuda_steady"] = torch.cuda.max_memory_allocated()

    t0 = time.perf_counter()
    try:
        losses, model, off = train(a.preset, a.steps, a.batch, a.seq, offload=offload,
                                   foreach=a.foreach, on_step=on_step, device=a.device,
                                   made=made)
    except torch.cuda.OutOfMemoryError as e:
        if not a.gpu_memory_cap:
            raise
        out = dict(oom=True, error=str(e).splitlines()[0], steps_done=len(times),
                   seconds=time.perf_counter() - t0, cuda_device=torch.cuda.get_device_name(),
                   cuda_max_allocated_bytes=torch.cuda.max_memory_allocated())
        print(json.dumps(out) if a.json else f"out of device memory after {len(times)} "
              f"step(s): {out['error']}")
        sys.exit(3)
    dt = time.perf_counter() - t0
    out = dict(losses=losses, params=param_digest(model), seconds=dt,
               peak_rss_bytes=max(peak_rss_bytes(), steady.get("before", 0)),
               steady_peak_rss_bytes=vm_hwm_bytes() if steady.get("reset") else None,
               train_peak_rss_bytes=steady.get("train"),
               train_steady_peak_rss_bytes=steady.get("train_steady"),
               train_rss_file_bytes=steady.get("rss_file"),
               steady_step_seconds=[b - a_ for a_, b in zip(times[a.steady_after - 1:-1],
                                                            times[a.steady_after:])], **saved)
    if cuda:
        out["cuda_device"] = torch.cuda.get_device_name()
        out["cuda_max_allocated_bytes"] = max(steady.get("cuda_before", 0),
                                              steady.get("cuda_steady", 0))
        out["cuda_steady_max_allocated_bytes"] = steady.get("cuda_steady")
    if off is not None:
        rep = off.report()
        out["report"] = {k: v for k, v in rep.items() if k not in ("plan", "engine")}
        out["report"]["backend"] = (rep.get("engine") or {}).get("backend")
    if a.json:
        print(json.dumps(out))
    else:
        for i, l in enumerate(losses):
            print(f"step {i}: loss {l:.6f}")
        print(f"{dt:.2f} s, peak RSS {out['peak_rss_bytes'] / 2**20:.0f} MiB")
        if off is not None:
            print(off.report())


if __name__ == "__main__":
    main()
