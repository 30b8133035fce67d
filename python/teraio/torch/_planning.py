"""Planning for the Offloader (Planner, one per Offloader): the checks against the budget and the
SSD space, the SSD probe, the hardware description, the planner call, and plan files."""
from __future__ import annotations

import os

from teraio import _core
from teraio.torch._offload_args import _COMPILE_HELP, _local_nbytes, _rate_arg, _warn

_Error = _core.Error


PROBE_BYTES = 64 << 20  # ssd_bandwidth="auto": bytes written and read back once
PROBE_ID = (1 << 63) - 1  # its engine tensor id: runtime ids count up from 0 (id_base = generation
# << 32), the bounded warm-up's from 1 << 62 (_bounded.ID_BASE)


def check_budget_params(model, budget):
    """An absolute budget below the largest parameter can never hold an operator that uses it:
    refused when the Offloader is made."""
    if not budget or model is None:
        return
    try:
        big = max(((_local_nbytes(p), n) for n, p in model.named_parameters()),
                  default=(0, None))
    except Exception:  # noqa: BLE001 - a model without named_parameters()
        return
    if big[0] > budget:
        raise ValueError(
            f"memory_budget: {_core.format_bytes(budget)} is below the parameter "
            f"{big[1]} alone ({_core.format_bytes(big[0])}): raise memory_budget (at "
            f"least a few times the largest parameter)")


_FUNCTION_HELP = (
    "A function compiled on its own (torch.compile(fn)) runs as a region of the step only where "
    "it is wrapped, fn = teraio.function_region(name, fn), and reads no tensor but its "
    "arguments (as TorchTitan's compiled loss; not a function that reads the model's "
    "parameters). ")


def check_dynamo(skips, state):
    """RuntimeError if Dynamo skipped a compiled frame in this step because of the Offloader's
    dispatch mode (a torch.compile'd function or module called inside it); skips: the reasons
    Dynamo listed in this step (None: not watched)."""
    if not skips:
        return
    hit = next((r for r in skips if "dispatch mode" in r), None)
    if hit is not None:
        skips.clear()
        raise RuntimeError(f"torch.compile'd code was called inside off.step() and ran "
                           f"uncompiled ({hit.split(': ')[0]}; {state}). " + _FUNCTION_HELP
                           + _COMPILE_HELP)


def _probe_mixed(engine, eid, ptr, n, tier):
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
            engine.write(eid - 1, ptr + h, h, tier)
        except BaseException as e:  # noqa: BLE001 - raised in the caller below
            err.append(e)

    engine.write(eid - 2, ptr, h, tier)
    th = threading.Thread(target=write, name="teraio-ssd-probe")
    t0 = time.perf_counter()
    th.start()
    try:
        engine.read(eid - 2, ptr, h)
    finally:
        th.join()  # the caller frees the buffer only after the write is done
    t1 = time.perf_counter()
    if err:
        raise err[0]
    engine.drop(eid - 1)
    engine.drop(eid - 2)
    return t0, t1, 2 * h


