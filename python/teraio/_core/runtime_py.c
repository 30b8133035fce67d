/* teraio._core runtime binding: trace building, planning, the engine and the executor, as used
 * by python/teraio/torch (the PyTorch layer). Private API: the names start with "Rt". */
#include <string.h>

#include <teraio/hw.h>
#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

#include "core.h"

/* ---- RtTrace ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD struct tio_trace *tr;
} RtTraceObject;

static void rttrace_dealloc(RtTraceObject *self) {
    tio_trace_free(self->tr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject RtTraceType;

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

static PyTypeObject RtTraceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.RtTrace",
    .tp_basicsize = sizeof(RtTraceObject),
    .tp_dealloc = (destructor)rttrace_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A trace recorded by the PyTorch layer (private).",
    .tp_methods = rttrace_methods,
};

/* ---- RtPlan ------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD struct tio_plan *plan;
} RtPlanObject;

static PyTypeObject RtPlanType;

static void rtplan_dealloc(RtPlanObject *self) {
    tio_plan_free(self->plan);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *wrap_plan(struct tio_plan *p) {
    RtPlanObject *o = PyObject_New(RtPlanObject, &RtPlanType);
    if (!o) {
        tio_plan_free(p);
        return NULL;
    }
    o->plan = p;
    return (PyObject *)o;
}

static int dict_u64(PyObject *d, const char *key, uint64_t *out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v) {
        return 0;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (PyErr_Occurred()) {
        return -1;
    }
    *out = x;
    return 0;
}

static int dict_f64(PyObject *d, const char *key, double *out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v) {
        return 0;
    }
    double x = PyFloat_AsDouble(v);
    if (PyErr_Occurred()) {
        return -1;
    }
    *out = x;
    return 0;
}

/* RtPlan.make(trace, hw: dict, policy, min_tensor_bytes, early_prefetch) */
static PyObject *rtplan_make(PyObject *cls, PyObject *args) {
    (void)cls;
    RtTraceObject *tr;
    PyObject *hwd;
    const char *policy;
    unsigned long long min_bytes;
    int early;
    if (!PyArg_ParseTuple(args, "O!O!sKp", &RtTraceType, &tr, &PyDict_Type, &hwd, &policy,
                          &min_bytes, &early)) {
        return NULL;
    }
    struct tio_hw hw = tio_hw_default();
    (void)snprintf(hw.name, sizeof hw.name, "%s", "torch-runtime");
    uint64_t u;
    double f;
#define HWU(field)                     \
    u = hw.field;                      \
    if (dict_u64(hwd, #field, &u) < 0) \
        return NULL;                   \
    hw.field = u;
#define HWF(field)                     \
    f = hw.field;                      \
    if (dict_f64(hwd, #field, &f) < 0) \
        return NULL;                   \
    hw.field = f;
    HWU(gpu_memory_bytes)
    HWU(gpu_reserve_bytes)
    HWF(pcie_h2d_Bps)
    HWF(pcie_d2h_Bps)
    HWF(ssd_read_Bps)
    HWF(ssd_write_Bps)
    HWF(ssd_efficiency)
    HWF(ssd_latency_s)
    HWU(host_memory_bytes)
    HWU(host_offload_cap_bytes)
    HWF(host_memory_Bps)
    HWF(ssd_mixed_Bps)
    HWU(ssd_write_cache_bytes)
    HWF(ssd_sustained_write_Bps)
#undef HWU
#undef HWF
    uint64_t ssd_count = hw.ssd_count, gds = (uint64_t)hw.gds;
    if (dict_u64(hwd, "ssd_count", &ssd_count) < 0 || dict_u64(hwd, "gds", &gds) < 0) {
        return NULL;
    }
    hw.ssd_count = (uint32_t)ssd_count;
    hw.gds = (int32_t)gds;
    int rc = tio_hw_validate(&hw);
    if (rc < 0) {
        return tio_py_raise(rc, "hardware");
    }
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = policy;
    pp.min_tensor_bytes = min_bytes;
    pp.early_prefetch = early;
    struct tio_plan *plan;
    Py_BEGIN_ALLOW_THREADS rc = tio_plan_make(tr->tr, &hw, &pp, &plan);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "plan");
    }
    return wrap_plan(plan);
}

/* RtPlan.build(trace, policy, moves): a plan from explicit moves [(tensor, from, to, flags,
 * trigger, deadline)] (tests, planners written in Python). */
static PyObject *rtplan_build(PyObject *cls, PyObject *args) {
    (void)cls;
    RtTraceObject *tr;
    const char *policy;
    PyObject *moves;
    if (!PyArg_ParseTuple(args, "O!sO!", &RtTraceType, &tr, &policy, &PyList_Type, &moves)) {
        return NULL;
    }
    uint64_t h;
    int rc = tio_trace_hash(tr->tr, &h);
    if (rc < 0) {
        return tio_py_raise(rc, "trace hash");
    }
    struct tio_trace_view v;
    tio_trace_get_view(tr->tr, &v);
    struct tio_plan *p;
    if ((rc = tio_plan_new(h, v.n_kernels, policy, &p)) < 0) {
        return tio_py_raise(rc, "plan");
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(moves); i++) {
        struct tio_move m;
        memset(&m, 0, sizeof m);
        unsigned long long trig, dl;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(moves, i), "IiiIKK", &m.tensor, &m.from, &m.to,
                              &m.flags, &trig, &dl)) {
            tio_plan_free(p);
            return NULL;
        }
        m.trigger = trig;
        m.deadline = dl;
        m.bytes = m.tensor < v.n_tensors ? v.tensor_bytes[m.tensor] : 0;
        if ((rc = tio_plan_add_move(p, &m)) < 0) {
            tio_plan_free(p);
            return tio_py_raise(rc, "plan move");
        }
    }
    if ((rc = tio_plan_finish(p)) < 0) {
        tio_plan_free(p);
        return tio_py_raise(rc, "plan");
    }
    return wrap_plan(p);
}

