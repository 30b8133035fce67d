/* teraio._core.OpFast's internals, shared by dispatch_py.c (the operator and the type),
 * dispatch_ids.c (storage identity, uses, kernels), dispatch_exec.c (the calls into the
 * executor, deaths and free markers) and dispatch_table.c (the address-keyed tables). Private to
 * the extension; read dispatch_py.c first. */
#ifndef TIO_PY_DISPATCH_IMPL_H
#define TIO_PY_DISPATCH_IMPL_H

#include <teraio/trace.h>

#include "core.h"

/* Per-kernel flags from the driver (the kflags bytes of configure), exported under these names. */
enum {
    OPFAST_CHECK_OFFLOAD = 1,
    OPFAST_RELEASE = 2,
    OPFAST_ARM = 4 /* after kernel k: driver._arm(k) (the next operator is seen in Python) */
};

/* A table keyed by an object's address (dispatch_table.c): an entry holds strong references
 * a and b (either may be NULL) and a number v. Identity: key the storage object, a its IdRef, v
 * the tensor id. Specs: key the operator, a the operator, b its spec tuple. */
struct dsp_slot {
    uintptr_t key; /* 0: free */
    PyObject *a, *b;
    long long v;
};
struct dsp_table {
    struct dsp_slot *slots; /* cap slots, cap a power of two (0 when empty) */
    size_t cap, n;
};

/* Spec tuple per operator (made by _mode._make_spec, cached in a dict shared by all steps). */
enum { SP_ARGS, SP_RETS_W, SP_COMM, SP_NAME, SP_FOREACH, SP_OP, SP_LEN };

typedef struct {
    PyObject_HEAD PyObject *driver; /* StepDriver: callbacks for rare events */
    struct dsp_table idt;           /* storage object -> tensor id (and its IdRef) */
    struct dsp_table spect;         /* operator -> spec tuple (this step's cache of specs) */
    PyObject *dead;                 /* list: ids of intermediates that died (driver.dead_pending) */
    PyObject *died;                 /* bound method self._died: the weakref callback */
    PyObject *specs;                /* dict: OpOverload -> spec tuple */
    PyObject *make_spec;            /* callable(func) -> spec tuple */
    PyObject *tensor_type;          /* torch._C.TensorBase */
    PyObject *tensors, *kernels;    /* prog.tensors, prog.kernels */
    PyObject *runtime;              /* the executor (execution) */
    PyObject *ptr_by_id;            /* dict: driver.ptr_by_id, what the executor was told */
    PyObject *release_at;           /* dict: driver.release_at, kernel -> ids (execution) */
    PyObject *in_optim;             /* callable() -> bool (recording) */
    PyObject *last_k;               /* dict: tensor id -> last kernel (recording) */
    PyObject *kflags;               /* bytes: OPFAST_* per kernel (execution) */
    PyObject *movable;              /* set of tensor ids the plan moves (execution) */
    PyObject *dead_set;             /* set: driver.dead (execution) */
    PyObject *st_by_id, *weak_by_id; /* dicts: driver.st_by_id, driver.weak_by_id */
    PyObject *free_kernel;           /* str: the free marker kernel's name */
    long long k, n_ids, n_globals;
    int record, passthrough, busy, split_foreach, configured;
    int direct;  /* runtime is a teraio._core.Runtime: called in C (runtime_py.h), not by name */
    long *use_t; /* uses of the current operator, first-seen order */
    int *use_m;
    size_t n_use, cap_use;
} OpFastObject;

/* ---- dispatch_table.c ---- */

/* The entry of key, or NULL. Valid until the next put or remove. */
struct dsp_slot *dsp_table_find(const struct dsp_table *t, uintptr_t key);

/* Add or replace the entry e->key, taking over e's references; a replaced entry is returned in
 * *old (its references now the caller's; key 0 when none). 0, or -1 (MemoryError: nothing
 * taken). */
int dsp_table_put(struct dsp_table *t, const struct dsp_slot *e, struct dsp_slot *old);

/* Remove the entry of key into *out (its references now the caller's). 1 removed, 0 absent. */
int dsp_table_remove(struct dsp_table *t, uintptr_t key, struct dsp_slot *out);

/* tp_traverse of the entries' references; release all entries (the table is emptied first). */
int dsp_table_traverse(const struct dsp_table *t, visitproc visit, void *arg);
void dsp_table_clear(struct dsp_table *t);

/* A weak reference of ob with callback (a subtype of weakref.ref that carries the entry's key and
 * the tensor id, read back by dsp_idref_fields: 1, or 0 if wr is not one). */
