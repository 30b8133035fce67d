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
