/* Liveness of a trace: uses per tensor, first/last use, next use, resident curve and inactive
 * periods (analysis/liveness.h). Every function is linear in n_uses + n_kernels + n_tensors. */
#include "analysis/liveness.h"

#include <string.h>

#include "common/common_impl.h"

struct tio_liveness_csr tio_liveness_csr_of(const struct tio_trace_view *v, const uint8_t *skip) {
    return (struct tio_liveness_csr){ .n_kernels = v->n_kernels,
                                      .n_tensors = v->n_tensors,
                                      .use_offset = v->kernel_use_offset,
                                      .use_tensor = v->use_tensor,
                                      .skip = skip };
}

void tio_liveness_first_last(const struct tio_liveness_csr *c, uint64_t *first, uint64_t *last) {
    for (size_t t = 0; t < c->n_tensors; t++) {
        first[t] = TIO_NEVER_USED;
        last[t] = TIO_NEVER_USED;
    }
    for (size_t k = 0; k < c->n_kernels; k++) {
        if (c->skip && c->skip[k]) {
            continue;
        }
        for (uint64_t u = c->use_offset[k]; u < c->use_offset[k + 1]; u++) {
            uint32_t t = c->use_tensor[u];
            if (first[t] == TIO_NEVER_USED) {
                first[t] = k;
            }
            last[t] = k;
        }
    }
}

void tio_liveness_next_use(const struct tio_liveness_csr *c, uint64_t *next, uint64_t *first) {
    /* Backwards, with first[t] the earliest counted use seen so far: the next use of every use
     * of kernel k is read before k itself becomes that earliest use. */
    for (size_t t = 0; t < c->n_tensors; t++) {
        first[t] = TIO_NEVER_USED;
    }
    for (size_t k = c->n_kernels; k-- > 0;) {
        const uint64_t u0 = c->use_offset[k], u1 = c->use_offset[k + 1];
        for (uint64_t u = u0; u < u1; u++) {
            next[u] = first[c->use_tensor[u]];
        }
        if (!(c->skip && c->skip[k])) {
            for (uint64_t u = u0; u < u1; u++) {
                first[c->use_tensor[u]] = k;
            }
        }
    }
}

void tio_liveness_resident(const struct tio_trace_view *v,
                           const uint64_t *first,
                           const uint64_t *last,
                           const uint8_t *exclude,
                           uint64_t *out) {
    /* A difference array in modular arithmetic: every partial sum is a true resident size, which
     * fits in 64 bits because the trace's total bytes do. */
    const size_t n_kernels = v->n_kernels;
    uint64_t global = 0;
    memset(out, 0, n_kernels * sizeof *out);
    for (size_t t = 0; t < v->n_tensors; t++) {
        if (exclude && exclude[t]) {
            continue;
        }
        const uint64_t bytes = v->tensor_bytes[t];
        if (v->tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            global += bytes;
            continue;
        }
        if (first[t] == TIO_NEVER_USED) {
            continue;
        }
        out[first[t]] += bytes;
        if (last[t] + 1 < n_kernels) {
            out[last[t] + 1] -= bytes;
        }
    }
    uint64_t run = global;
    for (size_t k = 0; k < n_kernels; k++) {
        run += out[k];
        out[k] = run;
    }
}

void tio_liveness_free(struct tio_liveness *lv) {
    if (!lv) {
        return;
    }
    tio_free(lv->use_off); /* the block of every array (tio_liveness_build) */
    memset(lv, 0, sizeof *lv);
}

/* n elements of `elem` bytes, at least one (pointers are never NULL for empty traces); NULL on
 * overflow or failure. */
static void *alloc_array(size_t n, size_t elem, int zero) {
    size_t bytes;
    if (__builtin_mul_overflow(n ? n : 1, elem, &bytes)) {
        return NULL;
    }
    return zero ? tio_calloc(1, bytes) : tio_malloc(bytes);
}

int tio_liveness_trace_view(const struct tio_trace *trace,
                            const char *who,
                            struct tio_trace_view *v) {
    if (!tio_trace_is_finished(trace)) {
        (void)tio_set_error(TIO_ESTATE,
                            "%s: the trace is not finished (call tio_trace_finish first)", who);
        return TIO_ESTATE;
    }
    tio_trace_get_view(trace, v);
    return 0;
}

