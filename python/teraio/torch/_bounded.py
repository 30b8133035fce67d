"""Keeping the steps that have no plan yet (warm-up, profiling) within the memory budget.

Before a plan exists nothing says which tensor is needed when, so the Offloader keeps these steps
under the budget reactively: every operator's tensors are made resident before it runs (read back
from the engine if they were offloaded), and after it ran, while the tracked bytes exceed the
budget, a tensor the operator did not use is written to the engine (and waited for) and its
storage released (`untyped_storage().resize_(0)`, the executor's technique). The accounting and
the choice of victims are the C library's (teraio/bounded.h, teraio._core.Bounded): outside the
optimizer, optimizer states first (only the optimizer uses them), then the least recently used;
inside the optimizer, the tensors the optimizer already updated in this step, most recent first
(a per-parameter optimizer is done with them) unless they were used by its last GRACE
operators, then the ones it has not used, least recently used first, then those of its last
GRACE operators. This module keeps what needs torch: the storages, their weak references, the
engine calls, resize_. Synchronous and conservative: these steps get slower, not larger.
Globals still offloaded when the first planned step starts are handed to the executor
(tio_runtime_adopt_stored), so that step does not bring them back either; and an executor that
goes (a switch to another plan, or to a step without a plan) hands its stored globals here
(tio_runtime_give_stored). See docs/runtime.md.
"""
from __future__ import annotations

import time
import weakref

import torch

from teraio import _core
from teraio.torch._mode import (KIND_OPTIM, StepDriver, _arg_plan, _flat_out, _iter_args,
                                release_storage)

ID_BASE = 1 << 62  # engine ids of this module's copies (executors use generation << 32 + id)
GRACE = 32  # operators: inside the optimizer, what it used in its last GRACE is offloaded last

_RESIDENT, _CLEAN, _CREATED = _core.BOUNDED_RESIDENT, _core.BOUNDED_CLEAN, _core.BOUNDED_CREATED
_WRITE, _OPTIM = _core.BOUNDED_USE_WRITE, _core.BOUNDED_USE_OPTIM
_COMM, _OUTPUT = _core.BOUNDED_USE_COMM, _core.BOUNDED_USE_OUTPUT


def error_in(ex, context):
    """teraio.Error ex (code, message) with context put before its message, code kept."""
    code, msg = ex.args[:2] if len(ex.args) >= 2 else (-5, str(ex))
    return _core.Error(code, f"{context}: {msg}")


def _io_error(ex, what, tensor):
    """An engine error of a warm-up or profiled step, naming the tensor it was moving."""
    return error_in(ex, f"{what} {tensor} in a step without a plan (warm-up or profiling)")


_META_CACHE: dict = {}


def _meta_key(v):
    if isinstance(v, torch.Tensor):
        return ("T", tuple(v.shape), tuple(v.stride()), v.dtype)
    if isinstance(v, (list, tuple)):
        return tuple(_meta_key(x) for x in v)
    if v is None or isinstance(v, (bool, int, float, str, torch.dtype, torch.device,
                                   torch.layout, torch.memory_format)):
        return v
    raise TypeError(type(v).__name__)  # a Generator, a ProcessGroup...: not estimated


def _to_meta(v):
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype,
                                   device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_to_meta(x) for x in v)
    if isinstance(v, torch.device):
        return torch.device("meta")
    return v


def meta_outputs(func, args, kwargs):
    """The (shape, dtype) of each tensor operator func returns, from its meta kernel run on
    meta copies of the arguments; None where that cannot be known (as new_output_bytes)."""
    try:
        _meta_key(args)
        _meta_key(tuple(kwargs.values()))
        has_tensor = any(isinstance(x, torch.Tensor) for x in _flat_out(list(args), []))
        kw = dict(kwargs)
        if "device" in kw:
            kw["device"] = torch.device("meta")
        elif not has_tensor:
            return None  # a factory without a device would allocate on the CPU
        out = func(*_to_meta(tuple(args)), **_to_meta(kw))
        return tuple((tuple(t.shape), str(t.dtype)) for t in _flat_out(out, []))
    except Exception:  # noqa: BLE001 - no meta kernel, a generator argument: unknown
        return None


