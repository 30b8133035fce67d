"""The Offloader's executor of the current plan (teraio.torch.offload): the C executor
(_core.Runtime) over the engine, the globals it was bound to, the engine ids of their copies, and
its counters once it is gone. One Executor per Offloader; it runs at most one C executor at a
time (a new one per plan it starts, each with its own range of engine ids)."""
from __future__ import annotations

import re
import weakref

from teraio import _core

_Error = _core.Error


class Executor:
    """Owns the running C executor (runtime: None between plans) and what belongs to it: its
    globals by tensor id (bind), the engine ids of their copies, the tensors it may move
    (movable) and the offloads its plan issues per operator (offload_at), and the counters of
    the executors that ran before (done). The Offloader's engine is passed to the calls that
    use it (the Offloader owns it); its CPU settings are borrowed."""

    def __init__(self, cpu):
        self.cpu = cpu  # CpuMemory: the block cache follows the peak of planned steps
        self.runtime = None
        self.key = None  # the kind of step of the executor now running (report(): kinds)
        self.globals = {}  # storage -> (weak reference, tensor id)
        self.sizes = {}  # their bytes in the plan, and names, by tensor id
        self.names = {}
        self.id_base = 0
        self.eids = {}  # the copies it adopted: tensor id -> engine id
        self.generation = 0
        self.movable = ()
        self.offload_at = {}
        self.done = {}  # the counters of the executors dropped so far

    def start(self, engine, trace, plan, movable_ids, *, budget, key, cuda, ssd_dirs,
              host_memory):
        """A new C executor for plan (made for trace) on engine, for the kind of step key;
        movable_ids: the tensors it may offload on demand too."""
        self.key = key  # its peak is this kind's (report(): kinds)
        s = plan.summary()
        if s["ssd_peak_bytes"]:
            if not ssd_dirs:
                raise ValueError("the plan offloads to SSD but ssd_dirs is empty")
            try:
                engine.reserve(s["ssd_peak_bytes"])
            except _Error as e:
                raise _Error(e.args[0], f"ssd_dirs: cannot reserve the plan's "
                             f"{_core.format_bytes(s['ssd_peak_bytes'])} of SSD space: "
                             f"{e.args[1]}: free space there, add directories, or raise "
                             "host_memory / memory_budget") from None
        if s["host_peak_bytes"] > host_memory:
            raise ValueError(f"host_memory: the plan needs {s['host_peak_bytes']} bytes of host "
                             f"tier, only {host_memory} configured")
        moves = plan.moves()
        self.movable = frozenset(m[0] for m in moves) | movable_ids
        self.offload_at = {}
        for m in moves:
            if m[2] != 0:  # to a tier: an offload, issued before kernel m[4]
                self.offload_at.setdefault(m[4], []).append(m[0])
        # each executor gets its own range of engine ids: a replaced one that is freed late (the
        # garbage collector decides) must not drop the copies of its successor
        self.generation += 1
        # demand offloads (the executor keeping the budget where the plan cannot): to the host tier
        # while it has room, else to the SSDs
        tier = 0 if ssd_dirs and host_memory else (2 if ssd_dirs else 1)
        # CUDA: stream-ordered. Kernels stay queued on the current stream (never synchronized
        # per operator); every transfer waits, on the engine's threads, for an event recorded
        # on that stream when it was issued (docs/runtime.md, CUDA path)
        stream = 0
        if cuda:
            import torch

            stream = torch.cuda.current_stream().cuda_stream
        # its copy of global t: engine id base + t, or the one it adopted (eids)
        self.id_base = self.generation << 32
        self.eids = {}
        self.runtime = _core.Runtime(trace, plan, engine, budget_bytes=budget, device=cuda,
                                     id_base=self.generation << 32, demand_tier=tier,
                                     stream=stream, stream_ordered=cuda)
        self.cpu.planned(True)  # planned steps repeat: the block cache may follow their peak

    def drop(self):
        """Drop the C executor (its counters go to done). Returns its last counters (None when
        none ran)."""
        st = None
        if self.runtime is not None:
            st = self.runtime.stats()
            for k, v in st.items():
                if k in ("resident_bytes",):
                    continue
                if k == "peak_resident_bytes":
                    self.done[k] = max(self.done.get(k, 0), v)
                else:
                    self.done[k] = self.done.get(k, 0) + v
            self.runtime = None
            self.cpu.planned(False)  # until the next plan: nothing kept hot
        self.cpu.set_prefault(False)
        return st

    def stats(self):
        """The counters of every executor so far (the running one's added)."""
        st = dict(self.done)
        if self.runtime is not None:
            for k, v in self.runtime.stats().items():
                if k == "peak_resident_bytes":
                    st[k] = max(st.get(k, 0), v)
                elif k != "resident_bytes":
                    st[k] = st.get(k, 0) + v
        return st

    def bind(self, globals_, prog):
        """The executor's globals by tensor id (its plan's order), for restore(): the globals
        collected later may be others (a gradient that appeared, a state that went)."""
        self.globals = {st._cdata: (weakref.ref(st), i) for i, (_, st, _) in enumerate(globals_)}
        tensors = prog.tensors if prog is not None else ()
        self.sizes = {i: tensors[i][0] for i in range(min(len(globals_), len(tensors)))}
        self.names = {i: name for i, (name, _, _) in enumerate(globals_)}

    def true_nbytes(self, st, prog):
        """A global's size in the plan where the executor holds it offloaded, else 0."""
        hit = self.globals.get(st._cdata)
        if hit is not None and hit[0]() is st and prog is not None:
            return prog.tensors[hit[1]][0]
        return 0

    def offloaded(self):
        """{storage key: (engine id, bytes, name, storage)} of its globals that hold no memory
        now (offloaded), their bytes in the engine under that id (Offloader.save() reads them)."""
        out = {}
        if self.runtime is None:
            return out
        for ref, t in self.globals.values():
            st, nb = ref(), self.sizes.get(t)
            if st is not None and nb and st.nbytes() == 0:
                out[st._cdata] = (self.eids.get(t, self.id_base + t), nb,
                                  self.names.get(t, f"tensor {t}"), st)
        return out

    def drain(self):
        """Wait for the executor's requests still in flight (the CUDA path carries offloads past
        the end of a step): its stored copies are complete then, and the engine has none of its
        requests in flight, so that a waited-for engine.read (Offloader.save()) takes none of its
        completions. A failed offload raises the executor's teraio.Error (its tensor stays in
        memory)."""
        if self.runtime is not None:
            self.runtime.drain()

    def held_storages(self):
        """The data pointers of the globals the executor holds in memory at the end of a step
        (resident, or written and not released yet): their copy in the engine, where they have
        one, is taken for their contents by the next step (see teraio.torch._between)."""
        rt = self.runtime
        if rt is None:
            return ()
        out = []
        for ref, t in self.globals.values():
            st = ref()
            if st is not None and st.nbytes() > 0 and rt.state(t) in (1, 2):  # resident, writing
                out.append(st.data_ptr())
        return out

    def give_stored(self, bounded, prog):
        """Hand the copies of the globals the executor has stored to the bounded path (they
        become its copies: read back when an operator needs them), then drop the executor."""
        rt = self.runtime
        if rt is None:
            return
        for ref, tid in list(self.globals.values()):
            eid = rt.give_stored(tid)
            if eid is not None:
                bounded.adopt(ref(), prog.tensors[tid][0], eid, prog.tensors[tid][3])
        self.globals = {}

    def restore(self, engine, cuda):
        """Bring back every global the executor offloaded (from its copies through the executor;
        where the executor fails, from the copies directly: restore_from_copies)."""
        if self.runtime is None:
            return
        import torch

        by_id = {i: ref() for ref, i in self.globals.values()}
        try:
            acts = self.runtime.restore_begin()
            for kind, t, nb in acts:
                st = by_id.get(t)
                if st is None:  # died while stored (its owner dropped it): scratch memory
                    st = by_id[t] = torch.UntypedStorage(nb, device="cuda" if cuda else "cpu")
                if st.nbytes() != nb:  # else never released (a failed release): memory there
                    st.resize_(nb)
                self.runtime.bind(t, st.data_ptr())
            self.runtime.restore_finish()
        except _Error as e:
            self.restore_from_copies(engine, e, cuda)

    def restore_from_copies(self, engine, failure, cuda):
        """restore() without the executor, after one of its transfers failed (its error is
        sticky: it refuses every call): every global it released is read back from its copy in
        the engine, which is complete (a tensor is released only once its copy is written; a
        failed write keeps the tensor in memory and the previous copy on disk), and so is the
        one whose read failed (its memory is undefined). Reads only: a disk that fails writes
        loses nothing. The executor is dropped (a new one starts with the next step). Raises
        a teraio.Error naming the tensors it could not bring back."""
        rt, base = self.runtime, self.id_base
        bad_read = re.search(r"read of tensor (\d+) ", str(failure))
        bad_read = int(bad_read.group(1)) if bad_read else None
        lost = []
        for ref, t in list(self.globals.values()):
            st = ref()
            nb = self.sizes.get(t)
            if st is None or nb is None:
                continue
            state = rt.state(t)
            if st.nbytes() == nb and state != 4 and t != bad_read:  # 4: ST_MATERIALIZE
                continue  # in memory: resident, or written and not released yet
            try:
                if st.nbytes() != nb:
                    st.resize_(nb)
                if cuda:
                    import torch

                    torch.cuda.current_stream().synchronize()
                engine.read(self.eids.get(t, base + t), st.data_ptr(), nb, cuda)
            except Exception as e:  # noqa: BLE001 - listed below; the others are still read
                lost.append(f"{self.names.get(t, t)} ({e})")
        self.runtime = None  # failed for good: its copies go with it
        self.cpu.set_prefault(False)
        if lost:
            raise _Error(failure.args[0] if len(failure.args) >= 2 else -5,
                         f"{failure}; reading back from the copies failed for {len(lost)} "
                         f"tensor(s), which hold no data: {'; '.join(lost[:4])}")
