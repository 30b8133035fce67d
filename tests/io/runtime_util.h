/* Shared helpers of the executor tests (test_runtime.c, test_runtime_demand.c): finishing a
 * hand-built trace, a plan from a list of moves, and a one-directory engine (header-only; each
 * test is one executable). */
#ifndef TIO_TESTS_IO_RUNTIME_UTIL_H
#define TIO_TESTS_IO_RUNTIME_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <teraio/io.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

/* Finishes tr after its adds (rc: their OR-ed return codes); NULL (tr freed) on any failure. */
static inline struct tio_trace *rt_trace_finish(struct tio_trace *tr, int rc) {
    if (rc != 0 || tio_trace_finish(tr) < 0) {
        tio_trace_free(tr);
        return NULL;
    }
    return tr;
}

/* A finished plan of nk kernels for tr holding the nm moves m (m may be NULL when nm is 0). */
static inline struct tio_plan *
rt_plan(const struct tio_trace *tr, uint64_t nk, const struct tio_move *m, size_t nm) {
    uint64_t h;
    struct tio_plan *p;
    if (tio_trace_hash(tr, &h) < 0 || tio_plan_new(h, nk, "test", &p) < 0) {
        return NULL;
    }
    for (size_t i = 0; i < nm; i++) {
        if (tio_plan_add_move(p, &m[i]) < 0) {
            tio_plan_free(p);
            return NULL;
        }
    }
    if (tio_plan_finish(p) < 0) {
        tio_plan_free(p);
        return NULL;
    }
    return p;
}

/* An engine on the one directory dir with the given backend (opts: its options, or NULL) and
 * host tier; NULL (the error printed) on failure. */
static inline struct tio_engine *
rt_engine(const char *dir, const char *backend, const char *opts, uint64_t host_tier) {
    const char *dirs[] = { dir };
    struct tio_engine_params ep = tio_engine_params_default();
    ep.dirs = dir ? dirs : NULL; /* NULL: host tier only */
    ep.ndirs = dir ? 1 : 0;
    ep.host_tier_bytes = host_tier;
    ep.backend = backend;
    ep.backend_options = opts;
    ep.preallocate = 0;
    struct tio_engine *e = NULL;
    if (tio_engine_new(&ep, &e) < 0) {
        printf("  engine %s: %s\n", backend, tio_last_error());
        return NULL;
    }
    return e;
}

/* The executor's defaults over tr, plan and e. */
static inline struct tio_runtime_params
rt_params(const struct tio_trace *tr, const struct tio_plan *plan, struct tio_engine *e) {
    struct tio_runtime_params rp = tio_runtime_params_default();
    rp.trace = tr;
    rp.plan = plan;
    rp.engine = e;
    return rp;
}

/* Frees what a test built for the executor (each may be NULL). */
static inline void
rt_free_inputs(struct tio_plan *plan, struct tio_engine *e, struct tio_trace *tr) {
    tio_plan_free(plan);
    tio_engine_free(e);
    tio_trace_free(tr);
}

#endif
