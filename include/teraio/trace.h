/*
 * teraio/trace.h - one training iteration as kernels, tensors and uses.
 *
 * A trace is what the profiler records from a real run (python/teraio) and what the workload
 * model generates (teraio/model.h). Everything downstream (analysis, planning, simulation,
 * execution) reads it. Data model (docs/trace-format.md):
 *
 *   kernel  k = 0..n_kernels-1, in execution order: name, duration (ns), flags, and a CSR range
 *             of uses [use_offset[k], use_offset[k+1]).
 *   tensor  t = 0..n_tensors-1: one storage (views share their base's storage): bytes, kind,
 *             flags (TIO_TENSOR_GLOBAL: lives across iterations), optional name.
 *   use     (tensor, mode): kernel k reads and/or writes tensor t. A tensor appears at most once
 *             per kernel (adding it twice merges the modes).
 *
 * An intermediate tensor exists from its first use to its last use. A global tensor is resident
 * at iteration start and its last inactive period wraps into the next iteration.
 *
 * Storage is struct-of-arrays so that Python can expose each column as a numpy view and the
 * binary format can write whole sections. Example:
 *
 *     struct tio_trace *tr;
 *     if (tio_trace_new(NULL, &tr) < 0) ...
 *     uint32_t w, x, y, k;
 *     tio_trace_add_tensor(tr, 64u << 20, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w", &w);
 *     tio_trace_add_tensor(tr, 8u << 20, TIO_TENSOR_INPUT, 0, "x", &x);
 *     tio_trace_add_tensor(tr, 8u << 20, TIO_TENSOR_ACTIVATION, 0, "y", &y);
 *     tio_trace_add_kernel(tr, "aten::mm", 120000, 0, &k);    // 120 us
 *     tio_trace_add_use(tr, w, TIO_USE_READ);
 *     tio_trace_add_use(tr, x, TIO_USE_READ);
 *     tio_trace_add_use(tr, y, TIO_USE_WRITE);
 *     if (tio_trace_finish(tr) < 0) ...                       // validates, freezes
 *     tio_trace_save(tr, "mm.tio", TIO_TRACE_FORMAT_BINARY);
 *     tio_trace_free(tr);
 *
 * Thread safety: a trace is built by one thread; once finished it is immutable and may be read
 * from any number of threads.
 */
#ifndef TERAIO_TRACE_H
#define TERAIO_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a tensor holds. Stored as int32_t. */
enum tio_tensor_kind {
    TIO_TENSOR_WEIGHT = 0,
    TIO_TENSOR_GRAD = 1,
    TIO_TENSOR_OPTIM_STATE = 2,
    TIO_TENSOR_ACTIVATION = 3,
    TIO_TENSOR_TEMP = 4,
    TIO_TENSOR_INPUT = 5,
    TIO_TENSOR_OTHER = 6,
    TIO_TENSOR_KIND_COUNT
};

/* Tensor flags (bit set, uint32_t). */
enum tio_tensor_flag {
    TIO_TENSOR_GLOBAL = 1u << 0, /* lives across iterations (weights, optimizer states, ...) */
    TIO_TENSOR_PINNED = 1u << 1, /* must never be offloaded (e.g. communication buffers) */
    TIO_TENSOR_FLAGS_ALL = (1u << 2) - 1
};

/* Kernel flags (bit set, uint32_t). */
enum tio_kernel_flag {
    TIO_KERNEL_COMM = 1u << 0,     /* collective / p2p: all its tensors must be resident */
    TIO_KERNEL_OPTIM = 1u << 1,    /* part of the optimizer step */
    TIO_KERNEL_BACKWARD = 1u << 2, /* part of the backward pass (informational) */
    TIO_KERNEL_FLAGS_ALL = (1u << 3) - 1
};

/* How a kernel uses a tensor. Stored as uint8_t. */
enum tio_use_mode { TIO_USE_READ = 1, TIO_USE_WRITE = 2, TIO_USE_READ_WRITE = 3 };

