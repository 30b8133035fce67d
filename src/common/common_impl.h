/* Private helpers shared by every module: assertions, logging macros, growth of arrays. */
#ifndef TIO_COMMON_IMPL_H
#define TIO_COMMON_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <teraio/alloc_internal.h>
#include <teraio/assert.h>
#include <teraio/log.h>
#include <teraio/status.h>

/* Always compiled, also in Release (docs/style.md). */
#define TIO_ASSERT(cond)                          \
    do {                                          \
        if (__builtin_expect(!(cond), 0))         \
            tio_abort(__FILE__, __LINE__, #cond); \
    } while (0)

/* Debug and sanitizer builds only. */
#if !defined(NDEBUG) || defined(TIO_SANITIZED)
#define TIO_DEBUG_ASSERT(cond) TIO_ASSERT(cond)
#else
#define TIO_DEBUG_ASSERT(cond) ((void)0)
#endif

/* Level is checked before the arguments are formatted. */
#define TIO_LOG(level, ...)                                \
    do {                                                   \
        if ((level) <= tio_log_get_level())                \
            tio_log_write((level), __func__, __VA_ARGS__); \
    } while (0)
#define TIO_LOG_ERROR(...) TIO_LOG(TIO_LOG_ERROR, __VA_ARGS__)
#define TIO_LOG_WARN(...)  TIO_LOG(TIO_LOG_WARN, __VA_ARGS__)
#define TIO_LOG_INFO(...)  TIO_LOG(TIO_LOG_INFO, __VA_ARGS__)
#define TIO_LOG_DEBUG(...) TIO_LOG(TIO_LOG_DEBUG, __VA_ARGS__)
#define TIO_LOG_TRACE(...) TIO_LOG(TIO_LOG_TRACE, __VA_ARGS__)

#define TIO_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TIO_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define TIO_MAX(a, b)    ((a) > (b) ? (a) : (b))

/*
 * tio_grow: make room for `need` elements of `elem` bytes in *array of capacity *cap (amortised
 * doubling). Returns 0 or TIO_ENOMEM (also on size overflow). Pointer is updated in place.
 */
int tio_grow(void **array, size_t *cap, size_t need, size_t elem);

/*
 * Versioned structs (structsize.c): structs a caller fills or receives start with
 * `uint32_t struct_size`. `min_size` is the size of the struct's first versioned release
 * (TIO_SIZE_THROUGH of its last field then, fixed for ever); `lib_size` is sizeof the struct
 * in this library.
 * - tio_struct_check: TIO_EVERSION (naming `what`) when src's struct_size is below min_size (a
 *   struct not filled by its defaults function), or above lib_size with a non-zero byte past
 *   lib_size (a field of a newer header this library would ignore); TIO_EINVAL for NULL.
 * - tio_struct_in: the check, then a copy of the bytes both know over `dst`, which holds the
 *   defaults (fields an older caller does not know keep them); dst's struct_size = lib_size.
 * - tio_struct_out: copy the library's `src` into the caller's `dst` of `size` bytes, zeroing
 *   what the library does not know; dst's struct_size = size. TIO_EVERSION below min_size.
 */
#define TIO_SIZE_THROUGH(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))
int tio_struct_check(const char *what, const void *src, size_t lib_size, size_t min_size);
int tio_struct_in(const char *what, void *dst, size_t lib_size, size_t min_size, const void *src);
int tio_struct_out(
    const char *what, void *dst, size_t size, const void *src, size_t lib_size, size_t min_size);

/* 64-bit FNV-1a style mixing hash, streaming: h = tio_hash64(h, data, len); start with
 * TIO_HASH64_SEED. Not cryptographic; used for content hashes of traces and plans. */
#define TIO_HASH64_SEED UINT64_C(0xcbf29ce484222325)
uint64_t tio_hash64(uint64_t h, const void *data, size_t len);

/* CRC32C (Castagnoli), streaming: crc = tio_crc32c(crc, data, len), start with 0. Uses the SSE4.2
 * instruction when the CPU has it, a table otherwise. */
uint32_t tio_crc32c(uint32_t crc, const void *data, size_t len);

/* Monotonic clock in seconds. */
double tio_now_s(void);

/* The CLOCK_REALTIME time `ns` nanoseconds from now (ns < 0: now), normalized: the absolute
 * deadline pthread_cond_timedwait takes. */
struct timespec;
void tio_deadline_in(int64_t ns, struct timespec *out);

/* tio_checked_add_u64 / mul: 0 on success, -1 on overflow. */
static inline int tio_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}
static inline int tio_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/*
 * Input files of the loaders (file.c). tio_input_open stats `path` and refuses, before opening
 * it for reading, anything but a regular file (a directory is -EISDIR; a FIFO, device or
 * socket TIO_EINVAL, so nothing ever blocks) and files above max_bytes (TIO_EFORMAT); it never
 * waits for a writer. tio_input_read reads exactly len bytes at off (a file that shrank is
 * TIO_EFORMAT); tio_input_read_all the whole file (its size at open) into a tio_malloc'd,
 * NUL-terminated buffer. `what` ("trace", "plan", "hw") and `path` prefix every detail and
 * must outlive the struct.
 */
struct tio_input {
    int fd;
    uint64_t size; /* bytes, at open */
    const char *what, *path;
};
int tio_input_open(const char *what, const char *path, uint64_t max_bytes, struct tio_input *in);
int tio_input_read(struct tio_input *in, uint64_t off, void *buf, size_t len);
int tio_input_read_all(struct tio_input *in, void **data, size_t *len);
void tio_input_close(struct tio_input *in);
/* tio_file_kind_name: what a file of mode `m` (st_mode) is, for messages: "a directory", "a FIFO
 * (named pipe)", "a character device", "a block device", "a socket", else "not a regular file". */
const char *tio_file_kind_name(mode_t m);
/* tio_input_looks_textual: 1 unless the first byte after leading whitespace in p[0..n) is a
 * control or non-ASCII byte (a zero-filled or binary file is not JSON: refuse it unread). */
int tio_input_looks_textual(const unsigned char *p, size_t n);

/* tio_enum_name: names[v] of a table indexed by an enum of n values; `unknown` outside [0, n). */
static inline const char *
tio_enum_name(const char *const *names, int32_t n, int32_t v, const char *unknown) {
    return v >= 0 && v < n ? names[v] : unknown;
}

/* tio_enum_parse: the value whose name in such a table is `name` (NULL matches none), or -1. */
static inline int32_t tio_enum_parse(const char *const *names, int32_t n, const char *name) {
    for (int32_t i = 0; name && i < n; i++) {
        if (strcmp(name, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

/* tio_u64_to_dec: the decimal digits of v at out (at most 20, no terminator); returns their count.
 * For bulk CSV and JSON export, where fprintf's format parsing dominated the time. */
static inline size_t tio_u64_to_dec(char *out, uint64_t v) {
    char tmp[20];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(out, tmp + i, sizeof tmp - i);
    return sizeof tmp - i;
}

/* p without its const, for a library that takes a non-const handle to read (jansson's object
 * iterators): a union, so neither -Wcast-qual nor an integer round trip is needed. */
static inline void *tio_unconst(const void *p) {
    union {
        const void *c;
        void *m;
    } u = { .c = p };
    return u.m;
}

#endif
