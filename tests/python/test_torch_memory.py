"""Memory evidence on CPU: the `wide` example model's training in a subprocess with and without
teraio at half the unconstrained peak, SSD tier on disk. Peak RSS is measured by the kernel: VmHWM
of the whole process (ru_maxrss), and VmHWM of the offloaded steps alone (reset after the warm-up
and profiled steps through /proc/self/clear_refs). The numbers are printed (pytest -s) and
recorded in docs/bench/torch.md. Both runs take ~60-90 s together on the 2-core machine; the model
is large enough that its tensors dominate the process's fixed base (docs/decisions.md)."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest

import teraio  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "train_llama_tiny.py")


def _run(args, env_threshold=True):
    env = dict(os.environ)
    # glibc returns large freed blocks to the OS at once (otherwise a released tensor's memory can
    # stay in the heap and RSS measures the allocator, not teraio); both runs use the same setting.
    # Without it (env_threshold=False) each run has glibc's defaults, and the Offloader sets the
    # threshold itself where asked to (cpu_mmap_threshold).
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    env.pop("GLIBC_TUNABLES", None)
    if env_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    env.setdefault("OMP_NUM_THREADS", "2")
    out = subprocess.run([sys.executable, SCRIPT, "--preset", "wide", "--steps", "3",
                          "--steady-after", "2", "--batch", "2", "--seq", "32", "--json"] + args,
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_torch_alloc():
    try:
        from teraio import _torch_alloc  # noqa: F401
    except ImportError:
        return False
    return True


_PLAIN = {}  # env_threshold -> plain PyTorch's run


@pytest.mark.parametrize("malloc", ["glibc-default", "mmap-threshold", "glibc-untouched"])
def test_half_budget_lowers_tracked_peak_and_rss(tmp_path, malloc):
    """glibc-default: glibc's defaults in the environment, plain PyTorch against teraio as
    the quickstart makes it, with the process-wide OffloadOptions(cpu_allocator=True)
    (the example's --cpu-allocator on: its block cache serves PyTorch's CPU tensors, where
    teraio._torch_alloc was built; else teraio sets glibc's mmap threshold). mmap-threshold:
    cpu_allocator=False with cpu_mmap_threshold="64KiB", so teraio sets the threshold.
    glibc-untouched: cpu_allocator=False, nothing process-wide, where only the released
    storages' pages leave the process (a smaller saving, its own goal below). (Both runs with
    MALLOC_MMAP_THRESHOLD_=65536 in the environment, _run's env_threshold, is what
    bench/torch_bench.py measures; not repeated here.)"""
    env_threshold = False
    goal = 0.25 if malloc == "glibc-untouched" else 0.30
    extra = {"mmap-threshold": ["--cpu-allocator", "off", "--cpu-mmap-threshold", "64KiB"],
             "glibc-untouched": ["--cpu-allocator", "off"]}
    # plain PyTorch's run is the same for every parameter: measured once
    if env_threshold not in _PLAIN:
        _PLAIN[env_threshold] = _run([], env_threshold)
    plain = _PLAIN[env_threshold]
    off = _run(["--budget", "0.5", "--ssd-dir", str(tmp_path), "--min-tensor-bytes", "1MiB"]
               + extra.get(malloc, []), env_threshold)
    rep = off["report"]
    alloc = malloc == "glibc-default" and _has_torch_alloc()
    print(f"\n[{malloc}] teraio set the malloc mmap threshold to {rep['cpu_mmap_threshold']}, "
          f"block cache {'on' if rep['cpu_allocator'] else 'off'}", end="")
    if alloc:  # PyTorch's CPU tensors came from the block cache; offloaded blocks were discarded
        assert rep["cpu_allocator"]["installed"]
        assert rep["cpu_allocator"]["discarded_bytes"] > 0
        assert rep["cpu_allocator"]["allocs"] > 0
        assert rep["cpu_mmap_threshold"] is None
    else:
        assert rep["cpu_allocator"] is None
        assert rep["cpu_mmap_threshold"] == (
            65536 if malloc in ("glibc-default", "mmap-threshold") else None)
    mib = 1 << 20
    drop_steady = 1 - off["train_steady_peak_rss_bytes"] / plain["train_steady_peak_rss_bytes"]
    drop_whole = 1 - off["train_peak_rss_bytes"] / plain["train_peak_rss_bytes"]
    drop_restore = 1 - off["peak_rss_bytes"] / plain["peak_rss_bytes"]
    for name, r in (("plain ", plain), ("teraio", off)):
        print(f"\n{name}: peak RSS {r['train_peak_rss_bytes'] / mib:.0f} MiB (whole process, "
              f"training), {r['train_steady_peak_rss_bytes'] / mib:.0f} MiB (offloaded step 3),"
              f" {r['peak_rss_bytes'] / mib:.0f} MiB (with the final restore + digest); s/step "
              f"{r['steady_step_seconds']}", end="")
    print()
    print(f"teraio: tracked peak {rep['peak_managed_bytes'] / mib:.1f} MiB (offloaded steps), "
          f"{rep['unplanned_peak_bytes'] / mib:.1f} MiB (warm-up + profiled, tensors >= 1 MiB), "
          f"budget {rep['memory_budget'] / mib:.1f} MiB, unconstrained "
          f"{rep['unconstrained_peak_bytes'] / mib:.1f} MiB; demand offloads "
          f"{rep['demand_offloads']}, stall {rep['stall_s']:.2f} s, offloaded "
          f"{rep['bytes_offloaded'] / mib:.0f} MiB (+{rep['unplanned_bytes_offloaded'] / mib:.0f} "
          f"MiB before the plan)")
    print(f"RSS drop: whole process {drop_whole:.1%}, offloaded steps {drop_steady:.1%}, with the "
          f"final restore {drop_restore:.1%} (goal {goal:.0%}: see docs/bench/torch.md)")
    assert off["losses"] == plain["losses"]
    assert off["params"] == plain["params"]
    assert rep["steps_offloaded"] == 1
    # the budget holds in every step: the executor's, and the reactive one before the plan
    assert rep["peak_managed_bytes"] <= rep["memory_budget"]
    assert rep["unplanned_peak_bytes"] <= rep["memory_budget"]
    assert rep["over_budget_kernels"] == 0
    assert rep["memory_budget"] * 2 <= rep["unconstrained_peak_bytes"] + 2
    # and the process really uses less: the goal, for the whole process; with glibc's
    # heap left as it is, less (measured: -36.5 to -38.3% with the released pages handed back,
    # -34.7% without; the best possible at this budget is about -38%)
    assert drop_whole >= goal, (plain["train_peak_rss_bytes"], off["train_peak_rss_bytes"])
    assert drop_steady >= goal


# ---- the executor keeps the budget itself (fast: the tiny model, in this process) ---------------
sys.path.insert(0, os.path.join(ROOT, "examples"))


def _fast_dir(tmp_path):
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else str(tmp_path)


@pytest.mark.parametrize("tier", ["ssd", "host"])
def test_budget_kept_by_demand_offloads_without_a_plan(tmp_path, tier):
    """Policy "none" plans no move at all: every offload is the executor's own (furthest next use
    first), and the tracked peak must still stay within half the unconstrained peak, with the same
    losses and parameters as plain PyTorch."""
    import warnings

    from train_llama_tiny import param_digest, train

    plain_losses, plain_model, _ = train("tiny", 4)
    d = tmp_path / "ssd"
    d.mkdir()
    kw = dict(memory_budget=0.5,
              options=teraio.OffloadOptions(min_tensor_bytes="16KiB", policy="none"))
    if tier == "ssd":
        kw["ssd_dirs"] = [str(d)]
    else:
        kw["host_memory"] = "64MiB"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "the plan cannot keep every operator"
        losses, model, off = train("tiny", 4, offload=kw)
    rep = off.report()
    print(f"\n[{tier}] tracked peak {rep['peak_managed_bytes']} budget {rep['memory_budget']} "
          f"unconstrained {rep['unconstrained_peak_bytes']} demand offloads "
          f"{rep['demand_offloads']} ({rep['bytes_demand_offloaded']} bytes) urgent reads "
          f"{rep['urgent_reads']} stall {rep['stall_s']:.3f} s")
    assert losses == plain_losses
    assert param_digest(model) == param_digest(plain_model)
    assert rep["plan"]["n_moves"] == 0
    assert rep["steps_offloaded"] == 2
    assert rep["demand_offloads"] > 0
    assert rep["bytes_offloaded"] >= rep["bytes_demand_offloaded"] > 0
    assert rep["over_budget_kernels"] == 0
    assert 0 < rep["peak_managed_bytes"] <= rep["memory_budget"]
    assert rep["memory_budget"] * 2 <= rep["unconstrained_peak_bytes"] + 2


def test_budget_below_unmovable_bytes_is_refused(tmp_path):
    """Nothing is movable when every tensor is below min_tensor_bytes: half the peak cannot be
    kept, and the error says so before any offloaded step."""
    from train_llama_tiny import train

    with pytest.raises(ValueError, match=r"memory_budget: .* never moves .*min_tensor_bytes"):
        train("tiny", 3, offload=dict(memory_budget=0.5, ssd_dirs=[str(tmp_path)],
                                      options=teraio.OffloadOptions(min_tensor_bytes="1GiB")))


def test_steps_without_a_plan_stay_within_an_absolute_budget(tmp_path):
    """An absolute budget applies from the first step: the warm-up and profiled steps (no plan
    yet) are kept under it reactively, and the offloaded steps by the executor; the results are
    those of plain PyTorch. Turned off, the unplanned steps use the unconstrained peak."""
    import warnings

    from train_llama_tiny import param_digest, train

    plain_losses, plain_model, _ = train("tiny", 4)
    budget = 4 << 20  # the tiny model's unconstrained tracked peak is ~8 MiB
    kw = dict(memory_budget=budget, ssd_dirs=[str(tmp_path)],
              options=teraio.OffloadOptions(min_tensor_bytes="16KiB"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        losses, model, off = train("tiny", 4, offload=kw)
        _, _, loose = train("tiny", 2, offload=dict(kw, options=dataclasses.replace(
            kw["options"], bounded_unplanned=False)))
    rep = off.report()
    print(f"\ntracked peak before the plan {rep['unplanned_peak_bytes']} (budget {budget}, "
          f"unconstrained {rep['unconstrained_peak_bytes']}), written "
          f"{rep['unplanned_bytes_offloaded']} read {rep['unplanned_bytes_read']} bytes in "
          f"{rep['unplanned_io_s']:.3f} s; after: {rep['peak_managed_bytes']}")
    assert losses == plain_losses
    assert param_digest(model) == param_digest(plain_model)
    assert rep["unconstrained_peak_bytes"] > budget
    assert 0 < rep["unplanned_peak_bytes"] <= budget
    assert rep["unplanned_bytes_offloaded"] > 0 and rep["unplanned_bytes_read"] > 0
    assert 0 < rep["peak_managed_bytes"] <= budget
    assert loose.report()["unplanned_bytes_offloaded"] == 0


def test_room_for_outputs_counts_by_each_offloaders_tracking_size():
    """The bytes of new outputs an operator will make (room made before it runs, in the steps
    without a plan) count the outputs an Offloader tracks: at least its min_tensor_bytes. Two
    Offloaders of one process with different sizes ask for the same operator and shapes; the
    answer of the first must not be given to the second (it kept a later test's unplanned steps
    above their budget, by the small outputs the first did not count)."""
    import torch

    from teraio.torch._bounded import new_output_bytes

    a = torch.ones(64, 64)  # an mm of two of them: one output of 16 KiB (4-byte floats)
    out = 64 * 64 * 4
    assert new_output_bytes(torch.ops.aten.mm.default, (a, a), {}, out + 1) == 0
    assert new_output_bytes(torch.ops.aten.mm.default, (a, a), {}, out) == out
    assert new_output_bytes(torch.ops.aten.mm.default, (a, a), {}, out + 1) == 0


_RELEASE = r"""
import ctypes, json, mmap
import torch
import teraio._core as core
from teraio.torch._mode import release_storage
core.malloc_mmap_threshold(32 << 20)  # a 4 MiB block comes from glibc's heap and stays there
libc = ctypes.CDLL(None, use_errno=True)
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
def resident(addr, n):
    page = mmap.PAGESIZE
    lo = (addr + page - 1) // page * page
    hi = (addr + n) // page * page
    vec = ctypes.create_string_buffer((hi - lo) // page)
    assert libc.mincore(lo, hi - lo, vec) == 0, ctypes.get_errno()
    return sum(b & 1 for b in vec.raw) * page
out = {}
for discard in (False, True):
    keep = torch.empty(1 << 20)  # the next block does not touch the heap's top
    t = torch.ones(1 << 20)  # 4 MiB, touched
    st = t.untyped_storage()
    addr, n = st.data_ptr(), st.nbytes()
    before = resident(addr, n)
    if discard:
        release_storage(st, discard=True)
    else:
        st.resize_(0)
    out[str(discard)] = [before, resident(addr, n), n]
print(json.dumps(out))
"""


def test_release_hands_heap_pages_back():
    """Releasing a CPU storage whose block glibc keeps in its heap (its threshold is high here)
    still takes its pages out of the process (mincore): a plain resize_(0) leaves them resident."""
    r = subprocess.run([sys.executable, "-c", _RELEASE], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    before, after, n = out["False"]
    assert before >= n - 2 * 4096 and after >= n - 2 * 4096, out  # glibc kept it, resident
    before, after, n = out["True"]
    assert before >= n - 2 * 4096, out
    assert after <= 2 * 4096 + 4096, out  # at most the partial pages and glibc's header
