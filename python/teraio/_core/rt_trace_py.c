/* teraio._core.RtTrace: a trace built from lists by the PyTorch layer (private). */
#include <teraio/trace.h>

#include "runtime_types.h"

/* ---- RtTrace ------------------------------------------------------------------------------ */

static void rttrace_dealloc(RtTraceObject *self) {
    tio_trace_free(self->tr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *wrap_trace(struct tio_trace *tr) {
    RtTraceObject *o = PyObject_New(RtTraceObject, &RtTraceType);
    if (!o) {
        tio_trace_free(tr);
        return NULL;
    }
    o->tr = tr;
    return (PyObject *)o;
}

/* RtTrace.build(tensors, kernels, meta): tensors = [(bytes, kind, flags, name)], kernels =
 * [(name, duration_ns, flags, [tensor, mode, tensor, mode, ...])], meta = {key: value}. */
static PyObject *rttrace_build(PyObject *cls, PyObject *args) {
    (void)cls;
    PyObject *tensors, *kernels, *meta;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &tensors, &PyList_Type, &kernels,
                          &PyDict_Type, &meta)) {
        return NULL;
    }
    struct tio_trace_params tp = tio_trace_params_default();
    tp.tensors_hint = (size_t)PyList_GET_SIZE(tensors);
    tp.kernels_hint = (size_t)PyList_GET_SIZE(kernels);
    struct tio_trace *tr;
    int rc = tio_trace_new(&tp, &tr);
    if (rc < 0) {
        return tio_py_raise(rc, "trace");
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tensors); i++) {
        unsigned long long bytes;
        int kind;
        unsigned int flags;
        const char *name;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(tensors, i), "KiIz", &bytes, &kind, &flags, &name)) {
            goto fail;
        }
        if ((rc = tio_trace_add_tensor(tr, bytes, kind, flags, name, NULL)) < 0) {
            tio_py_raise(rc, "trace tensor");
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(kernels); i++) {
        const char *name;
        unsigned long long dur;
        unsigned int flags;
        PyObject *uses;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(kernels, i), "zKIO", &name, &dur, &flags, &uses)) {
            goto fail;
        }
        if ((rc = tio_trace_add_kernel(tr, name, dur, flags, NULL)) < 0) {
            tio_py_raise(rc, "trace kernel");
            goto fail;
        }
        PyObject *seq = PySequence_Fast(uses, "kernel uses must be a sequence");
        if (!seq) {
            goto fail;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        PyObject **items = PySequence_Fast_ITEMS(seq);
        for (Py_ssize_t j = 0; j + 1 < n; j += 2) {
            long t = PyLong_AsLong(items[j]);
            long mode = PyLong_AsLong(items[j + 1]);
            if (PyErr_Occurred()) {
                Py_DECREF(seq);
                goto fail;
            }
            if (t < 0 || t > (long)UINT32_MAX) {
                Py_DECREF(seq);
                PyErr_Format(PyExc_ValueError, "kernel %zd: tensor id %ld out of range", i, t);
                goto fail;
            }
            if ((rc = tio_trace_add_use(tr, (uint32_t)t, (int32_t)mode)) < 0) {
                Py_DECREF(seq);
                tio_py_raise(rc, "trace use");
                goto fail;
            }
        }
        Py_DECREF(seq);
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(meta, &pos, &key, &value)) {
        const char *k = PyUnicode_AsUTF8(key), *v = PyUnicode_AsUTF8(value);
        if (!k || !v) {
            goto fail;
        }
        if ((rc = tio_trace_set_meta(tr, k, v)) < 0) {
            tio_py_raise(rc, "trace meta");
            goto fail;
        }
    }
    if ((rc = tio_trace_finish(tr)) < 0) {
        tio_py_raise(rc, "trace");
        goto fail;
    }
    return wrap_trace(tr);
fail:
    tio_trace_free(tr);
    return NULL;
}

static PyObject *rttrace_load(PyObject *cls, PyObject *arg) {
    (void)cls;
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) {
        return NULL;
    }
    struct tio_trace *tr;
    int rc = tio_trace_load(path, TIO_TRACE_FORMAT_AUTO, &tr);
    if (rc < 0) {
        return tio_py_raise(rc, path);
    }
    return wrap_trace(tr);
}

