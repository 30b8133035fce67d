/*
 * teraio.Trace: the trace data model (teraio/trace.h) in Python.
 *
 *     t = teraio.Trace()
 *     w = t.add_tensor(64 << 20, "weight", global_=True, name="w")
 *     k = t.add_kernel("aten::mm", 120_000)
 *     t.add_use(w, "r")
 *     t.finish()
 *     t.kernel_duration_ns        # numpy view (read-only, no copy) into the C columns
 *     t.save("mm.tio")
 *
 * Column views: every column property returns numpy.asarray() of a small TraceColumn object
 * that exports the C array through the buffer protocol and holds a reference to its Trace, so
 * a view keeps the trace alive after `del t`. Views are only handed out for finished traces:
 * while building, the columns are reallocated as they grow, and a finished trace is immutable.
 */
#include <string.h>

#include <teraio/alloc.h>
#include <teraio/trace.h>

#include "core.h"

typedef struct {
    PyObject_HEAD struct tio_trace *tr;
} TraceObject;

typedef struct {
    PyObject_HEAD PyObject *owner; /* the TraceObject whose memory this exports */
    void *ptr;
    Py_ssize_t shape[1];   /* elements */
    Py_ssize_t strides[1]; /* = itemsize */
    Py_ssize_t itemsize;
    const char *format; /* struct-module format of one element */
} ColumnObject;

static PyTypeObject trace_type;
static PyTypeObject column_type;

/* ---- TraceColumn: a read-only buffer exporter -------------------------------------------- */

static void column_dealloc(PyObject *self) {
    ColumnObject *c = (ColumnObject *)self;
    Py_XDECREF(c->owner);
    Py_TYPE(self)->tp_free(self);
}

static int column_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    ColumnObject *c = (ColumnObject *)self;
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "teraio.Trace columns are read-only");
        view->obj = NULL;
        return -1;
    }
    view->buf = c->ptr;
    view->obj = Py_NewRef(self);
    view->len = c->shape[0] * c->itemsize;
    view->readonly = 1;
    view->itemsize = c->itemsize;
    view->format = (flags & PyBUF_FORMAT) ? (char *)c->format : NULL;
    view->ndim = 1;
    view->shape = (flags & PyBUF_ND) ? c->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? c->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs column_as_buffer = {
    .bf_getbuffer = column_getbuffer,
    .bf_releasebuffer = NULL,
};

static Py_ssize_t column_len(PyObject *self) {
    return ((ColumnObject *)self)->shape[0];
}

static PySequenceMethods column_as_sequence = {
    .sq_length = column_len,
};

static PyTypeObject column_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.TraceColumn",
    .tp_basicsize = sizeof(ColumnObject),
    .tp_dealloc = column_dealloc,
    .tp_as_buffer = &column_as_buffer,
    .tp_as_sequence = &column_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only buffer over one column of a finished teraio.Trace (keeps it alive).",
};

/* ---- Trace -------------------------------------------------------------------------------- */

static TraceObject *trace_wrap(PyTypeObject *type, struct tio_trace *tr) {
    TraceObject *self = (TraceObject *)type->tp_alloc(type, 0);
    if (!self) {
        tio_trace_free(tr);
        return NULL;
    }
    self->tr = tr;
    return self;
}

static PyObject *trace_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = { NULL };
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Trace", kwlist)) {
        return NULL;
    }
    struct tio_trace *tr = NULL;
    int rc = tio_trace_new(NULL, &tr);
    if (rc < 0) {
        return tio_py_raise(rc, "Trace()");
    }
    return (PyObject *)trace_wrap(type, tr);
}

