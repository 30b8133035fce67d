/*
 * teraio/device.h - CUDA device buffers through the library's own CUDA runtime loader, for
 * tools and tests that hand device memory to the engine (io.h, TIO_MEM_DEVICE) without
 * linking CUDA themselves.
 *
 * The CUDA runtime is never linked: the library loads it with dlopen on first use
 * (TIO_CUDART_LIB if set, else libcudart.so.13/.12/.11.0). Without it, or without a device,
 * every call reports TIO_EUNAVAIL with the reason.
 *
 *     char why[256];
 *     if (!tio_device_usable(why, sizeof why)) { printf("no CUDA: %s\n", why); ... }
 *     void *d;
 *     if (tio_device_alloc(bytes, &d) == 0) {
 *         if (tio_device_copy_from_host(d, host, bytes) < 0) ...
 *         if (tio_device_copy_to_host(host, d, bytes) < 0) ...
 *         tio_device_free(d);
 *     }
 *
 * Thread-safe (the loader runs once).
 */
#ifndef TERAIO_DEVICE_H
#define TERAIO_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tio_device_usable: 1 if the CUDA runtime loads and at least one device answers; else 0 and
 * the reason in why (NUL-terminated, truncated to len; why may be NULL when len is 0). */
int tio_device_usable(char *why, size_t len);

/* tio_device_alloc: `bytes` (> 0) of device memory (cudaMalloc). 0 and *out; TIO_EINVAL (bytes
 * 0, out NULL), TIO_EUNAVAIL (no CUDA runtime or device), TIO_ECUDA (cudaMalloc failed); the
 * detail is in tio_last_error(). */
TIO_MUST_CHECK int tio_device_alloc(uint64_t bytes, void **out);

/* tio_device_free: give back memory from tio_device_alloc. NULL is a no-op. */
void tio_device_free(void *p);

/* tio_device_copy_from_host / _to_host: copy `bytes` between host memory and device memory,
 * synchronously (cudaMemcpy). 0, TIO_EUNAVAIL, TIO_ECUDA (detail names the CUDA error). */
TIO_MUST_CHECK int tio_device_copy_from_host(void *dst, const void *src, uint64_t bytes);
TIO_MUST_CHECK int tio_device_copy_to_host(void *dst, const void *src, uint64_t bytes);

#ifdef __cplusplus
}
#endif
#endif
