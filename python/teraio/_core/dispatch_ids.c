/* teraio._core.OpFast: storage identity (address -> tensor id, deaths through weak
 * references), the use list of the current operator, and the kernel entries of a recorded step.
 * See dispatch_impl.h. */
#include <stdarg.h>
#include <time.h>

#include "core.h"
#include "dispatch_impl.h"

/* ---- identity ----------------------------------------------------------------------------- */

/* A storage is known by its storage object: PyTorch keeps one Python object per StorageImpl
 * for as long as both live (the StorageImpl owns it once Python lets go), so the object's
 * address names the storage, and its death (a weak-reference callback) is the storage's. This is
 * the identity of the Python reference (the StorageImpl address, `_cdata`) without a call to
 * read the address. */

/* Register storage object `st` under the next id; returns the id or -1. */
static long long register_storage(OpFastObject *self, PyObject *st) {
    long long tid = self->n_ids;
    uintptr_t key = (uintptr_t)st;
    PyObject *wr = dsp_idref_new(st, self->died, key, tid);
    if (!wr) {
        return -1;
    }
    struct dsp_slot e = { .key = key, .a = wr, .v = tid }, old;
    if (dsp_table_put(&self->idt, &e, &old) < 0) {
        Py_DECREF(wr);
        return -1;
    }
    self->n_ids++;
    Py_XDECREF(old.a); /* a storage registered twice: its first weakref goes, uncalled */
    return tid;
}

/* The weakref callback: the storage died. Forget it; an intermediate's death is queued for the
 * driver (free markers, tio_runtime_forget). Never raises. */
PyObject *dsp_opfast_died(OpFastObject *self, PyObject *wr) {
    uintptr_t key;
    long long tid;
    if (!dsp_idref_fields(wr, &key, &tid)) {
        Py_RETURN_NONE;
    }
    struct dsp_slot *s = dsp_table_find(&self->idt, key); /* none once cleared by the GC */
    if (!s || s->a != wr) {
        Py_RETURN_NONE; /* replaced by a later registration */
    }
    struct dsp_slot out;
    (void)dsp_table_remove(&self->idt, key, &out);
    if (tid >= self->n_globals && self->dead) {
        PyObject *t = PyLong_FromLongLong(tid);
        if (!t || PyList_Append(self->dead, t) < 0) {
            PyErr_Clear();
        }
        Py_XDECREF(t);
    }
    Py_DECREF(out.a); /* wr itself: its caller holds no reference, and reads it no more */
    Py_RETURN_NONE;
}

/* add(storage) -> id: register a global's storage object (a tensor's untyped_storage()), in
 * registration order. */
PyObject *dsp_opfast_add(OpFastObject *self, PyObject *st) {
    long long tid = register_storage(self, st);
    return tid < 0 ? NULL : PyLong_FromLongLong(tid);
}

/* id_of(tensor) -> id or None. */
PyObject *dsp_opfast_id_of(OpFastObject *self, PyObject *t) {
    PyObject *st = PyObject_CallMethodNoArgs(t, s_untyped_storage);
    if (!st) {
        return NULL;
    }
    struct dsp_slot *s = dsp_table_find(&self->idt, (uintptr_t)st);
    PyObject *r = s ? PyLong_FromLongLong(s->v) : Py_NewRef(Py_None);
    Py_DECREF(st);
    return r;
}

/* ---- helpers ------------------------------------------------------------------------------ */

int dsp_add_use(OpFastObject *self, long t, int mode) {
    for (size_t i = 0; i < self->n_use; i++) {
        if (self->use_t[i] == t) {
            self->use_m[i] |= mode;
            return 0;
        }
    }
    if (self->n_use == self->cap_use) {
        size_t cap = self->cap_use ? 2 * self->cap_use : 16;
        long *nt = PyMem_Realloc(self->use_t, cap * sizeof *nt);
        if (!nt) {
            PyErr_NoMemory();
            return -1;
        }
        self->use_t = nt;
        int *nm = PyMem_Realloc(self->use_m, cap * sizeof *nm);
        if (!nm) {
            PyErr_NoMemory();
            return -1;
        }
        self->use_m = nm;
        self->cap_use = cap;
    }
    self->use_t[self->n_use] = t;
    self->use_m[self->n_use] = mode;
    self->n_use++;
    return 0;
}

PyObject *dsp_call_plain(PyObject *spec_or_null, PyObject *func, PyObject *args, PyObject *kw) {
    PyObject *op = spec_or_null ? PyTuple_GET_ITEM(spec_or_null, SP_OP) : func;
    return PyObject_Call(op, args, kw && PyDict_GET_SIZE(kw) ? kw : NULL);
}