static void trace_dealloc(PyObject *self) {
    tio_trace_free(((TraceObject *)self)->tr);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *trace_repr(PyObject *self) {
    struct tio_trace *tr = ((TraceObject *)self)->tr;
    return PyUnicode_FromFormat("<teraio.Trace %zu kernels, %zu tensors, %zu uses%s>",
                                tio_trace_kernel_count(tr), tio_trace_tensor_count(tr),
                                tio_trace_use_count(tr),
                                tio_trace_is_finished(tr) ? "" : ", building");
}

/* format argument: None/"auto", "binary", "json" (or the TIO_TRACE_FORMAT_* int). */
static int parse_format(PyObject *obj, int32_t *out) {
    if (!obj || obj == Py_None) {
        *out = TIO_TRACE_FORMAT_AUTO;
        return 0;
    }
    if (PyLong_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (v < TIO_TRACE_FORMAT_AUTO || v > TIO_TRACE_FORMAT_JSON) {
            PyErr_Format(PyExc_ValueError, "unknown trace format %ld", v);
            return -1;
        }
        *out = (int32_t)v;
        return 0;
    }
    const char *s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8(obj) : NULL;
    if (!s) {
        PyErr_SetString(PyExc_TypeError, "format must be None, 'binary' or 'json'");
        return -1;
    }
    if (strcmp(s, "auto") == 0) {
        *out = TIO_TRACE_FORMAT_AUTO;
    } else if (strcmp(s, "binary") == 0) {
        *out = TIO_TRACE_FORMAT_BINARY;
    } else if (strcmp(s, "json") == 0) {
        *out = TIO_TRACE_FORMAT_JSON;
    } else {
        PyErr_Format(PyExc_ValueError, "unknown trace format '%s' (binary, json)", s);
        return -1;
    }
    return 0;
}

/* The (path, format=None) arguments of Trace.load and Trace.save (spec: "O&|O:load" or
 * "O&|O:save"): *path a new bytes object in the file system encoding. Returns 0 or -1 with an
 * exception set. */
static int
path_format_args(PyObject *args, PyObject *kwds, const char *spec, PyObject **path, int32_t *fmt) {
    static char *kwlist[] = { "path", "format", NULL };
    PyObject *fmt_obj = NULL;
    *path = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, spec, kwlist, PyUnicode_FSConverter, path,
                                     &fmt_obj)) {
        return -1;
    }
    if (parse_format(fmt_obj, fmt) < 0) {
        Py_CLEAR(*path);
        return -1;
    }
    return 0;
}

static PyObject *trace_load(PyObject *cls, PyObject *args, PyObject *kwds) {
    PyObject *path;
    int32_t fmt;
    if (path_format_args(args, kwds, "O&|O:load", &path, &fmt) < 0) {
        return NULL;
    }
    struct tio_trace *tr = NULL;
    PyThreadState *ts = PyEval_SaveThread(); /* file I/O and parsing without the GIL */
    int rc = tio_trace_load(PyBytes_AS_STRING(path), fmt, &tr);
    PyEval_RestoreThread(ts);
    Py_DECREF(path);
    if (rc < 0) {
        return tio_py_raise(rc, "Trace.load");
    }
    return (PyObject *)trace_wrap((PyTypeObject *)cls, tr);
}

static PyObject *trace_from_bytes(PyObject *cls, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = { "data", "format", NULL };
    Py_buffer buf;
    PyObject *fmt_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|O:from_bytes", kwlist, &buf, &fmt_obj)) {
        return NULL;
    }
    int32_t fmt;
    if (parse_format(fmt_obj, &fmt) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    struct tio_trace *tr = NULL;
    int rc = tio_trace_load_mem(buf.buf, (size_t)buf.len, fmt, &tr);
    PyBuffer_Release(&buf);
    if (rc < 0) {
        return tio_py_raise(rc, "Trace.from_bytes");
    }
    return (PyObject *)trace_wrap((PyTypeObject *)cls, tr);
}

/* An enum argument of add_tensor (kind) or add_use (mode): a name, through parse (the value, or
 * -1 with an exception set), or an int (one beyond int32_t becomes `invalid`, for the library to
 * reject with its own message). Returns 0 or -1 with an exception set. */
static int enum_arg(PyObject *o, int (*parse)(const char *), int32_t invalid, int32_t *out) {
    if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8(o);
        int v = s ? parse(s) : -1;
        *out = v;
        return v < 0 ? -1 : 0;
    }
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = v < INT32_MIN || v > INT32_MAX ? invalid : (int32_t)v;
    return 0;
}

/* "weight", "activation", ... (tio_tensor_kind_parse); teraio.Error for another name. */
static int kind_parse(const char *s) {
    int k = tio_tensor_kind_parse(s);
    if (k < 0) {
        tio_py_raise(k, "Trace.add_tensor");
        return -1;
    }
    return k;
}