/* "No name" value for name indices. */
#define TIO_NO_NAME UINT32_MAX

/* Hard limits enforced by the builder and the readers (they bound allocations on bad input). */
#define TIO_TRACE_MAX_KERNELS  (UINT32_C(1) << 28) /* 268M kernels */
#define TIO_TRACE_MAX_TENSORS  (UINT32_C(1) << 28)
#define TIO_TRACE_MAX_USES     (UINT64_C(1) << 32)
#define TIO_TRACE_MAX_BYTES    (UINT64_C(1) << 50) /* per tensor: 1 PiB */
#define TIO_TRACE_MAX_DURATION (UINT64_C(1) << 44) /* per kernel: ~4.9 hours in ns */
#define TIO_TRACE_MAX_STRING   4096                /* bytes per name / metadata value */

struct tio_trace;

struct tio_trace_params {
    /* Size of this struct as the caller's header declares it: set by tio_trace_params_default(s)
     * (docs/style.md, "Versioned structs"). */
    uint32_t struct_size;
    size_t kernels_hint; /* expected counts, to reserve memory up front (0 = grow) */
    size_t tensors_hint;
    size_t uses_hint;
};

/* tio_trace_params_defaults: fill the `size` bytes of *out (size = sizeof *out) with the
 * defaults (all hints 0) as far as this library knows them (a newer header's extra fields are
 * zeroed), and set out->struct_size. Returns 0; TIO_EINVAL (NULL), TIO_EVERSION (size below the
 * first versioned struct tio_trace_params). */
TIO_API int tio_trace_params_defaults(struct tio_trace_params *out, size_t size);
/* tio_trace_params_default: the same by value. Inline, so that the size is the one this header
 * declares: not an exported function, whose by-value struct would be the library's size
 * (docs/style.md, "Versioned structs"). */
static inline struct tio_trace_params tio_trace_params_default(void) {
    struct tio_trace_params p;
    (void)tio_trace_params_defaults(&p, sizeof p);
    return p;
}

/*
 * tio_trace_new: an empty trace in the building state. `params` may be NULL (defaults).
 * Returns 0 and *out, TIO_EVERSION (params->struct_size: fill params with
 * tio_trace_params_default(s) first), TIO_EINVAL (hints above the trace limits) or TIO_ENOMEM.
 * Free with tio_trace_free.
 */
TIO_API TIO_MUST_CHECK int tio_trace_new(const struct tio_trace_params *params,
                                         struct tio_trace **out);

/* tio_trace_free: release the trace and everything it owns. Accepts NULL. */
TIO_API void tio_trace_free(struct tio_trace *trace);

/*
 * tio_trace_add_tensor: append a tensor; its id (0, 1, 2, ...) goes to *id (may be NULL).
 * bytes in [1, TIO_TRACE_MAX_BYTES], kind < TIO_TENSOR_KIND_COUNT, flags within
 * TIO_TENSOR_FLAGS_ALL, name may be NULL. Returns 0, TIO_EINVAL, TIO_ENOMEM or TIO_ESTATE
 * (trace already finished).
 */
TIO_API TIO_MUST_CHECK int tio_trace_add_tensor(struct tio_trace *trace,
                                                uint64_t bytes,
                                                int32_t kind,
                                                uint32_t flags,
                                                const char *name,
                                                uint32_t *id);

/*
 * tio_trace_add_kernel: append a kernel (duration in ns <= TIO_TRACE_MAX_DURATION); subsequent
 * tio_trace_add_use calls attach uses to it. name may be NULL. Same errors as add_tensor.
 */
TIO_API TIO_MUST_CHECK int tio_trace_add_kernel(
    struct tio_trace *trace, const char *name, uint64_t duration_ns, uint32_t flags, uint32_t *id);

