/* teraio._core.Plan: a plan (teraio/plan.h) made by the planner, built from explicit moves or
 * loaded from a file, for the executor (runtime_py.c) that the PyTorch layer drives. */
#include "plan_py.h"

#include <string.h>

#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/trace.h>

static void plan_dealloc(PlanObject *self) {
    tio_plan_free(self->plan);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *wrap_plan(struct tio_plan *p) {
    PlanObject *o = PyObject_New(PlanObject, &plan_type);
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

/* Plan.make(trace, hw: dict, policy, min_tensor_bytes, early_prefetch) */
static PyObject *plan_make(PyObject *cls, PyObject *args) {
    (void)cls;
    PyObject *trace_obj, *hwd;
    const char *policy;
    unsigned long long min_bytes;
    int early;
    if (!PyArg_ParseTuple(args, "OO!sKp", &trace_obj, &PyDict_Type, &hwd, &policy, &min_bytes,
                          &early)) {
        return NULL;
    }
    const struct tio_trace *tr = tio_py_trace_borrow(trace_obj);
    if (!tr) {
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
    Py_BEGIN_ALLOW_THREADS rc = tio_plan_make(tr, &hw, &pp, &plan);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "plan");
    }
    return wrap_plan(plan);
}

/* Plan.build(trace, policy, moves): a plan from explicit moves [(tensor, from, to, flags,
 * trigger, deadline)] (tests, planners written in Python). */
static PyObject *plan_build(PyObject *cls, PyObject *args) {
    (void)cls;
    PyObject *trace_obj, *moves;
    const char *policy;
    if (!PyArg_ParseTuple(args, "OsO!", &trace_obj, &policy, &PyList_Type, &moves)) {
        return NULL;
    }
    const struct tio_trace *tr = tio_py_trace_borrow(trace_obj);
    if (!tr) {
        return NULL;
    }
    uint64_t h;
    int rc = tio_trace_hash(tr, &h);
    if (rc < 0) {
        return tio_py_raise(rc, "trace hash");
    }
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
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

static PyObject *plan_load(PyObject *cls, PyObject *arg) {
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

static PyObject *plan_save(PlanObject *self, PyObject *arg) {
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) {
        return NULL;
    }
    int rc = tio_plan_save(self->plan, path, TIO_PLAN_FORMAT_AUTO);
    return tio_py_none_or_raise(rc, path);
}

static PyObject *plan_check(PlanObject *self, PyObject *arg) {
    const struct tio_trace *tr = tio_py_trace_borrow(arg);
    if (!tr) {
        return NULL;
    }
    int rc = tio_plan_check_trace(self->plan, tr);
    return tio_py_none_or_raise(rc, "plan");
}

static PyObject *plan_summary(PlanObject *self, PyObject *unused) {
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
static PyObject *plan_moves(PlanObject *self, PyObject *unused) {
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

static PyMethodDef plan_methods[] = {
    { "make", (PyCFunction)plan_make, METH_VARARGS | METH_CLASS,
      "make(trace, hw, policy, min_tensor_bytes, early_prefetch) -> Plan" },
    { "build", (PyCFunction)plan_build, METH_VARARGS | METH_CLASS,
      "build(trace, policy, [(tensor, from, to, flags, trigger, deadline)]) -> Plan" },
    { "load", (PyCFunction)plan_load, METH_O | METH_CLASS, "load(path) -> Plan" },
    { "save", (PyCFunction)plan_save, METH_O, "save(path)" },
    { "check", (PyCFunction)plan_check, METH_O, "check(trace): raise unless made for it" },
    { "summary", (PyCFunction)plan_summary, METH_NOARGS, "summary() -> dict" },
    { "moves", (PyCFunction)plan_moves, METH_NOARGS, "moves() -> list of tuples" },
    { NULL, NULL, 0, NULL },
};

PyTypeObject plan_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A plan for a trace: Plan.make(trace, hw, policy, min_tensor_bytes, early_prefetch), "
              "Plan.build(trace, policy, moves) or Plan.load(path).",
    .tp_methods = plan_methods,
};

int tio_py_add_plan(PyObject *m) {
    if (PyType_Ready(&plan_type) < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(m, "Plan", (PyObject *)&plan_type);
}
