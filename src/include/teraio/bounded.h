/*
 * teraio/bounded.h - the memory table of the steps that have no plan (warm-up, profiling).
 *
 * Before a plan exists nothing says which tensor is needed when, so these steps are kept under a
 * budget reactively: every operator's tensors are made resident before it runs, and when the
 * tracked bytes exceed the budget, tensors the operator does not use are offloaded. This table
 * is the accounting and the victim policy of that path; the caller (the Python layer) owns the
 * storages and the engine calls, and tells the table what it did. Entries are named by an opaque
 * nonzero key (the storage's address in the Python layer).
 *
 * Victims (tio_bounded_pick), among the entries resident, not fixed and not used by the current
 * operator, in this order:
 *   outside the optimizer: optimizer states first, then the least recently used;
 *   inside the optimizer: the tensors the optimizer already used in this step but not in its
 *   last `grace` operators, most recently used first (a per-parameter optimizer is done with
 *   them), then the ones it has not used, least recently used first, then the ones it used in
 *   its last `grace` operators, most recently used first.
 * Ties go to the entry tracked first. Synchronous use per operator:
 *
 *     tio_bounded_begin_op(tb);                       // the clock advances
 *     for each input:  tio_bounded_use(tb, key, bytes, how)
 *     tio_bounded_op_reads(tb, ...)                    // read these back after making room
 *     n = tio_bounded_pick(tb, budget - reserve, in_optim, 0, keys, cap);
 *     for each victim: offload it, then tio_bounded_offloaded(tb, key, eid)
 *     ... run the operator; for each output: tio_bounded_use(tb, key, bytes, how | OUTPUT)
 *
 * A handle is used from one thread at a time.
 */
#ifndef TERAIO_BOUNDED_H
#define TERAIO_BOUNDED_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tio_bounded_params {
    uint64_t min_bytes; /* tensors smaller than this are not tracked (default 1; 0 reads as 1) */
    uint64_t grace;     /* operators: inside the optimizer, a tensor it used in its last `grace`
                           operators is offloaded last (default 32) */
};

struct tio_bounded_params tio_bounded_params_default(void);

/* Entry flags (struct tio_bounded_entry.flags). */
enum tio_bounded_flag {
    TIO_BOUNDED_RESIDENT = 1u << 0,    /* its storage holds its bytes */
    TIO_BOUNDED_STORED = 1u << 1,      /* the engine holds a copy, as `eid` */
    TIO_BOUNDED_CLEAN = 1u << 2,       /* that copy is identical: offloading writes nothing */
    TIO_BOUNDED_OPTIM_STATE = 1u << 3, /* an optimizer state: offloaded first outside it */
    TIO_BOUNDED_OPTIM_USED = 1u << 4,  /* the optimizer used it in this step */
    TIO_BOUNDED_FIXED = 1u << 5,       /* never offloaded (not resizable, in a collective) */
    TIO_BOUNDED_GLOBAL = 1u << 6       /* lives across steps (parameter, gradient, state) */
};

/* How an operator uses a tensor (tio_bounded_use). */
enum tio_bounded_use_how {
    TIO_BOUNDED_USE_WRITE = 1u << 0, /* written: a copy in the engine is stale */
    TIO_BOUNDED_USE_OPTIM = 1u << 1, /* the operator belongs to the optimizer */
    TIO_BOUNDED_USE_COMM = 1u << 2,  /* a collective, which may use it after it returns: fixed */
    TIO_BOUNDED_USE_OUTPUT = 1u << 3 /* an output (after the operator ran), not an input */
};

/* tio_bounded_use's result bits (>= 0). */
enum tio_bounded_use_result {
    TIO_BOUNDED_TRACKED = 1, /* the key is tracked (0: smaller than min_bytes, ignored) */
    TIO_BOUNDED_CREATED = 2  /* ... by this call: a new entry */
};

struct tio_bounded_entry {
    uint64_t key;
    uint64_t bytes; /* its size when resident */
    uint64_t eid;   /* engine id of its copy, with TIO_BOUNDED_STORED */
    uint64_t last;  /* the operator (clock) that last used it */
    uint32_t flags; /* enum tio_bounded_flag */
};

struct tio_bounded_stats {
    uint64_t resident;      /* bytes of the resident entries */
    uint64_t live;          /* bytes of all entries (resident if nothing were offloaded) */
    uint64_t peak_live;     /* the most `live` was */
    uint64_t peak_resident; /* the most `resident` was at a tio_bounded_mark_peak */
    uint64_t clock;         /* operators begun (tio_bounded_begin_op) */
    uint64_t op_input_max;  /* current operator: its largest input that is not a global */
    uint64_t op_made;       /* current operator: bytes of its outputs that are new entries */
    uint64_t op_read_bytes; /* current operator: bytes of its inputs to read back */
};

struct tio_bounded;

/* tio_bounded_new: an empty table (params NULL: the defaults). 0, TIO_ENOMEM. */
TIO_MUST_CHECK int tio_bounded_new(const struct tio_bounded_params *params,
                                   struct tio_bounded **out);
/* tio_bounded_free: accepts NULL. */
void tio_bounded_free(struct tio_bounded *tb);

/* tio_bounded_begin_op: an operator starts: the clock advances; the op_* statistics and the
 * read list restart. The entries the operator uses are those with last == clock: never victims. */
