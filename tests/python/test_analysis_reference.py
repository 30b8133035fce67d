"""An independent, naive pure-Python reference of the lifetime analysis (include/teraio/analysis.h,
docs/analysis.md), compared with `teraio analyze --json --csv` on seeded random traces (and with
teraio.Analysis when the package is importable).

The reference follows the definitions literally with O(N*T) loops: for every tensor it scans all
kernels to find its uses, and for every kernel it scans all tensors to decide residency. Nothing
here is shared with src/analysis.
"""
import csv
import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["weight", "grad", "optim_state", "activation", "temp", "input", "other"]
BUCKETS = ["<1MB", "1-10MB", "10-100MB", "100MB-1GB", ">=1GB"]


def cli_path():
    """$TERAIO_CLI or $TIO_CLI, the venv's scripts dir, the repo's build/, or PATH; None if absent."""
    for env in ("TERAIO_CLI", "TIO_CLI"):
        if os.environ.get(env):
            return os.environ[env]
    for c in (Path(sys.executable).parent / "teraio", ROOT / "build" / "teraio"):
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return shutil.which("teraio")


CLI = cli_path()


def run_cli(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module", autouse=True)
def need_analyze():
    assert CLI, "the teraio CLI is missing: build it (build/teraio) or set TERAIO_CLI"
    help_ = run_cli("analyze", "--help")
    assert help_.returncode == 0, help_.stderr


# ---- Random traces in the JSON trace format (docs/trace-format.md) ------------------------------

SIZES = [1000, 999_999, 1_000_000, 5_000_000, 9_999_999, 10_000_000, 50_000_000, 99_999_999,
         100_000_000, 999_999_999, 1_000_000_000, 3_000_000_000]


def random_trace(seed, n_kernels, n_tensors):
    rng = random.Random(seed)
    tensors = []
    for t in range(n_tensors):
        tensors.append({"id": t, "bytes": rng.choice(SIZES) + rng.randrange(3),
                        "kind": rng.choice(KINDS), "global": rng.random() < 0.35,
                        "name": f"t{t}"})
    kernels = []
    hot = list(range(n_tensors // 2, n_tensors))  # used often; the rest rarely or never
    for k in range(n_kernels):
        used = set()
        for _ in range(rng.randrange(6)):
            pool = hot if rng.random() < 0.85 or n_tensors < 2 else range(n_tensors // 2)
            used.add(rng.choice(list(pool)))
        dur = 0 if rng.random() < 0.2 else rng.randrange(1, 25_000_000)
        kernels.append({"name": f"op{k % 7}", "duration_ns": dur, "flags": [],
                        "uses": [[t, rng.choice(["r", "w", "rw"])] for t in sorted(used)]})
    return {"format": "teraio-trace", "version": 1, "meta": {"source": f"random seed {seed}"},
            "tensors": tensors, "kernels": kernels}


# ---- The naive reference -------------------------------------------------------------------------

def bucket_of(nbytes):
    for i, bound in enumerate((10**6, 10**7, 10**8, 10**9)):
        if nbytes < bound:
            return i
    return 4


def reference(trace, capacity, long_idle_ns, top_n):
    tensors, kernels = trace["tensors"], trace["kernels"]
    n, T = len(kernels), len(tensors)
    dur = [k["duration_ns"] for k in kernels]
    uses_of = [{u[0] for u in k["uses"]} for k in kernels]
    start_ns = [sum(dur[:k]) for k in range(n + 1)]

    def idle(kernel_list):
        return sum(dur[j % n] for j in kernel_list)

    periods = []  # (start, tensor, end, flags, duration)
    for t in range(T):
        uses = [k for k in range(n) if t in uses_of[k]]
        for a, b in zip(uses, uses[1:]):
            if b > a + 1:
                periods.append((a + 1, t, b, 0, idle(range(a + 1, b))))
        if tensors[t]["global"]:
            if not uses:
                if n > 0:
                    periods.append((0, t, n, 2, idle(range(n))))
            elif uses[0] + n > uses[-1] + 1:
                s, e = uses[-1] + 1, uses[0] + n
                periods.append((s, t, e, 1, idle(range(s, e))))
    periods.sort()

    resident, active = [], []
    for k in range(n):
        r = a = 0
        for t in range(T):
            before = any(t in uses_of[j] for j in range(0, k + 1))
            after = any(t in uses_of[j] for j in range(k, n))
            if tensors[t]["global"] or (before and after):
                r += tensors[t]["bytes"]
            if t in uses_of[k]:
                a += tensors[t]["bytes"]
        resident.append(r)
        active.append(a)

    fr = [a / r for a, r in zip(active, resident) if r > 0]
    mid = [p for p in periods if 10**7 <= tensors[p[1]]["bytes"] < 10**9]
    peak = max(resident) if n else 0
    summary = {
        "n_kernels": n, "n_tensors": T, "n_uses": sum(len(u) for u in uses_of),
        "n_periods": len(periods), "inactive_periods": len(periods),
        "iteration_ns": sum(dur),
        "global_bytes": sum(t["bytes"] for t in tensors if t["global"]),
        "peak_resident_bytes": peak,
        "peak_kernel": resident.index(peak) if n else 0,
        "peak_active_bytes": max(active) if n else 0,
        "active_fraction_mean": sum(fr) / len(fr) if fr else 0.0,
        "active_fraction_max": max(fr) if fr else 0.0,
        "active_capacity_fraction_mean": (sum(a / capacity for a in active) / n
                                          if capacity and n else 0.0),
        "active_capacity_fraction_max": max(a / capacity for a in active) if capacity and n else 0.0,
        "long_idle_fraction_10mb_1gb": (sum(p[4] > long_idle_ns for p in mid) / len(mid)
                                        if mid else 0.0),
        "periods_per_bucket": [sum(bucket_of(tensors[p[1]]["bytes"]) == b for p in periods)
                               for b in range(5)],
        "tensors_per_bucket": [sum(bucket_of(t["bytes"]) == b for t in tensors) for b in range(5)],
    }
    buckets = []
    for b in range(5):
        d = sorted(p[4] for p in periods if bucket_of(tensors[p[1]]["bytes"]) == b)
        buckets.append({"name": BUCKETS[b], "tensors": summary["tensors_per_bucket"][b],
                        "periods": len(d), "median_idle_ns": d[(len(d) - 1) // 2] if d else 0,
                        "long_idle_periods": sum(x > long_idle_ns for x in d)})
    summary["buckets"] = buckets

    top = []
    for t in range(T):
        mine = [p for p in periods if p[1] == t]
        if tensors[t]["bytes"] < 10**7 or not mine:
            continue
        longest = max(mine, key=lambda p: p[4])  # first of equal ones in time order
        top.append({"tensor": t, "name": tensors[t]["name"], "kind": tensors[t]["kind"],
                    "bytes": tensors[t]["bytes"], "longest_idle_ns": longest[4],
                    "start": longest[0], "end": longest[2],
                    "total_idle_ns": sum(p[4] for p in mine), "periods": len(mine),
                    "wraps": longest[3] == 1})
    top.sort(key=lambda e: (-e["longest_idle_ns"], e["tensor"]))
    summary["top"] = top[:top_n]

    memory = [[k, start_ns[k], dur[k], resident[k], active[k]] for k in range(n)]
    per = []
    for s, t, e, flags, d in periods:
        b = tensors[t]["bytes"]
        per.append([t, tensors[t]["kind"], b, s, e, d, 1 if flags == 1 else 0,
                    math.inf if d == 0 else -(-2 * b * 10**9 // d)])  # rounded up
    cdf = []
    for b in range(5):
        d = sorted(p[4] for p in periods if bucket_of(tensors[p[1]]["bytes"]) == b)
        for i, x in enumerate(d):
            if i + 1 < len(d) and d[i + 1] == x:
                continue
            cdf.append([BUCKETS[b], x, (i + 1) / len(d)])
    return summary, memory, per, cdf


# ---- The comparison ------------------------------------------------------------------------------

def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


SHAPES = [(1, 3), (2, 4), (6, 9), (30, 20), (80, 40), (150, 60)]


@pytest.mark.parametrize("seed", range(12))
def test_cli_matches_reference(tmp_path, seed):
    nk, nt = SHAPES[seed % len(SHAPES)]
    trace = random_trace(seed, nk, nt)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    capacity = [0, 80 * 10**9, 94 * 2**30][seed % 3]
    long_idle_ns = [10_000_000, 5_000_000, 1][seed % 3]
    top_n = [10, 3, 0][seed % 3]
    out = tmp_path / "csv"
    args = ["analyze", str(path), "--json", "--csv", str(out), "--top", str(top_n),
            "--long-idle", f"{long_idle_ns}ns"]
    if capacity:
        args += ["--capacity", str(capacity)]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want, memory, periods, cdf = reference(trace, capacity, long_idle_ns, top_n)

    for key, value in want.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
        else:
            assert got[key] == value, key
    assert got["capacity_bytes"] == capacity
    assert got["long_idle_ns"] == long_idle_ns

    # The Python binding gives the same summary, and the same arrays.
    try:
        import teraio
        analysis_cls = getattr(teraio, "Analysis", None)
    except ImportError:
        analysis_cls = None
    if analysis_cls is not None:
        a = analysis_cls(path, capacity=capacity, long_idle_ns=long_idle_ns)
        s = a.summary(top=top_n)
        for key, value in want.items():
            if isinstance(value, float):
                assert s[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
            else:
                assert s[key] == value, key
        assert a.resident_bytes.tolist() == [m[3] for m in memory]
        assert a.active_bytes.tolist() == [m[4] for m in memory]
        p = a.periods()
        assert [(int(r["tensor"]), int(r["start"]), int(r["end"]), int(r["duration_ns"]))
                for r in p] == [(w[0], w[3], w[4], w[5]) for w in periods]

    head, rows = read_csv(out / "memory.csv")
    assert head == ["kernel", "start_ns", "duration_ns", "resident_bytes", "active_bytes"]
    assert [[int(x) for x in r] for r in rows] == memory

    head, rows = read_csv(out / "periods.csv")
    assert head == ["tensor", "kind", "bytes", "start", "end", "duration_ns", "wraps",
                    "min_bandwidth_Bps"]
    assert len(rows) == len(periods)
    for r, w in zip(rows, periods):
        assert [int(r[0]), r[1], *(int(x) for x in r[2:7])] == w[:7]
        if w[7] == math.inf:
            assert r[7] == "inf"
        elif w[7] < 2**64:
            assert int(r[7]) == w[7]
        else:
            assert float(r[7]) == pytest.approx(w[7], rel=1e-8)

    head, rows = read_csv(out / "cdf.csv")
    assert head == ["bucket", "duration_ns", "fraction"]
    assert len(rows) == len(cdf)
    for r, w in zip(rows, cdf):
        assert (r[0], int(r[1])) == (w[0], w[1])
        assert float(r[2]) == pytest.approx(w[2], rel=0, abs=1e-12)  # 12 decimals, truncated


def test_human_output_names_the_paper_values(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(random_trace(99, 40, 30)))
    proc = run_cli("analyze", str(path), "--capacity", "94GiB")
    assert proc.returncode == 0, proc.stderr
    assert "paper: 1.7% mean, <14% max" in proc.stdout
    assert "paper: >40%" in proc.stdout
    for b in BUCKETS:
        assert b in proc.stdout


def test_bad_trace_exits_2_with_the_loader_detail(tmp_path):
    bad = tmp_path / "bad.json"
    trace = random_trace(1, 3, 3)
    trace["kernels"][0]["uses"] = [[7, "r"]]  # tensor 7 does not exist
    bad.write_text(json.dumps(trace))
    proc = run_cli("analyze", str(bad))
    assert proc.returncode == 2
    assert "analyze" in proc.stderr and "7" in proc.stderr
    proc = run_cli("analyze", str(tmp_path / "missing.tio"))
    assert proc.returncode == 2
    assert "missing.tio" in proc.stderr


def test_usage_errors_exit_1(tmp_path):
    assert run_cli("analyze").returncode == 1
    assert run_cli("analyze", "x.tio", "--capacity", "lots").returncode == 1
    assert run_cli("analyze", "x.tio", "--long-idle", "soon").returncode == 1
    assert run_cli("analyze", "x.tio", "--frobnicate").returncode == 1
    assert run_cli("analyze", "--help").returncode == 0


def test_csv_into_a_file_fails_naming_it(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(random_trace(5, 10, 8)))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = run_cli("analyze", str(path), "--csv", str(blocker / "out"))
    assert proc.returncode != 0
    assert "file" in proc.stderr
