"""Keeping the steps that have no plan yet (warm-up, profiling) within the memory budget.

Before a plan exists nothing says which tensor is needed when, so the Offloader keeps these steps
under the budget reactively: every operator's tensors are made resident before it runs (read back
from the engine if they were offloaded), and after it ran, while the tracked bytes exceed the
budget, a tensor the operator did not use is written to the engine (and waited for) and its
storage released (`untyped_storage().resize_(0)`, the executor's technique). Which one: outside the
optimizer, optimizer states first (only the optimizer uses them), then the least recently used;
inside the optimizer, the tensors the optimizer already updated in this step, most recent first
(a per-parameter optimizer is done with them) unless they were used by its last GRACE
operators, then the least recently used. Synchronous and
conservative: these steps get slower, not larger. Globals still offloaded when the first planned
step starts are handed to the executor (tio_runtime_adopt_stored), so that step does not bring
them back either; and an executor that goes (a switch to another plan, or to a step without a
plan) hands its stored globals here (tio_runtime_give_stored). See docs/runtime.md.
"""
from __future__ import annotations

import time
import weakref

import torch

from teraio.torch._mode import (F_GLOBAL, KIND_OPTIM, StepDriver, _arg_plan, _flat_out,
                                _iter_args, release_storage)

ID_BASE = 1 << 62
GRACE = 32  # operators  # engine ids of this module's copies (executors use generation << 32 + id)


class _Entry:
    __slots__ = ("ref", "nb", "resident", "last", "eid", "clean", "optim_state", "optim_used",
                 "fixed", "name")

    def __init__(self, ref, nb, last):
        self.ref = ref
        self.nb = nb
        self.resident = True
        self.last = last
        self.eid = None
        self.clean = False  # the engine holds an identical copy
        self.optim_state = False
        self.optim_used = False
        self.fixed = False  # its storage cannot be released (not resizable)
        self.name = None  # a global's name (parameter, gradient, optimizer state)

    def what(self):
        return (f"{self.name} ({self.nb} bytes)" if self.name else
                f"an intermediate tensor of {self.nb} bytes")


def error_in(ex, context):
    """teraio.Error ex (code, message) with context put before its message, code kept."""
    from teraio import _core

    code, msg = ex.args[:2] if len(ex.args) >= 2 else (-5, str(ex))
    return _core.Error(code, f"{context}: {msg}")


