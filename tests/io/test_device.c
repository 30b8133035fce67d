/* teraio/device.h: device buffers over the CUDA runtime loader, against the fake libcudart
 * (TIO_CUDART_LIB, set by cmake/modules/io.cmake; its device memory is reachable only through
 * its copies, which the test round-trips), and without any CUDA runtime (a forked child). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <teraio/device.h>
#include <teraio/status.h>

#include "tio_test.h"

/* Run before anything loads the CUDA runtime: the loader runs once per process, so the child
 * points it at a library that does not exist. */
TIO_TEST(no_runtime_is_unavailable_with_the_reason) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        char why[256] = "";
        (void)setenv("TIO_CUDART_LIB", "/nonexistent/libcudart.so", 1);
        bad |= tio_device_usable(why, sizeof why) != 0;
        bad |= strstr(why, "/nonexistent/libcudart.so") == NULL;
        void *d = (void *)why;
        bad |= tio_device_alloc(4096, &d) != TIO_EUNAVAIL;
        bad |= d != NULL;
        bad |= strstr(tio_last_error(), "no CUDA device") == NULL;
        bad |= tio_device_copy_from_host(why, why, 1) != TIO_EUNAVAIL;
        bad |= tio_device_copy_to_host(why, why, 1) != TIO_EUNAVAIL;
        _exit(bad);
    }
    int status = -1;
    CHECK_EQ_I(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TIO_TEST(bad_arguments) {
    void *d = NULL;
    CHECK_RC(tio_device_alloc(0, &d), TIO_EINVAL);
    CHECK_ERR_HAS("bytes must be at least 1");
    CHECK_RC(tio_device_alloc(4096, NULL), TIO_EINVAL);
    CHECK_ERR_HAS("out is NULL");
    tio_device_free(NULL); /* a no-op */
}

TIO_TEST(alloc_copy_free_on_the_fake) {
    char why[256] = "";
    CHECK(tio_device_usable(why, sizeof why));
    enum { N = 1 << 20 };
    unsigned char *host = malloc(N);
    REQUIRE(host != NULL);
    for (size_t i = 0; i < N; i++) {
        host[i] = (unsigned char)(i * 131 + 7);
    }
    unsigned char *back = calloc(N, 1);
    void *d = NULL;
    CHECK(back != NULL);
    CHECK_OK(tio_device_alloc(N, &d));
    CHECK(d != NULL);
    if (d && back) {
        CHECK_OK(tio_device_copy_from_host(d, host, N));
        CHECK_OK(tio_device_copy_to_host(back, d, N));
        CHECK(memcmp(back, host, N) == 0);
        /* bytes outside a live allocation: the fake answers cudaErrorInvalidValue */
        CHECK_RC(tio_device_copy_to_host(back, (char *)d + N, N), TIO_ECUDA);
        CHECK_ERR_HAS("cudaMemcpy of 1048576 bytes");
    }
    tio_device_free(d);
    free(back);
    free(host);
}

int main(void) {
    /* the fake built with the tests (ctest sets the same path) */
    (void)setenv("TIO_CUDART_LIB", TIO_FAKE_CUDART_LIB, 0);
    RUN(no_runtime_is_unavailable_with_the_reason);
    RUN(bad_arguments);
    RUN(alloc_copy_free_on_the_fake);
    return tio_test_done();
}
