/* teraio.Analysis: the lifetime analysis (teraio/analysis.h) from Python.
 *
 *     a = teraio.Analysis("run.tio", capacity="94GiB")      # or a teraio.Trace
 *     a.summary()["active_fraction_mean"]
 *     a.resident_bytes            # numpy uint64 [n_kernels], read-only view, no copy
 *     p = a.periods()             # numpy structured array (tensor, flags, start, end, bytes,
 *                                 #   duration_ns), a view of the C records
 *     a.write_csv("out/")
 *
 * Arrays are numpy views of the analysis' own memory: they are read-only and keep the analysis
 * (and through it the trace) alive. The numpy arrays are made with numpy.frombuffer over a
 * small exporter object, so this file needs no numpy headers.
 */
#include <stdlib.h>
#include <string.h>

#include <teraio/teraio.h>

#include "core.h"

/* ---- A read-only byte buffer over memory owned by another object --------------------------- */

typedef struct {
    PyObject_HEAD PyObject *owner; /* keeps the memory alive */
    const void *data;
    Py_ssize_t len; /* bytes */
} BufferObject;

static int buffer_get(PyObject *self, Py_buffer *view, int flags) {
    BufferObject *b = (BufferObject *)self;
    /* Never NULL: an empty array still needs a valid pointer. */
    static const char empty[1];
    return PyBuffer_FillInfo(view, self, b->data ? (void *)b->data : (void *)empty, b->len, 1,
                             flags);
}

static void buffer_dealloc(PyObject *self) {
    BufferObject *b = (BufferObject *)self;
    Py_XDECREF(b->owner);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs buffer_procs = { .bf_getbuffer = buffer_get, .bf_releasebuffer = NULL };

static PyTypeObject buffer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core._Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = buffer_dealloc,
    .tp_as_buffer = &buffer_procs,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only bytes owned by a teraio object (internal).",
};

static PyObject *numpy_frombuffer; /* numpy.frombuffer, imported on first use */

/* A numpy array of `count` elements of `dtype` viewing `data`, keeping `owner` alive. */
static PyObject *
numpy_view(PyObject *owner, const void *data, size_t count, size_t elem, PyObject *dtype) {
    if (!numpy_frombuffer) {
        PyObject *np = PyImport_ImportModule("numpy");
        if (!np) {
            return NULL;
        }
        numpy_frombuffer = PyObject_GetAttrString(np, "frombuffer");
        Py_DECREF(np);
        if (!numpy_frombuffer) {
            return NULL;
        }
    }
    BufferObject *b = PyObject_New(BufferObject, &buffer_type);
    if (!b) {
        return NULL;
    }
    Py_INCREF(owner);
    b->owner = owner;
    b->data = data;
    b->len = (Py_ssize_t)(count * elem);
    PyObject *arr = PyObject_CallFunctionObjArgs(numpy_frombuffer, (PyObject *)b, dtype, NULL);
    Py_DECREF(b);
    return arr;
}

/* ---- teraio.Analysis ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD struct tio_analysis *a;
    struct tio_trace *owned_trace; /* loaded from a path by us, freed with us */
    PyObject *trace_obj;           /* the teraio.Trace passed in (kept alive), or None */
    PyObject *path;                /* the path it was loaded from, or None */
    PyObject *period_dtype;        /* numpy dtype of struct tio_period */
    const struct tio_trace *trace; /* owned_trace or the one behind trace_obj */
    struct tio_analysis_params params;
} AnalysisObject;

static const char *const summary_doc =
    "summary(top=10) -> dict: the same keys as `teraio analyze --json`: every field of struct "
    "tio_analysis_summary, inactive_periods, capacity_bytes, long_idle_ns, peak_kernel_name, "
    "trace (the path, or None), buckets (name, tensors, periods, median_idle_ns, "
    "long_idle_periods) and top (the `top` tensors >= 10 MB idle the longest).";

