"""Bad inputs to teraio.Offloader give a clear error, before the first offloaded step."""
import dataclasses
import gc
import os
import sys

import pytest

import torch

import teraio  # noqa: E402
import teraio.torch._cpu_memory  # noqa: E402
import teraio.torch._offload_args  # noqa: E402

from llama_tiny import LlamaConfig, LlamaTiny  # noqa: E402
from train_llama_tiny import train  # noqa: E402


def _model():
    m = LlamaTiny(LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344))
    return m, torch.optim.AdamW(m.parameters())


def test_missing_ssd_dir(tmp_path):
    m, o = _model()
    with pytest.raises(ValueError, match="does not exist"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path / "nope")])


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_ssd_dir(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    m, o = _model()
    with pytest.raises(ValueError, match="not writable"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(d)])


def test_ssd_dir_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    m, o = _model()
    with pytest.raises(ValueError, match="not a directory"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(f)])


@pytest.mark.parametrize("budget", ["lots", -5, 0])
def test_bad_budget_value(tmp_path, budget):
    m, o = _model()
    with pytest.raises(ValueError, match="memory_budget"):
        teraio.Offloader(m, o, memory_budget=budget, ssd_dirs=[str(tmp_path)])


def test_nowhere_to_offload():
    m, o = _model()
    with pytest.raises(ValueError, match="ssd_dirs"):
        teraio.Offloader(m, o, memory_budget="1GiB")


def test_budget_below_largest_operator(tmp_path):
    # 4 KiB cannot hold even one parameter: refused when the Offloader is made, naming the
    # parameter and its size (budgets that hold every parameter but not an operator's working
    # set are refused in the profiled step, before its optimizer update: test_torch_validate.py)
    steps_done = []
    with pytest.raises(ValueError, match=r"memory_budget: 4.00 KiB is below the parameter "
                                         r"\S+ alone \(256 KiB\)"):
        train("tiny", 4, offload=dict(memory_budget=4096, ssd_dirs=[str(tmp_path)]),
              on_step=lambda i, off: steps_done.append(i))
    assert steps_done == []


def test_plan_from_another_model(tmp_path):
    kw = dict(memory_budget=0.5, ssd_dirs=[str(tmp_path)],
              options=teraio.OffloadOptions(min_tensor_bytes="16KiB"))
    _, _, off = train("tiny", 2, offload=kw)
    off.save_plan(tmp_path / "tiny.plan")
    with pytest.raises(ValueError, match="plan was made for a model with"):
        train("small", 3, offload=dict(kw, options=dataclasses.replace(
            kw["options"], plan=str(tmp_path / "tiny.plan"))))


def test_missing_plan_file(tmp_path):
    m, o = _model()
    with pytest.raises(ValueError, match="must exist"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                         options=teraio.OffloadOptions(plan=str(tmp_path / "none.plan")))


def test_rank_in_ssd_dirs(tmp_path):
    (tmp_path / "r3").mkdir()
    m, o = _model()
    off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path / "r{rank}")],
                           options=teraio.OffloadOptions(rank=3))
    assert off.ssd_dirs == [str(tmp_path / "r3")]


def test_unhashable_step_kind(tmp_path):
    m, o = _model()
    off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(cpu_allocator=False))
    with pytest.raises(TypeError, match=r"step\(kind=\.\.\.\): expected a hashable value"):
        with off.step(kind=[2]):
            pass
    assert off.report()["steps_passthrough"] == 0  # refused before the step started
    off.close()


@pytest.mark.parametrize("bw", ["fast", 0, -1, "0GB/s"])
def test_bad_ssd_bandwidth(tmp_path, bw):
    m, o = _model()
    with pytest.raises(ValueError, match="ssd_bandwidth"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                         options=teraio.OffloadOptions(ssd_bandwidth=bw))


@pytest.mark.parametrize("threshold", ["64MiB", "lots", -1])
def test_bad_cpu_mmap_threshold(tmp_path, threshold):
    m, o = _model()
    with pytest.raises(ValueError, match="cpu_mmap_threshold"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                         options=teraio.OffloadOptions(cpu_mmap_threshold=threshold))


