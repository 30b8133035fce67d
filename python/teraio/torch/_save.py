"""Offloader.save(): a checkpoint written between steps, byte for byte what torch.save writes,
with the offloaded tensors read from their tier one at a time instead of all brought back.

torch.save pickles the whole object, then copies each storage's bytes into the zip archive,
with no hook between the two. An offloaded storage holds no memory (0 bytes), so it can be
neither pickled (its size is in the pickle) nor copied. Two passes instead:
1. torch.save under torch.serialization.skip_data(), which writes everything but the storages'
   bytes (their space is reserved), into a temporary file. For the pickle to record their true
   sizes, each offloaded storage is given, for this pass only, memory of its size that is never
   touched: an anonymous host mapping, as a storage on the offloaded storage's own device (CPU
   or CUDA) over its address, swapped in (UntypedStorage._swap_data_ptr_) and out again (_sized);
   the kernel backs it with no pages, as nothing reads or writes it.
2. Each storage's bytes are written into its record: a resident one from its memory, an
   offloaded one read from the engine (read-verification as the engine is set up) into one
   buffer of its size, written, and freed before the next (a resident CUDA storage is copied to
   the host first, as torch.save does). The zip archive's CRC-32 of each
   record (local header and central directory) and the archive's serialization id (which
   torch.save derives from the records' CRC-32s) are then what torch.save would have written.
The storages' order (the records' keys) is found by pickling the object once more the way
torch.save does, into nothing; it is checked against the archive's records (count and sizes).
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import mmap
import os
import pickle
import re
import struct
import sys
import tempfile
import threading
import zipfile
import zlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_M64 = (1 << 64) - 1
_TORCH_SAVE = torch.save  # the passes below: torch.save itself, never a SaveWindow's wrapper
_CHUNK = 8 << 20  # bytes copied at a time from a temporary file into a file object
# an anonymous mapping that reserves no swap: Linux's MAP_NORESERVE (in Python's mmap from 3.13)
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def _hash_combine(seed, v):
    return (seed ^ ((v + 0x9E3779B9 + (seed << 6) + (seed >> 2)) & _M64)) & _M64


def storage_order(obj, protocol):
    """The untyped storages torch.save writes for obj, in its order (record keys 0, 1, ...)."""
    seen = {}

    class _Order(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, torch.storage.TypedStorage) or torch.is_storage(o):
                st = o._untyped_storage if isinstance(o, torch.storage.TypedStorage) else o
                seen.setdefault(st._cdata, st)
                return ("storage", len(seen))
            return None

    class _Null(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            return len(b)

    with torch.serialization.skip_data():
        _Order(_Null(), protocol=protocol).dump(obj)
    return list(seen.values())


@contextlib.contextmanager
def _sized(storages):
    """Give each 0-byte storage of the (storage, nbytes) pairs, on whatever device it is, memory
    of its size that nothing touches for the duration (pass 1), and its 0 bytes back after.

    The memory is an anonymous host mapping per storage, not committed (MAP_NORESERVE where the
    system has it); the stand-in is a storage on the storage's own device over its address
    (torch._C._construct_storage_from_data_pointer: it owns nothing), swapped in
    (UntypedStorage._swap_data_ptr_) and out again. torch.save under skip_data() reads only its
    size, device and address: the addresses are distinct (it refuses two storages at one address
    with different dtypes) and, with a GPU's unified addressing, none is a device allocation's.
    The same code runs for CPU and CUDA storages."""
    swapped = []
    try:
        for st, nb in storages:
            m = mmap.mmap(-1, nb, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)
            swapped.append((st, None, m))
            c = ctypes.c_char.from_buffer(m)
            addr = ctypes.addressof(c)
            del c  # no buffer export left: the mapping can be closed after
            ph = torch._C._construct_storage_from_data_pointer(addr, st.device, nb)
            st._swap_data_ptr_(ph)
            swapped[-1] = (st, ph, m)
        yield
    finally:
        for st, ph, m in reversed(swapped):
            if ph is not None:
                st._swap_data_ptr_(ph)
            del ph
            m.close()


def _records(path, n_storages):
    """(data records in key order as (name, data offset, size), every record's (name, local
    header offset, data offset, size) in the archive's order, central directory offset)."""
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        infos = z.infolist()
        start_dir = z.start_dir
        out = []
        for i in infos:
            f.seek(i.header_offset)
            h = f.read(30)
            if h[:4] != b"PK\x03\x04":
                raise RuntimeError(f"{i.filename}: not a local header")
            n, e = struct.unpack("<HH", h[26:30])
            out.append((i.filename, i.header_offset, i.header_offset + 30 + n + e, i.file_size))
    data = {}
    for rec in out:
        m = re.fullmatch(r"[^/]*/data/(\d+)", rec[0])
        if m:
            data[int(m.group(1))] = rec
    if sorted(data) != list(range(n_storages)):
        raise RuntimeError(f"the archive has {len(data)} storage records, the object "
                           f"{n_storages} storages")
    return [data[k] for k in range(n_storages)], out, start_dir