static int analysis_init(PyObject *self_obj, PyObject *args, PyObject *kwds) {
    AnalysisObject *self = (AnalysisObject *)self_obj;
    static char *kwlist[] = { "trace", "capacity", "long_idle_ns", NULL };
    PyObject *trace = NULL, *capacity = NULL;
    unsigned long long long_idle = 10000000ULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OK", kwlist, &trace, &capacity, &long_idle)) {
        return -1;
    }
    if (self->a) {
        PyErr_SetString(PyExc_RuntimeError, "Analysis is already initialised");
        return -1;
    }
    struct tio_analysis_params prm = tio_analysis_params_default();
    prm.long_idle_ns = long_idle;
    if (capacity && capacity != Py_None) {
        if (PyUnicode_Check(capacity)) {
            const char *text = PyUnicode_AsUTF8(capacity);
            if (!text) {
                return -1;
            }
            int rc = tio_parse_bytes(text, &prm.capacity_bytes);
            if (rc < 0) {
                tio_py_raise(rc, "Analysis: capacity");
                return -1;
            }
        } else {
            prm.capacity_bytes = PyLong_AsUnsignedLongLong(capacity);
            if (PyErr_Occurred()) {
                return -1;
            }
        }
    }

    const struct tio_trace *tr = NULL;
    if (PyUnicode_Check(trace) || PyBytes_Check(trace) ||
        PyObject_HasAttrString(trace, "__fspath__")) {
        PyObject *bytes = NULL;
        if (!PyUnicode_FSConverter(trace, &bytes)) {
            return -1;
        }
        struct tio_trace *loaded = NULL;
        PyThreadState *ts = PyEval_SaveThread();
        int rc = tio_trace_load(PyBytes_AS_STRING(bytes), TIO_TRACE_FORMAT_AUTO, &loaded);
        PyEval_RestoreThread(ts);
        if (rc < 0) {
            Py_DECREF(bytes);
            tio_py_raise(rc, "Analysis: loading the trace");
            return -1;
        }
        self->owned_trace = loaded;
        self->path = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(bytes));
        Py_DECREF(bytes);
        if (!self->path) {
            return -1;
        }
        tr = loaded;
    } else if (tio_py_trace_borrow) {
        /* Zero copy: the trace binding lends its C trace; we keep the object alive. */
        tr = tio_py_trace_borrow(trace);
        if (!tr) {
            return -1; /* the accessor set TypeError */
        }
        Py_INCREF(trace);
        self->trace_obj = trace;
    } else if (PyObject_HasAttrString(trace, "to_bytes")) {
        /* Without the accessor: a private copy through the binary format. */
        PyObject *data = PyObject_CallMethod(trace, "to_bytes", "s", "binary");
        if (!data) {
            return -1;
        }
        if (!PyBytes_Check(data)) {
            Py_DECREF(data);
            PyErr_SetString(PyExc_TypeError, "Analysis(trace): to_bytes() did not return bytes");
            return -1;
        }
        struct tio_trace *copy = NULL;
        int rc = tio_trace_load_mem(PyBytes_AS_STRING(data), (size_t)PyBytes_GET_SIZE(data),
                                    TIO_TRACE_FORMAT_BINARY, &copy);
        Py_DECREF(data);
        if (rc < 0) {
            tio_py_raise(rc, "Analysis: reading the trace");
            return -1;
        }
        self->owned_trace = copy;
        tr = copy;
    } else {
        PyErr_Format(PyExc_TypeError, "Analysis(trace): expected a teraio.Trace or a path, not %s",
                     Py_TYPE(trace)->tp_name);
        return -1;
    }
    if (!tio_trace_is_finished(tr)) {
        PyErr_SetString(PyExc_ValueError,
                        "Analysis(trace): the trace is not finished (call trace.finish())");
        return -1;
    }
    struct tio_analysis *a = NULL;
    PyThreadState *ts = PyEval_SaveThread();
    int rc = tio_analysis_new(tr, &prm, &a);
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        tio_py_raise(rc, "Analysis");
        return -1;
    }
    self->a = a;
    self->trace = tr;
    self->params = prm;
    return 0;
}

static void analysis_dealloc(PyObject *self_obj) {
    AnalysisObject *self = (AnalysisObject *)self_obj;
    tio_analysis_free(self->a);
    tio_trace_free(self->owned_trace);
    Py_XDECREF(self->trace_obj);
    Py_XDECREF(self->path);
    Py_XDECREF(self->period_dtype);
    Py_TYPE(self_obj)->tp_free(self_obj);
}

static int ready(AnalysisObject *self) {
    if (!self->a) {
        PyErr_SetString(PyExc_RuntimeError, "Analysis is not initialised");
        return 0;
    }
    return 1;
}