/* "r", "w" or "rw"; ValueError for another name. */
static int mode_parse(const char *s) {
    int mode = strcmp(s, "r") == 0    ? TIO_USE_READ
               : strcmp(s, "w") == 0  ? TIO_USE_WRITE
               : strcmp(s, "rw") == 0 ? TIO_USE_READ_WRITE
                                      : -1;
    if (mode < 0) {
        PyErr_Format(PyExc_ValueError, "mode must be 'r', 'w' or 'rw', not '%s'", s);
    }
    return mode;
}

static PyObject *trace_add_tensor(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = { "bytes", "kind", "global_", "name", "pinned", NULL };
    unsigned long long bytes;
    PyObject *kind_obj;
    int global = 0, pinned = 0;
    const char *name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KO|pzp:add_tensor", kwlist, &bytes, &kind_obj,
                                     &global, &name, &pinned)) {
        return NULL;
    }
    int32_t kind;
    if (enum_arg(kind_obj, kind_parse, -1, &kind) < 0) {
        return NULL;
    }
    uint32_t flags =
        (global ? (uint32_t)TIO_TENSOR_GLOBAL : 0u) | (pinned ? (uint32_t)TIO_TENSOR_PINNED : 0u);
    uint32_t id;
    int rc = tio_trace_add_tensor(((TraceObject *)self)->tr, bytes, kind, flags, name, &id);
    if (rc < 0) {
        return tio_py_raise(rc, "Trace.add_tensor");
    }
    return PyLong_FromUnsignedLong(id);
}

static PyObject *trace_add_kernel(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = { "name", "duration_ns", "flags", NULL };
    const char *name = NULL;
    unsigned long long dur;
    unsigned int flags = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "zK|I:add_kernel", kwlist, &name, &dur, &flags)) {
        return NULL;
    }
    uint32_t id;
    int rc = tio_trace_add_kernel(((TraceObject *)self)->tr, name, dur, flags, &id);
    if (rc < 0) {
        return tio_py_raise(rc, "Trace.add_kernel");
    }
    return PyLong_FromUnsignedLong(id);
}

static PyObject *trace_add_use(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = { "tensor", "mode", NULL };
    unsigned long tensor;
    PyObject *mode_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "kO:add_use", kwlist, &tensor, &mode_obj)) {
        return NULL;
    }
    int32_t mode;
    if (enum_arg(mode_obj, mode_parse, 0, &mode) < 0) {
        return NULL;
    }
    if (tensor > UINT32_MAX) {
        tensor = UINT32_MAX; /* out of range: the library reports it */
    }
    int rc = tio_trace_add_use(((TraceObject *)self)->tr, (uint32_t)tensor, mode);
    return tio_py_none_or_raise(rc, "Trace.add_use");
}

static PyObject *trace_set_kernel_duration(PyObject *self, PyObject *args) {
    unsigned long kernel;
    unsigned long long dur;
    if (!PyArg_ParseTuple(args, "kK:set_kernel_duration", &kernel, &dur)) {
        return NULL;
    }
    int rc = tio_trace_set_kernel_duration(
        ((TraceObject *)self)->tr, kernel > UINT32_MAX ? UINT32_MAX : (uint32_t)kernel, dur);
    return tio_py_none_or_raise(rc, "Trace.set_kernel_duration");
}

static PyObject *trace_set_meta(PyObject *self, PyObject *args) {
    const char *key, *value;
    if (!PyArg_ParseTuple(args, "ss:set_meta", &key, &value)) {
        return NULL;
    }
    int rc = tio_trace_set_meta(((TraceObject *)self)->tr, key, value);
    return tio_py_none_or_raise(rc, "Trace.set_meta");
}

static PyObject *trace_finish(PyObject *self, PyObject *unused) {
    (void)unused;
    int rc = tio_trace_finish(((TraceObject *)self)->tr);
    return tio_py_none_or_raise(rc, "Trace.finish");
}

static PyObject *trace_save(PyObject *self, PyObject *args, PyObject *kwds) {
    PyObject *path;
    int32_t fmt;
    if (path_format_args(args, kwds, "O&|O:save", &path, &fmt) < 0) {
        return NULL;
    }
    struct tio_trace *tr = ((TraceObject *)self)->tr;
    PyThreadState *ts = PyEval_SaveThread();
    int rc = tio_trace_save(tr, PyBytes_AS_STRING(path), fmt);
    PyEval_RestoreThread(ts);
    Py_DECREF(path);
    return tio_py_none_or_raise(rc, "Trace.save");
}

