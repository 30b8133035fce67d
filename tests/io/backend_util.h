/* Shared helpers of the tests/io programs that reach the backends and the cudart shim directly
 * (internal headers; header-only, each test is one executable). */
#ifndef TIO_TESTS_IO_BACKEND_UTIL_H
#define TIO_TESTS_IO_BACKEND_UTIL_H

#include "dl/cudart_shim.h"
#include "io/backend.h"

/* cudaGetDeviceCount of a test cudart table as on the development image: cudart loads, the
 * driver is missing (cudaErrorInsufficientDriver), no device is usable. */
static inline int fake_err_count(int *count) {
    (void)count;
    return 35;
}
static inline const char *fake_err_string(int err) {
    return err == 35 ? "CUDA driver version is insufficient for CUDA runtime version" : "?";
}

/* A host-memory transfer of file 0 with no registered buffer. */
static inline struct tio_io_req
io_req(uint64_t user, void *buf, uint64_t off, uint32_t len, int32_t op) {
    struct tio_io_req r = { .user = user,
                            .buf = buf,
                            .off = off,
                            .len = len,
                            .op = op,
                            .mem = TIO_MEM_HOST,
                            .file = 0,
                            .buf_index = -1 };
    return r;
}

#endif
