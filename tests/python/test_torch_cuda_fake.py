"""The CUDA path's ordering logic, exercised on CPU with fake CUDA events.

On CUDA the Offloader times operators with CUDA events while profiling; while executing, the
executor is stream-ordered (every transfer waits for an event on the compute stream, on the
engine's threads: tests/io/test_runtime_stream.c checks that in C against an emulated GPU), so
the PyTorch layer never synchronizes the device per operator, and the per-operator path is the
C one (OpFast). This test swaps torch.cuda.Event, torch.cuda.synchronize and
torch.cuda.current_stream for fakes that log calls, forces the device path on CPU tensors (the
engine still gets host memory), and checks what the layer asks of the executor, that nothing
synchronizes during executed steps, and that training stays bitwise identical. It does not
validate anything on a GPU (see docs/runtime.md).
"""

import json
import os
import subprocess
import sys

import torch

import teraio  # noqa: E402
import teraio.offload as offload_mod  # noqa: E402

import _cuda_emulated  # noqa: E402

from train_llama_tiny import param_digest, train  # noqa: E402


class Log:
    calls = []


class FakeEvent:
    def __init__(self, enable_timing=False):
        self.timing = enable_timing

    def record(self, stream=None):
        Log.calls.append("record")

    def synchronize(self):
        Log.calls.append("event_sync")

    def elapsed_time(self, other):
        return 0.05  # ms


class FakeStream:
    cuda_stream = 0x5EED

    def synchronize(self):
        Log.calls.append("stream_sync")


class HostEngine:
    """The engine with device memory turned into host memory (the tensors are on the CPU)."""

    def __init__(self, e):
        self.e = e

    def __getattr__(self, name):
        return getattr(self.e, name)

    def write(self, eid, ptr, nb, tier, device=False):
        Log.calls.append("engine_write_device" if device else "engine_write")
        return self.e.write(eid, ptr, nb, tier)

    def read(self, eid, ptr, nb, device=False):
        Log.calls.append("engine_read_device" if device else "engine_read")
        return self.e.read(eid, ptr, nb)


class HostRuntimeCore:
    """teraio._core with Runtime forced to host memory (there is no GPU behind the fakes)."""

    def __getattr__(self, name):
        return getattr(teraio._core, name)

    @staticmethod
    def Engine(*a, **kw):
        return HostEngine(teraio._core.Engine(*a, **kw))

    @staticmethod
    def Runtime(trace, plan, engine, **kw):
        Log.runtimes.append({k: kw.get(k) for k in ("device", "stream", "stream_ordered")})
        kw["device"] = False
        kw["stream_ordered"] = False  # host memory: the C executor refuses stream ordering
        rt = teraio._core.Runtime(trace, plan, engine.e, **kw)
        return LoggedRuntime(rt)


class LoggedRuntime:
    def __init__(self, rt):
        self.rt = rt

    def __getattr__(self, name):
        f = getattr(self.rt, name)

        def call(*a):
            Log.calls.append(name)
            return f(*a)

        return call


