"""End-to-end tests of teraio.Offloader on CPU with torch (the example Llama model, real engine).

Each comparison runs the same seeded training twice, once plain and once under the Offloader, and
requires bitwise identical losses and final parameters: the reference is plain PyTorch, computed
independently of teraio.
"""
import re
import warnings
from pathlib import Path

import pytest

import torch

import teraio  # noqa: E402

from llama_tiny import LlamaConfig, LlamaTiny, make_batch, train_steps  # noqa: E402
from train_llama_tiny import PRESETS, param_digest, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STEPS = 5  # 1 warm-up, 1 profiled, 3 offloaded


@pytest.fixture(scope="module")
def baseline():
    losses, model, _ = train("tiny", STEPS)
    return losses, param_digest(model)


def _train_updated(offload=None):
    """train("tiny", STEPS, offload=offload) with every parameter updated in place after the
    first offloaded step, outside off.step() (the executor held copies of some parameters the
    step left in memory: the next step must not take them for their contents)."""
    torch.manual_seed(0)
    cfg = LlamaConfig(**PRESETS["tiny"])
    model = LlamaTiny(cfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    off = teraio.Offloader(model, opt, **offload) if offload is not None else None

    def update(i, _off, _loss):
        if i == 2:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(0.5).add_(0.01)

    losses = train_steps(model, opt, off, lambda i: make_batch(cfg, 2, 32, i), STEPS, update)
    return losses, model, off


@pytest.fixture(scope="module")
def baseline_updated():
    losses, model, _ = _train_updated()
    return losses, param_digest(model)


def _offload(dir_, tier, memory_budget=0.5, **options):
    """The Offloader's arguments: options are OffloadOptions fields (min_tensor_bytes 16 KiB
    unless given)."""
    d = dict(memory_budget=memory_budget,
             options=teraio.OffloadOptions(**{"min_tensor_bytes": "16KiB", **options}))
    if tier in ("ssd", "both"):
        d["ssd_dirs"] = [str(dir_)]
    if tier in ("host", "both"):
        d["host_memory"] = "64MiB"
    return d


def _documented_report_keys():
    """The keys the user guide's table of report() names (its first column)."""
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    table = guide.split("- `report()`: a dict of counters so far:", 1)[1].split("\n\n", 2)[1]
    return {k for line in table.splitlines() if line.startswith("|")
            for k in re.findall(r"`(\w+)`", line.split("|")[1])}


@pytest.mark.parametrize("tier", ["ssd", "host", "both"])
def test_bitwise_identical_training(fast_dir, baseline_updated, tier):
    """Bitwise identical to plain PyTorch, with an in-place update between two steps."""
    baseline = baseline_updated
    losses, model, off = _train_updated(_offload(fast_dir, tier))
    rep = off.report()
    print(f"\n[{tier}] losses {losses}\n[{tier}] report: "
          + ", ".join(f"{k}={v}" for k, v in rep.items() if k not in ("plan", "engine")))
    assert losses == baseline[0]
    assert param_digest(model) == baseline[1]
    assert rep["steps_profiled"] == 1
    assert rep["steps_offloaded"] == STEPS - 2
    assert rep["bytes_offloaded"] > 0
    assert rep["bytes_prefetched"] > 0
    assert rep["peak_managed_bytes"] <= rep["memory_budget"], rep
    assert rep["memory_budget"] * 2 <= rep["unconstrained_peak_bytes"] + 2
    assert not set(rep) - _documented_report_keys(), "report() keys missing from the guide"
    assert rep["host_copies_dropped"] >= 0 and rep["clean_offloads"] >= 0
    if tier == "ssd":
        assert rep["plan"]["bytes_to_host"] == 0
    if tier == "host":
        assert rep["plan"]["bytes_to_ssd"] == 0


def test_ssd_bandwidth_measured_or_given(fast_dir):
    """ssd_bandwidth="auto" (the default) plans with rates measured by writing and reading back
    PROBE_BYTES through the engine once; a given rate is used as is and costs no probe."""
    from teraio.torch._planning import PROBE_BYTES

    _, _, off = train("tiny", STEPS, offload=_offload(fast_dir, "ssd"))
    rep = off.report()
    assert rep["ssd_bandwidth_measured"] is True
    assert rep["ssd_read_Bps"] > 0 and rep["ssd_write_Bps"] > 0
    eng = rep["engine"]
    # the probe's bytes are in the engine's counters beside what training moved
    assert eng["bytes_written"] >= PROBE_BYTES + rep["bytes_offloaded"], rep
    assert eng["bytes_read"] >= PROBE_BYTES + rep["bytes_prefetched"], rep

    _, _, off = train("tiny", STEPS, offload=_offload(fast_dir, "ssd", ssd_bandwidth="123MB/s"))
    rep = off.report()
    assert rep["ssd_bandwidth_measured"] is False
    assert rep["ssd_read_Bps"] == rep["ssd_write_Bps"] == 123e6
    assert rep["engine"]["bytes_written"] < PROBE_BYTES  # no probe: the tiny model moves less


def test_foreach_split_and_tied_embeddings(fast_dir):
    # AdamW(foreach=True): each _foreach_ operator runs one tensor at a time under teraio; the
    # result must still be bitwise identical to the unsplit operator. Every optimizer state is
    # used in every foreach pass, so half the peak is not reachable here: no budget check.
    ref, model_ref, _ = train("tiny", STEPS, foreach=True, tied=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got, model, off = train("tiny", STEPS, foreach=True, tied=True,
                                offload=_offload(fast_dir, "both", memory_budget=0.8))
    assert got == ref
    assert param_digest(model) == param_digest(model_ref)
    rep = off.report()
    assert rep["bytes_offloaded"] > 0
    assert rep["steps_offloaded"] == STEPS - 2
    assert any("_foreach_" in k[0] for k in off._prog.kernels)


def test_sequence_length_change_gets_its_own_plan(fast_dir):
    """A new sequence length is a new step signature: profiled once and planned, not a
    divergence (tests/python/test_torch_buckets.py goes back and forth between lengths)."""
    seqs = [32, 32, 32, 32, 48, 48, 48, 48]
    ref, model_ref, _ = train("tiny", len(seqs), seqs=seqs)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got, model, off = train("tiny", len(seqs), seqs=seqs, offload=_offload(fast_dir, "ssd"))
    msgs = [str(x.message) for x in w if "teraio" in str(x.message)]
    print("\nwarnings:", msgs)
    rep = off.report()
    print("report:", {k: v for k, v in rep.items() if k not in ("plan", "engine")})
    assert got == ref
    assert param_digest(model) == param_digest(model_ref)
    assert rep["steps_diverged"] == 0, msgs
    # steps: 0 warm-up, 1 profiled, 2-3 offloaded, 4 profiled (48 tokens), 5-7 offloaded
    assert rep["steps_profiled"] == 2
    assert rep["replans"] == 2
    assert rep["steps_offloaded"] == 5


def test_save_and_load_plan_skips_profiling(tmp_path, fast_dir, baseline):
    kw = _offload(fast_dir, "ssd")
    _, _, off = train("tiny", 2, offload=kw)
    off.save_plan(tmp_path / "run.plan")
    losses, model, off2 = train("tiny", STEPS,
                                offload=_offload(fast_dir, "ssd", plan=str(tmp_path / "run.plan")))
    rep = off2.report()
    assert rep["steps_profiled"] == 0
    assert rep["steps_offloaded"] == STEPS - 1
    # the SSD rates were never probed (no planning here): no prediction, and no error
    assert rep["predicted_step_s"] is None
    assert losses == baseline[0]
    assert param_digest(model) == baseline[1]


@pytest.mark.parametrize("fault", ["write_fail=5,write_fail_count=100000",
                                   "read_fail=5,read_fail_count=100000",
                                   "corrupt=5,corrupt_count=100000"])
def test_io_fault_is_a_clear_error(fast_dir, fault):
    # The fault backend is the posix backend with injected failures (every retry fails too).
    # A corrupted read is caught by the CRC32C check (verify=True); the training stops with a
    # teraio.Error naming the tensor instead of continuing on wrong data.
    kw = _offload(fast_dir, "ssd", backend="fault", backend_options=fault, verify=True)
    with pytest.raises(teraio.Error) as e:
        train("tiny", STEPS, offload=kw)
    msg = str(e.value)
    print("\nerror:", msg)
    assert "tensor" in msg
    # it names which tensor: a parameter / gradient / optimizer state, or an intermediate
    named = [n for n, _ in LlamaTiny(LlamaConfig(**PRESETS["tiny"])).named_parameters()]
    assert any(n in msg for n in named) or "intermediate tensor" in msg, msg
    assert ("corrupt" in msg.lower() or "crc" in msg.lower()) if "corrupt" in fault else True


def test_io_fault_while_measuring_the_ssd_is_a_clear_error(fast_dir):
    # nothing is written before the first plan (bounded_unplanned=False), so the first write is
    # the ssd_bandwidth="auto" probe's: its failure stops training before any offloaded step
    kw = _offload(fast_dir, "ssd", backend="fault", bounded_unplanned=False,
                  backend_options="write_fail=1,write_fail_count=100000")
    with pytest.raises(teraio.Error) as e:
        train("tiny", STEPS, offload=kw)
    msg = str(e.value)
    print("\nerror:", msg)
    assert "ssd_bandwidth='auto'" in msg and fast_dir in msg, msg


def test_aligned_storages_skip_the_staging_copies(tmp_path, baseline):
    """Storages brought back from the SSD get teraio's page-aligned memory: the engine's O_DIRECT
    reads land in them without its staging buffers (PyTorch's own CPU memory is 64-byte
    aligned, which O_DIRECT cannot take), and training stays bitwise identical. tmp_path, not
    /dev/shm: staging only happens for O_DIRECT files."""
    staged, prefetched = {}, {}
    for aligned in (True, False):
        d = tmp_path / str(aligned)
        d.mkdir()
        losses, model, off = train("tiny", STEPS,
                                   offload=_offload(d, "ssd", aligned_storages=aligned))
        rep = off.report()
        assert losses == baseline[0]
        assert param_digest(model) == baseline[1]
        staged[aligned] = rep["engine"]["staged_bytes"]
        prefetched[aligned] = rep["bytes_prefetched"]
    print(f"\nstaged bytes: aligned {staged[True]}, PyTorch's memory {staged[False]}; "
          f"prefetched {prefetched[True]}")
    assert prefetched[True] > 0
    # every planned read lands in aligned memory: at least half of them saved a staging copy
    assert staged[False] - staged[True] >= prefetched[True] // 2


def test_io_buffer_memory_and_release():
    from teraio.torch._mode import materialize_aligned, release_storage

    buf = teraio._core.IOBuffer(3 << 20)
    assert len(buf) == 3 << 20 and buf.address % (2 << 20) == 0
    assert teraio._core.io_buffer_at(buf.address)
    with pytest.raises(ValueError, match="nbytes"):
        teraio._core.IOBuffer(0)
    del buf
    t = torch.arange(1 << 16, dtype=torch.float32)  # 256 KiB
    st = t.untyped_storage()
    release_storage(st)
    assert st.nbytes() == 0
    materialize_aligned(st, 1 << 18)
    addr = st.data_ptr()
    assert st.nbytes() == 1 << 18 and addr % 4096 == 0 and teraio._core.io_buffer_at(addr)
    t.fill_(2.5)  # the tensor sees the new memory
    assert float(t.sum()) == 2.5 * (1 << 16)
    release_storage(st)  # not resizable while it holds the buffer: swapped out, and freed
    assert st.nbytes() == 0 and not teraio._core.io_buffer_at(addr)
    st.resize_(1 << 18)  # an ordinary storage again
    assert st.nbytes() == 1 << 18
