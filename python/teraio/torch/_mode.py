"""The TorchDispatchMode that profiles a training step or drives the C executor through one.

Identity across iterations (docs/runtime.md): global tensors (parameters, gradients that exist at
step start, optimizer states) get ids 0..G-1 in registration order; every other storage gets the
next id when it is first seen, so that an intermediate is identified by the operator that created
it and its position among that operator's outputs, and a tensor made outside the step (the batch)
by the operator and argument that first read it. A trace tensor is a storage (views share it);
storages are recognised by their StorageImpl address, forgotten through a weak reference when they
die.
"""
from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from teraio import _core as _c
from teraio.torch._fsdp import has_subclass

# enums of include/teraio/trace.h and runtime.h, by name from teraio._core
KIND_WEIGHT, KIND_GRAD, KIND_OPTIM = _c.TENSOR_WEIGHT, _c.TENSOR_GRAD, _c.TENSOR_OPTIM_STATE
KIND_ACT, KIND_TEMP, KIND_INPUT, KIND_OTHER = (_c.TENSOR_ACTIVATION, _c.TENSOR_TEMP,
                                               _c.TENSOR_INPUT, _c.TENSOR_OTHER)
F_GLOBAL, F_PINNED = _c.TENSOR_GLOBAL, _c.TENSOR_PINNED
K_COMM, K_OPTIM, K_BACKWARD = _c.KERNEL_COMM, _c.KERNEL_OPTIM, _c.KERNEL_BACKWARD
USE_R, USE_W, USE_RW = _c.USE_READ, _c.USE_WRITE, _c.USE_READ_WRITE
FREE_KERNEL = _c.RUNTIME_FREE_KERNEL  # an intermediate freed after its last use
_PROFILER_OPS = "profiler._record_function_"  # torch.profiler.record_function: no tensors

_COMM_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_dtensor")


@dataclass
class StepProgram:
    """One recorded step: what the C trace is built from, and what execution checks against."""

    tensors: list = field(default_factory=list)  # [(bytes, kind, flags, name)]
    kernels: list = field(default_factory=list)  # [(name, duration_ns, flags, uses)]
    n_globals: int = 0
    # the C trace of this program once it is final (the one its plan is made from, or loaded
    # with it): liveness reads it and keeps each result; None while recording, when liveness
    # builds a temporary trace of the program as it stands
    trace: object = field(default=None, repr=False, compare=False)
    _live: dict = field(default_factory=dict, repr=False, compare=False)

    def working_sets(self):
        """Bytes each kernel touches (largest = the smallest budget that can ever work)."""
        tb = [t[0] for t in self.tensors]
        return [sum(tb[u[i]] for i in range(0, len(u), 2)) for (_, _, _, u) in self.kernels]

    def liveness(self, skip_kernel=None, exclude=None):
        """(first, last, resident) of this step from the C library (teraio._core.liveness, the
        executor's own definitions): first/last use per tensor (None: never used; operators
        named skip_kernel do not count) and the bytes resident at each operator with nothing
        offloaded, over the tensors not in exclude."""
        if self.trace is None:
            return _c.liveness(_c.Trace.build(self.tensors, self.kernels, {}), skip_kernel,
                               exclude)
        key = (skip_kernel, None if exclude is None else frozenset(exclude))
        got = self._live.get(key)
        if got is None:
            got = self._live[key] = _c.liveness(self.trace, skip_kernel, exclude)
        return got

    def peak_resident(self) -> int:
        """Tracked peak with nothing offloaded: globals plus intermediates between first and
        last use (the same model as the executor's accounting)."""
        resident = self.liveness()[2]
        return max(resident, default=sum(b for b, _, f, _ in self.tensors if f & F_GLOBAL))


