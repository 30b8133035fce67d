/* teraio._core.RtEngine: the migration engine as used by the PyTorch layer (private). */
#include <teraio/io.h>

#include "runtime_types.h"

/* ---- RtEngine ----------------------------------------------------------------------------- */

static void rtengine_dealloc(RtEngineObject *self) {
    if (self->e) {
        Py_BEGIN_ALLOW_THREADS tio_engine_free(self->e);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* RtEngine(dirs, host_tier_bytes, backend, verify, backend_options, preallocate) */
static int rtengine_init(RtEngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = { "dirs",        "host_tier_bytes", "backend",     "verify", "options",
                              "preallocate", "queue_depth",     "chunk_bytes", NULL };
    PyObject *dirs;
    unsigned long long host = 0;
    const char *backend = NULL, *options = NULL;
    int verify = 0, prealloc = 1;
    unsigned int depth = 0;
    unsigned long long chunk = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|KzpzpIK", kwlist, &PyList_Type, &dirs, &host,
                                     &backend, &verify, &options, &prealloc, &depth, &chunk)) {
        return -1;
    }
    Py_ssize_t nd = PyList_GET_SIZE(dirs);
    const char **d = nd ? PyMem_Calloc((size_t)nd, sizeof *d) : NULL;
    if (nd && !d) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        d[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(dirs, i));
        if (!d[i]) {
            PyMem_Free(d);
            return -1;
        }
    }
    struct tio_engine_params p = tio_engine_params_default();
    p.dirs = d;
    p.ndirs = (size_t)nd;
    p.host_tier_bytes = host;
    p.backend = backend;
    p.verify = verify;
    p.backend_options = options;
    p.preallocate = prealloc;
    if (depth) {
        p.queue_depth = depth;
    }
    if (chunk) {
        p.chunk_bytes = chunk;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_engine_new(&p, &self->e);
    Py_END_ALLOW_THREADS PyMem_Free(d);
    if (rc < 0) {
        tio_py_raise(rc, "engine");
        return -1;
    }
    return 0;
}

static PyObject *rtengine_reserve(RtEngineObject *self, PyObject *arg) {
    unsigned long long b = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_engine_reserve(self->e, b);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "engine reserve");
    }
    Py_RETURN_NONE;
}

static PyObject *rtengine_stats(RtEngineObject *self, PyObject *unused) {
    (void)unused;
    struct tio_engine_stats s;
    (void)tio_engine_stats(self->e, &s);
    return Py_BuildValue("{s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K}", "backend", s.backend,
                         "requests_failed", (unsigned long long)s.requests_failed, "bytes_written",
                         (unsigned long long)s.bytes_written, "bytes_read",
                         (unsigned long long)s.bytes_read, "retries", (unsigned long long)s.retries,
                         "crc_errors", (unsigned long long)s.crc_errors, "ssd_capacity_bytes",
                         (unsigned long long)s.ssd_capacity_bytes, "ssd_used_bytes",
                         (unsigned long long)s.ssd_used_bytes, "host_capacity_bytes",
                         (unsigned long long)s.host_capacity_bytes, "host_used_bytes",
                         (unsigned long long)s.host_used_bytes, "busy_s", s.busy_s, "staged_bytes",
                         (unsigned long long)s.staged_bytes);
}

/* One request, waited for: the caller is the only user of the engine at this time. */
#define SYNC_TAG (UINT64_MAX - 1)

static int sync_wait(struct tio_engine *e, uint64_t bytes) {
    struct tio_completion c;
    for (;;) {
        int n = tio_engine_wait(e, &c, 1, 1, -1);
        if (n < 0) {
            return n;
        }
        if (n == 1 && c.tag == SYNC_TAG) {
            if (c.res < 0) {
                return tio_set_error((int)c.res, "%s", tio_engine_last_error(e));
            }
            return (uint64_t)c.res == bytes
                       ? 0
                       : tio_set_error(TIO_EIO, "short transfer: %lld of %llu bytes",
                                       (long long)c.res, (unsigned long long)bytes);
        }
    }
}

/* write(id, ptr, bytes, tier, device=False): write host (or device) memory and wait for it. */
static PyObject *rtengine_write(RtEngineObject *self, PyObject *args) {
    unsigned long long id, ptr, bytes;
    int tier, device = 0;
    if (!PyArg_ParseTuple(args, "KKKi|p", &id, &ptr, &bytes, &tier, &device)) {
        return NULL;
    }
    int rc;
    int32_t mem = device ? TIO_MEM_DEVICE : TIO_MEM_HOST;
    Py_BEGIN_ALLOW_THREADS rc = tio_engine_write(self->e, id, (const void *)(uintptr_t)ptr, bytes,
                                                 mem, tier, TIO_PRIO_URGENT, SYNC_TAG);
    if (rc == 0) {
        rc = sync_wait(self->e, bytes);
    }
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "engine write");
    }
    Py_RETURN_NONE;
}

/* read(id, ptr, bytes, device=False): read into host (or device) memory and wait for it. */
static PyObject *rtengine_read(RtEngineObject *self, PyObject *args) {
    unsigned long long id, ptr, bytes;
    int device = 0;
    if (!PyArg_ParseTuple(args, "KKK|p", &id, &ptr, &bytes, &device)) {
        return NULL;
    }
    int rc;
    int32_t mem = device ? TIO_MEM_DEVICE : TIO_MEM_HOST;
    Py_BEGIN_ALLOW_THREADS rc =
        tio_engine_read(self->e, id, (void *)(uintptr_t)ptr, bytes, mem, TIO_PRIO_URGENT, SYNC_TAG);
    if (rc == 0) {
        rc = sync_wait(self->e, bytes);
    }
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "engine read");
    }
    Py_RETURN_NONE;
}

static PyObject *rtengine_drop(RtEngineObject *self, PyObject *arg) {
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int rc = tio_engine_drop(self->e, id);
    if (rc < 0 && rc != TIO_ENOTFOUND) {
        return tio_py_raise(rc, "engine drop");
    }
    Py_RETURN_NONE;
}

static PyMethodDef rtengine_methods[] = {
    { "reserve", (PyCFunction)rtengine_reserve, METH_O, "reserve(bytes)" },
    { "write", (PyCFunction)rtengine_write, METH_VARARGS,
      "write(id, ptr, bytes, tier, device=False): memory into the engine, waited for" },
    { "read", (PyCFunction)rtengine_read, METH_VARARGS,
      "read(id, ptr, bytes, device=False): back into memory, waited for" },
    { "drop", (PyCFunction)rtengine_drop, METH_O, "drop(id): forget a stored tensor" },
    { "stats", (PyCFunction)rtengine_stats, METH_NOARGS, "stats() -> dict" },
    { NULL, NULL, 0, NULL },
};

PyTypeObject RtEngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.RtEngine",
    .tp_basicsize = sizeof(RtEngineObject),
    .tp_dealloc = (destructor)rtengine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The migration engine as used by the PyTorch layer (private).",
    .tp_methods = rtengine_methods,
    .tp_init = (initproc)rtengine_init,
    .tp_new = PyType_GenericNew,
};