def _patch_crcs(fd, records, crcs, start_dir):
    """Write each record's CRC-32 where the archive keeps it: its local header, or the data
    descriptor after its data (flag bit 3: how torch.save writes to a file object), and its
    central directory entry."""
    for (name, hdr, off, size), crc in zip(records, crcs):
        flags = struct.unpack("<H", os.pread(fd, 2, hdr + 6))[0]
        if flags & 8:
            at = off + size
            if os.pread(fd, 4, at) == b"PK\x07\x08":
                at += 4
            os.pwrite(fd, struct.pack("<I", crc), at)
        else:
            os.pwrite(fd, struct.pack("<I", crc), hdr + 14)
    pos = start_dir
    for (name, _, _, _), crc in zip(records, crcs):
        h = os.pread(fd, 46, pos)
        if h[:4] != b"PK\x01\x02":
            raise RuntimeError(f"{name}: not a central directory entry")
        n, e, c = struct.unpack("<HHH", h[28:34])
        os.pwrite(fd, struct.pack("<I", crc), pos + 16)
        pos += 46 + n + e + c


def _view(st):
    """A memoryview of a CPU storage's bytes (no copy)."""
    nb = st.nbytes()
    if nb == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * nb).from_address(st.data_ptr())).cast("B")


def write_streamed(obj, path, offloaded, read, protocol=2, as_file=False, presized=False):
    """Write to the file `path` (created or truncated) the bytes torch.save(obj, path) writes
    (as_file: those torch.save(obj, f) writes to a file object f: the records' prefix is then
    "archive", where for a path it is the file name's stem).

    offloaded: {storage._cdata: nbytes} of the CPU storages that hold no memory now;
    read(cdata, nbytes) -> a buffer (buffer protocol) with that storage's bytes, read from its
    tier; it is dropped before the next is read. Returns the most bytes held at once by read's
    buffers (one at a time: the largest offloaded storage written). presized: the offloaded
    storages already hold untouched memory of their size (a Placeholders scope), not 0 bytes."""
    order = storage_order(obj, protocol)
    sized = {st._cdata: (st, offloaded[st._cdata]) for st in order
             if st._cdata in offloaded and st.nbytes() == (offloaded[st._cdata] if presized
                                                             else 0)}
    for st in order:
        if st._cdata in offloaded and st._cdata not in sized:
            raise RuntimeError("an offloaded storage holds memory: the Offloader's records "
                               "and the tensors disagree")
    with _sized(() if presized else sized.values()):
        with torch.serialization.skip_data():
            if as_file:
                with open(path, "wb") as fh:
                    _TORCH_SAVE(obj, fh, pickle_protocol=protocol)
            else:
                _TORCH_SAVE(obj, path, pickle_protocol=protocol)
    data, records, start_dir = _records(path, len(order))
    crc_of = {}
    held = 0
    fd = os.open(path, os.O_RDWR)
    try:
        for st, (name, _, off, size) in zip(order, data):
            true = sized[st._cdata][1] if st._cdata in sized else st.nbytes()
            if size != true:
                raise RuntimeError(f"{name}: {size} bytes in the archive, the storage has {true}")
            if st._cdata in sized:
                buf = read(st._cdata, size)
                held = max(held, size)
            elif st.device.type != "cpu":
                buf = _view(st.cpu())
            else:
                buf = _view(st)
            _pwrite_all(fd, buf, off)
            crc_of[name] = zlib.crc32(buf)
            del buf
        if not torch.serialization.get_crc32_options():
            return held  # torch.save writes no CRC-32 (0) then, as the first pass did
        crcs = []
        seed = 0
        for name, hdr, off, size in records:
            if name in crc_of:
                crc = crc_of[name]
            elif name.endswith("/.data/serialization_id"):
                sid = os.pread(fd, size, off)
                sid = sid[:20] + b"%020d" % seed
                _pwrite_all(fd, sid, off)
                crc = zlib.crc32(sid)
            else:
                crc = zlib.crc32(os.pread(fd, size, off))
            crcs.append(crc)
            seed = _hash_combine(seed, crc)
        _patch_crcs(fd, records, crcs, start_dir)
        os.fsync(fd)
    finally:
        os.close(fd)
    return held


