/*
 * teraio._core.Engine: the migration engine (include/teraio/io.h) for Python.
 *
 *     e = teraio._core.Engine(["/mnt/nvme0/tio"], host_tier_bytes=1 << 30)
 *     e.write(42, array, tag=1)             # any object with the buffer protocol
 *     e.write(43, (ptr, nbytes), device=True, tier="host", priority="urgent", tag=2)
 *     for tag, res in e.wait(min=2): ...    # res = bytes or a negative status
 *     e.read(42, out_array, tag=3)          # out_array must be writable
 *
 * A buffer passed to write/read is kept alive (a memoryview is held) until its completion has
 * been returned by poll/wait. wait() releases the GIL. Engine methods may be called from
 * several threads (the C engine is thread-safe).
 */
#include <teraio/io.h>

#include "core.h"

typedef struct {
    PyObject_HEAD struct tio_engine *e;
    PyObject *pins;   /* dict: tag -> list of memoryviews kept alive until completion */
    Py_ssize_t users; /* Runtimes driving this engine (tio_py_engine_acquire): close() waits */
} EngineObject;

static PyTypeObject engine_type;

/* An argument that is an int (taken as is) or one of two names. */
struct choice {
    const char *what;    /* the argument, for the error */
    const char *name[2]; /* its names ... */
    int32_t value[2];    /* ... and their values */
};
static const struct choice tier_choice = { "tier",
                                           { "ssd", "host" },
                                           { TIO_TIER_SSD, TIO_TIER_HOST } };
static const struct choice priority_choice = { "priority",
                                               { "normal", "urgent" },
                                               { TIO_PRIO_NORMAL, TIO_PRIO_URGENT } };

