"""teraio.OffloadOptions: the Offloader's options beyond model, optimizer, memory_budget, ssd_dirs
and host_memory, checked when made; the old keyword arguments; nothing process-wide by default."""
import dataclasses
import gc

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


def test_defaults_change_nothing_process_wide(tmp_path, monkeypatch):
    """An Offloader made and run with its defaults leaves the process as it was: PyTorch's CPU
    allocator is not replaced and glibc's malloc is not tuned (both are opt-in:
    OffloadOptions(cpu_allocator=True), cpu_mmap_threshold=<bytes>)."""
    from teraio import _torch_alloc as ta

    calls = []
    monkeypatch.setattr(teraio._core, "malloc_mmap_threshold", lambda n: calls.append(n) or True)
    monkeypatch.setattr(ta, "install", lambda *a: calls.append(("install", a)) or True)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    gc.collect()  # Offloaders of other tests that installed the allocator are gone
    was = ta.installed()
    from train_llama_tiny import train

    _, _, off = train("tiny", 3, offload=dict(  # the tiny model's tensors are below 1 MiB
        memory_budget=0.5, ssd_dirs=[str(tmp_path)],
        options=teraio.OffloadOptions(min_tensor_bytes="16KiB")))
    rep = off.report()
    assert rep["steps_offloaded"] == 1
    assert calls == []
    assert ta.installed() == was
    assert rep["cpu_allocator"] is None and rep["cpu_mmap_threshold"] is None
    assert rep["cpu_prefault"] is False
    # the opt-in installs it (through the same function this test watches)
    off2 = teraio.Offloader(*_model(), memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                            options=teraio.OffloadOptions(cpu_allocator=True))
    assert calls == [("install", (1 << 20,))]
    off2.close()
