/* The extent allocator: first fit, rounding, coalescing, double-free detection. Expected
 * offsets are worked out by hand in the comments. */
#include <errno.h>

#include "../tio_test.h"
#include "common/common_impl.h"
#include "io/extent.h"

TIO_TEST(first_fit_and_coalescing) {
    struct tio_extents x;
    tio_extents_init(&x, 4096);
    CHECK_OK(tio_extents_add(&x, 0, 64 * 1024)); /* [0, 64K) free */
    uint64_t a, b, c, d;
    CHECK_OK(tio_extents_alloc(&x, 1, &a));    /* 1 byte -> 4K at 0 */
    CHECK_OK(tio_extents_alloc(&x, 8192, &b)); /* [4K, 12K) */
    CHECK_OK(tio_extents_alloc(&x, 4097, &c)); /* 8K at [12K, 20K) */
    CHECK_EQ_U(a, 0);
    CHECK_EQ_U(b, 4096);
    CHECK_EQ_U(c, 12288);
    CHECK_EQ_U(x.used, 20480);
    CHECK_OK(tio_extents_free(&x, b, 8192));   /* hole [4K, 12K) */
    CHECK_EQ_U(x.n, 2);                        /* [4K,12K) and [20K,64K) */
    CHECK_OK(tio_extents_alloc(&x, 4096, &d)); /* first fit: the hole */
    CHECK_EQ_U(d, 4096);
    CHECK_OK(tio_extents_free(&x, d, 4096));
    CHECK_OK(tio_extents_free(&x, a, 1)); /* merges [0,4K) with [4K,12K) */
    CHECK_EQ_U(x.n, 2);
    CHECK_OK(tio_extents_free(&x, c, 4097)); /* merges everything back */
    CHECK_EQ_U(x.n, 1);
    CHECK_EQ_U(x.free_list[0].off, 0);
    CHECK_EQ_U(x.free_list[0].len, 65536);
    CHECK_EQ_U(x.used, 0);
    tio_extents_fini(&x);
}

TIO_TEST(errors) {
    struct tio_extents x;
    tio_extents_init(&x, 4096);
    uint64_t off;
    CHECK_RC(tio_extents_alloc(&x, 4096, &off), -ENOSPC); /* empty */
    CHECK_OK(tio_extents_add(&x, 0, 16384));
    CHECK_RC(tio_extents_alloc(&x, 0, &off), TIO_EINVAL);
    CHECK_RC(tio_extents_alloc(&x, 16385, &off), -ENOSPC);
    CHECK_OK(tio_extents_alloc(&x, 8192, &off));
    CHECK_RC(tio_extents_free(&x, 8192, 4096), TIO_EINVAL); /* already free: double free */
    CHECK_OK(tio_extents_add(&x, 16384, 16384));            /* growth merges with the tail */
    CHECK_EQ_U(x.n, 1);
    CHECK_EQ_U(tio_extents_largest(&x), 24576);
    tio_extents_fini(&x);
}

TIO_TEST(random_against_bitmap) {
    /* independent model: a bitmap of 4K units */
    enum { UNITS = 256 };
    unsigned char used[UNITS] = { 0 };
    struct tio_extents x;
    tio_extents_init(&x, 4096);
    CHECK_OK(tio_extents_add(&x, 0, UNITS * 4096));
    uint64_t offs[64], lens[64];
    int n = 0;
    uint32_t s = 12345;
    for (int it = 0; it < 2000; it++) {
        s = s * 1103515245u + 12345u;
        if ((s >> 16) % 3 != 0 && n < 64) {
            uint64_t len = 1 + (s >> 8) % (5 * 4096);
            uint64_t off;
            if (tio_extents_alloc(&x, len, &off) == 0) {
                uint64_t u0 = off / 4096, nu = (len + 4095) / 4096;
                for (uint64_t u = u0; u < u0 + nu; u++) {
                    CHECK(!used[u]);
                    used[u] = 1;
                }
                offs[n] = off;
                lens[n++] = len;
            }
        } else if (n) {
            int k = (int)((s >> 4) % (uint32_t)n);
            CHECK_OK(tio_extents_free(&x, offs[k], lens[k]));
            for (uint64_t u = offs[k] / 4096; u < (offs[k] + lens[k] + 4095) / 4096; u++)
                used[u] = 0;
            offs[k] = offs[n - 1];
            lens[k] = lens[n - 1];
            n--;
        }
        uint64_t nused = 0;
        for (int u = 0; u < UNITS; u++)
            nused += used[u];
        CHECK_EQ_U(x.used, nused * 4096);
        for (size_t i = 1; i < x.n; i++) /* coalesced: never adjacent */
            CHECK(x.free_list[i - 1].off + x.free_list[i - 1].len < x.free_list[i].off);
    }
    tio_extents_fini(&x);
}

int main(void) {
    RUN(first_fit_and_coalescing);
    RUN(errors);
    RUN(random_against_bitmap);
    return tio_test_done();
}
