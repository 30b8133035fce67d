"""teraio._core.simulate: the simulator from Python (keys of `teraio simulate --json`)."""
import os
import shutil
import subprocess

import pytest

import teraio

sim = getattr(teraio._core, "simulate", None)
pytestmark = pytest.mark.skipif(sim is None, reason="simulator binding not built")

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "example.json")


def test_ideal_is_sum_of_durations():
    r = sim(DATA, hw="cpu-ci", policy="ideal")
    assert r["fraction_of_ideal"] == pytest.approx(1.0)
    assert r["iteration_s"] == pytest.approx(r["ideal_s"])
    assert r["oom"] is False and r["oom_kernel"] is None
    for key in ("stall_s", "tokens_per_s", "gpu_peak_bytes", "host_peak_bytes",
                "ssd_bytes_written", "bytes", "drive_life_years"):
        assert key in r


def test_oom_is_a_result():
    r = sim(DATA, hw="cpu-ci", policy="none", capacity="1MB")
    assert r["oom"] is True and r["oom_kind"] == "gpu"
    assert isinstance(r["oom_kernel"], int)


def test_bad_arguments():
    with pytest.raises(ValueError):
        sim(DATA, hw="cpu-ci")
    with pytest.raises(teraio.Error):
        sim(DATA, hw="cpu-ci", policy="no-such-policy")
    with pytest.raises(teraio.Error):
        sim(DATA, hw="no-such-hw", policy="ideal")
