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

The Offloader owns the engine and runs the step (warmup -> profile -> execute, the bounded path
of the steps without a plan, restore() and close()); the rest is composed of parts that each own
their state (docs/code-tour.md, "The Offloader's parts"): _planner (Planner, _planning.py: the
budget, the tiers and their rates, the SSD probe, the checks, making plans), _step_kinds
(StepKinds, _step_kinds.py: the plans by kind of step), _exec (Executor, _executor.py: the
running C executor and its globals' copies), _cpu (CpuMemory, _cpu_memory.py: the process-wide
CPU settings), _report (Report, _offload_report.py: the counters and report()), _saver (Saver,
_save.py: save() and streamed_saves(), checkpoints streamed from the tiers). Arguments are read
by _offload_args.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings

from teraio import _core
from teraio.options import OPTION_NAMES, OffloadOptions
from teraio.torch._cpu_memory import CpuMemory
from teraio.torch._executor import Executor
from teraio.torch._offload_args import (_COMPILE_HELP, _after_update, _attempt, _budget_arg,
                                        _bytes, _compiled_module, _device_backend, _dynamo_tls,
                                        _rank, _warn)
from teraio.torch._offload_report import Report
from teraio.torch._planning import Planner, check_budget_params, check_dynamo
from teraio.torch._save import Saver
from teraio.torch._step_kinds import StepKinds, _Pending

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


