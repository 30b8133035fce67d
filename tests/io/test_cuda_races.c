/*
 * The emulator's copy-versus-copy race check (fake_cuda_copy_races): two copies that write the
 * same bytes, or one of which writes what the other reads, in device memory or in host memory,
 * race unless one is ordered before the other: by a stream, an event, or the host seeing the first
 * complete before it queued the second. Copies that only read the same bytes never race.
 */
#include <string.h>

#include "io/fake_cuda.h"
#include "tio_test.h"

#define H2D 1
#define D2H 2
#define N   (64u * 1024u)

static struct fake_cuda fc;

struct fix {
    void *s[2], *e, *dev[2];
    unsigned char *host[2];
};

static int fix_new(struct fix *f) {
    memset(f, 0, sizeof *f);
    void *h0 = NULL, *h1 = NULL;
    int rc = fc.stream_create(&f->s[0], 1) | fc.stream_create(&f->s[1], 1) |
             fc.event_create(&f->e, 0) | fc.malloc_device(&f->dev[0], N) |
             fc.malloc_device(&f->dev[1], N) | fc.host_alloc(&h0, N, 0) | fc.host_alloc(&h1, N, 0);
    f->host[0] = h0;
    f->host[1] = h1;
    return rc;
}

static void fix_free(struct fix *f) {
    for (int i = 0; i < 2; i++) {
        (void)fc.stream_synchronize(f->s[i]);
        (void)fc.stream_destroy(f->s[i]);
        (void)fc.free_device(f->dev[i]);
        (void)fc.free_host(f->host[i]);
    }
    (void)fc.event_destroy(f->e);
}

static void sync_both(struct fix *f) {
    (void)fc.stream_synchronize(f->s[0]);
    (void)fc.stream_synchronize(f->s[1]);
}

TIO_TEST(two_writes_of_device_memory) {
    struct fix f;
    CHECK_EQ_I(fix_new(&f), 0);
    uint64_t r0 = fc.copy_races();
    CHECK_EQ_I(fc.memcpy_async(f.dev[0], f.host[0], N, H2D, f.s[0]), 0);
    CHECK_EQ_I(fc.memcpy_async(f.dev[0], f.host[1], N, H2D, f.s[1]), 0);
    sync_both(&f);
    CHECK(fc.copy_races() > r0); /* nothing orders them */
    /* the same, ordered by an event */
    r0 = fc.copy_races();
    CHECK_EQ_I(fc.memcpy_async(f.dev[0], f.host[0], N, H2D, f.s[0]), 0);
    CHECK_EQ_I(fc.event_record(f.e, f.s[0]), 0);
    CHECK_EQ_I(fc.stream_wait_event(f.s[1], f.e, 0), 0);
    CHECK_EQ_I(fc.memcpy_async(f.dev[0], f.host[1], N, H2D, f.s[1]), 0);
    sync_both(&f);
    CHECK_EQ_U(fc.copy_races(), r0);
    /* one stream: ordered */
    CHECK_EQ_I(fc.memcpy_async(f.dev[0], f.host[0], N, H2D, f.s[0]), 0);
    CHECK_EQ_I(fc.memcpy_async(f.host[1], f.dev[0], N, D2H, f.s[0]), 0);
    sync_both(&f);
    CHECK_EQ_U(fc.copy_races(), r0);
    fix_free(&f);
}

TIO_TEST(host_buffer_written_and_read) {
    struct fix f;
    CHECK_EQ_I(fix_new(&f), 0);
    uint64_t r0 = fc.copy_races();
    /* host[0] is written from the device on one stream and read to the device on another */
    CHECK_EQ_I(fc.memcpy_async(f.host[0], f.dev[0], N, D2H, f.s[0]), 0);
    CHECK_EQ_I(fc.memcpy_async(f.dev[1], f.host[0], N, H2D, f.s[1]), 0);
    sync_both(&f);
    CHECK(fc.copy_races() > r0);
    /* the host waited for the first before queueing the second: ordered */
    r0 = fc.copy_races();
    CHECK_EQ_I(fc.memcpy_async(f.host[0], f.dev[0], N, D2H, f.s[0]), 0);
    CHECK_EQ_I(fc.stream_synchronize(f.s[0]), 0);
    CHECK_EQ_I(fc.memcpy_async(f.dev[1], f.host[0], N, H2D, f.s[1]), 0);
    sync_both(&f);
    CHECK_EQ_U(fc.copy_races(), r0);
    fix_free(&f);
}

TIO_TEST(reads_do_not_race) {
    struct fix f;
    CHECK_EQ_I(fix_new(&f), 0);
    uint64_t r0 = fc.copy_races();
    CHECK_EQ_I(fc.memcpy_async(f.dev[0], f.host[0], N, H2D, f.s[0]), 0);
    CHECK_EQ_I(fc.memcpy_async(f.dev[1], f.host[0], N, H2D, f.s[1]), 0); /* both read host[0] */
    sync_both(&f);
    CHECK_EQ_U(fc.copy_races(), r0);
    /* disjoint halves of one buffer */
    unsigned char *d = f.dev[0];
    CHECK_EQ_I(fc.memcpy_async(d, f.host[0], N / 2, H2D, f.s[0]), 0);
    CHECK_EQ_I(fc.memcpy_async(d + N / 2, f.host[1], N / 2, H2D, f.s[1]), 0);
    sync_both(&f);
    CHECK_EQ_U(fc.copy_races(), r0);
    fix_free(&f);
}

int main(void) {
    if (fake_cuda_load(&fc) < 0)
        return 1;
    RUN(two_writes_of_device_memory);
    RUN(host_buffer_written_and_read);
    RUN(reads_do_not_race);
    return tio_test_done();
}