/*
 * tio_trace_add_use: the last added kernel uses `tensor` (an existing id) with `mode`
 * (TIO_USE_*). A repeated tensor within the same kernel merges modes. Returns 0, TIO_EINVAL
 * (no kernel yet, bad id or mode), TIO_ENOMEM or TIO_ESTATE.
 */
TIO_API TIO_MUST_CHECK int
tio_trace_add_use(struct tio_trace *trace, uint32_t tensor, int32_t mode);

/* tio_trace_set_kernel_duration: change kernel k's duration (profilers learn it afterwards).
 * Allowed before tio_trace_finish only. */
TIO_API TIO_MUST_CHECK int
tio_trace_set_kernel_duration(struct tio_trace *trace, uint32_t kernel, uint64_t duration_ns);

/*
 * tio_trace_set_meta: set a string metadata entry (e.g. "model" = "llama3-8b", "gpu", "source",
 * "tokens_per_iteration"). Keys are [a-z0-9_.-]{1,64}; values at most TIO_TRACE_MAX_STRING bytes.
 * Replaces an existing key. Allowed in any state (metadata is not part of the trace hash).
 */
TIO_API TIO_MUST_CHECK int
tio_trace_set_meta(struct tio_trace *trace, const char *key, const char *value);

/* tio_trace_get_meta: the value for key, or NULL. Owned by the trace. */
TIO_API const char *tio_trace_get_meta(const struct tio_trace *trace, const char *key);

/* tio_trace_meta_count / tio_trace_meta_at: iterate metadata in insertion order. */
TIO_API size_t tio_trace_meta_count(const struct tio_trace *trace);
TIO_API TIO_MUST_CHECK int
tio_trace_meta_at(const struct tio_trace *trace, size_t i, const char **key, const char **value);

/*
 * tio_trace_finish: validate (tio_trace_validate) and freeze the trace; after it, the add_* calls
 * return TIO_ESTATE. Traces returned by the readers are already finished. Idempotent.
 */
TIO_API TIO_MUST_CHECK int tio_trace_finish(struct tio_trace *trace);

/* tio_trace_is_finished: 1 if frozen, 0 otherwise. */
TIO_API int tio_trace_is_finished(const struct tio_trace *trace);

/*
 * tio_trace_validate: check every invariant: counts within limits, every tensor id in range,
 * modes and kinds known, flags within their masks, CSR offsets monotonic and ending at n_uses,
 * no tensor twice in one kernel, bytes and durations within limits and their sums free of
 * overflow, name indices in range. Returns 0 or TIO_EFORMAT with the offending field in
 * tio_last_error() (e.g. "trace: use 17 (kernel 3): tensor 99 out of range (n_tensors 12)").
 */
TIO_API TIO_MUST_CHECK int tio_trace_validate(const struct tio_trace *trace);

/*
 * A read-only view of a trace's columns (all pointers owned by the trace, valid until it is
 * freed or, for an unfinished trace, until the next add_* call).
 */
struct tio_trace_view {
    size_t n_kernels;
    size_t n_tensors;
    size_t n_uses;
    size_t n_strings;
    const uint64_t *kernel_duration_ns; /* [n_kernels] nanoseconds */
    const uint32_t *kernel_flags;       /* [n_kernels] TIO_KERNEL_* bits */
    const uint32_t *kernel_name;        /* [n_kernels] string index or TIO_NO_NAME */
    const uint64_t *kernel_use_offset;  /* [n_kernels + 1] CSR offsets into the use arrays */
    const uint64_t *tensor_bytes;       /* [n_tensors] bytes */
    const int32_t *tensor_kind;         /* [n_tensors] enum tio_tensor_kind */
    const uint32_t *tensor_flags;       /* [n_tensors] TIO_TENSOR_* bits */
    const uint32_t *tensor_name;        /* [n_tensors] string index or TIO_NO_NAME */
    const uint32_t *use_tensor;         /* [n_uses] tensor id */
    const uint8_t *use_mode;            /* [n_uses] enum tio_use_mode */
};

