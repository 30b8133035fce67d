"""The Offloader's CUDA path, stream-ordered executor included, on a machine without a GPU.

Run as a script in a child process (tests/python/test_torch_cuda_fake.py) with TIO_CUDART_LIB
naming the fake CUDA runtime (libtio_fake_cudart.so, tests/io/fakes) and FAKE_CUDA_HOST_DEVICE=1:
the fake then takes the process's CPU memory for device memory, so that PyTorch's CPU tensors
stand in for CUDA tensors. Everything below the PyTorch layer is the real CUDA path: the engine's
`cuda` backend (pinned staging, copies on its own streams), the stream-ordered executor (fences
recorded on the compute stream, stream waits, lazy releases, writes carried into the next step),
the Offloader told it runs on CUDA, with a compute stream made through the fake and passed as
torch.cuda.current_stream().

What a GPU does and the CPU does not is emulated by an innermost dispatch mode (GpuOrder): an
operator runs on the CPU at once, where a GPU would queue it on the compute stream behind what
the executor made the stream wait for. So before each operator the training thread waits for the
compute stream (cudaStreamSynchronize: the operator runs where a kernel queued now would), and
after it a host function queued on the stream asks the fake which engine copies touch the bytes
the operator read or wrote without being ordered with it (fake_cuda_racing_copies: a missing
event or stream wait counts whether or not the timing corrupted the bytes).

The ordering is emulated from the first executor on (TIO_EMU_ORDER_ALL=1: from the start; the
unplanned steps move device memory synchronously). A RELEASE'd storage is freed once the compute
stream has passed the release (PyTorch's caching allocator frees in stream order).

Prints one JSON line: losses, parameter digest, the Offloader's report (subset), the fake's
counters and the calls the Offloader made of torch.cuda and the engine. Arguments: steps, then
the 0-based steps after which the parameters are modified in place between steps ("m3"),
restore() is called ("r4"), or the model's and optimizer's state_dict() are saved ("s4":
Offloader.save(), "w4": torch.save in Offloader.streamed_saves(); torch.save in the reference;
to step4s.pt / step4w.pt in a new temporary directory; "saves" gives each file's sha256 and,
with the Offloader, what was offloaded and in flight around the save), e.g. `7 m3 r4 m5`;
several after one step run in the order given. Environment: TIO_EMU_BUDGET (memory_budget,
default 0.5), TIO_EMU_HOST (host_memory, default 64MiB), TIO_EMU_SSD (an SSD directory: both
tiers), TIO_EMU_PLAIN=1 (plain PyTorch on the CPU instead, the reference).
"""
import contextlib
import ctypes
import hashlib
import json
import os
import sys
import tempfile

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(ROOT, "examples") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "examples"))

from train_llama_tiny import param_digest, train  # noqa: E402

HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Fake:
    """The fake CUDA runtime through ctypes: the library the engine's shim loaded (the same
    path, so the same handle and state)."""

    def __init__(self, path):
        self.lib = lib = ctypes.CDLL(path)
        for name in ("fake_cuda_racing_copies", "fake_cuda_copy_races", "fake_cuda_bad_accesses",
                     "fake_cuda_blocking_copies", "fake_cuda_pageable_copies",
                     "fake_cuda_memcpy_calls", "fake_cuda_cross_device_copies"):
            getattr(lib, name).restype = ctypes.c_uint64
        lib.fake_cuda_racing_copies.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        lib.cudaLaunchHostFunc.argtypes = [ctypes.c_void_p, HOSTFN, ctypes.c_void_p]
        lib.fake_cuda_set_lag.argtypes = [ctypes.c_uint, ctypes.c_uint64]
        s = ctypes.c_void_p()
        self.check(lib.cudaStreamCreateWithFlags(ctypes.byref(s), 1), "cudaStreamCreateWithFlags")
        self.stream = s

    @staticmethod
    def check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: CUDA error {rc}")

    def sync(self):
        self.check(self.lib.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")

    def counters(self):
        return {n: int(getattr(self.lib, "fake_cuda_" + n)())
                for n in ("copy_races", "bad_accesses", "blocking_copies", "pageable_copies",
                          "memcpy_calls", "cross_device_copies")}


def _ranges(v, out):
    """(data_ptr, nbytes) of the storages of the tensors in v (nested lists, tuples, dicts)."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            try:
                st = x.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            if st.nbytes() > 0:
                out.append((st.data_ptr(), st.nbytes()))
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    return out


class GpuOrder(TorchDispatchMode):
    """Innermost mode: every operator runs where a kernel queued on the compute stream now would
    run, and is checked against the engine's copies (see the module's docstring)."""

    def __init__(self, fake):
        super().__init__()
        self.fake = fake
        self.on = os.environ.get("TIO_EMU_ORDER_ALL") == "1"
        self.races = 0
        self.kernels = 0
        self.pending = {}
        self.next = 0
        self.cb = HOSTFN(self._check)  # kept alive: the fake calls it on its stream thread

    def _check(self, key):
        for ptr, n, w in self.pending.pop(key, ()):
            self.races += int(self.fake.lib.fake_cuda_racing_copies(ptr, n, w))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.on:  # before the first executor: device moves are synchronous
            return func(*args, **kwargs)
        self.fake.sync()
        out = func(*args, **kwargs)
        schema = func._schema.arguments
        ranges = []
        for i, a in enumerate(args):
            w = i < len(schema) and schema[i].alias_info is not None and \
                schema[i].alias_info.is_write
            ranges.extend((p, n, int(w)) for p, n in _ranges(a, []))
        for k, a in kwargs.items():
            ranges.extend((p, n, 0) for p, n in _ranges(a, []))  # out= args: written below
        seen = {p for p, _, _ in ranges}
        ranges.extend((p, n, 1) for p, n in _ranges(out, []) if p not in seen)
        ranges.extend((p, n, 1) for p, n in _ranges(kwargs.get("out"), []))
        self.next += 1
        self.pending[self.next] = ranges
        self.kernels += 1
        self.fake.check(self.fake.lib.cudaLaunchHostFunc(self.fake.stream, self.cb,
                                                         ctypes.c_void_p(self.next)),
                        "cudaLaunchHostFunc")
        return out


CALLS = []  # what the Offloader asked of torch.cuda and the engine, in order


class FakeStream:
    def __init__(self, fake):
        self.fake = fake
        self.cuda_stream = fake.stream.value

    def synchronize(self):
        CALLS.append("stream_sync")
        self.fake.sync()


class FakeEvent:
    """Profiling's timing events: every operator 0.05 ms (no GPU to time)."""

    def __init__(self, enable_timing=False):
        pass

    def record(self, stream=None):
        CALLS.append("record")

    def synchronize(self):
        CALLS.append("event_sync")

    def elapsed_time(self, other):
        return 0.05