void tio_bounded_begin_op(struct tio_bounded *tb);

/*
 * tio_bounded_use: the current operator uses `key` (its storage has `bytes` now; used only to
 * create the entry, which needs bytes >= min_bytes). Marks it used now, stale when written, used
 * by the optimizer with USE_OPTIM, fixed with USE_COMM. An input that is offloaded and not fixed
 * (or in a collective), met for the first time in this operator, joins the operator's read list.
 * An output that is a new entry counts in op_made; an input that is not a global, in
 * op_input_max. Returns TIO_BOUNDED_TRACKED | TIO_BOUNDED_CREATED bits (0: not tracked), or
 * TIO_EINVAL (key 0), TIO_ENOMEM.
 */
TIO_MUST_CHECK int
tio_bounded_use(struct tio_bounded *tb, uint64_t key, uint64_t bytes, uint32_t how);

/* tio_bounded_track: as tio_bounded_use without a use: creates the entry (resident, last = the
 * clock) when absent and bytes >= min_bytes. Same results. */
TIO_MUST_CHECK int tio_bounded_track(struct tio_bounded *tb, uint64_t key, uint64_t bytes);

/* tio_bounded_op_reads: the current operator's read list (keys in first-use order, owned by the
 * table, valid until the next call that changes it); returns its length. */
size_t tio_bounded_op_reads(const struct tio_bounded *tb, const uint64_t **keys);

/*
 * tio_bounded_pick: victims to bring the resident bytes to `budget` or below, in the order of
 * the policy above (`in_optim`: the operator belongs to the optimizer), as many as needed if
 * each is offloaded, at most cap, written to keys. `more` = 0 starts a round; more != 0
 * continues it (an offload that freed less than expected), leaving out the entries already
 * picked in the round. Returns the count (0: already within the budget, or no candidate; at
 * most INT_MAX), or TIO_ENOMEM.
 */
TIO_MUST_CHECK int tio_bounded_pick(
    struct tio_bounded *tb, uint64_t budget, int in_optim, int more, uint64_t *keys, size_t cap);

/* tio_bounded_get: copy key's entry to *out. 0, or TIO_ENOTFOUND. */
TIO_MUST_CHECK int
tio_bounded_get(const struct tio_bounded *tb, uint64_t key, struct tio_bounded_entry *out);

/* Transitions the caller reports; each returns 0, or TIO_ENOTFOUND for an unknown key, or
 * TIO_ESTATE where the entry is not in the state the transition starts from. */
/* offloaded (was resident): its copy is eid and clean; not resident. */
TIO_MUST_CHECK int tio_bounded_offloaded(struct tio_bounded *tb, uint64_t key, uint64_t eid);
/* read back (was not resident): resident again, its copy kept (clean until written). */
TIO_MUST_CHECK int tio_bounded_loaded(struct tio_bounded *tb, uint64_t key);
/* its storage cannot be released: fixed, resident, without a copy (the caller drops it). */
TIO_MUST_CHECK int tio_bounded_pin(struct tio_bounded *tb, uint64_t key);
/* its owner resized it (resident) to `bytes`: tracked at that size, fixed when 0. */
TIO_MUST_CHECK int tio_bounded_resize(struct tio_bounded *tb, uint64_t key, uint64_t bytes);
/* a global (begin of a step): TIO_BOUNDED_GLOBAL, and TIO_BOUNDED_OPTIM_STATE if optim_state. */
TIO_MUST_CHECK int tio_bounded_set_global(struct tio_bounded *tb, uint64_t key, int optim_state);
/* tio_bounded_remove: forget key; *stored = 1 and *eid = its copy (for the caller to drop) when
 * it had one, else *stored = 0. */
TIO_MUST_CHECK int
tio_bounded_remove(struct tio_bounded *tb, uint64_t key, int *stored, uint64_t *eid);

/* tio_bounded_adopt: a new entry of `bytes` whose copy is eid (clean), handed over by an
 * executor; resident when `resident`, a global when `global`; last = the clock. Any entry of key
 * must have been removed before. 0, TIO_EINVAL (key 0), TIO_ESTATE (key tracked), TIO_ENOMEM. */
TIO_MUST_CHECK int tio_bounded_adopt(
    struct tio_bounded *tb, uint64_t key, uint64_t bytes, uint64_t eid, int resident, int global);

/* tio_bounded_begin_step: a step starts: no entry is "used by the optimizer in this step". */
void tio_bounded_begin_step(struct tio_bounded *tb);
/* tio_bounded_mark_peak: peak_resident = max(peak_resident, resident). */
void tio_bounded_mark_peak(struct tio_bounded *tb);
/* tio_bounded_clear: forget every entry (their copies are the caller's to drop first);
 * resident = live = 0; the peaks and the clock stay. */
void tio_bounded_clear(struct tio_bounded *tb);

/* tio_bounded_count: entries tracked. tio_bounded_keys: the first min(cap, count) keys in
 * tracking order, written to keys; returns how many it wrote, or TIO_ENOMEM. */
size_t tio_bounded_count(const struct tio_bounded *tb);
TIO_MUST_CHECK int tio_bounded_keys(struct tio_bounded *tb, uint64_t *keys, size_t cap);

void tio_bounded_get_stats(const struct tio_bounded *tb, struct tio_bounded_stats *out);

#ifdef __cplusplus
}
#endif
#endif