/* tio_trace_get_view: fill *view. Never fails for a valid handle. */
TIO_API void tio_trace_get_view(const struct tio_trace *trace, struct tio_trace_view *view);

/* tio_trace_string: the interned string with index `id`, or NULL if id is TIO_NO_NAME or out of
 * range. Owned by the trace. */
TIO_API const char *tio_trace_string(const struct tio_trace *trace, uint32_t id);

/* Convenience accessors (bounds-checked; 0 / NULL when out of range). */
TIO_API size_t tio_trace_kernel_count(const struct tio_trace *trace);
TIO_API size_t tio_trace_tensor_count(const struct tio_trace *trace);
TIO_API size_t tio_trace_use_count(const struct tio_trace *trace);
TIO_API const char *tio_trace_kernel_name(const struct tio_trace *trace, uint32_t kernel);
TIO_API const char *tio_trace_tensor_name(const struct tio_trace *trace, uint32_t tensor);
/* tio_trace_total_duration_ns: sum of kernel durations (the ideal iteration time). */
TIO_API uint64_t tio_trace_total_duration_ns(const struct tio_trace *trace);

/* tio_tensor_kind_name / tio_tensor_kind_parse: "weight", "grad", "optim_state",
 * "activation", "temp", "input", "other". parse returns the kind or TIO_EINVAL. */
TIO_API const char *tio_tensor_kind_name(int32_t kind);
TIO_API int tio_tensor_kind_parse(const char *name);

/*
 * tio_trace_hash: a 64-bit content hash of a finished trace (kernels, durations, flags, tensors,
 * uses; names and metadata excluded). Plans store it to refuse being applied to another trace.
 */
TIO_API TIO_MUST_CHECK int tio_trace_hash(const struct tio_trace *trace, uint64_t *out);

/* ---- Formats ------------------------------------------------------------------------------ */

enum tio_trace_format {
    TIO_TRACE_FORMAT_AUTO = 0,   /* readers: by content (binary magic, else JSON) */
    TIO_TRACE_FORMAT_BINARY = 1, /* compact versioned .tio, see docs/trace-format.md */
    TIO_TRACE_FORMAT_JSON = 2    /* interchange and fixtures, see docs/trace-format.md */
};

/*
 * tio_trace_load: read and fully validate a trace file. Returns 0 and a finished trace in *out,
 * or -errno (cannot open), TIO_EFORMAT / TIO_EVERSION (detail names the field), TIO_ENOMEM.
 * Never crashes, hangs or allocates without bound on malformed input.
 */
TIO_API TIO_MUST_CHECK int tio_trace_load(const char *path, int32_t format, struct tio_trace **out);

/* tio_trace_load_mem: the same from memory (fuzzers, Python bytes). */
TIO_API TIO_MUST_CHECK int
tio_trace_load_mem(const void *data, size_t len, int32_t format, struct tio_trace **out);

/*
 * tio_trace_save: write a finished trace. format AUTO picks JSON for paths ending in ".json",
 * binary otherwise. Writes to a temporary file in the same directory (created with O_EXCL) and
 * renames it, so a failure never leaves a truncated file behind. A symlink at `path` is written
 * through (its target is replaced); an existing file keeps its owner and mode; a directory
 * (-EISDIR), device node, FIFO or socket (TIO_EINVAL) is refused and left alone. Returns 0 or
 * -errno / TIO_EINVAL / TIO_ESTATE.
 */
TIO_API TIO_MUST_CHECK int
tio_trace_save(const struct tio_trace *trace, const char *path, int32_t format);

/*
 * tio_trace_save_mem: serialize into a buffer allocated with tio_malloc (*data, *len); the
 * caller frees it with tio_free.
 */
TIO_API TIO_MUST_CHECK int
tio_trace_save_mem(const struct tio_trace *trace, int32_t format, void **data, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
