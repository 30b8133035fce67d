/*
 * Versioned structs (docs/style.md, "API shape"): the structs a caller fills or receives start
 * with `uint32_t struct_size`, the size of the struct as the caller's header declares it. The
 * library reads and writes only the bytes both sides know, so that a field added at the end
 * never breaks a caller built against another version of the headers.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <teraio/version.h>

#include "common/common_impl.h"

static uint32_t size_of(const void *p) {
    uint32_t size;
    memcpy(&size, p, sizeof size);
    return size;
}

int tio_struct_check(const char *what, const void *src, size_t lib_size, size_t min_size) {
    if (!src) {
        return tio_set_error(TIO_EINVAL, "%s: NULL", what);
    }
    size_t size = size_of(src);
    if (size < min_size) {
        return tio_set_error(TIO_EVERSION,
                             "%s: struct_size %zu, at least %zu expected (fill it with its "
                             "_default or _defaults function before setting fields)",
                             what, size, min_size);
    }
    const unsigned char *b = src;
    for (size_t i = lib_size; i < size; i++) {
        if (b[i]) {
            return tio_set_error(TIO_EVERSION,
                                 "%s: struct_size %zu sets a field past the %zu bytes this "
                                 "library (teraio %s) knows; it needs a newer libteraio",
                                 what, size, lib_size, tio_version());
        }
    }
    return 0;
}

int tio_struct_in(const char *what, void *dst, size_t lib_size, size_t min_size, const void *src) {
    int rc = tio_struct_check(what, src, lib_size, min_size);
    if (rc < 0) {
        return rc;
    }
    size_t size = size_of(src);
    memcpy(dst, src, TIO_MIN(size, lib_size));
    uint32_t lib = (uint32_t)lib_size;
    memcpy(dst, &lib, sizeof lib);
    return 0;
}

int tio_struct_out(
    const char *what, void *dst, size_t size, const void *src, size_t lib_size, size_t min_size) {
    if (!dst) {
        return tio_set_error(TIO_EINVAL, "%s: NULL", what);
    }
    if (size < min_size || size > UINT32_MAX) {
        return tio_set_error(TIO_EVERSION, "%s: size %zu, at least %zu expected", what, size,
                             min_size);
    }
    size_t n = TIO_MIN(size, lib_size);
    memcpy(dst, src, n);
    if (size > n) {
        memset((unsigned char *)dst + n, 0, size - n); /* fields of a newer header: unset */
    }
    uint32_t got = (uint32_t)size;
    memcpy(dst, &got, sizeof got);
    return 0;
}
