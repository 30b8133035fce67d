/* Private: the executor's tensor table and the helpers its files share (docs/runtime.md). */
#ifndef TIO_EXECUTOR_IMPL_H
#define TIO_EXECUTOR_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/analysis.h>
#include <teraio/runtime.h>

#include "../dl/cudart_shim.h"

enum tensor_state {
    ST_ABSENT = 0,      /* intermediate not created yet or already dead */
    ST_RESIDENT = 1,    /* memory allocated (bound or not) */
    ST_WRITING = 2,     /* offload write in flight, memory still there */
    ST_STORED = 3,      /* memory released, copy in the engine */
    ST_MATERIALIZE = 4, /* MATERIALIZE returned, waiting for bind */
    ST_READING = 5      /* read in flight into bound memory */
};

/* Per-tensor flags. */
enum {
    TF_GLOBAL = 1u << 0,    /* alive across iterations */
    TF_PINNED = 1u << 1,    /* never moved (pinned, or used by a COMM kernel) */
    TF_HAS_COPY = 1u << 2,  /* the engine holds a copy */
    TF_DIRTY = 1u << 3,     /* written since that copy */
    TF_KEEP = 1u << 4,      /* offload in flight but needed again: do not release */
    TF_DONE = 1u << 5,      /* write completed, RELEASE pending */
    TF_URGENT = 1u << 6,    /* read must be urgent (a kernel needs it now) */
    TF_LANDING = 1u << 7,   /* stream-ordered: read completed, its bytes land on the device when
                               landed[t] does (the compute stream must wait on it before any use
                               of the memory, its release included) */
    TF_WEV = 1u << 8,       /* stream-ordered: the write in flight records landed[t] after its
                               device-to-host copies (host tier) */
    TF_WLAND = 1u << 9,     /* stream-ordered: a write completed whose copies may still read the
                               memory until landed[t] does (the compute stream must wait on it
                               before a kernel modifies the memory, and before its release) */
    TF_HOSTCOPY = 1u << 10, /* the engine's copy (TF_HAS_COPY) is on the host tier */
    TF_WHOST = 1u << 11     /* the write in flight goes to the host tier (TF_HOSTCOPY once done) */
};

/* Why the training thread waited (the wait_* counters of struct tio_runtime_stats). */
enum tio_rt_wait { WAIT_READ, WAIT_WRITE, WAIT_BUDGET, WAIT_END, WAIT_OTHER };

#define TAG_READ (UINT64_C(1) << 63)

/* The live sets (executor_sets.c): what tio_rt_touch() files a tensor under, from its state,
 * flags and pointer, so that the per-kernel paths visit only the tensors concerned. */
enum {
    IN_MAT = 1u << 0,     /* ST_MATERIALIZE: ready() issues its read */
    IN_REL = 1u << 1,     /* ST_WRITING with TF_DONE: its RELEASE is handed out next */
    IN_WRITING = 1u << 2, /* ST_WRITING, neither TF_DONE nor TF_KEEP: the budget waits for it */
    IN_LAND = 1u << 3,    /* TF_LANDING */
    IN_VICTIM = 1u << 4,  /* a demand offload could take it (budget set; in the victim heap) */
    IN_KEPT = 1u << 5     /* ST_RESIDENT with a host-tier copy: the copy may be dropped to make
                             room in the host tier (reclaim_host, executor_io.c) */
};
enum {
    TIO_RT_SET_MAT = 0,
    TIO_RT_SET_REL = 1,
    TIO_RT_SET_LAND = 2,
    TIO_RT_SET_KEPT = 3,
    TIO_RT_NSETS = 4
};

/* A host-tier write's place in the order writes were queued (tio_rt_releases). */
struct tio_rt_wkey {
    uint64_t seq;
    uint32_t t;
};

