/* libFuzzer target: the plan readers (binary and JSON) on arbitrary bytes. A plan that loads
 * must save and load again to the same moves. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <teraio/alloc.h>
#include <teraio/plan.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct tio_plan *p = NULL;
    if (tio_plan_load_mem(data, size, TIO_PLAN_FORMAT_AUTO, &p) != 0) {
        return 0;
    }
    char path[] = "/tmp/fuzz_plan_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        (void)close(fd);
        struct tio_plan *q = NULL;
        if (tio_plan_save(p, path, TIO_PLAN_FORMAT_BINARY) == 0 &&
            tio_plan_load(path, TIO_PLAN_FORMAT_BINARY, &q) == 0) {
            size_t na, nb;
            const struct tio_move *a = tio_plan_moves(p, &na), *b = tio_plan_moves(q, &nb);
            if (na != nb || (na && memcmp(a, b, na * sizeof *a) != 0)) {
                abort();
            }
        }
        tio_plan_free(q);
        (void)remove(path);
    }
    tio_plan_free(p);
    return 0;
}
