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
