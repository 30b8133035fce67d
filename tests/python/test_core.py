"""The extension module loads and the shared infrastructure works through it."""
import pytest

import teraio


def test_version_matches_package():
    assert teraio.__version__ == teraio._core.version()
    assert teraio.__version__.count(".") == 2


def test_units_round_trip():
    assert teraio.parse_bytes("94GiB") == 94 * 1024**3
    assert teraio.parse_rate("6.5GB/s") == pytest.approx(6.5e9)
    assert teraio.format_bytes(1536) == "1.50 KiB"


def test_errors_carry_status_and_detail():
    with pytest.raises(teraio.Error) as ei:
        teraio.parse_bytes("12 parsecs")
    status, message = ei.value.args
    assert status == -1000
    assert "parsecs" in message


def test_discard_pages_zeroes_whole_pages_only():
    """discard_pages hands back the whole pages inside the range (MADV_DONTNEED): on private
    anonymous memory they read as zeros afterwards; the partial pages at both ends are kept."""
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    n = 16 * page
    buf = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf[:] = b"x" * n
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    got = teraio._core.discard_pages(addr + 100, n - 200)
    assert got == (n - 2 * page)  # pages 1..14: the first and the last are partial
    assert buf[:page] == b"x" * page
    assert buf[page:n - page] == bytes(n - 2 * page)
    assert buf[n - page:] == b"x" * page
    assert teraio._core.discard_pages(addr + 1, page) == 0  # no whole page inside
    with pytest.raises(ValueError, match="bad range"):
        teraio._core.discard_pages(0, page)
    del addr
    buf.close()


def test_bounded_table_through_the_binding():
    """_core.Bounded, the table _bounded.py drives: a victim list in the policy's order (least
    recently used first outside the optimizer), the transitions' accounting, and clear errors
    for bad calls (key 0, an unknown key, a wrong state, a wrong argument count)."""
    c = teraio._core
    b = c.Bounded(10, 32)
    b.begin_op()  # operator 1 uses 1 and 2 (100 bytes each)
    assert b.use(1, 100, 0) == 1 | c.BOUNDED_CREATED
    assert b.use(2, 100, c.BOUNDED_USE_WRITE) == 1 | c.BOUNDED_CREATED
    assert b.use(3, 5, 0) == 0  # below min_bytes: not tracked
    b.begin_op()  # operator 2 uses 3 (made resident: 300 bytes in all)
    assert b.track(3, 100) == 1 | c.BOUNDED_CREATED
    assert b.use(3, 100, 0) == 1
    assert (b.resident, b.live, b.peak_live, b.clock, b.count) == (300, 300, 300, 2, 3)
    assert b.pick(50, False, False) == [1, 2]  # 3 is in use; 1 and 2 by tracking order
    assert b.pick(300, False, False) == []
    b.offloaded(1, 77)
    assert b.get(1) == (100, 77, c.BOUNDED_CLEAN | 2)  # STORED is 2
    assert b.get(99) is None
    assert b.resident == 200
    with pytest.raises(teraio.Error) as ei:
        b.offloaded(1, 78)  # not resident any more
    assert ei.value.args[0] == -1011 and "flags" in ei.value.args[1]
    with pytest.raises(teraio.Error) as ei:
        b.use(0, 100, 0)
    assert ei.value.args[0] == -1000 and "key 0" in ei.value.args[1]
    with pytest.raises(teraio.Error) as ei:
        b.loaded(99)
    assert ei.value.args[0] == -1012
    with pytest.raises(TypeError, match="takes 3 arguments"):
        b.use(1, 100)
    assert b.remove(1) == 77 and b.remove(2) is None
    assert b.keys() == [3]
    b.mark_peak()
    b.clear()
    assert (b.resident, b.live, b.count, b.peak_resident) == (0, 0, 0, 100)