/* *out from o per c; 0, or -1 with ValueError ("tier must be 'ssd' or 'host'"). */
static int parse_choice(PyObject *o, const struct choice *c, int32_t *out) {
    if (PyLong_Check(o)) {
        *out = (int32_t)PyLong_AsLong(o);
        return PyErr_Occurred() ? -1 : 0;
    }
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    for (int i = 0; s && i < 2; i++) {
        if (!strcmp(s, c->name[i])) {
            *out = c->value[i];
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "%s must be '%s' or '%s'", c->what, c->name[0], c->name[1]);
    return -1;
}

static int check_open(EngineObject *self) {
    if (!self->e) {
        PyErr_SetString(PyExc_ValueError, "engine is closed");
        return -1;
    }
    return 0;
}

/* Resolve `buf` (buffer object or (ptr, nbytes)) to a pointer and size; *pin receives a new
 * memoryview to keep alive, or NULL for raw pointers. */
static int get_buffer(PyObject *buf, int writable, void **ptr, uint64_t *bytes, PyObject **pin) {
    *pin = NULL;
    if (PyTuple_Check(buf)) {
        unsigned long long p = 0, n = 0;
        if (!PyArg_ParseTuple(buf, "KK;a raw buffer is a (ptr, nbytes) tuple", &p, &n)) {
            return -1;
        }
        // NOLINTNEXTLINE(performance-no-int-to-ptr): an address from Python
        *ptr = (void *)(uintptr_t)p;
        *bytes = n;
        return 0;
    }
    PyObject *mv = PyMemoryView_FromObject(buf);
    if (!mv) {
        return -1;
    }
    Py_buffer *view = PyMemoryView_GET_BUFFER(mv);
    if (!PyBuffer_IsContiguous(view, 'A')) {
        Py_DECREF(mv);
        PyErr_SetString(PyExc_ValueError, "buffer must be contiguous");
        return -1;
    }
    if (writable && view->readonly) {
        Py_DECREF(mv);
        PyErr_SetString(PyExc_ValueError, "read() needs a writable buffer");
        return -1;
    }
    *ptr = view->buf;
    *bytes = (uint64_t)view->len;
    *pin = mv;
    return 0;
}

static int pin_add(EngineObject *self, uint64_t tag, PyObject *mv) {
    if (!mv) {
        return 0;
    }
    PyObject *key = PyLong_FromUnsignedLongLong(tag);
    if (!key) {
        return -1;
    }
    PyObject *list = PyDict_GetItemWithError(self->pins, key);
    int rc = -1;
    if (list) {
        rc = PyList_Append(list, mv);
    } else if (!PyErr_Occurred()) {
        list = PyList_New(0);
        if (list) {
            rc = PyList_Append(list, mv) < 0 ? -1 : PyDict_SetItem(self->pins, key, list);
            Py_DECREF(list);
        }
    }
    Py_DECREF(key);
    return rc;
}

static void pin_release(EngineObject *self, uint64_t tag) {
    PyObject *key = PyLong_FromUnsignedLongLong(tag);
    if (!key) {
        PyErr_Clear();
        return;
    }
    PyObject *list = PyDict_GetItemWithError(self->pins, key);
    if (list && PyList_GET_SIZE(list) > 0) {
        (void)PySequence_DelItem(list, 0);
        if (PyList_GET_SIZE(list) == 0) {
            (void)PyDict_DelItem(self->pins, key);
        }
    }
    PyErr_Clear();
    Py_DECREF(key);
}

static PyObject *completions_to_list(EngineObject *self, struct tio_completion *c, int n) {
    PyObject *out = PyList_New(n);
    if (!out) {
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        pin_release(self, c[i].tag);
        PyObject *t = Py_BuildValue("(KL)", (unsigned long long)c[i].tag, (long long)c[i].res);
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static int engine_init(EngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {
        "dirs",    "host_tier_bytes", "backend", "chunk_bytes",     "queue_depth",
        "verify",  "max_requests",    "retries", "backend_options", "reserve_bytes",
        "threads", "preallocate",     NULL
    };
    PyObject *dirs_obj;
    unsigned long long host = 0, chunk = TIO_ENGINE_DEFAULT_CHUNK, reserve = 0;
    unsigned int depth = TIO_ENGINE_DEFAULT_DEPTH, maxreq = TIO_ENGINE_DEFAULT_MAX_REQUESTS;
    unsigned int retries = 2, threads = 0;
    int verify = 0, prealloc = 1;
    const char *backend = NULL, *opts = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|KzKIpIIzKIp", kwlist, &dirs_obj, &host, &backend,
                                     &chunk, &depth, &verify, &maxreq, &retries, &opts, &reserve,
                                     &threads, &prealloc)) {
        return -1;
    }
    if (self->e) {
        PyErr_SetString(PyExc_RuntimeError, "Engine already initialised");
        return -1;
    }
    PyObject *seq = PySequence_Fast(dirs_obj, "dirs must be a sequence of paths");
    if (!seq) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **dirs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*dirs));
    PyObject **encoded = PyMem_Calloc((size_t)(n ? n : 1), sizeof(PyObject *));
    int rc = 0;
    if (!dirs || !encoded) {
        PyErr_NoMemory();
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i), &encoded[i])) {
            rc = -1;
            break;
        }
        dirs[i] = PyBytes_AS_STRING(encoded[i]);
    }
    if (rc == 0) {
        struct tio_engine_params p = tio_engine_params_default();
        p.dirs = dirs;
        p.ndirs = (size_t)n;
        p.host_tier_bytes = host;
        if (backend) { /* None: the default, "auto" */
            p.backend = backend;
        }
        if (chunk) { /* 0: the default */
            p.chunk_bytes = chunk;
        }
        if (depth) { /* 0: the default */
            p.queue_depth = depth;
        }
        p.preallocate = prealloc;
        p.verify = verify;
        p.max_requests = maxreq;
        p.retries = retries;
        p.backend_options = opts;
        p.ssd_reserve_bytes = reserve;
        p.threads = threads;
        struct tio_engine *e = NULL;
        PyThreadState *ts = PyEval_SaveThread();
        int st = tio_engine_new(&p, &e);
        PyEval_RestoreThread(ts);
        if (st < 0) {
            tio_py_raise(st, "Engine");
            rc = -1;
        } else {
            self->e = e;
        }
    }
    for (Py_ssize_t i = 0; encoded && i < n; i++) {
        Py_XDECREF(encoded[i]);
    }
    PyMem_Free(encoded);
    PyMem_Free(dirs);
    Py_DECREF(seq);
    if (rc == 0 && !self->pins) {
        self->pins = PyDict_New();
        if (!self->pins) {
            rc = -1;
        }
    }
    return rc;
}