@pytest.mark.parametrize("prefault", ["yes", 1, None])
def test_bad_cpu_prefault(tmp_path, prefault):
    m, o = _model()
    with pytest.raises(ValueError, match="cpu_prefault"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                         options=teraio.OffloadOptions(cpu_prefault=prefault))


@pytest.mark.parametrize("cpus,local_ranks,expected", [
    ({0}, None, False), ({0, 1}, None, True), ({0, 1, 2, 3}, None, True),
    ({0, 1}, "2", False), ({0, 1, 2, 3}, "2", True), ({0, 1, 2, 3}, "3", False)])
def test_cpu_prefault_auto_needs_a_spare_cpu(tmp_path, monkeypatch, cpus, local_ranks, expected):
    """The default ("auto"): the prefault thread only where the process may run on 2 CPUs or
    more per rank on this node (LOCAL_WORLD_SIZE, as torchrun sets it); an explicit True or
    False is kept whatever the CPUs."""
    monkeypatch.setattr(teraio.torch._offload_args.os, "sched_getaffinity", lambda pid: set(cpus))
    if local_ranks is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local_ranks)
    m, o = _model()
    off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(cpu_allocator=True))
    assert off.cpu_prefault is expected
    assert off.report()["cpu_prefault"] is (expected and bool(off.cpu_allocator))
    off.close()
    for given in (True, False):
        off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                               options=teraio.OffloadOptions(cpu_prefault=given))
        assert off.cpu_prefault is given
        off.close()


def _threshold_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(teraio._core, "malloc_mmap_threshold",
                        lambda n: calls.append(n) or True)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    return calls


@pytest.mark.parametrize("given,expected", [("64KiB", 65536), (1 << 20, 1 << 20), (None, None)])
def test_cpu_mmap_threshold_is_applied_on_cpu(tmp_path, monkeypatch, given, expected):
    calls = _threshold_calls(monkeypatch)
    m, o = _model()
    off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(cpu_mmap_threshold=given))
    assert calls == ([] if expected is None else [expected])
    assert off.report()["cpu_mmap_threshold"] == expected
    off.close()


def _torch_alloc():
    """teraio._torch_alloc: built wherever PyTorch was importable when teraio was installed (the
    README's setup installs torch first), so its absence next to torch is a build failure."""
    try:
        from teraio import _torch_alloc
    except ImportError as e:
        pytest.fail(f"teraio._torch_alloc missing although torch is installed: reinstall teraio "
                    f"with torch present (pip install --no-build-isolation .): {e}")
    return _torch_alloc


@pytest.mark.parametrize("allocator", [True, False])
def test_cpu_mmap_threshold_auto_follows_the_allocator(tmp_path, monkeypatch, allocator):
    """The default ("auto"): no threshold where teraio's block cache serves PyTorch (it hands the
    offloaded memory back itself), none either where the allocator was not asked for (nothing
    process-wide unless opted in)."""
    ta = _torch_alloc()
    calls = _threshold_calls(monkeypatch)
    m, o = _model()
    off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(cpu_allocator=allocator))
    rep = off.report()
    if allocator:
        assert calls == [] and rep["cpu_mmap_threshold"] is None
        assert rep["cpu_allocator"]["installed"] is True and ta.installed()
    else:
        assert calls == [] and rep["cpu_mmap_threshold"] is None
        assert rep["cpu_allocator"] is None
    off.close()
    del off
    gc.collect()
    # the last Offloader that installed it (closed or collected) puts PyTorch's back
    assert ta.installed() == (teraio.torch._cpu_memory._ALLOC_USERS[0] > 0)
    # the others in this process were collected
    assert teraio.torch._cpu_memory._ALLOC_USERS[0] == 0


