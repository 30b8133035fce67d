"""teraio._core.Engine: the migration engine through Python (buffers, raw pointers, errors)."""
import ctypes
import os
import threading

import numpy as np
import pytest

import teraio
from teraio import _core


@pytest.fixture
def dirs(tmp_path):
    ds = [tmp_path / "ssd0", tmp_path / "ssd1"]
    for d in ds:
        d.mkdir()
    yield [str(d) for d in ds]
    for d in ds:  # the swap files never have names: nothing may be left behind
        assert os.listdir(d) == []


def test_probe_lists_backends():
    names = {b["name"]: b for b in _core.probe()}
    assert names["posix"]["available"]
    assert {"uring", "posix", "cufile", "cuda", "null", "fault"} <= set(names)
    assert all(b["reason"] for b in names.values())


def test_roundtrip_numpy_unaligned(dirs):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, size=3 * 65536 + 7, dtype=np.uint8)
    view = src[3:]  # not 4 KiB aligned
    with _core.Engine(dirs, chunk_bytes=65536, verify=True) as e:
        assert e.write(1, view, tag=10) == view.nbytes
        assert e.wait(min=1) == [(10, view.nbytes)]
        out = np.zeros_like(view)
        e.read(1, out, priority="urgent", tag=11)
        assert e.wait(min=1, timeout=30) == [(11, view.nbytes)]
        assert np.array_equal(out, view)
        st = e.stats()
        assert st["tensors"] == 1 and st["bytes_written"] == view.nbytes
        assert e.info(1) == (view.nbytes, "ssd")
        e.drop(1)
        assert e.stats()["ssd_used_bytes"] == 0


def test_raw_pointer_and_host_tier(dirs):
    buf = (ctypes.c_ubyte * 10000)()
    for i in range(10000):
        buf[i] = (i * 7) & 0xFF
    out = (ctypes.c_ubyte * 10000)()
    with _core.Engine(dirs, host_tier_bytes=1 << 20) as e:
        e.write(5, (ctypes.addressof(buf), 10000), tier="host", tag=1)
        assert e.wait() == [(1, 10000)]
        e.read(5, (ctypes.addressof(out), 10000), tag=2)
        assert e.wait() == [(2, 10000)]
        assert bytes(out) == bytes(buf)
        assert e.info(5)[1] == "host"


def test_errors_are_clear(dirs):
    with _core.Engine(dirs) as e:
        with pytest.raises(teraio.Error) as ei:
            e.read(99, bytearray(10))
        assert "tensor 99" in ei.value.args[1]
        with pytest.raises(ValueError):
            e.read(1, b"read-only bytes")
        with pytest.raises(teraio.Error) as ei:
            e.write(1, b"")
        assert "zero-byte" in ei.value.args[1]
        with pytest.raises(ValueError):
            e.write(1, b"x", tier="gpu")
        with pytest.raises(teraio.Error) as ei:
            e.reserve(1 << 60)
        assert "needed" in ei.value.args[1] and "available" in ei.value.args[1]
    with pytest.raises(teraio.Error) as ei:
        _core.Engine(dirs, backend="nosuch")
    assert "nosuch" in ei.value.args[1]
    with pytest.raises(ValueError):
        e.stats()  # closed


def test_failed_write_reports_tensor(dirs):
    data = np.arange(4096, dtype=np.uint8)
    with _core.Engine(dirs[:1], backend="fault",
                      backend_options="write_fail=1,write_fail_count=100") as e:
        e.write(7, data, tag=3)
        [(tag, res)] = e.wait()
        assert tag == 3 and res < 0
        assert "tensor 7" in e.last_error
        with pytest.raises(teraio.Error):
            e.read(7, np.zeros_like(data))


def test_queue_full_and_cancel(dirs):
    data = np.ones(1 << 16, dtype=np.uint8)
    with _core.Engine(dirs[:1], backend="fault", backend_options="delay_us=20000",
                      max_requests=2, queue_depth=1) as e:
        e.write(1, data, tag=1)
        e.write(2, data, tag=2)
        with pytest.raises(BlockingIOError):
            e.write(3, data, tag=3)
        assert e.cancel(2) == 1
        got = dict(e.wait(min=2, timeout=30))
        assert got[1] == data.nbytes and got[2] == _core.ECANCELED


def test_threads_share_an_engine(dirs):
    arrays = [np.full(50000 + i, i, dtype=np.uint8) for i in range(16)]
    with _core.Engine(dirs) as e:
        def writer(k):
            for i in range(k, 16, 4):
                e.write(i, arrays[i], tag=i)
        ts = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        done = []
        while len(done) < 16:
            done += e.wait(min=1, timeout=30)
        assert sorted(done) == [(i, 50000 + i) for i in range(16)]
        for i in range(16):
            out = np.empty_like(arrays[i])
            e.read(i, out, tag=100 + i)
            assert e.wait() == [(100 + i, out.nbytes)]
            assert np.array_equal(out, arrays[i])


def test_one_binding_per_object():
    # the trace, plan and engine have one type each, used by the PyTorch layer and by users
    assert not [n for n in dir(_core) if n.startswith("Rt")]
    assert {"Trace", "Plan", "Engine", "Runtime"} <= set(dir(_core))


def test_waited_for_raw_form(dirs):
    # write(id, ptr, nbytes, tier) / read(id, ptr, nbytes): urgent, returned once done
    src = (ctypes.c_ubyte * 8192)(*[(7 * i) % 251 for i in range(8192)])
    out = (ctypes.c_ubyte * 8192)()
    with _core.Engine(dirs, preallocate=False) as e:
        assert e.write(5, ctypes.addressof(src), 8192, _core.TIER_SSD) == 8192
        assert e.info(5) == (8192, "ssd")
        assert e.read(5, ctypes.addressof(out), 8192) == 8192
        assert bytes(out) == bytes(src)
        assert e.poll() == []  # nothing left to collect: the call waited for its completion
        e.drop(5)
        e.drop(5)  # a tensor that holds no space: nothing to do
        with pytest.raises(teraio.Error, match="Engine.read"):
            e.read(5, ctypes.addressof(out), 8192)


def test_close_refused_while_a_runtime_drives_the_engine(dirs):
    trace = _core.Trace.build([(4096, _core.TENSOR_ACTIVATION, 0, "a")],
                              [("k", 1000, 0, (0, _core.USE_WRITE))], {"source": "test"})
    plan = _core.Plan.build(trace, "none", [])
    e = _core.Engine(dirs)
    rt = _core.Runtime(trace, plan, e)
    with pytest.raises(RuntimeError, match="Runtime still drives"):
        e.close()
    assert e.stats()["backend"]  # still open
    del rt
    e.close()
    with pytest.raises(ValueError, match="closed"):
        _core.Runtime(trace, plan, e)
