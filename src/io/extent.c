/* First-fit extent allocator with coalescing (see extent.h). The free list is a sorted
 * array: swap files see few, large extents, so O(n) inserts are cheap in practice. */
#include "io/extent.h"

#include <errno.h>
#include <string.h>

#include "common/common_impl.h"

void tio_extents_init(struct tio_extents *x, uint64_t unit) {
    memset(x, 0, sizeof(*x));
    x->unit = unit;
}

void tio_extents_fini(struct tio_extents *x) {
    tio_free(x->free_list);
    memset(x, 0, sizeof(*x));
}

uint64_t tio_extents_round(const struct tio_extents *x, uint64_t len) {
    return (len + x->unit - 1) & ~(x->unit - 1);
}

/* Insert the free range [off, off+len) at sorted position, merging with neighbours. */
static int insert_free(struct tio_extents *x, uint64_t off, uint64_t len) {
    size_t i = 0;
    while (i < x->n && x->free_list[i].off < off) {
        i++;
    }
    /* overlap checks: a double free or a bad range */
    if (i > 0 && x->free_list[i - 1].off + x->free_list[i - 1].len > off) {
        return tio_set_error(TIO_EINVAL, "extent free [%llu,+%llu) overlaps free space",
                             (unsigned long long)off, (unsigned long long)len);
    }
    if (i < x->n && off + len > x->free_list[i].off) {
        return tio_set_error(TIO_EINVAL, "extent free [%llu,+%llu) overlaps free space",
                             (unsigned long long)off, (unsigned long long)len);
    }
    int merge_prev = i > 0 && x->free_list[i - 1].off + x->free_list[i - 1].len == off;
    int merge_next = i < x->n && off + len == x->free_list[i].off;
    if (merge_prev && merge_next) {
        x->free_list[i - 1].len += len + x->free_list[i].len;
        memmove(&x->free_list[i], &x->free_list[i + 1], (x->n - i - 1) * sizeof(*x->free_list));
        x->n--;
    } else if (merge_prev) {
        x->free_list[i - 1].len += len;
    } else if (merge_next) {
        x->free_list[i].off = off;
        x->free_list[i].len += len;
    } else {
        void *arr = x->free_list;
        if (tio_grow(&arr, &x->cap, x->n + 1, sizeof(*x->free_list)) < 0) {
            return TIO_ENOMEM;
        }
        x->free_list = arr;
        memmove(&x->free_list[i + 1], &x->free_list[i], (x->n - i) * sizeof(*x->free_list));
        x->free_list[i] = (struct tio_extent){ off, len };
        x->n++;
    }
    return 0;
}

int tio_extents_add(struct tio_extents *x, uint64_t off, uint64_t len) {
    if (!len) {
        return 0;
    }
    int rc = insert_free(x, off, len);
    if (rc == 0) {
        x->capacity += len;
    }
    return rc;
}

int tio_extents_alloc(struct tio_extents *x, uint64_t len, uint64_t *off) {
    if (!len) {
        return TIO_EINVAL;
    }
    len = tio_extents_round(x, len);
    for (size_t i = 0; i < x->n; i++) {
        if (x->free_list[i].len < len) {
            continue;
        }
        *off = x->free_list[i].off;
        x->free_list[i].off += len;
        x->free_list[i].len -= len;
        if (!x->free_list[i].len) {
            memmove(&x->free_list[i], &x->free_list[i + 1], (x->n - i - 1) * sizeof(*x->free_list));
            x->n--;
        }
        x->used += len;
        return 0;
    }
    return -ENOSPC;
}

int tio_extents_free(struct tio_extents *x, uint64_t off, uint64_t len) {
    len = tio_extents_round(x, len);
    int rc = insert_free(x, off, len);
    if (rc == 0) {
        x->used -= len;
    }
    return rc;
}

uint64_t tio_extents_largest(const struct tio_extents *x) {
    uint64_t m = 0;
    for (size_t i = 0; i < x->n; i++) {
        m = TIO_MAX(m, x->free_list[i].len);
    }
    return m;
}
