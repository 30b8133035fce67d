"""teraio.Analysis: the Python binding of the lifetime analysis, checked against values computed by
hand (the same trace as tests/unit/test_analysis_cli.c) and against `teraio analyze --json`."""
import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import teraio

ROOT = Path(__file__).resolve().parents[2]

# 4 kernels of 1, 2, 3, 4 ms (iteration 10 ms).
#   t0 "w" weight 50 MB global, used by k0 and k2: gap [1,2) = 2 ms, wrap [3,4) = 4 ms
#   t1 "m" optim_state 200 MB global, used by k3:  wrap [4,7) = k0 k1 k2 = 6 ms
#   t2 "a" activation 20 MB, used by k0 and k3:    gap [1,3) = 2 + 3 = 5 ms
#   t3 "x" input 500 B, used by k1:                no period
TRACE = {
    "format": "teraio-trace", "version": 1,
    "tensors": [
        {"id": 0, "bytes": 50_000_000, "kind": "weight", "global": True, "name": "w"},
        {"id": 1, "bytes": 200_000_000, "kind": "optim_state", "global": True, "name": "m"},
        {"id": 2, "bytes": 20_000_000, "kind": "activation", "name": "a"},
        {"id": 3, "bytes": 500, "kind": "input", "name": "x"},
    ],
    "kernels": [
        {"name": "fwd", "duration_ns": 1_000_000, "uses": [[0, "r"], [2, "w"]]},
        {"name": "load", "duration_ns": 2_000_000, "uses": [[3, "r"]]},
        {"name": "fwd2", "duration_ns": 3_000_000, "uses": [[0, "r"]]},
        {"name": "adam", "duration_ns": 4_000_000, "flags": ["optim"],
         "uses": [[1, "rw"], [2, "r"]]},
    ],
}
RESIDENT = [270_000_000, 270_000_500, 270_000_000, 270_000_000]  # globals 250 MB + a (+ x at k1)
ACTIVE = [70_000_000, 500, 50_000_000, 220_000_000]
# (tensor, flags, start, end, bytes, duration_ns) sorted by (start, tensor)
PERIODS = [(0, 0, 1, 2, 50_000_000, 2_000_000), (2, 0, 1, 3, 20_000_000, 5_000_000),
           (0, 1, 3, 4, 50_000_000, 4_000_000), (1, 1, 4, 7, 200_000_000, 6_000_000)]


@pytest.fixture
def trace_path(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(TRACE))
    return p


def test_arrays_and_periods(trace_path):
    a = teraio.Analysis(trace_path)
    assert a.resident_bytes.tolist() == RESIDENT
    assert a.active_bytes.tolist() == ACTIVE
    assert a.kernel_start_ns.tolist() == [0, 1_000_000, 3_000_000, 6_000_000, 10_000_000]
    assert a.resident_bytes.dtype == np.uint64
    p = a.periods()
    assert p.dtype.names == ("tensor", "flags", "start", "end", "bytes", "duration_ns")
    assert [tuple(int(x) for x in r) for r in p] == PERIODS
    assert a.tensor_periods(0).tolist() == [0, 2]
    assert a.tensor_periods(1).tolist() == [3]
    assert a.tensor_periods(3).tolist() == []
    assert (a.first_use(0), a.last_use(0)) == (0, 2)
    assert (a.first_use(1), a.last_use(1)) == (3, 3)
    assert a.bucket_durations("10-100MB").tolist() == [2_000_000, 4_000_000, 5_000_000]
    assert a.bucket_durations(3).tolist() == [6_000_000]
    assert a.bucket_durations("<1MB").tolist() == []


def test_arrays_are_read_only_views_that_keep_the_analysis_alive(trace_path):
    a = teraio.Analysis(trace_path)
    r1, r2 = a.resident_bytes, a.resident_bytes
    assert np.shares_memory(r1, r2)  # both view the analysis' own array: no copy
    assert np.shares_memory(a.periods(), a.periods())
    with pytest.raises(ValueError):
        r1[0] = 1
    p = a.periods()
    del a
    gc.collect()
    _ = [np.ones(1000) for _ in range(100)]  # churn the allocator
    assert r1.tolist() == RESIDENT
    assert int(p["duration_ns"].sum()) == 17_000_000


def test_summary_by_hand(trace_path):
    s = teraio.Analysis(trace_path, capacity="1GB", long_idle_ns=4_000_000).summary(top=2)
    assert s["trace"] == str(trace_path)
    assert s["capacity_bytes"] == 10**9 and s["long_idle_ns"] == 4_000_000
    assert (s["n_kernels"], s["n_tensors"], s["n_uses"]) == (4, 4, 6)
    assert s["n_periods"] == s["inactive_periods"] == 4
    assert s["iteration_ns"] == 10_000_000
    assert s["global_bytes"] == 250_000_000
    assert (s["peak_resident_bytes"], s["peak_kernel"]) == (270_000_500, 1)
    assert s["peak_kernel_name"] == "load"
    assert s["peak_active_bytes"] == 220_000_000
    fr = [a / r for a, r in zip(ACTIVE, RESIDENT)]
    assert s["active_fraction_mean"] == pytest.approx(sum(fr) / 4, rel=1e-14)
    assert s["active_fraction_max"] == pytest.approx(220 / 270, rel=1e-14)
    assert s["active_capacity_fraction_mean"] == pytest.approx(340_000_500 / 4e9, rel=1e-14)
    assert s["active_capacity_fraction_max"] == pytest.approx(0.22, rel=1e-14)
    # [10 MB, 1 GB) periods: 2, 5, 4, 6 ms; longer than 4 ms: 5 and 6.
    assert s["long_idle_fraction_10mb_1gb"] == 0.5
    assert s["tensors_per_bucket"] == [1, 0, 2, 1, 0]
    assert s["periods_per_bucket"] == [0, 0, 3, 1, 0]
    assert [b["name"] for b in s["buckets"]] == ["<1MB", "1-10MB", "10-100MB", "100MB-1GB",
                                                 ">=1GB"]
    assert s["buckets"][2] == {"name": "10-100MB", "tensors": 2, "periods": 3,
                               "median_idle_ns": 4_000_000, "long_idle_periods": 1}
    assert [(t["name"], t["longest_idle_ns"], t["wraps"]) for t in s["top"]] == [
        ("m", 6_000_000, True), ("a", 5_000_000, False)]
    assert s["top"][0]["start"] == 4 and s["top"][0]["end"] == 7
    assert teraio.Analysis(trace_path).summary(top=0)["top"] == []