def _part(part, name, doc):
    """An attribute of the Offloader that one of its parts owns (read and set there)."""
    return property(lambda self: getattr(getattr(self, part), name),
                    lambda self, v: setattr(getattr(self, part), name, v), doc=doc)


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
        budget_fraction, budget = _budget_arg(memory_budget)
        check_budget_params(model, budget)
        host_memory = _bytes(host_memory, "host_memory")
        # FSDP resizes the storages of its parameters itself: those must stay resizable; and
        # PyTorch must have UntypedStorage._swap_data_ptr_ (2.13 has it, 2.11 does not)
        self.aligned_storages = (o.aligned_storages and self._gmodel is model
                                 and hasattr(torch.UntypedStorage, "_swap_data_ptr_"))
        min_tensor_bytes = _bytes(o.min_tensor_bytes, "min_tensor_bytes")
        self._cpu = CpuMemory(o)  # checked now, applied once everything is checked
        self.rank = _rank() if o.rank is None else o.rank
        if isinstance(ssd_dirs, (str, bytes)):
            raise ValueError("ssd_dirs: expected a list of directories, got a string")
        from teraio import _ranks  # "{rank}", "{local_rank}"

        ssd_dirs = [_ranks.expand(d, self.rank, "ssd_dirs") for d in (ssd_dirs or ())]
        for d in ssd_dirs:
            if not os.path.isdir(d):
                raise ValueError(f"ssd_dirs: {d!r} does not exist or is not a directory: "
                                 "create it (mkdir -p) or pass another directory")
            if not os.access(d, os.W_OK | os.X_OK):
                raise ValueError(f"ssd_dirs: {d!r} is not writable by this process: fix its "
                                 "permissions or pass another directory")
        if not ssd_dirs and host_memory == 0:
            raise ValueError("nowhere to offload to: pass ssd_dirs=[...] and/or host_memory=...")
        warmup_steps = o.warmup_steps
        if warmup_steps is None:
            # DDP rebuilds its gradient buckets in the second iteration: profile after it.
            warmup_steps = 2 if type(model).__name__ == "DistributedDataParallel" else 1
        if warmup_steps < 1 and optimizer is not None:
            raise ValueError("OffloadOptions.warmup_steps: must be >= 1 with an optimizer (its "
                             "state is created in the first step)")
        # last of the checks: a whole-compiled model is split into compiled blocks here, so an
        # argument refused above leaves the model as the caller made it
        compiled = _compiled_module(model, split=True)
        if compiled is not None:
            raise ValueError(f"model: {compiled} (torch.compile). " + _COMPILE_HELP)
        self._step_kinds = StepKinds(o.max_plans)
        self.warmup_steps = warmup_steps
        self.profile_steps = o.profile_steps
        self.split_foreach = o.split_foreach
        self._planner = Planner(budget_fraction=budget_fraction, budget=budget,
                                host_memory=host_memory, ssd_dirs=ssd_dirs,
                                min_tensor_bytes=min_tensor_bytes, policy=o.policy,
                                ssd_bandwidth=o.ssd_bandwidth, host_bandwidth=o.host_bandwidth)
        self._cuda = False
        backend = o.backend
        if backend is None:
            backend = _device_backend(model)
        # Staging memory for unaligned tensors (PyTorch's CPU allocator aligns to 64 bytes, O_DIRECT
        # needs 4 KiB) is queue depth x chunk: kept small, it is memory the budget does not see.
        self._engine = _core.Engine(ssd_dirs, host_memory, backend, verify=bool(o.verify),
                                    backend_options=o.backend_options,
                                    queue_depth=int(o.io_queue_depth),
                                    chunk_bytes=_bytes(o.io_chunk, "io_chunk"))
        # the current plan, its trace and the step's program (the current kind's, or loaded)
        self._trace = None
        self._plan = None
        self._prog = None
        self._exec = Executor(self._cpu)
        self._report = Report()
        self._saver = Saver()
        self._driver = None
        self._steps = 0
        self._rewarm = 0  # steps before this one are warm-up steps too (_after_split)
        self._resplit = None  # the model was split into compiled blocks during this step
        self._loaded = None  # (trace, plan, prog) from plan=, until the first step after warm-up
        self._opt_ran = False
        self._step_state = None  # the running step's ("warmup", "profile", "execute")
        self._in_optim = False
        self.last_divergence = None
        # warm-up and profiled steps (no plan yet) kept within the budget reactively (CPU, one
        # process: a collective may still be using a buffer, and CUDA needs stream ordering)
        self.bounded_unplanned = o.bounded_unplanned
        self._bounded = None
        self._next_eid = None
        self._plan_path = o.plan
        if o.plan is not None:
            self._trace, self._plan, self._prog = self._loaded = Planner.load_plan(o.plan)
        self._cpu.apply(model, self.aligned_storages)
        self._install_hooks(model, optimizer)
        _between.register(self, self._owned)

    # what the parts own, under the names users read (docs/user-guide.md)
    budget = _part("_planner", "budget", "The memory budget in bytes (with a fraction: the "
                   "current kind of step's, 0 until its peak is known).")
    budget_fraction = _part("_planner", "budget_fraction", "memory_budget as a fraction of the "
                            "unconstrained peak, or None.")
    host_memory = _part("_planner", "host_memory", "Bytes of the pinned host tier.")
    ssd_dirs = _part("_planner", "ssd_dirs", "The SSD tier's directories, {rank} expanded.")
    min_tensor_bytes = _part("_planner", "min_tensor_bytes", "Smaller tensors are never moved.")
    policy = _part("_planner", "policy", "The planning policy (OffloadOptions.policy).")
    ssd_auto = _part("_planner", "ssd_auto", "Whether the SSD rates are measured (\"auto\").")
    ssd_measured = _part("_planner", "ssd_measured", "What the SSD probe measured, or None.")
    ssd_read_Bps = _part("_planner", "ssd_read_Bps", "SSD read rate planned for, per directory.")
    ssd_write_Bps = _part("_planner", "ssd_write_Bps", "SSD write rate planned for, per "
                          "directory.")
    host_Bps = _part("_planner", "host_Bps", "Host tier rate planned for.")
    max_plans = _part("_step_kinds", "max_plans", "At most this many plans (kinds of step).")
    cpu_allocator = _part("_cpu", "allocator", "Whether teraio's block cache serves PyTorch's "
                          "CPU tensors (cpu_allocator as applied).")
    cpu_mmap_threshold = _part("_cpu", "mmap_threshold", "glibc's mmap threshold as set, or "
                               "None.")
    cpu_cache_bytes = _part("_cpu", "cache_bytes", "OffloadOptions.cpu_cache_bytes in bytes.")
    cpu_prefault = _part("_cpu", "prefault", "Whether the block cache prefaults in planned "
                         "steps (cpu_prefault as read).")
    _runtime = property(lambda self: self._exec.runtime, doc="The running C executor, or None.")
    _movable = property(lambda self: self._exec.movable)
    _offload_at = property(lambda self: self._exec.offload_at)

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
            h.append(model.register_forward_pre_hook(self._compiled_later))
            for m in model.modules():
                h.append(m.register_state_dict_pre_hook(
                    lambda *a: self._outside("the model's state_dict()")))
                h.append(m.register_load_state_dict_pre_hook(
                    lambda *a: self._outside("the model's load_state_dict()")))

    def _outside(self, what):
        if not self._in_step and not self._saver.active:  # save(): streamed from where they are
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
        if self._runtime is None and self._bounded is None:
            return
        # the globals the executor holds in memory: their copy in the engine, where they have
        # one, is taken for their contents by the next step
        held = self._exec.held_storages()
        if self._guard is not None:  # not the innermost mode (another Offloader's guard, or a
            self._guard.rearm(held)  # mode entered after it): it guards from there
            return
        from teraio.torch import _between

        self._guard = _between.Guard(self, held)
        _between.push(self._guard)

    def _offloaded_here(self, st):
        """Whether storage st (no memory now) is one this Offloader offloaded: a global of its
        running executor, or a storage its steps without a plan track (by identity: the
        address of a storage gone may be another's now)."""
        cd = st._cdata
        hit = self._exec.globals.get(cd) if self._runtime is not None else None
        if hit is not None and hit[0]() is st:
            return True
        ref = self._bounded.refs.get(cd) if self._bounded is not None else None
        return ref is not None and ref() is st

    def _set_optim(self, v):
        if v and not self._in_step:  # optimizer.step() between steps: on restored tensors
            self._bring_back("optimizer.step()")
            return
        if not self._in_step:
            return
        if v and not self._opt_ran and self._driver is not None:
            check_dynamo(self._dynamo_skips, "raised before optimizer.step() updated anything; "
                         "this step's gradients are in .grad")
            if self._step_state == "profile":  # the checks of planning, on what ran so far
                self._planner.check_before_update(self._engine, self._driver.prog,
                                                  self.optimizer)
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
            self._bounded = BoundedMemory(self._engine, self._planner.min_tensor_bytes,
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
        self._report.bounded_ended(b)
        self._next_eid = b.next_eid
        self._bounded = None

    def _start_runtime(self):
        p = self._planner
        if p.budget_fraction is not None and p.budget == 0:
            p.budget = max(1, int(p.budget_fraction * self._prog.peak_resident()))
        self._exec.start(self._engine, self._trace, self._plan, p.movable_ids(self._prog),
                         budget=p.budget, key=self._step_kinds.cur_key, cuda=self._cuda,
                         ssd_dirs=p.ssd_dirs, host_memory=p.host_memory)

    def _drop_runtime(self):
        st = self._exec.drop()
        if st is not None:
            self._step_kinds.note_peak(self._exec.key, st.get("peak_resident_bytes", 0))

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
        failed = True
        try:
            from teraio.torch import _between

            _between.sweep()  # guards of Offloaders gone since: off before this step's mode
            if self._steps == 0:  # resuming: states from a torch.load'ed state dict (later
                _between.adopt_storages(self.optimizer)  # non-resizable ones stay pinned)
            with self._step(kind):
                yield self
            failed = False
        finally:
            self._in_step = False
            if self._resplit is not None and not self._closed:
                self._after_split(self._resplit, warm=False)
            if not self._closed:
                self._arm_guard()
                self._log_io(failed)

    # ---- torch.compile after the Offloader was made: teraio.torch._compile -----------------
    def _split_later(self):
        from teraio.torch import _compile

        _compile.split_later(self)

    def _compiled_later(self, module, args):
        from teraio.torch import _compile

        return _compile.compiled_later(self, module, args)

    def _after_split(self, how, warm):
        from teraio.torch import _compile

        _compile.after_split(self, how, warm)

    def _log_io(self, failed):
        """Transfers the engine retried (transient failures) or found corrupt (verify) since the
        last step: counted in report() (io_retries, io_crc_errors) and logged as a warning on
        the "teraio" logger, never silent; as retries that succeeded only when the step did
        (failed: it raised, maybe because a transfer failed for good). The C library's own
        messages of the step (queued by teraio._log, logged on the main thread) are handed to
        the logger first."""
        _core.log_flush()
        if self._engine is None:
            return
        st = self._engine.stats()
        new = (st["retries"] - self._io_seen[0], st["crc_errors"] - self._io_seen[1])
        if new[0] > 0 or new[1] > 0:
            import logging

            self._io_seen = (st["retries"], st["crc_errors"])
            log = logging.getLogger("teraio")
            if failed:  # a failed step is not counted in _steps
                log.warning("teraio: step %d failed; in it the engine retried %d transfer(s) "
                            "(%d checksum mismatch(es)): the step's error says what failed",
                            self._steps + 1, new[0], new[1])
            else:
                log.warning("teraio: step %d: the engine retried %d transfer(s) (%d checksum "
                            "mismatch(es)) and they succeeded; a disk that keeps failing will "
                            "fail a step", self._steps, new[0], new[1])

    @contextlib.contextmanager
    def _step(self, kind=None):
        """Context manager around one training step (forward, backward, optimizer step).

        kind: optional, hashable: tells apart steps that look alike at their start but run
        different operators (a Trainer's last step of an epoch with fewer micro-batches); each
        kind gets its own plan, as for the kinds teraio tells apart itself (StepKinds.key_of: the
        global tensors, the optimizer, and the step's signature, its first operator's shapes)."""
        try:
            hash(kind)
        except TypeError:
            raise TypeError(f"step(kind=...): expected a hashable value, got {kind!r}") from None
        self._step_kinds.user_kind = kind
        from teraio.torch._mode import StepMode, collect_globals

        self._split_later()
        globals_ = collect_globals(self._gmodel, self.optimizer)
        self._detect_device(globals_)
        self._opt_ran = self._in_optim = False
        self._cur = None  # (state, driver, bounded) once the step's plan is chosen
        self._step_state = None
        if self._steps < max(self.warmup_steps, self._rewarm):
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
                check_dynamo(self._dynamo_skips, "this step ran eagerly to its end; its "
                             "optimizer update stands" if self._opt_ran else
                             "this step ran eagerly")
                self._finish_step(state, driver)

    def _start_step(self, globals_, sig):
        """Choose the step's state and driver (self._cur), for a step whose signature is sig
        (None: a warm-up step): at the step's start, or at its first operator. Returns the
        driver (None: operators run untouched)."""
        from teraio.torch._mode import StepDriver

        state = self._step_state = self._choose(globals_, sig)
        p = self._planner
        if state in ("profile", "unplanned") and p.ssd_auto and p.ssd_dirs \
                and p.ssd_measured is None:
            # an SSD that fails fails here, before anything of the step ran
            p.measure_ssd(self._engine)
        if state == "execute" and self._runtime is None:
            self._start_runtime()
            self._exec.bind(globals_, self._prog)
            if self._bounded is not None:  # offloaded globals stay offloaded: the executor's now
                self._exec.eids = self._bounded.hand_over(globals_, self._runtime, self._prog)
                self._bounded_stop()
        if state == "execute":
            self._cpu.set_prefault(self._cpu.prefault)
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
                self._exec.bind(globals_, self._prog)
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
        kinds, counts = self._step_kinds, self._report.counts
        mispredicted = kinds.key is not None and kinds.key[1] != self._opt_ran
        # the kind of step this one turned out to be
        key = kinds.step_done(self._opt_ran, self.optimizer is not None)
        if state in ("warmup", "empty"):
            counts["steps_passthrough"] += 1
            return
        if state == "unplanned":
            counts["steps_unplanned"] += 1
            return
        if state == "profile":
            counts["steps_profiled"] += 1
            if kinds.profiled_enough(key, self.profile_steps):
                from teraio.torch._fsdp import pin_owned

                pin_owned(self._gmodel, driver)  # FSDP2's own buffers: never moved
                self._drop_runtime()
                try:
                    self._trace, self._plan = self._planner.make_plan(self._engine, driver.prog)
                    self._prog = driver.prog
                    counts["replans"] += 1
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
                kinds.add(key, (self._trace, self._plan, self._prog), self._planner.budget,
                          self._planner.budget_fraction)
                kinds.cur_key = key
            return
        counts["updates_skipped"] += getattr(driver, "optim_skipped", 0)
        if driver.diverged:
            self._note_divergence(driver.diverged, mispredicted)
            return
        counts["steps_offloaded"] += 1
        if kinds.key is not None:
            kinds.info(kinds.key)["steps_offloaded"] += 1  # the plan's kind, as chosen

    def _detect_device(self, globals_):
        self._cuda = bool(globals_) and globals_[0][1].device.type == "cuda"

    # ---- kinds of steps -----------------------------------------------------------------------
    def _true_nbytes(self, st):
        """A global's size, offloaded or not (an offloaded storage has 0 bytes now)."""
        nb = st.nbytes()
        if nb:
            return nb
        if self._bounded is not None:
            return self._bounded.true_nbytes(st)
        return self._exec.true_nbytes(st, self._prog)

    def _choose(self, globals_, sig=None):
        """The state of the step about to run ("warmup", "profile", "execute", or "unplanned":
        a new kind of step beyond max_plans, run without a plan); switches to the plan made for
        this kind of step. The executor's stored copies stay where they are on a switch: they
        go to the next executor, or to the bounded path of an unplanned step."""
        kinds = self._step_kinds
        kinds.key = None
        if self._steps < max(self.warmup_steps, self._rewarm):
            return "warmup"
        key = kinds.key = kinds.key_of(globals_, self._true_nbytes, self.optimizer is not None,
                                       sig)
        if self._loaded is not None:  # a plan loaded from a file: for the first step after warm-up
            Planner.check_globals(self._prog, globals_, "plan")
            kinds.add(key, self._loaded, self.budget, self.budget_fraction)
            self._loaded = None
        entry = kinds.lookup(key)
        if entry is not None:
            if kinds.cur_key != key:
                self._runtime_to_bounded()  # its stored globals: for the next executor
                self._trace, self._plan, self._prog = entry
                kinds.cur_key = key
            info = kinds.info(key)
            if self.budget_fraction is not None and info.get("memory_budget"):
                self.budget = info["memory_budget"]  # this kind's fraction of its own peak
            return "execute"
        if self._runtime is not None:  # a new kind of step: profiled (the budget kept reactively)
            if self._bounded_ok():
                self._runtime_to_bounded()
            else:
                self._restore_runtime()
                self._drop_runtime()
        kinds.cur_key = None
        if kinds.full(key, self._steps, sig):
            return "unplanned"
        return "profile"

    def _update_beyond_plan(self):
        """optimizer.step() begins in a step whose plan has no update (it was predicted not to
        step: per-micro-batch accumulation, the first time the updating block comes at its
        place in the cycle). Where every operator of the plan has run, its executor ends the
        iteration there and hands its stored globals to the reactive path, and the update runs
        as the steps without a plan do, within the budget (BoundedRecorder): not a divergence,
        nothing is brought back. The next step with this many steps since an update is
        predicted to update, and gets its own plan. Returns whether it did."""
        cur, key = self._cur, self._step_kinds.key
        if cur is None or cur[0] != "execute" or key is None or key[1]:
            return False
        driver = cur[1]
        if driver is None or driver.record or driver.passthrough or not self._bounded_ok():
            return False
        if driver.dead_pending:
            driver._flush_deaths()
        mode = getattr(driver, "mode", None)
        if mode is None or driver.passthrough or driver.k != len(driver.prog.kernels):
            return False
        driver.end()  # the executor's last transfers: the iteration is whole
        if driver.passthrough:
            return False
        from teraio.torch._bounded import BoundedRecorder
        from teraio.torch._mode import collect_globals

        self._runtime_to_bounded()
        bounded = self._bounded_start()
        tail = BoundedRecorder(collect_globals(self._gmodel, self.optimizer), bounded,
                               split_foreach=self.split_foreach, cuda=self._cuda,
                               in_optim=lambda: self._in_optim)
        mode.driver = tail
        mode._dispatch = None
        self._driver = tail
        self._cur = ("execute", tail, bounded)
        self._report.counts["updates_beyond_plan"] += 1
        return True

    def _runtime_to_bounded(self):
        """Drop the executor; the globals it has stored keep their copies, which become the
        bounded path's (read back when an operator needs them, or handed to the next executor
        by BoundedMemory.hand_over): a switch between plans moves no byte by itself."""
        if self._runtime is None:
            return
        self._exec.give_stored(self._bounded_start(), self._prog)
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
        self._report.counts["steps_diverged"] += 1
        kinds = self._step_kinds
        keep = mispredicted and kinds.cur_key is not None
        _warn(f"teraio: step {self._steps}: {reason}; this step ran without offloading "
              "(every tensor was brought back)" + (
                  "" if keep else " and the next step of this kind re-profiles"))
        self._drop_runtime()
        if keep:
            kinds.cur_key = None
        else:
            kinds.drop_current()
        self._prog = self._plan = self._trace = None

    # ---- outside steps ------------------------------------------------------------------------
    def _restore_runtime(self):
        self._exec.restore(self._engine, self._cuda)

    def _restore_from_copies(self, failure):
        self._exec.restore_from_copies(self._engine, failure, self._cuda)

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
        return self._planner.predicted_step_s(self._trace, self._plan)

    def report(self) -> dict:
        """Counters so far: bytes_offloaded, bytes_prefetched, stall_s, peak_managed_bytes,
        steps_profiled, steps_offloaded, and more."""
        return self._report.build(self)

    def save(self, obj, f, *, pickle_protocol=2):
        """Write a checkpoint between steps: the bytes torch.save(obj, f) writes once every
        tensor is back in memory, without bringing the offloaded ones back. Each is read from
        its tier (host memory or SSD) into one buffer of its size, written into the file and
        freed before the next: the memory the save adds to what stays in memory between steps
        is the largest offloaded tensor (report(): save_peak_bytes).

        obj: the object to save, or a callable that returns it, e.g.
            off.save(lambda: {"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
          called with the Offloader's hooks paused, so that state_dict() hands out the tensors
          as they are (offloaded ones too) instead of bringing every one back. An operator
          that reads an offloaded tensor in it still brings every tensor back first.
        f: a path (written to a temporary file in a new directory beside it and renamed into
          place when complete: a failure leaves nothing under f) or a writable binary file
          object (the checkpoint goes through a temporary file in the first ssd_dirs entry, or
          the system's temporary directory, then is copied into f).
        Refused inside a step. Tensors on a GPU: the same, device memory untouched by the
        offloaded ones (each read from its tier into host memory), the ones in device memory
        copied to the host one at a time as torch.save does; the offloads still in flight from
        the last step are waited for first (not validated on a GPU yet: docs/runtime.md, CUDA
        path)."""
        return self._saver.save(self, obj, f, pickle_protocol)

    def streamed_saves(self):
        """A SaveWindow (a context manager) on this Offloader: between steps, while it is open,
        torch.save and safetensors' save_file write the offloaded tensors streamed from their
        tier, the same bytes as with every tensor in memory, and the model's and optimizer's
        state_dict() hand out the offloaded tensors as they are. For code that saves with
        those calls itself (a Hugging Face Trainer's checkpoint: teraio.hf.OffloadCallback
        opens one around it):

            with off.streamed_saves():
                trainer.save_model(d)
                torch.save(trainer.optimizer.state_dict(), os.path.join(d, "optimizer.pt"))
        """
        return self._saver.window(self)

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
        self._cpu.set_prefault(False)  # until the next step
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
        if self._guard is not None:  # not the innermost mode: it leaves when it is (sweep)
            self._guard.orphaned()
            self._guard = None
        self._bounded_stop()
        self._drop_runtime()
        self._engine = None
        _core.log_flush()  # what the engine said before it closed
        self._cpu.close()
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
