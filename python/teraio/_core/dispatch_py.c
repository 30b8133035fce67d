/* teraio._core.OpFast: the per-operator hot path of the PyTorch layer in C.
 *
 * python/teraio/torch/_mode.py routes every aten operator of a training step through a
 * StepDriver. On CPU its per-operator work (storage identity, the comparison with the plan, the
 * executor calls, the bookkeeping of new tensors) was Python and cost more than the operator
 * itself for small operators; this object does the same work in one C call per operator, calls
 * the C executor directly (dispatch_exec.c), and calls back into the driver only for what needs
 * Python: storage actions (resizing torch storages), the offload check of the kernels that
 * trigger offloads, a divergence, a COMM kernel's pinning. The rules are the driver's (see the
 * _mode.py docstring), and the Python implementation stays beside it as the reference
 * (StepDriver with fast=False; profiling on CUDA uses it).
 *
 * State: the storage identity (a C table: storage object -> tensor id and a weak reference of
 * the storage, whose callback forgets the entry and queues an intermediate's death), the
 * program being recorded or executed (prog.tensors / prog.kernels lists, read in place), the
 * executor. A storage is known by its storage object (tensor.untyped_storage()), which PyTorch
 * keeps one-to-one with the StorageImpl whose address (_cdata) the Python reference uses; see
 * dispatch_ids.c.
 */
#include <stdarg.h>
#include <time.h>

#include "core.h"
#include "dispatch_impl.h"
#include "runtime_py.h"

PyObject *s_untyped_storage, *s_nbytes, *s_data_ptr, *s_diverge, *s_check_offloads, *s_arm,
    *s_apply, *s_pin, *s_foreach, *s_before, *s_ready, *s_after, *s_forget, *s_bind;

/* ---- the operator ------------------------------------------------------------------------- */