def collect_globals(model, optimizer):
    """[(name, storage, kind)] of the storages that live across steps, in registration order."""
    seen = set()
    out = []

    def add(name, t, kind):
        if not isinstance(t, torch.Tensor):
            return
        local = getattr(t, "_local_tensor", None)  # DTensor (FSDP2): its shard is the storage
        if isinstance(local, torch.Tensor):
            t = local
        st = t.untyped_storage()
        try:
            st.data_ptr()
        except RuntimeError:  # a wrapper subclass without real storage: not managed
            return
        if st._cdata in seen:
            return
        seen.add(st._cdata)
        out.append((name, st, kind))

    params = []
    if model is not None:
        for name, p in model.named_parameters():
            params.append((name, p))
            add(name, p, KIND_WEIGHT)
        for name, b in model.named_buffers():
            add(name, b, KIND_OTHER)
    if optimizer is not None:
        known = {id(p) for _, p in params}
        for gi, g in enumerate(optimizer.param_groups):
            for pi, p in enumerate(g["params"]):
                if id(p) not in known:
                    add(f"group{gi}.param{pi}", p, KIND_WEIGHT)
    for name, p in params:
        if p.grad is not None:
            add(name + ".grad", p.grad, KIND_GRAD)
    if optimizer is not None:
        names = {id(p): n for n, p in params}
        for gi, g in enumerate(optimizer.param_groups):
            for pi, p in enumerate(g["params"]):
                st = optimizer.state.get(p)
                if not st:
                    continue
                base = names.get(id(p), f"group{gi}.param{pi}")
                for key in sorted(st):
                    add(f"{base}.{key}", st[key], KIND_OPTIM)
    return out


def _arg_plan(func):
    """Per operator: [(position, name, is_write, is_list)] of its arguments (cached)."""
    plan = _ARG_CACHE.get(func)
    if plan is None:
        plan = []
        for i, a in enumerate(func._schema.arguments):
            w = a.alias_info is not None and a.alias_info.is_write
            plan.append((i, a.name, w, a.kwarg_only))
        rets = [r.alias_info is not None and r.alias_info.is_write for r in func._schema.returns]
        ns = func.namespace
        plan = (plan, rets, ns in _COMM_NAMESPACES)
        _ARG_CACHE[func] = plan
    return plan


_ARG_CACHE: dict = {}


def _iter_args(func, args, kwargs):
    plan, _, _ = _arg_plan(func)
    na = len(args)
    for i, name, w, kwonly in plan:
        if not kwonly and i < na:
            v = args[i]
        elif name in kwargs:
            v = kwargs[name]
        else:
            continue
        if isinstance(v, torch.Tensor):
            yield v, w
        elif isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, torch.Tensor):
                    yield x, w


def _flat_out(out, acc):
    if isinstance(out, torch.Tensor):
        acc.append(out)
    elif isinstance(out, (list, tuple)):
        for x in out:
            _flat_out(x, acc)
    return acc


def _make_spec(func):
    """Per operator, for the C path (teraio._core.OpFast): (arguments as (position, name,
    is_write, kwarg_only), per-return is_write, is a collective, str(func), is _foreach_*, the
    callable behind func)."""
    plan, rets, comm = _arg_plan(func)
    return (tuple((i, n, bool(w), bool(kw)) for i, n, w, kw in plan),
            tuple(bool(r) for r in rets), bool(comm), str(func),
            func.overloadpacket.__name__.startswith("_foreach_"), getattr(func, "_op", func))


_SPEC_CACHE: dict = {}


def _use_fast(cuda_record, fast):
    # profiling on CUDA times each operator with CUDA events (Python); executing it is the same
    # work as on CPU, stream-ordered by the executor, so the C path serves it too
    if cuda_record or fast is False:
        return False
    if not hasattr(_core(), "OpFast"):
        return False
    if fast is None and os.environ.get("TERAIO_TORCH_DISPATCH", "").lower() == "python":
        return False
    return True


def _core():
    from teraio import _core as c

    return c


class Divergence(Exception):
    """The operator sequence no longer matches the plan."""


def materialize_aligned(st, nb):
    """Give the released (0-byte) CPU storage `st` nb bytes of teraio's I/O memory: page-aligned
    (2 MiB-aligned, huge pages advised, from 2 MiB), so that the engine's O_DIRECT reads land in
    it directly instead of through staging buffers and a copy on this thread. The memory is an
    IOBuffer held by a frombuffer storage whose data is swapped into `st`; it is freed when `st`
    releases it (release_storage) or dies."""
    src = torch.frombuffer(_core().IOBuffer(nb), dtype=torch.uint8).untyped_storage()
    st._swap_data_ptr_(src)


def _fixed(st):
    """A storage whose memory cannot be released: not resizable (Tensor.numpy() makes the
    storage it shares so) and not teraio's own IOBuffer. Recorded as pinned: never moved."""
    return st.device.type == "cpu" and not st.resizable() and not (
        st.nbytes() and _core().io_buffer_at(st.data_ptr()))


