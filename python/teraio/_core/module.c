/* teraio._core: the CPython binding of libteraio, written in C. */
#include <teraio/teraio.h>

#include "core.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

PyObject *tio_py_error;

PyObject *tio_py_raise(int status, const char *what) {
    const char *detail = tio_last_error();
    PyObject *args = Py_BuildValue("(is)", status, "");
    if (!args) {
        return NULL;
    }
    PyObject *msg;
    if (detail && *detail) {
        msg = PyUnicode_FromFormat("%s: %s: %s", what, tio_strerror(status), detail);
    } else {
        msg = PyUnicode_FromFormat("%s: %s", what, tio_strerror(status));
    }
    if (msg) {
        PyTuple_SetItem(args, 1, msg); /* steals msg */
        PyErr_SetObject(tio_py_error, args);
    }
    Py_DECREF(args);
    return NULL;
}

static PyObject *py_version(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyUnicode_FromString(tio_version());
}

static PyObject *py_strerror(PyObject *self, PyObject *arg) {
    (void)self;
    long s = PyLong_AsLong(arg);
    if (s == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return PyUnicode_FromString(tio_strerror((int)s));
}

static PyObject *py_status_is_input_error(PyObject *self, PyObject *arg) {
    (void)self;
    int status;
    if (!PyArg_Parse(arg, "i", &status)) {
        return NULL;
    }
    return PyBool_FromLong(tio_status_is_input_error(status));
}

/* parse_bytes / parse_rate: a str through tio_parse_bytes (an int) or tio_parse_rate (a float). */
static PyObject *parse_quantity(PyObject *arg, int rate) {
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s) {
        return NULL;
    }
    uint64_t bytes = 0;
    double bps = 0;
    int rc = rate ? tio_parse_rate(s, &bps) : tio_parse_bytes(s, &bytes);
    if (rc < 0) {
        return tio_py_raise(rc, rate ? "parse_rate" : "parse_bytes");
    }
    return rate ? PyFloat_FromDouble(bps) : PyLong_FromUnsignedLongLong(bytes);
}

static PyObject *py_parse_bytes(PyObject *self, PyObject *arg) {
    (void)self;
    return parse_quantity(arg, 0);
}

static PyObject *py_parse_rate(PyObject *self, PyObject *arg) {
    (void)self;
    return parse_quantity(arg, 1);
}

static PyObject *py_format_bytes(PyObject *self, PyObject *arg) {
    (void)self;
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    char buf[64];
    return PyUnicode_FromString(tio_format_bytes(v, buf, sizeof buf));
}

/* malloc_mmap_threshold(n) -> bool: glibc's M_MMAP_THRESHOLD, so that allocations of n bytes or
 * more are mapped on their own and go back to the OS when freed (it also stops glibc from raising
 * the threshold by itself). Set at startup (MALLOC_MMAP_THRESHOLD_), that is all it takes; set
 * later, glibc may already have raised its trim threshold with its own (up to 64 MiB), and the
 * heap's top would keep serving large blocks: so the trim threshold goes back to twice n (glibc's
 * own rule, 128 KiB at the least) and what the heaps hold free now is handed back
 * (malloc_trim). False where the C library is not glibc (nothing done). */
static PyObject *py_malloc_mmap_threshold(PyObject *self, PyObject *arg) {
    (void)self;
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
#if defined(__GLIBC__)
    /* glibc refuses more than HEAP_MAX_SIZE / 2 (32 MiB on 64-bit) */
    long long trim = 2 * n < 128LL * 1024 ? 128LL * 1024 : 2 * n;
    /* mallopt sets the whole process's allocator: that is what this call is for */
    if (n < 0 || n > 32LL * 1024 * 1024 ||
        mallopt(M_MMAP_THRESHOLD, (int)n) != 1 ||    // NOLINT(concurrency-mt-unsafe)
        mallopt(M_TRIM_THRESHOLD, (int)trim) != 1) { // NOLINT(concurrency-mt-unsafe)
        PyErr_Format(PyExc_ValueError,
                     "malloc mmap threshold %lld bytes: glibc accepts 0 to 32 MiB", n);
        return NULL;
    }
    (void)malloc_trim(0);
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    { "version", py_version, METH_NOARGS, "version() -> str: libteraio's version." },
    { "strerror", py_strerror, METH_O, "strerror(status) -> str." },
    { "status_is_input_error", py_status_is_input_error, METH_O,
      "status_is_input_error(status) -> bool: bad input (the CLI's exit 2), not a failure." },
    { "parse_bytes", py_parse_bytes, METH_O, "parse_bytes('94GiB') -> int bytes." },
    { "parse_rate", py_parse_rate, METH_O, "parse_rate('6.5GB/s') -> float bytes/s." },
    { "format_bytes", py_format_bytes, METH_O, "format_bytes(n) -> '1.50 MiB'." },
    { "malloc_mmap_threshold", py_malloc_mmap_threshold, METH_O,
      "malloc_mmap_threshold(n) -> bool: set glibc's M_MMAP_THRESHOLD (False: not glibc)." },
    { NULL, NULL, 0, NULL },
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    "teraio._core",
    "C binding of libteraio.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

/* The name CPython looks for: PyInit_ and the module's name. */
PyMODINIT_FUNC PyInit__core(void);  // NOLINT(readability-identifier-naming)
PyMODINIT_FUNC PyInit__core(void) { // NOLINT(readability-identifier-naming)
    PyObject *m = PyModule_Create(&moddef);
    if (!m) {
        return NULL;
    }
    tio_py_error = PyErr_NewExceptionWithDoc(
        "teraio.Error", "A teraio failure: args are (status code, message naming the problem).",
        NULL, NULL);
    if (!tio_py_error || PyModule_AddObjectRef(m, "Error", tio_py_error) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    int (*hooks[])(PyObject *) = { tio_py_add_trace,   tio_py_add_analysis, tio_py_add_model,
                                   tio_py_add_plan,    tio_py_add_sim,      tio_py_add_engine,
                                   tio_py_add_runtime, tio_py_add_dispatch, tio_py_add_iobuf,
                                   tio_py_add_bounded, tio_py_add_log };
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        if (hooks[i] && hooks[i](m) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
