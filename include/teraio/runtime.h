/*
 * teraio/runtime.h - the plan executor: replays a plan on a live training (docs/runtime.md).
 *
 * The executor holds a finished trace (what one iteration does), a plan (which tensor to move
 * when), a migration engine (teraio/io.h) and a tensor location table. The caller (the Python
 * layer, or any framework binding) drives it around every kernel of every iteration:
 *
 *     struct tio_runtime_params rp = tio_runtime_params_default();
 *     rp.trace = tr; rp.plan = plan; rp.engine = eng; rp.budget_bytes = 8ull << 30;
 *     struct tio_runtime *rt;
 *     if (tio_runtime_new(&rp, &rt) < 0) ...
 *     struct tio_runtime_action act[...];                 // tio_runtime_max_actions(rt) entries
 *     n = tio_runtime_begin_iteration(rt, act, cap);  // RELEASE actions, as below
 *     for (k = 0; k < N; k++) {
 *         int n = tio_runtime_before_kernel(rt, k, act, cap);
 *         for (i = 0; i < n; i++)
 *             if (act[i].kind == TIO_RUNTIME_RELEASE) free_storage(act[i].tensor);
 *             else tio_runtime_bind(rt, act[i].tensor, allocate(act[i].bytes));
 *         tio_runtime_ready(rt, k);                  // reads issued; k's tensors resident
 *         run_kernel(k);
 *         tio_runtime_bind(rt, new_output, ptr);     // for the tensors k created
 *         tio_runtime_after_kernel(rt, k);
 *     }
 *     n = tio_runtime_end_iteration(rt, act, cap);   // drains I/O; more RELEASE actions
 *
 * Protocol. A tensor is RESIDENT (its memory is allocated and bound), WRITING (an offload is in
 * flight; still resident and must not be modified), STORED (its copy is in the engine and the
 * caller has released its memory), or being brought back (MATERIALIZE returned, then READING).
 * - before_kernel(k) issues the offloads triggered at k (writes from the bound pointer), turns
 *   the prefetches triggered at k into MATERIALIZE actions, returns RELEASE for every offload
 *   that has completed, and makes sure kernel k's tensors will be resident: a STORED tensor k
 *   uses gets an urgent MATERIALIZE (the plan missed it), a tensor k uses whose offload is still
 *   being written is waited for and kept. When the tracked resident bytes exceed budget_bytes
 *   it waits for in-flight offloads (a "pressure stall") and releases them; if that is not
 *   enough (the plan is infeasible there, or an earlier demand read brought a tensor back), it
 *   enforces the budget itself with demand offloads: it writes resident tensors kernel k does not
 *   use, the one whose next use is furthest first (Belady; a global not used again this iteration
 *   counts from its first use in the next one, an intermediate whose only remaining use is its
 *   free marker is furthest of all), waits for those writes and releases them, until the tracked
 *   resident bytes fit. A planned prefetch handed out by the same call for a later kernel is a
 *   candidate too (taken back, it costs no I/O: counted in deferred_prefetches; the tensor is
 *   read when needed). Only bound, unpinned tensors can be chosen; a kernel that still does not
 *   fit (its own tensors plus the unmovable ones exceed the budget) runs anyway and is counted in
 *   over_budget_kernels. RELEASE actions come before MATERIALIZE actions in the returned array,
 *   so a caller performing them in order frees memory before allocating.
 * - The caller performs the actions in order: RELEASE: free the tensor's memory; MATERIALIZE:
 *   allocate `bytes` and tio_runtime_bind() the new pointer. Memory is only released after
 *   its copy is complete in the engine (stream-ordered for the host tier: see `stream`), so a
 *   failed write never loses data.
 * - ready(k) issues the reads for materialised tensors and waits for the reads kernel k needs
 *   (a "stall"). after_kernel(k) marks written tensors dirty and retires the intermediates
 *   whose last use is k.
 * - Resident bytes are tracked from the trace: a global tensor is alive all the time, an
 *   intermediate from its first to its last use; an offloaded one does not count.
 *
 * Offload of an unmodified tensor whose previous copy is still in the engine skips the write
 * ("clean" offload). Tensors flagged TIO_TENSOR_PINNED are never moved, and neither are the
 * tensors of TIO_KERNEL_COMM kernels (a collective may still be using them).
 *
 * Errors: a failed engine request makes every later call return TIO_EIO (or TIO_ECORRUPT)
 * with the detail naming the tensor; memory of a tensor whose write failed is never released.
 * Thread safety: one thread at a time per executor.
 */