_FIXED_HELP = ("teraio cannot release tensor {t} after offloading it ({e}): its storage was made "
               "non-resizable after the plan was made; Tensor.numpy() does that to the storage "
               "it shares: between steps use t.detach().clone().numpy() or t.tolist() instead "
               "(a storage that is already non-resizable when a step is profiled is never moved)")


def release_storage(st, discard=False):
    """Free a storage's memory, keeping the storage (its tensors become 0-byte views). One that
    holds an IOBuffer (materialize_aligned) cannot be resized: swapping in an empty storage hands
    the buffer to it, and the buffer goes with it. Other storages are resized (one that cannot
    be, e.g. from numpy, raises RuntimeError as before); with discard=True (CPU, no FSDP:
    where the Offloader turns aligned_storages on) their whole pages are first handed
    back to the kernel (discard_pages), so that the memory leaves the process even where the
    allocator keeps the freed block in its heap."""
    # a block of teraio's block cache (PyTorch's CPU allocator or an IOBuffer, Offloader
    # cpu_allocator): its pages go now, and the cache keeps the block cold, not hot
    cached = discard and st.nbytes() and st.device.type == "cpu" \
        and _core().block_cache_discard(st.data_ptr())
    if not st.resizable() and _core().io_buffer_at(st.data_ptr()):
        st._swap_data_ptr_(torch.UntypedStorage(0))
    else:
        if discard and not cached and st.nbytes() and st.resizable() \
                and st.device.type == "cpu" and not st.is_shared():
            # the allocator may keep the block for reuse (glibc's heap): its pages leave the
            # process now, and come back zero-filled only if the block is used again. Locked
            # memory (mlock) refuses: then the block is just freed.
            try:
                _core().discard_pages(st.data_ptr(), st.nbytes())
            except OSError:
                pass
        st.resize_(0)