def new_output_bytes(func, args, kwargs, min_bytes):
    """Bytes of the new storages (>= min_bytes) operator func will return, from its meta
    kernel run on meta copies of the arguments (no memory, no computation), cached by the
    arguments' shapes; None where that cannot be known (no meta kernel, data-dependent shapes,
    a generator or a process group among the arguments, a factory without a device)."""
    try:  # min_bytes in the key: Offloaders of one process may track different sizes
        key = (func, min_bytes, _meta_key(args), _meta_key(tuple(sorted(kwargs.items()))))
    except TypeError:
        return None
    hit = _META_CACHE.get(key, False)
    if hit is not False:
        return hit
    n = None
    try:
        has_tensor = any(isinstance(x, torch.Tensor) for x in _flat_out(list(args), []))
        kw = dict(kwargs)
        if "device" in kw:
            kw["device"] = torch.device("meta")
        elif not has_tensor:
            raise TypeError("a factory without a device")  # would allocate on the CPU
        out = func(*_to_meta(tuple(args)), **_to_meta(kw))
        aliased = [r.alias_info is not None for r in func._schema.returns]
        n = 0
        for i, o in enumerate(out if isinstance(out, (list, tuple)) else [out]):
            if i < len(aliased) and aliased[i]:
                continue
            for t in _flat_out(o, []):
                nb = t.untyped_storage().nbytes()
                if nb >= min_bytes:
                    n += nb
    except Exception:  # noqa: BLE001 - no meta kernel, data-dependent shape: unknown
        n = None
    if len(_META_CACHE) > 8192:
        _META_CACHE.clear()
    _META_CACHE[key] = n
    return n