/* Inputs in schema order into the use list. 0 ok, -1 error, -2 diverged. */
static int collect_inputs(OpFastObject *self, PyObject *argplan, PyObject *args, PyObject *kw) {
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    for (Py_ssize_t a = 0; a < PyTuple_GET_SIZE(argplan); a++) {
        PyObject *ap = PyTuple_GET_ITEM(argplan, a);
        Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(ap, 0));
        int w = PyTuple_GET_ITEM(ap, 2) == Py_True, kwonly = PyTuple_GET_ITEM(ap, 3) == Py_True;
        PyObject *v = NULL;
        if (!kwonly && pos < na) {
            v = PyTuple_GET_ITEM(args, pos);
        } else if (kw) {
            v = PyDict_GetItemWithError(kw, PyTuple_GET_ITEM(ap, 1));
            if (!v && PyErr_Occurred()) {
                return -1;
            }
        }
        if (!v) {
            continue;
        }
        PyObject *single[1] = { v }, **items = single;
        Py_ssize_t n = 0;
        if (dsp_is_tensor(self, v)) {
            n = 1;
        } else if (PyList_Check(v) || PyTuple_Check(v)) {
            items = PySequence_Fast_ITEMS(v);
            n = PySequence_Fast_GET_SIZE(v);
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!dsp_is_tensor(self, items[i])) {
                continue;
            }
            long long tid;
            int rc = dsp_tensor_id(self, items[i], 0, NULL, 0, &tid);
            if (rc < 0) {
                return rc;
            }
            if (rc > 0 && dsp_add_use(self, (long)tid, w ? TIO_USE_READ_WRITE : TIO_USE_READ) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* Execution, before the operator: name and input uses against the plan, the offload check,
 * the executor. 1 ok (*exp_uses borrowed), 0 diverged (reported), -1 error. */
static int
check_and_prepare(OpFastObject *self, PyObject *func, PyObject *name, PyObject **exp_uses) {
    long long k = self->k;
    PyObject *exp =
        k < PyList_GET_SIZE(self->kernels) ? PyList_GET_ITEM(self->kernels, (Py_ssize_t)k) : NULL;
    PyObject *ename = exp ? PyTuple_GET_ITEM(exp, 0) : NULL;
    int same = ename != NULL && ename == name;
    if (!same && ename) {
        if ((same = PyObject_RichCompareBool(ename, name, Py_EQ)) < 0) {
            return -1;
        }
    }
    if (!same) {
        int rc =
            exp ? dsp_diverge(self, "operator %lld is %S, the plan expects %S", k, func, ename)
                : dsp_diverge(self, "operator %lld is %S, the plan expects the end of the step", k,
                              func);
        return rc < 0 ? -1 : 0;
    }
    PyObject *eu = PyTuple_GET_ITEM(exp, 3);
    Py_ssize_t ne = PyTuple_GET_SIZE(eu);
    for (size_t i = 0; i < self->n_use; i++) {
        Py_ssize_t e = (Py_ssize_t)(2 * i);
        if (e + 1 >= ne || PyLong_AsLong(PyTuple_GET_ITEM(eu, e)) != self->use_t[i] ||
            PyLong_AsLong(PyTuple_GET_ITEM(eu, e + 1)) != self->use_m[i]) {
            if (PyErr_Occurred()) {
                return -1;
            }
            return dsp_diverge(self, "operator %lld (%S) uses different tensors than planned", k,
                               func) < 0
                       ? -1
                       : 0;
        }
    }
    int rc = dsp_prepare_kernel(self, k);
    if (rc == 1) {
        *exp_uses = eu;
    }
    return rc;
}

/* One operator; spec: its spec tuple (borrowed) when the caller has it, else NULL. */
static PyObject *
one(OpFastObject *self, PyObject *func, PyObject *args, PyObject *kw, PyObject *spec) {
    if (PyList_GET_SIZE(self->dead) > 0) {
        if (dsp_flush_deaths(self) < 0) {
            return NULL;
        }
        if (self->passthrough) {
            return dsp_call_plain(NULL, func, args, kw);
        }
    }
    if (!spec && !(spec = dsp_get_spec(self, func))) {
        return NULL;
    }
    Py_INCREF(spec);
    PyObject *rets_w = PyTuple_GET_ITEM(spec, SP_RETS_W), *name = PyTuple_GET_ITEM(spec, SP_NAME);
    int comm = PyTuple_GET_ITEM(spec, SP_COMM) == Py_True;
    PyObject *out = NULL, *flat = NULL, *exp_uses = NULL;
    self->n_use = 0;
    int rc = collect_inputs(self, PyTuple_GET_ITEM(spec, SP_ARGS), args, kw);
    if (rc == -2) {
        goto plain;
    }
    if (rc < 0) {
        goto fail;
    }
    long long dur = 0;
    if (self->record) {
        long long t0 = dsp_now_ns();
        out = dsp_call_plain(spec, func, args, kw);
        dur = dsp_now_ns() - t0;
        dur = dur < 1 ? 1 : dur;
    } else {
        rc = check_and_prepare(self, func, name, &exp_uses);
        if (rc == 0) {
            goto plain;
        }
        if (rc < 0) {
            goto fail;
        }
        out = dsp_call_plain(spec, func, args, kw);
    }
    if (!out) {
        goto fail;
    }
    if (dsp_is_tensor(self, out)) { /* the common case: no list to build */
        rc = dsp_output_use(self, out, func, 0, rets_w);
    } else if (!(flat = PyList_New(0)) || dsp_flat_out(self, out, flat) < 0) {
        goto fail;
    } else {
        rc = 0;
        for (Py_ssize_t j = 0; rc == 0 && j < PyList_GET_SIZE(flat); j++) {
            rc = dsp_output_use(self, PyList_GET_ITEM(flat, j), func, j, rets_w);
        }
    }
    if (rc == -2) {
        goto done; /* diverged: the output is returned as it is */
    }
    if (rc < 0) {
        goto fail;
    }
    if (self->record) {
        if (dsp_record_kernel(self, name, comm, dur, self->k) < 0) {
            goto fail;
        }
    } else {
        rc = dsp_finish_kernel(self, func, exp_uses);
        if (rc < 0) {
            goto fail;
        }
        if (rc == 0) {
            goto done;
        }
    }
    self->k++;
done:
    Py_XDECREF(flat);
    Py_DECREF(spec);
    return out;
plain:
    out = dsp_call_plain(spec, func, args, kw);
    Py_DECREF(spec);
    return out;
fail:
    Py_XDECREF(flat);
    Py_XDECREF(out);
    Py_DECREF(spec);
    return NULL;
}

/* The (func, args, kwargs) of a call to `what` on a configured OpFast. */
static int parse_call(OpFastObject *self,
                      const char *what,
                      PyObject *const *a,
                      Py_ssize_t n,
                      PyObject **args,
                      PyObject **kw) {
    if (!self->configured) {
        PyErr_Format(PyExc_RuntimeError, "OpFast: %s before configure()", what);
        return -1;
    }
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "expected (func, args, kwargs)");
        return -1;
    }
    *args = a[1];
    *kw = a[2] == Py_None ? NULL : a[2];
    if (!PyTuple_Check(*args) || (*kw && !PyDict_Check(*kw))) {
        PyErr_SetString(PyExc_TypeError, "args must be a tuple and kwargs a dict or None");
        return -1;
    }
    return 0;
}