static void close_engine(EngineObject *self) {
    if (self->e) {
        struct tio_engine *e = self->e;
        self->e = NULL;
        Py_BEGIN_ALLOW_THREADS tio_engine_free(e); /* waits for in-flight transfers */
        Py_END_ALLOW_THREADS
    }
    if (self->pins) {
        PyDict_Clear(self->pins);
    }
}

static void engine_dealloc(EngineObject *self) {
    close_engine(self);
    Py_XDECREF(self->pins);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *engine_close(EngineObject *self, PyObject *unused) {
    (void)unused;
    if (self->users > 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Engine.close(): a Runtime still drives this engine (drop it first)");
        return NULL;
    }
    close_engine(self);
    Py_RETURN_NONE;
}

static PyObject *engine_enter(EngineObject *self, PyObject *unused) {
    (void)unused;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *engine_exit(EngineObject *self, PyObject *args) {
    (void)args;
    PyObject *r = engine_close(self, NULL);
    if (!r) {
        return NULL;
    }
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

/* One write (or read) request to the engine, as its request struct. */
static int engine_submit(struct tio_engine *e,
                         int write,
                         uint64_t id,
                         void *ptr,
                         uint64_t bytes,
                         int32_t mem,
                         int32_t tier,
                         int32_t prio,
                         uint64_t tag) {
    if (write) {
        return tio_engine_write(e, &(struct tio_engine_write_request){
                                       .struct_size = sizeof(struct tio_engine_write_request),
                                       .tensor_id = id,
                                       .src = ptr,
                                       .bytes = bytes,
                                       .mem = mem,
                                       .tier = tier,
                                       .priority = prio,
                                       .tag = tag });
    }
    return tio_engine_read(
        e, &(struct tio_engine_read_request){ .struct_size = sizeof(struct tio_engine_read_request),
                                              .tensor_id = id,
                                              .dst = ptr,
                                              .bytes = bytes,
                                              .mem = mem,
                                              .priority = prio,
                                              .tag = tag });
}

static PyObject *submit(EngineObject *self, PyObject *args, PyObject *kw, int write) {
    static char *kwlist_w[] = { "tensor_id", "buffer", "tier", "priority", "tag", "device", NULL };
    static char *kwlist_r[] = { "tensor_id", "buffer", "priority", "tag", "device", NULL };
    unsigned long long id = 0, tag = 0;
    PyObject *buf, *tier_o = NULL, *prio_o = NULL;
    int device = 0;
    int ok = write ? PyArg_ParseTupleAndKeywords(args, kw, "KO|OOKp", kwlist_w, &id, &buf, &tier_o,
                                                 &prio_o, &tag, &device)
                   : PyArg_ParseTupleAndKeywords(args, kw, "KO|OKp", kwlist_r, &id, &buf, &prio_o,
                                                 &tag, &device);
    if (!ok || check_open(self) < 0) {
        return NULL;
    }
    int32_t tier = TIO_TIER_SSD, prio = TIO_PRIO_NORMAL;
    if (tier_o && parse_choice(tier_o, &tier_choice, &tier) < 0) {
        return NULL;
    }
    if (prio_o && parse_choice(prio_o, &priority_choice, &prio) < 0) {
        return NULL;
    }
    void *ptr;
    uint64_t bytes;
    PyObject *pin;
    if (get_buffer(buf, !write, &ptr, &bytes, &pin) < 0) {
        return NULL;
    }
    if (pin && device) {
        Py_DECREF(pin);
        PyErr_SetString(PyExc_ValueError, "device=True needs a raw (ptr, nbytes) buffer");
        return NULL;
    }
    if (pin_add(self, tag, pin) < 0) {
        Py_XDECREF(pin);
        return NULL;
    }
    int32_t mem = device ? TIO_MEM_DEVICE : TIO_MEM_HOST;
    int rc = engine_submit(self->e, write, id, ptr, bytes, mem, tier, prio, tag);
    if (rc < 0) {
        if (pin) {
            /* not queued: drop the pin we just added (the last one for this tag) */
            PyObject *key = PyLong_FromUnsignedLongLong(tag);
            PyObject *list = key ? PyDict_GetItemWithError(self->pins, key) : NULL;
            if (list && PyList_GET_SIZE(list) > 0) {
                (void)PySequence_DelItem(list, PyList_GET_SIZE(list) - 1);
                if (PyList_GET_SIZE(list) == 0) {
                    (void)PyDict_DelItem(self->pins, key);
                }
            }
            Py_XDECREF(key);
            PyErr_Clear();
            Py_DECREF(pin);
        }
        if (rc == -EAGAIN) {
            PyErr_SetString(PyExc_BlockingIOError,
                            "engine queue full (max_requests outstanding): poll or wait first");
            return NULL;
        }
        return tio_py_raise(rc, write ? "Engine.write" : "Engine.read");
    }
    Py_XDECREF(pin);
    return PyLong_FromUnsignedLongLong(bytes);
}

/* The tag of a request that the waited-for form submits and waits for. */
#define SYNC_TAG (UINT64_MAX - 1)

/* Wait for the request tagged SYNC_TAG; GIL released by the caller. The engine has no other
 * user at this time: a completion with another tag is consumed and lost. */
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

/* The waited-for form: write(tensor_id, ptr, nbytes, tier, device=False) and
 * read(tensor_id, ptr, nbytes, device=False) with a raw address, submitted urgent and waited
 * for (GIL released); what the PyTorch layer uses on an engine it alone drives. */
static PyObject *submit_wait(EngineObject *self, PyObject *args, int write) {
    unsigned long long id, ptr, bytes;
    PyObject *tier_o = NULL;
    int device = 0;
    int ok = write ? PyArg_ParseTuple(args, "KKKO|p:write", &id, &ptr, &bytes, &tier_o, &device)
                   : PyArg_ParseTuple(args, "KKK|p:read", &id, &ptr, &bytes, &device);
    if (!ok || check_open(self) < 0) {
        return NULL;
    }
    int32_t tier = TIO_TIER_SSD;
    if (tier_o && parse_choice(tier_o, &tier_choice, &tier) < 0) {
        return NULL;
    }
    struct tio_engine *e = self->e;
    int32_t mem = device ? TIO_MEM_DEVICE : TIO_MEM_HOST;
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an address from Python
    void *p = (void *)(uintptr_t)ptr;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc =
        engine_submit(e, write, id, p, bytes, mem, tier, TIO_PRIO_URGENT, SYNC_TAG);
    if (rc == 0) {
        rc = sync_wait(e, bytes);
    }
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, write ? "Engine.write" : "Engine.read");
    }
    return PyLong_FromUnsignedLongLong(bytes);
}

/* write/read: the waited-for form when the second argument is an address (an int), else the
 * queued form with a buffer or a (ptr, nbytes) tuple. */
static int is_wait_form(PyObject *args, PyObject *kw) {
    return !kw && PyTuple_GET_SIZE(args) >= 3 && PyLong_Check(PyTuple_GET_ITEM(args, 1));
}

static PyObject *engine_write(EngineObject *self, PyObject *args, PyObject *kw) {
    return is_wait_form(args, kw) ? submit_wait(self, args, 1) : submit(self, args, kw, 1);
}

static PyObject *engine_read(EngineObject *self, PyObject *args, PyObject *kw) {
    return is_wait_form(args, kw) ? submit_wait(self, args, 0) : submit(self, args, kw, 0);
}

static PyObject *engine_poll(EngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = { "max", NULL };
    int max = 64;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i", kwlist, &max) || check_open(self) < 0) {
        return NULL;
    }
    if (max < 1 || max > 65536) {
        PyErr_SetString(PyExc_ValueError, "max must be 1..65536");
        return NULL;
    }
    struct tio_completion *c = PyMem_Malloc((size_t)max * sizeof(*c));
    if (!c) {
        return PyErr_NoMemory();
    }
    int n = tio_engine_poll(self->e, c, (size_t)max);
    PyObject *out = n < 0 ? tio_py_raise(n, "Engine.poll") : completions_to_list(self, c, n);
    PyMem_Free(c);
    return out;
}

