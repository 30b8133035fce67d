/* teraio._core.IOBuffer: memory for I/O from tio_io_alloc (4 KiB-aligned; 2 MiB-aligned with
 * transparent huge pages advised from 2 MiB), exported through the buffer protocol and freed
 * when the last reference goes. The Offloader gives re-materialised CPU storages this memory
 * (torch.frombuffer + UntypedStorage._swap_data_ptr_), so that O_DIRECT reads and writes reach
 * them without the engine's staging copies. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <teraio/alloc.h>

#include "core.h"

typedef struct {
    PyObject_HEAD void *p;
    Py_ssize_t n;
} IOBufferObject;

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
    self->p = tio_io_alloc((size_t)n);
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
    tio_free(self->p);
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

static PyTypeObject IOBufferType = {
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
    if (madvise((void *)(uintptr_t)lo, (size_t)(hi - lo), MADV_DONTNEED) != 0) {
        return PyErr_Format(PyExc_OSError, "discard_pages: madvise(%llu bytes): %s",
                            (unsigned long long)(hi - lo), strerror(errno));
    }
    return PyLong_FromUnsignedLongLong(hi - lo);
}

static PyMethodDef iobuf_functions[] = {
    { "discard_pages", discard_pages, METH_VARARGS,
      "discard_pages(address, nbytes) -> bytes: MADV_DONTNEED on the whole pages of the range." },
    { "io_buffer_at", io_buffer_at, METH_O,
      "io_buffer_at(address): True if a live IOBuffer's memory starts at address." },
    { NULL, NULL, 0, NULL },
};

int tio_py_add_iobuf(PyObject *m) {
    if (PyType_Ready(&IOBufferType) < 0 || (!live && !(live = PyDict_New()))) {
        return -1;
    }
    if (PyModule_AddFunctions(m, iobuf_functions) < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(m, "IOBuffer", (PyObject *)&IOBufferType);
}