class LoggedEngine:
    """The engine, its synchronous moves logged (the Runtime gets the engine itself)."""

    def __init__(self, e):
        self.e = e

    def __getattr__(self, name):
        return getattr(self.e, name)

    def write(self, *a, **k):
        device = a[4] if len(a) > 4 else k.get("device", False)
        CALLS.append("engine_write_device" if device else "engine_write")
        return self.e.write(*a, **k) if k else self.e.write(*a)  # (an empty kw: the other form)

    def read(self, *a, **k):
        device = a[3] if len(a) > 3 else k.get("device", False)
        CALLS.append("engine_read_device" if device else "engine_read")
        return self.e.read(*a, **k) if k else self.e.read(*a)


@contextlib.contextmanager
def _capture_model():
    """train() makes the model itself: keep its parameters for between() while in this."""
    import llama_tiny

    orig = llama_tiny.LlamaTiny.__init__
    orig_opt = torch.optim.AdamW.__init__

    def init(self, *a, **kw):
        orig(self, *a, **kw)
        _model_params[:] = list(self.parameters())
        _made["model"] = self

    def init_opt(self, *a, **kw):
        orig_opt(self, *a, **kw)
        _made["optimizer"] = self

    llama_tiny.LlamaTiny.__init__ = init
    torch.optim.AdamW.__init__ = init_opt
    try:
        yield
    finally:
        llama_tiny.LlamaTiny.__init__ = orig
        torch.optim.AdamW.__init__ = orig_opt
        _model_params[:] = []
        _made.clear()


_model_params = []
_made = {}  # the model and optimizer train() made
SAVES = {}  # "s" steps: step -> what the save wrote and saw


def _checkpoint():
    return {"model": _made["model"].state_dict(), "optimizer": _made["optimizer"].state_dict()}


def _save(i, off, how):
    """"s": the state after step i to step<i>s.pt, by Offloader.save() (off) or torch.save;
    "w": to step<i>w.pt by torch.save in Offloader.streamed_saves() (off) or torch.save."""
    d = tempfile.mkdtemp(prefix="tio-emu-save-")
    path = os.path.join(d, f"step{i}{how}.pt")
    rec = {}
    if off is None:
        torch.save(_checkpoint(), path)
    else:
        from teraio.torch._save import Saver

        def offloaded():
            src = Saver.offloaded(off)
            return sum(v[1] for v in src.values()), max((v[1] for v in src.values()), default=0)

        rec["offloaded_before"], rec["largest_offloaded"] = offloaded()
        rec["resident_before"] = Saver.resident_bytes(off)
        rec["outstanding_before"] = off._engine.stats()["outstanding"]
        if how == "s":
            off.save(_checkpoint, path)
        else:
            with off.streamed_saves():
                torch.save(_checkpoint(), path)
        rec["offloaded_after"] = offloaded()[0]
        rec["save_peak_bytes"] = off.report()["save_peak_bytes"]
    with open(path, "rb") as f:
        rec["sha256"] = hashlib.sha256(f.read()).hexdigest()
    os.unlink(path)
    os.rmdir(d)
    SAVES[f"{i}{how}"] = rec