static PyObject *trace_to_bytes(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = { "format", NULL };
    PyObject *fmt_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:to_bytes", kwlist, &fmt_obj)) {
        return NULL;
    }
    int32_t fmt;
    if (parse_format(fmt_obj, &fmt) < 0) {
        return NULL;
    }
    void *data = NULL;
    size_t len = 0;
    int rc = tio_trace_save_mem(((TraceObject *)self)->tr, fmt, &data, &len);
    if (rc < 0) {
        return tio_py_raise(rc, "Trace.to_bytes");
    }
    PyObject *b = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    tio_free(data);
    return b;
}

static PyObject *trace_hash(PyObject *self, PyObject *unused) {
    (void)unused;
    uint64_t h;
    int rc = tio_trace_hash(((TraceObject *)self)->tr, &h);
    if (rc < 0) {
        return tio_py_raise(rc, "Trace.hash");
    }
    return PyLong_FromUnsignedLongLong(h);
}

/* name(i) of kernel or tensor i: the index checked against count(tr), None for no name. */
static PyObject *indexed_name(PyObject *self,
                              PyObject *arg,
                              const char *what,
                              size_t (*count)(const struct tio_trace *),
                              const char *(*name)(const struct tio_trace *, uint32_t)) {
    struct tio_trace *tr = ((TraceObject *)self)->tr;
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) {
        return NULL;
    }
    size_t n = count(tr);
    if (i < 0 || (size_t)i >= n) {
        PyErr_Format(PyExc_IndexError, "%s %zd out of range (%zu %ss)", what, i, n, what);
        return NULL;
    }
    const char *s = name(tr, (uint32_t)i);
    if (!s) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(s);
}

static PyObject *trace_kernel_name(PyObject *self, PyObject *arg) {
    return indexed_name(self, arg, "kernel", tio_trace_kernel_count, tio_trace_kernel_name);
}

static PyObject *trace_tensor_name(PyObject *self, PyObject *arg) {
    return indexed_name(self, arg, "tensor", tio_trace_tensor_count, tio_trace_tensor_name);
}

static PyObject *trace_build(PyObject *cls, PyObject *args) {
    struct tio_trace *tr = NULL;
    if (tio_py_trace_from_lists(args, &tr) < 0) {
        return NULL;
    }
    return (PyObject *)trace_wrap((PyTypeObject *)cls, tr);
}

/* The trace behind self once finished (its columns are final), else NULL with TIO_ESTATE. */
static const struct tio_trace *finished(PyObject *self, const char *what) {
    const struct tio_trace *tr = ((TraceObject *)self)->tr;
    if (!tio_trace_is_finished(tr)) {
        tio_set_error(TIO_ESTATE, "trace: %s needs a finished trace (call finish())", what);
        tio_py_raise(TIO_ESTATE, what);
        return NULL;
    }
    return tr;
}

static PyObject *trace_tensors(PyObject *self, PyObject *unused) {
    (void)unused;
    const struct tio_trace *tr = finished(self, "Trace.tensors()");
    return tr ? tio_py_trace_tensor_list(tr) : NULL;
}

static PyObject *trace_kernels(PyObject *self, PyObject *unused) {
    (void)unused;
    const struct tio_trace *tr = finished(self, "Trace.kernels()");
    return tr ? tio_py_trace_kernel_list(tr) : NULL;
}