#ifndef TERAIO_RUNTIME_H
#define TERAIO_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/status.h>
#include <teraio/trace.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the caller must do with a tensor's storage. Stored as int32_t. */
enum tio_runtime_action_kind {
    TIO_RUNTIME_RELEASE = 1,    /* free the memory: the copy in the engine is complete */
    TIO_RUNTIME_MATERIALIZE = 2 /* allocate `bytes` and tio_runtime_bind the pointer */
};

/* One storage action (a record). */
struct tio_runtime_action {
    uint32_t tensor; /* trace tensor id */
    int32_t kind;    /* enum tio_runtime_action_kind */
    uint64_t bytes;  /* tensor bytes */
};

struct tio_runtime_params {
    /* Size of this struct as the caller's header declares it: set by tio_runtime_params_default(s)
     * (docs/style.md, "Versioned structs"). */
    uint32_t struct_size;
    const struct tio_trace *trace; /* finished trace (borrowed: must outlive the executor) */
    const struct tio_plan *plan;   /* plan for `trace` (borrowed: must outlive the executor) */
    struct tio_engine *engine;     /* borrowed; see engine_id_base */
    uint64_t budget_bytes;         /* tracked resident bytes to stay under (0: not enforced) */
    int32_t mem;                   /* enum tio_mem_kind of the bound pointers (default HOST) */
    uint64_t engine_id_base;       /* engine tensor id = this + trace tensor id (default 0): give
                                      executors sharing an engine disjoint ranges */
    int32_t demand_tier; /* tier of demand offloads (TIO_TIER_HOST or TIO_TIER_SSD); 0 (default):
                            the host tier while it has room for the tensor, else the SSD tier */
    /* Stream-ordered execution (mem TIO_MEM_DEVICE, needs cudart): the caller launches kernels
     * asynchronously on `stream` (a cudaStream_t; NULL: the legacy default stream) and never
     * synchronizes the device. Every write and read the executor issues carries a fence, an
     * event recorded on `stream` when it is issued: the engine moves no byte before the kernels
     * queued until then have run (a write never reads a tensor before its last user ran, a read
     * never fills memory that queued kernels still use). Releases are stream-ordered: an SSD-tier
     * offload is released once its SSD write succeeded, a host-tier one once its device-to-host
     * copies are queued and the executor made `stream` wait for them (cudaStreamWaitEvent), a
     * clean offload (an identical copy already stored) at once; kernels queued earlier (and the
     * copies) may still use the memory: the caller must free it in stream order on `stream` (as
     * PyTorch's caching allocator does: the block goes only to work queued later on the same
     * stream), never to the host or another stream before the stream has passed that point. A
     * kernel that only reads a tensor whose offload is in flight runs without waiting; one that
     * modifies it waits until the copies are queued and is ordered after them. A read's bytes may
     * land after it completes (host tier): the executor makes `stream` wait for them
     * (cudaStreamWaitEvent) before the first kernel that uses the tensor, before its RELEASE,
     * forget and the end of the iteration, so a kernel launched after ready(k) finds its inputs in
     * place. 0 (default): the caller makes sure that no queued kernel uses a tensor the executor
     * moves (it synchronizes before each call). */
    void *stream;
    int32_t stream_ordered;
};

/* tio_runtime_params_defaults: fill the `size` bytes of *out (size = sizeof *out) with the
 * defaults (everything NULL/0, mem TIO_MEM_HOST) as far as this library knows them (a newer
 * header's extra fields are zeroed), and set out->struct_size. Returns 0; TIO_EINVAL (NULL),
 * TIO_EVERSION (size below the first versioned struct tio_runtime_params). */
TIO_API int tio_runtime_params_defaults(struct tio_runtime_params *out, size_t size);
/* tio_runtime_params_default: the same by value. Inline, so that the size is the one this
 * header declares: not an exported function, whose by-value struct would be the library's size
 * (docs/style.md, "Versioned structs"). */
static inline struct tio_runtime_params tio_runtime_params_default(void) {
    struct tio_runtime_params p;
    (void)tio_runtime_params_defaults(&p, sizeof p);
    return p;
}

