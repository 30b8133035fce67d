/* teraio._core.OpFast: the tables of the per-operator path, keyed by an object's address
 * (storage identity: storage object -> tensor id and its weak reference; operator -> spec), and
 * the weak reference that carries its own key (IdRef), so that a storage's death finds its entry
 * without a second table. See dispatch_impl.h. */
#include "core.h"
#include "dispatch_impl.h"

/* Open addressing with linear probing; deletion shifts the following entries back (no
 * tombstones). The table never runs Python code: a slot pointer stays valid until the next
 * put or remove, which a weak-reference callback can make whenever an object is released. */

static size_t slot_of(uintptr_t key, size_t mask) {
    /* Fibonacci hashing: the product's high half depends on every bit of the address */
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

struct dsp_slot *dsp_table_find(const struct dsp_table *t, uintptr_t key) {
    if (t->n == 0) {
        return NULL;
    }
    size_t mask = t->cap - 1;
    for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
        struct dsp_slot *s = &t->slots[i];
        if (s->key == key) {
            return s;
        }
        if (s->key == 0) {
            return NULL;
        }
    }
}

/* Place a slot known to be absent (no resize). */
static void place(struct dsp_table *t, const struct dsp_slot *e) {
    size_t mask = t->cap - 1;
    size_t i = slot_of(e->key, mask);
    while (t->slots[i].key != 0) {
        i = (i + 1) & mask;
    }
    t->slots[i] = *e;
    t->n++;
}

static int grow(struct dsp_table *t) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    struct dsp_slot *old = t->slots, *ns = PyMem_Calloc(cap, sizeof *ns);
    if (!ns) {
        PyErr_NoMemory();
        return -1;
    }
    size_t ocap = t->cap;
    t->slots = ns;
    t->cap = cap;
    t->n = 0;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i].key != 0) {
            place(t, &old[i]);
        }
    }
    PyMem_Free(old);
    return 0;
}

int dsp_table_put(struct dsp_table *t, const struct dsp_slot *e, struct dsp_slot *old) {
    *old = (struct dsp_slot){ 0 };
    struct dsp_slot *s = dsp_table_find(t, e->key);
    if (s) {
        *old = *s;
        *s = *e;
        return 0;
    }
    if ((t->n + 1) * 2 > t->cap && grow(t) < 0) { /* at most half full */
        return -1;
    }
    place(t, e);
    return 0;
}

int dsp_table_remove(struct dsp_table *t, uintptr_t key, struct dsp_slot *out) {
    *out = (struct dsp_slot){ 0 };
    struct dsp_slot *s = dsp_table_find(t, key);
    if (!s) {
        return 0;
    }
    *out = *s;
    size_t mask = t->cap - 1, hole = (size_t)(s - t->slots);
    /* shift back each following entry whose home slot is not between the hole and itself */
    for (size_t j = (hole + 1) & mask; t->slots[j].key != 0; j = (j + 1) & mask) {
        size_t home = slot_of(t->slots[j].key, mask);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->slots[hole] = t->slots[j];
            hole = j;
        }
    }
    t->slots[hole] = (struct dsp_slot){ 0 };
    t->n--;
    return 1;
}

int dsp_table_traverse(const struct dsp_table *t, visitproc visit, void *arg) {
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].key != 0) {
            Py_VISIT(t->slots[i].a);
            Py_VISIT(t->slots[i].b);
        }
    }
    return 0;
}

void dsp_table_clear(struct dsp_table *t) {
    /* detached first: releasing an entry can run a callback that looks into the table */
    struct dsp_slot *slots = t->slots;
    size_t cap = t->cap;
    *t = (struct dsp_table){ 0 };
    for (size_t i = 0; i < cap; i++) {
        if (slots[i].key != 0) {
            Py_XDECREF(slots[i].a);
            Py_XDECREF(slots[i].b);
        }
    }
    PyMem_Free(slots);
}

/* ---- IdRef: a weak reference that knows its table key and tensor id ---------------------- */

typedef struct {
    PyWeakReference wr;
    uintptr_t key;
    long long tid;
} IdRef;

// NOLINTNEXTLINE(readability-identifier-naming): CPython's naming of type objects
static PyTypeObject IdRefType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "teraio._core._IdRef",
    .tp_basicsize = sizeof(IdRef),
    .tp_flags = Py_TPFLAGS_DEFAULT, /* GC support, traverse and clear: from weakref.ref */
    .tp_doc = "A weak reference of OpFast's storage identity (private).",
};

PyObject *dsp_idref_new(PyObject *ob, PyObject *callback, uintptr_t key, long long tid) {
    PyObject *args = PyTuple_Pack(2, ob, callback);
    if (!args) {
        return NULL;
    }
    /* the weakref type's own constructor, for the subtype (no __init__: nothing to redo) */
    PyObject *wr = _PyWeakref_RefType.tp_new(&IdRefType, args, NULL);
    Py_DECREF(args);
    if (wr) {
        ((IdRef *)wr)->key = key;
        ((IdRef *)wr)->tid = tid;
    }
    return wr;
}

int dsp_idref_fields(PyObject *wr, uintptr_t *key, long long *tid) {
    if (!Py_IS_TYPE(wr, &IdRefType)) {
        return 0;
    }
    *key = ((IdRef *)wr)->key;
    *tid = ((IdRef *)wr)->tid;
    return 1;
}

int dsp_idref_ready(void) {
    IdRefType.tp_base = &_PyWeakref_RefType;
    return PyType_Ready(&IdRefType);
}