def _pwrite_all(fd, buf, off):
    mv = memoryview(buf).cast("B")
    while len(mv):
        n = os.pwrite(fd, mv, off)
        mv = mv[n:]
        off += n


def save(obj, f, offloaded, read, protocol=2, tmp_dir=None, presized=False):
    """write_streamed to f: a path (written under the same name in a temporary directory beside
    it, as torch.save names the records after the file, then renamed over f when complete: a
    failure leaves f as it was) or a writable binary file object (the checkpoint is written to
    a temporary file in tmp_dir, then copied into it)."""
    if isinstance(f, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(f))
        d = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=".teraio-save-")
        tmp = os.path.join(d, os.path.basename(path))
        try:
            held = write_streamed(obj, tmp, offloaded, read, protocol, presized=presized)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            with contextlib.suppress(OSError):
                os.rmdir(d)
        return held
    if not hasattr(f, "write"):
        raise TypeError(f"f: expected a path or a writable binary file object, got "
                        f"{type(f).__name__}")
    fd, tmp = tempfile.mkstemp(dir=tmp_dir, suffix=".tmp")
    os.close(fd)
    try:
        held = write_streamed(obj, tmp, offloaded, read, protocol, as_file=True,
                              presized=presized)
        with open(tmp, "rb") as src:
            while True:
                b = src.read(_CHUNK)
                if not b:
                    break
                f.write(b)
        return held
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _io_buffer(nb):
    """(a buffer of nb bytes from teraio's I/O memory, its address)."""
    from teraio import _core

    buf = _core.IOBuffer(nb)
    return buf, torch.frombuffer(buf, dtype=torch.uint8).data_ptr()


def _is_view(func):
    return bool(getattr(func, "is_view", False))


