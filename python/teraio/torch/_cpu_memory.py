"""What the Offloader changes in the whole process on CPU: PyTorch's CPU allocator (teraio's
block cache), glibc's mmap threshold, the cache's prefault thread (CpuMemory, one per
Offloader)."""
from __future__ import annotations

import os
import weakref

from teraio import _core
from teraio.torch._offload_args import (_bytes, _mmap_threshold_arg, _on_cuda, _prefault_arg,
                                        _warn_once)


# how many Offloaders installed teraio's CPU allocator and have neither closed nor been collected
_ALLOC_USERS = [0]
# how many Offloaders set glibc's mmap threshold and have neither closed nor been collected
_MALLOC_USERS = [0]
# what close() leaves glibc with: the threshold its own rule climbs to (it follows the largest
# mapped block freed, up to 32 MiB on 64-bit) and twice that as trim threshold; glibc has no way
# to turn that rule back on once a threshold was set
MALLOC_CLOSED_THRESHOLD = 32 << 20


def _malloc_user_gone():
    """An Offloader that set glibc's mmap threshold closed or was collected: the last one sets
    it where glibc's own rule takes it for PyTorch's tensors (MALLOC_CLOSED_THRESHOLD)."""
    _MALLOC_USERS[0] -= 1
    if _MALLOC_USERS[0] == 0:
        _core.malloc_mmap_threshold(MALLOC_CLOSED_THRESHOLD)


def _alloc_user_gone():
    """An Offloader that installed the allocator closed or was collected: the last one hands
    every request back to PyTorch's allocator and unmaps the kept blocks (those in use stay
    valid)."""
    _ALLOC_USERS[0] -= 1
    if _ALLOC_USERS[0] == 0:
        ta = _torch_alloc()
        if ta is not None:
            ta.uninstall()
        _core.block_cache_set_prefault(False)
        _core.block_cache_trim()


def _torch_alloc():
    """teraio._torch_alloc, or None where it was not built (PyTorch absent at build time) or was
    built against another PyTorch (c10's C++ ABI is not stable: a warning says to rebuild)."""
    try:
        from teraio import _torch_alloc
    except ImportError:
        _torch_alloc = None
    if getattr(_torch_alloc, "torch_version", None) is None:  # a source folder, not the module
        return None
    import torch

    if _torch_alloc.torch_version != torch.__version__:
        _warn_once(f"teraio._torch_alloc was built against PyTorch {_torch_alloc.torch_version}, "
                   f"this is {torch.__version__}: cpu_allocator is off (glibc's mmap threshold "
                   "instead); reinstall teraio with this PyTorch present "
                   "(pip install --no-build-isolation .)")
        return None
    return _torch_alloc


def _torch_alloc_missing():
    """Whether teraio._torch_alloc was not built at all (not: built for another PyTorch)."""
    try:
        from teraio import _torch_alloc
    except ImportError:
        return True
    return getattr(_torch_alloc, "torch_version", None) is None