class BoundedMemory:
    """Tracked storages (>= min_bytes) of the steps without a plan, kept under budget(). The
    table (teraio._core.Bounded) is keyed by the storages' addresses (_cdata)."""

    def __init__(self, engine, min_bytes, budget, tier):
        self.engine = engine
        self.min_bytes = max(1, int(min_bytes))
        self.budget = budget  # callable: the current budget in bytes
        self.tier = tier      # callable: engine tiers to try, in order, for a tensor of n bytes
        self.table = _core.Bounded(self.min_bytes, GRACE)
        self.refs: dict[int, weakref.ref] = {}  # key -> its storage (weak)
        self.names: dict[int, str] = {}  # key -> a global's name (parameter, gradient, state)
        self.dead: list[int] = []
        self.max_out = 0  # largest tracked output bytes of one operator: room made before each
        # per operator: its output bytes over its largest input that is not a global (what scales
        # with the batch's shape), the most seen: a step of a new, larger shape makes room for
        # its outputs by that ratio, where max_out (learnt on smaller shapes) falls short
        self.out_ratio: dict = {}
        self._op = None  # (operator, its largest non-global input bytes) between before and after
        self.next_eid = ID_BASE
        self.stats = dict(offloads=0, bytes_offloaded=0, reads=0, bytes_read=0, io_s=0.0)
        self.discard = False  # release_storage(discard=...): the Offloader's aligned_storages
        # CUDA: device memory, and the compute stream's synchronize, called before each move (a
        # queued kernel may still use the tensor written, or the memory a read fills: the
        # caching allocator reuses a freed block on its stream at once). Synchronous, like
        # everything in these steps; planned steps are stream-ordered instead.
        self.device = False
        self.sync = None

    @property
    def peak_live(self):
        """Tracked bytes if nothing were offloaded, the most seen."""
        return self.table.peak_live

    @property
    def peak_resident(self):
        """Tracked bytes actually resident, the most after each operator."""
        return self.table.peak_resident

    # ---- bookkeeping ------------------------------------------------------------------------
    def _died(self, cd, ref):
        if self.refs.get(cd) is ref:
            self.dead.append(cd)

    def _flush_dead(self):
        while self.dead:
            cd = self.dead.pop()
            r = self.refs.get(cd)
            if r is not None and r() is None:
                self._remove(cd)

    def _remove(self, cd):
        del self.refs[cd]
        self.names.pop(cd, None)
        eid = self.table.remove(cd)
        if eid is not None:
            self.engine.drop(eid)

    def _track(self, st, how=None):
        """Track storage st (>= min_bytes; used by the current operator as `how`, unless None):
        its key, or None when it is too small to track."""
        cd = st._cdata
        r = self.refs.get(cd)
        nb = 0  # tracked already: the table knows its size (0 now, if offloaded)
        if r is None:
            nb = st.nbytes()
        elif r() is not st:
            self._remove(cd)  # the address was reused by a new storage
            nb = st.nbytes()
        rc = self.table.track(cd, nb) if how is None else self.table.use(cd, nb, how)
        if not rc:
            return None
        if rc & _CREATED:
            self.refs[cd] = weakref.ref(st, lambda r, cd=cd: self._died(cd, r))
        return cd

    def _what(self, cd, nb):
        name = self.names.get(cd)
        return f"{name} ({nb} bytes)" if name else f"an intermediate tensor of {nb} bytes"

    # ---- moves --------------------------------------------------------------------------------
    def _write(self, cd, eid, nb, st):
        """Write st to the first tier with room; False when every tier is full."""
        for tier in self.tier(nb):
            try:
                self.engine.write(eid, st.data_ptr(), nb, tier, self.device)
                return True
            except _core.Error as ex:
                if ex.args[0] != -28:  # -ENOSPC: try the next tier
                    raise _io_error(ex, "offloading", self._what(cd, nb)) from None
        return False

    def _evict(self, cd):
        """Offload the storage of key cd; False when no tier has room for it."""
        st = self.refs[cd]()
        if st is None:
            return True
        nb, eid, flags = self.table.get(cd)
        if st.nbytes() != nb:  # resized by its owner: track the new size, do not move it now
            self.table.resize(cd, st.nbytes())
            return True
        t0 = time.perf_counter()
        if eid is None:
            eid = self.next_eid
            self.next_eid += 1
        if not flags & _CLEAN:
            if self.sync is not None:
                self.sync()
            if not self._write(cd, eid, nb, st):
                return False
            self.stats["offloads"] += 1
            self.stats["bytes_offloaded"] += nb
        try:
            release_storage(st, self.discard)
        except RuntimeError:  # not resizable (e.g. from numpy): keep it, forget the copy
            self.table.pin(cd)
            self.engine.drop(eid)
            return True
        self.table.offloaded(cd, eid)
        self.stats["io_s"] += time.perf_counter() - t0
        return True

    def _load(self, cd):
        st = self.refs[cd]()
        nb, eid, _ = self.table.get(cd)
        t0 = time.perf_counter()
        st.resize_(nb)
        if self.sync is not None:
            self.sync()
        try:
            self.engine.read(eid, st.data_ptr(), nb, self.device)
        except _core.Error as ex:
            raise _io_error(ex, "reading back", self._what(cd, nb)) from None
        self.table.loaded(cd)
        self.stats["reads"] += 1
        self.stats["bytes_read"] += nb
        self.stats["io_s"] += time.perf_counter() - t0

    def _make_room(self, in_optim, reserve=0):
        """Offload the table's victims until the resident bytes are within the budget less
        reserve, or the tiers are full (then run above the budget rather than fail)."""
        budget = max(0, self.budget() - reserve)
        tb = self.table
        more = False
        while tb.resident > budget:
            victims = tb.pick(budget, in_optim, more)
            if not victims:
                return
            for cd in victims:
                if tb.resident <= budget or not self._evict(cd):
                    return
            more = True  # an offload freed less than planned: the round goes on

    # ---- around one operator ----------------------------------------------------------------
    def before(self, func, args, kwargs, in_optim):
        """The operator's tensors tracked and resident, room made for its outputs. The table
        keeps what it uses (never a victim until the next operator)."""
        self._flush_dead()
        tb = self.table
        tb.begin_op()
        comm = _arg_plan(func)[2]
        how = (_OPTIM if in_optim else 0) | (_COMM if comm else 0)
        for t, w in _iter_args(func, args, kwargs):
            self._track(t.untyped_storage(), how | _WRITE if w else how)
        inb, _, load_bytes = tb.op()
        self._op = (func, inb)
        room = new_output_bytes(func, args, kwargs, self.min_bytes)
        if room is None:  # not known beforehand: the most an operator made, or by this one's ratio
            room = self.max_out
            if inb:
                room = max(room, int(self.out_ratio.get(func, 0.0) * inb))
        # room for what comes back and for the outputs, before anything is allocated
        self._make_room(in_optim, room + load_bytes)
        for cd in tb.op_reads():
            self._load(cd)
        tb.mark_peak()

    def after(self, out, in_optim):
        comm = self._op is not None and _arg_plan(self._op[0])[2]
        how = _OUTPUT | (_OPTIM if in_optim else 0) | (_COMM if comm else 0)
        for o in _flat_out(out, []):
            self._track(o.untyped_storage(), how)
        made = self.table.op()[1]
        self.max_out = max(self.max_out, made)
        func, inb = self._op or (None, 0)
        if inb and made:
            self.out_ratio[func] = max(self.out_ratio.get(func, 0.0), made / inb)
        self._op = None
        self.table.mark_peak()
        self._make_room(in_optim)

    # ---- between steps ------------------------------------------------------------------------
    def begin_step(self, globals_):
        self._flush_dead()
        self.table.begin_step()
        for name, st, kind in globals_:
            cd = self._track(st) if st.nbytes() else st._cdata
            if cd is not None and self.table.set_global(cd, kind == KIND_OPTIM):
                self.names[cd] = name

    def true_nbytes(self, st):
        cd = st._cdata
        r = self.refs.get(cd)
        if r is not None and r() is st:
            nb, _, flags = self.table.get(cd)
            if not flags & _RESIDENT:
                return nb
        return st.nbytes()

    def offloaded(self):
        """{storage key: (engine id, bytes, name, storage)} of the tracked storages that hold
        no memory now (offloaded), their bytes in the engine under that id."""
        out = {}
        for cd in self.table.keys():
            r = self.refs.get(cd)
            st = r() if r is not None else None
            nb, eid, flags = self.table.get(cd)
            if st is not None and nb and not flags & _RESIDENT and st.nbytes() == 0:
                out[cd] = (eid, nb, self.names.get(cd, f"a tensor of {nb} bytes"), st)
        return out

    def end_step(self, globals_):
        """Bring back what is offloaded but not a global (it would be read outside the step)."""
        self._flush_dead()
        gl = {st._cdata for _, st, _ in globals_}
        for cd in self.table.keys():
            if self.refs[cd]() is None:
                self._remove(cd)
            elif not self.table.get(cd)[2] & _RESIDENT and cd not in gl:
                self._load(cd)

    def adopt(self, st, nb, eid, name=None):
        """Storage st's contents (nb bytes) are in the engine as eid, handed over by an executor
        that is going (a switch between plans): tracked as offloaded, read back when an
        operator uses it; this object owns (and drops) the copy from now on. A storage that
        still holds its memory (a failed release) stays resident, its copy clean."""
        if st is None:  # died while stored: nothing to bring back
            self.engine.drop(eid)
            return
        self._flush_dead()
        cd = st._cdata
        if cd in self.refs:
            self._remove(cd)
        self.table.adopt(cd, nb, eid, st.nbytes() == nb, name is not None)
        self.refs[cd] = weakref.ref(st, lambda r, cd=cd: self._died(cd, r))
        if name is not None:
            self.names[cd] = name

    def hand_over(self, globals_, runtime, prog):
        """The first planned step begins: offloaded globals become the executor's copies. A
        copy goes only to the plan's tensor of its size (globals_ are in the plan's order);
        anything else is brought back. Returns {tensor id: engine id} of the copies handed over
        (the executor keeps their engine ids)."""
        self._flush_dead()
        given = {}
        for i, (_, st, _) in enumerate(globals_):
            cd = st._cdata
            r = self.refs.get(cd)
            if r is None or r() is not st:
                continue
            nb, eid, flags = self.table.get(cd)
            if not flags & _RESIDENT and i < prog.n_globals and prog.tensors[i][0] == nb:
                try:
                    runtime.adopt(i, eid)
                except Exception:  # noqa: BLE001 - e.g. pinned in the trace: bring it back below
                    continue
                # the executor owns (and drops) the copy now: forgotten here, not dropped
                given[i] = eid
                del self.refs[cd]
                self.names.pop(cd, None)
                self.table.remove(cd)
        self.restore()
        return given

    def restore(self):
        """Bring every offloaded storage back and forget the copies."""
        self._flush_dead()
        for cd in self.table.keys():
            st = self.refs[cd]()
            if st is not None and not self.table.get(cd)[2] & _RESIDENT:
                self._load(cd)
            self._remove(cd)  # its copy dropped; one by one: a failed read leaves the rest
        self.table.clear()


class BoundedRecorder(StepDriver):
    """The recording driver, with BoundedMemory around every operator it runs."""

    def __init__(self, globals_, bounded, **kw):
        self.bounded = bounded
        bounded.begin_step(globals_)
        super().__init__(globals_, record=True, **kw)
        for i, (name, st, kind) in enumerate(globals_):
            nb = bounded.true_nbytes(st)  # an offloaded global's storage has 0 bytes now
            if nb != self.prog.tensors[i][0]:
                self.prog.tensors[i] = (nb, kind, self.prog.tensors[i][2], name)

    def _timed(self, func, args, kwargs, k):
        self.busy = True
        try:
            self.bounded.before(func, args, kwargs, self.in_optim())
        finally:
            self.busy = False
        out = super()._timed(func, args, kwargs, k)
        self.busy = True
        try:
            self.bounded.after(out, self.in_optim())
        finally:
            self.busy = False
        return out
