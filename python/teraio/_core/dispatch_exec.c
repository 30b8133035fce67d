/* teraio._core.OpFast: the executing step's calls into the executor, in C. The operator's
 * before/ready/after, the deaths (forget), the binding of a new movable tensor and the release
 * points call the C executor directly (runtime_py.h) when the driver's runtime is a
 * teraio._core.Runtime; Python runs only the storage actions (driver._apply: resizing torch
 * storages) and the offload check of the kernels that trigger offloads
 * (driver._check_offloads). Another runtime object (a test's wrapper) gets the same calls by
 * method name. See dispatch_impl.h. */
#include "core.h"
#include "dispatch_impl.h"
#include "runtime_py.h"

/* ---- the executor, directly or by method name --------------------------------------------- */

/* runtime.<name>(arg) by name, for a runtime that is not a teraio._core.Runtime. 0 / -1. */
static int call_by_name(OpFastObject *self, PyObject *name, PyObject *arg) {
    PyObject *r = PyObject_CallMethodOneArg(self->runtime, name, arg);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* ready(k) or after(k). 0 / -1. */
static int rt_kernel_call(OpFastObject *self, int ready, long long k) {
    if (self->direct) {
        return ready ? tio_py_runtime_ready(self->runtime, (uint64_t)k)
                     : tio_py_runtime_after(self->runtime, (uint64_t)k);
    }
    PyObject *kl = PyLong_FromLongLong(k);
    int rc = kl ? call_by_name(self, ready ? s_ready : s_after, kl) : -1;
    Py_XDECREF(kl);
    return rc;
}

/* before(k): *acts a new reference to its actions when there are any, else NULL. 0 / -1. */
static int rt_before(OpFastObject *self, long long k, PyObject **acts) {
    *acts = NULL;
    if (self->direct) {
        return tio_py_runtime_before(self->runtime, (uint64_t)k, acts) < 0 ? -1 : 0;
    }
    PyObject *kl = PyLong_FromLongLong(k);
    PyObject *r = kl ? PyObject_CallMethodOneArg(self->runtime, s_before, kl) : NULL;
    Py_XDECREF(kl);
    if (!r) {
        return -1;
    }
    Py_ssize_t n = PyObject_Length(r);
    if (n < 0) {
        Py_DECREF(r);
        return -1;
    }
    if (n > 0) {
        *acts = r;
    } else {
        Py_DECREF(r);
    }
    return 0;
}

static int rt_forget(OpFastObject *self, PyObject *tid) {
    if (self->direct) {
        unsigned long t = PyLong_AsUnsignedLong(tid);
        if (t == (unsigned long)-1 && PyErr_Occurred()) {
            return -1;
        }
        return tio_py_runtime_forget(self->runtime, (uint32_t)t);
    }
    return call_by_name(self, s_forget, tid);
}

/* bind(tid, ptr), ptr a Python int (the Runtime's bind parses both without range checks). */
static int rt_bind(OpFastObject *self, PyObject *tid, PyObject *ptr) {
    if (self->direct) {
        unsigned long t = PyLong_AsUnsignedLongMask(tid);
        unsigned long long p = PyLong_AsUnsignedLongLongMask(ptr);
        if (PyErr_Occurred()) {
            return -1;
        }
        // NOLINTNEXTLINE(performance-no-int-to-ptr): a storage's address from Python
        return tio_py_runtime_bind(self->runtime, (uint32_t)t, (void *)(uintptr_t)p);
    }
    PyObject *r = PyObject_CallMethodObjArgs(self->runtime, s_bind, tid, ptr, NULL);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* ---- the steps of a kernel ---------------------------------------------------------------- */

/* before(k), driver._apply(actions) when there are any, ready(k), with busy set (the storage
 * actions call resize_, which the mode must pass through). 0 or -1. */
static int before_kernel(OpFastObject *self, long long k) {
    self->busy = 1;
    PyObject *acts;
    int rc = rt_before(self, k, &acts);
    if (rc == 0 && acts) {
        PyObject *r = PyObject_CallMethodOneArg(self->driver, s_apply, acts);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
    Py_XDECREF(acts);
    if (rc == 0) {
        rc = rt_kernel_call(self, 1, k);
    }
    self->busy = 0;
    return rc;
}

int dsp_prepare_kernel(OpFastObject *self, long long k) {
    if (k < PyBytes_GET_SIZE(self->kflags) &&
        ((unsigned char)PyBytes_AS_STRING(self->kflags)[k] & OPFAST_CHECK_OFFLOAD)) {
        PyObject *kl = PyLong_FromLongLong(k);
        PyObject *why = kl ? PyObject_CallMethodOneArg(self->driver, s_check_offloads, kl) : NULL;
        Py_XDECREF(kl);
        if (!why) {
            return -1;
        }
        if (why != Py_None) {
            PyObject *r = PyObject_CallMethodOneArg(self->driver, s_diverge, why);
            Py_DECREF(why);
            Py_XDECREF(r);
            return r ? 0 : -1;
        }
        Py_DECREF(why);
    }
    return before_kernel(self, k) < 0 ? -1 : 1;
}

/* The release point after kernel k (the driver's release_at[k]): the movable intermediates past
 * their last use are held only weakly from now on (reachable while their owner keeps them). */
static int release_point(OpFastObject *self, long long k) {
    PyObject *kl = PyLong_FromLongLong(k);
    if (!kl) {
        return -1;
    }
    PyObject *ts = PyDict_GetItemWithError(self->release_at, kl);
    Py_DECREF(kl);
    if (!ts) {
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *seq = PySequence_Fast(ts, "release_at: a list of tensor ids");
    if (!seq) {
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *st = PyDict_GetItemWithError(self->st_by_id, t);
        if (!st) {
            rc = PyErr_Occurred() ? -1 : 0;
            continue;
        }
        Py_INCREF(st);
        PyObject *wr = PyDict_DelItem(self->st_by_id, t) == 0 ? PyWeakref_NewRef(st, NULL) : NULL;
        rc = wr && PyDict_SetItem(self->weak_by_id, t, wr) == 0 ? 0 : -1;
        Py_XDECREF(wr);
        Py_DECREF(st);
    }
    Py_DECREF(seq);
    return rc;
}

int dsp_after_kernel(OpFastObject *self, long long k) {
    if (rt_kernel_call(self, 0, k) < 0) {
        return -1;
    }
    unsigned flags =
        k < PyBytes_GET_SIZE(self->kflags) ? (unsigned char)PyBytes_AS_STRING(self->kflags)[k] : 0;
    if ((flags & OPFAST_RELEASE) && release_point(self, k) < 0) {
        return -1;
    }
    if (flags & OPFAST_ARM) {
        PyObject *kl = PyLong_FromLongLong(k);
        PyObject *r = kl ? PyObject_CallMethodOneArg(self->driver, s_arm, kl) : NULL;
        Py_XDECREF(kl);
        if (!r) {
            return -1;
        }
        Py_DECREF(r);
    }
    return 0;
}

int dsp_bind_new(OpFastObject *self, PyObject *tid, PyObject *st) {
    if (PyDict_SetItem(self->st_by_id, tid, st) < 0) {
        return -1;
    }
    PyObject *ptr = PyObject_CallMethodNoArgs(st, s_data_ptr);
    int rc = ptr && PyDict_SetItem(self->ptr_by_id, tid, ptr) == 0 ? rt_bind(self, tid, ptr) : -1;
    Py_XDECREF(ptr);
    return rc;
}

/* ---- deaths and free markers -------------------------------------------------------------- */

/* 1 if kernel k of the plan is a free marker, 0 if not (or past the end), -1 error. */
static int is_free_marker(OpFastObject *self, long long k) {
    if (k >= PyList_GET_SIZE(self->kernels)) {
        return 0;
    }
    PyObject *name = PyTuple_GET_ITEM(PyList_GET_ITEM(self->kernels, (Py_ssize_t)k), 0);
    return name == self->free_kernel ? 1 : PyObject_RichCompareBool(name, self->free_kernel, Py_EQ);
}

/* The planned free markers from kernel k on (the driver's _run_free_markers): each must name a
 * tensor that died; it goes through the executor as a kernel. 0 (run, or diverged) or -1. */
static int run_free_markers(OpFastObject *self) {
    for (;;) {
        int fm = is_free_marker(self, self->k);
        if (fm <= 0) {
            return fm;
        }
        long long k = self->k;
        PyObject *uses = PyTuple_GET_ITEM(PyList_GET_ITEM(self->kernels, (Py_ssize_t)k), 3);
        if (PyTuple_GET_SIZE(uses) < 1) {
            PyErr_Format(PyExc_ValueError, "free marker kernel %lld names no tensor", k);
            return -1;
        }
        PyObject *tid = PyTuple_GET_ITEM(uses, 0);
        int dead = PySet_Contains(self->dead_set, tid);
        if (dead < 0) {
            return -1;
        }
        if (!dead) {
            return dsp_diverge(
                self, "tensor %S is still alive at operator %lld, the plan expects it freed", tid,
                k);
        }
        int rc = dsp_prepare_kernel(self, k);
        if (rc <= 0) {
            return rc; /* error, or diverged: the rest of the step runs plainly */
        }
        if (rt_kernel_call(self, 0, k) < 0) {
            return -1;
        }
        self->k = k + 1;
    }
}

/* Recording: an intermediate freed later than right after its last use gets a free marker kernel
 * (pinned ones do not: their death time is not the step's; gloo drops a buffer on its own
 * thread). 0 / -1. */
static int record_death(OpFastObject *self, PyObject *tid) {
    PyObject *lk = PyDict_GetItemWithError(self->last_k, tid);
    if (!lk && PyErr_Occurred()) {
        return -1;
    }
    long long last = lk ? PyLong_AsLongLong(lk) : self->k;
    Py_ssize_t ti = PyLong_AsSsize_t(tid);
    if ((last == -1 || ti == -1) && PyErr_Occurred()) {
        return -1;
    }
    if (ti >= 0 && ti < PyList_GET_SIZE(self->tensors)) {
        PyObject *te = PyList_GET_ITEM(self->tensors, ti);
        if (PyTuple_Check(te) && PyTuple_GET_SIZE(te) > 2 &&
            (PyLong_AsLong(PyTuple_GET_ITEM(te, 2)) & TIO_TENSOR_PINNED)) {
            return 0;
        }
    }
    if (last >= self->k - 1) {
        return 0;
    }
    PyObject *e = Py_BuildValue("(Oii(Oi))", self->free_kernel, 1, 0, tid, TIO_USE_WRITE);
    int rc = e ? PyList_Append(self->kernels, e) : -1;
    Py_XDECREF(e);
    self->k += rc == 0;
    return rc;
}

/* Executing: the executor forgets the dead intermediate, the driver lets go of its storage. */
static int exec_death(OpFastObject *self, PyObject *tid) {
    if (PySet_Add(self->dead_set, tid) < 0 || rt_forget(self, tid) < 0) {
        return -1;
    }
    if ((PyDict_Contains(self->st_by_id, tid) == 1 && PyDict_DelItem(self->st_by_id, tid) < 0) ||
        (PyDict_Contains(self->weak_by_id, tid) == 1 &&
         PyDict_DelItem(self->weak_by_id, tid) < 0) ||
        PyErr_Occurred()) {
        return -1;
    }
    return 0;
}

int dsp_flush_deaths(OpFastObject *self) {
    Py_ssize_t n = PyList_GET_SIZE(self->dead);
    if (self->passthrough) {
        return PyList_SetSlice(self->dead, 0, n, NULL);
    }
    /* only what was read is removed: a collective's buffer can die on another thread */
    PyObject *pend = PyList_GetSlice(self->dead, 0, n);
    if (!pend || PyList_SetSlice(self->dead, 0, n, NULL) < 0 || PyList_Sort(pend) < 0) {
        Py_XDECREF(pend);
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *tid = PyList_GET_ITEM(pend, i);
        rc = self->record ? record_death(self, tid) : exec_death(self, tid);
    }
    Py_DECREF(pend);
    if (rc == 0 && !self->record) {
        rc = run_free_markers(self);
    }
    return rc;
}
