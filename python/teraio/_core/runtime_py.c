/* teraio._core.Runtime: the plan executor (teraio/runtime.h) over a Trace, a Plan and an
 * Engine, driven operator by operator by python/teraio/torch (the PyTorch layer): by OpFast in
 * C (runtime_py.h), or through the methods below. Every call holds the GIL, which the
 * executor's wait hook drops while it waits for the engine, and only then. */
#include "runtime_py.h"

#include <string.h>

#include <teraio/hw.h>
#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

#include "plan_py.h"

/* ---- Runtime ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD struct tio_runtime *rt;
    PyObject *trace, *plan, *engine; /* kept alive: the executor borrows them */
    struct tio_runtime_action *acts;
    size_t cap;
    PyThreadState *waiting; /* the GIL's owner while the executor waits (wait_hook) */
} RuntimeObject;

/* The executor's wait hook: the GIL is released for exactly the executor's waits. */
static void wait_hook(void *ctx, int waiting) {
    RuntimeObject *self = ctx;
    if (waiting) {
        self->waiting = PyEval_SaveThread();
    } else {
        PyThreadState *ts = self->waiting;
        self->waiting = NULL;
        PyEval_RestoreThread(ts);
    }
}

static void runtime_dealloc(RuntimeObject *self) {
    if (self->rt) { /* waits for requests in flight; never calls the wait hook */
        Py_BEGIN_ALLOW_THREADS tio_runtime_free(self->rt);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(self->acts);
    Py_XDECREF(self->trace);
    Py_XDECREF(self->plan);
    if (self->engine) {
        tio_py_engine_release(self->engine);
        Py_DECREF(self->engine);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int runtime_init(RuntimeObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = { "trace",   "plan",        "engine", "budget_bytes",   "device",
                              "id_base", "demand_tier", "stream", "stream_ordered", NULL };
    PyObject *tr;
    PlanObject *pl;
    PyObject *en;
    unsigned long long budget = 0;
    int device = 0;
    unsigned long long id_base = 0;
    int demand_tier = 0;
    unsigned long long stream = 0; /* cudaStream_t as an integer (torch's Stream.cuda_stream) */
    int ordered = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!O|KpKiKp", kwlist, &tr, &plan_type, &pl, &en,
                                     &budget, &device, &id_base, &demand_tier, &stream, &ordered)) {
        return -1;
    }
    if (self->engine) {
        PyErr_SetString(PyExc_RuntimeError, "Runtime already initialised");
        return -1;
    }
    const struct tio_trace *trace = tio_py_trace_borrow(tr);
    struct tio_engine *engine = trace ? tio_py_engine_acquire(en) : NULL;
    if (!engine) {
        return -1;
    }
    /* from here on the engine counts this runtime as a user until runtime_dealloc */
    self->engine = Py_NewRef(en);
    struct tio_runtime_params p = tio_runtime_params_default();
    p.trace = trace;
    p.plan = pl->plan;
    p.engine = engine;
    p.budget_bytes = budget;
    p.mem = device ? TIO_MEM_DEVICE : TIO_MEM_HOST;
    p.engine_id_base = id_base;
    p.demand_tier = (int32_t)demand_tier;
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an address from Python
    p.stream = (void *)(uintptr_t)stream;
    p.stream_ordered = ordered;
    int rc = tio_runtime_new(&p, &self->rt);
    if (rc < 0) {
        tio_py_raise(rc, "runtime");
        return -1;
    }
    tio_runtime_set_wait_hook(self->rt, wait_hook, self);
    self->cap = tio_runtime_max_actions(self->rt) + 1;
    self->acts = PyMem_Calloc(self->cap, sizeof *self->acts);
    if (!self->acts) {
        PyErr_NoMemory();
        return -1;
    }
    self->trace = Py_NewRef(tr);
    self->plan = Py_NewRef((PyObject *)pl);
    return 0;
}

/* The n actions a call wrote, as a tuple of (kind, tensor, bytes); empty tuple when none (the
 * common case). n < 0: the call failed with that status, teraio.Error raised naming `what`. */
static PyObject *actions(RuntimeObject *self, int n, const char *what) {
    if (n < 0) {
        return tio_py_raise(n, what);
    }
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
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an address from Python
    int rc = tio_runtime_bind(self->rt, t, (void *)(uintptr_t)ptr);
    return tio_py_none_or_raise(rc, "runtime bind");
}

static PyObject *runtime_forget(RuntimeObject *self, PyObject *arg) {
    unsigned long t = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return tio_py_none_or_raise(tio_runtime_forget(self->rt, (uint32_t)t), "runtime forget");
}

/* One of the calls that write actions for Python to carry out (begin_iteration, end_iteration,
 * restore_begin); the actions as a tuple (see actions()). */
static PyObject *run_actions(RuntimeObject *self,
                             int (*call)(struct tio_runtime *, struct tio_runtime_action *, size_t),
                             const char *what) {
    return actions(self, call(self->rt, self->acts, self->cap), what);
}

static PyObject *runtime_begin(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    return run_actions(self, tio_runtime_begin_iteration, "runtime");
}

static PyObject *runtime_before(RuntimeObject *self, PyObject *arg) {
    unsigned long long k = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return actions(self, tio_runtime_before_kernel(self->rt, k, self->acts, self->cap), "runtime");
}

static PyObject *runtime_ready(RuntimeObject *self, PyObject *arg) {
    unsigned long long k = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    return tio_py_none_or_raise(tio_runtime_ready(self->rt, k), "runtime");
}

static PyObject *runtime_after(RuntimeObject *self, PyObject *arg) {
    unsigned long long k = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) {
        return NULL;
    }
    int rc = tio_runtime_after_kernel(self->rt, k);
    return tio_py_none_or_raise(rc, "runtime");
}

