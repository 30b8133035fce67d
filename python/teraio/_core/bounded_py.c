/* teraio._core.Bounded: the memory table and victim policy of the steps without a plan
 * (teraio/bounded.h), driven by python/teraio/_bounded.py, which keeps what needs torch (the
 * storages, their weak references, the engine calls). Keys are storage addresses (_cdata). */
#include <teraio/bounded.h>

#include "core.h"

typedef struct {
    PyObject_HEAD struct tio_bounded *tb;
} BoundedObject;

static void bounded_dealloc(BoundedObject *self) {
    tio_bounded_free(self->tb);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int bounded_init(BoundedObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = { "min_bytes", "grace", NULL };
    struct tio_bounded_params p = tio_bounded_params_default();
    unsigned long long min_bytes = p.min_bytes, grace = p.grace;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|KK", kwlist, &min_bytes, &grace)) {
        return -1;
    }
    if (self->tb) {
        PyErr_SetString(PyExc_RuntimeError, "Bounded already initialised");
        return -1;
    }
    p.min_bytes = min_bytes;
    p.grace = grace;
    int rc = tio_bounded_new(&p, &self->tb);
    if (rc < 0) {
        tio_py_raise(rc, "bounded");
        return -1;
    }
    return 0;
}

static PyObject *key_list(const uint64_t *keys, size_t n) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)keys[i]);
        if (!v) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

/* args[i] as a uint64 (a key or byte count); -1 with an exception set. */
static int u64_arg(PyObject *const *args, Py_ssize_t i, uint64_t *out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(args[i]);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    *out = v;
    return 0;
}