static PyObject *engine_wait(EngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = { "min", "max", "timeout", NULL };
    int min = 1, max = 64;
    PyObject *timeout_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iiO", kwlist, &min, &max, &timeout_o) ||
        check_open(self) < 0) {
        return NULL;
    }
    if (max < 1 || max > 65536 || min < 0 || min > max) {
        PyErr_SetString(PyExc_ValueError, "need 0 <= min <= max <= 65536");
        return NULL;
    }
    int64_t timeout_ns = -1;
    if (timeout_o != Py_None) {
        double t = PyFloat_AsDouble(timeout_o);
        if (t == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
        timeout_ns = t < 0 ? -1 : (int64_t)(t * 1e9);
    }
    struct tio_completion *c = PyMem_Malloc((size_t)max * sizeof(*c));
    if (!c) {
        return PyErr_NoMemory();
    }
    int n;
    struct tio_engine *e = self->e;
    Py_BEGIN_ALLOW_THREADS n = tio_engine_wait(e, c, (size_t)min, (size_t)max, timeout_ns);
    Py_END_ALLOW_THREADS PyObject *out =
        n < 0 ? tio_py_raise(n, "Engine.wait") : completions_to_list(self, c, n);
    PyMem_Free(c);
    return out;
}

static PyObject *engine_cancel(EngineObject *self, PyObject *arg) {
    unsigned long long tag = PyLong_AsUnsignedLongLong(arg);
    if ((tag == (unsigned long long)-1 && PyErr_Occurred()) || check_open(self) < 0) {
        return NULL;
    }
    int rc = tio_engine_cancel(self->e, tag);
    return rc < 0 ? tio_py_raise(rc, "Engine.cancel") : PyLong_FromLong(rc);
}