def _io_error(ex, what, e):
    """An engine error of a warm-up or profiled step, naming the tensor it was moving."""
    return error_in(ex, f"{what} {e.what()} in a step without a plan (warm-up or profiling)")


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
    try:
        key = (func, _meta_key(args), _meta_key(tuple(sorted(kwargs.items()))))
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
    """Tracked storages (>= min_bytes) of the steps without a plan, kept under budget()."""

    def __init__(self, engine, min_bytes, budget, tier):
        self.engine = engine
        self.min_bytes = max(1, int(min_bytes))
        self.budget = budget  # callable: the current budget in bytes
        self.tier = tier      # callable: engine tiers to try, in order, for a tensor of n bytes
        self.ent: dict[int, _Entry] = {}
        self.dead: list[int] = []
        self.resident = 0
        self.live = 0
        self.peak_live = 0        # tracked bytes if nothing were offloaded
        self.peak_resident = 0    # tracked bytes actually resident, max after each operator
        self.clock = 0
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

    # ---- bookkeeping ------------------------------------------------------------------------
    def _died(self, cd, ref):
        e = self.ent.get(cd)
        if e is not None and e.ref is ref:
            self.dead.append(cd)

    def _flush_dead(self):
        while self.dead:
            cd = self.dead.pop()
            e = self.ent.get(cd)
            if e is None or e.ref() is not None:
                continue
            self._remove(cd, e)

    def _remove(self, cd, e):
        del self.ent[cd]
        self.live -= e.nb
        if e.resident:
            self.resident -= e.nb
        if e.eid is not None:
            self.engine.drop(e.eid)

    def _entry(self, st):
        cd = st._cdata
        e = self.ent.get(cd)
        if e is not None:
            if e.ref() is st:
                return e
            self._remove(cd, e)  # the address was reused by a new storage
        nb = st.nbytes()
        if nb < self.min_bytes:
            return None
        e = _Entry(weakref.ref(st, lambda r, cd=cd: self._died(cd, r)), nb, self.clock)
        self.ent[cd] = e
        self.live += nb
        self.resident += nb
        self.peak_live = max(self.peak_live, self.live)
        return e

    # ---- moves --------------------------------------------------------------------------------
    def _write(self, e, st):
        """Write e to the first tier with room; False when every tier is full."""
        from teraio import _core

        for tier in self.tier(e.nb):
            try:
                self.engine.write(e.eid, st.data_ptr(), e.nb, tier, self.device)
                return True
            except _core.Error as ex:
                if ex.args[0] != -28:  # -ENOSPC: try the next tier
                    raise _io_error(ex, "offloading", e) from None
        return False

    def _evict(self, e):
        """Offload e; False when no tier has room for it."""
        st = e.ref()
        if st is None:
            return True
        if st.nbytes() != e.nb:  # resized by its owner: track the new size, do not move it now
            self.live += st.nbytes() - e.nb
            self.resident += st.nbytes() - e.nb
            e.nb = st.nbytes()
            e.fixed = e.nb == 0
            return True
        t0 = time.perf_counter()
        fresh = e.eid is None
        if fresh:
            e.eid = self.next_eid
            self.next_eid += 1
        if not e.clean:
            if self.sync is not None:
                self.sync()
            if not self._write(e, st):
                if fresh:
                    e.eid = None
                return False
            self.stats["offloads"] += 1
            self.stats["bytes_offloaded"] += e.nb
        try:
            release_storage(st, self.discard)
        except RuntimeError:  # not resizable (e.g. from numpy): keep it, forget the copy
            e.fixed = True
            self.engine.drop(e.eid)
            e.eid = None
            e.clean = False
            return True
        e.clean = True
        e.resident = False
        self.resident -= e.nb
        self.stats["io_s"] += time.perf_counter() - t0
        return True

    def _load(self, e, st):
        t0 = time.perf_counter()
        st.resize_(e.nb)
        from teraio import _core

        if self.sync is not None:
            self.sync()
        try:
            self.engine.read(e.eid, st.data_ptr(), e.nb, self.device)
        except _core.Error as ex:
            raise _io_error(ex, "reading back", e) from None
        e.resident = True
        self.resident += e.nb
        self.stats["reads"] += 1
        self.stats["bytes_read"] += e.nb
        self.stats["io_s"] += time.perf_counter() - t0

    def _make_room(self, keep, in_optim, reserve=0):
        budget = max(0, self.budget() - reserve)
        if self.resident <= budget:
            return
        cands = [e for e in self.ent.values()
                 if e.resident and not e.fixed and id(e) not in keep]
        if in_optim:
            # done with: used by the optimizer, but not by its last few operators (a parameter's
            # update is a burst of operators on its weight, gradient and states)
            done = self.clock - GRACE
            cands.sort(key=lambda e: (0, -e.last) if e.optim_used and e.last < done
                       else (2, -e.last) if e.optim_used else (1, e.last))
        else:
            cands.sort(key=lambda e: (0 if e.optim_state else 1, e.last))
        for e in cands:
            if self.resident <= budget:
                break
            if not self._evict(e):
                break  # the tiers are full: run above the budget rather than fail

    # ---- around one operator ----------------------------------------------------------------
    def before(self, func, args, kwargs, in_optim):
        self._flush_dead()
        self.clock += 1
        keep = set()
        load = []
        inb = 0
        comm = _arg_plan(func)[2]
        for t, w in _iter_args(func, args, kwargs):
            st = t.untyped_storage()
            e = self._entry(st)
            if e is None:
                continue
            if comm:  # a collective (DDP's bucket allreduce) may use it after it returns
                e.fixed = True
                if not e.resident and id(e) not in keep:
                    load.append((e, st))
            if id(e) not in keep and not e.resident and not e.fixed:
                load.append((e, st))
            keep.add(id(e))
            e.last = self.clock
            if w:
                e.clean = False
            if in_optim:
                e.optim_used = True
            if e.name is None and e.nb > inb:
                inb = e.nb
        self._op = (func, inb)
        room = new_output_bytes(func, args, kwargs, self.min_bytes)
        if room is None:  # not known beforehand: the most an operator made, or by this one's ratio
            room = self.max_out
            if inb:
                room = max(room, int(self.out_ratio.get(func, 0.0) * inb))
        # room for what comes back and for the outputs, before anything is allocated
        self._make_room(keep, in_optim, room + sum(e.nb for e, _ in load))
        for e, st in load:
            self._load(e, st)
        self.peak_resident = max(self.peak_resident, self.resident)
        return keep

    def after(self, out, keep, in_optim):
        made = 0
        comm = self._op is not None and _arg_plan(self._op[0])[2]
        for o in _flat_out(out, []):
            st = o.untyped_storage()
            known = self.ent.get(st._cdata)
            e = self._entry(st)
            if e is None:
                continue
            if comm:
                e.fixed = True
            if known is not e:
                made += e.nb
            keep.add(id(e))
            e.last = self.clock
            e.clean = False
            if in_optim:
                e.optim_used = True
        self.max_out = max(self.max_out, made)
        func, inb = self._op or (None, 0)
        if inb and made:
            self.out_ratio[func] = max(self.out_ratio.get(func, 0.0), made / inb)
        self._op = None
        self.peak_resident = max(self.peak_resident, self.resident)
        self._make_room(keep, in_optim)

    # ---- between steps ------------------------------------------------------------------------
    def begin_step(self, globals_):
        self._flush_dead()
        for e in self.ent.values():
            e.optim_used = False
        for name, st, kind in globals_:
            e = self._entry(st) if st.nbytes() else self.ent.get(st._cdata)
            if e is not None:
                e.name = name
                e.optim_state = kind == KIND_OPTIM or e.optim_state

    def true_nbytes(self, st):
        e = self.ent.get(st._cdata)
        return e.nb if e is not None and e.ref() is st and not e.resident else st.nbytes()

    def end_step(self, globals_):
        """Bring back what is offloaded but not a global (it would be read outside the step)."""
        self._flush_dead()
        gl = {st._cdata for _, st, _ in globals_}
        for cd, e in list(self.ent.items()):
            st = e.ref()
            if st is None:
                self._remove(cd, e)
            elif not e.resident and cd not in gl:
                self._load(e, st)

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
        old = self.ent.get(cd)
        if old is not None:
            self._remove(cd, old)
        e = _Entry(weakref.ref(st, lambda r, cd=cd: self._died(cd, r)), nb, self.clock)
        e.eid = eid
        e.clean = True
        e.name = name
        e.resident = st.nbytes() == nb
        self.ent[cd] = e
        self.live += nb
        if e.resident:
            self.resident += nb
        self.peak_live = max(self.peak_live, self.live)

    def hand_over(self, globals_, runtime, prog):
        """The first planned step begins: offloaded globals become the executor's copies. A
        copy goes only to the plan's tensor of its size (globals_ are in the plan's order);
        anything else is brought back."""
        self._flush_dead()
        for i, (_, st, _) in enumerate(globals_):
            e = self.ent.get(st._cdata)
            if e is not None and e.ref() is st and not e.resident and \
                    i < prog.n_globals and prog.tensors[i][0] == e.nb:
                try:
                    runtime.adopt(i, e.eid)
                except Exception:  # noqa: BLE001 - e.g. pinned in the trace: bring it back below
                    continue
                e.eid = None  # the executor owns (and drops) the copy now
                del self.ent[st._cdata]
        self.restore()

    def restore(self):
        """Bring every offloaded storage back and forget the copies."""
        self._flush_dead()
        for cd, e in list(self.ent.items()):
            st = e.ref()
            if st is not None and not e.resident:
                self._load(e, st)
            if e.eid is not None:
                self.engine.drop(e.eid)
                e.eid = None
        self.ent.clear()
        self.resident = self.live = 0


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
            keep = self.bounded.before(func, args, kwargs, self.in_optim())
        finally:
            self.busy = False
        out = super()._timed(func, args, kwargs, k)
        self.busy = True
        try:
            self.bounded.after(out, keep, self.in_optim())
        finally:
            self.busy = False
        return out