PyObject *dsp_idref_new(PyObject *ob, PyObject *callback, uintptr_t key, long long tid);
int dsp_idref_fields(PyObject *wr, uintptr_t *key, long long *tid);
int dsp_idref_ready(void);

/* ---- dispatch_ids.c ---- */

/* Add a use of tensor t with mode (TIO_USE_READ/TIO_USE_WRITE) to the current operator's list,
 * merging the modes of a tensor used twice. 0 or -1 (MemoryError). */
int dsp_add_use(OpFastObject *self, long t, int mode);

/* Run the operator itself (the spec's OpOverload, else func): a new reference or NULL. */
PyObject *dsp_call_plain(PyObject *spec_or_null, PyObject *func, PyObject *args, PyObject *kw);

/* driver._diverge(message) with a formatted message; returns 0 or -1. */
int dsp_diverge(OpFastObject *self, const char *fmt, ...);

/* The spec tuple of operator func, made once by _mode._make_spec and cached (borrowed), or
 * NULL with an exception. */
PyObject *dsp_get_spec(OpFastObject *self, PyObject *func);

/* The id of tensor t's storage (*tid). Returns 1 known, 2 new (registered now), 0 an empty
 * storage nobody knows (skipped), -1 error, -2 a new tensor whose size differs from the plan
 * (the divergence is reported). Output j of operator `func` when is_output. */
int dsp_tensor_id(
    OpFastObject *self, PyObject *t, int is_output, PyObject *func, Py_ssize_t j, long long *tid);

/* 1 if v is a torch tensor. */
int dsp_is_tensor(OpFastObject *self, PyObject *v);

/* Append the tensors of output o to acc, in the order _mode._flat_out gives them (nested lists
 * and tuples flattened). 0 or -1. */
int dsp_flat_out(OpFastObject *self, PyObject *o, PyObject *acc);

/* Output j: its id, and its use (new outputs are written; an existing storage when the return
 * aliases a written argument: in-place and out= operators). 0 ok, -1 error, -2 diverged. */
int dsp_output_use(OpFastObject *self, PyObject *t, PyObject *func, Py_ssize_t j, PyObject *rets_w);

/* CLOCK_MONOTONIC, ns. */
long long dsp_now_ns(void);

/* Record mode, after the operator: the kernel entry and the last uses. 0 or -1. */
int dsp_record_kernel(OpFastObject *self, PyObject *name, int comm, long long dur, long long k);

/* Execution, after the operator: the uses must be the planned ones; then after(k) and the
 * release point. 1 ok, 0 diverged (reported), -1 error. */
int dsp_finish_kernel(OpFastObject *self, PyObject *func, PyObject *exp_uses);

/* ---- dispatch_exec.c ---- */

/* Execution, before kernel k: the offload check where kflags asks for it (driver._check_offloads,
 * a divergence when it finds a problem), then before(k), driver._apply(actions) when there are
 * any and ready(k), with busy set (the storage actions call resize_, which the mode must pass
 * through). 1 ok, 0 diverged (reported), -1 error. */
int dsp_prepare_kernel(OpFastObject *self, long long k);

/* Execution, after kernel k: after(k), then the release point where kflags has one. 0 / -1. */
int dsp_after_kernel(OpFastObject *self, long long k);

/* A new movable tensor `tid` (storage st): st_by_id[tid] = st, ptr_by_id[tid] = its address,
 * bound in the executor. 0 / -1. */
int dsp_bind_new(OpFastObject *self, PyObject *tid, PyObject *st);

/* The storages that died since the previous operator (the driver's _flush_deaths, in C): when
 * recording, an intermediate freed later than right after its last use gets a free marker
 * kernel; when executing, the executor forgets it and the planned free markers run. 0 / -1. */
int dsp_flush_deaths(OpFastObject *self);

/* Methods of OpFast defined in dispatch_ids.c: _died (the weak-reference callback: forget the
 * storage, queue an intermediate's death), add (register a global's storage: its id), id_of
 * (a tensor's id or None). */
PyObject *dsp_opfast_died(OpFastObject *self, PyObject *wr);
PyObject *dsp_opfast_add(OpFastObject *self, PyObject *st);
PyObject *dsp_opfast_id_of(OpFastObject *self, PyObject *t);

/* Interned attribute and method names (dispatch_py.c makes them when the type is added). */
extern PyObject *s_untyped_storage, *s_nbytes, *s_data_ptr, *s_diverge, *s_check_offloads, *s_arm,
    *s_apply, *s_pin, *s_foreach, *s_before, *s_ready, *s_after, *s_forget, *s_bind;

#endif
