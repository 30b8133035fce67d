"""The Offloader's CUDA path on a machine without a GPU: the stream-ordered executor under the
PyTorch layer, on the fake CUDA runtime (tests/io/fakes/fake_cudart.c).

tests/python/_cuda_emulated.py runs in a child process (the engine loads cudart once per
process) with the fake taking the CPU tensors for device memory: the engine's `cuda` backend,
the stream-ordered executor on a compute stream made through the fake, the Offloader told it
runs on CUDA, torch.cuda's events, streams and synchronize replaced by fakes that log their
calls. Every operator runs where a kernel queued on the compute stream would, and the fake
checks that no engine copy touches its bytes unordered with it (tests/io/test_runtime_stream.c
checks the executor in C against the same emulated GPU). It does not validate anything on a
GPU (see docs/runtime.md, CUDA path).
"""
import json
import os
import subprocess
import sys

import _cuda_emulated  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_stream_ordered_training_on_emulated_cuda():
    """Four steps (warm-up, profiled, two executed); between steps 2 and 3 two checkpoints
    (Offloader.save() of the model's and optimizer's state_dict(), and torch.save of them in
    Offloader.streamed_saves(): the same bytes as torch.save in the plain run, the offloaded
    tensors read from their tier, none brought back), then every
    parameter changed in place (user code outside off.step(), while writes of the step may still
    be in flight: restore() runs first); restore() at the end; bitwise
    identical to plain PyTorch with the same change, writes carried across the end of a step, no
    engine copy unordered with an operator or another copy; profiling timed with events after a
    device synchronize, executed steps on the C path without a synchronize, unplanned moves of
    device memory each after a stream synchronize."""
    lib = os.environ.get("TIO_FAKE_CUDART_LIB") or os.path.join(ROOT, "build",
                                                                "libtio_fake_cudart.so")
    assert os.path.exists(lib), f"the fake CUDA runtime is not built ({lib}): build/ (cmake)"
    argv = ["4", "s2", "w2", "m2"]
    env = dict(os.environ, TIO_CUDART_LIB=lib, FAKE_CUDA_HOST_DEVICE="1", FAKE_CUDA_LAG_US="20",
               FAKE_CUDA_SEED="7")
    env.pop("TIO_EMU_PLAIN", None)
    r = subprocess.run([sys.executable, _cuda_emulated.__file__, *argv], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    ref = _cuda_emulated.reference(argv)
    assert got["losses"] == ref["losses"]
    assert got["digest"] == ref["digest"]
    # the checkpoints (Offloader.save(), then torch.save in a streamed_saves() window):
    # torch.save's bytes, streamed from the tiers within the budget
    for k in ("2s", "2w"):
        save = got["saves"][k]
        assert save["sha256"] == ref["saves"][k]["sha256"], f"{k}: other bytes than torch.save"
        assert save["offloaded_before"] > 0
        assert save["offloaded_after"] == save["offloaded_before"], f"{k}: brought tensors back"
        # what stays in memory between steps, and one offloaded tensor at a time
        assert save["save_peak_bytes"] == save["resident_before"] + save["largest_offloaded"]
    # every executor was stream-ordered on the fake's stream, over device memory (two: the
    # update between steps dropped the first)
    assert got["runtimes"] == 2 * [{"device": True, "stream": got["stream"],
                                    "stream_ordered": True}]
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
    calls = got["calls"]
    first = calls.index("fast_driver")
    unplanned, executed = calls[:first], calls[first:]
    # profiling: per-operator events, read after one device synchronize; the profiled kernels
    # got the fake event time (0.05 ms = 50000 ns)
    assert "device_sync" in unplanned and unplanned.count("record") > 100
    assert 50000 in got["kernel_ns"] and set(got["kernel_ns"]) <= {1, 50000}
    # the warm-up and profiled steps were kept within the budget too, with synchronous moves of
    # device memory, each after the compute stream was synchronized
    moves = [i for i, c in enumerate(unplanned) if c in ("engine_write_device",
                                                          "engine_read_device")]
    assert moves, "nothing was offloaded before the plan"
    assert rep["unplanned_bytes_offloaded"] > 0
    for i in moves:
        assert unplanned[i - 1] == "stream_sync", unplanned[max(0, i - 3):i + 1]
    # execution: driven through the C path (OpFast), nothing synchronizes the device or a stream
    assert "fast_recorder" not in executed and executed.count("fast_driver") == 2
    # the checkpoint read the offloaded tensors from their tiers into host memory
    assert "engine_read" in executed
    for c in ("event_sync", "device_sync", "stream_sync", "engine_write_device",
              "engine_read_device"):
        assert c not in executed, c