class Saver:
    """The Offloader's part for checkpoints between steps (Offloader.save(),
    Offloader.streamed_saves()). Owns whether a save runs (active: the hooks between steps
    leave the offloaded tensors offloaded meanwhile) and the most bytes of globals a save held
    in memory at once (peak: report()'s save_peak_bytes). Every call gets the Offloader (off)
    and reads there only what the other parts own: whether a step runs, the offloaded
    storages (off._exec.offloaded(), off._bounded.offloaded()), the engine, ssd_dirs, and
    restore() / _bring_back() to bring tensors back."""

    def __init__(self):
        self.active = False
        self.peak = 0

    @staticmethod
    def offloaded(off):
        """{storage key: (engine id, bytes, name, storage)} of the CPU globals that hold no
        memory now, their bytes in the engine (the executor's, then the unplanned steps' copies)."""
        out = off._exec.offloaded()
        if off._bounded is not None:
            out.update(off._bounded.offloaded())
        return out

    @staticmethod
    def settled(off, what):
        """offloaded(), once their copies are complete and the engine has nothing of the
        executor's in flight (Executor.drain(): on the CUDA path offloads go on past the end of
        a step), so that the waited-for reads of tier_reader take none of the executor's
        completions. Where an offload failed, every tensor is brought back first (`what` says
        for what): nothing is offloaded then."""
        if off._cuda:
            from teraio import _core

            try:
                off._exec.drain()
            except _core.Error as e:
                off._bring_back(f"{what} (an offload that went on past the step failed: {e})")
        return Saver.offloaded(off)

    @staticmethod
    def _refuse_in_step(off, what):
        if off._driver is not None or off._in_step:
            raise RuntimeError(f"Offloader.{what} inside a step: call it between steps (after "
                               "the `with off.step():` block)")

    def save(self, off, obj, f, protocol):
        """Offloader.save() (its docstring says what it does)."""
        self._refuse_in_step(off, "save()")
        if self.active:
            raise RuntimeError("Offloader.save() inside save() (from the object's callable)")
        self.active = True
        try:
            if callable(obj):
                obj = obj()
            src = {} if off._closed else self.settled(off, "Offloader.save()")
            return self._save_streamed(off, obj, f, src, protocol)
        finally:
            self.active = False

    @staticmethod
    def tier_reader(off, src, who, left):
        """read(cdata, nbytes) for write_streamed: that offloaded storage's bytes, from its tier
        (src: offloaded()) into a new buffer; a failure says what `left` says."""
        from teraio import _core

        engine = off._engine

        def read(cd, nb):
            eid, _, name, _ = src[cd]
            buf, ptr = _io_buffer(nb)
            try:
                engine.read(eid, ptr, nb, False)
            except _core.Error as e:
                raise _core.Error(e.args[0] if len(e.args) >= 2 else -5,
                                  f"teraio: {who}: reading {name} ({nb} bytes) from its tier "
                                  f"failed: {e}; {left}; the tensors are as they were") from None
            return buf

        return read

    @staticmethod
    def resident_bytes(off):
        """Bytes of the globals in memory now (those not offloaded)."""
        from teraio.torch._mode import collect_globals

        return sum(st.nbytes() for _, st, _ in collect_globals(off._gmodel, off.optimizer))

    def _save_streamed(self, off, obj, f, src, protocol):
        where = f if isinstance(f, (str, os.PathLike)) else type(f).__name__
        # the globals in memory (not offloaded) while the save runs: the save adds one buffer
        resident = self.resident_bytes(off)

        read = self.tier_reader(off, src, "Offloader.save()",
                                f"nothing was written under {where!r}")
        try:
            held = save(obj, f, {cd: v[1] for cd, v in src.items()}, read, protocol,
                        tmp_dir=off.ssd_dirs[0] if off.ssd_dirs else None)
        except (OSError, RuntimeError) as e:
            left = ("nothing was written under that name" if isinstance(f, (str, os.PathLike))
                    else "the file object may hold part of it")
            e.add_note(f"teraio: Offloader.save() could not write the checkpoint to {where!r}: "
                       f"{left}; the model and optimizer are as they were")
            raise
        self.peak = max(self.peak, resident + held)

    def window(self, off):
        """Offloader.streamed_saves(): a SaveWindow on off."""
        if off._driver is not None or off._in_step:
            raise RuntimeError("Offloader.streamed_saves() inside a step: open it between steps")
        return SaveWindow(off)


def _tensors_in(args, kwargs):
    stack = [args, kwargs]
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())


class _PlaceholderGuard(TorchDispatchMode):
    """Pushed while a SaveWindow's placeholders are in: an operator (other than a view) on a
    tensor with a placeholder would read memory that is not the tensor's, so every tensor is
    brought back (the placeholders out first) before it runs."""

    def __init__(self, window):
        super().__init__()
        self.window = window
        self.armed = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        w = self.window
        if self.armed and w.placeholders is not None and not _is_view(func):
            for t in _tensors_in(args, kwargs):
                try:
                    cd = t.untyped_storage()._cdata
                except (RuntimeError, NotImplementedError):
                    continue
                if cd in w.src:
                    w.abort(f"the operator {func} on an offloaded tensor during a save")
                    break
        return func(*args, **kwargs)


