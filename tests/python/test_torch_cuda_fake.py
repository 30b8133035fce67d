"""The CUDA path's ordering logic, exercised on CPU with fake CUDA events.

On CUDA the Offloader times operators with CUDA events while profiling and, while executing,
makes the engine wait for the compute stream (record an event, synchronize it) before every
executor call that can start I/O on device memory. This test swaps torch.cuda.Event and
torch.cuda.synchronize for fakes that log calls, forces the device path on CPU tensors (the
engine still gets host memory), and checks the call order and that training stays bitwise
identical. It does not validate anything on a GPU (see docs/runtime.md).
"""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

import teraio  # noqa: E402
import teraio.offload as offload_mod  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from train_llama_tiny import param_digest, train  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(teraio._core, "Runtime"),
                                reason="teraio built without the runtime")


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


class HostRuntimeCore:
    """teraio._core with Runtime forced to host memory (there is no GPU behind the fakes)."""

    def __getattr__(self, name):
        return getattr(teraio._core, name)

    @staticmethod
    def Runtime(*a, **kw):
        kw["device"] = False
        rt = teraio._core.Runtime(*a, **kw)
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


def test_cuda_path_orders_io_after_compute(monkeypatch, tmp_path):
    ref, model_ref, _ = train("tiny", 4)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: Log.calls.append("device_sync"))
    monkeypatch.setattr(offload_mod, "_core", HostRuntimeCore())

    def detect(self, globals_):
        self._cuda = True

    monkeypatch.setattr(offload_mod.Offloader, "_detect_device", detect)
    Log.calls = []
    got, model, off = train("tiny", 4, offload=dict(memory_budget=0.5, ssd_dirs=[str(tmp_path)],
                                                    min_tensor_bytes="16KiB"))
    assert got == ref
    assert param_digest(model) == param_digest(model_ref)
    calls = Log.calls
    # profiling: per-operator events were recorded and read after a device synchronize
    assert "device_sync" in calls
    assert calls.count("record") > 100
    # execution: every begin()/before()/end() (the calls that start I/O) follows an event
    # synchronize on the compute stream
    idx = [i for i, c in enumerate(calls) if c in ("begin", "before", "end")]
    assert idx, "the executor was never driven"
    for i in idx:
        assert calls[i - 1] == "event_sync", calls[max(0, i - 3):i + 1]
    # the profiled kernels got the fake event time (0.05 ms = 50000 ns)
    assert all(k[1] in (1, 50000) for k in off._prog.kernels)
    assert off.report()["bytes_offloaded"] > 0