static PyObject *rtplan_load(PyObject *cls, PyObject *arg) {
    (void)cls;
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) {
        return NULL;
    }
    struct tio_plan *p;
    int rc = tio_plan_load(path, TIO_PLAN_FORMAT_AUTO, &p);
    if (rc < 0) {
        return tio_py_raise(rc, path);
    }
    return wrap_plan(p);
}

static PyObject *rtplan_save(RtPlanObject *self, PyObject *arg) {
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) {
        return NULL;
    }
    int rc = tio_plan_save(self->plan, path, TIO_PLAN_FORMAT_AUTO);
    if (rc < 0) {
        return tio_py_raise(rc, path);
    }
    Py_RETURN_NONE;
}

static PyObject *rtplan_check(RtPlanObject *self, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, &RtTraceType)) {
        PyErr_SetString(PyExc_TypeError, "check(trace): RtTrace expected");
        return NULL;
    }
    int rc = tio_plan_check_trace(self->plan, ((RtTraceObject *)arg)->tr);
    if (rc < 0) {
        return tio_py_raise(rc, "plan");
    }
    Py_RETURN_NONE;
}

static PyObject *rtplan_summary(RtPlanObject *self, PyObject *unused) {
    (void)unused;
    struct tio_plan_summary s;
    tio_plan_get_summary(self->plan, &s);
    return Py_BuildValue("{s:n,s:n,s:i,s:d,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:s,s:K}", "n_moves",
                         (Py_ssize_t)s.n_moves, "n_offloads", (Py_ssize_t)s.n_offloads, "feasible",
                         s.feasible, "planning_seconds", s.planning_seconds, "capacity_bytes",
                         (unsigned long long)s.capacity_bytes, "planned_peak_bytes",
                         (unsigned long long)s.planned_peak_bytes, "shortfall_bytes",
                         (unsigned long long)s.shortfall_bytes, "shortfall_kernel",
                         (unsigned long long)s.shortfall_kernel, "host_peak_bytes",
                         (unsigned long long)s.host_peak_bytes, "ssd_peak_bytes",
                         (unsigned long long)s.ssd_peak_bytes, "bytes_to_ssd",
                         (unsigned long long)s.bytes_to_ssd, "bytes_to_host",
                         (unsigned long long)s.bytes_to_host, "policy", tio_plan_policy(self->plan),
                         "trace_hash", (unsigned long long)tio_plan_trace_hash(self->plan));
}

