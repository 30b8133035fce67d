"""teraio.Trace: builder, formats, zero-copy numpy column views, errors."""
import ctypes
import gc
import os
import pathlib
import struct

import numpy as np
import pytest

import teraio
from teraio import _core

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


def build_small():
    t = teraio.Trace()
    w = t.add_tensor(4096, "weight", global_=True, name="w")
    x = t.add_tensor(256, _core.TENSOR_INPUT, name="x")
    y = t.add_tensor(512, "activation")
    g = t.add_tensor(4096, "grad", global_=True, name="w.grad", pinned=True)
    assert (w, x, y, g) == (0, 1, 2, 3)
    assert t.add_kernel("aten::mm", 120_000) == 0
    t.add_use(w, "r")
    t.add_use(x, _core.USE_READ)
    t.add_use(y, "w")
    assert t.add_kernel("aten::mm_backward", 250_000, _core.KERNEL_BACKWARD) == 1
    t.add_use(y, "r")
    t.add_use(g, "rw")
    t.add_use(y, "w")  # merges into rw
    assert t.add_kernel(None, 7, _core.KERNEL_OPTIM | _core.KERNEL_COMM) == 2
    t.add_use(w, "rw")
    t.add_use(g, "r")
    t.set_meta("model", "tiny")
    t.finish()
    return t


def test_constants_match_the_c_header():
    assert (_core.TENSOR_WEIGHT, _core.TENSOR_GRAD, _core.TENSOR_OPTIM_STATE) == (0, 1, 2)
    assert (_core.TENSOR_ACTIVATION, _core.TENSOR_TEMP, _core.TENSOR_INPUT) == (3, 4, 5)
    assert _core.TENSOR_OTHER == 6
    assert (_core.TENSOR_GLOBAL, _core.TENSOR_PINNED) == (1, 2)
    assert (_core.KERNEL_COMM, _core.KERNEL_OPTIM, _core.KERNEL_BACKWARD) == (1, 2, 4)
    assert (_core.USE_READ, _core.USE_WRITE, _core.USE_READ_WRITE) == (1, 2, 3)
    assert teraio.Trace is _core.Trace


def test_builder_and_columns():
    t = build_small()
    assert (t.n_kernels, t.n_tensors, t.n_uses) == (3, 4, 7)
    assert t.finished
    assert t.total_duration_ns == 370_007
    np.testing.assert_array_equal(t.kernel_duration_ns, [120_000, 250_000, 7])
    assert t.kernel_duration_ns.dtype == np.uint64
    np.testing.assert_array_equal(t.kernel_flags, [0, 4, 3])
    np.testing.assert_array_equal(t.kernel_use_offset, [0, 3, 5, 7])
    np.testing.assert_array_equal(t.tensor_bytes, [4096, 256, 512, 4096])
    np.testing.assert_array_equal(t.tensor_kind, [0, 5, 3, 1])
    assert t.tensor_kind.dtype == np.int32
    np.testing.assert_array_equal(t.tensor_flags, [1, 0, 0, 3])
    np.testing.assert_array_equal(t.use_tensor, [0, 1, 2, 2, 3, 0, 3])
    np.testing.assert_array_equal(t.use_mode, [1, 1, 2, 3, 3, 3, 1])
    assert t.use_mode.dtype == np.uint8
    assert t.kernel_name(0) == "aten::mm"
    assert t.kernel_name(2) is None
    assert t.tensor_name(3) == "w.grad"
    assert t.tensor_name(2) is None
    assert t.meta == {"model": "tiny"}
    with pytest.raises(IndexError):
        t.kernel_name(3)
    with pytest.raises(IndexError):
        t.tensor_name(-1)
    assert "3 kernels" in repr(t)


def test_views_are_read_only_and_share_memory():
    t = build_small()
    a = t.kernel_duration_ns
    b = t.kernel_duration_ns
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1
    # Two views of the same column share the trace's memory: same data pointer, no copy.
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    assert np.shares_memory(a, b)
    # Different columns do not overlap.
    assert not np.shares_memory(t.use_tensor, t.use_mode)
    # The buffer exporter is visible as the array's base.
    assert isinstance(a.base, (_core.TraceColumn, memoryview))


def test_views_keep_the_trace_alive():
    t = build_small()
    tb = t.tensor_bytes
    uses = t.use_tensor
    ptr = tb.__array_interface__["data"][0]
    del t
    gc.collect()
    # Allocate a little to make reuse of freed memory likely if the trace had been freed.
    junk = [teraio.Trace() for _ in range(50)]
    np.testing.assert_array_equal(tb, [4096, 256, 512, 4096])
    np.testing.assert_array_equal(uses, [0, 1, 2, 2, 3, 0, 3])
    assert tb.__array_interface__["data"][0] == ptr
    del junk


def test_round_trip_through_bytes_both_formats():
    t = build_small()
    for fmt in ("binary", "json", None):
        data = t.to_bytes(fmt)
        u = teraio.Trace.from_bytes(data)
        assert u.hash() == t.hash()
        for col in ("kernel_duration_ns", "kernel_flags", "kernel_use_offset", "tensor_bytes",
                    "tensor_kind", "tensor_flags", "use_tensor", "use_mode"):
            np.testing.assert_array_equal(getattr(u, col), getattr(t, col), err_msg=col)
        assert [u.kernel_name(i) for i in range(3)] == [t.kernel_name(i) for i in range(3)]
        assert [u.tensor_name(i) for i in range(4)] == [t.tensor_name(i) for i in range(4)]
        assert u.meta == t.meta
    assert t.to_bytes("binary")[:8] == b"TIOTRACE"
    assert t.to_bytes("json").startswith(b"{")
    # from_bytes accepts any buffer.
    assert teraio.Trace.from_bytes(memoryview(t.to_bytes())).hash() == t.hash()