static PyMethodDef trace_methods[] = {
    { "load", (PyCFunction)(void (*)(void))trace_load, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
      "Trace.load(path, format=None) -> Trace: read and validate a .tio or JSON trace." },
    { "from_bytes", (PyCFunction)(void (*)(void))trace_from_bytes,
      METH_VARARGS | METH_KEYWORDS | METH_CLASS,
      "Trace.from_bytes(data, format=None) -> Trace: parse a trace held in memory." },
    { "build", trace_build, METH_VARARGS | METH_CLASS,
      "build(tensors, kernels, meta) -> Trace: a finished trace from lists: tensors = [(bytes, "
      "kind, flags, name)], kernels = [(name, duration_ns, flags, (tensor, mode, tensor, mode, "
      "...))], meta = {str: str} (what the PyTorch layer records)." },
    { "tensors", trace_tensors, METH_NOARGS,
      "tensors() -> [(bytes, kind, flags, name)]: the tensors of a finished trace, as build() "
      "takes them." },
    { "kernels", trace_kernels, METH_NOARGS,
      "kernels() -> [(name, duration_ns, flags, (tensor, mode, ...))]: the kernels of a "
      "finished trace, as build() takes them." },
    { "add_tensor", (PyCFunction)(void (*)(void))trace_add_tensor, METH_VARARGS | METH_KEYWORDS,
      "add_tensor(bytes, kind, global_=False, name=None, pinned=False) -> int id; kind is a "
      "name ('weight', 'grad', ...) or TENSOR_* int." },
    { "add_kernel", (PyCFunction)(void (*)(void))trace_add_kernel, METH_VARARGS | METH_KEYWORDS,
      "add_kernel(name, duration_ns, flags=0) -> int id; flags are KERNEL_* bits." },
    { "add_use", (PyCFunction)(void (*)(void))trace_add_use, METH_VARARGS | METH_KEYWORDS,
      "add_use(tensor, mode): the last kernel uses tensor; mode 'r', 'w', 'rw' or USE_*." },
    { "set_kernel_duration", trace_set_kernel_duration, METH_VARARGS,
      "set_kernel_duration(kernel, duration_ns): before finish() only." },
    { "set_meta", trace_set_meta, METH_VARARGS, "set_meta(key, value): string metadata." },
    { "finish", trace_finish, METH_NOARGS, "finish(): validate and freeze the trace." },
    { "save", (PyCFunction)(void (*)(void))trace_save, METH_VARARGS | METH_KEYWORDS,
      "save(path, format=None): None picks JSON for '.json', else binary; atomic replace." },
    { "to_bytes", (PyCFunction)(void (*)(void))trace_to_bytes, METH_VARARGS | METH_KEYWORDS,
      "to_bytes(format='binary') -> bytes." },
    { "hash", trace_hash, METH_NOARGS, "hash() -> int: 64-bit content hash (names excluded)." },
    { "kernel_name", trace_kernel_name, METH_O, "kernel_name(i) -> str or None." },
    { "tensor_name", trace_tensor_name, METH_O, "tensor_name(i) -> str or None." },
    { NULL, NULL, 0, NULL },
};

/* Column ids for the getset closures. */
enum {
    COL_KERNEL_DURATION,
    COL_KERNEL_FLAGS,
    COL_KERNEL_USE_OFFSET,
    COL_KERNEL_NAME,
    COL_TENSOR_BYTES,
    COL_TENSOR_KIND,
    COL_TENSOR_FLAGS,
    COL_TENSOR_NAME,
    COL_USE_TENSOR,
    COL_USE_MODE,
    COL_COUNT
};

static PyObject *numpy_asarray;

/* The getset closures: a pointer to the column or count id (closure_id[id] == id). */
static int closure_id[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 };

/* A numpy array over n elements of one column of self's trace (itemsize bytes each, buffer
 * format fmt), keeping the trace alive. */
static PyObject *
column_view(PyObject *self, const void *ptr, size_t n, size_t itemsize, const char *fmt) {
    ColumnObject *col = PyObject_New(ColumnObject, &column_type);
    if (!col) {
        return NULL;
    }
    col->owner = Py_NewRef(self);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): drops const; the export is read-only
    col->ptr = (void *)(uintptr_t)ptr;
    col->shape[0] = (Py_ssize_t)n;
    col->strides[0] = (Py_ssize_t)itemsize;
    col->itemsize = (Py_ssize_t)itemsize;
    col->format = fmt;
    if (!numpy_asarray) {
        PyObject *np = PyImport_ImportModule("numpy");
        if (!np) {
            Py_DECREF(col);
            return NULL;
        }
        numpy_asarray = PyObject_GetAttrString(np, "asarray");
        Py_DECREF(np);
        if (!numpy_asarray) {
            Py_DECREF(col);
            return NULL;
        }
    }
    PyObject *arr = PyObject_CallOneArg(numpy_asarray, (PyObject *)col);
    Py_DECREF(col);
    return arr;
}