def test_cuda_path_is_stream_ordered_and_uses_the_c_path(monkeypatch, tmp_path):
    from teraio.torch import _mode

    ref, model_ref, _ = train("tiny", 4)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: Log.calls.append("device_sync"))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: FakeStream())
    monkeypatch.setattr(offload_mod, "_core", HostRuntimeCore())
    fast_init = _mode.FastStepDriver.__init__

    def logged_fast_init(self, *a, **kw):
        Log.calls.append("fast_driver" if not kw.get("record") else "fast_recorder")
        fast_init(self, *a, **kw)

    monkeypatch.setattr(_mode.FastStepDriver, "__init__", logged_fast_init)

    def detect(self, globals_):
        self._cuda = True

    monkeypatch.setattr(offload_mod.Offloader, "_detect_device", detect)
    Log.calls = []
    Log.runtimes = []
    got, model, off = train("tiny", 4, offload=dict(
        memory_budget=0.5, ssd_dirs=[str(tmp_path)],
        options=teraio.OffloadOptions(min_tensor_bytes="16KiB")))
    assert got == ref
    assert param_digest(model) == param_digest(model_ref)
    calls = Log.calls
    # profiling: per-operator events were recorded and read after one device synchronize
    assert "device_sync" in calls
    assert calls.count("record") > 100
    # the executor was made stream-ordered on the current stream, with device memory
    assert Log.runtimes == [{"device": True, "stream": 0x5EED, "stream_ordered": True}]
    # execution: driven through the C path, and nothing synchronizes the device per operator
    first = calls.index("begin")
    executed = calls[first:]
    assert "fast_driver" in calls[:first], "the executed steps did not use the C path (OpFast)"
    assert executed.count("before") > 100 and executed.count("after") > 100
    assert "event_sync" not in executed and "device_sync" not in executed
    # the warm-up and profiled steps were kept within the budget too, with synchronous moves of
    # device memory, each after the compute stream was synchronized
    unplanned = calls[:first]
    moves = [i for i, c in enumerate(unplanned) if c in ("engine_write_device",
                                                          "engine_read_device")]
    assert moves, "nothing was offloaded before the plan"
    # (host memory moves are the SSD bandwidth probe's, on its own buffer)
    for i in moves:
        assert unplanned[i - 1] == "stream_sync", unplanned[max(0, i - 3):i + 1]
    assert off.report()["unplanned_bytes_offloaded"] > 0
    # the profiled kernels got the fake event time (0.05 ms = 50000 ns)
    assert all(k[1] in (1, 50000) for k in off._prog.kernels)
    assert off.report()["bytes_offloaded"] > 0


# ---- the stream-ordered executor under the Python layer, on the fake CUDA runtime -------------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMULATED = os.path.join(ROOT, "tests", "python", "_cuda_emulated.py")


def test_stream_ordered_training_on_emulated_cuda():
    """The whole CUDA path below PyTorch, on the fake CUDA runtime taking the CPU tensors for
    device memory (tests/python/_cuda_emulated.py, in a child process: the engine loads cudart
    once per process): the engine's cuda backend, the stream-ordered executor on a compute
    stream made through the fake, the Offloader told it runs on CUDA. Four steps (warm-up,
    profiled, two executed), every parameter changed in place between steps 2 and 3 (user code
    outside off.step(), while writes of the step may still be in flight: restore() runs first),
    restore() at the end; bitwise identical to plain PyTorch with the same change, writes carried
    across the end of a step, and no engine copy unordered with an operator or another copy."""
    lib = os.environ.get("TIO_FAKE_CUDART_LIB") or os.path.join(ROOT, "build",
                                                                "libtio_fake_cudart.so")
    assert os.path.exists(lib), f"the fake CUDA runtime is not built ({lib}): build/ (cmake)"
    argv = ["4", "m2"]
    env = dict(os.environ, TIO_CUDART_LIB=lib, FAKE_CUDA_HOST_DEVICE="1", FAKE_CUDA_LAG_US="20",
               FAKE_CUDA_SEED="7")
    env.pop("TIO_EMU_PLAIN", None)
    r = subprocess.run([sys.executable, EMULATED, *argv], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    ref = _cuda_emulated.reference(argv)
    assert got["losses"] == ref["losses"]
    assert got["digest"] == ref["digest"]
    # every executor was stream-ordered on the fake's stream, over device memory
    assert got["runtimes"] and all(rt == {"device": True, "stream": got["stream"],
                                          "stream_ordered": True} for rt in got["runtimes"])
    rep = got["report"]
    assert rep["steps_offloaded"] == 2
    assert rep["bytes_offloaded"] > 0 and rep["bytes_prefetched"] > 0
    assert rep["carried_offloads"] > 0, "no write went on past the end of a step"
    fake = got["fake"]
    assert fake["memcpy_calls"] > 0  # the engine's copies went through the fake
    assert got["kernels"] > 1000
    assert got["races"] == 0, "an engine copy was unordered with an operator using its bytes"
    assert fake["copy_races"] == 0 and fake["bad_accesses"] == 0
    assert fake["blocking_copies"] == 0 and fake["pageable_copies"] == 0