class SaveWindow:
    """Offloader.streamed_saves(): from open() (or `with`) to close(),
    - the model's and optimizer's state_dict() hooks leave the offloaded tensors offloaded
      (as inside Offloader.save()'s callable), on every thread; any other use still brings
      every tensor back. The functions below are streamed on the thread that opened it only:
      on other threads they refuse (RuntimeError) what holds offloaded storages (or what
      cannot be listed), which they would write short, and pass the rest on as they are;
    - torch.save of an object that holds offloaded storages writes it as Offloader.save() does
      (the same bytes as torch.save with every tensor in memory, each offloaded storage read
      from its tier in turn); other objects go to torch.save as they are;
    - safetensors' save_file (as safetensors.torch.save_file, and as `save_file` or
      `safe_save_file` in any loaded module that imported it so: transformers' does) of tensors that include offloaded ones
      writes the file through save_file itself, each offloaded storage given untouched memory
      of its size for the call (its bytes there are zeros), then writes each offloaded tensor's
      bytes from its tier over its place in the file (the header gives it): the same bytes as
      save_file with every tensor in memory. The file is written under a temporary name beside
      the target and renamed into place when complete;
    - the Offloader's model's save_pretrained() runs with every offloaded storage given such
      memory (placeholders), so that code that tells tensors apart by their storage's address
      and size (tied weights, shards) sees them as with every tensor in memory. An operator
      (not a view) on one of them in there brings every tensor back first (_PlaceholderGuard).
      Code that reads a tensor's memory without an operator (numpy(), data_ptr()) in there
      reads zeros: call restore() before such code.
    On a GPU (the Offloader's CUDA path) no placeholders are put in: a placeholder's address is
    host memory, and a kernel that reached it without an operator the guard sees (a library's
    own kernel, a DLPack consumer) would fault and take the process's CUDA context, and the
    training, with it; safetensors' save_file copies each tensor to the host through an operator,
    which the guard would answer by bringing every tensor back in the middle of the write. So
    there torch.save is streamed as Offloader.save() streams it (its first pass gives each
    offloaded storage its size itself, for that pass only), while save_file of offloaded
    tensors and save_pretrained() bring every tensor back first and write from memory.
    The most bytes of globals in memory at once (resident ones and one offloaded storage being
    written) go to report()["save_peak_bytes"]."""

    def __init__(self, off):
        self.off = off
        self.thread = threading.get_ident()
        self.is_open = False
        self.src = {}  # the offloaded storages while placeholders are in: Saver.offloaded()
        self.placeholders = None  # the ExitStack that takes them out
        self.depth = 0
        self.modes = []  # _PlaceholderGuards pushed, until taken off the mode stack
        self.writing = False  # our own writes: no operator may bring tensors back here
        self.patched = []  # (object, attribute, previous value)
        self.resident = 0
        self.held = 0
        self.streamed_bytes = 0  # offloaded bytes written from their tier
        self.brought_back = 0  # aborts: times an operator made the window bring tensors back

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def open(self):
        if self.is_open:
            return
        off = self.off
        if off._closed:  # nothing offloaded
            return
        self.resident = Saver.resident_bytes(off)
        off._saver.active = True
        self.is_open = True
        self._patch()

    def close(self):
        """End the window: the functions back, the placeholders out, the hooks as between
        steps. Idempotent."""
        if not self.is_open:
            return
        self.is_open = False
        self._end_scope()
        for obj, name, prev in reversed(self.patched):
            if prev is _ABSENT:
                delattr(obj, name)
            else:
                setattr(obj, name, prev)
        self.patched = []
        saver = self.off._saver
        saver.active = False
        saver.peak = max(saver.peak, self.resident + self.held)

    # -- the functions patched while open --

    def _patch(self):
        import sys

        self._set(torch, "save", self._wrap_torch_save(torch.save))
        try:
            import safetensors.torch as stt
        except ImportError:
            stt = None
        if stt is not None:
            orig = stt.save_file
            wrapped = self._wrap_save_file(orig)
            self._set(stt, "save_file", wrapped)
            for name, mod in list(sys.modules.items()):
                d = getattr(mod, "__dict__", None)
                if name == stt.__name__ or not isinstance(d, dict):
                    continue
                for attr in ("save_file", "safe_save_file"):
                    if d.get(attr) is orig:
                        self._set(mod, attr, wrapped)
        model = self.off._gmodel
        sp = getattr(model, "save_pretrained", None) if model is not None else None
        if sp is not None:
            self._set(model, "save_pretrained", self._wrap_save_pretrained(sp))

    def _set(self, obj, name, value):
        import types

        # an instance's method: take the instance attribute away again at close (setting the
        # bound method back would leave it an attribute)
        prev = getattr(obj, name) if isinstance(obj, types.ModuleType) else \
            vars(obj).get(name, _ABSENT)
        self.patched.append((obj, name, prev))
        setattr(obj, name, value)

    def _mine(self):
        return self.is_open and threading.get_ident() == self.thread

    def _other_thread(self, what, storages):
        """A save (`what`) on a thread other than the window's: refused when what it writes
        may hold offloaded storages (storages() -> their keys; it may raise: not listed), which
        only the window's thread writes streamed: from here they would be written short (or,
        while the window's placeholders are in, as zeros)."""
        offl = self.src if self.placeholders is not None else Saver.offloaded(self.off)
        if not offl:
            return
        try:
            hit = not offl.keys().isdisjoint(storages())
        except Exception:  # noqa: BLE001 - not listed: it may hold them
            hit = True
        if hit:
            raise RuntimeError(
                f"teraio: {what} on another thread while Offloader.streamed_saves() is open "
                f"(opened on thread {self.thread}, this is {threading.get_ident()}): what it "
                "saves holds offloaded tensors, which only the window's thread writes from "
                "their tier; here they would be written short. Save from the thread that "
                "opened the window, or after it closes (a save then brings the tensors back)")

    def _wrap_torch_save(self, prev):
        def save_(obj, f, *args, **kwargs):
            protocol = kwargs.get("pickle_protocol", 2)
            if self.is_open and not self._mine():
                self._other_thread("torch.save", lambda: {
                    st._cdata for st in storage_order(obj, protocol)})
                return prev(obj, f, *args, **kwargs)
            if not self._mine() or self.writing:
                return prev(obj, f, *args, **kwargs)
            offl = Saver.offloaded(self.off) if self.placeholders is None else self.src
            try:
                order = storage_order(obj, protocol)
            except Exception:  # noqa: BLE001 - torch.save says what it cannot pickle
                if offl:  # it may hold offloaded storages: torch.save would write them short
                    self.abort("torch.save of an object its storages could not be listed in")
                return prev(obj, f, *args, **kwargs)
            hits = {st._cdata for st in order if st._cdata in offl}
            if not hits:
                return prev(obj, f, *args, **kwargs)
            if args or set(kwargs) - {"pickle_protocol"}:  # not what write_streamed writes
                self.abort(f"torch.save(..., {', '.join(sorted(kwargs)) or 'positional'})")
                return prev(obj, f, *args, **kwargs)
            if self.off._cuda:
                return self._torch_save_gpu(prev, obj, f, hits, protocol)
            with self._scope():
                self._stream(obj, f, self.src, hits, protocol, presized=True)
            return None

        return save_

    def _stream(self, obj, f, src, hits, protocol, presized):
        """Write obj to f with the offloaded storages `hits` (keys of src) read from their
        tiers; presized: their placeholders are in (the CPU window), else 0 bytes (GPU)."""
        where = f if isinstance(f, (str, os.PathLike)) else type(f).__name__
        read = self._counted(Saver.tier_reader(
            self.off, src, "torch.save in Offloader.streamed_saves()",
            f"nothing was written under {where!r}"))
        self.writing = True
        try:
            held = save(obj, f, {cd: src[cd][1] for cd in hits}, read, protocol,
                        tmp_dir=self.off.ssd_dirs[0] if self.off.ssd_dirs else None,
                        presized=presized)
        finally:
            self.writing = False
        self.held = max(self.held, held)

    def _torch_save_gpu(self, prev, obj, f, hits, protocol):
        """torch.save on the GPU path: no placeholders; the save gives the offloaded storages
        their size for its first pass itself, as Offloader.save() does."""
        src = Saver.settled(self.off, "torch.save in Offloader.streamed_saves()")
        hits = {cd for cd in hits if cd in src}
        if not hits:  # brought back (a failed offload): from memory
            return prev(obj, f, pickle_protocol=protocol)
        self._stream(obj, f, src, hits, protocol, presized=False)
        return None

    def _wrap_save_file(self, prev):
        def save_file(tensors, filename, metadata=None):
            if self.is_open and not self._mine():
                self._other_thread("safetensors save_file", lambda: {
                    v.untyped_storage()._cdata for v in tensors.values()
                    if isinstance(v, torch.Tensor)})
                return prev(tensors, filename, metadata=metadata)
            if not self._mine() or self.writing or not isinstance(tensors, dict):
                return prev(tensors, filename, metadata=metadata)
            offl = Saver.offloaded(self.off) if self.placeholders is None else self.src
            if self.off._cuda:  # no placeholders on a GPU: from memory
                if any(isinstance(v, torch.Tensor) and v.untyped_storage()._cdata in offl
                       for v in tensors.values()):
                    self.abort("safetensors save_file of offloaded tensors on a GPU")
                return prev(tensors, filename, metadata=metadata)
            if not any(isinstance(v, torch.Tensor) and v.device.type == "cpu"
                       and v.untyped_storage()._cdata in offl for v in tensors.values()):
                return prev(tensors, filename, metadata=metadata)
            with self._scope():
                path = os.path.abspath(os.fspath(filename))
                read = self._counted(Saver.tier_reader(
                    self.off, self.src, "safetensors save_file in Offloader.streamed_saves()",
                    f"nothing was written under {path!r}"))
                fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".teraio-save-")
                os.close(fd)
                self.writing = True
                try:
                    prev(tensors, tmp, metadata=metadata)
                    self.held = max(self.held, _stream_safetensors(tmp, tensors, self.src, read))
                    os.replace(tmp, path)
                finally:
                    self.writing = False
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
            return None

        return save_file

    def _wrap_save_pretrained(self, prev):
        def save_pretrained(*args, **kwargs):
            if not self._mine():
                return prev(*args, **kwargs)
            if self.off._cuda:  # no placeholders on a GPU: from memory
                if Saver.offloaded(self.off):
                    self.abort("save_pretrained() on a GPU")
                return prev(*args, **kwargs)
            with self._scope():
                return prev(*args, **kwargs)

        return save_pretrained

    def _counted(self, read):
        def counted(cd, nb):
            self.streamed_bytes += nb
            return read(cd, nb)

        return counted

    # -- placeholders --

    @contextlib.contextmanager
    def _scope(self):
        """Placeholders in for the duration (nested: the outermost puts them in and out)."""
        if self.depth == 0 and self.placeholders is None:
            self.src = Saver.offloaded(self.off)
            stack = contextlib.ExitStack()
            stack.enter_context(_sized([(v[3], v[1]) for v in self.src.values()]))
            self.placeholders = stack
            mode = _PlaceholderGuard(self)
            mode.__enter__()
            self.modes.append(mode)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0:
                self._end_scope()

    def _end_scope(self):
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        for m in self.modes:
            m.armed = False
        while self.modes and _get_current_dispatch_mode() is self.modes[-1]:
            self.modes.pop().__exit__(None, None, None)
        ph, self.placeholders = self.placeholders, None
        self.src = {}
        if ph is not None:
            ph.close()

    def abort(self, what):
        """Bring every tensor back (for `what`), the placeholders out first; the window stays
        open (later saves write from memory)."""
        if self.writing:
            raise RuntimeError(f"teraio: {what} while Offloader.streamed_saves() writes a file")
        self._end_scope()
        self.brought_back += 1
        self.off._bring_back(what)


