/* teraio._core.IOBuffer: memory for I/O from tio_io_alloc (4 KiB-aligned; 2 MiB-aligned with
 * transparent huge pages advised from 2 MiB), exported through the buffer protocol and freed
 * when the last reference goes. The Offloader gives re-materialised CPU storages this memory
 * (torch.frombuffer + UntypedStorage._swap_data_ptr_), so that O_DIRECT reads and writes reach
 * them without the engine's staging copies. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <teraio/alloc.h>
#include <teraio/blockcache.h>

#include "core.h"
#include "torch_alloc_api.h"

typedef struct {
    PyObject_HEAD void *p;
    Py_ssize_t n;
    int from_cache; /* p is a block of the block cache */
} IOBufferObject;

/* The process-wide block cache (block_cache_enable), or NULL. Made once and never freed: blocks
 * handed to PyTorch (teraio._torch_alloc) may outlive every Offloader. Read without the GIL by
 * the allocator's threads, written once under it before the allocator is installed. */
static struct tio_bcache *g_bc;

/* The addresses of the live IOBuffers: {address: nbytes} (io_buffer_at). */
static PyObject *live;

static PyObject *iobuf_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = { "nbytes", NULL };
    Py_ssize_t n;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kw, &n)) {
        return NULL;
    }
    if (n <= 0) {
        PyErr_Format(PyExc_ValueError, "IOBuffer: nbytes must be positive, not %zd", n);
        return NULL;
    }
    IOBufferObject *self = (IOBufferObject *)type->tp_alloc(type, 0);
    if (!self) {
        return NULL;
    }
    if (g_bc) {
        self->from_cache = tio_bcache_alloc(g_bc, (uint64_t)n, &self->p) == 0;
    }
    if (!self->p) {
        self->p = tio_io_alloc((size_t)n);
    }
    if (!self->p) {
        Py_DECREF(self);
        return PyErr_Format(PyExc_MemoryError, "IOBuffer: cannot allocate %zd bytes", n);
    }
    self->n = n;
    PyObject *key = PyLong_FromVoidPtr(self->p), *val = PyLong_FromSsize_t(n);
    int rc = key && val ? PyDict_SetItem(live, key, val) : -1;
    Py_XDECREF(key);
    Py_XDECREF(val);
    if (rc < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void iobuf_dealloc(IOBufferObject *self) {
    if (self->p && self->n) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb); /* dealloc may run while an exception is set */
        PyObject *key = PyLong_FromVoidPtr(self->p);
        if (!key || PyDict_DelItem(live, key) < 0) {
            PyErr_Clear();
        }
        Py_XDECREF(key);
        PyErr_Restore(et, ev, tb);
    }
    if (self->from_cache) {
        (void)tio_bcache_release(g_bc, self->p);
    } else {
        tio_free(self->p);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int iobuf_getbuffer(IOBufferObject *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->n, 0, flags);
}

static PyObject *iobuf_address(IOBufferObject *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->p);
}

static Py_ssize_t iobuf_len(IOBufferObject *self) {
    return self->n;
}