class Planner:
    """What the Offloader's plans are made for, and making them. Owns the budget (bytes, or
    budget_fraction of each kind of step's unconstrained peak: budget is then the current
    kind's), the tiers (host_memory, ssd_dirs), their rates (given, or measured once through
    the engine: ssd_measured), the planning policy, min_tensor_bytes and the last prediction
    (predicted_step_s). The engine is the Offloader's, passed to the calls that use it."""

    def __init__(self, *, budget_fraction, budget, host_memory, ssd_dirs, min_tensor_bytes,
                 policy, ssd_bandwidth, host_bandwidth):
        self.budget_fraction = budget_fraction
        self.budget = budget
        self.host_memory = host_memory
        self.ssd_dirs = ssd_dirs
        self.min_tensor_bytes = min_tensor_bytes
        self.policy = policy
        # "auto": measured through the engine on the SSD directories when the first plan is made
        self.ssd_auto = ssd_bandwidth == "auto"
        self.ssd_measured = None
        rate = 0.0 if self.ssd_auto else _rate_arg(ssd_bandwidth, "ssd_bandwidth")
        self.ssd_read_Bps = self.ssd_write_Bps = rate
        self.host_Bps = _rate_arg(host_bandwidth, "host_bandwidth")
        self._prediction = None  # (plan, predicted step seconds): see predicted_step_s()

    def check_before_update(self, engine, prog, optimizer):
        """In a profiled step (prog: what it recorded so far), when the optimizer is about to
        step: the checks planning makes at the end of the step, on what ran so far (forward and
        backward) and on what each parameter's update will use (at least the parameter and its
        gradient). A ValueError here leaves the parameters and optimizer states as they were
        before the step; the step's gradients are in .grad. Only with a budget in bytes."""
        if self.budget_fraction is not None:
            return
        note = ("; raised before optimizer.step() updated anything: the parameters and "
                "optimizer states are as before this step, its gradients are in .grad "
                "(zero them before retrying the batch)")
        # an update reads a tensor of the parameter's size (its gradient, or what was computed
        # from it) in the operator that writes the parameter: at least parameter + gradient
        need, what = 0, None
        if optimizer is not None:
            for g in optimizer.param_groups:
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
            self.check_program(prog)
        except ValueError as e:
            raise ValueError(str(e) + note) from None
        if self.ssd_dirs:
            self._check_ssd_room(engine, prog, note)

    def _check_ssd_room(self, engine, prog, note):
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
        es = engine.stats()  # room reserved earlier in this engine's own files
        free += max(0, es["ssd_capacity_bytes"] - es["ssd_used_bytes"])
        if free < need:
            raise _Error(-28, f"ssd_dirs: {self.ssd_dirs} have {_core.format_bytes(free)} free, "
                              f"the budget needs at least {_core.format_bytes(need)} offloaded "
                              "beyond host_memory: free space there, add directories, or raise "
                              "host_memory / memory_budget" + note)

    # ---- plan files -----------------------------------------------------------------------
    def predicted_step_s(self, trace, plan):
        """Offloader.predicted_step_s() for the current plan and its trace (None: no plan);
        computed once per plan."""
        if plan is None or trace is None:
            return None
        if self.ssd_dirs and not (self.ssd_read_Bps > 0 and self.ssd_write_Bps > 0):
            return None
        if self._prediction is not None and self._prediction[0] is plan:
            return self._prediction[1]
        import json
        import tempfile

        with tempfile.TemporaryDirectory(prefix="teraio-predict-") as d:
            hw = dict(self.hw(), name="offloader", gpus=1)
            hw_path = os.path.join(d, "hw.json")
            with open(hw_path, "w") as f:
                json.dump(hw, f)
            trace_path, plan_path = os.path.join(d, "step.tio"), os.path.join(d, "step.plan")
            trace.save(trace_path)
            plan.save(plan_path)
            # the executor offloads on demand where the plan falls short: so does the model
            r = _core.simulate(trace_path, hw=hw_path, plan=plan_path, demand_evict=True)
        value = float(r["iteration_s"])
        self._prediction = (plan, value)
        return value

    @staticmethod
    def load_plan(path):
        """(trace, plan, prog) of the plan file path (OffloadOptions.plan) and its trace."""
        from teraio.torch._mode import StepProgram

        path = str(path)
        if not os.path.exists(path) or not os.path.exists(path + ".trace"):
            raise ValueError(f"plan: {path!r} (and {path + '.trace'!r}) must exist: write them "
                             "with Offloader.save_plan() in an earlier run")
        trace = _core.Trace.load(path + ".trace")
        plan = _core.Plan.load(path)
        try:
            plan.check(trace)
        except _Error as e:
            raise ValueError(f"plan: {path!r} does not belong to {path + '.trace'!r}: {e}") \
                from None
        prog = StepProgram(tensors=trace.tensors(), kernels=[
            (n, d, f, tuple(u)) for (n, d, f, u) in trace.kernels()], trace=trace)
        prog.n_globals = int(trace.meta.get("n_globals") or 0)
        return trace, plan, prog

    @staticmethod
    def check_globals(prog, globals_, where):
        """ValueError unless globals_ are those prog (a loaded plan's) was made for."""
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
    def hw(self):
        """The hardware description the planner and the simulator get."""
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
            # the profiled durations are the operators' times on this thread, hook and executor
            # included: no software costs on top (docs/hardware.md, "Software costs")
            "kernel_launch_s": 0.0,
            "kernel_executor_s": 0.0,
            "move_issue_s": 0.0,
            "kernel_io_slowdown": 0.0,
        }

    def _ssd_mixed_Bps(self):
        """Per-directory read + write rate with both directions at once, as measured by the
        probe (0: not measured, the model time-shares reads and writes), at most read + write
        (what the hardware description accepts)."""
        m = (self.ssd_measured or {}).get("mixed_Bps", 0.0)
        return min(m, self.ssd_read_Bps + self.ssd_write_Bps) if self.ssd_dirs and m > 0 else 0.0

    def _policy(self):
        """The planning policy by its C name (teraio: by the tiers there are)."""
        if self.policy != "teraio":
            return self.policy
        return "teraio-mixed" if self.host_memory else "teraio-ssd"

    def measure_ssd(self, engine):
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
            engine.write(eid, ptr, n, tier)
            t1 = time.perf_counter()
            engine.read(eid, ptr, n)
            t2 = time.perf_counter()
            # both directions at once, as training moves them: half the probe read back while
            # the other half is written; the simulator's shared SSD budget takes this as the
            # drive's mixed point (ssd_mixed_Bps)
            t3, t4, nmix = _probe_mixed(engine, eid, ptr, n, tier)
            engine.drop(eid)
            ndirs = max(1, len(self.ssd_dirs))
            self.ssd_write_Bps = n / max(t1 - t0, 1e-9) / ndirs
            self.ssd_read_Bps = n / max(t2 - t1, 1e-9) / ndirs
            self.ssd_measured = {"write_Bps": self.ssd_write_Bps, "read_Bps": self.ssd_read_Bps,
                                 "mixed_Bps": nmix / max(t4 - t3, 1e-9) / ndirs,
                                 "probe_bytes": n}
        except _Error as e:  # the SSD path training would use fails: say so now
            from teraio.torch._bounded import error_in

            raise error_in(e, f"measuring the SSD directories {self.ssd_dirs} for "
                              f"ssd_bandwidth='auto' ({n >> 20} MiB written and read "
                              f"back)") from None
        finally:
            del view
            buf.close()

    def make_plan(self, engine, prog):
        """(trace, plan) for the recorded step prog (its program becomes final: prog.trace)."""
        if self.ssd_auto and self.ssd_dirs and self.ssd_measured is None:
            self.measure_ssd(engine)
        meta = {"source": "teraio.torch", "n_globals": str(prog.n_globals)}
        trace = _core.Trace.build(prog.tensors, prog.kernels, meta)
        prog.trace = trace  # final: the budget, the checks and the executor read its liveness
        try:
            if self.budget_fraction is not None:
                self.budget = max(1, int(self.budget_fraction * prog.peak_resident()))
            self.check_program(prog)
        except ValueError:
            prog.trace = None  # no plan: the program is not final
            raise
        plan = _core.Plan.make(trace, self.hw(), self._policy(), self.min_tensor_bytes, True)
        s = plan.summary()
        # not feasible with no shortfall: the memory fits with moves beyond the bandwidth,
        # which the executor runs, the step waiting for them (docs/planner.md)
        if not s["feasible"] and s["shortfall_bytes"] > 0:
            _warn(f"teraio: the plan cannot keep every operator under memory_budget "
                  f"{_core.format_bytes(self.budget)} (short by "
                  f"{_core.format_bytes(s['shortfall_bytes'])} at operator "
                  f"{s['shortfall_kernel']}); the executor offloads on demand where it must")
        return trace, plan

    def check_program(self, prog):
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
        need, kmax, fixed = self.min_budget(prog)
        if need > self.budget:
            raise ValueError(
                f"memory_budget: {_core.format_bytes(self.budget)} is below what operator "
                f"{kmax} ({prog.kernels[kmax][0]}) needs resident: "
                f"{_core.format_bytes(need)}, its working set plus "
                f"{_core.format_bytes(fixed)} of live tensors teraio never moves (smaller "
                f"than min_tensor_bytes={_core.format_bytes(self.min_tensor_bytes)}, or "
                f"inputs and communication buffers): raise memory_budget to at least "
                f"{_core.format_bytes(need)} or lower min_tensor_bytes")

    def movable_ids(self, prog):
        """Tensors the executor may move: big enough and not pinned (inputs, buffers of
        collectives). The plan's moves are among them; the rest can still be offloaded on demand
        when the plan cannot keep an operator under the budget."""
        from teraio.torch._mode import F_PINNED

        return frozenset(t for t, (b, _, f, _) in enumerate(prog.tensors)
                         if b >= max(1, self.min_tensor_bytes) and not f & F_PINNED)

    def min_budget(self, prog):
        """(bytes, operator, fixed): the most any operator needs resident when everything
        movable and unused by it is offloaded: its working set plus the live tensors that are
        never moved (the executor's accounting: globals always, an intermediate from its first
        to its last use, free marker included)."""
        movable = self.movable_ids(prog)
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
