/*
 * A fake CUDA runtime for CI machines without a GPU: the cudart entry points the shim
 * resolves, over host memory. "Device" allocations come from a PROT_NONE region, so any
 * access that does not go through cudaMemcpy (a pread straight into a device pointer, a
 * plain memcpy) faults or fails with EFAULT; the bytes live in a shadow mapping at the same
 * offset. Environment: FAKE_CUDA_DEVICES=n (device count, default 1), FAKE_CUDA_ERROR=e
 * (cudaGetDeviceCount fails with e, e.g. 35).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define FAKE_DEV_BYTES (UINT64_C(1) << 32) /* reserved, never touched unless used */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *dev_base, *shadow_base;
static uint64_t dev_used;
static _Atomic uint64_t memcpy_calls, host_allocs;

/* exported for tests and the fake cuFile: the shadow address of a device pointer, or NULL */
void *fake_cuda_translate(const void *p, size_t len);
uint64_t fake_cuda_memcpy_calls(void);

void *fake_cuda_translate(const void *p, size_t len) {
    const unsigned char *c = p;
    if (!dev_base || c < dev_base || c + len > dev_base + FAKE_DEV_BYTES)
        return NULL;
    return shadow_base + (c - dev_base);
}

uint64_t fake_cuda_memcpy_calls(void) {
    return atomic_load(&memcpy_calls);
}

int cudaGetDeviceCount(int *count);
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaHostAlloc(void **p, size_t n, unsigned flags);
int cudaFreeHost(void *p);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
const char *cudaGetErrorString(int err);

int cudaGetDeviceCount(int *count) {
    const char *err = getenv("FAKE_CUDA_ERROR");
    if (err && atoi(err))
        return atoi(err);
    const char *n = getenv("FAKE_CUDA_DEVICES");
    *count = n ? atoi(n) : 1;
    return 0;
}

int cudaMalloc(void **p, size_t n) {
    pthread_mutex_lock(&mu);
    if (!dev_base) {
        void *d = mmap(NULL, FAKE_DEV_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        void *s = mmap(NULL, FAKE_DEV_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (d == MAP_FAILED || s == MAP_FAILED) {
            pthread_mutex_unlock(&mu);
            return 2; /* cudaErrorMemoryAllocation */
        }
        dev_base = d;
        shadow_base = s;
    }
    uint64_t len = (n + 4095) & ~(uint64_t)4095;
    if (dev_used + len > FAKE_DEV_BYTES) {
        pthread_mutex_unlock(&mu);
        return 2;
    }
    *p = dev_base + dev_used;
    dev_used += len;
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaFree(void *p) {
    (void)p; /* bump allocator: freed at exit */
    return 0;
}

int cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    void *m = NULL;
    if (posix_memalign(&m, 4096, n ? n : 1) != 0)
        return 2;
    atomic_fetch_add(&host_allocs, 1);
    *p = m;
    return 0;
}

int cudaFreeHost(void *p) {
    free(p);
    return 0;
}

int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    atomic_fetch_add(&memcpy_calls, 1);
    void *d = dst;
    const void *s = src;
    if (kind == 1 || kind == 3) { /* to device */
        d = fake_cuda_translate(dst, n);
        if (!d)
            return 1; /* cudaErrorInvalidValue */
    }
    if (kind == 2 || kind == 3) { /* from device */
        s = fake_cuda_translate(src, n);
        if (!s)
            return 1;
    }
    if (kind == 4) { /* default: infer */
        void *td = fake_cuda_translate(dst, n);
        const void *ts = fake_cuda_translate(src, n);
        d = td ? td : dst;
        s = ts ? ts : src;
    }
    memcpy(d, s, n);
    return 0;
}

const char *cudaGetErrorString(int err) {
    switch (err) {
    case 0:
        return "no error";
    case 1:
        return "invalid argument";
    case 2:
        return "out of memory";
    case 35:
        return "CUDA driver version is insufficient for CUDA runtime version";
    default:
        return "unknown error";
    }
}
