"""teraio.OffloadOptions: the Offloader's options beyond model, optimizer, memory_budget, ssd_dirs
and host_memory, checked when made; the old keyword arguments; the process-wide CPU memory
settings of the defaults, applied while an Offloader is open and undone at close()."""
import ctypes
import dataclasses
import gc
import os
import subprocess
import sys

import pytest

import torch

import teraio  # noqa: E402

from llama_tiny import LlamaConfig, LlamaTiny  # noqa: E402


def _model():
    m = LlamaTiny(LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344))
    return m, torch.optim.AdamW(m.parameters())


@pytest.mark.parametrize("field,value", [
    ("min_tensor_bytes", "lots"), ("min_tensor_bytes", -1), ("io_chunk", 0),
    ("io_chunk", "1 furlong"), ("cpu_cache_bytes", "x"), ("cpu_mmap_threshold", "64MiB"),
    ("cpu_prefault", "yes"), ("cpu_allocator", "on"), ("verify", 1), ("split_foreach", None),
    ("bounded_unplanned", "no"), ("aligned_storages", 0), ("policy", ""), ("policy", 3),
    ("plan", 5), ("warmup_steps", -1), ("warmup_steps", 1.5), ("profile_steps", 0),
    ("max_plans", 0), ("max_plans", True), ("io_queue_depth", 0), ("ssd_bandwidth", "fast"),
    ("ssd_bandwidth", 0), ("host_bandwidth", "quick"), ("host_bandwidth", -1),
    ("backend", 7), ("backend_options", {"write_fail": 3}), ("rank", -2), ("rank", "0")])
def test_bad_option_names_the_field_and_the_value(field, value):
    with pytest.raises(ValueError) as e:
        teraio.OffloadOptions(**{field: value})
    msg = str(e.value)
    assert f"OffloadOptions.{field}" in msg, msg
    assert repr(value) in msg, msg


def test_options_are_an_immutable_value():
    o = teraio.OffloadOptions(min_tensor_bytes="256KiB")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.min_tensor_bytes = "1MiB"
    assert dataclasses.replace(o, policy="none").policy == "none"
    with pytest.raises(ValueError, match="OffloadOptions.max_plans"):
        dataclasses.replace(o, max_plans=0)  # a changed copy is checked again
    assert o == teraio.OffloadOptions(min_tensor_bytes="256KiB")


def test_options_reach_the_offloader(tmp_path):
    m, o = _model()
    opts = teraio.OffloadOptions(policy="none", min_tensor_bytes="16KiB", max_plans=3,
                                 ssd_bandwidth="2GB/s", warmup_steps=2, profile_steps=2)
    off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)], options=opts)
    assert off.options is opts
    assert (off.policy, off.min_tensor_bytes, off.max_plans, off.warmup_steps,
            off.profile_steps) == ("none", 16 << 10, 3, 2, 2)
    assert off.ssd_read_Bps == off.ssd_write_Bps == 2e9 and not off.ssd_auto
    off.close()


def test_old_keywords_warn_and_map_onto_the_options(tmp_path):
    m, o = _model()
    with pytest.warns(DeprecationWarning, match=r"teraio.Offloader\(policy='none'\) is "
                      r"deprecated: pass options=teraio.OffloadOptions\(policy='none'\)") as w:
        off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                               options=teraio.OffloadOptions(max_plans=3), policy="none")
    assert w[0].filename == __file__  # attributed to the caller's line
    assert off.options == teraio.OffloadOptions(max_plans=3, policy="none")
    assert off.policy == "none" and off.max_plans == 3
    off.close()
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="OffloadOptions.rank"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)], rank=-1)


def test_unknown_keyword_and_wrong_options_type(tmp_path):
    m, o = _model()
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'min_tensor_size'.*"
                                        r"teraio.OffloadOptions"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                         min_tensor_size="1MiB")
    with pytest.raises(TypeError, match=r"options: expected a teraio.OffloadOptions, got dict"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                         options={"policy": "none"})


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]


def _mapped_on_its_own(nbytes, count=64):
    """Whether glibc's malloc maps blocks of nbytes on their own now (its mmap threshold is
    below nbytes): the bytes in such mappings (mallinfo2's hblkhd) grow by most of count blocks
    while they live. Free chunks left in the heap by earlier work may serve a few of them, so the
    check asks for half, not all."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2().hblkhd
    ps = [libc.malloc(nbytes) for _ in range(count)]
    during = libc.mallinfo2().hblkhd
    for p in ps:
        libc.free(p)
    return during - before >= nbytes * count // 2


def test_defaults_apply_cpu_memory_settings_until_close(tmp_path, monkeypatch):
    """With the default options on CPU, the process-wide settings that make the saved memory
    leave the process are applied while the Offloader is open and undone at close(): PyTorch's
    CPU allocator is teraio's block cache where teraio._torch_alloc is built; without it (a
    plain pip install) glibc maps each block from 64 KiB on its own. close() puts PyTorch's
    allocator back, and glibc's threshold where its own rule takes it (32 MiB)."""
    if os.environ.get("TIO_FRESH_PROCESS") != "1":
        # a fresh interpreter: glibc maps a block on its own only when its heap has no free
        # chunk for it, and after earlier tests in this process (test_demo.py) the heap held
        # 175 MB of free chunks, which served every 1 MiB probe below the 64 KiB threshold
        env = {k: v for k, v in os.environ.items()
               if k not in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")}
        env["TIO_FRESH_PROCESS"] = "1"
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            f"{__file__}::test_defaults_apply_cpu_memory_settings_until_close"],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
        return
    from teraio.torch import _cpu_memory
    from teraio import _torch_alloc as ta

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    gc.collect()  # Offloaders of other tests that installed the allocator are gone
    assert not ta.installed()
    off = teraio.Offloader(*_model(), memory_budget="1GiB", ssd_dirs=[str(tmp_path)])
    assert ta.installed() and off.report()["cpu_allocator"] is not None
    off.close()
    assert not ta.installed()
    # a plain pip install: no teraio._torch_alloc
    monkeypatch.setattr(_cpu_memory, "_torch_alloc", lambda: None)
    monkeypatch.setattr(_cpu_memory, "_torch_alloc_missing", lambda: True)
    off = teraio.Offloader(*_model(), memory_budget="1GiB", ssd_dirs=[str(tmp_path)])
    assert off.report()["cpu_mmap_threshold"] == 64 << 10
    assert _mapped_on_its_own(1 << 20)  # applied while open
    off.close()
    assert not _mapped_on_its_own(1 << 20)  # undone at close (the heap serves 1 MiB again)
    # two Offloaders: the setting stays until the last one closes
    a = teraio.Offloader(*_model(), memory_budget="1GiB", ssd_dirs=[str(tmp_path)])
    b = teraio.Offloader(*_model(), memory_budget="1GiB", ssd_dirs=[str(tmp_path)])
    a.close()
    assert _mapped_on_its_own(1 << 20)
    b.close()
    assert not _mapped_on_its_own(1 << 20)
    # opting out leaves the process alone
    calls = []
    monkeypatch.setattr(teraio._core, "malloc_mmap_threshold", lambda n: calls.append(n) or True)
    off = teraio.Offloader(*_model(), memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(cpu_allocator=False))
    rep = off.report()
    off.close()
    assert calls == [] and rep["cpu_mmap_threshold"] is None and rep["cpu_allocator"] is None