static PyObject *engine_drop(EngineObject *self, PyObject *arg) {
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if ((id == (unsigned long long)-1 && PyErr_Occurred()) || check_open(self) < 0) {
        return NULL;
    }
    int rc = tio_engine_drop(self->e, id);
    if (rc < 0 && rc != TIO_ENOTFOUND) {
        return tio_py_raise(rc, "Engine.drop");
    }
    Py_RETURN_NONE;
}

static PyObject *engine_reserve(EngineObject *self, PyObject *arg) {
    unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
    if ((bytes == (unsigned long long)-1 && PyErr_Occurred()) || check_open(self) < 0) {
        return NULL;
    }
    int rc;
    struct tio_engine *e = self->e;
    Py_BEGIN_ALLOW_THREADS rc = tio_engine_reserve(e, bytes);
    Py_END_ALLOW_THREADS return tio_py_none_or_raise(rc, "Engine.reserve");
}

static PyObject *engine_info(EngineObject *self, PyObject *arg) {
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if ((id == (unsigned long long)-1 && PyErr_Occurred()) || check_open(self) < 0) {
        return NULL;
    }
    uint64_t bytes = 0;
    int32_t tier = 0;
    int rc = tio_engine_tensor_info(self->e, id, &bytes, &tier);
    if (rc < 0) {
        return tio_py_raise(rc, "Engine.info");
    }
    return Py_BuildValue("(Ks)", (unsigned long long)bytes, tier == TIO_TIER_HOST ? "host" : "ssd");
}

