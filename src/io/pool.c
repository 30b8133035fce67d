/* Worker-thread pool behind the synchronous backends (see pool.h). */
#include "io/pool.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "io/throttle.h"

struct tio_pool {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* workers wait for queued transfers */
    pthread_cond_t done_cv; /* reap waits for results */
    tio_pool_fn fn;
    void *ctx;
    uint32_t capacity; /* transfers queued + running + unreaped, at most */
    /* queued transfers: a ring of capacity entries */
    struct tio_io_req *queue;
    uint32_t q_head, q_count;
    /* finished transfers: a ring of capacity entries */
    struct tio_io_cqe *done;
    uint32_t d_head, d_count;
    uint32_t outstanding; /* queued + running + done */
    uint32_t kicks;       /* tio_pool_kick calls not yet seen by reap */
    int stopping;
    int throttled; /* pace every transfer by `throttle` (guarded by mu) */
    struct tio_throttle throttle;
    uint32_t nthreads;
    pthread_t *threads;
};

/* The arrays follow the pool in its one allocation: each offset keeps the next one aligned. */
_Static_assert(sizeof(struct tio_pool) % _Alignof(struct tio_io_req) == 0, "queue alignment");
_Static_assert(sizeof(struct tio_io_req) % _Alignof(struct tio_io_cqe) == 0, "done alignment");
_Static_assert(sizeof(struct tio_io_cqe) % _Alignof(pthread_t) == 0, "threads alignment");

struct worker_arg {
    struct tio_pool *p;
    uint32_t index;
};

static void push_done(struct tio_pool *p, uint64_t user, int64_t res) {
    p->done[(p->d_head + p->d_count) % p->capacity] = (struct tio_io_cqe){ user, res };
    p->d_count++;
    pthread_cond_broadcast(&p->done_cv);
}

static void *worker_main(void *arg) {
    struct worker_arg wa = *(struct worker_arg *)arg;
    struct tio_pool *p = wa.p;
    tio_free(arg);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->q_count && !p->stopping) {
            pthread_cond_wait(&p->work_cv, &p->mu);
        }
        if (!p->q_count && p->stopping) {
            break;
        }
        struct tio_io_req r = p->queue[p->q_head];
        p->q_head = (p->q_head + 1) % p->capacity;
        p->q_count--;
        /* the emulated drive serves transfers in the order they leave the queue */
        uint64_t due = p->throttled ? tio_throttle_admit(&p->throttle, r.op, r.len) : 0;
        pthread_mutex_unlock(&p->mu);
        int64_t res = p->fn(p->ctx, &r, wa.index);
        if (due) {
            tio_throttle_wait(due);
        }
        pthread_mutex_lock(&p->mu);
        push_done(p, r.user, res);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int tio_pool_new(
    uint32_t threads, uint32_t capacity, tio_pool_fn fn, void *ctx, struct tio_pool **out) {
    if (!threads || !capacity || !fn) {
        return tio_set_error(TIO_EINVAL, "io pool: threads %u, capacity %u", threads, capacity);
    }
    /* one allocation (freed at once by tio_pool_free): the pool, its two rings, the thread ids */
    size_t q_off = sizeof(struct tio_pool);
    size_t d_off = q_off + (size_t)capacity * sizeof(struct tio_io_req);
    size_t t_off = d_off + (size_t)capacity * sizeof(struct tio_io_cqe);
    unsigned char *mem = tio_calloc(1, t_off + (size_t)threads * sizeof(pthread_t));
    if (!mem) {
        return TIO_ENOMEM;
    }
    struct tio_pool *p = (struct tio_pool *)mem;
    p->queue = (struct tio_io_req *)(mem + q_off);
    p->done = (struct tio_io_cqe *)(mem + d_off);
    p->threads = (pthread_t *)(mem + t_off);
    p->fn = fn;
    p->ctx = ctx;
    p->capacity = capacity;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    for (uint32_t i = 0; i < threads; i++) {
        struct worker_arg *wa = tio_malloc(sizeof(*wa));
        if (!wa) {
            break;
        }
        *wa = (struct worker_arg){ p, i };
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            tio_free(wa);
            break;
        }
        p->nthreads++;
    }
    if (p->nthreads != threads) {
        tio_pool_free(p);
        return tio_set_error(TIO_ENOMEM, "io pool: could not start %u threads", threads);
    }
    *out = p;
    return 0;
}