int tio_liveness_build(const struct tio_trace_view *v, struct tio_liveness *lv) {
    memset(lv, 0, sizeof *lv);
    const size_t n = v->n_kernels, nt = v->n_tensors;
    lv->n_kernels = n;
    lv->n_tensors = nt;
    /* One zeroed block: the 8-byte arrays (use_off [nt + 1], first_use, last_use [nt], resident,
     * active [n]), then use_kernel (4 bytes) and use_mode (1 byte) [n_uses]. */
    _Static_assert(sizeof(size_t) == sizeof(uint64_t), "the arrays share one block");
    const size_t wide = (nt + 1) + 2 * nt + 2 * n;
    uint64_t *block = alloc_array(wide + (v->n_uses * 5 + 7) / 8, sizeof(uint64_t), 1);
    if (!block) {
        return TIO_ENOMEM;
    }
    lv->use_off = (size_t *)(void *)block;
    lv->first_use = block + nt + 1;
    lv->last_use = block + 2 * nt + 1;
    lv->resident = block + 3 * nt + 1;
    lv->active = block + 3 * nt + 1 + n;
    lv->use_kernel = (uint32_t *)(void *)(block + wide);
    lv->use_mode = (uint8_t *)(lv->use_kernel + v->n_uses);
    /* Transpose the kernel -> use CSR: count per tensor, prefix sums, scatter the kernels in
     * order (so each tensor's list comes out ascending); the scatter advances each offset to the
     * next tensor's start, so the offsets are shifted back by one afterwards. */
    size_t *off = lv->use_off;
    for (size_t u = 0; u < v->n_uses; u++) {
        off[v->use_tensor[u] + 1]++;
    }
    for (size_t t = 0; t < nt; t++) {
        off[t + 1] += off[t];
    }
    for (size_t k = 0; k < n; k++) {
        for (uint64_t u = v->kernel_use_offset[k]; u < v->kernel_use_offset[k + 1]; u++) {
            uint32_t t = v->use_tensor[u];
            lv->use_kernel[off[t]] = (uint32_t)k;
            lv->use_mode[off[t]] = v->use_mode[u];
            off[t]++;
            lv->active[k] += v->tensor_bytes[t];
        }
    }
    for (size_t t = nt; t > 0; t--) {
        off[t] = off[t - 1];
    }
    off[0] = 0;
    const struct tio_liveness_csr csr = tio_liveness_csr_of(v, NULL);
    tio_liveness_first_last(&csr, lv->first_use, lv->last_use);
    tio_liveness_resident(v, lv->first_use, lv->last_use, NULL, lv->resident);
    return 0;
}

void tio_liveness_iter_init(struct tio_liveness_iter *it,
                            const struct tio_liveness *lv,
                            uint32_t t,
                            int global) {
    *it = (struct tio_liveness_iter){ .uses = lv->use_kernel + lv->use_off[t],
                                      .m = lv->use_off[t + 1] - lv->use_off[t],
                                      .n = lv->n_kernels,
                                      .i = 0,
                                      .global = global };
}

int tio_liveness_iter_next(struct tio_liveness_iter *it, struct tio_liveness_period *p) {
    while (it->i + 1 < it->m) {
        uint64_t ps = (uint64_t)it->uses[it->i] + 1, pe = it->uses[it->i + 1];
        it->i++;
        if (pe > ps) {
            *p = (struct tio_liveness_period){
                .start = ps, .end = pe, .flags = 0, .use_index = (uint32_t)(it->i - 1)
            };
            return 1;
        }
    }
    if (it->global) {
        it->global = 0;
        if (it->m == 0) {
            *p = (struct tio_liveness_period){
                .start = 0, .end = it->n, .flags = TIO_PERIOD_UNUSED, .use_index = 0
            };
        } else {
            /* After the last use to the first use of the next iteration. When the first use is
             * kernel 0 the period ends exactly at N: it still ends in the next iteration. */
            *p = (struct tio_liveness_period){ .start = (uint64_t)it->uses[it->m - 1] + 1,
                                               .end = (uint64_t)it->uses[0] + it->n,
                                               .flags = TIO_PERIOD_WRAPS,
                                               .use_index = (uint32_t)(it->m - 1) };
        }
        if (p->end > p->start) {
            return 1;
        }
    }
    return 0;
}

int tio_analysis_liveness(const struct tio_trace *trace,
                          const char *skip_kernel,
                          const uint8_t *exclude,
                          uint64_t *first,
                          uint64_t *last,
                          uint64_t *resident) {
    if (!trace || !first || !last) {
        return tio_set_error(TIO_EINVAL, "liveness: NULL trace, first or last");
    }
    struct tio_trace_view v;
    int rc = tio_liveness_trace_view(trace, "liveness", &v);
    if (rc < 0) {
        return rc;
    }
    uint8_t *skip = NULL;
    if (skip_kernel) {
        skip = alloc_array(v.n_kernels, 1, 0);
        if (!skip) {
            return tio_set_error(TIO_ENOMEM, "liveness: out of memory (%zu kernels)", v.n_kernels);
        }
        for (size_t k = 0; k < v.n_kernels; k++) {
            const char *name = tio_trace_kernel_name(trace, (uint32_t)k);
            skip[k] = name && strcmp(name, skip_kernel) == 0;
        }
    }
    const struct tio_liveness_csr csr = tio_liveness_csr_of(&v, skip);
    tio_liveness_first_last(&csr, first, last);
    if (resident) {
        tio_liveness_resident(&v, first, last, exclude, resident);
    }
    tio_free(skip);
    return 0;
}