def cli():
    for env in ("TERAIO_CLI", "TIO_CLI"):
        if os.environ.get(env):
            return os.environ[env]
    for c in (Path(sys.executable).parent / "teraio", ROOT / "build" / "teraio"):
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return shutil.which("teraio")


@pytest.mark.parametrize("trace", ["example.json", "example.tio"])
def test_summary_has_the_same_keys_and_values_as_the_cli(trace):
    path = ROOT / "tests" / "data" / trace
    exe = cli()
    assert exe and path.exists(), "the teraio CLI (build/teraio) or tests/data is missing"
    proc = subprocess.run([exe, "analyze", str(path), "--json", "--capacity", "80GB"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    want = json.loads(proc.stdout)
    got = teraio.Analysis(str(path), capacity=80 * 10**9).summary()
    assert set(got) == set(want)
    for k, v in want.items():
        if isinstance(v, float):
            assert got[k] == pytest.approx(v, rel=1e-15), k
        else:
            assert got[k] == v, k


def test_write_csv(trace_path, tmp_path):
    a = teraio.Analysis(trace_path)
    out = tmp_path / "a" / "b"
    a.write_csv(out)
    rows = (out / "periods.csv").read_text().splitlines()
    assert rows[0] == "tensor,kind,bytes,start,end,duration_ns,wraps,min_bandwidth_Bps"
    assert rows[4].startswith("1,optim_state,200000000,4,7,6000000,1,")
    assert (out / "memory.csv").read_text().splitlines()[2] == "1,1000000,2000000,270000500,500"
    assert (out / "cdf.csv").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(teraio.Error) as ei:
        a.write_csv(blocker)
    assert "file" in ei.value.args[1]


def test_errors(tmp_path, trace_path):
    with pytest.raises(teraio.Error) as ei:
        teraio.Analysis(tmp_path / "missing.tio")
    assert "missing.tio" in ei.value.args[1]
    bad = tmp_path / "bad.json"
    t = json.loads(json.dumps(TRACE))
    t["kernels"][0]["uses"].append([9, "r"])
    bad.write_text(json.dumps(t))
    with pytest.raises(teraio.Error) as ei:
        teraio.Analysis(bad)
    assert ei.value.args[0] == -1001  # TIO_EFORMAT
    with pytest.raises(teraio.Error):
        teraio.Analysis(trace_path, capacity="a lot")
    with pytest.raises(TypeError):
        teraio.Analysis(42)
    a = teraio.Analysis(trace_path)
    with pytest.raises(ValueError):
        a.bucket_durations("huge")
    with pytest.raises(IndexError):
        a.bucket_durations(5)
    with pytest.raises(IndexError):
        a.tensor_periods(4)
    with pytest.raises(IndexError):
        a.first_use(100)
    with pytest.raises(ValueError):
        a.summary(top=-1)


def test_from_a_trace_object(trace_path):
    tr = teraio.Trace.load(str(trace_path))
    a = teraio.Analysis(tr)
    del tr
    gc.collect()
    assert a.resident_bytes.tolist() == RESIDENT
    assert a.summary()["trace"] is None


def test_liveness_by_hand(trace_path):
    """teraio._core.liveness (tio_analysis_liveness): first/last use, None when never used,
    resident bytes with tensors excluded and kernels skipped by name; values from TRACE above."""
    from teraio import _core

    tr = teraio.Trace.load(str(trace_path))
    first, last, res = _core.liveness(tr)
    assert (first, last, res) == ([0, 3, 0, 1], [2, 3, 3, 1], RESIDENT)
    assert _core.liveness(tr, exclude={1})[2] == [r - 200_000_000 for r in RESIDENT]
    # "adam" (k3) skipped: m is never used, a ends at k0; globals stay resident throughout.
    first, last, res = _core.liveness(tr, skip_kernel="adam")
    assert (first, last) == ([0, None, 0, 1], [2, None, 0, 1])
    assert res == [270_000_000, 250_000_500, 250_000_000, 250_000_000]
    example = str(ROOT / "tests" / "data" / "example.tio")
    assert _core.liveness(teraio.Trace.load(example))[0]  # a trace loaded from a file
    with pytest.raises(TypeError, match="liveness\\(trace\\): a teraio.Trace"):
        _core.liveness(3)
    with pytest.raises(ValueError, match="tensor 4 out of range"):
        _core.liveness(tr, exclude=[4])