class StepDriver:
    """State of one step under the dispatch mode: identity, recording or execution.

    This class is the reference implementation, in Python. StepDriver(...) returns a
    FastStepDriver, which does the same per-operator work in one C call (teraio._core.OpFast),
    except for profiled steps on CUDA (their operators are timed with CUDA events, in Python);
    fast=False (or TERAIO_TORCH_DISPATCH=python in the environment) keeps the Python one.
    On CUDA nothing here synchronizes the device: the executor is stream-ordered.
    """

    def __new__(cls, *args, cuda=False, fast=None, record=False, **kw):
        if cls is StepDriver and _use_fast(cuda and record, fast):
            cls = FastStepDriver
        return object.__new__(cls)

    def __init__(self, globals_, *, record: bool, program: StepProgram | None = None,
                 runtime=None, movable=(), split_foreach=True, cuda=False, in_optim=None,
                 offload_at=None, fast=None):
        self.record = record
        self.prog = program if program is not None else StepProgram()
        self.rt = runtime
        self.split_foreach = split_foreach
        self.cuda = cuda
        self.aligned_storages = False  # CPU materialisations from IOBuffer (Offloader sets it)
        self.in_optim = in_optim or (lambda: False)
        self.ids: dict[int, int] = {}
        self.refs: dict[int, weakref.ref] = {}
        self.k = 0
        self.n_ids = 0
        self.passthrough = False
        self.diverged: str | None = None
        self.busy = False
        self.events = []  # CUDA timing: (k, start, end)
        # execution
        self.movable = set(movable)
        self.offload_at = offload_at or {}
        self.ptr_by_id: dict[int, int] = {}  # what the executor was told
        self.st_by_id: dict[int, torch.UntypedStorage] = {}
        self.weak_by_id: dict[int, weakref.ref] = {}
        self.release_at: dict[int, list] = {}
        # kernels where the plan's optimizer update begins (see _skip_optim); updates skipped
        self.optim_starts: dict[int, object] = {}
        self.optim_skipped = 0
        # deaths: storages freed by their owners, turned into free markers at the next operator
        self.n_globals = len(globals_)
        self.dead_pending: list[int] = []
        self.dead: set[int] = set()
        self.last_k: dict[int, int] = {}
        for name, st, kind in globals_:
            tid = self._new_id(st)
            if record:
                self.prog.tensors.append((st.nbytes(), kind,
                                          F_GLOBAL | (F_PINNED if _fixed(st) else 0), name))
            if tid in self.movable:
                self.st_by_id[tid] = st
        if record:
            self.prog.n_globals = len(globals_)
        else:
            self._prepare_exec()

    # ---- identity -------------------------------------------------------------------------
    def _forget(self, cdata, _ref):
        if self.refs.get(cdata) is _ref:
            del self.refs[cdata]
            tid = self.ids.pop(cdata, None)
            if tid is not None and tid >= self.n_globals:
                self.dead_pending.append(tid)

    def _flush_deaths(self):
        """Storages that died since the previous operator. An intermediate freed later than
        right after its last use (a gradient freed by zero_grad after the optimizer used it)
        gets a free marker kernel, so that the plan counts its memory until then."""
        if not self.dead_pending or self.passthrough:
            self.dead_pending.clear()
            return
        # only what was read is removed: a collective's buffer can die on another thread
        pend = self.dead_pending[:]
        del self.dead_pending[:len(pend)]
        pend.sort()
        if self.record:
            ts = self.prog.tensors
            for tid in pend:
                # pinned (inputs, buffers of collectives): never moved, and their death time is
                # not the step's to decide (gloo drops a buffer when its work object goes), so it
                # is no part of the plan
                if self.last_k.get(tid, self.k) < self.k - 1 and not ts[tid][2] & F_PINNED:
                    self.prog.kernels.append((FREE_KERNEL, 1, 0, (tid, USE_W)))
                    self.k += 1
            return
        for tid in pend:
            self.dead.add(tid)
            self.rt.forget(tid)
            self.st_by_id.pop(tid, None)
            self.weak_by_id.pop(tid, None)
        self._run_free_markers()

    def _run_free_markers(self):
        ks = self.prog.kernels
        while self.k < len(ks) and ks[self.k][0] == FREE_KERNEL:
            tid = ks[self.k][3][0]
            if tid not in self.dead:
                self._diverge(f"tensor {tid} is still alive at operator {self.k}, the plan "
                              "expects it freed")
                return
            k = self.k
            try:
                self._before(k)
            except Divergence as e:
                self._diverge(str(e))
                return
            self.rt.after(k)
            self.k = k + 1

    def _seen(self, st):
        """(id, 0) of a storage this step has numbered; (None, its bytes) of one it has not
        (0 bytes: an empty storage, nothing to track)."""
        tid = self.ids.get(st._cdata)
        return (tid, 0) if tid is not None else (None, st.nbytes())

    def _new_id(self, st):
        cd = st._cdata
        tid = self.n_ids
        self.n_ids += 1
        self.ids[cd] = tid
        self.refs[cd] = weakref.ref(st, lambda r, cd=cd: self._forget(cd, r))
        return tid

    # ---- execution set-up -----------------------------------------------------------------
    def _prepare_exec(self):
        prog = self.prog
        last = prog.liveness(skip_kernel=FREE_KERNEL)[1]  # last real use (not a free marker)
        for t, k in enumerate(last):
            if k is not None and t in self.movable and not (prog.tensors[t][2] & F_GLOBAL):
                self.release_at.setdefault(k, []).append(t)
        ks = prog.kernels
        prev = 0  # flags of the last operator (free markers do not count)
        for k in range(len(ks)):
            if ks[k][0] == FREE_KERNEL:
                continue
            if ks[k][2] & K_OPTIM and not prev & K_OPTIM:
                s = k  # optimizer.step()'s record_function is entered before its pre-hook
                while s > 0 and ks[s - 1][0].startswith(_PROFILER_OPS):
                    s -= 1
                self.optim_starts[s] = None  # its extent: computed when first needed
            prev = ks[k][2]
        for tid, st in self.st_by_id.items():
            if st.nbytes() > 0:
                self.ptr_by_id[tid] = st.data_ptr()
                self.rt.bind(tid, self.ptr_by_id[tid])
        self._apply(self.rt.begin())

    # ---- the operator hook ----------------------------------------------------------------
    def dispatch(self, func, args, kwargs):
        if self.passthrough or self.busy:
            return func(*args, **kwargs)
        if self.split_foreach and func.overloadpacket.__name__.startswith("_foreach_"):
            return self._foreach(func, args, kwargs)
        return self._one(func, args, kwargs)

    def _foreach(self, func, args, kwargs):
        """Run a _foreach_* operator one list element at a time, each piece its own kernel, so
        that weights and optimizer states can be offloaded between the pieces."""
        n = None
        for v in list(args) + list(kwargs.values()):
            if isinstance(v, (list, tuple)) and v and isinstance(v[0], torch.Tensor):
                n = len(v) if n is None else n
        if not n or n == 1:
            return self._one(func, args, kwargs)

        def piece(v, i):
            if isinstance(v, (list, tuple)) and len(v) == n:
                return [v[i]]
            return v

        outs = []
        for i in range(n):
            a = tuple(piece(v, i) for v in args)
            kw = {k: piece(v, i) for k, v in kwargs.items()}
            r = self._one(func, a, kw) if not self.passthrough else func(*a, **kw)
            if isinstance(r, (list, tuple)):
                outs.extend(r)
        return outs if outs else None

    def _one(self, func, args, kwargs):
        if self.dead_pending:
            self._flush_deaths()
            if self.passthrough:
                return func(*args, **kwargs)
        if not self.record:
            if self.k in self.optim_starts:
                self._skip_optim(str(func))
            elif self._before_update_beyond(func):
                return func(*args, **kwargs)
        _, rets_w, comm = _arg_plan(func)
        uses: dict[int, int] = {}
        for t, w in _iter_args(func, args, kwargs):
            st = t.untyped_storage()
            tid, nb = self._seen(st)
            if tid is None:
                if nb == 0:
                    continue
                tid = self._external(st, nb)
                if tid is None:
                    return self._run_diverged(func, args, kwargs)
            uses[tid] = uses.get(tid, 0) | (USE_RW if w else USE_R)
        k = self.k
        if self.record:
            out, dur = self._timed(func, args, kwargs, k)
        else:
            exp = self.prog.kernels[k] if k < len(self.prog.kernels) else None
            if exp is None or exp[0] != str(func):
                self._diverge(f"operator {k} is {func}, the plan expects "
                              f"{exp[0] if exp else 'the end of the step'}")
                return func(*args, **kwargs)
            eu = exp[3]
            i = 0
            for tid, mode in uses.items():
                if i + 1 >= len(eu) or eu[i] != tid or eu[i + 1] != mode:
                    self._diverge(f"operator {k} ({func}) uses different tensors than planned")
                    return func(*args, **kwargs)
                i += 2
            try:
                self._before(k)
            except Divergence as e:
                self._diverge(str(e))
                return func(*args, **kwargs)
            out = func(*args, **kwargs)
        # outputs
        for j, o in enumerate(_flat_out(out, [])):
            st = o.untyped_storage()
            tid, nb = self._seen(st)
            if tid is None:
                if nb == 0:
                    continue
                tid = self._new_id(st)
                if self.record:
                    self.prog.tensors.append((nb, KIND_ACT, 0, None))
                else:
                    if tid >= len(self.prog.tensors) or self.prog.tensors[tid][0] != nb:
                        self._diverge(f"operator {k} ({func}) output {j} has {nb} bytes, the "
                                      f"plan expects another size")
                        return out
                    if tid in self.movable:
                        self.st_by_id[tid] = st
                        self.ptr_by_id[tid] = st.data_ptr()
                        self.rt.bind(tid, self.ptr_by_id[tid])
                uses[tid] = uses.get(tid, 0) | USE_W
            elif j < len(rets_w) and rets_w[j]:
                uses[tid] = uses.get(tid, 0) | USE_W
        flat = []
        for tid, mode in uses.items():
            flat += (tid, mode)
        flat = tuple(flat)
        if self.record:
            flags = (K_COMM if comm else 0) | (K_OPTIM if self.in_optim() else 0)
            if comm:
                for i in range(0, len(flat), 2):
                    b, kind, f, name = self.prog.tensors[flat[i]]
                    self.prog.tensors[flat[i]] = (b, kind, f | F_PINNED, name)
            self.prog.kernels.append((str(func), dur, flags, flat))
        else:
            if flat != self.prog.kernels[k][3]:
                self._diverge(f"operator {k} ({func}) produced different tensors than planned")
                return out
            self.rt.after(k)
            for t in self.release_at.get(k, ()):
                st = self.st_by_id.pop(t, None)
                if st is not None:  # past its last use: only reachable while its owner keeps it
                    self.weak_by_id[t] = weakref.ref(st)
        if self.record:
            for i in range(0, len(flat), 2):
                self.last_k[flat[i]] = k
        self.k = k + 1
        return out

    # ---- an optimizer update the plan has and the step skipped ------------------------------
    def _ids_handed_out(self):
        return self.n_ids

    def _hand_out_ids(self, n):
        self.n_ids += n

    def _before_update_beyond(self, func):
        """Whether func is the record_function that optimizer.step() enters before its pre-hook,
        past the end of a plan without an update (Offloader._update_beyond_plan takes the
        update over at the pre-hook): run untouched, no tensors, not a divergence."""
        return (self.k >= len(self.prog.kernels) and not self.in_optim()
                and str(func).startswith(_PROFILER_OPS))

    def _optim_extent(self, k):
        """The update that begins at kernel k: (end, first new id, new ids), where kernels
        [k, end) are its operators (K_OPTIM), the free markers of tensors they create and the
        record_function around optimizer.step(), and the new ids are the tensors they create
        (ids handed out in order from the first); None where skipping it would not leave the
        plan whole (a tensor it creates used later)."""
        ks = self.prog.kernels
        base = self._ids_handed_out()
        new = set()
        j = k
        while j < len(ks):
            name, _, flags, uses = ks[j]
            if name == FREE_KERNEL:
                if uses[0] not in new:
                    break
            elif name.startswith(_PROFILER_OPS):
                pass  # optimizer.step()'s record_function: enter, exit
            elif not flags & K_OPTIM:
                break
            else:
                new.update(uses[i] for i in range(0, len(uses), 2) if uses[i] >= base)
            j += 1
        if new != set(range(base, base + len(new))):
            return None
        for name, _, _, uses in ks[j:]:
            if name != FREE_KERNEL and any(uses[i] in new for i in range(0, len(uses), 2)):
                return None
        return j, base, len(new)

    def _skip_optim(self, name):
        """The plan's optimizer update begins at the next kernel, the optimizer has not begun,
        and the step goes on with operator `name` (None: the step ends): the update was skipped
        (a GradScaler step with inf/nan gradients, any `if ...: optimizer.step()`). When that
        operator is the plan's next one after the update, the executor is taken through the
        update's kernels without running them: what they use is made resident (as the update
        would have), the tensors they would have created are numbered and dead at once, and
        the step goes on planned. Returns whether it did; otherwise the caller diverges."""
        k = self.k
        if self.passthrough or self.in_optim():
            return False
        ks = self.prog.kernels
        if k >= len(ks) or name == ks[k][0]:
            return False
        ext = self.optim_starts.get(k)
        if ext is None:
            ext = self.optim_starts[k] = self._optim_extent(k) or False
        if not ext:
            return False
        end, base, n_new = ext
        if name is not None and (end >= len(ks) or ks[end][0] != name):
            return False
        if name is None and any(kk[0] != FREE_KERNEL for kk in ks[end:]):
            return False
        for j in range(k, end):
            try:
                self._before(j)
            except Divergence as e:
                self._diverge(str(e))
                return False
            self.rt.after(j)
            for t in self.release_at.get(j, ()):
                st = self.st_by_id.pop(t, None)
                if st is not None:
                    self.weak_by_id[t] = weakref.ref(st)
            self.k = j + 1
        self._hand_out_ids(n_new)
        self.dead.update(range(base, base + n_new))
        self.optim_skipped += 1
        return True

    def _external(self, st, nb):
        """A storage the step did not create (the batch, buffers made outside): pinned."""
        tid = self._new_id(st)
        if self.record:
            self.prog.tensors.append((nb, KIND_INPUT, F_PINNED, None))
            return tid
        if tid >= len(self.prog.tensors) or self.prog.tensors[tid][0] != nb:
            self._diverge(f"an input of operator {self.k} has {nb} bytes, the plan expects "
                          "another size")
            return None
        return tid

    def _run_diverged(self, func, args, kwargs):
        return func(*args, **kwargs)

    def _timed(self, func, args, kwargs, k):
        if self.cuda:
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            out = func(*args, **kwargs)
            e.record()
            self.events.append((k, s, e))
            return out, 1000
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        return out, max(1, time.perf_counter_ns() - t0)

    def finish_timing(self):
        """CUDA: replace placeholder durations with event times (after a synchronize)."""
        if not self.events:
            return
        torch.cuda.synchronize()
        ks = self.prog.kernels
        for k, s, e in self.events:
            name, _, flags, uses = ks[k]
            ks[k] = (name, max(1, int(s.elapsed_time(e) * 1e6)), flags, uses)
        self.events.clear()

    # ---- executor calls -------------------------------------------------------------------
    def _apply(self, acts):
        rt = self.rt
        for kind, t, nb in acts:
            st = self.st_by_id.get(t)
            if st is None:
                ref = self.weak_by_id.get(t)
                st = ref() if ref is not None else None
            if st is None:  # died since the last operator: nothing to release or bring back
                rt.forget(t)
                continue
            if kind == 1:  # RT_RELEASE
                try:
                    release_storage(st, self.aligned_storages)
                except RuntimeError as e:
                    raise RuntimeError(_FIXED_HELP.format(t=t, e=e)) from None
            else:  # RT_MATERIALIZE
                if st.nbytes() == nb:
                    pass  # never released (a failed release): its memory is still there
                elif self.aligned_storages:
                    materialize_aligned(st, nb)
                else:
                    st.resize_(nb)
                self.ptr_by_id[t] = st.data_ptr()
                rt.bind(t, self.ptr_by_id[t])

    def _check_offloads(self, k):
        """The executor writes from the pointers it was given: make sure nothing resized or moved
        those storages behind its back (e.g. a library calling resize_ itself)."""
        for t in self.offload_at.get(k, ()):
            st = self.st_by_id.get(t)
            if st is None:
                ref = self.weak_by_id.get(t)
                st = ref() if ref is not None else None
            if st is None or t not in self.ptr_by_id or self.rt.state(t) != 1:
                continue
            if st.nbytes() != self.prog.tensors[t][0] or st.data_ptr() != self.ptr_by_id[t]:
                return f"tensor {t} was resized or moved outside teraio before its offload"
        return None

    def _before(self, k):
        if self.offload_at:
            why = self._check_offloads(k)
            if why:
                raise Divergence(why)
        self.busy = True
        try:
            acts = self.rt.before(k)
            if acts:
                self._apply(acts)
            self.rt.ready(k)
        finally:
            self.busy = False

    def end(self):
        """End of the step: drain I/O, release completed offloads; Divergence if short."""
        self._flush_deaths()
        if self.record:
            self.finish_timing()
            return
        if self.passthrough:
            return
        if self.k in self.optim_starts and self._skip_optim(None):
            self._run_free_markers()
            if self.passthrough:
                return
        if self.k != len(self.prog.kernels):
            self._diverge(f"the step ended after {self.k} operators, the plan has "
                          f"{len(self.prog.kernels)}")
            return
        self._apply(self.rt.end())
        self.st_by_id = {t: st for t, st in self.st_by_id.items() if t < self.prog.n_globals}

    def _diverge(self, reason):
        """Bring everything back, stop offloading for the rest of this step."""
        if self.passthrough:
            return
        self.passthrough = True
        self.diverged = reason
        self.restore()

    def restore(self):
        self.busy = True
        try:
            for tid in self.dead_pending:
                self.rt.forget(tid)
            self.dead_pending.clear()
            acts = self.rt.restore_begin()
            self._apply(acts)
            self.rt.restore_finish()
        finally:
            self.busy = False


