/* teraio/device.h: device buffers for tools and tests, over the CUDA runtime shim. */
#include <stdio.h>

#include <teraio/device.h>

#include "common/common_impl.h"
#include "dl/cudart_shim.h"

int tio_device_usable(char *why, size_t len) {
    char reason[256];
    const struct tio_cudart_api *cu = tio_cudart();
    int ok = cu && tio_cudart_usable(reason, sizeof reason);
    if (!ok && why && len) {
        (void)snprintf(why, len, "%s", cu ? reason : tio_cudart_reason());
    }
    return ok;
}

/* The runtime's table if a device answers; else NULL with TIO_EUNAVAIL recorded. */
static const struct tio_cudart_api *usable_api(const char *call) {
    char why[256];
    if (!tio_device_usable(why, sizeof why)) {
        (void)tio_set_error(TIO_EUNAVAIL, "%s: no CUDA device: %s", call, why);
        return NULL;
    }
    return tio_cudart();
}

int tio_device_alloc(uint64_t bytes, void **out) {
    if (!out || bytes == 0 || bytes > SIZE_MAX) {
        return tio_set_error(TIO_EINVAL, "tio_device_alloc: %s",
                             out ? "bytes must be at least 1" : "out is NULL");
    }
    *out = NULL;
    const struct tio_cudart_api *cu = usable_api("tio_device_alloc");
    if (!cu) {
        return TIO_EUNAVAIL;
    }
    int err = cu->malloc_device(out, (size_t)bytes);
    if (err) {
        *out = NULL;
        return tio_set_error(TIO_ECUDA, "cudaMalloc of %llu bytes: %s", (unsigned long long)bytes,
                             cu->get_error_string(err));
    }
    return 0;
}

void tio_device_free(void *p) {
    const struct tio_cudart_api *cu = p ? tio_cudart() : NULL;
    if (cu) {
        (void)cu->free_device(p);
    }
}

/* A synchronous cudaMemcpy of `kind`; `call` names the public function in errors. */
static int copy(const char *call, void *dst, const void *src, uint64_t bytes, int kind) {
    const struct tio_cudart_api *cu = tio_cudart();
    if (!cu) {
        return tio_set_error(TIO_EUNAVAIL, "%s: no CUDA runtime: %s", call, tio_cudart_reason());
    }
    int err = cu->memcpy(dst, src, (size_t)bytes, kind);
    if (err) {
        return tio_set_error(TIO_ECUDA, "%s: cudaMemcpy of %llu bytes: %s", call,
                             (unsigned long long)bytes, cu->get_error_string(err));
    }
    return 0;
}

int tio_device_copy_from_host(void *dst, const void *src, uint64_t bytes) {
    return copy("tio_device_copy_from_host", dst, src, bytes, TIO_CUDA_MEMCPY_H2D);
}

int tio_device_copy_to_host(void *dst, const void *src, uint64_t bytes) {
    return copy("tio_device_copy_to_host", dst, src, bytes, TIO_CUDA_MEMCPY_D2H);
}
