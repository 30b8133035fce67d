"""What the Offloader changes in the whole process on CPU: PyTorch's CPU allocator (teraio's
block cache), glibc's mmap threshold, the cache's prefault thread (teraio.torch.offload)."""
from __future__ import annotations

import os
import weakref

from teraio import _core
from teraio.torch._offload_args import _on_cuda, _warn_once


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
    """Offloader methods: the process-wide CPU memory settings."""

    def _set_prefault(self, on):
        """cpu_prefault applies to planned steps only (the cache's thread is the process's):
        restore() brings every tensor back at once, and prefaulting the room beside it only
        raised its peak RSS (by 30-60 MiB on the memory test's model)."""
        on = bool(on) and self._alloc_installed
        if on != self._prefault_on:
            _core.block_cache_set_prefault(on)
            self._prefault_on = on

    def _install_allocator(self, model, want):
        """Apply cpu_allocator (see teraio.OffloadOptions): True if teraio's block cache serves
        PyTorch's CPU tensors now. Where the Offloader cannot discard the pages of what it
        releases (FSDP, CUDA), it would only cost memory: not installed."""
        if not want or _on_cuda(model) or not self.aligned_storages:
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
        # peaks say nothing of the steady state (_start_runtime turns follow_peak on)
        _core.block_cache_enable()
        _core.block_cache_set_bounds(self.cpu_cache_bytes, False)
        if not ta.install(1 << 20):
            return False
        _ALLOC_USERS[0] += 1
        self._alloc_installed = True
        self._alloc_fin = weakref.finalize(self, _alloc_user_gone)
        self._alloc_fin.atexit = False  # at exit the process's memory goes anyway
        return True

    def _uninstall_allocator(self):
        if self._alloc_installed:
            self._alloc_installed = False
            self._alloc_fin()

    def _tune_malloc(self, model, n):
        """Apply cpu_mmap_threshold (bytes or None; see teraio.OffloadOptions) until close(): the
        value set, or None. Last in __init__, so that a refused Offloader leaves the process's
        malloc alone."""
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

    def _untune_malloc(self):
        fin = getattr(self, "_malloc_fin", None)
        if fin is not None:
            fin()  # once: a finalizer that ran does nothing