class FastStepDriver(StepDriver):
    """StepDriver whose per-operator path is one C call (teraio._core.OpFast): identity,
    recording, the comparison with the plan, the executor calls (the C executor directly),
    deaths, free markers and release points. The C object calls back into Python only for what
    needs it: the storage actions (_apply), the offload check of the kernels that trigger
    offloads (_check_offloads), a divergence (_diverge), a _foreach_* operator to split
    (_foreach) and a collective's tensors (_pin); the rules are the same as the Python path's."""

    def __init__(self, globals_, *, record, program=None, runtime=None, movable=(),
                 split_foreach=True, cuda=False, in_optim=None, offload_at=None, fast=None):
        self.mode = None  # the StepMode (set by the step): its _dispatch is switched to _armed
        self.fast = _core().OpFast(self, [], len(globals_), _SPEC_CACHE, _make_spec,
                                   torch._C.TensorBase)
        super().__init__(globals_, record=record, program=program, runtime=runtime,
                         movable=movable, split_foreach=split_foreach, cuda=cuda,
                         in_optim=in_optim, offload_at=offload_at)
        kflags = b""
        if not record:
            flags = bytearray(len(self.prog.kernels))
            for k in self.offload_at:
                if 0 <= k < len(flags):
                    flags[k] |= _c.OPFAST_CHECK_OFFLOAD
            for k in self.release_at:
                if 0 <= k < len(flags):
                    flags[k] |= _c.OPFAST_RELEASE
            # after the last operator before an update: the next operator is seen here first
            # (_armed), to tell a skipped update before the C path takes it for a divergence
            # and after the last one of a plan without an update (an update beyond the plan)
            ks = self.prog.kernels
            ends = list(self.optim_starts) or [len(ks)]
            for k in ends:
                j = k - 1
                while j >= 0 and ks[j][0] == FREE_KERNEL:
                    j -= 1
                if j >= 0:
                    flags[j] |= _c.OPFAST_ARM
            kflags = bytes(flags)
        self.fast.configure(record, self.prog.tensors, self.prog.kernels, runtime,
                            self.in_optim, self.last_k, kflags, frozenset(self.movable),
                            split_foreach, self.dead, self.st_by_id, self.weak_by_id,
                            FREE_KERNEL, self.ptr_by_id, self.release_at)
        self.dispatch = self.fast.dispatch

    # state that lives in the C object
    k = property(lambda self: self.fast.k, lambda self, v: setattr(self.fast, "k", v))
    passthrough = property(lambda self: bool(self.fast.passthrough),
                           lambda self, v: setattr(self.fast, "passthrough", int(v)))
    busy = property(lambda self: bool(self.fast.busy),
                    lambda self, v: setattr(self.fast, "busy", int(v)))
    dead_pending = property(lambda self: self.fast.dead,
                            lambda self, v: setattr(self.fast, "dead", v))

    def _new_id(self, st):
        return self.fast.add(st)

    def _one(self, func, args, kwargs):
        return self.fast.one(func, tuple(args), kwargs)

    # callbacks from C
    def _arm(self, k):
        """After kernel k (flagged OPFAST_ARM): the next operator goes through _armed."""
        if self.mode is not None:
            self.mode._dispatch = self._armed

    def _armed(self, func, args, kwargs):
        """The operator after the last one before an update (or after a plan without one): a
        skipped update, or the record_function of an update beyond the plan, is told here (the
        C path would take either for a divergence), then the C path goes on."""
        if not (self.passthrough or self.busy or self.in_optim()):
            if self.dead_pending:
                self._flush_deaths()
            if self.k in self.optim_starts:
                self._skip_optim(str(func))
            elif self._before_update_beyond(func):
                return func(*args, **kwargs)  # armed still: the pre-hook comes next
        self.mode._dispatch = self.fast.dispatch
        return self.fast.dispatch(func, args, kwargs)

    def _ids_handed_out(self):
        return self.fast.n_ids

    def _hand_out_ids(self, n):
        self.fast.n_ids += n

    def _pin(self, flat):
        for i in range(0, len(flat), 2):
            b, kind, f, name = self.prog.tensors[flat[i]]
            self.prog.tensors[flat[i]] = (b, kind, f | F_PINNED, name)

    def end(self):
        # The base class drops the intermediates from st_by_id by rebinding it; the C object
        # holds the dict it was configured with, so filter that one in place instead.
        held = self.st_by_id
        super().end()
        if self.st_by_id is not held:
            kept = self.st_by_id
            held.clear()
            held.update(kept)
            self.st_by_id = held


class StepMode(TorchDispatchMode):
    """Routes every aten operator through a StepDriver."""

    def __init__(self, driver: StepDriver):
        super().__init__()
        self.driver = driver
        fast = getattr(driver, "fast", None)
        self._dispatch = fast.dispatch if fast is not None else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if types and has_subclass(types):  # DTensor (FSDP2): its local operators come back here
            return NotImplemented
        if self._dispatch is not None:
            return self._dispatch(func, args, kwargs)
        return self.driver.dispatch(func, args, kwargs or {})

    def __exit__(self, exc_type, exc_val, exc_tb):
        from teraio.torch import _between, _compile

        _compile.reopen()  # a compiled region's backward that raised
        out = super().__exit__(exc_type, exc_val, exc_tb)
        _between.sweep()  # a guard this step covered whose Offloader went during it
        return out