static PyObject *runtime_end(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    return run_actions(self, tio_runtime_end_iteration, "runtime");
}

static PyObject *runtime_restore_begin(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    return run_actions(self, tio_runtime_restore_begin, "runtime restore");
}

static PyObject *runtime_restore_finish(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    return tio_py_none_or_raise(tio_runtime_restore_finish(self->rt), "runtime restore");
}

static PyObject *runtime_drain(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    return tio_py_none_or_raise(tio_runtime_drain(self->rt), "runtime drain");
}

static PyObject *runtime_stats(RuntimeObject *self, PyObject *unused) {
    (void)unused;
    struct tio_runtime_stats s;
    tio_runtime_get_stats(self->rt, &s);
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:d,s:K,s:K,s:K,s:d,s:K,s:K,s:K,"
        "s:K,s:d,s:K,s:d,s:K,s:d,s:K,s:d,s:K,s:d,s:K,s:K,s:K}",
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
        (unsigned long long)s.tier_full_kept, "wait_read_count",
        (unsigned long long)s.wait_read_count, "wait_read_s", s.wait_read_s, "wait_write_count",
        (unsigned long long)s.wait_write_count, "wait_write_s", s.wait_write_s, "wait_budget_count",
        (unsigned long long)s.wait_budget_count, "wait_budget_s", s.wait_budget_s, "wait_end_count",
        (unsigned long long)s.wait_end_count, "wait_end_s", s.wait_end_s, "wait_other_count",
        (unsigned long long)s.wait_other_count, "wait_other_s", s.wait_other_s, "dead_releases",
        (unsigned long long)s.dead_releases, "carried_offloads",
        (unsigned long long)s.carried_offloads, "host_copies_dropped",
        (unsigned long long)s.host_copies_dropped);
}

static PyObject *runtime_adopt(RuntimeObject *self, PyObject *args) {
    unsigned int t;
    unsigned long long id;
    if (!PyArg_ParseTuple(args, "IK", &t, &id)) {
        return NULL;
    }
    int rc = tio_runtime_adopt_stored(self->rt, t, id);
    return tio_py_none_or_raise(rc, "runtime adopt_stored");
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
    { "drain", (PyCFunction)runtime_drain, METH_NOARGS,
      "drain(): between steps, wait for the requests still in flight (offloads carried past the "
      "step's end)" },
    { "stats", (PyCFunction)runtime_stats, METH_NOARGS, "stats() -> dict" },
    { "state", (PyCFunction)runtime_state, METH_O, "state(tensor) -> int" },
    { "adopt", (PyCFunction)runtime_adopt, METH_VARARGS,
      "adopt(tensor, engine_id): a global already stored in the engine" },
    { "give_stored", (PyCFunction)runtime_give_stored, METH_VARARGS,
      "give_stored(tensor) -> engine_id or None: hand a stored global's copy over" },
    { NULL, NULL, 0, NULL },
};

static PyTypeObject runtime_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.Runtime",
    .tp_basicsize = sizeof(RuntimeObject),
    .tp_dealloc = (destructor)runtime_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The plan executor (teraio/runtime.h), driven by teraio.torch (private).",
    .tp_methods = runtime_methods,
    .tp_init = (initproc)runtime_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the per-operator calls of OpFast (runtime_py.h) --------------------------------------- */

int tio_py_runtime_check(PyObject *obj) {
    return Py_IS_TYPE(obj, &runtime_type) && ((RuntimeObject *)obj)->rt != NULL;
}

int tio_py_runtime_before(PyObject *obj, uint64_t k, PyObject **acts) {
    RuntimeObject *self = (RuntimeObject *)obj;
    int n = tio_runtime_before_kernel(self->rt, k, self->acts, self->cap);
    *acts = NULL;
    if (n > 0 && !(*acts = actions(self, n, "runtime"))) {
        return -1;
    }
    return n < 0 ? (tio_py_raise(n, "runtime"), -1) : n;
}

int tio_py_runtime_ready(PyObject *obj, uint64_t k) {
    int rc = tio_runtime_ready(((RuntimeObject *)obj)->rt, k);
    return rc < 0 ? (tio_py_raise(rc, "runtime"), -1) : 0;
}

int tio_py_runtime_after(PyObject *obj, uint64_t k) {
    int rc = tio_runtime_after_kernel(((RuntimeObject *)obj)->rt, k);
    return rc < 0 ? (tio_py_raise(rc, "runtime"), -1) : 0;
}

int tio_py_runtime_forget(PyObject *obj, uint32_t t) {
    int rc = tio_runtime_forget(((RuntimeObject *)obj)->rt, t);
    return rc < 0 ? (tio_py_raise(rc, "runtime forget"), -1) : 0;
}

int tio_py_runtime_bind(PyObject *obj, uint32_t t, void *ptr) {
    int rc = tio_runtime_bind(((RuntimeObject *)obj)->rt, t, ptr);
    return rc < 0 ? (tio_py_raise(rc, "runtime bind"), -1) : 0;
}

int tio_py_add_runtime(PyObject *m) {
    if (PyType_Ready(&runtime_type) < 0 ||
        PyModule_AddObjectRef(m, "Runtime", (PyObject *)&runtime_type) < 0) {
        return -1;
    }
    if (PyModule_AddIntConstant(m, "RT_RELEASE", TIO_RUNTIME_RELEASE) < 0 ||
        PyModule_AddIntConstant(m, "RT_MATERIALIZE", TIO_RUNTIME_MATERIALIZE) < 0 ||
        PyModule_AddStringConstant(m, "RUNTIME_FREE_KERNEL", TIO_RUNTIME_FREE_KERNEL) < 0) {
        return -1;
    }
    return 0;
}
