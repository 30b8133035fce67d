/*
 * Creating and freeing an engine: parameter checks, backend selection (by name, the
 * TIO_IO_BACKEND environment variable, or the best probe score), the swap files, staging
 * buffers, the host tier, and the progress thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "io/engine_internal.h"

/* The first versioned struct tio_engine_params ends with `threads` (fixed: fields only grow). */
#define ENGINE_PARAMS_MIN TIO_SIZE_THROUGH(struct tio_engine_params, threads)

/* The defaults tio_engine_params_defaults hands out (the header's tio_engine_params_default goes
 * through it). */
static struct tio_engine_params builtin_defaults(void) {
    struct tio_engine_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.backend = "auto";
    p.chunk_bytes = TIO_ENGINE_DEFAULT_CHUNK;
    p.queue_depth = TIO_ENGINE_DEFAULT_DEPTH;
    p.max_requests = TIO_ENGINE_DEFAULT_MAX_REQUESTS;
    p.retries = 2;
    p.preallocate = 1;
    return p;
}

int tio_engine_params_defaults(struct tio_engine_params *out, size_t size) {
    struct tio_engine_params d = builtin_defaults();
    return tio_struct_out("tio_engine_params", out, size, &d, sizeof d, ENGINE_PARAMS_MIN);
}

static int select_backend(struct tio_engine *e, const char *name) {
    if (!name || !*name || !strcmp(name, "auto")) {
        const char *env = getenv("TIO_IO_BACKEND"); /* NOLINT(concurrency-mt-unsafe) */
        if (env && *env && strcmp(env, "auto") != 0) {
            name = env;
        }
    }
    char reason[256];
    if (name && *name && strcmp(name, "auto") != 0) {
        const struct tio_io_backend_ops *ops = tio_io_backend_find(name);
        if (!ops) {
            int known = 0;
            const char *list[] = { "posix", "uring", "cufile", "cuda", "null", "fault" };
            for (size_t i = 0; i < TIO_ARRAY_LEN(list); i++) {
                known |= !strcmp(list[i], name);
            }
            return tio_set_error(known ? TIO_EUNAVAIL : TIO_ENOTFOUND,
                                 known ? "engine: backend %s was not compiled in"
                                       : "engine: unknown backend \"%s\" (posix, uring, cufile, "
                                         "cuda, null, fault or auto)",
                                 name);
        }
        int rc = tio_io_backend_validate(ops);
        if (rc < 0) {
            return rc;
        }
        if (ops->probe(reason, sizeof reason) <= 0) {
            return tio_set_error(TIO_EUNAVAIL, "engine: backend %s is not available here: %s",
                                 ops->name, reason);
        }
        e->ops = ops;
        return 0;
    }
    int best = 0;
    for (size_t i = 0; i < tio_io_backend_count(); i++) {
        const struct tio_io_backend_ops *ops = tio_io_backend_at(i);
        if ((ops->caps & TIO_ENGINE_CAP_TEST_ONLY) || tio_io_backend_validate(ops) < 0) {
            continue;
        }
        int score = ops->probe(reason, sizeof reason);
        TIO_LOG_DEBUG("engine: backend %s: score %d (%s)", ops->name, score, reason);
        if (score > best) {
            best = score;
            e->ops = ops;
        }
    }
    if (!e->ops) {
        return tio_set_error(TIO_EUNAVAIL, "engine: no I/O backend is available");
    }
    return 0;
}