static PyObject *engine_stats(EngineObject *self, PyObject *unused) {
    (void)unused;
    if (check_open(self) < 0) {
        return NULL;
    }
    struct tio_engine_stats s;
    int rc = tio_engine_stats(self->e, &s);
    if (rc < 0) {
        return tio_py_raise(rc, "Engine.stats");
    }
    return Py_BuildValue(
        "{s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:d}",
        "backend", s.backend, "requests_submitted", (unsigned long long)s.requests_submitted,
        "requests_completed", (unsigned long long)s.requests_completed, "requests_failed",
        (unsigned long long)s.requests_failed, "requests_canceled",
        (unsigned long long)s.requests_canceled, "bytes_written",
        (unsigned long long)s.bytes_written, "bytes_read", (unsigned long long)s.bytes_read,
        "ops_issued", (unsigned long long)s.ops_issued, "short_transfers",
        (unsigned long long)s.short_transfers, "retries", (unsigned long long)s.retries,
        "crc_errors", (unsigned long long)s.crc_errors, "staged_bytes",
        (unsigned long long)s.staged_bytes, "ssd_capacity_bytes",
        (unsigned long long)s.ssd_capacity_bytes, "ssd_used_bytes",
        (unsigned long long)s.ssd_used_bytes, "host_capacity_bytes",
        (unsigned long long)s.host_capacity_bytes, "host_used_bytes",
        (unsigned long long)s.host_used_bytes, "tensors", (unsigned long long)s.tensors,
        "outstanding", s.outstanding, "inflight_ops", s.inflight_ops, "busy_s", s.busy_s);
}

static PyObject *engine_get_backend(EngineObject *self, void *closure) {
    (void)closure;
    if (check_open(self) < 0) {
        return NULL;
    }
    return PyUnicode_FromString(tio_engine_backend(self->e));
}

static PyObject *engine_get_last_error(EngineObject *self, void *closure) {
    (void)closure;
    if (check_open(self) < 0) {
        return NULL;
    }
    return PyUnicode_FromString(tio_engine_last_error(self->e));
}