struct tio_runtime;

/*
 * tio_runtime_new: check that the plan was made for the trace (TIO_EPLAN naming both hashes),
 * that every move names a tensor of the trace, and build the tables. Every global tensor starts
 * RESIDENT and unbound. Errors: TIO_EINVAL (NULL field, named), TIO_EVERSION (params->struct_size:
 * fill params with tio_runtime_params_default(s) first), TIO_EPLAN, TIO_ENOMEM.
 */
TIO_API TIO_MUST_CHECK int tio_runtime_new(const struct tio_runtime_params *params,
                                           struct tio_runtime **out);

/* tio_runtime_free: drop every copy this executor stored in the engine. Accepts NULL. In-flight
 * requests are waited for first; stream-ordered, `stream` then waits for the copies of the
 * memory still bound (free it in stream order). */
TIO_API void tio_runtime_free(struct tio_runtime *rt);

/* tio_runtime_max_actions: capacity of the action array that can never overflow (n_tensors). */
TIO_API size_t tio_runtime_max_actions(const struct tio_runtime *rt);

/*
 * tio_runtime_bind: tensor `tensor` now lives at `ptr` (after its creation, or after a
 * MATERIALIZE). Tensors that are never bound are never offloaded. Errors: TIO_EINVAL (id out of
 * range, NULL ptr), TIO_ESTATE (tensor being written or read: its memory must not move; binding
 * it again at the same pointer is accepted, e.g. a global whose offload goes on past the last
 * iteration, bound again before the next).
 */
TIO_API TIO_MUST_CHECK int tio_runtime_bind(struct tio_runtime *rt, uint32_t tensor, void *ptr);

/*
 * tio_runtime_adopt_stored: global `tensor`'s current contents are already in the engine as
 * engine tensor `engine_id` (written by the caller, e.g. while it kept a profiling step within
 * the budget) and its memory is released: it starts STORED, read back when first needed, and
 * the executor owns that copy from now on (it drops it in tio_runtime_free). Only before the first
 * begin_iteration, for an unbound, unpinned global. Errors: TIO_EINVAL (not a global, pinned,
 * out of range), TIO_ESTATE (bound, or iterations already begun).
 */
TIO_API TIO_MUST_CHECK int
tio_runtime_adopt_stored(struct tio_runtime *rt, uint32_t tensor, uint64_t engine_id);

/*
 * tio_runtime_give_stored: hand global `tensor`'s stored copy to the caller, between iterations
 * (another executor, for another plan, adopts it with tio_runtime_adopt_stored, or the caller
 * reads it back). If the tensor is STORED, *engine_id receives the engine tensor id of its copy,
 * the executor forgets the copy (it no longer drops it) and the tensor is no longer managed by
 * this executor: after giving copies away, free the executor (no further iteration); returns 1.
 * A tensor that is not stored (resident: its memory holds the data) gives nothing: returns 0.
 * An offload of the tensor that went on past the last iteration (stream-ordered) is waited for
 * and its copy given (returns 1) although the memory, never released, still holds the same
 * bytes; later work on the compute stream is ordered after the write's copies.
 * Errors: TIO_EINVAL (out of range, not a global, NULL engine_id), TIO_ESTATE (inside an
 * iteration, or a request of this executor failed).
 */
TIO_API TIO_MUST_CHECK int
tio_runtime_give_stored(struct tio_runtime *rt, uint32_t tensor, uint64_t *engine_id);

/*
 * tio_runtime_begin_iteration: start an iteration at kernel 0. The first time (and after a
 * restore), it first puts the globals in the plan's steady state: a global whose last move of
 * the iteration is an offload is stored when an iteration begins, so it is written now (bind the
 * globals before) and waited for; the RELEASE actions are returned like before_kernel's.
 * Returns the number of actions, or TIO_ESTATE if the previous iteration was not ended.
 */
TIO_API TIO_MUST_CHECK int
tio_runtime_begin_iteration(struct tio_runtime *rt, struct tio_runtime_action *out, size_t max);

/*
 * tio_runtime_before_kernel: see the protocol above. `k` must be the next kernel. Writes up to
 * `max` actions to out[] and returns how many (max >= tio_runtime_max_actions never
 * overflows; otherwise TIO_EINVAL when they do not fit). Errors: TIO_ESTATE (wrong k), TIO_EIO /
 * TIO_ECORRUPT / -ENOSPC (engine failures, detail names the tensor).
 */
