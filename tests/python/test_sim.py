"""teraio._core.simulate: the simulator from Python (keys of `teraio simulate --json`)."""
import os

import pytest

import teraio

sim = teraio._core.simulate

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "example.json")


def test_ideal_is_sum_of_durations():
    r = sim(DATA, hw="cpu-ci", policy="ideal")
    assert r["fraction_of_ideal"] == pytest.approx(1.0)
    assert r["iteration_s"] == pytest.approx(r["ideal_s"])
    assert r["oom"] is False and r["oom_kernel"] is None
    for key in ("stall_s", "tokens_per_s", "gpu_peak_bytes", "host_peak_bytes",
                "ssd_bytes_written", "bytes", "drive_life_years", "host_full_offloads"):
        assert key in r
    assert r["host_full_offloads"] == 0  # only with on-demand eviction


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


def test_trace_object_and_plan_policy():
    t = teraio.Trace.load(DATA)
    # peak 3.45 MB; kernel 10 alone uses 3.21 MB, so 3.3 MB is tight but feasible for LRU
    by_obj = sim(t, hw="cpu-ci", policy="lru", capacity="3.3MB")
    by_path = sim(DATA, hw="cpu-ci", policy="lru", capacity="3.3MB")
    assert by_obj["oom"] is False
    assert by_obj["iteration_s"] == pytest.approx(by_path["iteration_s"])
    assert by_obj["gpu_peak_bytes"] <= 3_300_000
    assert by_obj["demand_fetches"] > 0  # LRU fetches on demand
    # below kernel 10's working set nothing can run: OOM names that kernel
    r = sim(t, hw="cpu-ci", policy="lru", capacity="3MB")
    assert r["oom"] is True and r["oom_kernel"] == 10


def test_plan_file_runs_as_its_execution_not_its_name(tmp_path):
    """A plan simulates as the execution it carries: a teraio plan without moves (the model fits)
    whose policy is renamed "zero-offload" still runs its moves (none: the ideal), not the ZeRO
    model that the name would pick."""
    import json

    t = teraio.Trace.load(DATA)
    hw = json.loads(teraio._core.hw_json("cpu-ci"))
    plan = teraio._core.Plan.make(t, hw, "teraio", 0, True)
    src, dst = tmp_path / "fit.json", tmp_path / "fit-named-zero.json"
    plan.save(str(src))
    doc = json.loads(src.read_text())
    assert doc["execution"] == "moves" and doc["summary"]["n_moves"] == 0
    doc["policy"] = "zero-offload"
    dst.write_text(json.dumps(doc))
    as_plan = sim(DATA, hw="cpu-ci", plan=str(dst))
    assert as_plan["fraction_of_ideal"] == pytest.approx(1.0)
    zero = sim(DATA, hw="cpu-ci", policy="zero-offload")
    assert zero["iteration_s"] != pytest.approx(as_plan["iteration_s"])  # the name would differ
