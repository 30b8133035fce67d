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
    { "cudaGetDeviceCount", &loaded.get_device_count, 0 },
    { "cudaMalloc", &loaded.malloc_device, 0 },
    { "cudaFree", &loaded.free_device, 0 },
    { "cudaHostAlloc", &loaded.host_alloc, 0 },
    { "cudaFreeHost", &loaded.free_host, 0 },
    { "cudaMemcpy", &loaded.memcpy, 0 },
    { "cudaGetErrorString", &loaded.get_error_string, 0 },
    { "cudaStreamCreateWithFlags", &loaded.stream_create, 0 },
    { "cudaStreamDestroy", &loaded.stream_destroy, 0 },
    { "cudaStreamSynchronize", &loaded.stream_synchronize, 0 },
    { "cudaStreamWaitEvent", &loaded.stream_wait_event, 0 },
    { "cudaEventCreateWithFlags", &loaded.event_create, 0 },
    { "cudaEventDestroy", &loaded.event_destroy, 0 },
    { "cudaEventRecord", &loaded.event_record, 0 },
    { "cudaEventQuery", &loaded.event_query, 0 },
    { "cudaEventSynchronize", &loaded.event_synchronize, 0 },
    { "cudaMemcpyAsync", &loaded.memcpy_async, 0 },
    { "cudaSetDevice", &loaded.set_device, 0 },
    { "cudaGetDevice", &loaded.get_device, 0 },
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