def test_save_load_files(tmp_path):
    t = build_small()
    t.save(tmp_path / "a.tio")
    t.save(str(tmp_path / "a.json"))
    t.save(tmp_path / "b.out", format="json")
    assert (tmp_path / "a.json").read_bytes().startswith(b"{")
    assert (tmp_path / "b.out").read_bytes().startswith(b"{")
    assert (tmp_path / "a.tio").read_bytes()[:8] == b"TIOTRACE"
    for name in ("a.tio", "a.json", "b.out"):
        assert teraio.Trace.load(tmp_path / name).hash() == t.hash()
    assert sorted(os.listdir(tmp_path)) == ["a.json", "a.tio", "b.out"]


def test_fixture_matches_its_binary_twin():
    a = teraio.Trace.load(DATA / "example.json")
    b = teraio.Trace.load(str(DATA / "example.tio"))
    assert a.hash() == b.hash()
    assert a.n_kernels == 12 and a.n_tensors == 17 and a.n_uses == 37
    assert int(a.kernel_duration_ns.sum()) == 239_700
    glob = (a.tensor_flags & _core.TENSOR_GLOBAL) != 0
    assert int(a.tensor_bytes[glob].sum()) == 3_252_224
    assert a.meta["model"] == "mlp-2layer"


def test_errors_raise_teraio_error():
    with pytest.raises(teraio.Error) as ei:
        teraio.Trace.from_bytes(struct.pack("<8sII9Q", b"TIOTRACE", 1, 80, *[0] * 9))
    status, message = ei.value.args
    assert status == -1001  # TIO_EFORMAT
    assert "file_bytes" in message
    with pytest.raises(teraio.Error) as ei:
        teraio.Trace.from_bytes(b'{"format":"teraio-trace","version":1,"tensors":[],'
                                b'"kernels":[{"duration_ns":1,"uses":[[3,"r"]]}]}')
    assert "kernels[0].uses[0]: tensor 3 out of range" in ei.value.args[1]
    with pytest.raises(teraio.Error) as ei:
        teraio.Trace.load("/nonexistent/trace.tio")
    assert ei.value.args[0] < 0 and "nonexistent" in ei.value.args[1]
    t = teraio.Trace()
    with pytest.raises(teraio.Error):
        t.add_tensor(0, "weight")  # zero bytes
    with pytest.raises(teraio.Error):
        t.add_tensor(8, "weights")  # unknown kind
    with pytest.raises(teraio.Error):
        t.add_tensor(8, 99)
    with pytest.raises(teraio.Error):
        t.add_use(0, "r")  # no kernel yet
    t.add_tensor(8, "temp")
    t.add_kernel("k", 1)
    with pytest.raises(ValueError):
        t.add_use(0, "x")
    with pytest.raises(teraio.Error):
        t.add_use(5, "r")  # out of range
    with pytest.raises(teraio.Error):
        t.add_use(0, 4)
    with pytest.raises(teraio.Error) as ei:
        t.kernel_duration_ns  # views need a finished trace
    assert ei.value.args[0] == -1011  # TIO_ESTATE
    with pytest.raises(teraio.Error):
        t.to_bytes()
    with pytest.raises(teraio.Error):
        t.hash()
    with pytest.raises(teraio.Error):
        t.set_meta("Bad Key", "v")
    t.meta = {"source": "test"}
    t.finish()
    assert t.meta == {"source": "test"}
    with pytest.raises(teraio.Error):
        t.add_kernel("late", 1)  # finished
    with pytest.raises(ValueError):
        t.to_bytes("xml")
    # Asking the exporter for a writable buffer fails.
    col = _exporter(t.use_mode)
    assert isinstance(col, _core.TraceColumn) and len(col) == 0
    col = _exporter(t.kernel_duration_ns)
    with pytest.raises((BufferError, TypeError)):
        ctypes.c_char.from_buffer(col)
    assert memoryview(col).readonly and memoryview(col).format == "Q"


def _exporter(arr):
    base = arr.base
    return base.obj if isinstance(base, memoryview) else base


def test_build_from_lists_and_back():
    tensors = [(4096, _core.TENSOR_WEIGHT, _core.TENSOR_GLOBAL, "w"),
               (512, _core.TENSOR_ACTIVATION, 0, None)]
    kernels = [("mm", 1500, 0, (0, _core.USE_READ, 1, _core.USE_WRITE)),
               (None, 700, _core.KERNEL_BACKWARD, (1, _core.USE_READ))]
    t = _core.Trace.build(tensors, kernels, {"n_globals": "1"})
    assert t.finished and t.n_kernels == 2 and t.n_uses == 3
    assert t.tensors() == tensors
    assert t.kernels() == kernels
    assert t.meta == {"n_globals": "1"}
    assert list(t.kernel_duration_ns) == [1500, 700]


def test_lists_need_a_finished_trace():
    t = teraio.Trace()
    t.add_tensor(64, "temp")
    with pytest.raises(teraio.Error, match="finished trace"):
        t.tensors()
    with pytest.raises(teraio.Error, match="finished trace"):
        t.kernels()
    with pytest.raises(TypeError, match="kernel uses must be a sequence"):
        _core.Trace.build([(64, 0, 0, None)], [("k", 1, 0, 5)], {})