_ABSENT = object()


def _stream_safetensors(path, tensors, src, read):
    """Write over the safetensors file `path` (written by save_file with placeholders) each
    tensor's bytes whose storage is offloaded (src), read from its tier one storage at a time.
    Returns the largest buffer held."""
    import json

    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise RuntimeError(f"{path}: not a safetensors file (no header)")
        (n,) = struct.unpack("<Q", head)
        header = json.loads(f.read(n))
    base = 8 + n
    by_storage = {}
    for k, v in tensors.items():
        if isinstance(v, torch.Tensor) and v.device.type == "cpu":
            cd = v.untyped_storage()._cdata
            if cd in src:
                by_storage.setdefault(cd, []).append((k, v))
    held = 0
    fd = os.open(path, os.O_RDWR)
    try:
        for cd, items in by_storage.items():
            nb = src[cd][1]
            buf = read(cd, nb)
            held = max(held, nb)
            mv = memoryview(buf).cast("B")
            for k, v in items:
                a, b = header[k]["data_offsets"]
                start = v.storage_offset() * v.element_size()
                size = v.numel() * v.element_size()
                if b - a != size or start + size > nb:
                    raise RuntimeError(f"{path}: {k}: {b - a} bytes in the file, the tensor has "
                                       f"{size} of a storage of {nb}")
                _pwrite_all(fd, mv[start:start + size], base + a)
            del mv, buf
        os.fsync(fd)
    finally:
        os.close(fd)
    return held