def test_allocator_built_for_another_torch_is_not_installed(tmp_path, monkeypatch):
    """c10's C++ ABI changes between PyTorch releases: a teraio._torch_alloc built against
    another version is refused with a warning that says to rebuild, and the threshold applies
    in its place (cpu_allocator=True opted in to a process-wide change)."""
    ta = _torch_alloc()
    assert ta.torch_version == torch.__version__  # what this build recorded
    calls = _threshold_calls(monkeypatch)
    monkeypatch.setattr(ta, "torch_version", "1.0.0")
    monkeypatch.setattr(teraio.torch._offload_args, "_WARNED", set())
    m, o = _model()
    with pytest.warns(RuntimeWarning, match="built against PyTorch 1.0.0.*reinstall teraio"):
        off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                               options=teraio.OffloadOptions(cpu_allocator=True))
    rep = off.report()
    assert rep["cpu_allocator"] is None and rep["cpu_mmap_threshold"] == 65536
    assert calls == [65536]
    off.close()


@pytest.mark.parametrize("shape", ["absent", "namespace"])
def test_allocator_not_built_falls_back_with_a_warning(tmp_path, monkeypatch, shape):
    """Built without PyTorch importable (pip's build isolation): teraio._torch_alloc is absent,
    or, from an older wheel, its source folder is an empty namespace package. The Offloader
    still works: a warning says how to get the allocator, and the threshold applies."""
    import types

    calls = _threshold_calls(monkeypatch)
    mod = None
    if shape == "namespace":
        mod = types.ModuleType("teraio._torch_alloc")
        mod.__path__ = [str(tmp_path)]
    monkeypatch.setitem(sys.modules, "teraio._torch_alloc", mod)  # None: ImportError
    monkeypatch.delattr(teraio, "_torch_alloc", raising=False)
    monkeypatch.setattr(teraio.torch._offload_args, "_WARNED", set())
    m, o = _model()
    with pytest.warns(RuntimeWarning, match=r"teraio._torch_alloc is not in this installation.*"
                                            r"--no-build-isolation"):
        off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                               options=teraio.OffloadOptions(cpu_allocator=True))
    rep = off.report()
    assert rep["cpu_allocator"] is None and rep["cpu_mmap_threshold"] == 65536
    assert calls == [65536]
    off.close()


def test_refused_offloader_leaves_malloc_alone(tmp_path, monkeypatch):
    calls = _threshold_calls(monkeypatch)
    ta = _torch_alloc()
    was = ta.installed()
    m, o = _model()
    with pytest.raises(ValueError, match="does not exist"):
        teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path / "nope")],
                         options=teraio.OffloadOptions(cpu_allocator=True,
                                                       cpu_mmap_threshold="64KiB"))
    assert calls == []
    assert ta.installed() == was


@pytest.mark.parametrize("var,value", [("MALLOC_MMAP_THRESHOLD_", "131072"),
                                       ("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=4096")])
def test_cpu_mmap_threshold_leaves_the_users_setting(tmp_path, monkeypatch, var, value):
    calls = _threshold_calls(monkeypatch)
    monkeypatch.setenv(var, value)
    m, o = _model()
    off = teraio.Offloader(m, o, memory_budget="1GiB", ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(cpu_mmap_threshold="64KiB"))
    assert calls == []
    assert off.report()["cpu_mmap_threshold"] is None
    off.close()


_MALLINFO = r"""
import ctypes, json
import teraio._core as core
libc = ctypes.CDLL(None)
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def mapped_by(size):
    before = libc.mallinfo2().hblkhd
    p = libc.malloc(size)
    after = libc.mallinfo2().hblkhd
    libc.free(p)
    return after - before
out = []
for n in (32 << 20, 64 << 10):  # grow the heap under the first, then set the second late
    assert core.malloc_mmap_threshold(n) is True
    out.append(mapped_by(4 << 20))
try:
    core.malloc_mmap_threshold(64 << 20)
except ValueError as e:
    out.append(str(e))
print(json.dumps(out))
"""


def test_malloc_mmap_threshold_changes_glibc():
    """The binding really sets glibc's threshold, also late in a process: a 4 MiB block comes from
    the heap under a 32 MiB threshold and is mapped on its own (mallinfo2's hblkhd) once the
    threshold is 64 KiB. In a fresh interpreter, so that the heap's state is known."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", _MALLINFO], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    import json

    heap, mapped, err = json.loads(r.stdout)
    assert heap == 0
    assert mapped >= 4 << 20
    assert "glibc accepts 0 to 32 MiB" in err