static PyObject *trace_column(PyObject *self, void *closure) {
    struct tio_trace *tr = ((TraceObject *)self)->tr;
    if (!tio_trace_is_finished(tr)) {
        tio_set_error(TIO_ESTATE, "trace: column views need a finished trace (call finish())");
        return tio_py_raise(TIO_ESTATE, "Trace column");
    }
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    /* per column, in the order of the COL_* ids: the array, its length, element size, format */
    const void *ptr[] = { v.kernel_duration_ns, v.kernel_flags, v.kernel_use_offset, v.kernel_name,
                          v.tensor_bytes,       v.tensor_kind,  v.tensor_flags,      v.tensor_name,
                          v.use_tensor,         v.use_mode };
    const size_t n[] = { v.n_kernels, v.n_kernels, v.n_kernels + 1, v.n_kernels, v.n_tensors,
                         v.n_tensors, v.n_tensors, v.n_tensors,     v.n_uses,    v.n_uses };
    static const size_t itemsize[] = { 8, 4, 8, 4, 8, 4, 4, 4, 4, 1 };
    static const char *const fmt[] = { "Q", "I", "Q", "I", "Q", "i", "I", "I", "I", "B" };
    _Static_assert(sizeof ptr / sizeof ptr[0] == COL_COUNT && sizeof n / sizeof n[0] == COL_COUNT &&
                       sizeof itemsize / sizeof itemsize[0] == COL_COUNT &&
                       sizeof fmt / sizeof fmt[0] == COL_COUNT,
                   "one entry per column");
    int c = *(const int *)closure;
    return column_view(self, ptr[c], n[c], itemsize[c], fmt[c]);
}

static PyObject *trace_get_count(PyObject *self, void *closure) {
    struct tio_trace *tr = ((TraceObject *)self)->tr;
    switch (*(const int *)closure) {
    case 0:
        return PyLong_FromSize_t(tio_trace_kernel_count(tr));
    case 1:
        return PyLong_FromSize_t(tio_trace_tensor_count(tr));
    case 2:
        return PyLong_FromSize_t(tio_trace_use_count(tr));
    case 3:
        return PyLong_FromUnsignedLongLong(tio_trace_total_duration_ns(tr));
    default:
        return PyBool_FromLong(tio_trace_is_finished(tr));
    }
}

static PyObject *trace_get_meta(PyObject *self, void *closure) {
    (void)closure;
    struct tio_trace *tr = ((TraceObject *)self)->tr;
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < tio_trace_meta_count(tr); i++) {
        const char *k, *v;
        if (tio_trace_meta_at(tr, i, &k, &v) < 0) {
            continue;
        }
        PyObject *val = PyUnicode_FromString(v);
        if (!val || PyDict_SetItemString(d, k, val) < 0) {
            Py_XDECREF(val);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(val);
    }
    return d;
}

static int trace_set_meta_dict(PyObject *self, PyObject *value, void *closure) {
    (void)closure;
    if (!value || !PyDict_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "meta must be set to a dict of str -> str");
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(value, &pos, &k, &v)) {
        const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        const char *vs = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (!ks || !vs) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "meta keys and values must be str");
            }
            return -1;
        }
        int rc = tio_trace_set_meta(((TraceObject *)self)->tr, ks, vs);
        if (rc < 0) {
            tio_py_raise(rc, "Trace.meta");
            return -1;
        }
    }
    return 0;
}

#define COLUMN(name, id, doc) \
    { name, trace_column, NULL, doc, &closure_id[id] }
