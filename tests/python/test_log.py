"""The C library's log messages reach Python's logging (logger "teraio", teraio/_log.py): with
their levels, from the engine's own threads, and never lost silently when too many queue up."""
import logging

import numpy as np
import pytest

import teraio  # noqa: F401  (installs the bridge)
from teraio import _core


@pytest.fixture
def c_level():
    old = _core.log_level(4)  # format every level in C for these tests
    yield
    _core.log_level(old)


def _records(caplog):
    _core.log_flush()
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "teraio"]


def test_levels_map_onto_logging(caplog, c_level):
    caplog.set_level(1, logger="teraio")
    for level in range(5):
        _core.log_write(level, f"message at C level {level}:")
    got = _records(caplog)
    assert got == [(logging.ERROR, "teraio: message at C level 0: 0"),
                   (logging.WARNING, "teraio: message at C level 1: 0"),
                   (logging.INFO, "teraio: message at C level 2: 0"),
                   (logging.DEBUG, "teraio: message at C level 3: 0"),
                   (5, "teraio: message at C level 4: 0")]


def test_engine_thread_warning_and_error(tmp_path, caplog):
    """A corrupted read, retried (a warning from the engine's thread), then one that stays
    corrupt (an error): both on the logger, and the read's result says so too."""
    caplog.set_level(logging.WARNING, logger="teraio")
    data = np.arange(1 << 16, dtype=np.uint8)
    with _core.Engine([str(tmp_path)], chunk_bytes=65536, verify=True, backend="fault",
                      backend_options="corrupt=1,corrupt_count=1") as e:
        e.write(1, data, tag=1)
        assert e.wait(min=1, timeout=30) == [(1, data.nbytes)]
        out = np.zeros_like(data)
        e.read(1, out, tag=2)
        assert e.wait(min=1, timeout=30) == [(2, data.nbytes)]
        assert np.array_equal(out, data)
    got = _records(caplog)
    assert any(lv == logging.WARNING and "CRC32C mismatch" in m and "retry 1 of 2" in m
               for lv, m in got), got
    caplog.clear()
    with _core.Engine([str(tmp_path)], chunk_bytes=65536, verify=True, backend="fault",
                      backend_options="corrupt=1,corrupt_count=100") as e:
        e.write(1, data, tag=1)
        assert e.wait(min=1, timeout=30) == [(1, data.nbytes)]
        e.read(1, np.zeros_like(data), tag=2)
        res = e.wait(min=1, timeout=30)
        assert res[0][0] == 2 and res[0][1] < 0, res
    got = _records(caplog)
    assert any(lv == logging.ERROR and "CRC32C mismatch" in m and "after 3 attempt" in m
               for lv, m in got), got


def test_full_queue_says_how_many_were_dropped(caplog):
    caplog.set_level(logging.WARNING, logger="teraio")
    _core.log_flush()
    caplog.clear()
    _core.log_write(1, "flood", 300)  # one C call: the queue (256) fills before any drain
    got = _records(caplog)
    floods = [m for _, m in got if "flood" in m]
    assert floods == [f"teraio: flood {i}" for i in range(256)], floods[-3:]
    assert any("44 message(s) of the C library were dropped" in m for _, m in got), got