/* dispatch(func, args, kwargs): the whole __torch_dispatch__ of the step. */
static PyObject *opfast_dispatch(OpFastObject *self, PyObject *const *a, Py_ssize_t n) {
    PyObject *args, *kw;
    if (parse_call(self, "dispatch", a, n, &args, &kw) < 0) {
        return NULL;
    }
    if (self->passthrough || self->busy) {
        return dsp_call_plain(NULL, a[0], args, kw);
    }
    PyObject *spec = NULL;
    if (self->split_foreach) {
        if (!(spec = dsp_get_spec(self, a[0]))) {
            return NULL;
        }
        if (PyTuple_GET_ITEM(spec, SP_FOREACH) == Py_True) {
            return PyObject_CallMethodObjArgs(self->driver, s_foreach, a[0], args, kw ? kw : a[2],
                                              NULL);
        }
    }
    return one(self, a[0], args, kw, spec);
}

/* one(func, args, kwargs): one operator (no foreach splitting; the driver's pieces). */
static PyObject *opfast_one(OpFastObject *self, PyObject *const *a, Py_ssize_t n) {
    PyObject *args, *kw;
    if (parse_call(self, "one", a, n, &args, &kw) < 0) {
        return NULL;
    }
    return one(self, a[0], args, kw, NULL);
}

/* configure(record, tensors, kernels, runtime, in_optim, last_k, kflags, movable,
 * split_foreach, dead_set, st_by_id, weak_by_id, free_kernel, ptr_by_id, release_at) */
static PyObject *opfast_configure(OpFastObject *self, PyObject *args) {
    int record, split;
    PyObject *tensors, *kernels, *runtime, *in_optim, *last_k, *kflags, *movable, *dead_set,
        *st_by_id, *weak_by_id, *free_kernel, *ptr_by_id, *release_at;
    if (!PyArg_ParseTuple(args, "pO!O!OOO!O!OpOO!O!UO!O!", &record, &PyList_Type, &tensors,
                          &PyList_Type, &kernels, &runtime, &in_optim, &PyDict_Type, &last_k,
                          &PyBytes_Type, &kflags, &movable, &split, &dead_set, &PyDict_Type,
                          &st_by_id, &PyDict_Type, &weak_by_id, &free_kernel, &PyDict_Type,
                          &ptr_by_id, &PyDict_Type, &release_at)) {
        return NULL;
    }
    if (!PyAnySet_Check(movable) || !PySet_Check(dead_set)) {
        PyErr_SetString(PyExc_TypeError,
                        "configure: movable must be a set or frozenset, dead_set a set");
        return NULL;
    }
    if (!record) {
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(kernels); k++) {
            PyObject *e = PyList_GET_ITEM(kernels, k);
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 4 ||
                !PyTuple_Check(PyTuple_GET_ITEM(e, 3))) {
                PyErr_Format(PyExc_TypeError,
                             "configure: kernel %zd must be (name, ns, flags, uses tuple)", k);
                return NULL;
            }
        }
    }
    self->record = record;
    self->split_foreach = split;
    Py_XSETREF(self->tensors, Py_NewRef(tensors));
    Py_XSETREF(self->kernels, Py_NewRef(kernels));
    Py_XSETREF(self->runtime, Py_NewRef(runtime));
    Py_XSETREF(self->in_optim, Py_NewRef(in_optim));
    Py_XSETREF(self->last_k, Py_NewRef(last_k));
    Py_XSETREF(self->kflags, Py_NewRef(kflags));
    Py_XSETREF(self->movable, Py_NewRef(movable));
    Py_XSETREF(self->dead_set, Py_NewRef(dead_set));
    Py_XSETREF(self->st_by_id, Py_NewRef(st_by_id));
    Py_XSETREF(self->weak_by_id, Py_NewRef(weak_by_id));
    Py_XSETREF(self->free_kernel, Py_NewRef(free_kernel));
    Py_XSETREF(self->ptr_by_id, Py_NewRef(ptr_by_id));
    Py_XSETREF(self->release_at, Py_NewRef(release_at));
    self->direct = tio_py_runtime_check(runtime);
    self->configured = 1;
    Py_RETURN_NONE;
}

/* ---- type --------------------------------------------------------------------------------- */

