"""Offloader.predicted_step_s(): the simulator's step time for the profiled trace and the plan,
on the hardware the Offloader planned for (reported as report()["predicted_step_s"])."""
import math

import teraio  # noqa: E402

from train_llama_tiny import train  # noqa: E402


def test_prediction_follows_the_plan_and_the_bandwidth(tmp_path):
    # no plan yet: no prediction
    _, _, off0 = train("tiny", 1, offload=dict(
        memory_budget=0.5, ssd_dirs=[str(tmp_path)],
        options=teraio.OffloadOptions(min_tensor_bytes="16KiB")))
    assert off0.predicted_step_s() is None
    assert "predicted_step_s" not in off0.report()

    def run(bw):
        d = tmp_path / bw.replace("/", "")
        d.mkdir()
        _, _, off = train("tiny", 3, offload=dict(
            memory_budget=0.5, ssd_dirs=[str(d)],
            options=teraio.OffloadOptions(min_tensor_bytes="16KiB", ssd_bandwidth=bw)))
        return off

    fast, slow = run("100GB/s"), run("1MB/s")
    compute = sum(k[1] for k in fast._prog.kernels) * 1e-9  # profiled operator times
    p_fast, p_slow = fast.report()["predicted_step_s"], slow.report()["predicted_step_s"]
    assert math.isfinite(p_fast) and math.isfinite(p_slow)
    # a step is never faster than its operators, and the same plan's I/O at 1 MB/s cannot hide
    assert p_fast >= compute * 0.999
    assert p_slow > p_fast
    moved = slow.report()["plan"]["bytes_to_ssd"]  # written at 1 MB/s: seconds, not hidden
    assert p_slow >= 0.5 * moved / 1e6
    assert fast.predicted_step_s() == p_fast  # computed once per plan


def test_probe_measures_reads_and_writes_together(tmp_path):
    """ssd_bandwidth="auto" also measures the directory with reads and writes in flight at
    once (a second probe written while the first is read back); the hardware the Offloader
    plans and predicts with carries it as ssd_mixed_Bps, so the model's shared SSD budget
    has the disk's own mixed point instead of plain time sharing."""
    from teraio.torch._planning import PROBE_BYTES

    _, _, off = train("tiny", 3, offload=dict(
        memory_budget=0.5, ssd_dirs=[str(tmp_path)],
        options=teraio.OffloadOptions(min_tensor_bytes="16KiB")))
    m = off.ssd_measured
    assert m["mixed_Bps"] > 0, m
    hw = off._planner.hw()
    assert hw["ssd_mixed_Bps"] == min(m["mixed_Bps"], m["read_Bps"] + m["write_Bps"]) > 0
    # the probe, then its halves: one stored and read back while the other is written
    assert off.report()["engine"]["bytes_written"] >= 2 * PROBE_BYTES
    assert math.isfinite(off.report()["predicted_step_s"])
    # a given rate has no mixed point: time sharing
    d = tmp_path / "given"
    d.mkdir()
    _, _, off = train("tiny", 3, offload=dict(
        memory_budget=0.5, ssd_dirs=[str(d)],
        options=teraio.OffloadOptions(min_tensor_bytes="16KiB", ssd_bandwidth="1GB/s")))
    assert off._planner.hw()["ssd_mixed_Bps"] == 0.0
