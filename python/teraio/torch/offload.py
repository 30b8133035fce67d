"""teraio.Offloader: profile a few training steps, plan, then offload tensors on live training.

    off = teraio.Offloader(model, optimizer, memory_budget="8GiB",
                           ssd_dirs=["/mnt/nvme0/tio-{rank}"], host_memory="16GiB",
                           options=teraio.OffloadOptions(cpu_allocator=True))  # opt-in: CPU
    for batch in loader:
        with off.step():
            loss = model(batch).loss; loss.backward(); opt.step(); opt.zero_grad()
    off.restore()            # optional: a use between steps brings offloaded tensors back
    print(off.report())

Steps: `warmup_steps` run first (optimizer state is created lazily), the next `profile_steps` are
recorded (operators, tensors, times), then a plan is made by the C planner and every following
step executes it through the C executor and migration engine. The steps before the plan are kept
within the budget reactively (teraio/_bounded.py); the executor keeps the budget where the plan
cannot (demand offloads). Each kind of step has its own plan, chosen at the step's first
operator (its shapes: a new sequence length is a new kind, profiled once); a switch between plans
leaves offloaded tensors where they are. A step whose operator sequence differs from its plan
(data-dependent control flow, shapes that change later in the step) brings every tensor back,
runs without offloading, warns, and the next step of that kind re-profiles; an optimizer update
that a step skips (GradScaler) is skipped inside its plan, and one that comes after a plan
without an update (accumulation) runs within the budget without a plan: neither diverges.
See docs/runtime.md.

The class is assembled from parts, one job per module: _offload_args (arguments, warnings),
_step_kinds (step signatures, one plan per kind of step), _planning (budget checks, the SSD
probe, planning, plan files), _cpu_memory (process-wide CPU settings), _offload_report,
_save (save(): checkpoints streamed from the tiers).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
import weakref

from teraio import _core
from teraio.torch._cpu_memory import CpuMemory
from teraio.torch._offload_args import (_COMPILE_HELP, _after_update, _attempt, _budget_arg, _bytes,
                                  _compiled_module, _device_backend, _dynamo_tls,
                                  _mmap_threshold_arg, _prefault_arg, _rank, _rate_arg)
from teraio.torch._offload_report import Report
from teraio.torch._planning import Planning
from teraio.torch._save import Saving
from teraio.torch._step_kinds import StepKinds, _Pending
from teraio.options import OPTION_NAMES, OffloadOptions

_Error = _core.Error


def _options_arg(options, deprecated):
    """The OffloadOptions to use: options (None: the defaults) with the options given as
    keyword arguments of the Offloader (deprecated: a DeprecationWarning names the new
    spelling) taken into it; an unknown keyword is a TypeError."""
    if options is None:
        options = OffloadOptions()
    elif not isinstance(options, OffloadOptions):
        raise TypeError(f"options: expected a teraio.OffloadOptions, got "
                        f"{type(options).__name__} {options!r}: pass "
                        "options=teraio.OffloadOptions(...)")
    unknown = sorted(set(deprecated) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"Offloader() got an unexpected keyword argument {unknown[0]!r} "
                        f"(its keyword arguments: memory_budget, ssd_dirs, host_memory, options; "
                        f"the rest are fields of teraio.OffloadOptions)")
    if deprecated:
        given = ", ".join(f"{k}={v!r}" for k, v in deprecated.items())
        warnings.warn(f"teraio.Offloader({given}) is deprecated: pass "
                      f"options=teraio.OffloadOptions({given})", DeprecationWarning, stacklevel=3)
        options = dataclasses.replace(options, **deprecated)
    return options


class Offloader(Planning, StepKinds, CpuMemory, Report, Saving):
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
    options: a teraio.OffloadOptions with everything else (planning, the engine, and the
        process-wide CPU memory settings); None: the defaults.

    With the default options the Offloader changes nothing outside its own objects: on CPU,
    the memory it frees by offloading then mostly stays in glibc's heap, so the process's RSS
    drops less (docs/user-guide.md, "Memory on CPU"). OffloadOptions(cpu_allocator=True) opts
    in to what makes it leave the process: PyTorch's CPU allocator replaced by teraio's block
    cache for the whole process (or, where that cannot be used, glibc's mmap threshold).

    The options passed as keyword arguments of the Offloader (Offloader(..., policy="none"))
    still work: each is taken into options, with a DeprecationWarning that names the new
    spelling.
    """

    def __init__(self, model, optimizer=None, *, memory_budget, ssd_dirs=(), host_memory=0,
                 options=None, **deprecated):
        self.options = o = _options_arg(options, deprecated)
        import torch  # noqa: F401  (the torch layer needs it; teraio itself does not)

        from teraio.torch import _between

        self._closed = False  # close(): steps refused, restore() a no-op
        self._io_seen = (0, 0)  # the engine's retries and checksum mismatches logged so far
        self._in_step = False
        self._guard = None  # _between.Guard on the mode stack between steps
        self._hooks = []
        self._owned = (("model", model), ("optimizer", optimizer))
        _between.claim(self, self._owned)  # one open Offloader per model and optimizer

        self.model = model
        self.optimizer = optimizer
        from teraio.torch import _fsdp  # FSDP2: what collect_globals reads; refuses TP DTensors

        self._gmodel = _fsdp.globals_model(model, o.warmup_steps)
        compiled = _compiled_module(model)
        if compiled is not None:
            raise ValueError(f"model: {compiled} (torch.compile). " + _COMPILE_HELP)
        self.budget_fraction, self.budget = _budget_arg(memory_budget)
        self._check_budget_params(model)
        self.host_memory = _bytes(host_memory, "host_memory")
        # FSDP resizes the storages of its parameters itself: those must stay resizable; and
        # PyTorch must have UntypedStorage._swap_data_ptr_ (2.13 has it, 2.11 does not)
        self.aligned_storages = (o.aligned_storages and self._gmodel is model
                                 and hasattr(torch.UntypedStorage, "_swap_data_ptr_"))
        self.min_tensor_bytes = _bytes(o.min_tensor_bytes, "min_tensor_bytes")
        mmap_threshold = _mmap_threshold_arg(o.cpu_mmap_threshold)  # applied once all is checked
        self.cpu_cache_bytes = _bytes(o.cpu_cache_bytes, "cpu_cache_bytes")
        self.cpu_prefault = _prefault_arg(o.cpu_prefault)
        self._prefault_on = False
        self.rank = _rank() if o.rank is None else o.rank
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
        warmup_steps = o.warmup_steps
        if warmup_steps is None:
            # DDP rebuilds its gradient buckets in the second iteration: profile after it.
            warmup_steps = 2 if type(model).__name__ == "DistributedDataParallel" else 1
        if warmup_steps < 1 and optimizer is not None:
            raise ValueError("OffloadOptions.warmup_steps: must be >= 1 with an optimizer (its "
                             "state is created in the first step)")
        self.max_plans = o.max_plans
        self.policy = o.policy
        self.warmup_steps = warmup_steps
        self.profile_steps = o.profile_steps
        self.split_foreach = o.split_foreach
        # "auto": measured through the engine on the SSD directories when the first plan is made
        self.ssd_auto = o.ssd_bandwidth == "auto"
        self.ssd_measured = None
        rate = 0.0 if self.ssd_auto else _rate_arg(o.ssd_bandwidth, "ssd_bandwidth")
        self.ssd_read_Bps = self.ssd_write_Bps = rate
        self.host_Bps = _rate_arg(o.host_bandwidth, "host_bandwidth")
        self._cuda = False
        backend = o.backend
        if backend is None:
            backend = _device_backend(model)
        # Staging memory for unaligned tensors (PyTorch's CPU allocator aligns to 64 bytes, O_DIRECT
        # needs 4 KiB) is queue depth x chunk: kept small, it is memory the budget does not see.
        self._engine = _core.Engine(self.ssd_dirs, self.host_memory, backend, verify=bool(o.verify),
                                    backend_options=o.backend_options,
                                    queue_depth=int(o.io_queue_depth),
                                    chunk_bytes=_bytes(o.io_chunk, "io_chunk"))
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
        self._kinds = {}  # per kind of step: what report() says of it (StepKinds._kind_info)
        self._rt_key = None  # the kind of step of the executor now running
        self._opt_seen = {}  # (globals, steps since the optimizer stepped) -> [stepped, did not]
        self._since_opt = 0
        self._opt_ran = False
        self._step_state = None  # the running step's ("warmup", "profile", "execute")
        self._rt_globals = {}  # the executor's globals: storage -> (weak reference, tensor id)
        self._rt_sizes = {}  # their bytes in the plan, and names, by tensor id
        self._rt_names = {}
        self._rt_id_base = 0
        self._rt_eids = {}
        self._in_optim = False
        self._stats_done = {}
        self._counts = dict(steps_profiled=0, steps_offloaded=0, steps_diverged=0,
                            steps_passthrough=0, steps_unplanned=0, replans=0,
                            updates_skipped=0, updates_beyond_plan=0)
        self._plans_full_warned = False
        self.last_divergence = None
        # warm-up and profiled steps (no plan yet) kept within the budget reactively (CPU, one
        # process: a collective may still be using a buffer, and CUDA needs stream ordering)
        self.bounded_unplanned = o.bounded_unplanned
        self._bounded = None
        self._bounded_done = dict(offloads=0, bytes_offloaded=0, reads=0, bytes_read=0, io_s=0.0)
        self._bounded_peak = 0
        self._next_eid = None
        self._plan_path = o.plan
        if o.plan is not None:
            self._load_plan(o.plan)
        self._alloc_installed = False
        self.cpu_allocator = self._install_allocator(model, o.cpu_allocator)
        if mmap_threshold == "auto":  # the fallback of cpu_allocator=True where it cannot serve
            mmap_threshold = 64 << 10 if o.cpu_allocator and not self.cpu_allocator else None
        self.cpu_mmap_threshold = self._tune_malloc(model, mmap_threshold)
        self._install_hooks(model, optimizer)
        _between.register(self, self._owned)

    def _install_hooks(self, model, optimizer):
        """The optimizer's step marks the optimizer's part of a step; outside a step, every way
        into the model and the optimizer brings the offloaded tensors back
        (teraio.torch._between)."""
        h = self._hooks
        if optimizer is not None:
            h.append(optimizer.register_step_pre_hook(lambda *a: self._set_optim(True)))
            h.append(optimizer.register_step_post_hook(lambda *a: self._set_optim(False)))
            h.append(optimizer.register_state_dict_pre_hook(
                lambda *a: self._outside("optimizer.state_dict()")))
            h.append(optimizer.register_load_state_dict_pre_hook(
                lambda *a: self._outside("optimizer.load_state_dict()")))
        if model is not None and hasattr(model, "register_forward_pre_hook"):
            h.append(model.register_forward_pre_hook(
                lambda *a: self._outside("the model's forward")))
            for m in model.modules():
                h.append(m.register_state_dict_pre_hook(
                    lambda *a: self._outside("the model's state_dict()")))
                h.append(m.register_load_state_dict_pre_hook(
                    lambda *a: self._outside("the model's load_state_dict()")))

    def _outside(self, what):
        if not self._in_step and not self._saving:  # save(): streamed from where they are
            self._bring_back(what)

    def _bring_back(self, what):
        """restore() for `what` (a use of the model or optimizer between steps); its failure is
        a teraio.Error that says what it could not bring back."""
        if self._closed:
            return
        self._drop_guard()
        try:
            self.restore()
        except Exception as e:  # noqa: BLE001 - said with what needed the tensors
            code = e.args[0] if isinstance(e, _Error) and len(e.args) >= 2 else -5
            raise _Error(code, f"teraio: {what} needs the tensors the Offloader offloaded, and "
                         f"bringing them back failed: {e}") from e

    def _drop_guard(self):
        if self._guard is not None:
            from teraio.torch import _between

            if _between.pop(self._guard):
                self._guard = None

    def _arm_guard(self):
        """At the end of a step: while tensors may be offloaded, guard them
        (teraio.torch._between)."""
        self._drop_guard()
        if self._guard is None and (self._runtime is not None or self._bounded is not None):
            from teraio.torch import _between

            self._guard = _between.Guard(self, self._held_storages())
            _between.push(self._guard)

    def _held_storages(self):
        """The data pointers of the globals the executor holds in memory at the end of a step
        (resident, or written and not released yet): their copy in the engine, where they have
        one, is taken for their contents by the next step (see teraio.torch._between)."""
        rt = self._runtime
        if rt is None:
            return ()
        out = []
        for ref, t in self._rt_globals.values():
            st = ref()
            if st is not None and st.nbytes() > 0 and rt.state(t) in (1, 2):  # resident, writing
                out.append(st.data_ptr())
        return out

    def _set_optim(self, v):
        if v and not self._in_step:  # optimizer.step() between steps: on restored tensors
            self._bring_back("optimizer.step()")
            return
        if not self._in_step:
            return
        if v and not self._opt_ran and self._driver is not None:
            self._check_dynamo("raised before optimizer.step() updated anything; this step's "
                               "gradients are in .grad")
            self._check_before_update()
            self._update_beyond_plan()
        self._in_optim = v
        if v:
            self._opt_ran = True

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
        from teraio.torch._bounded import BoundedMemory

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

    def _start_runtime(self):
        if self.budget_fraction is not None and self.budget == 0:
            self.budget = max(1, int(self.budget_fraction * self._prog.peak_resident()))
        self._rt_key = self._cur_key  # its peak is this kind's (report(): kinds)
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
        # its copy of global t: engine id base + t, or the one it adopted (_rt_eids)
        self._rt_id_base = self._generation << 32
        self._rt_eids = {}
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

    def _accumulate(self):
        st = self._runtime.stats()
        if self._rt_key is not None:
            info = self._kind_info(self._rt_key)
            info["peak_managed_bytes"] = max(info["peak_managed_bytes"],
                                             st.get("peak_resident_bytes", 0))
        for k, v in st.items():
            if k in ("resident_bytes",):
                continue
            if k == "peak_resident_bytes":
                self._stats_done[k] = max(self._stats_done.get(k, 0), v)
            else:
                self._stats_done[k] = self._stats_done.get(k, 0) + v

    # ---- the step -------------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self, kind=None):
        """Context manager around one training step (see _step); refused after close() and
        inside another step."""
        if self._closed:
            raise RuntimeError("off.step(): this Offloader was closed (close() brought every "
                               "tensor back and released its files): make a new "
                               "teraio.Offloader to offload again")
        if self._in_step:
            raise RuntimeError("off.step() inside another off.step() of the same Offloader: "
                               "steps do not nest; use one `with off.step():` per training "
                               "step (step(kind=...) tells kinds of steps apart)")
        self._in_step = True
        self._drop_guard()
        try:
            from teraio.torch import _between

            if self._steps == 0:  # resuming: states from a torch.load'ed state dict (later
                _between.adopt_storages(self.optimizer)  # non-resizable ones stay pinned)
            with self._step(kind):
                yield self
        finally:
            self._in_step = False
            if not self._closed:
                self._arm_guard()
                self._log_io()

    def _log_io(self):
        """Transfers the engine retried (transient failures) or found corrupt (verify) since the
        last step: counted in report() (io_retries, io_crc_errors) and logged as a warning on
        the "teraio" logger, never silent. The C library's own messages of the step (queued
        by teraio._log, logged on the main thread) are handed to the logger first."""
        _core.log_flush()
        if self._engine is None:
            return
        st = self._engine.stats()
        new = (st["retries"] - self._io_seen[0], st["crc_errors"] - self._io_seen[1])
        if new[0] > 0 or new[1] > 0:
            import logging

            self._io_seen = (st["retries"], st["crc_errors"])
            logging.getLogger("teraio").warning(
                "teraio: step %d: the engine retried %d transfer(s) (%d checksum mismatch(es)) "
                "and they succeeded; a disk that keeps failing will fail a step",
                self._steps, new[0], new[1])

    @contextlib.contextmanager
    def _step(self, kind=None):
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
            raise RuntimeError(f"model: {compiled} (torch.compile, after the Offloader was "
                               "made; this step did not start). " + _COMPILE_HELP)
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
        failure = lost = end_failure = None
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
            if ok:  # the step's end (the executor's last transfers) may fail too
                try:
                    if driver is not None:
                        driver.end()  # recording: trailing free markers; CUDA event times
                    if bounded is not None:
                        bounded.end_step(collect_globals(self._gmodel, self.optimizer))
                except BaseException as exc:
                    ok = False
                    failure = end_failure = exc
            if not ok and bounded is not None:
                lost = _attempt(bounded.restore)
            elif not ok and driver is not None and not driver.record:
                # an exception: bring everything back (again, where a divergence of the step
                # tried it and failed, leaving the driver passing operators through)
                lost = _attempt(driver.restore)
                if lost is not None and self._runtime is not None:
                    # the executor failed (sticky): read back from the copies instead
                    lost = _attempt(lambda: self._restore_from_copies(lost))
            if failure is not None:
                self._note_failure(failure, lost)
            if end_failure is not None:
                raise end_failure
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
                self._rt_eids = self._bounded.hand_over(globals_, self._runtime, self._prog)
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
            from teraio.torch._bounded import BoundedRecorder

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
                    err = _after_update(e, self._opt_ran)
                    lost = _attempt(self._restore_all)  # no plan: nothing stays offloaded
                    note = ("teraio: no plan was made; " + (
                        "every tensor teraio had offloaded is back in memory (the next step "
                        "profiles again; to change the options, close() this Offloader and "
                        "make a new one)" if lost is None else
                        f"bringing the offloaded tensors back failed too ({lost}): some "
                        "parameters or optimizer states hold no data"))
                    if hasattr(err, "add_note"):
                        err.add_note(note)
                    raise err from None
                self._plans[key] = (self._trace, self._plan, self._prog)
                self._note_plan(key, self._prog)
                self._cur_key = key
            return
        self._counts["updates_skipped"] += getattr(driver, "optim_skipped", 0)
        if driver.diverged:
            self._note_divergence(driver.diverged, mispredicted)
            return
        self._counts["steps_offloaded"] += 1
        if self._key is not None:
            self._kind_info(self._key)["steps_offloaded"] += 1  # the plan's kind, as chosen

    def _detect_device(self, globals_):
        self._cuda = bool(globals_) and globals_[0][1].device.type == "cuda"

    # ---- outside steps ------------------------------------------------------------------------
    def _bind_globals(self, globals_):
        """The executor's globals by tensor id (its plan's order), for _restore_runtime: the
        globals collected later may be others (a gradient that appeared, a state that went)."""
        self._rt_globals = {st._cdata: (weakref.ref(st), i)
                            for i, (_, st, _) in enumerate(globals_)}
        tensors = self._prog.tensors if self._prog is not None else ()
        self._rt_sizes = {i: tensors[i][0] for i in range(min(len(globals_), len(tensors)))}
        self._rt_names = {i: name for i, (name, _, _) in enumerate(globals_)}

    def _restore_runtime(self):
        if self._runtime is None:
            return
        import torch

        by_id = {i: ref() for ref, i in self._rt_globals.values()}
        try:
            acts = self._runtime.restore_begin()
            for kind, t, nb in acts:
                st = by_id.get(t)
                if st is None:  # died while stored (its owner dropped it): scratch memory
                    st = by_id[t] = torch.UntypedStorage(nb,
                                                         device="cuda" if self._cuda else "cpu")
                if st.nbytes() != nb:  # else never released (a failed release): memory there
                    st.resize_(nb)
                self._runtime.bind(t, st.data_ptr())
            self._runtime.restore_finish()
        except _Error as e:
            self._restore_from_copies(e)

    def _restore_from_copies(self, failure):
        """restore() without the executor, after one of its transfers failed (its error is
        sticky: it refuses every call): every global it released is read back from its copy in
        the engine, which is complete (a tensor is released only once its copy is written; a
        failed write keeps the tensor in memory and the previous copy on disk), and so is the
        one whose read failed (its memory is undefined). Reads only: a disk that fails writes
        loses nothing. The executor is dropped (a new one starts with the next step). Raises
        a teraio.Error naming the tensors it could not bring back."""
        import re

        rt, base = self._runtime, self._rt_id_base
        bad_read = re.search(r"read of tensor (\d+) ", str(failure))
        bad_read = int(bad_read.group(1)) if bad_read else None
        lost = []
        for ref, t in list(self._rt_globals.values()):
            st = ref()
            nb = self._rt_sizes.get(t)
            if st is None or nb is None:
                continue
            state = rt.state(t)
            if st.nbytes() == nb and state != 4 and t != bad_read:  # 4: ST_MATERIALIZE
                continue  # in memory: resident, or written and not released yet
            try:
                if st.nbytes() != nb:
                    st.resize_(nb)
                if self._cuda:
                    import torch

                    torch.cuda.current_stream().synchronize()
                self._engine.read(self._rt_eids.get(t, base + t), st.data_ptr(), nb,
                                  self._cuda)
            except Exception as e:  # noqa: BLE001 - listed below; the others are still read
                lost.append(f"{self._rt_names.get(t, t)} ({e})")
        self._runtime = None  # failed for good: its copies go with it
        self._set_prefault(False)
        if lost:
            raise _Error(failure.args[0] if len(failure.args) >= 2 else -5,
                         f"{failure}; reading back from the copies failed for {len(lost)} "
                         f"tensor(s), which hold no data: {'; '.join(lost[:4])}")

    def restore(self):
        """Bring every offloaded tensor back (before evaluating, checkpointing or inspecting the
        parameters outside a step). Offloading resumes with the next step."""
        if self._driver is not None or self._in_step:
            raise RuntimeError("restore() inside a step: call it between steps")
        if self._closed:
            return
        self._restore_all()

    def _restore_all(self):
        self._drop_guard()
        if self._guard is not None:  # not the innermost mode: it stays, unarmed
            self._guard.armed = False
        self._set_prefault(False)  # until the next step
        self._restore_runtime()
        # the executor would take its copies for clean at the next step, but code between steps
        # may change the tensors (optimizer.step(), load_state_dict()): the next step starts a
        # new one, which writes what it offloads again
        self._drop_runtime()
        if self._bounded is not None:
            self._bounded.restore()

    def close(self):
        """restore() and release the engine's files; the model and optimizer are free for a new
        Offloader. Steps are refused after it; a second close() does nothing."""
        if self._closed:
            return
        self.restore()
        self._bounded_stop()
        self._drop_runtime()
        self._engine = None
        _core.log_flush()  # what the engine said before it closed
        self._uninstall_allocator()
        self._untune_malloc()
        self._closed = True
        for h in self._hooks:
            h.remove()
        self._hooks = []
        from teraio.torch import _between

        _between.release(self, self._owned)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