struct tio_runtime {
    const struct tio_trace *trace;
    const struct tio_plan *plan;
    struct tio_engine *engine;
    struct tio_trace_view v;
    const struct tio_move *moves;
    size_t n_moves;
    size_t *move_off; /* [N + 1] moves triggered at kernel k: [move_off[k], move_off[k+1]) */
    /* Liveness (analysis/liveness.h; TIO_NEVER_USED: none). A "real" use is one by a kernel that
     * is not a free marker. */
    uint64_t *first_use, *last_use;   /* [n_tensors] kernel indices of any use */
    uint64_t *first_real, *last_real; /* [n_tensors] kernel indices of real uses */
    uint8_t *is_free;                 /* [n_kernels] 1: a TIO_RUNTIME_FREE_KERNEL marker */
    uint64_t *next_of_use; /* [n_uses] next kernel after this use's that really uses the tensor */
    uint64_t *cursor;      /* [n_tensors] next real use at or after next_k */
    uint32_t *victims;     /* [n_tensors] scratch: the demand offloads of one kernel */
    int32_t demand_tier;   /* params.demand_tier */
    int has_ssd;           /* the engine has SSD directories */
    uint8_t *state;        /* [n_tensors] enum tensor_state */
    uint32_t *tflags;      /* [n_tensors] TF_* */
    void **ptr;            /* [n_tensors] bound memory or NULL */
    uint64_t budget;       /* bytes, 0 = none */
    uint64_t id_base;      /* engine tensor id = id_base + trace id (unless adopted) */
    uint64_t *eid;         /* [n_tensors] engine tensor id */
    int32_t mem;
    /* Stream-ordered execution (params.stream_ordered): kernels are queued on `stream` and may
     * not have run yet when the executor is called; each request that touches device memory
     * waits (on the engine's threads) for an event recorded on `stream` when it was issued. */
    const struct tio_cudart_api *cu; /* non-NULL when stream-ordered */
    tio_cuda_stream stream;
    tio_cuda_event *fence;  /* [n_tensors] created on first use; one request per tensor at once */
    tio_cuda_event *landed; /* [n_tensors] the reads' done events (TF_LANDING) */
    uint64_t *wseq;         /* [n_tensors] when t's host-tier write was queued (a count) */
    uint64_t wseq_next;
    struct tio_rt_wkey *wkeys; /* [n_tensors] scratch: tio_rt_releases' TF_WLAND candidates */
    /* The live sets (executor_sets.c), kept by tio_rt_touch(). */
    uint8_t *member;              /* [n_tensors] IN_* bits */
    uint32_t *set_item, *set_pos; /* [TIO_RT_NSETS][n_tensors] members / index or UINT32_MAX */
    uint32_t set_n[TIO_RT_NSETS];
    uint64_t pending_bytes; /* bytes of IN_REL: completed offloads not released yet */
    size_t n_writing;       /* tensors in IN_WRITING */
    uint64_t kept_bytes;    /* bytes of IN_KEPT: host-tier copies of tensors in memory */
    uint32_t *heap, *hpos;  /* IN_VICTIM, best demand-offload victim first; hpos: index */
    uint32_t heap_n;
    uint32_t *stash; /* victims kernel k uses, out of the heap during one selection */
    uint32_t stash_n;
    uint32_t *scratch;     /* [n_tensors] a set's members sorted by id */
    uint64_t next_k;       /* the kernel expected next */
    int in_iter;           /* between begin_iteration and end_iteration */
    int steady;            /* the plan's state at iteration start has been established */
    size_t inflight;       /* engine requests outstanding */
    size_t reads_inflight; /* of which reads */
    int failed;            /* sticky engine failure */
    int fail_rc;
    char fail_msg[512];
    struct tio_runtime_stats st;
    /* tio_runtime_set_wait_hook: called around every wait for the engine (tio_rt_reap) */
    tio_runtime_wait_hook wait_hook;
    void *wait_ctx;
};

/* executor_io.c: the engine requests and the table updates their completions make. */

/* tio_rt_sticky: set the error detail to the recorded engine failure; returns its code. */
int tio_rt_sticky(struct tio_runtime *rt);
/* tio_rt_drop_copy: forget the engine's copy of t (best effort). */
void tio_rt_drop_copy(struct tio_runtime *rt, uint32_t t);
/* tio_rt_drop_stale: t, in memory, was modified: drop its copy, if any (never read again). */
void tio_rt_drop_stale(struct tio_runtime *rt, uint32_t t);
void tio_rt_add_resident(struct tio_runtime *rt, uint32_t t);
void tio_rt_sub_resident(struct tio_runtime *rt, uint32_t t);
/* tio_rt_reap: apply at least `min` completions (waiting for them). */
int tio_rt_reap(struct tio_runtime *rt, size_t min);
/* tio_rt_wait_tensor: wait until t has no request in flight, adding the wait to *acc and, if
 * the thread waited, to the counters of `why` (enum tio_rt_wait). */
