/* Small shared helpers: array growth, content hash, clocks. */
#include <string.h>
#include <time.h>

#include "common/common_impl.h"

int tio_grow(void **array, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) {
        return 0;
    }
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) {
            return TIO_ENOMEM;
        }
        ncap *= 2;
    }
    size_t bytes;
    if (__builtin_mul_overflow(ncap, elem, &bytes)) {
        return TIO_ENOMEM;
    }
    void *p = tio_realloc(*array, bytes);
    if (!p) {
        return TIO_ENOMEM;
    }
    *array = p;
    *cap = ncap;
    return 0;
}

uint64_t tio_hash64(uint64_t h, const void *data, size_t len) {
    /* FNV-1a over 8-byte words with a final avalanche per word: fast and well mixed enough
     * for telling traces apart (not for adversaries). */
    const unsigned char *p = data;
    const uint64_t prime = UINT64_C(0x100000001b3);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h ^= w;
        h *= prime;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    while (len--) {
        h ^= *p++;
        h *= prime;
    }
    return h;
}

double tio_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tio_deadline_in(int64_t ns, struct timespec *out) {
    clock_gettime(CLOCK_REALTIME, out);
    if (ns >= 0) {
        int64_t nsec = out->tv_nsec + ns % 1000000000;
        out->tv_sec += (time_t)(ns / 1000000000 + nsec / 1000000000);
        out->tv_nsec = (long)(nsec % 1000000000);
    }
}