TIO_API TIO_MUST_CHECK int tio_runtime_before_kernel(struct tio_runtime *rt,
                                                     uint64_t k,
                                                     struct tio_runtime_action *out,
                                                     size_t max);

/* tio_runtime_ready: issue the reads of materialised tensors (TIO_ESTATE naming the tensor if
 * one was not bound), then wait until every tensor kernel k uses is resident. */
TIO_API TIO_MUST_CHECK int tio_runtime_ready(struct tio_runtime *rt, uint64_t k);

/* tio_runtime_after_kernel: kernel k has run. */
TIO_API TIO_MUST_CHECK int tio_runtime_after_kernel(struct tio_runtime *rt, uint64_t k);

/*
 * tio_runtime_end_iteration: all kernels ran. Waits for every in-flight read and returns the
 * RELEASE actions of the offloads that completed (as before_kernel). Global tensors offloaded by
 * a wrap-around move stay STORED into the next iteration. Host path: waits for every request in
 * flight and releases every completed offload. Stream-ordered: an offload still in flight (or
 * completed with its copies still queued, and not needed under the budget) stays so into the
 * next iteration, whose calls reap it and hand out its RELEASE as within a step; restore_begin,
 * give_stored and tio_runtime_free wait for it.
 */
TIO_API TIO_MUST_CHECK int
tio_runtime_end_iteration(struct tio_runtime *rt, struct tio_runtime_action *out, size_t max);

/*
 * tio_runtime_restore_begin / tio_runtime_restore_finish: bring every stored tensor back (on
 * divergence, before the caller touches parameters, at shutdown). begin waits for in-flight
 * requests and returns MATERIALIZE actions (and RELEASE for nothing: completed offloads of
 * tensors are kept resident); the caller allocates and binds; finish reads them all and waits.
 * Afterwards every tensor is RESIDENT and the iteration (if any) is abandoned: the next call must
 * be begin_iteration.
 */
TIO_API TIO_MUST_CHECK int
tio_runtime_restore_begin(struct tio_runtime *rt, struct tio_runtime_action *out, size_t max);
TIO_API TIO_MUST_CHECK int tio_runtime_restore_finish(struct tio_runtime *rt);

/*
 * tio_runtime_drain: between iterations, wait for every request of this executor still in flight
 * (stream-ordered: the offloads that went on past the end of the last iteration). Nothing else
 * changes: a completed offload's tensor keeps its memory until the next iteration releases it;
 * a STORED tensor's copy in the engine is complete. Afterwards the engine has nothing of this
 * executor in flight, so the caller may use the engine itself meanwhile (e.g. read a stored
 * tensor's copy into its own buffer). Errors: TIO_ESTATE (inside an iteration), the sticky error
 * of a failed request (a failed write keeps its tensor resident, as always).
 */
TIO_API TIO_MUST_CHECK int tio_runtime_drain(struct tio_runtime *rt);

