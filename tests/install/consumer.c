/* Compiled as C11 and as C++ against the installed headers only. */
#include <stdio.h>
#include <string.h>

#include <teraio/teraio.h>

int main(void) {
    /* the by-value defaults are inline over tio_*_defaults, at this header's size */
    struct tio_trace_params tp = tio_trace_params_default();
    struct tio_hw hw = tio_hw_default();
    if (tp.struct_size != sizeof tp || hw.struct_size != sizeof hw || hw.gpus == 0) {
        fprintf(stderr, "consumer: defaults not filled\n");
        return 1;
    }
    struct tio_trace *tr = NULL;
    uint32_t t = 0;
    if (tio_trace_new(&tp, &tr) < 0 ||
        tio_trace_add_tensor(tr, 4096, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w", &t) < 0 ||
        tio_trace_add_kernel(tr, "k", 1000, 0, NULL) < 0 ||
        tio_trace_add_use(tr, t, TIO_USE_READ) < 0 || tio_trace_finish(tr) < 0) {
        fprintf(stderr, "consumer: %s\n", tio_last_error());
        return 1;
    }
    uint64_t v = 0;
    if (tio_parse_bytes("1KiB", &v) < 0 || v != 1024) {
        return 1;
    }
    printf("teraio %s: %zu kernel(s)\n", tio_version(), tio_trace_kernel_count(tr));
    tio_trace_free(tr);
    return strcmp(tio_version(), TIO_VERSION_STRING) == 0 ? 0 : 1;
}