int tio_rt_wait_tensor(struct tio_runtime *rt, uint32_t t, double *acc, int why);
/* tio_rt_count_wait: count one wait of `dt` seconds for reason `why`. */
void tio_rt_count_wait(struct tio_runtime *rt, int why, double dt);
/* tio_rt_push: append one action to out[*n] (TIO_EINVAL when max is reached). */
int tio_rt_push(struct tio_runtime_action *out,
                size_t max,
                size_t *n,
                uint32_t t,
                int32_t kind,
                uint64_t bytes);
/* tio_rt_is_dead: t is an intermediate past its last real use before kernel k (only its free
 * marker is left): its bytes are never read again, and its owner may free its memory at any
 * time, so no write may start from it. tio_rt_release_dead: offload such a resident t without a
 * write (RELEASE with the next completed offloads; counted in offloads and dead_releases). */
int tio_rt_is_dead(const struct tio_runtime *rt, uint32_t t, uint64_t k);
void tio_rt_release_dead(struct tio_runtime *rt, uint32_t t);
/* tio_rt_settle / tio_rt_settle_all: order the compute stream after landed reads and completed
 * writes' copies (TF_LANDING, TF_WLAND); reads_only: after landed reads only. */
int tio_rt_settle(struct tio_runtime *rt, uint32_t t);
int tio_rt_settle_all(struct tio_runtime *rt, int reads_only);
/* tio_rt_releases: hand out RELEASE for every completed, not-kept offload; lazy: those whose
 * copies may still read the memory (TF_WLAND) only as far as the budget needs. */
int tio_rt_releases(
    struct tio_runtime *rt, struct tio_runtime_action *out, size_t max, size_t *n, int lazy);
/* tio_rt_planned_write: the plan's offload of t to `tier`. */
int tio_rt_planned_write(struct tio_runtime *rt, uint32_t t, int32_t tier, int urgent);
/* tio_rt_pending_release: bytes of completed offloads whose RELEASE is not handed out yet. */
uint64_t tio_rt_pending_release(const struct tio_runtime *rt);
/* tio_rt_releases_first: move the RELEASE actions out[m..n) before out[0..m). */
void tio_rt_releases_first(struct tio_runtime_action *out, size_t m, size_t n);
/* tio_rt_demand_offload: write victims until the resident bytes fit the budget before k. */
int tio_rt_demand_offload(struct tio_runtime *rt,
                          uint64_t k,
                          struct tio_runtime_action *out,
                          size_t *n);
/* tio_rt_submit_read: read t back into its bound memory. */
int tio_rt_submit_read(struct tio_runtime *rt, uint32_t t);

/* executor_sets.c: the live sets. */

int tio_rt_sets_alloc(struct tio_runtime *rt);
void tio_rt_sets_free(struct tio_runtime *rt);
/* tio_rt_touch: re-file t after any change of its state, flags or pointer. */
void tio_rt_touch(struct tio_runtime *rt, uint32_t t);
/* tio_rt_set_sorted: the members of set s (TIO_RT_SET_*) in id order, in rt->scratch (valid
 * until the next call); returns their count. */
size_t tio_rt_set_sorted(struct tio_runtime *rt, int s, const uint32_t **out);
/* How far t's next use is, seen from the current kernel (larger: better victim). */
uint64_t tio_rt_next_use_distance(const struct tio_runtime *rt, uint32_t t);
/* tio_rt_cursor_moved: cursor[t] changed; tio_rt_victims_rekey: every cursor did. */
void tio_rt_cursor_moved(struct tio_runtime *rt, uint32_t t);
void tio_rt_victims_rekey(struct tio_runtime *rt);
/* tio_rt_best_victim: the demand-offload victim before kernel k (the furthest next use, then the
 * largest, then the lowest id; not used by k), or UINT32_MAX. Victims k uses are set aside until
 * tio_rt_victims_unstash(), which a selection ends with. */
uint32_t tio_rt_best_victim(struct tio_runtime *rt, uint64_t k);
void tio_rt_victims_unstash(struct tio_runtime *rt);
#if !defined(NDEBUG) || defined(TIO_SANITIZED)
/* tio_rt_verify: abort if the live sets differ from a scan of the table (debug builds). */
void tio_rt_verify(struct tio_runtime *rt);
#define TIO_RT_VERIFY(rt) tio_rt_verify(rt)
#else
#define TIO_RT_VERIFY(rt) ((void)0)
#endif

#endif