static int check_params(const struct tio_engine_params *p) {
    if (!p) {
        return tio_set_error(TIO_EINVAL, "engine: params is NULL");
    }
    if (p->ndirs && !p->dirs) {
        return tio_set_error(TIO_EINVAL, "engine: dirs is NULL but ndirs is %zu", p->ndirs);
    }
    if (p->ndirs > 256) {
        return tio_set_error(TIO_EINVAL, "engine: ndirs %zu exceeds 256", p->ndirs);
    }
    for (size_t i = 0; i < p->ndirs; i++) {
        if (!p->dirs[i] || !*p->dirs[i]) {
            return tio_set_error(TIO_EINVAL, "engine: dirs[%zu] is empty", i);
        }
    }
    if (!p->ndirs && !p->host_tier_bytes) {
        return tio_set_error(TIO_EINVAL,
                             "engine: no SSD directory (dirs) and no host tier (host_tier_bytes)");
    }
    if (p->chunk_bytes < TIO_IO_ALIGN || p->chunk_bytes % TIO_IO_ALIGN) {
        return tio_set_error(TIO_EINVAL,
                             "engine: chunk_bytes %llu must be a positive multiple of 4096",
                             (unsigned long long)p->chunk_bytes);
    }
    if (p->queue_depth < 1 || p->queue_depth > 4096) {
        return tio_set_error(TIO_EINVAL, "engine: queue_depth %u must be 1..4096", p->queue_depth);
    }
    if (p->max_requests < 1 || p->max_requests > (1u << 24)) {
        return tio_set_error(TIO_EINVAL, "engine: max_requests %u must be 1..16777216",
                             p->max_requests);
    }
    if (p->retries > 100) {
        return tio_set_error(TIO_EINVAL, "engine: retries %u exceeds 100", p->retries);
    }
    if (p->threads > 256) {
        return tio_set_error(TIO_EINVAL, "engine: threads %u exceeds 256", p->threads);
    }
    if (p->host_tier_bytes > (UINT64_C(1) << 50)) {
        return tio_set_error(TIO_EINVAL, "engine: host_tier_bytes is larger than 1 PiB");
    }
    return 0;
}

/* Open one swap file per directory, and the staging buffers (one aligned buffer per
 * transfer in flight) if any file is O_DIRECT. 0 or < 0 (detail set). */
static int
open_swapfiles(struct tio_engine *e, const struct tio_engine_params *params, int *any_direct) {
    uint32_t depth = e->p.queue_depth;
    for (size_t i = 0; i < params->ndirs; i++) {
        for (size_t j = 0; j < i; j++) {
            if (!strcmp(params->dirs[i], params->dirs[j])) {
                return tio_set_error(TIO_EINVAL, "engine: dirs[%zu] repeats dirs[%zu] (%s)", i, j,
                                     params->dirs[i]);
            }
        }
        int rc = tio_swapfile_open(&e->files[i], params->dirs[i], 1);
        if (rc < 0) {
            return rc;
        }
        e->nfiles++;
        e->fds[i] = e->files[i].fd;
        *any_direct |= e->files[i].direct;
    }
    e->stage_bytes = TIO_MIN(e->p.chunk_bytes, (uint64_t)(4u << 20));
    if (*any_direct) {
        e->stage_mem = tio_io_alloc((size_t)(e->stage_bytes * depth));
        if (!e->stage_mem) {
            return TIO_ENOMEM;
        }
        for (uint32_t i = 0; i < depth; i++) {
            e->stage_free[e->nstage_free++] = (int32_t)(depth - 1 - i);
        }
    }
    return 0;
}

/* The host tier: a backend of its own, beside the SSD one (backend_host.c), that holds the
 * pool; the engine keeps the pool's extents. 0 or < 0 (detail set). */
static int make_host_tier(struct tio_engine *e) {
    struct tio_io_config hcfg = {
        .depth = 1,
        .threads = 1,
        .max_op = e->max_op,
        .pool_bytes = (e->p.host_tier_bytes + TIO_IO_ALIGN - 1) & ~(uint64_t)(TIO_IO_ALIGN - 1),
        .h2d_stream = e->gpu.h2d,
        .d2h_stream = e->gpu.d2h,
    };
    int rc = tio_io_backend_validate(&tio_io_backend_host);
    if (rc == 0) {
        rc = tio_io_backend_host.init(&hcfg, &e->host_bst);
    }
    if (rc < 0) {
        return rc;
    }
    e->host_ops = &tio_io_backend_host;
    tio_extents_init(&e->host_ext, TIO_IO_ALIGN);
    return tio_extents_add(&e->host_ext, 0, hcfg.pool_bytes);
}

