/* teraio.Trace as Python lists: Trace.build() from the lists the PyTorch layer records, and
 * Trace.tensors() / Trace.kernels() back (the method table is in trace_py.c). */
#include <teraio/trace.h>

#include "core.h"

/* Trace.build(tensors, kernels, meta): tensors = [(bytes, kind, flags, name)], kernels =
 * [(name, duration_ns, flags, [tensor, mode, tensor, mode, ...])], meta = {key: value}. */
int tio_py_trace_from_lists(PyObject *args, struct tio_trace **out) {
    PyObject *tensors, *kernels, *meta;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &tensors, &PyList_Type, &kernels,
                          &PyDict_Type, &meta)) {
        return -1;
    }
    struct tio_trace_params tp = tio_trace_params_default();
    tp.tensors_hint = (size_t)PyList_GET_SIZE(tensors);
    tp.kernels_hint = (size_t)PyList_GET_SIZE(kernels);
    struct tio_trace *tr;
    int rc = tio_trace_new(&tp, &tr);
    if (rc < 0) {
        tio_py_raise(rc, "trace");
        return -1;
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
    *out = tr;
    return 0;
fail:
    tio_trace_free(tr);
    return -1;
}

/* Trace.tensors() -> [(bytes, kind, flags, name)]; kernels() -> [(name, ns, flags, uses)]. */
PyObject *tio_py_trace_tensor_list(const struct tio_trace *tr) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    PyObject *l = PyList_New((Py_ssize_t)v.n_tensors);
    for (size_t t = 0; l && t < v.n_tensors; t++) {
        const char *name = tio_trace_tensor_name(tr, (uint32_t)t);
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

PyObject *tio_py_trace_kernel_list(const struct tio_trace *tr) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
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
            Py_BuildValue("(zKIN)", tio_trace_kernel_name(tr, (uint32_t)k),
                          (unsigned long long)v.kernel_duration_ns[k], v.kernel_flags[k], uses);
        if (!it) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)k, it);
    }
    return l;
}