static PyBufferProcs iobuf_as_buffer = { (getbufferproc)iobuf_getbuffer, NULL };
static PySequenceMethods iobuf_as_sequence = { .sq_length = (lenfunc)iobuf_len };
static PyGetSetDef iobuf_getset[] = {
    { "address", (getter)iobuf_address, NULL, "the memory's address", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject iobuf_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.IOBuffer",
    .tp_doc = "IOBuffer(nbytes): writable memory for O_DIRECT I/O (4 KiB-aligned; 2 MiB-aligned "
              "with huge pages advised from 2 MiB), freed with the last reference.",
    .tp_basicsize = sizeof(IOBufferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = iobuf_new,
    .tp_dealloc = (destructor)iobuf_dealloc,
    .tp_as_buffer = &iobuf_as_buffer,
    .tp_as_sequence = &iobuf_as_sequence,
    .tp_getset = iobuf_getset,
};

static PyObject *io_buffer_at(PyObject *mod, PyObject *addr) {
    (void)mod;
    int rc = PyDict_Contains(live, addr);
    return rc < 0 ? NULL : PyBool_FromLong(rc);
}

/* discard_pages(address, nbytes) -> int: hand the whole pages inside [address, address + nbytes)
 * back to the kernel (MADV_DONTNEED); returns the bytes discarded. For a storage's memory that
 * its allocator is about to get back (a release after a completed offload): the allocator may
 * keep the block for reuse, but the process no longer holds its pages, and they come back
 * zero-filled only if the block is used again. The caller owns the range: its contents are lost. */
static PyObject *discard_pages(PyObject *mod, PyObject *args) {
    (void)mod;
    unsigned long long addr = 0;
    unsigned long long n = 0;
    if (!PyArg_ParseTuple(args, "KK", &addr, &n)) {
        return NULL;
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t pg = page > 0 ? (uint64_t)page : 4096;
    if (addr == 0 || n > UINT64_MAX - addr) {
        PyErr_Format(PyExc_ValueError, "discard_pages: bad range (address %llu, %llu bytes)", addr,
                     n);
        return NULL;
    }
    uint64_t lo = (addr + pg - 1) / pg * pg;
    uint64_t hi = (addr + n) / pg * pg;
    if (hi <= lo) {
        return PyLong_FromLong(0);
    }
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an address from Python
    if (madvise((void *)(uintptr_t)lo, (size_t)(hi - lo), MADV_DONTNEED) != 0) {
        return PyErr_Format(PyExc_OSError, "discard_pages: madvise(%llu bytes): %s",
                            (unsigned long long)(hi - lo), tio_strerror(-errno));
    }
    return PyLong_FromUnsignedLongLong(hi - lo);
}

/* ---- the block cache (teraio/blockcache.h), shared with teraio._torch_alloc -------------- */

static void *api_alloc(uint64_t n) {
    void *p = NULL;
    return g_bc && tio_bcache_alloc(g_bc, n, &p) == 0 ? p : NULL;
}

static int api_release(void *p) {
    return g_bc ? tio_bcache_release(g_bc, p) : TIO_ENOTFOUND;
}

static const struct tio_torch_alloc_api block_cache_api = {
    .version = TIO_TORCH_ALLOC_API_VERSION,
    .alloc = api_alloc,
    .release = api_release,
};

static PyObject *block_cache_enable(PyObject *mod, PyObject *args, PyObject *kwds) {
    (void)mod;
    static char *kw[] = { "cache_bytes", "follow_peak", "huge_pages",
                          "resize_kept", "prefault",    NULL };
    unsigned long long cache = 0;
    int follow = 1, huge = 1, resize = 1, prefault = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Kpppp", kw, &cache, &follow, &huge, &resize,
                                     &prefault)) {
        return NULL;
    }
    if (g_bc) {
        Py_RETURN_FALSE;
    }
    struct tio_bcache_params p = tio_bcache_params_default();
    p.cache_bytes = cache;
    p.follow_peak = follow;
    p.huge_pages = huge;
    p.resize_kept = resize;
    p.prefault = prefault;
    int rc = tio_bcache_new(&p, &g_bc);
    if (rc < 0) {
        return tio_py_raise(rc, "block_cache_enable");
    }
    Py_RETURN_TRUE;
}

/* every field of struct tio_bcache_stats (all uint64_t), by name */
#define BC_STAT(f) \
    { #f, offsetof(struct tio_bcache_stats, f) }
static const struct {
    const char *name;
    size_t off;
} bc_stats[] = {
    BC_STAT(in_use_bytes),     BC_STAT(peak_in_use_bytes), BC_STAT(hot_bytes),
    BC_STAT(cold_bytes),       BC_STAT(mapped_bytes),      BC_STAT(allocs),
    BC_STAT(hot_hits),         BC_STAT(cold_hits),         BC_STAT(maps),
    BC_STAT(resized_hits),     BC_STAT(grown_bytes),       BC_STAT(faulting_bytes),
    BC_STAT(prefaulted_bytes), BC_STAT(prefaulting_bytes), BC_STAT(evicted_bytes),
    BC_STAT(discarded_bytes),  BC_STAT(unmapped_bytes),    BC_STAT(blocks),
};
#undef BC_STAT
_Static_assert(sizeof bc_stats / sizeof bc_stats[0] * sizeof(uint64_t) ==
                   sizeof(struct tio_bcache_stats),
               "bc_stats must name every field of struct tio_bcache_stats");

static PyObject *block_cache_stats(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    if (!g_bc) {
        Py_RETURN_NONE;
    }
    struct tio_bcache_stats s;
    tio_bcache_stats(g_bc, &s);
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < sizeof bc_stats / sizeof bc_stats[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&s + bc_stats[i].off, sizeof v);
        PyObject *o = PyLong_FromUnsignedLongLong(v);
        if (!o || PyDict_SetItemString(d, bc_stats[i].name, o) < 0) {
            Py_XDECREF(o);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(o);
    }
    return d;
}

static PyObject *block_cache_discard(PyObject *mod, PyObject *arg) {
    (void)mod;
    void *p = PyLong_AsVoidPtr(arg);
    if (!p && PyErr_Occurred()) {
        return NULL;
    }
    return PyBool_FromLong(g_bc && p && tio_bcache_discard(g_bc, p) == 0);
}

static PyObject *block_cache_block_size(PyObject *mod, PyObject *arg) {
    (void)mod;
    void *p = PyLong_AsVoidPtr(arg);
    if (!p && PyErr_Occurred()) {
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(g_bc && p ? tio_bcache_block_size(g_bc, p) : 0);
}

static PyObject *block_cache_set_bounds(PyObject *mod, PyObject *args, PyObject *kwds) {
    (void)mod;
    static char *kw[] = { "cache_bytes", "follow_peak", NULL };
    unsigned long long cache = 0;
    int follow = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Kp", kw, &cache, &follow)) {
        return NULL;
    }
    if (!g_bc) {
        Py_RETURN_FALSE;
    }
    tio_bcache_set_bounds(g_bc, cache, follow);
    Py_RETURN_TRUE;
}

static PyObject *block_cache_set_prefault(PyObject *mod, PyObject *arg) {
    (void)mod;
    int on = PyObject_IsTrue(arg);
    if (on < 0) {
        return NULL;
    }
    if (!g_bc) {
        Py_RETURN_FALSE;
    }
    tio_bcache_set_prefault(g_bc, on);
    Py_RETURN_TRUE;
}

static PyObject *block_cache_trim(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    return PyLong_FromUnsignedLongLong(g_bc ? tio_bcache_trim(g_bc) : 0);
}

static PyMethodDef iobuf_functions[] = {
    { "block_cache_enable", (PyCFunction)(void (*)(void))block_cache_enable,
      METH_VARARGS | METH_KEYWORDS,
      "block_cache_enable(cache_bytes=0, follow_peak=True, huge_pages=True, resize_kept=True, "
      "prefault=False) -> bool: make the "
      "process-wide block cache (teraio/blockcache.h); False if it exists already (its settings "
      "stay). IOBuffers then come from it, and teraio._torch_alloc can serve PyTorch from it." },
    { "block_cache_stats", block_cache_stats, METH_NOARGS,
      "block_cache_stats() -> dict or None: the block cache's counters (None: not enabled)." },
    { "block_cache_discard", block_cache_discard, METH_O,
      "block_cache_discard(address) -> bool: hand the pages of the cache's in-use block at address "
      "back to the OS now (False: not such a block; then nothing is done)." },
    { "block_cache_block_size", block_cache_block_size, METH_O,
      "block_cache_block_size(address) -> int: the capacity of the in-use block at address, or "
      "0." },
    { "block_cache_set_bounds", (PyCFunction)(void (*)(void))block_cache_set_bounds,
      METH_VARARGS | METH_KEYWORDS,
      "block_cache_set_bounds(cache_bytes, follow_peak) -> bool: change the hot bounds and "
      "restart the peak from the bytes in use now (False: the cache is not enabled)." },
    { "block_cache_set_prefault", block_cache_set_prefault, METH_O,
      "block_cache_set_prefault(on) -> bool: turn the cache's prefault thread on or off "
      "(False: the cache is not enabled)." },
    { "block_cache_trim", block_cache_trim, METH_NOARGS,
      "block_cache_trim() -> int: unmap every kept block; the bytes unmapped." },
    { "discard_pages", discard_pages, METH_VARARGS,
      "discard_pages(address, nbytes) -> bytes: MADV_DONTNEED on the whole pages of the range." },
    { "io_buffer_at", io_buffer_at, METH_O,
      "io_buffer_at(address): True if a live IOBuffer's memory starts at address." },
    { NULL, NULL, 0, NULL },
};

int tio_py_add_iobuf(PyObject *m) {
    if (PyType_Ready(&iobuf_type) < 0 || (!live && !(live = PyDict_New()))) {
        return -1;
    }
    PyObject *cap = PyCapsule_New((void *)&block_cache_api, TIO_TORCH_ALLOC_CAPSULE, NULL);
    if (!cap || PyModule_AddObject(m, "_block_cache_api", cap) < 0) {
        Py_XDECREF(cap);
        return -1;
    }
    if (PyModule_AddFunctions(m, iobuf_functions) < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(m, "IOBuffer", (PyObject *)&iobuf_type);
}