/* ---- Arrays --------------------------------------------------------------------------------- */

static PyObject *u64_view(AnalysisObject *self, const uint64_t *p, size_t n) {
    PyObject *dt = PyUnicode_FromString("<u8");
    if (!dt) {
        return NULL;
    }
    PyObject *r = numpy_view((PyObject *)self, p, n, sizeof *p, dt);
    Py_DECREF(dt);
    return r;
}

/* A per-kernel array of the analysis (a getter's closure): its accessor and how many entries it
 * has beyond n_kernels. */
struct curve {
    const uint64_t *(*get)(const struct tio_analysis *);
    size_t extra;
};
static struct curve curve_resident = { tio_analysis_resident_bytes, 0 };
static struct curve curve_active = { tio_analysis_active_bytes, 0 };
static struct curve curve_start = { tio_analysis_kernel_start_ns, 1 };

static PyObject *get_curve(PyObject *self_obj, void *closure) {
    const struct curve *c = closure;
    AnalysisObject *self = (AnalysisObject *)self_obj;
    if (!ready(self)) {
        return NULL;
    }
    struct tio_analysis_summary s;
    tio_analysis_get_summary(self->a, &s);
    return u64_view(self, c->get(self->a), s.n_kernels + c->extra);
}

static PyObject *period_dtype(AnalysisObject *self) {
    if (self->period_dtype) {
        return self->period_dtype;
    }
    _Static_assert(sizeof(struct tio_period) == 40, "struct tio_period layout");
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np) {
        return NULL;
    }
    PyObject *spec =
        Py_BuildValue("[(ss)(ss)(ss)(ss)(ss)(ss)]", "tensor", "<u4", "flags", "<u4", "start", "<u8",
                      "end", "<u8", "bytes", "<u8", "duration_ns", "<u8");
    PyObject *dt = spec ? PyObject_CallMethod(np, "dtype", "O", spec) : NULL;
    Py_XDECREF(spec);
    Py_DECREF(np);
    self->period_dtype = dt;
    return dt;
}

static PyObject *analysis_periods(PyObject *self_obj, PyObject *unused) {
    (void)unused;
    AnalysisObject *self = (AnalysisObject *)self_obj;
    if (!ready(self)) {
        return NULL;
    }
    PyObject *dt = period_dtype(self);
    if (!dt) {
        return NULL;
    }
    size_t n;
    const struct tio_period *p = tio_analysis_periods(self->a, &n);
    return numpy_view(self_obj, p, n, sizeof *p, dt);
}

static int tensor_arg(AnalysisObject *self, PyObject *arg, uint32_t *t) {
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return -1;
    }
    struct tio_analysis_summary s;
    tio_analysis_get_summary(self->a, &s);
    if (v >= s.n_tensors) {
        PyErr_Format(PyExc_IndexError, "tensor %llu out of range (%zu tensors)", v, s.n_tensors);
        return -1;
    }
    *t = (uint32_t)v;
    return 0;
}

static PyObject *analysis_tensor_periods(PyObject *self_obj, PyObject *arg) {
    AnalysisObject *self = (AnalysisObject *)self_obj;
    uint32_t t;
    if (!ready(self) || tensor_arg(self, arg, &t) < 0) {
        return NULL;
    }
    size_t n;
    const uint32_t *idx = tio_analysis_tensor_periods(self->a, t, &n);
    PyObject *dt = PyUnicode_FromString("<u4");
    if (!dt) {
        return NULL;
    }
    PyObject *r = numpy_view(self_obj, idx, n, sizeof(uint32_t), dt);
    Py_DECREF(dt);
    return r;
}

static PyObject *use_or_none(uint64_t k) {
    if (k == TIO_NEVER_USED) {
        Py_RETURN_NONE;
    }
    return PyLong_FromUnsignedLongLong(k);
}

/* A list of n items, item(v, i) making each (a new reference): counts (size_t) or kernel indices
 * (uint64_t, None for TIO_NEVER_USED). */
static PyObject *list_of(const void *v, size_t n, PyObject *(*item)(const void *, size_t)) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *x = item(v, i);
        if (!x) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, x);
    }
    return l;
}

