/* The CUDA runtime through dlopen (see cudart_shim.h). */
#include "dl/cudart_shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "dl/dl_impl.h"

static struct tio_cudart_api loaded;
static const char *const names[] = { "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                     "libcudart.so" };
static const struct tio_dl_sym syms[] = {
    { "cudaGetDeviceCount", &loaded.get_device_count },
    { "cudaMalloc", &loaded.malloc_device },
    { "cudaFree", &loaded.free_device },
    { "cudaHostAlloc", &loaded.host_alloc },
    { "cudaFreeHost", &loaded.free_host },
    { "cudaMemcpy", &loaded.memcpy },
    { "cudaGetErrorString", &loaded.get_error_string },
    { "cudaStreamCreateWithFlags", &loaded.stream_create },
    { "cudaStreamDestroy", &loaded.stream_destroy },
    { "cudaStreamSynchronize", &loaded.stream_synchronize },
    { "cudaStreamWaitEvent", &loaded.stream_wait_event },
    { "cudaEventCreateWithFlags", &loaded.event_create },
    { "cudaEventDestroy", &loaded.event_destroy },
    { "cudaEventRecord", &loaded.event_record },
    { "cudaEventQuery", &loaded.event_query },
    { "cudaEventSynchronize", &loaded.event_synchronize },
    { "cudaMemcpyAsync", &loaded.memcpy_async },
    { "cudaSetDevice", &loaded.set_device },
    { "cudaGetDevice", &loaded.get_device },
};
TIO_DL_SHIM_DEFINE(tio_cudart, tio_cudart_api, "cudart", "TIO_CUDART_LIB", names, syms, &loaded)

int tio_cudart_usable(char *reason, size_t len) {
    const struct tio_cudart_api *cu = tio_cudart();
    if (!cu) {
        (void)snprintf(reason, len, "%s", tio_cudart_reason());
        return 0;
    }
    int count = 0;
    int err = cu->get_device_count(&count);
    if (err != 0) {
        const char *s = cu->get_error_string ? cu->get_error_string(err) : NULL;
        (void)snprintf(reason, len, "cudaGetDeviceCount: error %d (%s)", err, s ? s : "?");
        return 0;
    }
    if (count <= 0) {
        (void)snprintf(reason, len, "cudaGetDeviceCount: no CUDA device");
        return 0;
    }
    (void)snprintf(reason, len, "%d CUDA device(s), %s", count, tio_cudart_reason());
    return 1;
}
