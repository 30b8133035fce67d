"""Offloader.save()'s streamed write (teraio.torch._save) for storages on a GPU, on a machine
without one: 'cuda:0' storages made over addresses (torch._C._construct_storage_from_data_pointer
makes them on PyTorch's CPU build too; nothing reads their memory), offloaded (0 bytes, their
bytes given by the read callback as from a tier) beside resident CPU storages. The archive must
be what torch.save writes for them with every byte in memory: each storage's location and size
in data.pkl, its bytes in its record, valid CRC-32s, loadable. And the saver's wait for the
executor's writes in flight before it reads from the engine (Saver.settled)."""
import io
import mmap
import pickle
import zipfile

import pytest
import torch

from teraio.torch import _save

CUDA = torch.device("cuda", 0)


def _offloaded_cuda(nb):
    """A 'cuda:0' storage of 0 bytes that stands for an offloaded one of nb bytes."""
    st = torch._C._construct_storage_from_data_pointer(0, CUDA, 0)
    assert st.device == CUDA and st.nbytes() == 0
    return st, nb


def _pattern(i, nb):
    return bytes((i * 37 + k * 11) % 251 for k in range(nb))


def _locations(path):
    """data.pkl's storage records: key -> (location, number of elements)."""
    out = {}

    class _U(pickle.Unpickler):
        def persistent_load(self, pid):
            _, _, key, location, numel = pid
            out[key] = (location, numel)
            return None

        def find_class(self, module, name):  # only the records are wanted: nothing rebuilt
            if module.startswith("torch"):
                return lambda *a, **k: None
            return super().find_class(module, name)

    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        _U(io.BytesIO(z.read(name))).load()
    return out


def _object():
    """{name: storage} and what each one's bytes are: two offloaded 'cuda:0' storages (one
    under a typed float32 storage), two resident CPU ones."""
    a, na = _offloaded_cuda(4096 + 12)
    b, nb_ = _offloaded_cuda(64 * 1024)
    c = torch.arange(300, dtype=torch.float64)
    d = torch.tensor([7, -1, 3], dtype=torch.int32)
    obj = {"a": a, "b": torch.storage.TypedStorage(wrap_storage=b, dtype=torch.float32,
                                                  _internal=True),
           "c": c, "nested": [d, "text", 3]}
    offl = {a._cdata: na, b._cdata: nb_}
    data = {a._cdata: _pattern(1, na), b._cdata: _pattern(2, nb_)}
    return obj, (a, b), offl, data


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
@pytest.mark.parametrize("as_file", [False, True])
def test_streamed_cuda_storages_archive(tmp_path, as_file):
    obj, (a, b), offl, data = _object()
    reads = []

    def read(cd, nb):
        reads.append((cd, nb))
        assert offl[cd] == nb
        return bytearray(data[cd])

    path = tmp_path / "ck.pt"
    if as_file:
        with open(path, "wb") as f:
            held = _save.save(obj, f, offl, read, tmp_dir=str(tmp_path))
    else:
        held = _save.save(obj, str(path), offl, read)
    assert held == 64 * 1024  # one buffer at a time: the largest
    assert sorted(reads) == sorted(offl.items())
    # the offloaded storages hold 0 bytes again, on their device
    for st in (a, b):
        assert st.nbytes() == 0 and st.device == CUDA
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None  # every record's CRC-32 matches its bytes
        recs = {n.rsplit("/", 2)[-2] + "/" + n.rsplit("/", 1)[-1]: n for n in z.namelist()}
        locs = _locations(path)
        # keys in the order torch.save meets the storages: a, b, c, d
        assert locs == {"0": ("cuda:0", 4096 + 12), "1": ("cuda:0", 64 * 1024 // 4),
                        "2": ("cpu", 300), "3": ("cpu", 3)}
        assert z.read(recs["data/0"]) == data[a._cdata]
        assert z.read(recs["data/1"]) == data[b._cdata]
        assert z.read(recs["data/2"]) == torch.arange(300, dtype=torch.float64).numpy().tobytes()
        assert z.read(recs["data/3"]) == bytes(torch.tensor([7, -1, 3],
                                                            dtype=torch.int32).numpy())
    got = torch.load(path, map_location="cpu", weights_only=False)
    assert bytes(got["a"]) == data[a._cdata]
    assert got["b"].dtype == torch.float32 and got["b"].size() == 64 * 1024 // 4
    assert bytes(got["b"]._untyped_storage) == data[b._cdata]
    assert torch.equal(got["c"], torch.arange(300, dtype=torch.float64))
    assert got["nested"][1:] == ["text", 3]
    assert torch.equal(got["nested"][0], torch.tensor([7, -1, 3], dtype=torch.int32))


def test_sized_stand_ins_are_device_storages_over_mappings(monkeypatch):
    """_sized: each 0-byte storage, CPU or CUDA, gets a stand-in of its size on its device over
    its own host mapping for the duration; after, its 0 bytes again and every mapping closed."""
    maps = []
    real = mmap.mmap

    def tracked(*a, **k):
        m = real(*a, **k)
        maps.append(m)
        return m

    monkeypatch.setattr(_save.mmap, "mmap", tracked)
    sts = [(torch._C._construct_storage_from_data_pointer(0, CUDA, 0), 8192),
           (torch.UntypedStorage(0), 4096), (torch._C._construct_storage_from_data_pointer(
               0, CUDA, 0), 8192)]
    with _save._sized(sts):
        ptrs = [st.data_ptr() for st, _ in sts]
        assert [st.nbytes() for st, _ in sts] == [8192, 4096, 8192]
        assert [st.device.type for st, _ in sts] == ["cuda", "cpu", "cuda"]
        assert len(set(ptrs)) == 3 and 0 not in ptrs  # distinct: torch.save checks them
        assert len(maps) == 3 and not any(m.closed for m in maps)
    assert [st.nbytes() for st, _ in sts] == [0, 0, 0]
    assert [st.device.type for st, _ in sts] == ["cuda", "cpu", "cuda"]
    assert all(m.closed for m in maps)


class _FakeExec:
    def __init__(self, fail=None):
        self.calls = []
        self.fail = fail

    def drain(self):
        self.calls.append("drain")
        if self.fail:
            raise self.fail

    def offloaded(self):
        self.calls.append("offloaded")
        return {} if self.fail else {1: (7, 16, "w", None)}


class _FakeOff:
    def __init__(self, cuda, fail=None):
        self._cuda = cuda
        self._exec = _FakeExec(fail)
        self._bounded = None
        self.brought = []

    def _bring_back(self, what):
        self.brought.append(what)


def test_settled_drains_before_listing_on_cuda():
    """On the CUDA path the saver waits for the executor's requests in flight before it lists
    (and then reads) the offloaded storages; on the CPU path there are none to wait for."""
    off = _FakeOff(cuda=True)
    assert _save.Saver.settled(off, "x") == {1: (7, 16, "w", None)}
    assert off._exec.calls == ["drain", "offloaded"] and off.brought == []
    off = _FakeOff(cuda=False)
    assert _save.Saver.settled(off, "x") == {1: (7, 16, "w", None)}
    assert off._exec.calls == ["offloaded"]


def test_settled_brings_back_after_a_failed_offload():
    from teraio import _core

    off = _FakeOff(cuda=True, fail=_core.Error(-5, "write of tensor 3 failed"))
    assert _save.Saver.settled(off, "Offloader.save()") == {}
    assert len(off.brought) == 1 and "Offloader.save()" in off.brought[0]
    assert "write of tensor 3 failed" in off.brought[0]