static PyMethodDef engine_methods[] = {
    { "write", (PyCFunction)(void (*)(void))engine_write, METH_VARARGS | METH_KEYWORDS,
      "write(tensor_id, buffer, tier='ssd', priority='normal', tag=0, device=False) -> bytes\n"
      "Queue a copy of buffer (buffer protocol, or a raw (ptr, nbytes) tuple) as the tensor's "
      "contents. The buffer is kept alive until its completion is returned by poll/wait.\n"
      "write(tensor_id, ptr, nbytes, tier, device=False) -> bytes: the copy from a raw address, "
      "urgent and waited for (GIL released); only for an engine with nothing else in flight." },
    { "read", (PyCFunction)(void (*)(void))engine_read, METH_VARARGS | METH_KEYWORDS,
      "read(tensor_id, buffer, priority='normal', tag=0, device=False) -> bytes\n"
      "Queue a copy of the stored tensor into the writable buffer (same size).\n"
      "read(tensor_id, ptr, nbytes, device=False) -> bytes: the copy to a raw address, urgent "
      "and waited for (GIL released); only for an engine with nothing else in flight." },
    { "poll", (PyCFunction)(void (*)(void))engine_poll, METH_VARARGS | METH_KEYWORDS,
      "poll(max=64) -> [(tag, res)]: finished requests, without blocking." },
    { "wait", (PyCFunction)(void (*)(void))engine_wait, METH_VARARGS | METH_KEYWORDS,
      "wait(min=1, max=64, timeout=None) -> [(tag, res)]: block (GIL released) for at least "
      "min completions; res is bytes or a negative status (teraio.strerror)." },
    { "cancel", (PyCFunction)engine_cancel, METH_O,
      "cancel(tag) -> int: requests marked; they complete with TIO_ECANCELED." },
    { "drop", (PyCFunction)engine_drop, METH_O,
      "drop(tensor_id): free the tensor's space (nothing if none is stored)." },
    { "reserve", (PyCFunction)engine_reserve, METH_O,
      "reserve(bytes): make room on the SSDs up front; raises with needed vs available." },
    { "info", (PyCFunction)engine_info, METH_O, "info(tensor_id) -> (bytes, 'ssd'|'host')." },
    { "stats", (PyCFunction)engine_stats, METH_NOARGS, "stats() -> dict of counters." },
    { "close", (PyCFunction)engine_close, METH_NOARGS,
      "close(): wait for in-flight transfers, delete the swap files." },
    { "__enter__", (PyCFunction)engine_enter, METH_NOARGS, NULL },
    { "__exit__", (PyCFunction)engine_exit, METH_VARARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef engine_getset[] = {
    { "backend", (getter)engine_get_backend, NULL, "selected backend name", NULL },
    { "last_error", (getter)engine_get_last_error, NULL,
      "detail of the last failed completion (names the tensor)", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject engine_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(dirs, host_tier_bytes=0, backend='auto', chunk_bytes=4MiB, "
              "queue_depth=16, verify=False, max_requests=1024, retries=2, backend_options=None, "
              "reserve_bytes=0, threads=0, preallocate=True): the asynchronous tensor migration "
              "engine (backend None, chunk_bytes 0 and queue_depth 0: the defaults).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
    .tp_getset = engine_getset,
};

struct tio_engine *tio_py_engine_acquire(PyObject *obj) {
    if (!PyObject_TypeCheck(obj, &engine_type)) {
        PyErr_Format(PyExc_TypeError, "expected a teraio._core.Engine, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    EngineObject *self = (EngineObject *)obj;
    if (check_open(self) < 0) {
        return NULL;
    }
    self->users++;
    return self->e;
}

void tio_py_engine_release(PyObject *obj) {
    ((EngineObject *)obj)->users--;
}

static PyObject *py_probe(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    struct tio_engine_backend_info b[32];
    int n = tio_engine_probe_all(b, 32);
    if (n > 32) {
        n = 32;
    }
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < n; i++) {
        PyObject *d = Py_BuildValue("{s:s,s:O,s:i,s:I,s:s}", "name", b[i].name, "available",
                                    b[i].available ? Py_True : Py_False, "score", b[i].score,
                                    "caps", b[i].caps, "reason", b[i].reason);
        if (!d || PyList_Append(out, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(d);
    }
    return out;
}

static PyMethodDef engine_functions[] = {
    { "probe", py_probe, METH_NOARGS,
      "probe() -> [{name, available, score, caps, reason}]: the I/O backends on this machine." },
    { NULL, NULL, 0, NULL },
};

int tio_py_add_engine(PyObject *m) {
    if (PyType_Ready(&engine_type) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "Engine", (PyObject *)&engine_type) < 0) {
        return -1;
    }
    if (PyModule_AddFunctions(m, engine_functions) < 0) {
        return -1;
    }
    struct {
        const char *name;
        long v;
    } consts[] = { { "TIER_SSD", TIO_TIER_SSD },       { "TIER_HOST", TIO_TIER_HOST },
                   { "PRIO_NORMAL", TIO_PRIO_NORMAL }, { "PRIO_URGENT", TIO_PRIO_URGENT },
                   { "ECANCELED", TIO_ECANCELED },     { "EIO", TIO_EIO },
                   { "ECORRUPT", TIO_ECORRUPT } };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) {
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0) {
            return -1;
        }
    }
    return 0;
}