static PyObject *count_item(const void *v, size_t i) {
    return PyLong_FromSize_t(((const size_t *)v)[i]);
}

static PyObject *use_item(const void *v, size_t i) {
    return use_or_none(((const uint64_t *)v)[i]);
}

/* first_use(t) / last_use(t): `use` of the tensor argument, None for TIO_NEVER_USED. */
static PyObject *
use_of(PyObject *self_obj, PyObject *arg, uint64_t (*use)(const struct tio_analysis *, uint32_t)) {
    AnalysisObject *self = (AnalysisObject *)self_obj;
    uint32_t t;
    if (!ready(self) || tensor_arg(self, arg, &t) < 0) {
        return NULL;
    }
    return use_or_none(use(self->a, t));
}

static PyObject *analysis_first_use(PyObject *self_obj, PyObject *arg) {
    return use_of(self_obj, arg, tio_analysis_first_use);
}

static PyObject *analysis_last_use(PyObject *self_obj, PyObject *arg) {
    return use_of(self_obj, arg, tio_analysis_last_use);
}

/* A bucket given as an index (0..4) or a name ("10-100MB"). */
static int bucket_arg(PyObject *arg, int *bucket) {
    if (PyUnicode_Check(arg)) {
        const char *name = PyUnicode_AsUTF8(arg);
        if (!name) {
            return -1;
        }
        for (int b = 0; b < TIO_BUCKET_COUNT; b++) {
            if (strcmp(name, tio_size_bucket_name(b)) == 0) {
                *bucket = b;
                return 0;
            }
        }
        PyErr_Format(PyExc_ValueError,
                     "unknown size bucket '%s' (<1MB, 1-10MB, 10-100MB, 100MB-1GB, >=1GB)", name);
        return -1;
    }
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (v < 0 || v >= TIO_BUCKET_COUNT) {
        PyErr_Format(PyExc_IndexError, "size bucket %ld out of range [0, %d)", v, TIO_BUCKET_COUNT);
        return -1;
    }
    *bucket = (int)v;
    return 0;
}

static PyObject *analysis_bucket_durations(PyObject *self_obj, PyObject *arg) {
    AnalysisObject *self = (AnalysisObject *)self_obj;
    int b;
    if (!ready(self) || bucket_arg(arg, &b) < 0) {
        return NULL;
    }
    size_t n;
    const uint64_t *d = tio_analysis_bucket_durations(self->a, b, &n);
    return u64_view(self, d, n);
}

static PyObject *analysis_write_csv(PyObject *self_obj, PyObject *arg) {
    AnalysisObject *self = (AnalysisObject *)self_obj;
    if (!ready(self)) {
        return NULL;
    }
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes)) {
        return NULL;
    }
    PyThreadState *ts = PyEval_SaveThread();
    int rc = tio_analysis_write_csv(self->a, PyBytes_AS_STRING(bytes));
    PyEval_RestoreThread(ts);
    Py_DECREF(bytes);
    return tio_py_none_or_raise(rc, "Analysis.write_csv");
}

/* ---- summary() ------------------------------------------------------------------------------ */

static PyObject *buckets_list(AnalysisObject *self, const struct tio_analysis_summary *s) {
    PyObject *l = PyList_New(TIO_BUCKET_COUNT);
    for (int b = 0; l && b < TIO_BUCKET_COUNT; b++) {
        PyObject *e = Py_BuildValue(
            "{s:s,s:n,s:n,s:K,s:n}", "name", tio_size_bucket_name(b), "tensors",
            (Py_ssize_t)s->tensors_per_bucket[b], "periods", (Py_ssize_t)s->periods_per_bucket[b],
            "median_idle_ns", (unsigned long long)tio_analysis_bucket_median(self->a, b),
            "long_idle_periods",
            (Py_ssize_t)tio_analysis_bucket_count_above(self->a, b, self->params.long_idle_ns));
        if (!e) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, b, e);
    }
    return l;
}

/* The `top` tensors of at least 10 MB idle the longest (tio_analysis_top_idle), as in
 * `teraio analyze`. */