/* Counters since creation. */
struct tio_runtime_stats {
    uint64_t iterations;             /* completed iterations */
    uint64_t kernels;                /* kernels executed */
    uint64_t offloads;               /* offloads completed (writes + clean skips) */
    uint64_t clean_offloads;         /* offloads that reused an identical stored copy */
    uint64_t prefetches;             /* reads completed (planned + urgent) */
    uint64_t urgent_reads;           /* reads the plan did not schedule in time */
    uint64_t moves_skipped;          /* moves not applicable (unbound, pinned, already there) */
    uint64_t bytes_offloaded;        /* bytes written to the engine */
    uint64_t bytes_prefetched;       /* bytes read back */
    uint64_t resident_bytes;         /* tracked resident bytes now */
    uint64_t peak_resident_bytes;    /* max over kernels of tracked resident bytes while running */
    uint64_t stored_bytes;           /* bytes whose only copy is in the engine now */
    double stall_s;                  /* waiting for reads/writes a kernel needs */
    double pressure_stall_s;         /* waiting for offloads to get under the budget */
    double io_issue_s;               /* time spent inside before_kernel/ready/after_kernel */
    uint64_t demand_offloads;        /* offloads the executor issued itself to stay in the budget */
    uint64_t bytes_demand_offloaded; /* bytes they wrote (a clean one writes none); also in
                                        offloads and bytes_offloaded */
    uint64_t over_budget_kernels;    /* kernels that ran above the budget: nothing movable left */
    double demand_stall_s;           /* waiting for demand offloads to complete */
    uint64_t deferred_prefetches;    /* planned prefetches taken back to stay in the budget */
    uint64_t tier_fallbacks;         /* host-tier offloads (planned or demand) sent to the SSDs
                                        instead: the host tier had no free extent large enough */
    uint64_t tier_full_kept;         /* planned offloads dropped (the tensor stays resident, the
                                        demand offloads then keep the budget): no tier had room */
    /* The training thread's waits by reason: calls that waited (count) and their time (s). */
    uint64_t wait_read_count;   /* ready(k): a read kernel k needs was not complete */
    double wait_read_s;         /*   (also in stall_s) */
    uint64_t wait_write_count;  /* a kernel modifies a tensor whose offload is in flight, or an
                                   intermediate kept for a reader dies with its offload in flight */
    double wait_write_s;        /*   (also in stall_s) */
    uint64_t wait_budget_count; /* offloads (planned or demand) to get under the budget */
    double wait_budget_s;       /*   (also in pressure_stall_s or demand_stall_s) */
    uint64_t wait_end_count;    /* end_iteration: requests (stream-ordered: reads) in flight */
    double wait_end_s;          /*   (also in stall_s) */
    uint64_t wait_other_count;  /* forget, the first iteration's steady state */
    double wait_other_s;
    uint64_t dead_releases;    /* offloads (planned or demand) of intermediates past their last real
                                  use, released without a write: never read again, and their owner
                                  may free the memory at any time (also in offloads) */
    uint64_t carried_offloads; /* stream-ordered: offloads of globals that end_iteration left in
                                  flight or not yet released (they go on into the next
                                  iteration), summed over iterations */
    uint64_t host_copies_dropped; /* host-tier copies of tensors in memory (read back, unchanged)
                                     dropped to make room for an offload to the host tier */
};

/*
 * Free markers. A trace kernel named TIO_RUNTIME_FREE_KERNEL is not an operator: it marks where
 * an intermediate's memory is actually freed when that is later than its last real use (e.g. a
 * gradient freed by zero_grad after the optimizer used it), so that planners and the executor
 * account for its memory until then. The executor never makes a free marker's tensors resident
 * and never prefetches a tensor whose only remaining use is its free marker.
 */
#define TIO_RUNTIME_FREE_KERNEL "teraio::free"

/*
 * tio_runtime_forget: intermediate `tensor` is dead (its storage was freed by its owner): wait
 * for its in-flight request, drop its stored copy, stop counting it. TIO_EINVAL for a global.
 */
TIO_API TIO_MUST_CHECK int tio_runtime_forget(struct tio_runtime *rt, uint32_t tensor);

/*
 * tio_runtime_set_wait_hook: hook(ctx, 1) is called on the calling thread just before the
 * executor blocks waiting for the engine, and hook(ctx, 0) as soon as that wait returns; the
 * executor waits nowhere else (before_kernel, ready, forget, end_iteration, restore,
 * begin_iteration and drain may wait; after_kernel and bind never do). A language binding that
 * calls the executor holding its interpreter lock releases the lock in the hook, so that the lock
 * is dropped only while the executor really waits. hook NULL (the default) removes it.
 * tio_runtime_free never calls it (it waits for requests in flight: call it without the lock).
 */
typedef void (*tio_runtime_wait_hook)(void *ctx, int waiting);
TIO_API void
tio_runtime_set_wait_hook(struct tio_runtime *rt, tio_runtime_wait_hook hook, void *ctx);

/* tio_runtime_get_stats: fill *out. */
TIO_API void tio_runtime_get_stats(const struct tio_runtime *rt, struct tio_runtime_stats *out);

/* tio_runtime_tensor_state: 0 absent, 1 resident, 2 writing, 3 stored, 4 materialize, 5
 * reading; -1 if out of range. For tests and debugging. */
TIO_API int tio_runtime_tensor_state(const struct tio_runtime *rt, uint32_t tensor);

#ifdef __cplusplus
}
#endif
#endif
