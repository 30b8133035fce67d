/* The `null` backend: completes every transfer at once without touching memory or disk, to
 * measure the engine's own overhead and to test request splitting without disk space. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>

#include "common/common_impl.h"
#include "io/backend.h"

static _Atomic uint64_t null_max_len, null_total;

uint64_t tio_io_null_max_len(void) {
    return atomic_load(&null_max_len);
}
uint64_t tio_io_null_total_bytes(void) {
    return atomic_load(&null_total);
}
void tio_io_null_reset(void) {
    atomic_store(&null_max_len, 0);
    atomic_store(&null_total, 0);
}

struct null_state {
    struct tio_io_cqe *ring; /* depth entries */
    uint32_t cap, head, count;
};

static int null_probe(char *reason, size_t len) {
    (void)snprintf(reason, len, "completes transfers without I/O (overhead measurement, tests)");
    return 1;
}

static int null_init(const struct tio_io_config *cfg, void **state) {
    struct null_state *st = tio_calloc(1, sizeof(*st));
    if (!st) {
        return TIO_ENOMEM;
    }
    st->cap = cfg->depth;
    st->ring = tio_calloc(st->cap, sizeof(*st->ring));
    if (!st->ring) {
        tio_free(st);
        return TIO_ENOMEM;
    }
    *state = st;
    return 0;
}

static void null_fini(void *state) {
    struct null_state *st = state;
    tio_free(st->ring);
    tio_free(st);
}

static int null_submit(void *state, const struct tio_io_req *reqs, uint32_t n) {
    struct null_state *st = state;
    uint32_t k = 0;
    for (; k < n && st->count < st->cap; k++) {
        uint64_t prev = atomic_load(&null_max_len);
        while (reqs[k].len > prev &&
               !atomic_compare_exchange_weak(&null_max_len, &prev, reqs[k].len)) {
            ;
        }
        atomic_fetch_add(&null_total, reqs[k].len);
        st->ring[(st->head + st->count) % st->cap] =
            (struct tio_io_cqe){ reqs[k].user, reqs[k].len };
        st->count++;
    }
    return (k || !n) ? (int)k : -EAGAIN;
}

static int
null_reap(void *state, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out) {
    struct null_state *st = state;
    (void)min;
    (void)timeout_ns; /* everything submitted is already complete */
    uint32_t k = st->count < max ? st->count : max;
    for (uint32_t i = 0; i < k; i++) {
        out[i] = st->ring[st->head];
        st->head = (st->head + 1) % st->cap;
    }
    st->count -= k;
    return (int)k;
}

const struct tio_io_backend_ops tio_io_backend_null = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "null",
    .caps = TIO_ENGINE_CAP_ASYNC | TIO_ENGINE_CAP_DEVICE_MEM | TIO_ENGINE_CAP_TEST_ONLY,
    .probe = null_probe,
    .init = null_init,
    .fini = null_fini,
    .submit = null_submit,
    .reap = null_reap,
};