void tio_pool_free(struct tio_pool *p) {
    if (!p) {
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < p->nthreads; i++) {
        pthread_join(p->threads[i], NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    tio_free(p);
}

int tio_pool_submit(struct tio_pool *p, const struct tio_io_req *reqs, uint32_t n) {
    pthread_mutex_lock(&p->mu);
    uint32_t room = p->capacity - p->outstanding;
    uint32_t k = n < room ? n : room;
    for (uint32_t i = 0; i < k; i++) {
        p->queue[(p->q_head + p->q_count) % p->capacity] = reqs[i];
        p->q_count++;
    }
    p->outstanding += k;
    if (k) {
        pthread_cond_broadcast(&p->work_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return (k || !n) ? (int)k : -EAGAIN;
}

int tio_pool_reap(
    struct tio_pool *p, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out) {
    struct timespec deadline;
    tio_deadline_in(timeout_ns, &deadline);
    pthread_mutex_lock(&p->mu);
    while (p->d_count < min && !p->kicks) {
        int rc = timeout_ns < 0 ? pthread_cond_wait(&p->done_cv, &p->mu)
                                : pthread_cond_timedwait(&p->done_cv, &p->mu, &deadline);
        if (rc == ETIMEDOUT) {
            break;
        }
    }
    p->kicks = 0;
    uint32_t k = p->d_count < max ? p->d_count : max;
    for (uint32_t i = 0; i < k; i++) {
        out[i] = p->done[p->d_head];
        p->d_head = (p->d_head + 1) % p->capacity;
    }
    p->d_count -= k;
    p->outstanding -= k;
    pthread_mutex_unlock(&p->mu);
    return (int)k;
}

void tio_pool_set_throttle(struct tio_pool *p, const struct tio_throttle *t) {
    pthread_mutex_lock(&p->mu);
    p->throttle = *t;
    p->throttle.free_ns = 0;
    p->throttled = 1;
    pthread_mutex_unlock(&p->mu);
}

void tio_pool_kick(struct tio_pool *p) {
    pthread_mutex_lock(&p->mu);
    p->kicks++;
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
}

int tio_pool_cancel(struct tio_pool *p, uint64_t user) {
    int rc = -ENOENT;
    pthread_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->q_count; i++) {
        uint32_t at = (p->q_head + i) % p->capacity;
        if (p->queue[at].user != user) {
            continue;
        }
        /* close the gap by shifting the later entries down */
        for (uint32_t j = i; j + 1 < p->q_count; j++) {
            p->queue[(p->q_head + j) % p->capacity] = p->queue[(p->q_head + j + 1) % p->capacity];
        }
        p->q_count--;
        push_done(p, user, -ECANCELED);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int64_t tio_file_io(int fd, int32_t op, void *buf, size_t len, uint64_t off) {
    ssize_t n;
    do {
        n = op == TIO_IO_OP_WRITE ? pwrite(fd, buf, len, (off_t)off)
                                  : pread(fd, buf, len, (off_t)off);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : (int64_t)n;
}

int64_t tio_posix_io(int fd, const struct tio_io_req *r) {
    return tio_file_io(fd, r->op, r->buf, r->len, r->off);
}

int tio_pool_backend_init(size_t size,
                          const struct tio_io_config *cfg,
                          tio_pool_setup_fn setup,
                          tio_pool_fn fn,
                          void **state) {
    struct tio_pool_backend *b = tio_calloc(1, size);
    if (!b) {
        return TIO_ENOMEM;
    }
    b->fds = cfg->fds;
    b->nfds = cfg->nfds;
    struct tio_throttle t;
    int throttled = tio_throttle_parse(cfg->options, &t);
    int rc = throttled < 0 ? throttled : setup ? setup(b, cfg) : 0;
    if (rc >= 0) {
        rc = tio_pool_new(cfg->threads, cfg->depth, fn, b, &b->pool);
    }
    if (rc >= 0 && throttled) {
        tio_pool_set_throttle(b->pool, &t);
    }
    if (rc < 0) {
        tio_pool_backend_fini(b);
        return rc;
    }
    *state = b;
    return 0;
}

void tio_pool_backend_fini(void *state) {
    struct tio_pool_backend *b = state;
    tio_pool_free(b->pool);
    if (b->teardown) {
        b->teardown(b);
    }
    tio_free(b);
}

int tio_pool_backend_fd(const struct tio_pool_backend *b,
                        const struct tio_io_req *r,
                        int device_mem) {
    if (r->file < 0 || (uint32_t)r->file >= b->nfds || (r->mem != TIO_MEM_HOST && !device_mem)) {
        return -EINVAL;
    }
    return b->fds[r->file];
}

int tio_pool_backend_submit(void *state, const struct tio_io_req *reqs, uint32_t n) {
    return tio_pool_submit(((struct tio_pool_backend *)state)->pool, reqs, n);
}

int tio_pool_backend_reap(
    void *state, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out) {
    return tio_pool_reap(((struct tio_pool_backend *)state)->pool, min, max, timeout_ns, out);
}

int tio_pool_backend_cancel(void *state, uint64_t user) {
    return tio_pool_cancel(((struct tio_pool_backend *)state)->pool, user);
}

void tio_pool_backend_notify(void *state) {
    tio_pool_kick(((struct tio_pool_backend *)state)->pool);
}