/* driver._diverge(message) with a formatted message; returns 0 or -1. */
int dsp_diverge(OpFastObject *self, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (!msg) {
        return -1;
    }
    PyObject *r = PyObject_CallMethodOneArg(self->driver, s_diverge, msg);
    Py_DECREF(msg);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static long long item_ll(PyObject *tuple, Py_ssize_t i) {
    return PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
}

/* Expected bytes of tensor `tid` in the program, or -1 if it has no such tensor. */
static long long planned_bytes(OpFastObject *self, long long tid) {
    if (tid >= PyList_GET_SIZE(self->tensors)) {
        return -1;
    }
    PyObject *e = PyList_GET_ITEM(self->tensors, (Py_ssize_t)tid);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 1) {
        return -1;
    }
    return item_ll(e, 0);
}

/* The spec from the shared dict (made there once); a new reference, or NULL. */
static PyObject *shared_spec(OpFastObject *self, PyObject *func) {
    PyObject *spec = PyDict_GetItemWithError(self->specs, func);
    if (spec) {
        return Py_NewRef(spec);
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    spec = PyObject_CallOneArg(self->make_spec, func);
    if (!spec) {
        return NULL;
    }
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != SP_LEN ||
        PyDict_SetItem(self->specs, func, spec) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "OpFast: bad operator spec");
        }
        Py_DECREF(spec);
        return NULL;
    }
    return spec;
}

/* Operators are found by address in this step's table first: the shared dict hashes an
 * OpOverload with its Python __hash__, a Python call per operator. The table holds the operator,
 * so its address names it for the table's life. */
PyObject *dsp_get_spec(OpFastObject *self, PyObject *func) {
    struct dsp_slot *s = dsp_table_find(&self->spect, (uintptr_t)func);
    if (s) {
        return s->b; /* borrowed: the table keeps it */
    }
    PyObject *spec = shared_spec(self, func);
    if (!spec) {
        return NULL;
    }
    struct dsp_slot e = { .key = (uintptr_t)func, .a = Py_NewRef(func), .b = spec }, old;
    if (dsp_table_put(&self->spect, &e, &old) < 0) {
        Py_DECREF(func);
        Py_DECREF(spec);
        return NULL;
    }
    return spec;
}

/* The id of tensor t's storage (*tid). Returns 1 known, 2 new (registered now), 0 an empty
 * storage nobody knows (skipped), -1 error, -2 a new tensor whose size differs from the plan
 * (the divergence is reported). Output j of operator `func` when is_output. */
int dsp_tensor_id(
    OpFastObject *self, PyObject *t, int is_output, PyObject *func, Py_ssize_t j, long long *tid) {
    PyObject *st = PyObject_CallMethodNoArgs(t, s_untyped_storage);
    if (!st) {
        return -1;
    }
    struct dsp_slot *s = dsp_table_find(&self->idt, (uintptr_t)st);
    if (s) {
        *tid = s->v;
        Py_DECREF(st);
        return 1;
    }
    PyObject *nbo = PyObject_CallMethodNoArgs(st, s_nbytes);
    long long nb = nbo ? PyLong_AsLongLong(nbo) : -1;
    Py_XDECREF(nbo);
    if (nb < 0 || PyErr_Occurred()) {
        Py_DECREF(st);
        return -1;
    }
    if (nb == 0) {
        Py_DECREF(st);
        return 0;
    }
    long long id = register_storage(self, st);
    if (id < 0) {
        Py_DECREF(st);
        return -1;
    }
    *tid = id;
    if (self->record) {
        PyObject *e =
            Py_BuildValue("(LiiO)", nb, is_output ? TIO_TENSOR_ACTIVATION : TIO_TENSOR_INPUT,
                          is_output ? 0 : TIO_TENSOR_PINNED, Py_None);
        int rc = e ? PyList_Append(self->tensors, e) : -1;
        Py_XDECREF(e);
        Py_DECREF(st);
        return rc < 0 ? -1 : 2;
    }
    long long want = planned_bytes(self, id);
    if (PyErr_Occurred()) {
        Py_DECREF(st);
        return -1;
    }
    if (want != nb) {
        Py_DECREF(st);
        int rc = is_output
                     ? dsp_diverge(self,
                                   "operator %lld (%S) output %zd has %lld bytes, the plan "
                                   "expects another size",
                                   self->k, func, j, nb)
                     : dsp_diverge(self,
                                   "an input of operator %lld has %lld bytes, the plan expects "
                                   "another size",
                                   self->k, nb);
        return rc < 0 ? -1 : -2;
    }
    if (is_output) {
        PyObject *idl = PyLong_FromLongLong(id);
        int mv = idl ? PySet_Contains(self->movable, idl) : -1;
        int rc = mv == 1 ? dsp_bind_new(self, idl, st) : mv;
        Py_XDECREF(idl);
        if (rc < 0) {
            Py_DECREF(st);
            return -1;
        }
    }
    Py_DECREF(st);
    return 2;
}