static PyObject *top_list(AnalysisObject *self, size_t top) {
    struct tio_trace_view v;
    tio_trace_get_view(self->trace, &v);
    size_t max = top < v.n_tensors ? top : v.n_tensors, keep = 0;
    struct tio_idle_tensor *e = PyMem_Malloc((max ? max : 1) * sizeof *e);
    if (!e) {
        return PyErr_NoMemory();
    }
    int rc = tio_analysis_top_idle(self->a, UINT64_C(10000000), e, max, &keep);
    if (rc < 0) {
        PyMem_Free(e);
        return tio_py_raise(rc, "Analysis.summary(top)");
    }
    PyObject *out = PyList_New((Py_ssize_t)keep);
    for (size_t i = 0; out && i < keep; i++) {
        const struct tio_idle_tensor *x = &e[i];
        PyObject *d = Py_BuildValue(
            "{s:I,s:z,s:s,s:K,s:K,s:K,s:K,s:K,s:I,s:O}", "tensor", x->tensor, "name",
            tio_trace_tensor_name(self->trace, x->tensor), "kind",
            tio_tensor_kind_name(v.tensor_kind[x->tensor]), "bytes",
            (unsigned long long)v.tensor_bytes[x->tensor], "longest_idle_ns",
            (unsigned long long)x->longest.duration_ns, "start",
            (unsigned long long)x->longest.start, "end", (unsigned long long)x->longest.end,
            "total_idle_ns", (unsigned long long)x->total_ns, "periods", x->n_periods, "wraps",
            (x->longest.flags & TIO_PERIOD_WRAPS) ? Py_True : Py_False);
        if (!d) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, d);
    }
    PyMem_Free(e);
    return out;
}

