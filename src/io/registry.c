/* The backend registry: a static array filled with #if (no constructors), version and
 * required-member checks, probing, and the options-string helper. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "io/backend.h"

static const struct tio_io_backend_ops *const registry[] = {
#if defined(TIO_HAVE_URING)
    &tio_io_backend_uring,
#endif
    &tio_io_backend_posix, &tio_io_backend_cufile, &tio_io_backend_cuda,
    &tio_io_backend_null,  &tio_io_backend_fault,
};

size_t tio_io_backend_count(void) {
    return TIO_ARRAY_LEN(registry);
}

const struct tio_io_backend_ops *tio_io_backend_at(size_t i) {
    return i < TIO_ARRAY_LEN(registry) ? registry[i] : NULL;
}

const struct tio_io_backend_ops *tio_io_backend_find(const char *name) {
    for (size_t i = 0; i < TIO_ARRAY_LEN(registry); i++) {
        if (!strcmp(registry[i]->name, name)) {
            return registry[i];
        }
    }
    return NULL;
}

int tio_io_backend_validate(const struct tio_io_backend_ops *ops) {
    if (ops->api_version != TIO_IO_BACKEND_API) {
        return tio_set_error(TIO_EINVAL, "io backend %s: api_version %u, expected %u",
                             ops->name ? ops->name : "?", ops->api_version, TIO_IO_BACKEND_API);
    }
    if (!ops->name || strlen(ops->name) >= 16 || !ops->probe || !ops->init || !ops->fini ||
        !ops->submit || !ops->reap) {
        return tio_set_error(TIO_EINVAL, "io backend %s: a required member is missing",
                             ops->name ? ops->name : "?");
    }
    if (!ops->register_bufs != !ops->unregister_bufs) {
        return tio_set_error(TIO_EINVAL, "io backend %s: register_bufs without unregister_bufs",
                             ops->name);
    }
    if (!ops->arm != !ops->park || !ops->arm != !ops->unpark) {
        return tio_set_error(TIO_EINVAL, "io backend %s: arm, park and unpark go together",
                             ops->name);
    }
    return 0;
}

int tio_engine_probe_all(struct tio_engine_backend_info *out, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < TIO_ARRAY_LEN(registry); i++, n++) {
        if (n >= max) {
            continue;
        }
        const struct tio_io_backend_ops *ops = registry[i];
        struct tio_engine_backend_info *b = &out[n];
        memset(b, 0, sizeof(*b));
        (void)snprintf(b->name, sizeof b->name, "%s", ops->name);
        b->caps = ops->caps;
        if (tio_io_backend_validate(ops) < 0) {
            (void)snprintf(b->reason, sizeof b->reason, "%s", tio_last_error());
            continue;
        }
        b->score = ops->probe(b->reason, sizeof b->reason);
        if (b->score < 0) {
            b->score = 0;
        }
        b->available = b->score > 0;
    }
#if !defined(TIO_HAVE_URING)
    if (n < max) {
        struct tio_engine_backend_info *b = &out[n];
        memset(b, 0, sizeof(*b));
        (void)snprintf(b->name, sizeof b->name, "uring");
        (void)snprintf(b->reason, sizeof b->reason,
                       "not compiled: liburing was not found at build");
    }
    n++;
#endif
    return (int)n;
}

int tio_io_option_u64(const char *options, const char *key, uint64_t *out) {
    if (!options || !*options) {
        return 0;
    }
    size_t klen = strlen(key);
    const char *p = options;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > klen && !strncmp(p, key, klen) && p[klen] == '=') {
            char buf[32];
            size_t vlen = len - klen - 1;
            if (vlen == 0 || vlen >= sizeof buf) {
                return tio_set_error(TIO_EINVAL, "backend option %s: bad value", key);
            }
            memcpy(buf, p + klen + 1, vlen);
            buf[vlen] = 0;
            char *e = NULL;
            errno = 0;
            unsigned long long v = strtoull(buf, &e, 0);
            if (errno || *e || buf[0] == '-') {
                return tio_set_error(TIO_EINVAL, "backend option %s=%s: not a number", key, buf);
            }
            *out = v;
            return 1;
        }
        p += len;
        if (*p == ',') {
            p++;
        }
    }
    return 0;
}