/* Register the staging buffers with the SSD backend (io_uring's fixed buffers); running
 * unregistered is only slower. */
static void register_staging(struct tio_engine *e) {
    uint32_t depth = e->p.queue_depth;
    void **bufs = tio_calloc(depth, sizeof(*bufs));
    uint64_t *lens = tio_calloc(depth, sizeof(*lens));
    if (bufs && lens) {
        for (uint32_t i = 0; i < depth; i++) {
            bufs[i] = e->stage_mem + (uint64_t)i * e->stage_bytes;
            lens[i] = e->stage_bytes;
        }
        if (e->ops->register_bufs(e->bst, bufs, lens, depth) < 0) {
            TIO_LOG_INFO("engine: staging buffers not registered with %s", e->ops->name);
        }
    }
    tio_free(bufs);
    tio_free(lens);
}

int tio_engine_new(const struct tio_engine_params *caller, struct tio_engine **out) {
    if (!caller) {
        return tio_set_error(TIO_EINVAL, "engine: params is NULL");
    }
    struct tio_engine_params copy = tio_engine_params_default();
    int rc = tio_struct_in("engine: params", &copy, sizeof copy, ENGINE_PARAMS_MIN, caller);
    if (rc < 0 || (rc = check_params(&copy)) < 0) {
        return rc;
    }
    const struct tio_engine_params *params = &copy;
    struct tio_engine *e = tio_calloc(1, sizeof(*e));
    if (!e) {
        return TIO_ENOMEM;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work_cv, NULL);
    pthread_cond_init(&e->done_cv, NULL);
    e->p = *params;
    e->p.dirs = NULL;
    e->p.backend = NULL;
    e->p.backend_options = NULL;
    if (!e->p.threads) {
        e->p.threads = TIO_MIN(e->p.queue_depth, 64u);
    }
    e->max_op = TIO_MIN((uint64_t)TIO_IO_MAX_OP, e->p.chunk_bytes);
    uint32_t depth = e->p.queue_depth;

    rc = select_backend(e, params->backend);
    if (rc < 0) {
        goto fail;
    }
    if (params->backend_options) {
        e->backend_options = tio_strdup(params->backend_options);
        if (!e->backend_options) {
            rc = TIO_ENOMEM;
            goto fail;
        }
    }
    (void)snprintf(e->st.backend, sizeof e->st.backend, "%s", e->ops->name);

    e->nbuckets = 64;
    e->buckets = tio_calloc(e->nbuckets, sizeof(struct tensor *));
    e->opv = tio_calloc(depth, sizeof(*e->opv));
    e->batch = tio_calloc(depth, sizeof(*e->batch));
    e->reqs = tio_calloc(depth, sizeof(*e->reqs));
    e->cqes = tio_calloc(depth, sizeof(*e->cqes));
    e->op_free = tio_calloc(depth, sizeof(*e->op_free));
    e->stage_free = tio_calloc(depth, sizeof(*e->stage_free));
    e->cq_cap = e->p.max_requests;
    e->cq = tio_calloc(e->cq_cap, sizeof(*e->cq));
    e->files = tio_calloc(params->ndirs ? params->ndirs : 1, sizeof(*e->files));
    e->fds = tio_calloc(params->ndirs ? params->ndirs : 1, sizeof(*e->fds));
    if (!e->buckets || !e->opv || !e->batch || !e->reqs || !e->cqes || !e->op_free ||
        !e->stage_free || !e->cq || !e->files || !e->fds) {
        rc = TIO_ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < depth; i++) {
        e->op_free[e->nop_free++] = depth - 1 - i;
        e->opv[i].ring = -1;
    }

    int any_direct = 0;
    rc = open_swapfiles(e, params, &any_direct);
    if (rc < 0) {
        goto fail;
    }
    rc = tio_eng_gpu_init(e); /* before the host tier, which copies on its streams */
    if (rc < 0) {
        goto fail;
    }
    if (e->p.host_tier_bytes) {
        rc = make_host_tier(e);
        if (rc < 0) {
            goto fail;
        }
    }

    struct tio_io_config cfg = {
        .fds = e->fds,
        .nfds = e->nfiles,
        .depth = depth,
        .threads = e->p.threads,
        .direct = any_direct,
        .max_op = e->max_op,
        .options = e->backend_options,
    };
    rc = e->ops->init(&cfg, &e->bst);
    if (rc < 0) {
        goto fail;
    }
    if (e->stage_mem && e->ops->register_bufs) {
        register_staging(e);
    }
    /* caller-driven completions where the backend can park the progress thread */
    e->caller_drive = e->ops->arm && e->ops->arm(e->bst, 0) == 0;
    if (pthread_create(&e->thread, NULL, tio_eng_progress_main, e) != 0) {
        rc = tio_set_error(TIO_ENOMEM, "engine: cannot start the progress thread");
        goto fail;
    }
    e->thread_started = 1;
    TIO_LOG_INFO("engine: backend %s, %u dir(s), chunk %llu, depth %u", e->ops->name, e->nfiles,
                 (unsigned long long)e->p.chunk_bytes, depth);
    if (params->ssd_reserve_bytes) {
        rc = tio_engine_reserve(e, params->ssd_reserve_bytes);
        if (rc < 0) {
            goto fail;
        }
    }
    *out = e;
    return 0;
fail : {
    /* keep the failure detail across the cleanup */
    char detail[512];
    (void)snprintf(detail, sizeof detail, "%s", tio_last_error());
    tio_engine_free(e);
    return tio_set_error(rc, "%s", detail);
}
}

