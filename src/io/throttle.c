/* The emulated drive of the thread-pool backends (throttle.h). */
#include "io/throttle.h"

#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "common/common_impl.h"
#include "io/backend.h"

static _Atomic uint64_t transfers, read_bytes, write_bytes, busy_total, behind_total, behind_max;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

int tio_throttle_parse(const char *options, struct tio_throttle *out) {
    uint64_t rd = 0, wr = 0, lat = 0;
    int a = tio_io_option_u64(options, "throttle_read", &rd);
    int b = a < 0 ? a : tio_io_option_u64(options, "throttle_write", &wr);
    int c = b < 0 ? b : tio_io_option_u64(options, "throttle_latency_ns", &lat);
    if (a < 0 || b < 0 || c < 0) {
        return TIO_EINVAL;
    }
    *out =
        (struct tio_throttle){ .read_Bps = (double)rd, .write_Bps = (double)wr, .latency_ns = lat };
    return a || b || c;
}

uint64_t tio_throttle_admit(struct tio_throttle *t, int32_t op, uint64_t len) {
    uint64_t now = mono_ns();
    double rate = op == TIO_IO_OP_WRITE ? t->write_Bps : t->read_Bps;
    uint64_t start = t->free_ns > now ? t->free_ns : now,
             busy = rate > 0 ? (uint64_t)((double)len * 1e9 / rate) : 0;
    t->free_ns = start + busy;
    atomic_fetch_add(op == TIO_IO_OP_WRITE ? &write_bytes : &read_bytes, len);
    atomic_fetch_add(&busy_total, busy);
    return t->free_ns + t->latency_ns;
}

void tio_throttle_wait(uint64_t due_ns) {
    uint64_t now = mono_ns();
    atomic_fetch_add(&transfers, 1);
    if (now > due_ns) {
        uint64_t late = now - due_ns, m = atomic_load(&behind_max);
        atomic_fetch_add(&behind_total, late);
        while (late > m && !atomic_compare_exchange_weak(&behind_max, &m, late)) {
        }
        return;
    }
    struct timespec ts = { (time_t)(due_ns / UINT64_C(1000000000)),
                           (long)(due_ns % UINT64_C(1000000000)) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

void tio_io_throttle_counts(struct tio_throttle_counts *out) {
    *out = (struct tio_throttle_counts){ .transfers = atomic_load(&transfers),
                                         .read_bytes = atomic_load(&read_bytes),
                                         .write_bytes = atomic_load(&write_bytes),
                                         .busy_ns = atomic_load(&busy_total),
                                         .behind_ns = atomic_load(&behind_total),
                                         .max_behind_ns = atomic_load(&behind_max) };
}
