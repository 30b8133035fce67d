"""teraio._torch_alloc: PyTorch's CPU allocator over teraio's block cache (teraio/blockcache.h),
each case in a fresh interpreter (installing it changes the whole process's allocator). The C
cache itself is tested in tests/unit/test_blockcache.c."""
import json
import subprocess
import sys

import pytest


def _py(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_module_is_built():
    try:
        from teraio import _torch_alloc  # noqa: F401
    except ImportError as e:
        pytest.fail(f"teraio._torch_alloc missing although torch is installed: reinstall teraio "
                    f"with torch present (pip install --no-build-isolation .): {e}")


_INSTALL = r"""
import json, torch
import teraio._core as core, teraio._torch_alloc as ta
MiB = 1 << 20
r = {}
r["install_before_enable"] = None
assert core.block_cache_enable()
r["installed"] = ta.install(MiB) and ta.installed()
big = torch.arange(1_000_000, dtype=torch.float64)          # 8 MB: from the cache
small = torch.arange(1000, dtype=torch.float32)              # 4 KB: PyTorch's own allocator
r["big_block"] = core.block_cache_block_size(big.data_ptr())
r["big_aligned"] = big.data_ptr() % (2 * MiB)
r["small_block"] = core.block_cache_block_size(small.data_ptr())
r["big_sum"] = float(big.sum())
# results computed through the cache equal those of a second, independent path (numpy)
a = torch.randn(512, 1024, generator=torch.Generator().manual_seed(1))
b = torch.randn(1024, 768, generator=torch.Generator().manual_seed(2))
c = a @ b
r["matmul_ok"] = bool(abs(c.numpy() - a.numpy() @ b.numpy()).max() < 1e-3)
r["c_from_cache"] = core.block_cache_block_size(c.data_ptr()) > 0
s0 = core.block_cache_stats()
ptr = big.data_ptr()
del big                                                      # back to the cache
s1 = core.block_cache_stats()
again = torch.empty(1_000_000, dtype=torch.float64)           # the same class: reused
r["reused"] = again.data_ptr() == ptr
s2 = core.block_cache_stats()
r["in_use_drop"] = s0["in_use_bytes"] - s1["in_use_bytes"]
r["hits"] = (s2["hot_hits"] + s2["cold_hits"]) - (s1["hot_hits"] + s1["cold_hits"])
# a discarded block reads zeros and its pages leave; released, it is kept cold
again.fill_(7.0)
assert core.block_cache_discard(again.data_ptr())
r["zeros_after_discard"] = float(again.abs().sum())
r["discard_unknown"] = core.block_cache_discard(small.data_ptr())
# uninstall: new tensors come from PyTorch again; one from before stays valid and is released
keep = torch.full((1 << 19,), 3.0, dtype=torch.float64)       # 4 MiB, from the cache
r["uninstalled"] = ta.uninstall() and not ta.installed()
after = torch.empty(1_000_000, dtype=torch.float64)
r["after_block"] = core.block_cache_block_size(after.data_ptr())
r["keep_sum"] = float(keep.sum())
u0 = core.block_cache_stats()["in_use_bytes"]
del keep
r["keep_released"] = u0 - core.block_cache_stats()["in_use_bytes"]
r["trimmed"] = core.block_cache_trim() > 0
r["fallbacks"] = ta.fallbacks()
print(json.dumps(r))
"""


def test_pytorch_tensors_come_from_the_block_cache():
    r = _py(_INSTALL)
    MiB = 1 << 20
    assert r["installed"] is True
    # 8,000,000 bytes rounds up to the 512 KiB class above 2 MiB: 8 MiB
    assert r["big_block"] == 8 * MiB and r["big_aligned"] == 0
    assert r["small_block"] == 0
    assert r["big_sum"] == 999_999 * 1_000_000 / 2
    assert r["matmul_ok"] and r["c_from_cache"]
    assert r["in_use_drop"] == 8 * MiB and r["reused"] and r["hits"] == 1
    assert r["zeros_after_discard"] == 0.0
    assert r["discard_unknown"] is False
    assert r["uninstalled"] is True and r["after_block"] == 0
    assert r["keep_sum"] == 3.0 * (1 << 19) and r["keep_released"] == 4 * MiB
    assert r["trimmed"] is True and r["fallbacks"] == 0


def test_install_needs_the_cache_enabled_and_a_size():
    r = _py(r"""
import json, torch
import teraio._core as core, teraio._torch_alloc as ta
r = {}
try:
    ta.install(0)
except ValueError as e:
    r["zero"] = str(e)
# not enabled: the cache serves nothing, every request falls back to PyTorch's allocator
r["installed"] = ta.install(1 << 20)
x = torch.empty(4 << 20, dtype=torch.uint8)
x.fill_(1)
r["sum"] = int(x.sum())
r["fallbacks"] = ta.fallbacks()
r["stats"] = core.block_cache_stats()
ta.uninstall()
print(json.dumps(r))
""")
    assert "min_bytes" in r["zero"]
    assert r["installed"] is True and r["sum"] == 4 << 20
    assert r["fallbacks"] >= 1 and r["stats"] is None


def test_training_through_the_cache_equals_plain():
    """The example model trained with PyTorch's tensors from the block cache (no offloading)
    gives bit-identical losses and parameters."""
    code = r"""
import json, sys, torch
sys.path.insert(0, "examples")
from train_llama_tiny import train, param_digest
import teraio._core as core, teraio._torch_alloc as ta
res = {}
for use in (False, True):
    if use:
        core.block_cache_enable()
        ta.install(1 << 16)
    losses, model, _ = train(preset="tiny", steps=3, batch=2, seq=32)
    res[str(use)] = [losses, param_digest(model)]
res["allocs"] = core.block_cache_stats()["allocs"]
print(json.dumps(res))
"""
    r = _py(code)
    assert r["True"] == r["False"]
    assert r["allocs"] > 0


def test_dataloader_workers_fork_with_the_allocator_installed():
    """DataLoader workers are forked (Linux default) while another thread allocates through the
    cache: each worker allocates its batches from its copy of the cache, and the data is right."""
    r = _py(r"""
import json, threading, torch
import teraio._core as core, teraio._torch_alloc as ta
core.block_cache_enable(); ta.install(1 << 20)
stop = False
def churn():
    while not stop:
        x = torch.empty(3 << 20, dtype=torch.uint8); x.fill_(1); del x
t = threading.Thread(target=churn); t.start()
class DS(torch.utils.data.Dataset):
    def __len__(self): return 16
    def __getitem__(self, i): return torch.full((1 << 18,), float(i))  # 1 MiB: from the cache
dl = torch.utils.data.DataLoader(DS(), batch_size=2, num_workers=2,
                                 multiprocessing_context="fork", timeout=60)
sums = [float(b.sum()) for b in dl]
stop = True; t.join()
print(json.dumps({"sums": sums, "allocs": core.block_cache_stats()["allocs"]}))
""")
    n = 1 << 18
    assert r["sums"] == [float((2 * k + 2 * k + 1) * n) for k in range(8)]
    assert r["allocs"] > 0


def test_prefault_and_resizing_change_no_result(tmp_path):
    """Offloaded training (SSD tier, half budget) with the block cache's prefault thread on and
    off, each in its own process: the same losses and parameters as training without teraio;
    on, the thread faulted memory in (prefaulted_bytes) and allocations took resident blocks of
    other size classes (resized_hits); off, it faulted nothing in."""
    code = r"""
import json, sys, torch
sys.path.insert(0, "examples")
from train_llama_tiny import train, param_digest
prefault = sys.argv[1] == "on"
plain_losses, plain_model, _ = train(preset="small", steps=5, batch=2, seq=64)
import teraio
off_kw = dict(memory_budget=0.5, ssd_dirs=[sys.argv[2]],
              options=teraio.OffloadOptions(cpu_allocator=True, min_tensor_bytes="64KiB",
                                            cpu_prefault=prefault))
losses, model, off = train(preset="small", steps=5, batch=2, seq=64, offload=off_kw)
rep = off.report()
print(json.dumps(dict(same=[losses, param_digest(model)] == [plain_losses,
                                                             param_digest(plain_model)],
                      steps_offloaded=rep["steps_offloaded"], cache=rep["cpu_allocator"])))
"""
    res = {}
    for mode in ("on", "off"):
        d = tmp_path / mode
        d.mkdir()
        out = subprocess.run([sys.executable, "-c", code, mode, str(d)], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    for mode, r in res.items():
        assert r["same"], mode
        assert r["steps_offloaded"] >= 2, mode
        assert r["cache"] is not None and r["cache"]["discarded_bytes"] > 0, mode
        assert r["cache"]["prefaulting_bytes"] == 0, mode
    print(f"\nprefault on: {res['on']['cache']['prefaulted_bytes']} B faulted in ahead, "
          f"{res['on']['cache']['resized_hits']} resized hits; off: "
          f"{res['off']['cache']['resized_hits']} resized hits")
    assert res["on"]["cache"]["prefaulted_bytes"] > 0
    assert res["off"]["cache"]["prefaulted_bytes"] == 0
    assert res["on"]["cache"]["resized_hits"] > 0


_RAW_AFTER_UNINSTALL = r"""
import json, torch
import teraio._core as core, teraio._torch_alloc as ta
assert core.block_cache_enable()
assert ta.install(1 << 20)
x = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(3))
small = torch.randn(64, 64).to_mkldnn()    # 16 KiB: from PyTorch's allocator, raw interface
m = x.to_mkldnn()                          # ideep's 4 MiB buffer: c10's raw interface, the cache
r = {"m_in_use": core.block_cache_stats()["in_use_bytes"]}
r["uninstalled"] = ta.uninstall() and not ta.installed()
after = torch.randn(1024, 1024).to_mkldnn()  # made after: PyTorch's allocator again
r["same"] = bool(torch.equal(m.to_dense(), x))
u0 = core.block_cache_stats()["in_use_bytes"]
del m, small, after                        # freed through c10's allocator of now: no free()
r["released"] = u0 - core.block_cache_stats()["in_use_bytes"]
r["reinstalled"] = ta.install(1 << 20) and ta.installed()
print(json.dumps(r))
"""


def test_raw_interface_blocks_freed_after_uninstall():
    """oneDNN/ideep memory (c10's raw_allocate) made while the cache serves and freed after
    uninstall() goes back to the cache, and PyTorch's own to PyTorch (it aborted with
    'free(): invalid pointer' when uninstall() put the previous allocator back in c10)."""
    r = _py(_RAW_AFTER_UNINSTALL)
    assert r["m_in_use"] >= 2 * (4 << 20)  # x and m's buffer
    assert r["uninstalled"] is True
    assert r["same"] is True
    assert r["released"] == 4 << 20
    assert r["reinstalled"] is True