/* moves() -> [(tensor, from, to, flags, trigger, deadline, bytes)] */
static PyObject *rtplan_moves(RtPlanObject *self, PyObject *unused) {
    (void)unused;
    size_t n;
    const struct tio_move *m = tio_plan_moves(self->plan, &n);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *it =
            Py_BuildValue("(IiiIKKK)", m[i].tensor, m[i].from, m[i].to, m[i].flags,
                          (unsigned long long)m[i].trigger, (unsigned long long)m[i].deadline,
                          (unsigned long long)m[i].bytes);
        if (!it) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, it);
    }
    return l;
}

static PyMethodDef rtplan_methods[] = {
    { "make", (PyCFunction)rtplan_make, METH_VARARGS | METH_CLASS,
      "make(trace, hw, policy, min_tensor_bytes, early_prefetch) -> RtPlan" },
    { "build", (PyCFunction)rtplan_build, METH_VARARGS | METH_CLASS,
      "build(trace, policy, [(tensor, from, to, flags, trigger, deadline)]) -> RtPlan" },
    { "load", (PyCFunction)rtplan_load, METH_O | METH_CLASS, "load(path) -> RtPlan" },
    { "save", (PyCFunction)rtplan_save, METH_O, "save(path)" },
    { "check", (PyCFunction)rtplan_check, METH_O, "check(trace): raise unless made for it" },
    { "summary", (PyCFunction)rtplan_summary, METH_NOARGS, "summary() -> dict" },
    { "moves", (PyCFunction)rtplan_moves, METH_NOARGS, "moves() -> list of tuples" },
    { NULL, NULL, 0, NULL },
};

static PyTypeObject RtPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.RtPlan",
    .tp_basicsize = sizeof(RtPlanObject),
    .tp_dealloc = (destructor)rtplan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A plan used by the PyTorch layer (private).",
    .tp_methods = rtplan_methods,
};

/* ---- RtEngine ----------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD struct tio_engine *e;
} RtEngineObject;

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

static PyTypeObject RtEngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.RtEngine",
    .tp_basicsize = sizeof(RtEngineObject),
    .tp_dealloc = (destructor)rtengine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The migration engine as used by the PyTorch layer (private).",
    .tp_methods = rtengine_methods,
    .tp_init = (initproc)rtengine_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Runtime ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD struct tio_runtime *rt;
    PyObject *trace, *plan, *engine; /* kept alive: the executor borrows them */
    struct tio_rt_action *acts;
    size_t cap;
} RuntimeObject;

static void runtime_dealloc(RuntimeObject *self) {
    if (self->rt) {
        Py_BEGIN_ALLOW_THREADS tio_runtime_free(self->rt);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(self->acts);
    Py_XDECREF(self->trace);
    Py_XDECREF(self->plan);
    Py_XDECREF(self->engine);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int runtime_init(RuntimeObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = { "trace",   "plan",        "engine", "budget_bytes",   "device",
                              "id_base", "demand_tier", "stream", "stream_ordered", NULL };
    RtTraceObject *tr;
    RtPlanObject *pl;
    RtEngineObject *en;
    unsigned long long budget = 0;
    int device = 0;
    unsigned long long id_base = 0;
    int demand_tier = 0;
    unsigned long long stream = 0; /* cudaStream_t as an integer (torch's Stream.cuda_stream) */
    int ordered = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!O!|KpKiKp", kwlist, &RtTraceType, &tr,
                                     &RtPlanType, &pl, &RtEngineType, &en, &budget, &device,
                                     &id_base, &demand_tier, &stream, &ordered)) {
        return -1;
    }
    struct tio_runtime_params p = tio_runtime_params_default();
    p.trace = tr->tr;
    p.plan = pl->plan;
    p.engine = en->e;
    p.budget_bytes = budget;
    p.mem = device ? TIO_MEM_DEVICE : TIO_MEM_HOST;
    p.engine_id_base = id_base;
    p.demand_tier = (int32_t)demand_tier;
    p.stream = (void *)(uintptr_t)stream;
    p.stream_ordered = ordered;
    int rc = tio_runtime_new(&p, &self->rt);
    if (rc < 0) {
        tio_py_raise(rc, "runtime");
        return -1;
    }
    self->cap = tio_runtime_max_actions(self->rt) + 1;
    self->acts = PyMem_Calloc(self->cap, sizeof *self->acts);
    if (!self->acts) {
        PyErr_NoMemory();
        return -1;
    }
    Py_INCREF(tr);
    Py_INCREF(pl);
    Py_INCREF(en);
    self->trace = (PyObject *)tr;
    self->plan = (PyObject *)pl;
    self->engine = (PyObject *)en;
    return 0;
}

