/*
 * Backend probes: every backend reports availability with a reason; posix is always there;
 * a cudart that loads but has no driver (error 35) or no device is "unavailable", never just
 * "the library loaded" (docs/style.md, vendor libraries); the registry rejects malformed backends.
 */
#include "../tio_test.h"
#include "backend_util.h"
#include "common/common_impl.h"

static int fake_zero_count(int *count) {
    *count = 0;
    return 0;
}

TIO_TEST(probe_all_reports_every_backend) {
    struct tio_engine_backend_info b[16];
    int n = tio_engine_probe_all(b, 16);
    CHECK(n >= 6);
    int seen_posix = 0, seen_uring = 0, seen_cuda = 0, seen_cufile = 0;
    for (int i = 0; i < n && i < 16; i++) {
        printf("  %-8s available %d score %3d  %s\n", b[i].name, b[i].available, b[i].score,
               b[i].reason);
        CHECK(b[i].reason[0] != 0);
        CHECK_EQ_I(b[i].available, b[i].score > 0);
        if (!strcmp(b[i].name, "posix")) {
            seen_posix = 1;
            CHECK(b[i].available);
        }
        seen_uring |= !strcmp(b[i].name, "uring");
        seen_cuda |= !strcmp(b[i].name, "cuda");
        seen_cufile |= !strcmp(b[i].name, "cufile");
    }
    CHECK(seen_posix && seen_uring && seen_cuda && seen_cufile);
    CHECK_EQ_I(tio_engine_probe_all(b, 2), n); /* count even when truncated */
}

TIO_TEST(cudart_error_35_is_unavailable) {
    struct tio_cudart_api fake = { 0 };
    fake.get_device_count = fake_err_count;
    fake.get_error_string = fake_err_string;
    tio_cudart_set_api(&fake);
    char why[256];
    CHECK_EQ_I(tio_cudart_usable(why, sizeof why), 0);
    CHECK(strstr(why, "error 35") != NULL);
    CHECK_EQ_I(tio_io_backend_cuda.probe(why, sizeof why), 0);
    CHECK_EQ_I(tio_io_backend_cufile.probe(why, sizeof why), 0);
    fake.get_device_count = fake_zero_count;
    CHECK_EQ_I(tio_cudart_usable(why, sizeof why), 0);
    CHECK(strstr(why, "no CUDA device") != NULL);
    tio_cudart_set_api(NULL);
}

TIO_TEST(real_cudart_on_this_machine) {
    /* whatever this machine has, the probe must be coherent: available only with a device */
    char why[256];
    int usable = tio_cudart_usable(why, sizeof why);
    printf("  cudart: %s: %s\n", usable ? "usable" : "unusable", why);
    if (!usable)
        CHECK(strstr(why, "error") || strstr(why, "not loadable") || strstr(why, "no CUDA") ||
              strstr(why, "missing"));
}

static int dummy_probe(char *r, size_t n) {
    (void)r;
    (void)n;
    return 1;
}

TIO_TEST(registry_validates) {
    for (size_t i = 0; i < tio_io_backend_count(); i++)
        CHECK_OK(tio_io_backend_validate(tio_io_backend_at(i)));
    struct tio_io_backend_ops bad = tio_io_backend_posix;
    bad.api_version = 99;
    CHECK_RC(tio_io_backend_validate(&bad), TIO_EINVAL);
    CHECK_ERR_HAS("api_version");
    bad = tio_io_backend_posix;
    bad.reap = NULL;
    CHECK_RC(tio_io_backend_validate(&bad), TIO_EINVAL);
    bad = tio_io_backend_posix;
    bad.probe = dummy_probe;
    CHECK_OK(tio_io_backend_validate(&bad));
    CHECK(tio_io_backend_find("posix") == &tio_io_backend_posix);
    CHECK(tio_io_backend_find("nosuch") == NULL);
}

TIO_TEST(options_parser) {
    uint64_t v = 0;
    CHECK_EQ_I(tio_io_option_u64("a=1,bb=22,c=0x10", "bb", &v), 1);
    CHECK_EQ_U(v, 22);
    CHECK_EQ_I(tio_io_option_u64("a=1,bb=22,c=0x10", "c", &v), 1);
    CHECK_EQ_U(v, 16);
    CHECK_EQ_I(tio_io_option_u64("a=1,bb=22", "b", &v), 0);
    CHECK_EQ_I(tio_io_option_u64(NULL, "b", &v), 0);
    CHECK_RC(tio_io_option_u64("a=-1", "a", &v), TIO_EINVAL);
    CHECK_RC(tio_io_option_u64("a=", "a", &v), TIO_EINVAL);
}

int main(void) {
    RUN(probe_all_reports_every_backend);
    RUN(cudart_error_35_is_unavailable);
    RUN(real_cudart_on_this_machine);
    RUN(registry_validates);
    RUN(options_parser);
    return tio_test_done();
}