def between(plan):
    """train()'s on_step: after step i, what plan[i] says: "m" modifies every parameter in place
    (outside off.step(), as user code between steps may), "r" calls off.restore(), "s" and "w"
    save (_save)."""

    def on_step(i, off):
        for what in plan.get(i, ""):  # in the order given
            if what == "r" and off is not None:
                off.restore()
            if what in ("s", "w"):
                _save(i, off, what)
            if what == "m":
                with torch.no_grad():
                    for p in _model_params:
                        p.mul_(0.5).add_(0.01)

    return on_step


def parse(argv):
    plan = {}
    for a in argv[1:]:
        plan[int(a[1:])] = plan.get(int(a[1:]), "") + a[0]
    return int(argv[0]), plan


def reference(argv):
    """Plain PyTorch on the CPU with the same steps and changes between them."""
    steps, plan = parse(argv)
    SAVES.clear()
    with _capture_model():
        losses, model, _ = train("tiny", steps, on_step=between(plan))
    return {"losses": losses, "digest": param_digest(model), "saves": dict(SAVES)}


def main(argv):
    steps, plan = parse(argv)
    import teraio
    import teraio.torch.offload as offload_mod

    fake = Fake(os.environ["TIO_CUDART_LIB"])
    stream = FakeStream(fake)
    torch.cuda.current_stream = lambda *a: stream
    torch.cuda.Event = FakeEvent

    def device_sync(*a):
        CALLS.append("device_sync")
        fake.check(fake.lib.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    torch.cuda.synchronize = device_sync

    def detect(self, globals_):
        self._cuda = True  # the CPU tensors are the fake's device memory

    offload_mod.Offloader._detect_device = detect
    # PyTorch's caching allocator frees a block in stream order (it goes only to work queued
    # later on the stream, after the stream waits the executor queued before a RELEASE); glibc
    # reuses it at once and writes its own bookkeeping into it: the CPU stand-in for that order
    # is to free once the compute stream has passed the point of the release
    from teraio.torch import _mode

    release = _mode.release_storage

    def release_in_stream_order(st, discard=False):
        fake.sync()
        release(st, discard)

    _mode.release_storage = release_in_stream_order
    fast_init = _mode.FastStepDriver.__init__

    def logged_fast_init(self, *a, **kw):
        CALLS.append("fast_driver" if not kw.get("record") else "fast_recorder")
        fast_init(self, *a, **kw)

    _mode.FastStepDriver.__init__ = logged_fast_init
    gpu = GpuOrder(fake)
    kw = dict(memory_budget=float(os.environ.get("TIO_EMU_BUDGET", "0.5")),
              host_memory=os.environ.get("TIO_EMU_HOST", "64MiB"),
              options=teraio.OffloadOptions(min_tensor_bytes="16KiB", backend="cuda"))
    if os.environ.get("TIO_EMU_SSD"):
        kw["ssd_dirs"] = [os.environ["TIO_EMU_SSD"]]
    runtimes = []

    class Core:
        def __getattr__(self, name):
            return getattr(teraio._core, name)

        @staticmethod
        def Engine(*a, **k):
            return LoggedEngine(teraio._core.Engine(*a, **k))

        @staticmethod
        def Runtime(trace, plan, engine, **k):
            runtimes.append({x: k.get(x) for x in ("device", "stream", "stream_ordered")})
            CALLS.append("runtime")
            gpu.on = True
            return teraio._core.Runtime(trace, plan, engine.e, **k)

    from teraio.torch import _executor  # makes the Runtime

    offload_mod._core = _executor._core = Core()
    with gpu, _capture_model():
        losses, model, off = train("tiny", steps, offload=kw, on_step=between(plan))
        fake.sync()
    rep = off.report()
    off.close()
    print(json.dumps({
        "losses": losses, "digest": param_digest(model), "races": gpu.races,
        "kernels": gpu.kernels, "runtimes": runtimes, "stream": fake.stream.value,
        "saves": SAVES,
        "fake": fake.counters(), "calls": CALLS,
        "kernel_ns": sorted({k[1] for k in off._prog.kernels}),
        "report": {k: rep[k] for k in ("carried_offloads", "bytes_offloaded", "bytes_prefetched",
                                       "steps_offloaded", "offloads", "wait_write_count",
                                       "unplanned_bytes_offloaded")},
        "engine": {k: rep["engine"][k] for k in ("bytes_written", "bytes_read")
                   if k in rep["engine"]},
    }))


if __name__ == "__main__":
    if os.environ.get("TIO_EMU_PLAIN") == "1":
        print(json.dumps(reference(sys.argv[1:])))
    else:
        main(sys.argv[1:])
