"""teraio.Offloader: profile a few training steps, plan, then offload tensors on live training.

    off = teraio.Offloader(model, optimizer, memory_budget="8GiB",
                           ssd_dirs=["/mnt/nvme0/tio-{rank}"], host_memory="16GiB")
    for batch in loader:
        with off.step():
            loss = model(batch).loss; loss.backward(); opt.step(); opt.zero_grad()
    off.restore()            # before touching parameters outside a step (eval, checkpoint)
    print(off.report())

Steps: `warmup_steps` run first (optimizer state is created lazily), the next `profile_steps` are
recorded (operators, tensors, times), then a plan is made by the C planner and every following
step executes it through the C executor and migration engine. The steps before the plan are kept
within the budget reactively (teraio/_bounded.py); the executor keeps the budget where the plan
cannot (demand offloads). Each kind of step has its own plan, chosen at the step's first
operator (its shapes: a new sequence length is a new kind, profiled once); a switch between plans
leaves offloaded tensors where they are. A step whose operator sequence differs from its plan
(data-dependent control flow, shapes that change later in the step) brings every tensor back,
runs without offloading, warns, and the next step of that kind re-profiles.
See docs/runtime.md.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings
import weakref

from teraio import _core

_Error = _core.Error


MAX_PLANS = 8  # default max_plans: plans kept, one per kind of step (Offloader._step_key)
PROBE_BYTES = 64 << 20  # ssd_bandwidth="auto": bytes written and read back once
PROBE_ID = (1 << 63) - 1  # its engine tensor id: runtime ids count up from 0 (id_base = generation
# << 32), the bounded warm-up's from 1 << 62 (_bounded.ID_BASE)


def _bytes(v, what):
    if v is None:
        return 0
    if isinstance(v, str):
        try:
            return _core.parse_bytes(v)
        except _Error as e:
            raise ValueError(f"{what}: cannot parse {v!r} as a size (e.g. '8GiB'): {e}") from None
    if isinstance(v, (int, float)) and v >= 0:
        return int(v)
    raise ValueError(f"{what}: expected bytes or a size string like '8GiB', got {v!r}")


def _rank():
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:  # pragma: no cover - torch without distributed
        pass
    return int(os.environ.get("RANK", "0"))


def _warn(message: str) -> None:
    """A RuntimeWarning attributed to the user's code: the first frame outside teraio,
    contextlib and torch (the `with off.step():` line, or the line whose operator started the
    step), however deep inside the step it is raised."""
    here = os.path.dirname(os.path.abspath(__file__))
    torch_mod = sys.modules.get("torch")
    skip = (here,) + ((os.path.dirname(os.path.abspath(torch_mod.__file__)) + os.sep,)
                      if getattr(torch_mod, "__file__", None) else ())
    level, f = 2, sys._getframe(1)  # stacklevel 2: _warn's caller
    while f is not None and (f.f_code.co_filename.startswith(skip)
                             or f.f_code.co_filename == contextlib.__file__):
        level += 1
        f = f.f_back
    warnings.warn(message, RuntimeWarning, stacklevel=level)


def _budget_arg(v):
    """memory_budget as (fraction, bytes): a float in (0, 1) is a fraction of the profiled
    peak, an int or a size string is bytes. Any other float is refused rather than rounded (1.5
    would be 1 byte): bytes as a float only where they are a whole number of MiB (8e9)."""
    hint = ("memory_budget: expected bytes (an int, or a size string like '8GiB') or a fraction "
            f"of the profiled peak as a float in (0, 1), got {v!r}")
    if isinstance(v, bool):
        raise ValueError(hint)
    if isinstance(v, float):
        if 0 < v < 1:
            return v, 0
        if not (v >= 1 << 20 and v.is_integer()):
            raise ValueError(hint)
        v = int(v)
    n = _bytes(v, "memory_budget")
    if n <= 0:
        raise ValueError("memory_budget: must be > 0 bytes or a fraction in (0, 1) of "
                         "the profiled peak (e.g. memory_budget='8GiB' or 0.5)")
    return None, n


_COMPILE_HELP = (
    "torch.compile does not work under teraio.Offloader: Dynamo compiles nothing while the "
    "Offloader's TorchDispatchMode is active (the code runs eagerly), and compiled kernels "
    "would use tensors the Offloader moves without it seeing them. Train the uncompiled module "
    "under the Offloader (torch.compile(m) returns a wrapper: pass m, or wrapper._orig_mod; "
    "m.compile() compiles in place: build the module again without it), or keep "
    "torch.compile and leave memory to activation checkpointing "
    "(torch.utils.checkpoint) instead of teraio")


def _compiled_module(model):
    """The name of a torch.compile'd module in model (torch.compile(m)'s OptimizedModule, or
    one compiled in place with m.compile()), or None."""
    if model is None or "torch._dynamo" not in sys.modules:  # nothing compiled without Dynamo
        return None
    try:
        mods = list(model.named_modules())
    except Exception:  # noqa: BLE001 - a model without named_modules()
        return None
    for name, m in mods:
        if (type(m).__name__ == "OptimizedModule" and hasattr(m, "_orig_mod")) or \
                getattr(m, "_compiled_call_impl", None) is not None:
            return name or type(model).__name__
    return None


def _dynamo_tls():
    """Dynamo's thread-local state, where it lists the frames it skipped (None: no Dynamo
    loaded, or a PyTorch without that list)."""
    if "torch._dynamo" not in sys.modules:
        return None
    ef = sys.modules.get("torch._dynamo.eval_frame")
    tls = getattr(ef, "dynamo_tls", None)
    return tls if tls is not None and hasattr(tls, "skip_reasons") else None


def _attempt(fn):
    """fn(); the exception it raised instead of raising it (None: it worked)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - reported with the step's own failure
        return e
    return None


def _local_nbytes(t):
    """Bytes of t's own storage view: a DTensor's (FSDP2) local shard, not the whole."""
    local = getattr(t, "_local_tensor", None)
    t = local if local is not None else t
    return t.numel() * t.element_size()


def _after_update(e, updated):
    """e (ValueError or teraio.Error from planning at the end of a profiled step), saying in
    which state the step left the model."""
    note = ("; raised at the end of the profiled step, after its optimizer.step(): that update "
            "stands (do not apply this batch again)" if updated else
            "; raised at the end of the profiled step")
    if isinstance(e, _Error) and len(e.args) >= 2:
        return _Error(e.args[0], str(e.args[1]) + note)
    return type(e)(str(e) + note)


def _mmap_threshold_arg(v):
    """cpu_mmap_threshold as bytes (None stays None, "auto" stays "auto"), within what glibc
    accepts."""
    if v is None or v == "auto":
        return v
    n = _bytes(v, "cpu_mmap_threshold")
    if not 0 <= n <= 32 << 20:
        raise ValueError(f"cpu_mmap_threshold: {v!r} is outside glibc's range, 0 to 32 MiB "
                         "(e.g. '64KiB'; None leaves malloc alone)")
    return n


def _prefault_arg(v):
    """cpu_prefault as a bool: "auto" is True where the CPUs this process may run on are at least
    two per rank on this node (LOCAL_WORLD_SIZE, set by torchrun; 1 without it): a spare one."""
    if v == "auto":
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
        try:
            ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        except ValueError:
            ranks = 1
        return n >= 2 * ranks
    if not isinstance(v, bool):
        raise ValueError(f"cpu_prefault: expected True, False or 'auto', got {v!r}")
    return v


# how many Offloaders installed teraio's CPU allocator and have neither closed nor been collected
_ALLOC_USERS = [0]


def _alloc_user_gone():
    """An Offloader that installed the allocator closed or was collected: the last one hands
    every request back to PyTorch's allocator and unmaps the kept blocks (those in use stay
    valid)."""
    _ALLOC_USERS[0] -= 1
    if _ALLOC_USERS[0] == 0:
        ta = _torch_alloc()
        if ta is not None:
            ta.uninstall()
        _core.block_cache_set_prefault(False)
        _core.block_cache_trim()