static PyObject *rttrace_save(RtTraceObject *self, PyObject *arg) {
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) {
        return NULL;
    }
    int rc = tio_trace_save(self->tr, path, TIO_TRACE_FORMAT_AUTO);
    if (rc < 0) {
        return tio_py_raise(rc, path);
    }
    Py_RETURN_NONE;
}

static PyObject *rttrace_hash(RtTraceObject *self, PyObject *unused) {
    (void)unused;
    uint64_t h;
    int rc = tio_trace_hash(self->tr, &h);
    if (rc < 0) {
        return tio_py_raise(rc, "trace hash");
    }
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *rttrace_counts(RtTraceObject *self, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("(nnn)", (Py_ssize_t)tio_trace_kernel_count(self->tr),
                         (Py_ssize_t)tio_trace_tensor_count(self->tr),
                         (Py_ssize_t)tio_trace_use_count(self->tr));
}

/* RtTrace.tensors() -> [(bytes, kind, flags, name)]; kernels() -> [(name, ns, flags, uses)]. */
static PyObject *rttrace_tensors(RtTraceObject *self, PyObject *unused) {
    (void)unused;
    struct tio_trace_view v;
    tio_trace_get_view(self->tr, &v);
    PyObject *l = PyList_New((Py_ssize_t)v.n_tensors);
    for (size_t t = 0; l && t < v.n_tensors; t++) {
        const char *name = tio_trace_tensor_name(self->tr, (uint32_t)t);
        PyObject *it = Py_BuildValue("(KiIz)", (unsigned long long)v.tensor_bytes[t],
                                     v.tensor_kind[t], v.tensor_flags[t], name);
        if (!it) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)t, it);
    }
    return l;
}

static PyObject *rttrace_kernels(RtTraceObject *self, PyObject *unused) {
    (void)unused;
    struct tio_trace_view v;
    tio_trace_get_view(self->tr, &v);
    PyObject *l = PyList_New((Py_ssize_t)v.n_kernels);
    for (size_t k = 0; l && k < v.n_kernels; k++) {
        uint64_t u0 = v.kernel_use_offset[k], u1 = v.kernel_use_offset[k + 1];
        PyObject *uses = PyTuple_New((Py_ssize_t)(2 * (u1 - u0)));
        if (!uses) {
            Py_DECREF(l);
            return NULL;
        }
        for (uint64_t u = u0; u < u1; u++) {
            PyTuple_SET_ITEM(uses, (Py_ssize_t)(2 * (u - u0)),
                             PyLong_FromUnsignedLong(v.use_tensor[u]));
            PyTuple_SET_ITEM(uses, (Py_ssize_t)(2 * (u - u0) + 1), PyLong_FromLong(v.use_mode[u]));
        }
        PyObject *it =
            Py_BuildValue("(zKIN)", tio_trace_kernel_name(self->tr, (uint32_t)k),
                          (unsigned long long)v.kernel_duration_ns[k], v.kernel_flags[k], uses);
        if (!it) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)k, it);
    }
    return l;
}

static PyObject *rttrace_meta(RtTraceObject *self, PyObject *arg) {
    const char *key = PyUnicode_AsUTF8(arg);
    if (!key) {
        return NULL;
    }
    const char *v = tio_trace_get_meta(self->tr, key);
    if (!v) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(v);
}

static PyMethodDef rttrace_methods[] = {
    { "build", (PyCFunction)rttrace_build, METH_VARARGS | METH_CLASS,
      "build(tensors, kernels, meta) -> RtTrace" },
    { "load", (PyCFunction)rttrace_load, METH_O | METH_CLASS, "load(path) -> RtTrace" },
    { "save", (PyCFunction)rttrace_save, METH_O, "save(path)" },
    { "hash", (PyCFunction)rttrace_hash, METH_NOARGS, "hash() -> int" },
    { "counts", (PyCFunction)rttrace_counts, METH_NOARGS, "counts() -> (kernels, tensors, uses)" },
    { "tensors", (PyCFunction)rttrace_tensors, METH_NOARGS, "tensors() -> list" },
    { "kernels", (PyCFunction)rttrace_kernels, METH_NOARGS, "kernels() -> list" },
    { "meta", (PyCFunction)rttrace_meta, METH_O, "meta(key) -> str or None" },
    { NULL, NULL, 0, NULL },
};

PyTypeObject RtTraceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.RtTrace",
    .tp_basicsize = sizeof(RtTraceObject),
    .tp_dealloc = (destructor)rttrace_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A trace recorded by the PyTorch layer (private).",
    .tp_methods = rttrace_methods,
};