int dsp_is_tensor(OpFastObject *self, PyObject *v) {
    return PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type);
}

/* Outputs in the order _mode._flat_out gives them (nested lists and tuples flattened). */
// NOLINTNEXTLINE(misc-no-recursion): operator outputs nest one or two levels deep
int dsp_flat_out(OpFastObject *self, PyObject *o, PyObject *acc) {
    if (dsp_is_tensor(self, o)) {
        return PyList_Append(acc, o);
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        PyObject *seq = PySequence_Fast(o, "outputs");
        if (!seq) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            if (dsp_flat_out(self, PySequence_Fast_GET_ITEM(seq, i), acc) < 0) {
                Py_DECREF(seq);
                return -1;
            }
        }
        Py_DECREF(seq);
    }
    return 0;
}

/* Output j: its id, and its use (new outputs are written; an existing storage when the return
 * aliases a written argument: in-place and out= operators). 0 ok, -1 error, -2 diverged. */
int dsp_output_use(
    OpFastObject *self, PyObject *t, PyObject *func, Py_ssize_t j, PyObject *rets_w) {
    long long tid;
    int rc = dsp_tensor_id(self, t, 1, func, j, &tid);
    if (rc < 0) {
        return rc;
    }
    if (rc == 2 ||
        (rc == 1 && j < PyTuple_GET_SIZE(rets_w) && PyTuple_GET_ITEM(rets_w, j) == Py_True)) {
        return dsp_add_use(self, (long)tid, TIO_USE_WRITE);
    }
    return 0;
}

long long dsp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Record mode, after the operator: the kernel entry and the last uses. 0 or -1. */
int dsp_record_kernel(OpFastObject *self, PyObject *name, int comm, long long dur, long long k) {
    PyObject *flat = PyTuple_New((Py_ssize_t)(2 * self->n_use));
    if (!flat) {
        return -1;
    }
    for (size_t i = 0; i < self->n_use; i++) {
        PyObject *t = PyLong_FromLong(self->use_t[i]), *m = PyLong_FromLong(self->use_m[i]);
        if (!t || !m) {
            Py_XDECREF(t);
            Py_XDECREF(m);
            Py_DECREF(flat);
            return -1;
        }
        PyTuple_SET_ITEM(flat, (Py_ssize_t)(2 * i), t);
        PyTuple_SET_ITEM(flat, (Py_ssize_t)(2 * i + 1), m);
    }
    int flags = comm ? TIO_KERNEL_COMM : 0;
    PyObject *opt = PyObject_CallNoArgs(self->in_optim);
    int in_opt = opt ? PyObject_IsTrue(opt) : -1;
    Py_XDECREF(opt);
    if (in_opt < 0) {
        Py_DECREF(flat);
        return -1;
    }
    flags |= in_opt ? TIO_KERNEL_OPTIM : 0;
    if (comm) {
        PyObject *r = PyObject_CallMethodOneArg(self->driver, s_pin, flat);
        if (!r) {
            Py_DECREF(flat);
            return -1;
        }
        Py_DECREF(r);
    }
    PyObject *e = Py_BuildValue("(OLiO)", name, dur, flags, flat);
    Py_DECREF(flat);
    if (!e || PyList_Append(self->kernels, e) < 0) {
        Py_XDECREF(e);
        return -1;
    }
    Py_DECREF(e);
    PyObject *kl = PyLong_FromLongLong(k);
    if (!kl) {
        return -1;
    }
    for (size_t i = 0; i < self->n_use; i++) {
        PyObject *t = PyLong_FromLong(self->use_t[i]);
        if (!t || PyDict_SetItem(self->last_k, t, kl) < 0) {
            Py_XDECREF(t);
            Py_DECREF(kl);
            return -1;
        }
        Py_DECREF(t);
    }
    Py_DECREF(kl);
    return 0;
}

/* Execution, after the operator: the uses must be the planned ones; then after(k) and the
 * release point. 1 ok, 0 diverged (reported), -1 error. */
int dsp_finish_kernel(OpFastObject *self, PyObject *func, PyObject *exp_uses) {
    Py_ssize_t ne = PyTuple_GET_SIZE(exp_uses);
    int same = ne == (Py_ssize_t)(2 * self->n_use);
    for (size_t i = 0; same && i < self->n_use; i++) {
        same = PyLong_AsLong(PyTuple_GET_ITEM(exp_uses, (Py_ssize_t)(2 * i))) == self->use_t[i] &&
               PyLong_AsLong(PyTuple_GET_ITEM(exp_uses, (Py_ssize_t)(2 * i + 1))) == self->use_m[i];
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    if (!same) {
        return dsp_diverge(self, "operator %lld (%S) produced different tensors than planned",
                           self->k, func) < 0
                   ? -1
                   : 0;
    }
    return dsp_after_kernel(self, self->k) < 0 ? -1 : 1;
}