/* The n arguments of fn, each a uint64, into out[0..want); -1 with an exception set. */
static int
u64_args(const char *fn, PyObject *const *args, Py_ssize_t n, Py_ssize_t want, uint64_t *out) {
    if (n != want) {
        PyErr_Format(PyExc_TypeError, "Bounded.%s takes %zd arguments (%zd given)", fn, want, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (u64_arg(args, i, &out[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

static PyObject *done(int rc, const char *what) {
    if (rc < 0) {
        return tio_py_raise(rc, what);
    }
    return PyLong_FromLong(rc);
}

/* The methods that only call fn(table). */
static PyObject *call(BoundedObject *self, void (*fn)(struct tio_bounded *)) {
    fn(self->tb);
    Py_RETURN_NONE;
}

static PyObject *bounded_begin_op(BoundedObject *self, PyObject *unused) {
    (void)unused;
    return call(self, tio_bounded_begin_op);
}

/* use(key, nbytes, how) -> TRACKED | CREATED bits (0: not tracked) */
static PyObject *bounded_use(BoundedObject *self, PyObject *const *args, Py_ssize_t n) {
    uint64_t a[3]; /* key, nbytes, how */
    if (u64_args("use", args, n, 3, a) < 0) {
        return NULL;
    }
    return done(tio_bounded_use(self->tb, a[0], a[1], (uint32_t)a[2]), "bounded use");
}

static PyObject *bounded_track(BoundedObject *self, PyObject *const *args, Py_ssize_t n) {
    uint64_t a[2]; /* key, nbytes */
    if (u64_args("track", args, n, 2, a) < 0) {
        return NULL;
    }
    return done(tio_bounded_track(self->tb, a[0], a[1]), "bounded track");
}

static PyObject *bounded_op_reads(BoundedObject *self, PyObject *unused) {
    (void)unused;
    const uint64_t *keys;
    size_t n = tio_bounded_op_reads(self->tb, &keys);
    return key_list(keys, n);
}

/* pick(budget, in_optim, more) -> [key, ...]: at most 256 victims a call; where they are not
 * enough, the caller asks again with more=True (the round goes on) */
static PyObject *bounded_pick(BoundedObject *self, PyObject *args) {
    unsigned long long budget;
    int in_optim, more;
    if (!PyArg_ParseTuple(args, "Kpp", &budget, &in_optim, &more)) {
        return NULL;
    }
    uint64_t keys[256];
    int rc = tio_bounded_pick(self->tb, budget, in_optim, more, keys, sizeof keys / sizeof *keys);
    if (rc < 0) {
        return tio_py_raise(rc, "bounded pick");
    }
    return key_list(keys, (size_t)rc);
}

static PyObject *bounded_keys(BoundedObject *self, PyObject *unused) {
    (void)unused;
    size_t n = tio_bounded_count(self->tb);
    uint64_t *keys = PyMem_Malloc(n ? n * sizeof *keys : 1);
    if (!keys) {
        return PyErr_NoMemory();
    }
    int rc = tio_bounded_keys(self->tb, keys, n);
    PyObject *l = rc < 0 ? tio_py_raise(rc, "bounded keys") : key_list(keys, (size_t)rc);
    PyMem_Free(keys);
    return l;
}

/* get(key) -> (bytes, eid or None, flags), or None when the key is not tracked */
static PyObject *bounded_get(BoundedObject *self, PyObject *arg) {
    uint64_t key;
    if (u64_arg(&arg, 0, &key) < 0) {
        return NULL;
    }
    struct tio_bounded_entry e;
    if (tio_bounded_get(self->tb, key, &e) < 0) {
        tio_clear_error();
        Py_RETURN_NONE;
    }
    if (e.flags & TIO_BOUNDED_STORED) {
        return Py_BuildValue("(KKI)", (unsigned long long)e.bytes, (unsigned long long)e.eid,
                             (unsigned)e.flags);
    }
    return Py_BuildValue("(KOI)", (unsigned long long)e.bytes, Py_None, (unsigned)e.flags);
}

static PyObject *bounded_offloaded(BoundedObject *self, PyObject *const *args, Py_ssize_t n) {
    uint64_t a[2]; /* key, eid */
    if (u64_args("offloaded", args, n, 2, a) < 0) {
        return NULL;
    }
    return done(tio_bounded_offloaded(self->tb, a[0], a[1]), "bounded offloaded");
}

static PyObject *bounded_resize(BoundedObject *self, PyObject *const *args, Py_ssize_t n) {
    uint64_t a[2]; /* key, nbytes */
    if (u64_args("resize", args, n, 2, a) < 0) {
        return NULL;
    }
    return done(tio_bounded_resize(self->tb, a[0], a[1]), "bounded resize");
}

static PyObject *bounded_set_global(BoundedObject *self, PyObject *const *args, Py_ssize_t n) {
    uint64_t a[2]; /* key, optim_state */
    if (u64_args("set_global", args, n, 2, a) < 0) {
        return NULL;
    }
    int rc = tio_bounded_set_global(self->tb, a[0], a[1] != 0);
    if (rc == TIO_ENOTFOUND) {
        tio_clear_error();
        Py_RETURN_FALSE;
    }
    return rc < 0 ? tio_py_raise(rc, "bounded set_global") : Py_NewRef(Py_True);
}

static PyObject *bounded_loaded(BoundedObject *self, PyObject *arg) {
    uint64_t key;
    if (u64_arg(&arg, 0, &key) < 0) {
        return NULL;
    }
    return done(tio_bounded_loaded(self->tb, key), "bounded loaded");
}

static PyObject *bounded_pin(BoundedObject *self, PyObject *arg) {
    uint64_t key;
    if (u64_arg(&arg, 0, &key) < 0) {
        return NULL;
    }
    return done(tio_bounded_pin(self->tb, key), "bounded pin");
}

/* remove(key) -> the eid of its copy (for the caller to drop), or None */
static PyObject *bounded_remove(BoundedObject *self, PyObject *arg) {
    uint64_t key, eid = 0;
    int stored = 0;
    if (u64_arg(&arg, 0, &key) < 0) {
        return NULL;
    }
    int rc = tio_bounded_remove(self->tb, key, &stored, &eid);
    if (rc < 0) {
        return tio_py_raise(rc, "bounded remove");
    }
    if (!stored) {
        Py_RETURN_NONE;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)eid);
}

/* adopt(key, nbytes, eid, resident, global) */
static PyObject *bounded_adopt(BoundedObject *self, PyObject *args) {
    unsigned long long key, nb, eid;
    int resident, global;
    if (!PyArg_ParseTuple(args, "KKKpp", &key, &nb, &eid, &resident, &global)) {
        return NULL;
    }
    return done(tio_bounded_adopt(self->tb, key, nb, eid, resident, global), "bounded adopt");
}

static PyObject *bounded_begin_step(BoundedObject *self, PyObject *unused) {
    (void)unused;
    return call(self, tio_bounded_begin_step);
}

static PyObject *bounded_mark_peak(BoundedObject *self, PyObject *unused) {
    (void)unused;
    return call(self, tio_bounded_mark_peak);
}

static PyObject *bounded_clear(BoundedObject *self, PyObject *unused) {
    (void)unused;
    return call(self, tio_bounded_clear);
}

/* op() -> (input_max, made, read_bytes) of the current operator */
static PyObject *bounded_op(BoundedObject *self, PyObject *unused) {
    (void)unused;
    struct tio_bounded_stats st;
    tio_bounded_get_stats(self->tb, &st);
    return Py_BuildValue("(KKK)", (unsigned long long)st.op_input_max,
                         (unsigned long long)st.op_made, (unsigned long long)st.op_read_bytes);
}

/* Getters of the table's totals; closure: which, a pointer into stat_ids. */
enum bounded_stat_field { ST_RESIDENT, ST_LIVE, ST_PEAK_LIVE, ST_PEAK_RESIDENT, ST_CLOCK };
static enum bounded_stat_field stat_ids[] = { ST_RESIDENT, ST_LIVE, ST_PEAK_LIVE, ST_PEAK_RESIDENT,
                                              ST_CLOCK };

static PyObject *bounded_stat(BoundedObject *self, void *closure) {
    struct tio_bounded_stats st;
    tio_bounded_get_stats(self->tb, &st);
    const uint64_t v[] = { [ST_RESIDENT] = st.resident,
                           [ST_LIVE] = st.live,
                           [ST_PEAK_LIVE] = st.peak_live,
                           [ST_PEAK_RESIDENT] = st.peak_resident,
                           [ST_CLOCK] = st.clock };
    return PyLong_FromUnsignedLongLong(
        (unsigned long long)v[*(const enum bounded_stat_field *)closure]);
}

static PyObject *bounded_count(BoundedObject *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(tio_bounded_count(self->tb));
}

static PyGetSetDef bounded_getset[] = {
    { "resident", (getter)bounded_stat, NULL, "bytes of the resident entries",
      &stat_ids[ST_RESIDENT] },
    { "live", (getter)bounded_stat, NULL, "bytes of all entries", &stat_ids[ST_LIVE] },
    { "peak_live", (getter)bounded_stat, NULL, "the most live was", &stat_ids[ST_PEAK_LIVE] },
    { "peak_resident", (getter)bounded_stat, NULL, "the most resident was at a mark_peak()",
      &stat_ids[ST_PEAK_RESIDENT] },
    { "clock", (getter)bounded_stat, NULL, "operators begun", &stat_ids[ST_CLOCK] },
    { "count", (getter)bounded_count, NULL, "entries tracked", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyMethodDef bounded_methods[] = {
    { "begin_op", (PyCFunction)bounded_begin_op, METH_NOARGS, "begin_op(): an operator starts" },
    { "use", (PyCFunction)(void (*)(void))bounded_use, METH_FASTCALL,
      "use(key, nbytes, how) -> TRACKED|CREATED bits" },
    { "track", (PyCFunction)(void (*)(void))bounded_track, METH_FASTCALL,
      "track(key, nbytes) -> TRACKED|CREATED bits" },
    { "op_reads", (PyCFunction)bounded_op_reads, METH_NOARGS,
      "op_reads() -> [key]: the current operator's inputs to read back" },
    { "op", (PyCFunction)bounded_op, METH_NOARGS, "op() -> (input_max, made, read_bytes)" },
    { "pick", (PyCFunction)bounded_pick, METH_VARARGS,
      "pick(budget, in_optim, more) -> [key]: victims in order" },
    { "get", (PyCFunction)bounded_get, METH_O, "get(key) -> (bytes, eid or None, flags) or None" },
    { "offloaded", (PyCFunction)(void (*)(void))bounded_offloaded, METH_FASTCALL,
      "offloaded(key, eid)" },
    { "loaded", (PyCFunction)bounded_loaded, METH_O, "loaded(key)" },
    { "pin", (PyCFunction)bounded_pin, METH_O, "pin(key): not releasable, copy forgotten" },
    { "resize", (PyCFunction)(void (*)(void))bounded_resize, METH_FASTCALL, "resize(key, nbytes)" },
    { "set_global", (PyCFunction)(void (*)(void))bounded_set_global, METH_FASTCALL,
      "set_global(key, optim_state) -> bool: False when not tracked" },
    { "remove", (PyCFunction)bounded_remove, METH_O, "remove(key) -> eid of its copy or None" },
    { "adopt", (PyCFunction)bounded_adopt, METH_VARARGS,
      "adopt(key, nbytes, eid, resident, global)" },
    { "begin_step", (PyCFunction)bounded_begin_step, METH_NOARGS, "begin_step()" },
    { "mark_peak", (PyCFunction)bounded_mark_peak, METH_NOARGS, "mark_peak()" },
    { "clear", (PyCFunction)bounded_clear, METH_NOARGS, "clear(): forget every entry" },
    { "keys", (PyCFunction)bounded_keys, METH_NOARGS, "keys() -> [key] in tracking order" },
    { NULL, NULL, 0, NULL },
};

static PyTypeObject bounded_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.Bounded",
    .tp_basicsize = sizeof(BoundedObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bounded(min_bytes=1, grace=32): the memory table of the steps without a plan.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)bounded_init,
    .tp_dealloc = (destructor)bounded_dealloc,
    .tp_methods = bounded_methods,
    .tp_getset = bounded_getset,
};

int tio_py_add_bounded(PyObject *m) {
    /* the type (named after tp_name), the flags and use bits _bounded.py reads and passes */
    if (PyModule_AddType(m, &bounded_type) < 0 ||
        PyModule_AddIntConstant(m, "BOUNDED_RESIDENT", TIO_BOUNDED_RESIDENT) < 0 ||
        PyModule_AddIntConstant(m, "BOUNDED_CLEAN", TIO_BOUNDED_CLEAN) < 0 ||
        PyModule_AddIntConstant(m, "BOUNDED_CREATED", TIO_BOUNDED_CREATED) < 0 ||
        PyModule_AddIntConstant(m, "BOUNDED_USE_WRITE", TIO_BOUNDED_USE_WRITE) < 0 ||
        PyModule_AddIntConstant(m, "BOUNDED_USE_OPTIM", TIO_BOUNDED_USE_OPTIM) < 0 ||
        PyModule_AddIntConstant(m, "BOUNDED_USE_COMM", TIO_BOUNDED_USE_COMM) < 0 ||
        PyModule_AddIntConstant(m, "BOUNDED_USE_OUTPUT", TIO_BOUNDED_USE_OUTPUT) < 0) {
        return -1;
    }
    return 0;
}