/* Actions as a tuple of (kind, tensor, bytes); empty tuple when none (the common case). */
static PyObject *actions(RuntimeObject *self, int n) {
    PyObject *l = PyTuple_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *it = Py_BuildValue("(iIK)", self->acts[i].kind, self->acts[i].tensor,
                                     (unsigned long long)self->acts[i].bytes);
        if (!it) {
            Py_DECREF(l);
            return NULL;
        }
        PyTuple_SET_ITEM(l, i, it);
    }
    return l;
}

static PyObject *runtime_bind(RuntimeObject *self, PyObject *args) {
    unsigned int t;
    unsigned long long ptr;
    if (!PyArg_ParseTuple(args, "IK", &t, &ptr)) {
        return NULL;
    }
    int rc = tio_runtime_bind(self->rt, t, (void *)(uintptr_t)ptr);
    if (rc < 0) {
        return tio_py_raise(rc, "runtime bind");
    }
    Py_RETURN_NONE;
}

static PyObject *runtime_forget(RuntimeObject *self, PyObject *arg) {
    unsigned long t = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_runtime_forget(self->rt, (uint32_t)t);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "runtime forget");
    }
    Py_RETURN_NONE;
}

static PyObject *runtime_begin(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_runtime_begin_iteration(self->rt, self->acts, self->cap);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "runtime");
    }
    return actions(self, rc);
}

static PyObject *runtime_before(RuntimeObject *self, PyObject *arg) {
    unsigned long long k = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_runtime_before_kernel(self->rt, k, self->acts, self->cap);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "runtime");
    }
    return actions(self, rc);
}

static PyObject *runtime_ready(RuntimeObject *self, PyObject *arg) {
    unsigned long long k = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_runtime_ready(self->rt, k);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "runtime");
    }
    Py_RETURN_NONE;
}

static PyObject *runtime_after(RuntimeObject *self, PyObject *arg) {
    unsigned long long k = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int rc = tio_runtime_after_kernel(self->rt, k);
    if (rc < 0) {
        return tio_py_raise(rc, "runtime");
    }
    Py_RETURN_NONE;
}

static PyObject *runtime_end(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_runtime_end_iteration(self->rt, self->acts, self->cap);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "runtime");
    }
    return actions(self, rc);
}

static PyObject *runtime_restore_begin(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_runtime_restore_begin(self->rt, self->acts, self->cap);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "runtime restore");
    }
    return actions(self, rc);
}

static PyObject *runtime_restore_finish(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = tio_runtime_restore_finish(self->rt);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "runtime restore");
    }
    Py_RETURN_NONE;
}

static PyObject *runtime_stats(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    struct tio_runtime_stats s;
    tio_runtime_get_stats(self->rt, &s);
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:d,s:K,s:K,s:K,s:d,s:K,s:K,s:K}",
        "iterations", (unsigned long long)s.iterations, "kernels", (unsigned long long)s.kernels,
        "offloads", (unsigned long long)s.offloads, "clean_offloads",
        (unsigned long long)s.clean_offloads, "prefetches", (unsigned long long)s.prefetches,
        "urgent_reads", (unsigned long long)s.urgent_reads, "moves_skipped",
        (unsigned long long)s.moves_skipped, "bytes_offloaded",
        (unsigned long long)s.bytes_offloaded, "bytes_prefetched",
        (unsigned long long)s.bytes_prefetched, "resident_bytes",
        (unsigned long long)s.resident_bytes, "peak_resident_bytes",
        (unsigned long long)s.peak_resident_bytes, "stored_bytes",
        (unsigned long long)s.stored_bytes, "stall_s", s.stall_s, "pressure_stall_s",
        s.pressure_stall_s, "io_issue_s", s.io_issue_s, "demand_offloads",
        (unsigned long long)s.demand_offloads, "bytes_demand_offloaded",
        (unsigned long long)s.bytes_demand_offloaded, "over_budget_kernels",
        (unsigned long long)s.over_budget_kernels, "demand_stall_s", s.demand_stall_s,
        "deferred_prefetches", (unsigned long long)s.deferred_prefetches, "tier_fallbacks",
        (unsigned long long)s.tier_fallbacks, "tier_full_kept",
        (unsigned long long)s.tier_full_kept);
}