static int opfast_traverse(OpFastObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->driver);
    int rc = dsp_table_traverse(&self->idt, visit, arg);
    if (rc == 0) {
        rc = dsp_table_traverse(&self->spect, visit, arg);
    }
    if (rc) {
        return rc;
    }
    Py_VISIT(self->dead);
    Py_VISIT(self->died);
    Py_VISIT(self->specs);
    Py_VISIT(self->make_spec);
    Py_VISIT(self->tensor_type);
    Py_VISIT(self->tensors);
    Py_VISIT(self->kernels);
    Py_VISIT(self->runtime);
    Py_VISIT(self->in_optim);
    Py_VISIT(self->last_k);
    Py_VISIT(self->kflags);
    Py_VISIT(self->movable);
    Py_VISIT(self->dead_set);
    Py_VISIT(self->st_by_id);
    Py_VISIT(self->weak_by_id);
    Py_VISIT(self->free_kernel);
    Py_VISIT(self->ptr_by_id);
    Py_VISIT(self->release_at);
    return 0;
}

static int opfast_clear(OpFastObject *self) {
    Py_CLEAR(self->driver);
    dsp_table_clear(&self->idt);
    dsp_table_clear(&self->spect);
    Py_CLEAR(self->dead);
    Py_CLEAR(self->died);
    Py_CLEAR(self->specs);
    Py_CLEAR(self->make_spec);
    Py_CLEAR(self->tensor_type);
    Py_CLEAR(self->tensors);
    Py_CLEAR(self->kernels);
    Py_CLEAR(self->runtime);
    Py_CLEAR(self->in_optim);
    Py_CLEAR(self->last_k);
    Py_CLEAR(self->kflags);
    Py_CLEAR(self->movable);
    Py_CLEAR(self->dead_set);
    Py_CLEAR(self->st_by_id);
    Py_CLEAR(self->weak_by_id);
    Py_CLEAR(self->free_kernel);
    Py_CLEAR(self->ptr_by_id);
    Py_CLEAR(self->release_at);
    self->configured = self->direct = 0;
    return 0;
}

static void opfast_dealloc(OpFastObject *self) {
    PyObject_GC_UnTrack(self);
    (void)opfast_clear(self);
    PyMem_Free(self->use_t);
    PyMem_Free(self->use_m);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef died_def = { "_died", (PyCFunction)dsp_opfast_died, METH_O, "weakref callback" };

/* OpFast(driver, dead_list, n_globals, specs, make_spec, tensor_type) */
static int opfast_init(OpFastObject *self, PyObject *args, PyObject *kwds) {
    PyObject *driver, *dead, *specs, *make_spec, *ttype;
    long long n_globals;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "OpFast takes positional arguments only");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OO!LO!OO!", &driver, &PyList_Type, &dead, &n_globals, &PyDict_Type,
                          &specs, &make_spec, &PyType_Type, &ttype)) {
        return -1;
    }
    (void)opfast_clear(self);
    self->driver = Py_NewRef(driver);
    self->dead = Py_NewRef(dead);
    self->specs = Py_NewRef(specs);
    self->make_spec = Py_NewRef(make_spec);
    self->tensor_type = Py_NewRef(ttype);
    self->n_globals = n_globals;
    self->died = PyCFunction_New(&died_def, (PyObject *)self);
    self->k = self->n_ids = 0;
    self->record = self->passthrough = self->busy = 0;
    self->split_foreach = 1;
    if (!self->died) {
        return -1;
    }
    return 0;
}

static PyObject *opfast_get_dead(OpFastObject *self, void *closure) {
    (void)closure;
    return Py_NewRef(self->dead ? self->dead : Py_None);
}

static int opfast_set_dead(OpFastObject *self, PyObject *v, void *closure) {
    (void)closure;
    if (!v || !PyList_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "dead: a list");
        return -1;
    }
    Py_XSETREF(self->dead, Py_NewRef(v));
    return 0;
}

/* Integer fields as attributes (k, n_ids and n_globals as long long; the flags as int): one
 * getter/setter pair per field, ctype/from_c/to_c giving the C type and the conversions. to_c
 * returns -1 on error (with a Python error set) or, for the flags, on delete (v == NULL). */
#define opfast_to_ll(v)   ((v) ? PyLong_AsLongLong(v) : -1)
#define opfast_to_flag(v) ((v) ? PyObject_IsTrue(v) : -1)
#define NUM_FIELD(name, ctype, from_c, to_c)                                       \
    static PyObject *opfast_get_##name(OpFastObject *self, void *closure) {        \
        (void)closure;                                                             \
        return from_c(self->name);                                                 \
    }                                                                              \
    static int opfast_set_##name(OpFastObject *self, PyObject *v, void *closure) { \
        (void)closure;                                                             \
        ctype x = to_c(v);                                                         \
        if (!v || (x == -1 && PyErr_Occurred())) {                                 \
            if (!PyErr_Occurred()) {                                               \
                PyErr_SetString(PyExc_TypeError, #name ": cannot delete");         \
            }                                                                      \
            return -1;                                                             \
        }                                                                          \
        self->name = x;                                                            \
        return 0;                                                                  \
    }