class CpuMemory:
    """The Offloader's process-wide CPU memory settings (owned by one Offloader, applied while
    it is open and undone at its close()): teraio's block cache as PyTorch's CPU allocator
    (cpu_allocator), glibc's mmap threshold (cpu_mmap_threshold), the cache's prefault thread
    (cpu_prefault) and the cache's bounds (cpu_cache_bytes). Made from the options when the
    Offloader checks its arguments (nothing applied yet); apply() once every argument is
    checked, so that a refused Offloader leaves the process alone."""

    def __init__(self, options):
        o = options
        self._mmap_want = _mmap_threshold_arg(o.cpu_mmap_threshold)  # applied by apply()
        self.cache_bytes = _bytes(o.cpu_cache_bytes, "cpu_cache_bytes")
        self.prefault = _prefault_arg(o.cpu_prefault)
        self._allocator_want = o.cpu_allocator
        self.allocator = False  # cpu_allocator as applied: the block cache serves PyTorch's
        self.mmap_threshold = None  # cpu_mmap_threshold as applied (bytes), or None
        self.installed = False  # the allocator is installed and not uninstalled yet
        self._prefault_on = False
        self._alloc_fin = None
        self._malloc_fin = None

    def apply(self, model, aligned_storages):
        """Install the allocator and set the mmap threshold as the options ask (last in the
        Offloader's __init__)."""
        self.allocator = self._install_allocator(model, self._allocator_want, aligned_storages)
        n = self._mmap_want
        if n == "auto":  # the fallback of cpu_allocator=True where it cannot serve
            n = 64 << 10 if self._allocator_want and not self.allocator else None
        self.mmap_threshold = self._tune_malloc(model, n)

    def set_prefault(self, on):
        """cpu_prefault applies to planned steps only (the cache's thread is the process's):
        restore() brings every tensor back at once, and prefaulting the room beside it only
        raised its peak RSS (by 30-60 MiB on the memory test's model)."""
        on = bool(on) and self.installed
        if on != self._prefault_on:
            _core.block_cache_set_prefault(on)
            self._prefault_on = on

    def planned(self, on):
        """An executor starts (on) or stops: planned steps repeat, so the block cache may keep
        their peak hot; until the next plan nothing is kept hot (see _install_allocator)."""
        if self.installed:
            _core.block_cache_set_bounds(self.cache_bytes, bool(on))

    def _install_allocator(self, model, want, aligned_storages):
        """Apply cpu_allocator (see teraio.OffloadOptions): True if teraio's block cache serves
        PyTorch's CPU tensors now. Where the Offloader cannot discard the pages of what it
        releases (FSDP, CUDA), it would only cost memory: not installed."""
        if not want or _on_cuda(model) or not aligned_storages:
            return False
        ta = _torch_alloc()
        if ta is None:
            if want is True and _torch_alloc_missing():  # "auto": the fallback, no warning
                _warn_once("teraio._torch_alloc is not in this installation of teraio (PyTorch "
                           "was not importable when it was built, as under pip's default build "
                           "isolation): cpu_allocator is off, glibc's mmap threshold applies "
                           "instead (slower on CPU: docs/user-guide.md, 'Memory on CPU'); "
                           "reinstall with PyTorch installed first: pip install "
                           "--no-build-isolation .")
            return False
        # the process's cache (made once); the bounds are set here whether it is new or not:
        # nothing kept hot before the first planned step, whose warm-up and profiled steps'
        # peaks say nothing of the steady state (planned(True) turns follow_peak on)
        _core.block_cache_enable()
        _core.block_cache_set_bounds(self.cache_bytes, False)
        if not ta.install(1 << 20):
            return False
        _ALLOC_USERS[0] += 1
        self.installed = True
        self._alloc_fin = weakref.finalize(self, _alloc_user_gone)
        self._alloc_fin.atexit = False  # at exit the process's memory goes anyway
        return True

    def _tune_malloc(self, model, n):
        """Apply cpu_mmap_threshold (bytes or None; see teraio.OffloadOptions) until close(): the
        value set, or None."""
        if n is None:
            return None
        if _on_cuda(model):  # CUDA: the device memory is what is budgeted
            return None
        if "MALLOC_MMAP_THRESHOLD_" in os.environ or "glibc.malloc.mmap_threshold" in \
                os.environ.get("GLIBC_TUNABLES", ""):
            return None
        if not _core.malloc_mmap_threshold(n):
            return None
        _MALLOC_USERS[0] += 1
        self._malloc_fin = weakref.finalize(self, _malloc_user_gone)
        self._malloc_fin.atexit = False  # at exit the process's memory goes anyway
        return n

    def close(self):
        """Undo what apply() did (the Offloader's close()); a second call does nothing."""
        if self.installed:
            self.installed = False
            self._alloc_fin()
        if self._malloc_fin is not None:
            self._malloc_fin()  # once: a finalizer that ran does nothing

    def report(self):
        """report()'s cpu_* entries."""
        out = {"cpu_mmap_threshold": self.mmap_threshold,
               "cpu_prefault": bool(self.allocator and self.prefault), "cpu_allocator": None}
        if self.allocator:
            out["cpu_allocator"] = _core.block_cache_stats()
            ta = _torch_alloc()
            out["cpu_allocator"]["fallbacks"] = ta.fallbacks() if ta else 0
            out["cpu_allocator"]["installed"] = bool(self.installed and ta and ta.installed())
        return out