void tio_engine_free(struct tio_engine *e) {
    if (!e) {
        return;
    }
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = 1;
        for (struct request *rq = e->active; rq; rq = rq->anext) {
            rq->canceled = 1;
        }
        tio_eng_wake_progress(e, 1);
        pthread_cond_broadcast(&e->work_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    if (e->bst) {
        if (e->ops->unregister_bufs) {
            e->ops->unregister_bufs(e->bst);
        }
        e->ops->fini(e->bst);
    }
    while (e->active) { /* only if the thread never started */
        struct request *rq = e->active;
        e->active = rq->anext;
        tio_eng_request_free(rq);
    }
    for (size_t i = 0; e->buckets && i < e->nbuckets; i++) {
        while (e->buckets[i]) {
            struct tensor *t = e->buckets[i];
            e->buckets[i] = t->next;
            if (t->stored) {
                tio_eng_gpu_landing_free(e, t->stored); /* to the pool gpu_fini destroys */
            }
            tio_free(t->stored ? t->stored->off : NULL);
            tio_free(t->stored ? t->stored->crc : NULL);
            tio_free(t->stored);
            tio_free(t);
        }
    }
    for (uint32_t i = 0; i < e->nfiles; i++) {
        tio_swapfile_close(&e->files[i]);
    }
    if (e->host_bst) {
        e->host_ops->fini(e->host_bst); /* waits for copies not waited for (`done`) */
        tio_extents_fini(&e->host_ext);
    }
    tio_eng_gpu_fini(e); /* after the host tier, which copies on its streams */
    tio_free(e->stage_mem);
    tio_free(e->buckets);
    tio_free(e->opv);
    tio_free(e->batch);
    tio_free(e->reqs);
    tio_free(e->cqes);
    tio_free(e->op_free);
    tio_free(e->stage_free);
    tio_free(e->cq);
    tio_free(e->files);
    tio_free(e->fds);
    tio_free(e->backend_options);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->done_cv);
    tio_free(e);
}