static PyGetSetDef trace_getset[] = {
    { "n_kernels", trace_get_count, NULL, "number of kernels", &closure_id[0] },
    { "n_tensors", trace_get_count, NULL, "number of tensors", &closure_id[1] },
    { "n_uses", trace_get_count, NULL, "number of uses", &closure_id[2] },
    { "total_duration_ns", trace_get_count, NULL, "sum of kernel durations (ns)", &closure_id[3] },
    { "finished", trace_get_count, NULL, "True once finish() succeeded", &closure_id[4] },
    { "meta", trace_get_meta, trace_set_meta_dict,
      "metadata as a new dict; assigning a dict sets (adds or replaces) those keys", NULL },
    COLUMN("kernel_duration_ns", COL_KERNEL_DURATION, "uint64[n_kernels] view: ns"),
    COLUMN("kernel_flags", COL_KERNEL_FLAGS, "uint32[n_kernels] view: KERNEL_* bits"),
    COLUMN("kernel_use_offset",
           COL_KERNEL_USE_OFFSET,
           "uint64[n_kernels + 1] view: CSR offsets into the use columns"),
    COLUMN("kernel_name_index",
           COL_KERNEL_NAME,
           "uint32[n_kernels] view: string index (0xFFFFFFFF: none)"),
    COLUMN("tensor_bytes", COL_TENSOR_BYTES, "uint64[n_tensors] view: bytes"),
    COLUMN("tensor_kind", COL_TENSOR_KIND, "int32[n_tensors] view: TENSOR_* kinds"),
    COLUMN("tensor_flags", COL_TENSOR_FLAGS, "uint32[n_tensors] view: TENSOR_GLOBAL/PINNED"),
    COLUMN("tensor_name_index",
           COL_TENSOR_NAME,
           "uint32[n_tensors] view: string index (0xFFFFFFFF: none)"),
    COLUMN("use_tensor", COL_USE_TENSOR, "uint32[n_uses] view: tensor ids"),
    COLUMN("use_mode", COL_USE_MODE, "uint8[n_uses] view: USE_READ/WRITE/READ_WRITE"),
    { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject trace_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio.Trace",
    .tp_basicsize = sizeof(TraceObject),
    .tp_dealloc = trace_dealloc,
    .tp_repr = trace_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Trace(): one training iteration (kernels, tensors, uses). Build it with "
              "add_tensor/add_kernel/add_use and finish(), or read one with Trace.load(path) "
              "or Trace.from_bytes(data). Column properties of a finished trace are read-only "
              "numpy views that share its memory.",
    .tp_methods = trace_methods,
    .tp_getset = trace_getset,
    .tp_new = trace_new,
};

/*
 * tio_py_trace_borrow (core.h): the C trace behind a teraio.Trace, for the other bindings.
 * Borrowed: valid while the caller holds a reference to obj. NULL with TypeError set when obj is
 * not a teraio.Trace.
 */
const struct tio_trace *tio_py_trace_borrow(PyObject *obj) {
    if (!PyObject_TypeCheck(obj, &trace_type)) {
        PyErr_Format(PyExc_TypeError, "expected a teraio.Trace or a path, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return ((TraceObject *)obj)->tr;
}

int tio_py_add_trace(PyObject *m) {
    if (PyType_Ready(&column_type) < 0 || PyType_Ready(&trace_type) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "Trace", (PyObject *)&trace_type) < 0 ||
        PyModule_AddObjectRef(m, "TraceColumn", (PyObject *)&column_type) < 0) {
        return -1;
    }
    static const struct {
        const char *name;
        long value;
    } consts[] = {
        { "TENSOR_WEIGHT", TIO_TENSOR_WEIGHT },
        { "TENSOR_GRAD", TIO_TENSOR_GRAD },
        { "TENSOR_OPTIM_STATE", TIO_TENSOR_OPTIM_STATE },
        { "TENSOR_ACTIVATION", TIO_TENSOR_ACTIVATION },
        { "TENSOR_TEMP", TIO_TENSOR_TEMP },
        { "TENSOR_INPUT", TIO_TENSOR_INPUT },
        { "TENSOR_OTHER", TIO_TENSOR_OTHER },
        { "TENSOR_GLOBAL", TIO_TENSOR_GLOBAL },
        { "TENSOR_PINNED", TIO_TENSOR_PINNED },
        { "KERNEL_COMM", TIO_KERNEL_COMM },
        { "KERNEL_OPTIM", TIO_KERNEL_OPTIM },
        { "KERNEL_BACKWARD", TIO_KERNEL_BACKWARD },
        { "USE_READ", TIO_USE_READ },
        { "USE_WRITE", TIO_USE_WRITE },
        { "USE_READ_WRITE", TIO_USE_READ_WRITE },
        { "FORMAT_AUTO", TIO_TRACE_FORMAT_AUTO },
        { "FORMAT_BINARY", TIO_TRACE_FORMAT_BINARY },
        { "FORMAT_JSON", TIO_TRACE_FORMAT_JSON },
        { "NO_NAME", (long)TIO_NO_NAME },
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) {
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0) {
            return -1;
        }
    }
    return 0;
}
