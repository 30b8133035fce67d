"""teraio.OffloadOptions: everything of teraio.Offloader beyond what most users set.

    opts = teraio.OffloadOptions(cpu_allocator=True, min_tensor_bytes="256KiB")
    off = teraio.Offloader(model, optimizer, memory_budget="8GiB",
                           ssd_dirs=["/mnt/nvme0/tio-{rank}"], options=opts)

An immutable value, checked when it is made: a bad value raises ValueError naming the field and
the value. dataclasses.replace(opts, field=value) gives a changed copy (checked again).
"""
from __future__ import annotations

import dataclasses
import os

from teraio.torch._offload_args import _bytes, _mmap_threshold_arg, _rate_arg

MAX_PLANS = 8  # default max_plans: plans kept, one per kind of step (StepKinds.key_of)


@dataclasses.dataclass(frozen=True)
class OffloadOptions:
    """The Offloader's options beyond model, optimizer, memory_budget, ssd_dirs, host_memory.

    Process-wide changes, for a model on CPU: applied while an Offloader is open, undone by
    close() (or when it is collected) of the last one that applied them; nothing for CUDA:
    cpu_allocator: "auto" (default), True or False. Make PyTorch's CPU allocator take tensors of
        1 MiB or more from teraio's block cache (teraio/blockcache.h) for the whole process
        (not with FSDP). "auto": where teraio._torch_alloc is built for this PyTorch, else
        glibc's threshold (cpu_mmap_threshold "auto"), silently; True: the same, with a warning
        where the allocator is missing; False: neither. Freed blocks are kept for reuse by size, as
        glibc's heap would (no page faults), but the blocks of tensors teraio offloads hand
        their pages back to the OS, and kept blocks never hold the cache above the peak its live
        blocks reached in the planned steps. So the memory teraio saves leaves the process
        (docs/user-guide.md, "Memory on CPU"): without this (or cpu_mmap_threshold) glibc keeps
        the freed memory in its heap and the process's RSS hardly drops. PyTorch's own
        allocator serves every request again when the last such Offloader closes or is
        collected; tensors allocated before keep their memory. Needs teraio._torch_alloc (built
        when PyTorch is importable at install time: pip install --no-build-isolation, not a
        plain pip install); where it cannot be used (not built, FSDP), cpu_mmap_threshold "auto"
        applies glibc's threshold instead.
        report()["cpu_allocator"] has the cache's counters (None: not in use).
    cpu_mmap_threshold: for a model on CPU, the size from which glibc's malloc maps each
        allocation on its own and hands it back to the OS when freed (mallopt
        M_MMAP_THRESHOLD, for the whole process). close() sets it to 32 MiB, where glibc's own
        rule takes it for PyTorch's tensors (glibc cannot turn that rule back on once a
        threshold was set). "auto" (default): "64KiB" where cpu_allocator ("auto" or True)
        cannot use the allocator, else nothing.
        Bytes (0 to 32 MiB) set it whatever cpu_allocator says; None never touches malloc. The
        price of a threshold: every large allocation faults in fresh pages (PyTorch alone runs
        at ~0.67x on CPU). A MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES=glibc.malloc.mmap_threshold
        in the environment wins; ignored for CUDA models and C libraries other than glibc.
        report()["cpu_mmap_threshold"] says what was set (None: nothing).
    cpu_cache_bytes: with cpu_allocator, freed blocks the cache may keep resident beyond that
        peak rule ("64MiB"; default 0): faster reuse for that much more memory.
    cpu_prefault: with cpu_allocator, during planned steps, a background thread of the cache
        faults memory in while the peak rule has room, so that the kernel zeroes the pages new
        tensors land in on another core rather than in the training thread; it never keeps more
        than the rule allows. "auto" (default): on where the process may run on 2 CPUs or more
        per rank on this node (LOCAL_WORLD_SIZE). report()["cpu_prefault"] says what applies.

    Planning:
    policy: planner policy: "teraio" (default: teraio-mixed with a host tier, else teraio-ssd),
        "teraio-mixed", "teraio-ssd", "teraio-paper", "teraio-paper-ssd", "g10" or "none"
        (see teraio/plan.h; the simulator's other policies cannot run here).
    plan: path of a plan saved by Offloader.save_plan(); skips profiling if it matches the model.
    warmup_steps: steps run before profiling (optimizer state is created lazily); None
        (default): 1, or 2 for DistributedDataParallel (it rebuilds its gradient buckets in the
        second iteration).
    profile_steps: steps recorded before each plan is made (default 1).
    min_tensor_bytes: tensors smaller than this are never moved ("1MiB").
    max_plans: plans kept at most (default 8), one per kind of step: the globals at the step's
        start, whether the optimizer steps, step(kind=...), and the step's signature (its first
        operator's name and argument shapes: the batch's shape, so each sequence-length bucket
        gets its own plan, profiled once). A new kind beyond it runs without a plan (kept within
        the budget reactively, as the profiled steps are) and warns once.
    ssd_bandwidth: SSD rate per directory the planner assumes ("3GB/s"), or "auto" (default):
        measured once before the first plan through the Offloader's engine (report:
        ssd_read_Bps, ssd_write_Bps).
    host_bandwidth: host-tier copy rate the planner assumes ("10GB/s").
    split_foreach: run each _foreach_ operator of the optimizer parameter by parameter, so
        that teraio can offload optimizer states between parameters (default True).
    bounded_unplanned: keep the warm-up and profiled steps within the budget too (default; CPU
        and one process only), offloading reactively through the engine; False runs them
        unconstrained (faster, but the process then peaks at the unconstrained size).
    aligned_storages: on CPU, storages brought back from a tier get memory from teraio
        (page-aligned, huge pages advised from 2 MiB) instead of PyTorch's allocator, whose
        64-byte alignment forces the engine's O_DIRECT transfers through staging copies on the
        training thread (default True; False: plain resize_). Such a storage cannot be resized
        by other code while it holds that memory (release and restore() handle it), so it is
        off with FSDP, which resizes its parameters' storages itself, and with a PyTorch
        without UntypedStorage._swap_data_ptr_ (2.11; 2.13 has it).

    The engine:
    backend: "posix", "uring", "cuda", "cufile", ... or None (default): "auto" for CPU models,
        cufile (where its probe says it runs) else cuda for models on a CUDA device.
    backend_options: the backend's options as a string ("key=value,...", e.g. the fault
        backend's "write_fail=3"; docs/engine.md), or None.
    verify: a CRC32C per chunk of the SSD tier, computed on write and checked on read (a
        mismatch is retried, counted in report()["io_crc_errors"] and logged, then raised).
        Default True: corruption is never silent. Its cost is measured in docs/bench/torch.md
        ("The checksum's cost"). False turns it off (the C engine's own default): a corrupted
        read then comes back as the drive returned it, and trains on without a word.
    io_queue_depth, io_chunk: requests in flight per directory (8; 1 to 4096) and bytes per
        request ("1MiB"; a multiple of 4 KiB); the staging memory for unaligned tensors is
        their product.
    rank: this process's rank for "{rank}" in ssd_dirs; None (default): torch.distributed's,
        else $RANK, else 0.
    """

    cpu_allocator: object = "auto"
    cpu_mmap_threshold: object = "auto"
    cpu_cache_bytes: object = 0
    cpu_prefault: object = "auto"
    policy: str = "teraio"
    plan: object = None
    warmup_steps: object = None
    profile_steps: int = 1
    min_tensor_bytes: object = "1MiB"
    max_plans: int = MAX_PLANS
    ssd_bandwidth: object = "auto"
    host_bandwidth: object = "10GB/s"
    split_foreach: bool = True
    bounded_unplanned: bool = True
    aligned_storages: bool = True
    backend: object = None
    backend_options: object = None
    verify: bool = True
    io_queue_depth: int = 8
    io_chunk: object = "1MiB"
    rank: object = None

    def __post_init__(self):
        def bad(field, expected):
            raise ValueError(f"OffloadOptions.{field}: expected {expected}, got "
                             f"{getattr(self, field)!r}")

        for f in ("split_foreach", "bounded_unplanned", "aligned_storages", "verify"):
            if not isinstance(getattr(self, f), bool):
                bad(f, "True or False")
        if self.cpu_allocator != "auto" and not isinstance(self.cpu_allocator, bool):
            bad("cpu_allocator", "'auto', True or False")
        for f in ("cpu_cache_bytes", "min_tensor_bytes", "io_chunk"):
            _bytes(getattr(self, f), f"OffloadOptions.{f}")
        _mmap_threshold_arg(self.cpu_mmap_threshold, "OffloadOptions.cpu_mmap_threshold")
        if self.cpu_prefault != "auto" and not isinstance(self.cpu_prefault, bool):
            bad("cpu_prefault", "True, False or 'auto'")
        if not isinstance(self.policy, str) or not self.policy:
            bad("policy", "a planner policy name such as 'teraio'")
        if self.plan is not None and not isinstance(self.plan, (str, os.PathLike)):
            bad("plan", "None or the path of a plan written by Offloader.save_plan()")
        if self.warmup_steps is not None and not _is_int(self.warmup_steps, 0):
            bad("warmup_steps", "None or an int >= 0")
        if not _is_int(self.profile_steps, 1):
            bad("profile_steps", "an int >= 1")
        if not _is_int(self.max_plans, 1):
            bad("max_plans", "an int >= 1 (plans kept, one per kind of step)")
        if not _is_int(self.io_queue_depth, 1) or self.io_queue_depth > 4096:
            bad("io_queue_depth", "an int from 1 to 4096")
        chunk = _bytes(self.io_chunk, "OffloadOptions.io_chunk")
        if chunk <= 0 or chunk % 4096:
            bad("io_chunk", "a positive multiple of 4 KiB such as '1MiB' (the engine's "
                "O_DIRECT transfers are in whole 4 KiB blocks)")
        if self.ssd_bandwidth != "auto":
            _rate_arg(self.ssd_bandwidth, "OffloadOptions.ssd_bandwidth", "'auto' or ")
        _rate_arg(self.host_bandwidth, "OffloadOptions.host_bandwidth")
        if self.policy not in POLICIES:
            bad("policy", "one of " + ", ".join(repr(p) for p in POLICIES))
        if self.backend is not None and self.backend not in backends():
            bad("backend", "None or one of " + ", ".join(repr(b) for b in backends()))
        if self.backend_options is not None and not isinstance(self.backend_options, str):
            bad("backend_options", "None or a string of key=value options")
        if self.rank is not None and not _is_int(self.rank, 0):
            bad("rank", "None or an int >= 0")


# the planner's policies that the Offloader can execute (src/plan/plan.c; the simulator-only
# ones, lru, ideal, zero-offload and zero-infinity, are not)
POLICIES = ("teraio", "teraio-mixed", "teraio-ssd", "teraio-paper", "teraio-paper-ssd", "g10",
            "none")


def backends():
    """The engine's backend names ("auto" and those it was built with, available here or not)."""
    from teraio import _core

    return ("auto",) + tuple(b["name"] for b in _core.probe())


def _is_int(v, low):
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(OffloadOptions))
