/* Allocation wrappers with live counters and fault injection (teraio/alloc.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <teraio/alloc_internal.h>

static atomic_llong live_count;
static atomic_llong fail_after = -1;

static int should_fail(void) {
    long long n = atomic_load_explicit(&fail_after, memory_order_relaxed);
    if (n < 0) {
        return 0;
    }
    /* Decrement; the allocation that finds 0 fails, and injection then stops. */
    while (n >= 0) {
        if (atomic_compare_exchange_weak(&fail_after, &n, n - 1)) {
            return n == 0;
        }
    }
    return 0;
}

void *tio_malloc(size_t bytes) {
    if (should_fail()) {
        return NULL;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) {
        atomic_fetch_add(&live_count, 1);
    }
    return p;
}

void *tio_calloc(size_t n, size_t size) {
    if (should_fail()) {
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p) {
        atomic_fetch_add(&live_count, 1);
    }
    return p;
}

void *tio_realloc(void *p, size_t bytes) {
    if (!p) {
        return tio_malloc(bytes);
    }
    if (should_fail()) {
        return NULL;
    }
    return realloc(p, bytes ? bytes : 1);
}

void *tio_aligned_alloc(size_t alignment, size_t bytes) {
    if (should_fail()) {
        return NULL;
    }
    void *p = NULL;
    if (alignment < sizeof(void *)) {
        alignment = sizeof(void *);
    }
    if (posix_memalign(&p, alignment, bytes ? bytes : 1) != 0) {
        return NULL;
    }
    atomic_fetch_add(&live_count, 1);
    return p;
}

void *tio_io_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    void *p = tio_aligned_alloc(bytes >= huge ? huge : 4096, bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p && bytes >= huge) {
        /* advice only: without THP (or with it set to "never") the pages stay 4 KiB */
        (void)madvise(p, bytes & ~(huge - 1), MADV_HUGEPAGE);
    }
#endif
    return p;
}

void tio_free(void *p) {
    if (p) {
        atomic_fetch_sub(&live_count, 1);
        free(p);
    }
}

char *tio_strdup(const char *s) {
    if (!s) {
        return NULL;
    }
    size_t n = strlen(s) + 1;
    char *d = tio_malloc(n);
    if (d) {
        memcpy(d, s, n);
    }
    return d;
}

int64_t tio_alloc_live_count(void) {
    return (int64_t)atomic_load(&live_count);
}

void tio_alloc_fail_after(int64_t n) {
    atomic_store(&fail_after, (long long)n);
}