static PyObject *analysis_summary(PyObject *self_obj, PyObject *args, PyObject *kwds) {
    AnalysisObject *self = (AnalysisObject *)self_obj;
    static char *kwlist[] = { "top", NULL };
    Py_ssize_t top = 10;
    if (!ready(self) || !PyArg_ParseTupleAndKeywords(args, kwds, "|n", kwlist, &top)) {
        return NULL;
    }
    if (top < 0) {
        PyErr_SetString(PyExc_ValueError, "summary(top): must be >= 0");
        return NULL;
    }
    const struct tio_trace *tr = self->trace;
    struct tio_analysis_summary s;
    tio_analysis_get_summary(self->a, &s);
    PyObject *d = PyDict_New();
    if (!d) {
        return NULL;
    }
    const char *kname = s.n_kernels ? tio_trace_kernel_name(tr, (uint32_t)s.peak_kernel) : NULL;
    PyObject *path = self->path ? self->path : Py_None;
    Py_INCREF(path);
    if (tio_py_put(d, "trace", path) < 0 ||
        tio_py_put(d, "capacity_bytes", PyLong_FromUnsignedLongLong(self->params.capacity_bytes)) <
            0 ||
        tio_py_put(d, "long_idle_ns", PyLong_FromUnsignedLongLong(self->params.long_idle_ns)) < 0 ||
        tio_py_put(d, "n_kernels", PyLong_FromSize_t(s.n_kernels)) < 0 ||
        tio_py_put(d, "n_tensors", PyLong_FromSize_t(s.n_tensors)) < 0 ||
        tio_py_put(d, "n_uses", PyLong_FromSize_t(s.n_uses)) < 0 ||
        tio_py_put(d, "n_periods", PyLong_FromSize_t(s.n_periods)) < 0 ||
        tio_py_put(d, "inactive_periods", PyLong_FromSize_t(s.n_periods)) < 0 ||
        tio_py_put(d, "iteration_ns", PyLong_FromUnsignedLongLong(s.iteration_ns)) < 0 ||
        tio_py_put(d, "global_bytes", PyLong_FromUnsignedLongLong(s.global_bytes)) < 0 ||
        tio_py_put(d, "peak_resident_bytes", PyLong_FromUnsignedLongLong(s.peak_resident_bytes)) <
            0 ||
        tio_py_put(d, "peak_kernel", PyLong_FromSize_t(s.peak_kernel)) < 0 ||
        tio_py_put(d, "peak_kernel_name",
                   kname ? PyUnicode_FromString(kname) : Py_NewRef(Py_None)) < 0 ||
        tio_py_put(d, "peak_active_bytes", PyLong_FromUnsignedLongLong(s.peak_active_bytes)) < 0 ||
        tio_py_put(d, "active_fraction_mean", PyFloat_FromDouble(s.active_fraction_mean)) < 0 ||
        tio_py_put(d, "active_fraction_max", PyFloat_FromDouble(s.active_fraction_max)) < 0 ||
        tio_py_put(d, "active_capacity_fraction_mean",
                   PyFloat_FromDouble(s.active_capacity_fraction_mean)) < 0 ||
        tio_py_put(d, "active_capacity_fraction_max",
                   PyFloat_FromDouble(s.active_capacity_fraction_max)) < 0 ||
        tio_py_put(d, "long_idle_fraction_10mb_1gb",
                   PyFloat_FromDouble(s.long_idle_fraction_10mb_1gb)) < 0 ||
        tio_py_put(d, "periods_per_bucket",
                   list_of(s.periods_per_bucket, TIO_BUCKET_COUNT, count_item)) < 0 ||
        tio_py_put(d, "tensors_per_bucket",
                   list_of(s.tensors_per_bucket, TIO_BUCKET_COUNT, count_item)) < 0 ||
        tio_py_put(d, "buckets", buckets_list(self, &s)) < 0 ||
        tio_py_put(d, "top", top_list(self, (size_t)top)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *analysis_repr(PyObject *self_obj) {
    AnalysisObject *self = (AnalysisObject *)self_obj;
    if (!self->a) {
        return PyUnicode_FromString("<teraio.Analysis (uninitialised)>");
    }
    struct tio_analysis_summary s;
    tio_analysis_get_summary(self->a, &s);
    return PyUnicode_FromFormat("<teraio.Analysis %zu kernels, %zu tensors, %zu periods>",
                                s.n_kernels, s.n_tensors, s.n_periods);
}

static PyMethodDef analysis_methods[] = {
    { "summary", (PyCFunction)(void (*)(void))analysis_summary, METH_VARARGS | METH_KEYWORDS,
      NULL },
    { "periods", analysis_periods, METH_NOARGS,
      "periods() -> numpy structured array (tensor, flags, start, end, bytes, duration_ns), "
      "sorted by (start, tensor); a read-only view of the C records. flags: 1 = wraps into the "
      "next iteration, 2 = global tensor never used." },
    { "tensor_periods", analysis_tensor_periods, METH_O,
      "tensor_periods(t) -> numpy uint32 array: indices into periods() of tensor t's periods, "
      "in time order." },
    { "first_use", analysis_first_use, METH_O,
      "first_use(t) -> int kernel of tensor t's first use, or None if never used." },
    { "last_use", analysis_last_use, METH_O,
      "last_use(t) -> int kernel of tensor t's last use, or None if never used." },
    { "bucket_durations", analysis_bucket_durations, METH_O,
      "bucket_durations(b) -> numpy uint64 array: sorted period durations (ns) of size bucket "
      "b, an index 0..4 or a name ('<1MB', '1-10MB', '10-100MB', '100MB-1GB', '>=1GB')." },
    { "write_csv", analysis_write_csv, METH_O,
      "write_csv(dir): memory.csv, periods.csv and cdf.csv into dir (created if missing)." },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef analysis_getset[] = {
    { "resident_bytes", get_curve, NULL,
      "numpy uint64 [n_kernels]: bytes resident at each kernel if nothing is offloaded "
      "(read-only view).",
      &curve_resident },
    { "active_bytes", get_curve, NULL,
      "numpy uint64 [n_kernels]: bytes of the tensors each kernel uses (read-only view).",
      &curve_active },
    { "kernel_start_ns", get_curve, NULL,
      "numpy uint64 [n_kernels + 1]: prefix sums of kernel durations (read-only view).",
      &curve_start },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject analysis_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio.Analysis",
    .tp_basicsize = sizeof(AnalysisObject),
    .tp_dealloc = analysis_dealloc,
    .tp_repr = analysis_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Analysis(trace, capacity=0, long_idle_ns=10_000_000): tensor lifetimes, "
              "inactive periods and memory curves of a trace (a teraio.Trace or a path). "
              "capacity: GPU bytes (int or '94GiB') for the capacity-relative fractions.",
    .tp_methods = analysis_methods,
    .tp_getset = analysis_getset,
    .tp_init = analysis_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *liveness_fn(PyObject *mod, PyObject *args, PyObject *kwds) {
    (void)mod;
    static char *kwlist[] = { "trace", "skip_kernel", "exclude", NULL };
    PyObject *trace_obj, *exclude_obj = Py_None;
    const char *skip = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|zO", kwlist, &trace_obj, &skip, &exclude_obj)) {
        return NULL;
    }
    const struct tio_trace *tr = tio_py_trace_borrow ? tio_py_trace_borrow(trace_obj) : NULL;
    if (!tr) {
        PyErr_Clear();
        return PyErr_Format(PyExc_TypeError, "liveness(trace): a teraio.Trace, not %.100s",
                            Py_TYPE(trace_obj)->tp_name);
    }
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    uint64_t *first = PyMem_Malloc((v.n_tensors ? v.n_tensors : 1) * sizeof *first);
    uint64_t *last = PyMem_Malloc((v.n_tensors ? v.n_tensors : 1) * sizeof *last);
    uint64_t *res = PyMem_Malloc((v.n_kernels ? v.n_kernels : 1) * sizeof *res);
    uint8_t *exclude =
        exclude_obj == Py_None ? NULL : PyMem_Calloc(v.n_tensors ? v.n_tensors : 1, 1);
    PyObject *out = NULL, *it = NULL;
    if (!first || !last || !res || (exclude_obj != Py_None && !exclude)) {
        PyErr_NoMemory();
        goto done;
    }
    if (exclude) { /* an iterable of tensor ids */
        it = PyObject_GetIter(exclude_obj);
        PyObject *x;
        while (it && (x = PyIter_Next(it))) {
            unsigned long long t = PyLong_AsUnsignedLongLong(x);
            Py_DECREF(x);
            if (PyErr_Occurred()) {
                goto done;
            }
            if (t >= v.n_tensors) {
                PyErr_Format(PyExc_ValueError, "liveness(exclude): tensor %llu out of range (%zu)",
                             t, v.n_tensors);
                goto done;
            }
            exclude[t] = 1;
        }
        if (PyErr_Occurred()) {
            goto done;
        }
    }
    int rc = tio_analysis_liveness(tr, skip, exclude, first, last, res);
    if (rc < 0) {
        tio_py_raise(rc, "liveness");
        goto done;
    }
    PyObject *f = list_of(first, v.n_tensors, use_item), *l = list_of(last, v.n_tensors, use_item);
    PyObject *r = PyList_New((Py_ssize_t)v.n_kernels);
    for (size_t k = 0; r && k < v.n_kernels; k++) {
        PyObject *x = PyLong_FromUnsignedLongLong(res[k]);
        if (!x) {
            Py_CLEAR(r);
            break;
        }
        PyList_SET_ITEM(r, (Py_ssize_t)k, x);
    }
    if (f && l && r) {
        out = PyTuple_Pack(3, f, l, r);
    }
    Py_XDECREF(f);
    Py_XDECREF(l);
    Py_XDECREF(r);
done:
    Py_XDECREF(it);
    PyMem_Free(first);
    PyMem_Free(last);
    PyMem_Free(res);
    PyMem_Free(exclude);
    return out;
}

static PyMethodDef liveness_def = {
    "liveness", (PyCFunction)(void (*)(void))liveness_fn, METH_VARARGS | METH_KEYWORDS,
    "liveness(trace, skip_kernel=None, exclude=None) -> (first, last, resident): "
    "tio_analysis_liveness of a teraio.Trace. first[t] / last[t]: the first / last "
    "kernel that uses tensor t, None if none does (kernels named skip_kernel do not count, e.g. "
    "RUNTIME_FREE_KERNEL); resident[k]: the bytes resident at kernel k with nothing offloaded "
    "(globals always, other tensors from first to last use), over the tensors not in the "
    "iterable exclude."
};

int tio_py_add_analysis(PyObject *m) {
    analysis_methods[0].ml_doc = summary_doc;
    if (PyType_Ready(&buffer_type) < 0 || PyType_Ready(&analysis_type) < 0) {
        return -1;
    }
    PyObject *fn = PyCFunction_NewEx(&liveness_def, NULL, NULL);
    int rc = fn ? PyModule_AddObjectRef(m, "liveness", fn) : -1;
    Py_XDECREF(fn);
    if (rc < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(m, "Analysis", (PyObject *)&analysis_type);
}
