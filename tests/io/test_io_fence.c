/*
 * The fence and done arguments of tio_engine_write / tio_engine_read, on the posix backend
 * with a test cudart table whose cudaEventQuery answers what the test says: no byte of a
 * fenced request moves while its event is not ready, and it completes once the event has;
 * a failed query fails the request with TIO_ECUDA; a done event on host memory is refused at
 * once. NULL for both is the plain request (every other engine test).
 */
#include <stdatomic.h>

#include "../tio_test.h"
#include "backend_util.h"
#include "common/common_impl.h"
#include "io_util.h"

static char g_dir[512];
static const char *g_dirv[1] = { g_dir };

enum { EV_NOT_READY, EV_DONE, EV_FAILS };
static _Atomic int g_event = EV_NOT_READY;
static _Atomic int g_queries;

static int fake_event_query(tio_cuda_event ev) {
    (void)ev;
    atomic_fetch_add(&g_queries, 1);
    int s = atomic_load(&g_event);
    return s == EV_NOT_READY ? TIO_CUDA_NOT_READY : s == EV_DONE ? 0 : 700;
}

static struct tio_cudart_api g_fake;
static int g_token; /* stands for a cudaEvent_t: the engine only hands it to event_query */

#define N 65536

static struct tio_engine *make(void) {
    struct tio_engine_params p = io_params("posix", g_dirv, 1);
    struct tio_engine *e = NULL;
    int rc = tio_engine_new(&p, &e);
    if (rc < 0)
        printf("  engine: %s: %s\n", tio_strerror(rc), tio_last_error());
    return e;
}

/* No completion within 100 ms, and no transfer issued. */
static void held(struct tio_engine *e) {
    struct tio_completion c;
    atomic_store(&g_queries, 0);
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, 100000000), 0);
    CHECK(atomic_load(&g_queries) > 0); /* the engine polls the event */
    struct tio_engine_stats st;
    CHECK_OK(tio_engine_stats(e, &st));
    CHECK_EQ_U(st.ops_issued, 0);
}

TIO_TEST(fence_holds_the_request_until_its_event_completes) {
    struct tio_engine *e = make();
    REQUIRE(e != NULL);
    unsigned char *a = tio_aligned_alloc(4096, N), *b = tio_aligned_alloc(4096, N);
    io_fill(a, N, 7);
    memset(b, 0, N);
    struct tio_completion c;
    atomic_store(&g_event, EV_NOT_READY);
    CHECK_OK(io_write(e, 1, a, N, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 11, &g_token));
    held(e);
    atomic_store(&g_event, EV_DONE);
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, WAIT_NS), 1);
    CHECK_EQ_U(c.tag, 11);
    CHECK_EQ_I(c.res, N);
    atomic_store(&g_event, EV_NOT_READY);
    CHECK_OK(io_read(e, 1, b, N, TIO_MEM_HOST, TIO_PRIO_URGENT, 12, &g_token, NULL));
    struct tio_completion none;
    CHECK_EQ_I(tio_engine_wait(e, &none, 1, 1, 100000000), 0);
    CHECK_EQ_I(b[0] | b[N - 1], 0); /* the read has not run: the buffer is untouched */
    atomic_store(&g_event, EV_DONE);
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, WAIT_NS), 1);
    CHECK_EQ_U(c.tag, 12);
    CHECK_EQ_I(c.res, N);
    CHECK(io_check(b, N, 7));
    tio_engine_free(e);
    tio_free(a);
    tio_free(b);
}

TIO_TEST(failed_fence_query_fails_the_request) {
    struct tio_engine *e = make();
    REQUIRE(e != NULL);
    unsigned char *a = tio_aligned_alloc(4096, N);
    io_fill(a, N, 8);
    atomic_store(&g_event, EV_FAILS);
    CHECK_OK(io_write(e, 2, a, N, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 21, &g_token));
    struct tio_completion c;
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, WAIT_NS), 1);
    CHECK_EQ_U(c.tag, 21);
    CHECK_EQ_I(c.res, TIO_ECUDA);
    CHECK(strstr(tio_engine_last_error(e), "cudaEventQuery") != NULL);
    uint64_t bytes = 0;
    int32_t tier = 0;
    CHECK_RC(tio_engine_tensor_info(e, 2, &bytes, &tier), TIO_ENOTFOUND); /* nothing stored */
    tio_engine_free(e);
    tio_free(a);
}

TIO_TEST(done_event_needs_device_memory) {
    struct tio_engine *e = make();
    REQUIRE(e != NULL);
    unsigned char *a = tio_aligned_alloc(4096, N);
    io_fill(a, N, 9);
    CHECK_OK(io_write(e, 3, a, N, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 31, NULL));
    struct tio_completion c;
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, WAIT_NS), 1);
    CHECK_EQ_I(c.res, N);
    CHECK_RC(io_read(e, 3, a, N, TIO_MEM_HOST, TIO_PRIO_NORMAL, 32, NULL, &g_token), TIO_EINVAL);
    CHECK_ERR_HAS("done event");
    CHECK_OK(io_read(e, 3, a, N, TIO_MEM_HOST, TIO_PRIO_NORMAL, 33, NULL, NULL));
    CHECK_EQ_I(tio_engine_wait(e, &c, 1, 1, WAIT_NS), 1);
    CHECK_EQ_U(c.tag, 33);
    CHECK_EQ_I(c.res, N);
    CHECK(io_check(a, N, 9));
    tio_engine_free(e);
    tio_free(a);
}

int main(void) {
    io_mkdtemp(g_dir, sizeof g_dir, "fence");
    g_fake.get_device_count = fake_err_count;
    g_fake.get_error_string = fake_err_string;
    g_fake.event_query = fake_event_query;
    tio_cudart_set_api(&g_fake);
    RUN(fence_holds_the_request_until_its_event_completes);
    RUN(failed_fence_query_fails_the_request);
    RUN(done_event_needs_device_memory);
    tio_cudart_set_api(NULL);
    CHECK(rmdir(g_dir) == 0);
    return tio_test_done();
}