def _torch_alloc():
    """teraio._torch_alloc, or None where it was not built (PyTorch absent at build time) or was
    built against another PyTorch (c10's C++ ABI is not stable: a warning says to rebuild)."""
    try:
        from teraio import _torch_alloc
    except ImportError:
        _torch_alloc = None
    if getattr(_torch_alloc, "torch_version", None) is None:  # a source folder, not the module
        return None
    import torch

    if _torch_alloc.torch_version != torch.__version__:
        _warn_once(f"teraio._torch_alloc was built against PyTorch {_torch_alloc.torch_version}, "
                   f"this is {torch.__version__}: cpu_allocator is off (glibc's mmap threshold "
                   "instead); reinstall teraio with this PyTorch present "
                   "(pip install --no-build-isolation .)")
        return None
    return _torch_alloc


_WARNED = set()


def _torch_alloc_missing():
    """Whether teraio._torch_alloc was not built at all (not: built for another PyTorch)."""
    try:
        from teraio import _torch_alloc
    except ImportError:
        return True
    return getattr(_torch_alloc, "torch_version", None) is None


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        _warn(message)


def _on_cuda(model):
    """Whether the model's parameters live on a CUDA device."""
    try:
        return any(p.is_cuda for p in model.parameters())
    except Exception:  # noqa: BLE001 - a model without parameters()
        return False


def _device_backend(model):
    """The engine backend for a model whose parameters live on a CUDA device: "auto" would pick
    the fastest host-memory backend (uring), which cannot move device memory. GPUDirect Storage
    (cufile) when its probe says it can run here, else cuda (pinned bounce buffers). None (auto)
    for CPU models."""
    if not _on_cuda(model):
        return None
    available = {b["name"] for b in _core.probe() if b["available"]}
    return "cufile" if "cufile" in available else "cuda"


def _arg_sig(v):
    """What of one operator argument goes into a step signature: a tensor's shape and dtype,
    ints and bools (sizes), the structure of lists; not float values (a scale, a rate)."""
    import torch

    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), str(v.dtype))
    if isinstance(v, (list, tuple)):
        return tuple(_arg_sig(x) for x in v)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return "float"
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v)
    return type(v).__name__


def _tensor_sig(v):
    import torch

    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), str(v.dtype))
    if isinstance(v, (list, tuple)):
        return tuple(_tensor_sig(x) for x in v)
    return None


def _op_signature(func, args, kwargs):
    """A step's signature: its first operator (after views of parameters), the shapes of its
    tensor arguments and of its outputs (from its meta kernel: a slice of a corpus at another
    offset is the same signature, another length is not); where the outputs cannot be known
    without running it (a generator argument), its integer arguments (sizes) instead."""
    from teraio._bounded import meta_outputs

    kwargs = kwargs or {}
    out = meta_outputs(func, args, kwargs)
    if out is not None:
        return (str(func), tuple(_tensor_sig(a) for a in args),
                tuple(sorted((k, _tensor_sig(v)) for k, v in kwargs.items())), out)
    return (str(func), tuple(_arg_sig(a) for a in args),
            tuple(sorted((k, _arg_sig(v)) for k, v in kwargs.items())))


def _sig_text(sig):
    if sig is None:
        return "none"
    text = f"{sig[0]}{sig[1]}"
    return text if len(text) <= 160 else text[:157] + "..."


class _Pending:
    """The driver of a step until its first operator: that operator's signature selects the
    plan (Offloader._start_step), then the chosen driver takes over. Views of resident tensors
    before it (a Linear's weight.t(), x.view(...), a slice of a corpus at the step's offset) run
    untouched: they move no memory, and a view's shape may vary where the step's does not."""

    passthrough = False
    record = False

    def __init__(self, off, globals_):
        self.off = off
        self.globals_ = globals_
        self.gl = {st._cdata for _, st, _ in globals_}
        self.mode = None

    def _resident_view(self, func, args, kwargs):
        if not getattr(func, "is_view", False):
            return False
        import torch

        from teraio.torch._mode import _iter_args

        seen = False
        for t, w in _iter_args(func, args, kwargs):
            if w or t.untyped_storage().nbytes() == 0:
                return False
            seen = True
        return seen and all(not isinstance(v, torch.Tensor) or v.untyped_storage().nbytes()
                            for v in kwargs.values())

    def dispatch(self, func, args, kwargs):
        if self._resident_view(func, args, kwargs):
            return func(*args, **kwargs)
        off = self.off
        driver = off._start_step(self.globals_, _op_signature(func, args, kwargs))
        off._driver = driver if driver is not None else self
        if driver is None:
            self.dispatch = lambda f, a, kw: f(*a, **kw)
            return func(*args, **kwargs)
        mode = self.mode
        mode.driver = driver
        fast = getattr(driver, "fast", None)
        mode._dispatch = fast.dispatch if fast is not None else None
        if mode._dispatch is not None:
            return mode._dispatch(func, args, kwargs)
        return driver.dispatch(func, args, kwargs)