#define LL_FIELD(name)  NUM_FIELD(name, long long, PyLong_FromLongLong, opfast_to_ll)
#define INT_FIELD(name) NUM_FIELD(name, int, PyBool_FromLong, opfast_to_flag)
LL_FIELD(k)
LL_FIELD(n_ids)
LL_FIELD(n_globals)
INT_FIELD(passthrough)
INT_FIELD(busy)
#undef LL_FIELD
#undef INT_FIELD
#undef NUM_FIELD
#undef opfast_to_ll
#undef opfast_to_flag

#define FIELD(name, doc) \
    { #name, (getter)opfast_get_##name, (setter)opfast_set_##name, doc, NULL }
static PyGetSetDef opfast_getset[] = {
    FIELD(dead, "list: ids of intermediates that died since the last operator"),
    FIELD(k, "the next operator's index"),
    FIELD(n_ids, "ids handed out"),
    FIELD(n_globals, "ids below this are globals (their deaths are not queued)"),
    FIELD(passthrough, "run operators plainly (after a divergence)"),
    FIELD(busy, "inside an executor call: operators pass through"),
    { NULL, NULL, NULL, NULL, NULL },
};
#undef FIELD

static PyMethodDef opfast_methods[] = {
    { "add", (PyCFunction)dsp_opfast_add, METH_O, "add(storage) -> id: register a global" },
    { "id_of", (PyCFunction)dsp_opfast_id_of, METH_O, "id_of(tensor) -> id or None" },
    { "configure", (PyCFunction)opfast_configure, METH_VARARGS,
      "configure(record, tensors, kernels, runtime, in_optim, last_k, kflags, movable, "
      "split_foreach, dead_set, st_by_id, weak_by_id, free_kernel, ptr_by_id, release_at); "
      "kflags: OPFAST_* bits per kernel" },
    { "dispatch", (PyCFunction)(void (*)(void))opfast_dispatch, METH_FASTCALL,
      "dispatch(func, args, kwargs) -> result" },
    { "one", (PyCFunction)(void (*)(void))opfast_one, METH_FASTCALL,
      "one(func, args, kwargs) -> result" },
    { NULL, NULL, 0, NULL },
};

// NOLINTNEXTLINE(readability-identifier-naming): CPython's naming of type objects
static PyTypeObject OpFastType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core.OpFast",
    .tp_basicsize = sizeof(OpFastObject),
    .tp_dealloc = (destructor)opfast_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The per-operator path of teraio.torch's StepDriver in C (private).",
    .tp_traverse = (traverseproc)opfast_traverse,
    .tp_clear = (inquiry)opfast_clear,
    .tp_methods = opfast_methods,
    .tp_getset = opfast_getset,
    .tp_init = (initproc)opfast_init,
    .tp_new = PyType_GenericNew,
};

int tio_py_add_dispatch(PyObject *m) {
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {
        { &s_untyped_storage, "untyped_storage" },
        { &s_nbytes, "nbytes" },
        { &s_data_ptr, "data_ptr" },
        { &s_diverge, "_diverge" },
        { &s_check_offloads, "_check_offloads" },
        { &s_arm, "_arm" },
        { &s_apply, "_apply" },
        { &s_pin, "_pin" },
        { &s_foreach, "_foreach" },
        { &s_before, "before" },
        { &s_ready, "ready" },
        { &s_after, "after" },
        { &s_forget, "forget" },
        { &s_bind, "bind" },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!*names[i].slot && !(*names[i].slot = PyUnicode_InternFromString(names[i].s))) {
            return -1;
        }
    }
    if (dsp_idref_ready() < 0 || PyType_Ready(&OpFastType) < 0 ||
        PyModule_AddObjectRef(m, "OpFast", (PyObject *)&OpFastType) < 0 ||
        PyModule_AddIntConstant(m, "OPFAST_CHECK_OFFLOAD", OPFAST_CHECK_OFFLOAD) < 0 ||
        PyModule_AddIntConstant(m, "OPFAST_RELEASE", OPFAST_RELEASE) < 0 ||
        PyModule_AddIntConstant(m, "OPFAST_ARM", OPFAST_ARM) < 0) {
        return -1;
    }
    return 0;
}