static PyObject *runtime_adopt(RuntimeObject *self, PyObject *args) {
    unsigned int t;
    unsigned long long id;
    if (!PyArg_ParseTuple(args, "IK", &t, &id)) {
        return NULL;
    }
    int rc = tio_runtime_adopt_stored(self->rt, t, id);
    if (rc < 0) {
        return tio_py_raise(rc, "runtime adopt_stored");
    }
    Py_RETURN_NONE;
}

static PyObject *runtime_give_stored(RuntimeObject *self, PyObject *args) {
    unsigned int t;
    if (!PyArg_ParseTuple(args, "I", &t)) {
        return NULL;
    }
    uint64_t id = 0;
    int rc = tio_runtime_give_stored(self->rt, t, &id);
    if (rc < 0) {
        return tio_py_raise(rc, "runtime give_stored");
    }
    if (rc == 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)id);
}

static PyObject *runtime_state(RuntimeObject *self, PyObject *arg) {
    unsigned long t = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return PyLong_FromLong(tio_runtime_tensor_state(self->rt, (uint32_t)t));
}

static PyMethodDef runtime_methods[] = {
    { "bind", (PyCFunction)runtime_bind, METH_VARARGS, "bind(tensor, ptr)" },
    { "forget", (PyCFunction)runtime_forget, METH_O, "forget(tensor): it died" },
    { "begin", (PyCFunction)runtime_begin, METH_NOARGS, "begin() -> actions" },
    { "before", (PyCFunction)runtime_before, METH_O, "before(k) -> ((kind, tensor, bytes), ...)" },
    { "ready", (PyCFunction)runtime_ready, METH_O, "ready(k)" },
    { "after", (PyCFunction)runtime_after, METH_O, "after(k)" },
    { "end", (PyCFunction)runtime_end, METH_NOARGS, "end() -> actions" },
    { "restore_begin", (PyCFunction)runtime_restore_begin, METH_NOARGS,
      "restore_begin() -> actions" },
    { "restore_finish", (PyCFunction)runtime_restore_finish, METH_NOARGS, "restore_finish()" },
    { "stats", (PyCFunction)runtime_stats, METH_NOARGS, "stats() -> dict" },
    { "state", (PyCFunction)runtime_state, METH_O, "state(tensor) -> int" },
    { "adopt", (PyCFunction)runtime_adopt, METH_VARARGS,
      "adopt(tensor, engine_id): a global already stored in the engine" },
    { "give_stored", (PyCFunction)runtime_give_stored, METH_VARARGS,
      "give_stored(tensor) -> engine_id or None: hand a stored global's copy over" },
    { NULL, NULL, 0, NULL },
};

static PyTypeObject RuntimeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.Runtime",
    .tp_basicsize = sizeof(RuntimeObject),
    .tp_dealloc = (destructor)runtime_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The plan executor (teraio/runtime.h), driven by teraio.torch (private).",
    .tp_methods = runtime_methods,
    .tp_init = (initproc)runtime_init,
    .tp_new = PyType_GenericNew,
};

/* tio_py_rttrace_borrow: the C trace behind a teraio._core.RtTrace (core.h). */
const struct tio_trace *tio_py_rttrace_borrow(PyObject *obj) {
    return PyObject_TypeCheck(obj, &RtTraceType) ? ((RtTraceObject *)obj)->tr : NULL;
}

int tio_py_add_runtime(PyObject *m) {
    PyTypeObject *types[] = { &RtTraceType, &RtPlanType, &RtEngineType, &RuntimeType };
    const char *names[] = { "RtTrace", "RtPlan", "RtEngine", "Runtime" };
    for (size_t i = 0; i < 4; i++) {
        if (PyType_Ready(types[i]) < 0 ||
            PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0) {
            return -1;
        }
    }
    if (PyModule_AddIntConstant(m, "RT_RELEASE", TIO_RT_RELEASE) < 0 ||
        PyModule_AddIntConstant(m, "RT_MATERIALIZE", TIO_RT_MATERIALIZE) < 0 ||
        PyModule_AddStringConstant(m, "RUNTIME_FREE_KERNEL", TIO_RUNTIME_FREE_KERNEL) < 0) {
        return -1;
    }
    return 0;
}