class Offloader:
    """Lifetime-aware offloading of one model's training to host memory and SSDs.

    model, optimizer: what the step trains (parameters, gradients and optimizer states are the
        global tensors, identified by registration order).
    memory_budget: tracked tensor bytes to stay under ("8GiB" or an int), or a float in (0, 1):
        that fraction of the unconstrained peak measured in the profiled step. On CPU the
        tracked bytes are the process's tensor memory; on CUDA the device's.
    ssd_dirs: directories for the SSD tier (one per NVMe); "{rank}" is replaced by the
        torch.distributed rank, "{local_rank}" by the rank on this node ($LOCAL_RANK, else the
        rank). They must exist and be writable.
    host_memory: bytes of the pinned host tier (0: SSD only).
    policy: planner policy ("teraio", "teraio-ssd", "teraio-mixed", ...; see teraio/plan.h).
    plan: path of a plan saved by save_plan(); skips profiling if it matches the model.
    ssd_bandwidth: SSD rate per directory the planner assumes ("3GB/s"), or "auto": measured
        once before the first plan through this Offloader's engine (report: ssd_read_Bps,
        ssd_write_Bps).
    verify: a CRC32C per chunk, computed on write and checked on read (a mismatch is retried,
        then raised). Default False, as in the C engine: measured, it costs 37-58% of the
        engine's bandwidth (docs/bench/io.md), far above the 5% under which it would be on;
        without it a corrupted read comes back as the drive returned it.
    bounded_unplanned: keep the warm-up and profiled steps within the budget too (default; CPU
        and one process only), offloading reactively through the engine; False runs them
        unconstrained (faster, but the process then peaks at the unconstrained size).
    aligned_storages: on CPU, storages brought back from a tier get memory from teraio
        (page-aligned, huge pages advised from 2 MiB) instead of PyTorch's allocator, whose
        64-byte alignment forces the engine's O_DIRECT transfers through staging copies on the
        training thread (default True; False: plain resize_). Such a storage cannot be
        resized by other code while it holds that memory (release and restore() handle it), so
        it is off with FSDP, which resizes its parameters' storages itself, and with a
        PyTorch without UntypedStorage._swap_data_ptr_ (2.11; 2.13 has it).
    cpu_allocator: for a model on CPU (not FSDP), make PyTorch's CPU allocator take tensors of
        1 MiB or more from teraio's block cache (teraio/blockcache.h; default True): freed
        blocks are kept for reuse by size, as glibc's heap would (no page faults), but the
        blocks of tensors teraio offloads hand their pages back to the OS, and kept blocks
        never hold the cache above the peak its live blocks reached in the planned steps. So
        the memory teraio saves leaves the process without making the rest of training fault
        in fresh pages, as glibc's mmap threshold does (docs/user-guide.md, "Memory on CPU").
        Installed for the whole process when the Offloader is made, passing every request to
        PyTorch's own again when the last such Offloader closes; tensors allocated before keep their memory. Needs teraio._torch_alloc (built when PyTorch is importable
        at install time); without it, or with False, cpu_mmap_threshold applies.
        report()["cpu_allocator"] has the cache's counters (None: not in use).
    cpu_cache_bytes: with cpu_allocator, freed blocks the cache may keep resident beyond that
        peak rule ("64MiB"; default 0): faster reuse for that much more memory.
    cpu_prefault: with cpu_allocator, during planned steps, a background thread of the cache
        faults memory in while the peak rule has room, so that the kernel zeroes the pages new
        tensors land in on another core rather than in the training thread; it never keeps more
        than the rule allows. "auto" (default): on where the process may run on 2 CPUs or more
        per rank on this node (LOCAL_WORLD_SIZE).
        report()["cpu_prefault"] says what applies.
    max_plans: plans kept at most (default 8), one per kind of step: the globals at the step's
        start, whether the optimizer steps, step(kind=...), and the step's signature (its first
        operator's name and argument shapes: the batch's shape, so each sequence-length bucket
        gets its own plan, profiled once). A new kind beyond it runs without a plan (kept within
        the budget reactively, as the profiled steps are) and warns once.
    cpu_mmap_threshold: for a model on CPU, the size from which glibc's malloc maps each
        allocation on its own and hands it back to the OS when freed (mallopt M_MMAP_THRESHOLD,
        set for the whole process when the Offloader is made). "auto" (default): "64KiB" when
        cpu_allocator is not in use, else nothing. Without either, glibc keeps freed tensor
        memory in its heap and raises its threshold as training goes on, so the memory teraio
        frees by offloading does not leave the process (little RSS drop). The price: every
        large allocation faults in fresh pages (PyTorch alone runs at ~0.67x on CPU). None
        leaves malloc alone; so does a MALLOC_MMAP_THRESHOLD_ or
        GLIBC_TUNABLES=glibc.malloc.mmap_threshold in the environment (yours wins). Ignored for
        CUDA models and C libraries other than glibc. report()["cpu_mmap_threshold"] says what
        was set (None: nothing).
    """

    def __init__(self, model, optimizer=None, *, memory_budget, ssd_dirs=(), host_memory=0,
                 policy="teraio", warmup_steps=None, profile_steps=1, plan=None, backend=None,
                 backend_options=None, verify=False, min_tensor_bytes="1MiB",
                 ssd_bandwidth="auto", host_bandwidth="10GB/s", split_foreach=True,
                 io_queue_depth=8, io_chunk="1MiB", bounded_unplanned=True,
                 aligned_storages=True, rank=None, cpu_allocator=True, cpu_cache_bytes=0,
                 cpu_prefault="auto", cpu_mmap_threshold="auto", max_plans=MAX_PLANS):
        import torch  # noqa: F401  (the torch layer needs it; teraio itself does not)

        self.model = model
        self.optimizer = optimizer
        from teraio.torch import _fsdp  # FSDP2: what collect_globals reads; refuses TP DTensors

        self._gmodel = _fsdp.globals_model(model, warmup_steps)
        compiled = _compiled_module(model)
        if compiled is not None:
            raise ValueError(f"model: {compiled} is compiled with torch.compile. " + _COMPILE_HELP)
        self.budget_fraction, self.budget = _budget_arg(memory_budget)
        self._check_budget_params(model)
        self.host_memory = _bytes(host_memory, "host_memory")
        # FSDP resizes the storages of its parameters itself: those must stay resizable; and
        # PyTorch must have UntypedStorage._swap_data_ptr_ (2.13 has it, 2.11 does not)
        self.aligned_storages = (bool(aligned_storages) and self._gmodel is model
                                 and hasattr(torch.UntypedStorage, "_swap_data_ptr_"))
        self.min_tensor_bytes = _bytes(min_tensor_bytes, "min_tensor_bytes")
        mmap_threshold = _mmap_threshold_arg(cpu_mmap_threshold)  # applied once all is checked
        self.cpu_cache_bytes = _bytes(cpu_cache_bytes, "cpu_cache_bytes")
        self.cpu_prefault = _prefault_arg(cpu_prefault)
        self._prefault_on = False
        self.rank = _rank() if rank is None else int(rank)
        if isinstance(ssd_dirs, (str, bytes)):
            raise ValueError("ssd_dirs: expected a list of directories, got a string")
        from teraio import _ranks  # "{rank}", "{local_rank}"

        self.ssd_dirs = [_ranks.expand(d, self.rank, "ssd_dirs") for d in (ssd_dirs or ())]
        for d in self.ssd_dirs:
            if not os.path.isdir(d):
                raise ValueError(f"ssd_dirs: {d!r} does not exist or is not a directory: "
                                 "create it (mkdir -p) or pass another directory")
            if not os.access(d, os.W_OK | os.X_OK):
                raise ValueError(f"ssd_dirs: {d!r} is not writable by this process: fix its "
                                 "permissions or pass another directory")
        if not self.ssd_dirs and self.host_memory == 0:
            raise ValueError("nowhere to offload to: pass ssd_dirs=[...] and/or host_memory=...")
        if warmup_steps is None:
            # DDP rebuilds its gradient buckets in the second iteration: profile after it.
            warmup_steps = 2 if type(model).__name__ == "DistributedDataParallel" else 1
        if int(warmup_steps) < 1 and optimizer is not None:
            raise ValueError("warmup_steps: must be >= 1 with an optimizer (its state is created "
                             "in the first step)")
        if isinstance(max_plans, bool) or not isinstance(max_plans, int) or max_plans < 1:
            raise ValueError(f"max_plans: expected an int >= 1 (plans kept, one per kind of "
                             f"step), got {max_plans!r}")
        self.max_plans = max_plans
        self.policy = policy
        self.warmup_steps = int(warmup_steps)
        self.profile_steps = max(1, int(profile_steps))
        self.split_foreach = split_foreach
        # "auto": measured through the engine on the SSD directories when the first plan is made
        self.ssd_auto = ssd_bandwidth == "auto"
        self.ssd_measured = None
        rate = 0.0
        if not self.ssd_auto:
            try:
                rate = _core.parse_rate(ssd_bandwidth) if isinstance(ssd_bandwidth, str) \
                    else float(ssd_bandwidth)
            except (_Error, TypeError, ValueError):
                pass
            if not rate > 0:
                raise ValueError(f"ssd_bandwidth: expected 'auto' or a rate like '2GB/s', got "
                                 f"{ssd_bandwidth!r}")
        self.ssd_read_Bps = self.ssd_write_Bps = rate
        self.host_Bps = _core.parse_rate(host_bandwidth) if isinstance(host_bandwidth, str) \
            else float(host_bandwidth)
        self._cuda = False
        if backend is None:
            backend = _device_backend(model)
        # Staging memory for unaligned tensors (PyTorch's CPU allocator aligns to 64 bytes, O_DIRECT
        # needs 4 KiB) is queue depth x chunk: kept small, it is memory the budget does not see.
        self._engine = _core.RtEngine(self.ssd_dirs, self.host_memory, backend, bool(verify),
                                      backend_options, True, int(io_queue_depth),
                                      _bytes(io_chunk, "io_chunk"))
        self._trace = None
        self._prediction = None  # (plan, predicted step seconds): see predicted_step_s()
        self._plan = None
        self._prog = None
        self._runtime = None
        self._movable = ()
        self._generation = 0
        self._driver = None
        self._steps = 0
        # plans by kind of step (_step_key), least recently used first; the current one's key
        import collections

        self._plans = collections.OrderedDict()
        self._cur_key = None
        self._key = None
        self._user_kind = None  # step(kind=...): part of the key
        self._loaded = None  # (trace, plan, prog) from plan=, until the first step after warm-up
        self._profiled = {}  # steps profiled so far per kind of step
        self._opt_seen = {}  # (globals, steps since the optimizer stepped) -> [stepped, did not]
        self._since_opt = 0
        self._opt_ran = False
        self._step_state = None  # the running step's ("warmup", "profile", "execute")
        self._rt_globals = {}  # the executor's globals: storage -> (weak reference, tensor id)
        self._in_optim = False
        self._stats_done = {}
        self._counts = dict(steps_profiled=0, steps_offloaded=0, steps_diverged=0,
                            steps_passthrough=0, steps_unplanned=0, replans=0)
        self._plans_full_warned = False
        self.last_divergence = None
        if optimizer is not None:
            optimizer.register_step_pre_hook(lambda *a: self._set_optim(True))
            optimizer.register_step_post_hook(lambda *a: self._set_optim(False))
        # warm-up and profiled steps (no plan yet) kept within the budget reactively (CPU, one
        # process: a collective may still be using a buffer, and CUDA needs stream ordering)
        self.bounded_unplanned = bool(bounded_unplanned)
        self._bounded = None
        self._bounded_done = dict(offloads=0, bytes_offloaded=0, reads=0, bytes_read=0, io_s=0.0)
        self._bounded_peak = 0
        self._next_eid = None
        self._plan_path = plan
        if plan is not None:
            self._load_plan(plan)
        self._alloc_installed = False
        self.cpu_allocator = self._install_allocator(model, cpu_allocator)
        if mmap_threshold == "auto":
            mmap_threshold = None if self.cpu_allocator else 64 << 10
        self.cpu_mmap_threshold = self._tune_malloc(model, mmap_threshold)

    def _set_optim(self, v):
        if v and not self._opt_ran and self._driver is not None:
            self._check_dynamo("raised before optimizer.step() updated anything; this step's "
                               "gradients are in .grad")
            self._check_before_update()
        self._in_optim = v
        if v:
            self._opt_ran = True

    # ---- validation before anything is updated ---------------------------------------------
    def _check_budget_params(self, model):
        """An absolute budget below the largest parameter can never hold an operator that
        uses it: refused when the Offloader is made."""
        if not self.budget or model is None:
            return
        try:
            big = max(((_local_nbytes(p), n) for n, p in model.named_parameters()),
                      default=(0, None))
        except Exception:  # noqa: BLE001 - a model without named_parameters()
            return
        if big[0] > self.budget:
            raise ValueError(
                f"memory_budget: {_core.format_bytes(self.budget)} is below the parameter "
                f"{big[1]} alone ({_core.format_bytes(big[0])}): raise memory_budget (at "
                f"least a few times the largest parameter)")

    def _check_dynamo(self, state):
        """RuntimeError if Dynamo skipped a compiled frame in this step because of the
        Offloader's dispatch mode (a torch.compile'd function or module called inside it)."""
        skips = getattr(self, "_dynamo_skips", None)
        if not skips:
            return
        hit = next((r for r in skips if "dispatch mode" in r), None)
        if hit is not None:
            skips.clear()
            raise RuntimeError(f"torch.compile'd code was called inside off.step() and ran "
                               f"uncompiled ({hit.split(': ')[0]}; {state}). " + _COMPILE_HELP)

    def _check_before_update(self):
        """In a profiled step, when the optimizer is about to step: the checks planning makes
        at the end of the step, on what ran so far (forward and backward) and on what each
        parameter's update will use (at least the parameter and its gradient). A ValueError here
        leaves the parameters and optimizer states as they were before the step; the step's
        gradients are in .grad."""
        drv = self._driver
        if drv is None or self._step_state != "profile" or self.budget_fraction is not None:
            return
        prog = drv.prog
        note = ("; raised before optimizer.step() updated anything: the parameters and "
                "optimizer states are as before this step, its gradients are in .grad "
                "(zero them before retrying the batch)")
        # an update reads a tensor of the parameter's size (its gradient, or what was computed
        # from it) in the operator that writes the parameter: at least parameter + gradient
        need, what = 0, None
        if self.optimizer is not None:
            for g in self.optimizer.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        n = _local_nbytes(p) + _local_nbytes(p.grad)
                        if n > need:
                            need, what = n, tuple(p.shape)
        if need > self.budget:
            raise ValueError(
                f"memory_budget: {_core.format_bytes(self.budget)} is below what the optimizer "
                f"uses at once to update the parameter of shape {what}: at least "
                f"{_core.format_bytes(need)} (the parameter and its gradient): raise "
                f"memory_budget to at least {_core.format_bytes(need)}" + note)
        try:
            self._check_program(prog)
        except ValueError as e:
            raise ValueError(str(e) + note) from None
        if self.ssd_dirs:
            self._check_ssd_room(prog, note)

    def _check_ssd_room(self, prog, note):
        """The SSD space any plan needs at least: what must leave memory at the peak and does
        not fit the host tier."""
        need = prog.peak_resident() - self.budget - self.host_memory
        if need <= 0:
            return
        free = 0
        for d in self.ssd_dirs:
            try:
                st = os.statvfs(d)
                free += st.f_bavail * st.f_frsize
            except OSError:
                return
        es = self._engine.stats()  # room reserved earlier in this engine's own files
        free += max(0, es["ssd_capacity_bytes"] - es["ssd_used_bytes"])
        if free < need:
            raise _Error(-28, f"ssd_dirs: {self.ssd_dirs} have {_core.format_bytes(free)} free, "
                              f"the budget needs at least {_core.format_bytes(need)} offloaded "
                              "beyond host_memory: free space there, add directories, or raise "
                              "host_memory / memory_budget" + note)

    # ---- steps without a plan, kept within the budget ------------------------------------------
    def _bounded_ok(self):
        """Whether steps without a plan are kept within the budget (bounded_unplanned): on one
        process, and under DDP on CPU (the tensors of its collectives, the gradient buckets,
        are never moved: an allreduce may still be using them after its operator returned).
        Not under FSDP (it resizes its parameters' storages itself) nor DDP on CUDA (its
        collectives run on their own streams)."""
        if not self.bounded_unplanned:
            return False
        if type(self.model).__name__ == "DistributedDataParallel":
            return not self._cuda
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                return False
        except Exception:  # pragma: no cover - torch without distributed
            pass
        return True

    def _bounded_budget(self):
        if self.budget:
            return self.budget
        if self._prog is not None:  # a loaded plan: its trace knows the unconstrained peak
            return max(1, int(self.budget_fraction * self._prog.peak_resident()))
        # a fraction of the unconstrained peak, not measured yet: of the largest tracked total so
        # far, and of the parameters plus one gradient per trainable parameter (all alive when the
        # optimizer starts), neither of which exceeds it
        return max(1, int(self.budget_fraction * max(self._bounded.peak_live, self._param_floor)))

    def _bounded_tier(self, nbytes):
        """Tiers to try (TIO_TIER_HOST = 1, TIO_TIER_SSD = 2): the host tier while it has room."""
        if not self.host_memory:
            return (2,)
        if not self.ssd_dirs:
            return (1,)
        es = self._engine.stats()
        return (1, 2) if es["host_capacity_bytes"] - es["host_used_bytes"] >= nbytes else (2,)

    def _bounded_start(self):
        from teraio._bounded import BoundedMemory

        if self._bounded is None:
            floor = 0
            if self.model is not None:
                for p in self.model.parameters():
                    nb = p.numel() * p.element_size()
                    floor += 2 * nb if p.requires_grad and self.optimizer is not None else nb
            self._param_floor = floor
            self._bounded = BoundedMemory(self._engine, self.min_tensor_bytes,
                                          self._bounded_budget, self._bounded_tier)
            self._bounded.discard = self.aligned_storages  # CPU (bounded steps), no FSDP
            if self._cuda:
                import torch

                self._bounded.device = True
                self._bounded.sync = torch.cuda.current_stream().synchronize
            if self._next_eid is not None:
                self._bounded.next_eid = self._next_eid
        return self._bounded

    def _bounded_stop(self):
        b = self._bounded
        if b is None:
            return
        for k, v in b.stats.items():
            self._bounded_done[k] += v
        self._bounded_peak = max(self._bounded_peak, b.peak_resident)
        self._next_eid = b.next_eid
        self._bounded = None

    # ---- plan files -----------------------------------------------------------------------
    def save_plan(self, path):
        """Write the plan (path) and its trace (path + '.trace'), to skip profiling later."""
        if self._plan is None:
            raise RuntimeError("save_plan: no plan yet (it is made after the profiled steps)")
        self._trace.save(str(path) + ".trace")
        self._plan.save(str(path))

    def predicted_step_s(self):
        """The simulator's time for one step of the profiled trace under the plan, on the
        hardware this Offloader plans for (the measured SSD and host bandwidths, the host tier,
        memory_budget as the device's memory, the profiled operator times): what a step should
        take once planned, to set beside the measured one. None before there is a plan, and when
        the SSD rates are unknown (ssd_bandwidth="auto" with a loaded plan: the probe that
        measures them runs only before planning). Computed once per plan (a temporary directory
        holds the files the simulator reads)."""
        if self._plan is None or self._trace is None:
            return None
        if self.ssd_dirs and not (self.ssd_read_Bps > 0 and self.ssd_write_Bps > 0):
            return None
        if self._prediction is not None and self._prediction[0] is self._plan:
            return self._prediction[1]
        import json
        import tempfile

        with tempfile.TemporaryDirectory(prefix="teraio-predict-") as d:
            hw = dict(self._hw(), name="offloader", gpus=1)
            hw_path = os.path.join(d, "hw.json")
            with open(hw_path, "w") as f:
                json.dump(hw, f)
            trace_path, plan_path = os.path.join(d, "step.tio"), os.path.join(d, "step.plan")
            self._trace.save(trace_path)
            self._plan.save(plan_path)
            # the executor offloads on demand where the plan falls short: so does the model
            r = _core.simulate(trace_path, hw=hw_path, plan=plan_path, demand_evict=True)
        value = float(r["iteration_s"])
        self._prediction = (self._plan, value)
        return value

    def _load_plan(self, path):
        from teraio.torch._mode import StepProgram

        path = str(path)
        if not os.path.exists(path) or not os.path.exists(path + ".trace"):
            raise ValueError(f"plan: {path!r} (and {path + '.trace'!r}) must exist: write them "
                             "with Offloader.save_plan() in an earlier run")
        trace = _core.RtTrace.load(path + ".trace")
        plan = _core.RtPlan.load(path)
        try:
            plan.check(trace)
        except _Error as e:
            raise ValueError(f"plan: {path!r} does not belong to {path + '.trace'!r}: {e}") \
                from None
        prog = StepProgram(tensors=trace.tensors(), kernels=[
            (n, d, f, tuple(u)) for (n, d, f, u) in trace.kernels()])
        prog.n_globals = int(trace.meta("n_globals") or 0)
        self._trace, self._plan, self._prog = trace, plan, prog
        self._loaded = (trace, plan, prog)

    def _check_globals(self, globals_, where):
        prog = self._prog
        if len(globals_) != prog.n_globals or any(
                st.nbytes() != prog.tensors[i][0] and st.nbytes() != 0
                for i, (_, st, _) in enumerate(globals_)):
            first = next((i for i, (n, st, _) in enumerate(globals_)
                          if i >= prog.n_globals or prog.tensors[i][0] != st.nbytes()), None)
            detail = ""
            if first is not None:
                detail = f"; first difference: global {first} ({globals_[first][0]}, " \
                         f"{globals_[first][1].nbytes()} bytes)"
            raise ValueError(
                f"{where}: the plan was made for a model with {prog.n_globals} global tensors "
                f"(parameters, gradients, optimizer states), this one has {len(globals_)}"
                f"{detail}: pass a plan made for this model, or none to profile it")

    # ---- planning -------------------------------------------------------------------------
    def _hw(self):
        return {
            "gpu_memory_bytes": self.budget,
            "gpu_reserve_bytes": 0,
            "pcie_h2d_Bps": self.host_Bps,
            "pcie_d2h_Bps": self.host_Bps,
            "ssd_count": max(1, len(self.ssd_dirs)),
            "ssd_read_Bps": self.ssd_read_Bps if self.ssd_dirs else 1.0,
            "ssd_write_Bps": self.ssd_write_Bps if self.ssd_dirs else 1.0,
            "ssd_efficiency": 1.0,
            "ssd_latency_s": 1e-4,
            # the probe's reads and writes at once (docs/hardware.md, "SSD model"); no
            # write-cache model for the probed directory
            "ssd_mixed_Bps": self._ssd_mixed_Bps(),
            "ssd_write_cache_bytes": 0,
            "ssd_sustained_write_Bps": 0.0,
            "host_memory_bytes": max(self.host_memory, 1 << 30),
            "host_offload_cap_bytes": self.host_memory,
            "host_memory_Bps": self.host_Bps,
            "gds": 0,
        }

    def _ssd_mixed_Bps(self):
        """Per-directory read + write rate with both directions at once, as measured by the
        probe (0: not measured, the model time-shares reads and writes), at most read + write
        (what the hardware description accepts)."""
        m = (self.ssd_measured or {}).get("mixed_Bps", 0.0)
        return min(m, self.ssd_read_Bps + self.ssd_write_Bps) if self.ssd_dirs and m > 0 else 0.0

    def _policy(self):
        if self.policy != "teraio":
            return self.policy
        return "teraio-mixed" if self.host_memory else "teraio-ssd"

    def _measure_ssd(self):
        """ssd_bandwidth="auto": write and read back PROBE_BYTES through this Offloader's own
        engine (its backend, chunk size and queue depth, striped over every directory) and plan
        with the rates seen, per directory. Once per Offloader. An I/O error here is the one
        training would meet: it is raised (teraio.Error), naming the directories."""
        import ctypes
        import mmap
        import time

        n = PROBE_BYTES
        buf = mmap.mmap(-1, n)  # page-aligned: what O_DIRECT needs, no staging copy
        if hasattr(mmap, "MADV_HUGEPAGE"):  # like the engine's staging memory (tio_io_alloc):
            try:  # few segments per request (docs/engine.md, "Buffer memory")
                buf.madvise(mmap.MADV_HUGEPAGE)
            except OSError:
                pass
        view = ctypes.c_char.from_buffer(buf)
        try:
            ptr = ctypes.addressof(view)
            ctypes.memset(ptr, 0x5A, n)
            eid = PROBE_ID
            tier = 2  # TIO_TIER_SSD: the SSDs, not the host tier
            t0 = time.perf_counter()
            self._engine.write(eid, ptr, n, tier)
            t1 = time.perf_counter()
            self._engine.read(eid, ptr, n)
            t2 = time.perf_counter()
            # both directions at once, as training moves them: half the probe read back while
            # the other half is written; the simulator's shared SSD budget takes this as the
            # drive's mixed point (ssd_mixed_Bps)
            t3, t4, nmix = self._probe_mixed(eid, ptr, n, tier)
            self._engine.drop(eid)
            ndirs = max(1, len(self.ssd_dirs))
            self.ssd_write_Bps = n / max(t1 - t0, 1e-9) / ndirs
            self.ssd_read_Bps = n / max(t2 - t1, 1e-9) / ndirs
            self.ssd_measured = {"write_Bps": self.ssd_write_Bps, "read_Bps": self.ssd_read_Bps,
                                 "mixed_Bps": nmix / max(t4 - t3, 1e-9) / ndirs,
                                 "probe_bytes": n}
        except _Error as e:  # the SSD path training would use fails: say so now
            from teraio._bounded import error_in

            raise error_in(e, f"measuring the SSD directories {self.ssd_dirs} for "
                              f"ssd_bandwidth='auto' ({n >> 20} MiB written and read "
                              f"back)") from None
        finally:
            del view
            buf.close()

    def _probe_mixed(self, eid, ptr, n, tier):
        """Both directions at once, in the probe's own buffer (no more memory than the probe):
        store its first half (id eid - 2), then read it back into that half while its second
        half is written (id eid - 1), on two threads (the engine is thread-safe and releases
        the GIL). Returns the start and end of the two transfers together and their bytes."""
        import threading
        import time

        h = n // 2
        err = []

        def write():
            try:
                self._engine.write(eid - 1, ptr + h, h, tier)
            except BaseException as e:  # noqa: BLE001 - raised in the caller below
                err.append(e)

        self._engine.write(eid - 2, ptr, h, tier)
        th = threading.Thread(target=write, name="teraio-ssd-probe")
        t0 = time.perf_counter()
        th.start()
        try:
            self._engine.read(eid - 2, ptr, h)
        finally:
            th.join()  # the caller frees the buffer only after the write is done
        t1 = time.perf_counter()
        if err:
            raise err[0]
        self._engine.drop(eid - 1)
        self._engine.drop(eid - 2)
        return t0, t1, 2 * h

    def _make_plan(self, prog):
        if self.ssd_auto and self.ssd_dirs and self.ssd_measured is None:
            self._measure_ssd()
        if self.budget_fraction is not None:
            self.budget = max(1, int(self.budget_fraction * prog.peak_resident()))
        self._check_program(prog)
        meta = {"source": "teraio.torch", "n_globals": str(prog.n_globals)}
        trace = _core.RtTrace.build(prog.tensors, prog.kernels, meta)
        plan = _core.RtPlan.make(trace, self._hw(), self._policy(), self.min_tensor_bytes, True)
        s = plan.summary()
        if not s["feasible"]:
            _warn(f"teraio: the plan cannot keep every operator under memory_budget "
                  f"{_core.format_bytes(self.budget)} (short by "
                  f"{_core.format_bytes(s['shortfall_bytes'])} at operator "
                  f"{s['shortfall_kernel']}); the executor offloads on demand where it must")
        self._trace, self._plan, self._prog = trace, plan, prog
        self._counts["replans"] += 1

    def _check_program(self, prog):
        """ValueError if the budget cannot hold an operator of prog (recorded so far)."""
        ws = prog.working_sets()
        if not ws:
            return
        kmax = max(range(len(ws)), key=ws.__getitem__)
        if ws[kmax] > self.budget:
            raise ValueError(
                f"memory_budget: {_core.format_bytes(self.budget)} is below the working set "
                f"of operator {kmax} ({prog.kernels[kmax][0]}: "
                f"{_core.format_bytes(ws[kmax])}, the tensors it uses at once): raise "
                f"memory_budget to at least {_core.format_bytes(ws[kmax])}")
        need, kmax, fixed = self._min_budget(prog)
        if need > self.budget:
            raise ValueError(
                f"memory_budget: {_core.format_bytes(self.budget)} is below what operator "
                f"{kmax} ({prog.kernels[kmax][0]}) needs resident: "
                f"{_core.format_bytes(need)}, its working set plus "
                f"{_core.format_bytes(fixed)} of live tensors teraio never moves (smaller "
                f"than min_tensor_bytes={_core.format_bytes(self.min_tensor_bytes)}, or "
                f"inputs and communication buffers): raise memory_budget to at least "
                f"{_core.format_bytes(need)} or lower min_tensor_bytes")

    def _movable_ids(self, prog):
        """Tensors the executor may move: big enough and not pinned (inputs, buffers of
        collectives). The plan's moves are among them; the rest can still be offloaded on demand
        when the plan cannot keep an operator under the budget."""
        from teraio.torch._mode import F_PINNED

        return frozenset(t for t, (b, _, f, _) in enumerate(prog.tensors)
                         if b >= max(1, self.min_tensor_bytes) and not f & F_PINNED)

    def _min_budget(self, prog):
        """(bytes, operator, fixed): the most any operator needs resident when everything
        movable and unused by it is offloaded: its working set plus the live tensors that are
        never moved (the executor's accounting: globals always, an intermediate from its first
        to its last use, free marker included)."""
        movable = self._movable_ids(prog)
        fixed = prog.liveness(exclude=movable)[2]  # bytes never moved, live at each operator
        tb = [t[0] for t in prog.tensors]
        best = (0, 0, 0)
        for k, (_, _, _, u) in enumerate(prog.kernels):
            cur = fixed[k]
            used = set(u[i] for i in range(0, len(u), 2))
            need = cur + sum(tb[t] for t in used if t in movable)
            if need > best[0]:
                best = (need, k, cur)
        return best

    def _start_runtime(self):
        if self.budget_fraction is not None and self.budget == 0:
            self.budget = max(1, int(self.budget_fraction * self._prog.peak_resident()))
        s = self._plan.summary()
        if s["ssd_peak_bytes"]:
            if not self.ssd_dirs:
                raise ValueError("the plan offloads to SSD but ssd_dirs is empty")
            try:
                self._engine.reserve(s["ssd_peak_bytes"])
            except _Error as e:
                raise _Error(e.args[0], f"ssd_dirs: cannot reserve the plan's "
                             f"{_core.format_bytes(s['ssd_peak_bytes'])} of SSD space: "
                             f"{e.args[1]}: free space there, add directories, or raise "
                             "host_memory / memory_budget") from None
        if s["host_peak_bytes"] > self.host_memory:
            raise ValueError(f"host_memory: the plan needs {s['host_peak_bytes']} bytes of host "
                             f"tier, only {self.host_memory} configured")
        moves = self._plan.moves()
        self._movable = frozenset(m[0] for m in moves) | self._movable_ids(self._prog)
        self._offload_at = {}
        for m in moves:
            if m[2] != 0:  # to a tier: an offload, issued before kernel m[4]
                self._offload_at.setdefault(m[4], []).append(m[0])
        # each executor gets its own range of engine ids: a replaced one that is freed late (the
        # garbage collector decides) must not drop the copies of its successor
        self._generation += 1
        # demand offloads (the executor keeping the budget where the plan cannot): to the host tier
        # while it has room, else to the SSDs
        tier = 0 if self.ssd_dirs and self.host_memory else (2 if self.ssd_dirs else 1)
        # CUDA: stream-ordered. Kernels stay queued on the current stream (never synchronized
        # per operator); every transfer waits, on the engine's threads, for an event recorded
        # on that stream when it was issued (docs/runtime.md, CUDA path)
        stream = 0
        if self._cuda:
            import torch

            stream = torch.cuda.current_stream().cuda_stream
        self._runtime = _core.Runtime(self._trace, self._plan, self._engine,
                                      budget_bytes=self.budget, device=self._cuda,
                                      id_base=self._generation << 32, demand_tier=tier,
                                      stream=stream, stream_ordered=self._cuda)
        if self._alloc_installed:  # planned steps repeat: the block cache may follow their peak
            _core.block_cache_set_bounds(self.cpu_cache_bytes, True)

    def _drop_runtime(self):
        if self._runtime is not None:
            self._accumulate()
            self._runtime = None
            if self._alloc_installed:  # until the next plan: nothing kept hot (see install)
                _core.block_cache_set_bounds(self.cpu_cache_bytes, False)
        self._set_prefault(False)

    def _set_prefault(self, on):
        """cpu_prefault applies to planned steps only (the cache's thread is the process's):
        restore() brings every tensor back at once, and prefaulting the room beside it only
        raised its peak RSS (by 30-60 MiB on the memory test's model)."""
        on = bool(on) and self._alloc_installed
        if on != self._prefault_on:
            _core.block_cache_set_prefault(on)
            self._prefault_on = on

    def _accumulate(self):
        st = self._runtime.stats()
        for k, v in st.items():
            if k in ("resident_bytes",):
                continue
            if k == "peak_resident_bytes":
                self._stats_done[k] = max(self._stats_done.get(k, 0), v)
            else:
                self._stats_done[k] = self._stats_done.get(k, 0) + v

    def _install_allocator(self, model, want):
        """Apply cpu_allocator (see the class docstring): True if teraio's block cache serves
        PyTorch's CPU tensors now. Where the Offloader cannot discard the pages of what it
        releases (FSDP, CUDA), it would only cost memory: not installed."""
        if not want or _on_cuda(model) or not self.aligned_storages:
            return False
        ta = _torch_alloc()
        if ta is None:
            if _torch_alloc_missing():
                _warn_once("teraio._torch_alloc is not in this installation of teraio (PyTorch "
                           "was not importable when it was built, as under pip's default build "
                           "isolation): cpu_allocator is off, glibc's mmap threshold applies "
                           "instead (slower on CPU: docs/user-guide.md, 'Memory on CPU'); "
                           "reinstall with PyTorch installed first: pip install "
                           "--no-build-isolation .")
            return False
        # the process's cache (made once); the bounds are set here whether it is new or not:
        # nothing kept hot before the first planned step, whose warm-up and profiled steps'
        # peaks say nothing of the steady state (_start_runtime turns follow_peak on)
        _core.block_cache_enable()
        _core.block_cache_set_bounds(self.cpu_cache_bytes, False)
        if not ta.install(1 << 20):
            return False
        _ALLOC_USERS[0] += 1
        self._alloc_installed = True
        self._alloc_fin = weakref.finalize(self, _alloc_user_gone)
        self._alloc_fin.atexit = False  # at exit the process's memory goes anyway
        return True

    def _uninstall_allocator(self):
        if self._alloc_installed:
            self._alloc_installed = False
            self._alloc_fin()

    @staticmethod
    def _tune_malloc(model, n):
        """Apply cpu_mmap_threshold (bytes or None; see the class docstring): the value set, or
        None. Last in __init__, so that a refused Offloader leaves the process's malloc alone."""
        if n is None:
            return None
        if _on_cuda(model):  # CUDA: the device memory is what is budgeted
            return None
        if "MALLOC_MMAP_THRESHOLD_" in os.environ or "glibc.malloc.mmap_threshold" in \
                os.environ.get("GLIBC_TUNABLES", ""):
            return None
        return n if _core.malloc_mmap_threshold(n) else None

    # ---- the step -------------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self, kind=None):
        """Context manager around one training step (forward, backward, optimizer step).

        kind: optional, hashable: tells apart steps that look alike at their start but run
        different operators (a Trainer's last step of an epoch with fewer micro-batches); each
        kind gets its own plan, as for the kinds teraio tells apart itself (_step_key: the
        global tensors, the optimizer, and the step's signature, its first operator's shapes)."""
        try:
            hash(kind)
        except TypeError:
            raise TypeError(f"step(kind=...): expected a hashable value, got {kind!r}") from None
        self._user_kind = kind
        from teraio.torch._mode import StepMode, collect_globals

        compiled = _compiled_module(self.model)
        if compiled is not None:
            raise RuntimeError(f"model: {compiled} was compiled with torch.compile after the "
                               "Offloader was made (this step did not start). " + _COMPILE_HELP)
        globals_ = collect_globals(self._gmodel, self.optimizer)
        self._detect_device(globals_)
        self._opt_ran = self._in_optim = False
        self._cur = None  # (state, driver, bounded) once the step's plan is chosen
        self._step_state = None
        if self._steps < self.warmup_steps:
            self._start_step(globals_, None)
            driver = self._cur[1]
        else:  # chosen at the step's first operator, by its signature (_Pending)
            driver = _Pending(self, globals_)
        self._driver = driver
        tls = _dynamo_tls()
        watch = tls is not None and tls.skip_reasons is None
        if watch:  # Dynamo lists the frames it skips: a compiled one would say "dispatch mode"
            tls.skip_reasons = []
        self._dynamo_skips = tls.skip_reasons if watch else None
        failure = lost = None
        ok = False
        try:
            if driver is None:
                yield self
            else:
                with StepMode(driver) as mode:
                    if isinstance(driver, _Pending):
                        driver.mode = mode
                    yield self
            ok = True
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self._driver = None
            if watch:
                tls.skip_reasons = None
            if self._cur is None:  # no operator ran (or the choice itself failed)
                state, driver, bounded = "empty", None, None
                if not ok:  # the choice failed part-way: what it handed over comes back
                    lost = _attempt(self._restore_runtime)
                    if self._bounded is not None:
                        lost = lost or _attempt(self._bounded.restore)
            else:
                state, driver, bounded = self._cur
            if bounded is not None:
                if ok:
                    driver.end()
                    bounded.end_step(collect_globals(self._gmodel, self.optimizer))
                else:
                    lost = _attempt(bounded.restore)
            elif driver is not None and driver.record:
                if ok:
                    driver.end()  # trailing free markers; CUDA event times
            elif driver is not None:
                if ok:
                    driver.end()
                elif not driver.passthrough:
                    lost = _attempt(driver.restore)  # an exception: bring everything back
            if failure is not None:
                self._note_failure(failure, lost)
            if ok:
                self._check_dynamo("this step ran eagerly to its end; its optimizer update "
                                   "stands" if self._opt_ran else "this step ran eagerly")
                self._finish_step(state, driver)

    def _start_step(self, globals_, sig):
        """Choose the step's state and driver (self._cur), for a step whose signature is sig
        (None: a warm-up step): at the step's start, or at its first operator. Returns the
        driver (None: operators run untouched)."""
        from teraio.torch._mode import StepDriver

        state = self._step_state = self._choose(globals_, sig)
        if state in ("profile", "unplanned") and self.ssd_auto and self.ssd_dirs \
                and self.ssd_measured is None:
            self._measure_ssd()  # an SSD that fails fails here, before anything of the step ran
        if state == "execute" and self._runtime is None:
            self._start_runtime()
            self._bind_globals(globals_)
            if self._bounded is not None:  # offloaded globals stay offloaded: the executor's now
                self._bounded.hand_over(globals_, self._runtime, self._prog)
                self._bounded_stop()
        if state == "execute":
            self._set_prefault(self.cpu_prefault)
        driver = None
        bounded = None
        if state in ("warmup", "profile", "unplanned") and self._bounded_ok():
            bounded = self._bounded_start()
        elif self._bounded is not None:  # unbounded profiling records true sizes: all back
            self._bounded.restore()
            self._bounded_stop()
        if bounded is not None:
            from teraio._bounded import BoundedRecorder

            driver = BoundedRecorder(globals_, bounded, split_foreach=self.split_foreach,
                                     cuda=self._cuda, in_optim=lambda: self._in_optim)
        elif state == "profile":
            driver = StepDriver(globals_, record=True, split_foreach=self.split_foreach,
                                cuda=self._cuda, in_optim=lambda: self._in_optim)
        elif state == "execute":
            if len(globals_) != self._prog.n_globals or any(
                    st.nbytes() not in (0, self._prog.tensors[i][0])
                    for i, (_, st, _) in enumerate(globals_)):
                self._diverged_before("the model's parameters or optimizer states changed")
                state = "profile"
                driver = StepDriver(globals_, record=True, split_foreach=self.split_foreach,
                                    cuda=self._cuda, in_optim=lambda: self._in_optim)
            else:
                self._bind_globals(globals_)
                driver = StepDriver(globals_, record=False, program=self._prog,
                                    runtime=self._runtime, movable=self._movable,
                                    offload_at=self._offload_at,
                                    split_foreach=self.split_foreach, cuda=self._cuda,
                                    in_optim=lambda: self._in_optim)
                driver.aligned_storages = self.aligned_storages and not self._cuda
        self._cur = (state, driver, bounded)
        self._step_state = state
        return driver

    def _note_failure(self, exc, lost):
        """Say on the exception that ended a step (a note under its traceback) in which state
        the step left the model and optimizer."""
        if self._in_optim:
            phase = ("during optimizer.step(): some parameters and optimizer states may be "
                     "updated and others not: reload them from a checkpoint before going on")
        elif self._opt_ran:
            phase = "after optimizer.step(): this step's update stands"
        else:
            phase = ("before optimizer.step(): the parameters and optimizer states are as "
                     "before this step (its gradients may be in .grad)")
        self._in_optim = False  # its post-hook did not run
        msg = f"teraio: the step failed {phase}; "
        if lost is None:
            msg += "every tensor teraio had offloaded is back in memory"
        else:
            msg += (f"bringing the offloaded tensors back failed too ({lost}): some parameters "
                    "or optimizer states hold no data: reload them from a checkpoint")
        if hasattr(exc, "add_note"):
            exc.add_note(msg)

    # ---- one plan per kind of step ---------------------------------------------------------------
    def _true_nbytes(self, st):
        """A global's size, offloaded or not (an offloaded storage has 0 bytes now)."""
        nb = st.nbytes()
        if nb:
            return nb
        if self._bounded is not None:
            return self._bounded.true_nbytes(st)
        hit = self._rt_globals.get(st._cdata)
        if hit is not None and hit[0]() is st and self._prog is not None:
            return self._prog.tensors[hit[1]][0]
        return 0

    def _step_key(self, globals_, sig=None):
        """What tells kinds of steps apart: the global tensors that exist at the start
        (parameters, the gradients accumulated so far, optimizer states: their count, sizes and
        kinds), whether the optimizer is expected to step, predicted from the steps seen with
        the same globals and the same number of steps since it last did (gradient accumulation
        over several steps is periodic; a step skipped on overflow is rare, and mispredicted
        once), step(kind=...), and the step's signature sig (_op_signature: its first
        operator's name and argument shapes, e.g. the batch's sequence length)."""
        gsig = tuple((self._true_nbytes(st), kind) for _, st, kind in globals_)
        seen = self._opt_seen.get((gsig, self._since_opt))
        opt = True if self.optimizer is not None and seen is None else bool(
            seen and seen[0] >= seen[1])
        return gsig, opt, self._user_kind, sig

    def _choose(self, globals_, sig=None):
        """The state of the step about to run ("warmup", "profile", "execute", or "unplanned":
        a new kind of step beyond max_plans, run without a plan); switches to the plan made for
        this kind of step. The executor's stored copies stay where they are on a switch: they
        go to the next executor, or to the bounded path of an unplanned step."""
        self._key = None
        if self._steps < self.warmup_steps:
            return "warmup"
        key = self._key = self._step_key(globals_, sig)
        if self._loaded is not None:  # a plan loaded from a file: for the first step after warm-up
            self._check_globals(globals_, "plan")
            self._plans[key] = self._loaded
            self._loaded = None
        entry = self._plans.get(key)
        if entry is not None:
            self._plans.move_to_end(key)
            if self._cur_key != key:
                self._runtime_to_bounded()  # its stored globals: for the next executor
                self._trace, self._plan, self._prog = entry
                self._cur_key = key
            return "execute"
        if self._runtime is not None:  # a new kind of step: profiled (the budget kept reactively)
            if self._bounded_ok():
                self._runtime_to_bounded()
            else:
                self._restore_runtime()
                self._drop_runtime()
        self._cur_key = None
        if len(self._plans) >= self.max_plans and key not in self._profiled:
            if not self._plans_full_warned:
                self._plans_full_warned = True
                _warn(f"teraio: step {self._steps}: a new kind of step (step signature "
                      f"{_sig_text(sig)}) beyond max_plans={self.max_plans}: it and further new "
                      "kinds run without a plan (kept within the budget reactively where "
                      "bounded_unplanned applies); raise max_plans, or make fewer distinct "
                      "shapes (e.g. pad sequences to a few bucket lengths)")
            return "unplanned"
        return "profile"

    def _runtime_to_bounded(self):
        """Drop the executor; the globals it has stored keep their copies, which become the
        bounded path's (read back when an operator needs them, or handed to the next executor
        by BoundedMemory.hand_over): a switch between plans moves no byte by itself."""
        rt = self._runtime
        if rt is None:
            return
        b = self._bounded_start()
        for ref, tid in list(self._rt_globals.values()):
            eid = rt.give_stored(tid)
            if eid is not None:
                b.adopt(ref(), self._prog.tensors[tid][0], eid, self._prog.tensors[tid][3])
        self._rt_globals = {}
        self._drop_runtime()

    def _diverged_before(self, reason):
        self._restore_runtime()
        self._note_divergence(reason)

    def _note_divergence(self, reason, mispredicted=False):
        """A step left its plan: it was brought back. A step whose optimizer did not do what
        was predicted (accumulation, a skipped step) keeps the plan: the next step of this
        kind uses its own. Any other reason (shapes, control flow) drops the plan, so that
        the next step of this kind is profiled again."""
        self.last_divergence = reason
        self._counts["steps_diverged"] += 1
        keep = mispredicted and self._cur_key is not None
        _warn(f"teraio: step {self._steps}: {reason}; this step ran without offloading "
              "(every tensor was brought back)" + (
                  "" if keep else " and the next step of this kind re-profiles"))
        self._drop_runtime()
        if not keep and self._cur_key is not None:
            self._plans.pop(self._cur_key, None)
        self._cur_key = None
        self._prog = self._plan = self._trace = None

    def _finish_step(self, state, driver):
        self._steps += 1
        key = self._key
        mispredicted = key is not None and key[1] != self._opt_ran
        if key is not None:  # what the optimizer did after this many steps since it last stepped
            seen = self._opt_seen.setdefault((key[0], self._since_opt), [0, 0])
            seen[0 if self._opt_ran else 1] += 1
            key = (key[0], self._opt_ran) + key[2:]  # the kind of step this one turned out to be
        self._since_opt = 0 if self._opt_ran or self.optimizer is None else min(
            self._since_opt + 1, 64)
        if state in ("warmup", "empty"):
            self._counts["steps_passthrough"] += 1
            return
        if state == "unplanned":
            self._counts["steps_unplanned"] += 1
            return
        if state == "profile":
            self._counts["steps_profiled"] += 1
            n = self._profiled.get(key, 0) + 1
            self._profiled[key] = n
            if n >= self.profile_steps:
                self._profiled.pop(key, None)
                from teraio.torch._fsdp import pin_owned

                pin_owned(self._gmodel, driver)  # FSDP2's own buffers: never moved
                self._drop_runtime()
                try:
                    self._make_plan(driver.prog)
                except (ValueError, _Error) as e:
                    raise _after_update(e, self._opt_ran) from None
                self._plans[key] = (self._trace, self._plan, self._prog)
                self._cur_key = key
            return
        if driver.diverged:
            self._note_divergence(driver.diverged, mispredicted)
            return
        self._counts["steps_offloaded"] += 1

    def _detect_device(self, globals_):
        self._cuda = bool(globals_) and globals_[0][1].device.type == "cuda"

    # ---- outside steps ------------------------------------------------------------------------
    def _bind_globals(self, globals_):
        """The executor's globals by tensor id (its plan's order), for _restore_runtime: the
        globals collected later may be others (a gradient that appeared, a state that went)."""
        self._rt_globals = {st._cdata: (weakref.ref(st), i)
                            for i, (_, st, _) in enumerate(globals_)}

    def _restore_runtime(self):
        if self._runtime is None:
            return
        import torch

        by_id = {i: ref() for ref, i in self._rt_globals.values()}
        acts = self._runtime.restore_begin()
        for kind, t, nb in acts:
            st = by_id.get(t)
            if st is None:  # died while stored (its owner dropped it): read into scratch memory
                st = by_id[t] = torch.UntypedStorage(nb, device="cuda" if self._cuda else "cpu")
            if st.nbytes() != nb:  # else never released (a failed release): memory still there
                st.resize_(nb)
            self._runtime.bind(t, st.data_ptr())
        self._runtime.restore_finish()

    def restore(self):
        """Bring every offloaded tensor back (before evaluating, checkpointing or inspecting the
        parameters outside a step). Offloading resumes with the next step."""
        if self._driver is not None:
            raise RuntimeError("restore() inside a step: call it between steps")
        self._set_prefault(False)  # until the next step
        self._restore_runtime()
        if self._bounded is not None:
            self._bounded.restore()

    def close(self):
        """restore() and release the engine's files."""
        self.restore()
        self._bounded_stop()
        self._drop_runtime()
        self._engine = None
        self._uninstall_allocator()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def report(self) -> dict:
        """Counters so far: bytes_offloaded, bytes_prefetched, stall_s, peak_managed_bytes,
        steps_profiled, steps_offloaded, and more."""
        st = dict(self._stats_done)
        if self._runtime is not None:
            cur = self._runtime.stats()
            for k, v in cur.items():
                if k == "peak_resident_bytes":
                    st[k] = max(st.get(k, 0), v)
                elif k != "resident_bytes":
                    st[k] = st.get(k, 0) + v
        out = {
            "bytes_offloaded": st.get("bytes_offloaded", 0),
            "bytes_prefetched": st.get("bytes_prefetched", 0),
            "stall_s": st.get("stall_s", 0.0) + st.get("pressure_stall_s", 0.0)
            + st.get("demand_stall_s", 0.0),
            "peak_managed_bytes": st.get("peak_resident_bytes", 0),
            "unconstrained_peak_bytes": self._prog.peak_resident() if self._prog else 0,
            "memory_budget": self.budget,
            "offloads": st.get("offloads", 0),
            "prefetches": st.get("prefetches", 0),
            "urgent_reads": st.get("urgent_reads", 0),
            "demand_offloads": st.get("demand_offloads", 0),
            "bytes_demand_offloaded": st.get("bytes_demand_offloaded", 0),
            "demand_stall_s": st.get("demand_stall_s", 0.0),
            "over_budget_kernels": st.get("over_budget_kernels", 0),
            "deferred_prefetches": st.get("deferred_prefetches", 0),
            "tier_fallbacks": st.get("tier_fallbacks", 0),
            "tier_full_kept": st.get("tier_full_kept", 0),
            "io_issue_s": st.get("io_issue_s", 0.0),
        }
        bs = dict(self._bounded_done)
        bpeak = self._bounded_peak
        if self._bounded is not None:
            for k, v in self._bounded.stats.items():
                bs[k] += v
            bpeak = max(bpeak, self._bounded.peak_resident)
        out["unplanned_peak_bytes"] = bpeak  # warm-up and profiled steps, tracked (>= min size)
        out["unplanned_bytes_offloaded"] = bs["bytes_offloaded"]
        out["unplanned_bytes_read"] = bs["bytes_read"]
        out["unplanned_io_s"] = bs["io_s"]
        out.update(self._counts)
        out["cpu_mmap_threshold"] = self.cpu_mmap_threshold
        out["cpu_prefault"] = bool(self.cpu_allocator and self.cpu_prefault)
        out["cpu_allocator"] = None
        if self.cpu_allocator:
            out["cpu_allocator"] = _core.block_cache_stats()
            ta = _torch_alloc()
            out["cpu_allocator"]["fallbacks"] = ta.fallbacks() if ta else 0
            out["cpu_allocator"]["installed"] = bool(self._alloc_installed and ta
                                                     and ta.installed())
        if self._plan is not None:
            out["plan"] = self._plan.summary()
            out["predicted_step_s"] = self.predicted_step_s()
        if self._engine is not None:
            out["engine"] = self._engine.stats()
        if self.ssd_dirs:
            out["ssd_read_Bps"] = self.ssd_read_Bps  # what the planner assumed, per directory
            out["ssd_write_Bps"] = self.ssd_write_Bps
            out["ssd_bandwidth_measured"] = self.ssd_auto
        return out
