/* CRC32C (Castagnoli polynomial 0x82F63B78, reflected), hardware-accelerated on x86-64. */
#include <pthread.h>
#include <string.h>

#include "common/common_impl.h"

static uint32_t crc_table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            crc_table[t][i] =
                (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xffu];
        }
    }
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len) {
    pthread_once(&table_once, build_table);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
              crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
              crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xffu];
    }
    return crc;
}

/* Register arithmetic for joining CRCs of consecutive pieces: the register after a piece A then
 * a piece B of n bytes is the register after A times x^(8n), modulo the polynomial, xor the
 * register after B alone (started from 0). Reflected bit order: bit 31 is x^0. */
static uint32_t gf2_mulmod(uint32_t a, uint32_t b) {
    uint32_t prod = 0;
    for (uint32_t bit = 1u << 31; bit; bit >>= 1) {
        if (a & bit) {
            prod ^= b;
        }
        b = (b & 1u) ? (b >> 1) ^ 0x82F63B78u : b >> 1;
    }
    return prod;
}

/* x^(8n) modulo the polynomial, by squaring (x^8 is 1u << 23 in reflected order). */
static uint32_t xpow8n(uint64_t n) {
    uint32_t result = 1u << 31; /* x^0 */
    uint32_t sq = 1u << 23;     /* x^8 */
    while (n) {
        if (n & 1u) {
            result = gf2_mulmod(result, sq);
        }
        sq = gf2_mulmod(sq, sq);
        n >>= 1;
    }
    return result;
}

#if defined(__x86_64__)
/* Bytes per stream in one round of crc_hw's three interleaved streams. */
#define STREAM_BYTES ((size_t)4096)
#define ROUND_BYTES  (3 * STREAM_BYTES)

static uint32_t shift; /* x^(8 STREAM_BYTES): the same for every round */
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static void build_shift(void) {
    shift = xpow8n(STREAM_BYTES);
}

__attribute__((target("sse4.2"))) static uint64_t
crc_hw_run(uint64_t c, const unsigned char *p, size_t len) {
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) {
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    }
    return c32;
}

/* The crc32 instruction has a latency of 3 cycles and a throughput of 1: three independent
 * streams over consecutive blocks keep it busy, and their registers are joined (gf2_mulmod)
 * once per round of 3 x STREAM_BYTES. */
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t crc, const unsigned char *p, size_t len) {
    pthread_once(&shift_once, build_shift);
    uint64_t c = crc;
    while (len >= ROUND_BYTES) {
        uint64_t c1 = 0;
        uint64_t c2 = 0;
        const unsigned char *p1 = p + STREAM_BYTES;
        const unsigned char *p2 = p + 2 * STREAM_BYTES;
        for (size_t i = 0; i < STREAM_BYTES; i += 8) {
            uint64_t w0;
            uint64_t w1;
            uint64_t w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p1 + i, 8);
            memcpy(&w2, p2 + i, 8);
            c = __builtin_ia32_crc32di(c, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c = gf2_mulmod(gf2_mulmod((uint32_t)c, shift) ^ (uint32_t)c1, shift) ^ (uint32_t)c2;
        p += ROUND_BYTES;
        len -= ROUND_BYTES;
    }
    return (uint32_t)crc_hw_run(c, p, len);
}
#endif

uint32_t tio_crc32c(uint32_t crc, const void *data, size_t len) {
    crc = ~crc;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2")) {
        return ~crc_hw(crc, data, len);
    }
#endif
    return ~crc_sw(crc, data, len);
}
