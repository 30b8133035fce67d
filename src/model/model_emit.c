/* The trace generator's emitters: tensors, kernels (timed by the roofline model) and their
 * uses; matmuls, elementwise ops, weight gradients and communication. See model_gen_impl.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <teraio/model.h>

#include "common/common_impl.h"
#include "model/model_gen_impl.h"
#include "model/model_impl.h"

/* ---- tensors and kernels ---------------------------------------------------------------- */

uint32_t mg_ten(struct gen *g, uint64_t bytes, int32_t kind, uint32_t flags, const char *nm) {
    if (g->rc < 0) {
        return 0;
    }
    if (g->nt == g->cap) {
        size_t c1 = g->cap, c4 = g->cap, c5 = g->cap;
        if (tio_grow((void **)&g->tbytes, &c1, g->nt + 1, sizeof *g->tbytes) < 0 ||
            tio_grow((void **)&g->tglobal, &c4, g->nt + 1, 1) < 0 ||
            tio_grow((void **)&g->twritten, &c5, g->nt + 1, 1) < 0) {
            g->rc = tio_set_error(TIO_ENOMEM, "model: out of memory for %zu tensors", g->nt + 1);
            return 0;
        }
        g->cap = TIO_MIN(c1, TIO_MIN(c4, c5));
    }
    uint32_t id = (uint32_t)g->nt++;
    g->tbytes[id] = bytes ? bytes : 1;
    g->tglobal[id] = (flags & TIO_TENSOR_GLOBAL) != 0;
    g->twritten[id] = 0;
    if (g->tr) {
        char name[96];
        (void)snprintf(name, sizeof name, "%s%s%s", g->scope, g->scope[0] ? "." : "", nm);
        uint32_t tid = 0;
        int rc = tio_trace_add_tensor(g->tr, g->tbytes[id], kind, flags, name, &tid);
        if (rc < 0) {
            g->rc = rc;
        }
        TIO_DEBUG_ASSERT(rc < 0 || tid == id);
    }
    return id;
}

void mg_kb(struct gen *g, const char *name, int cls, double flops) {
    g->kname = name;
    g->kcls = cls;
    g->kflops = flops;
    g->kfixed_s = 0;
    g->ktraffic = -1;
    g->nub = 0;
    g->kflags = g->phase_flags | (cls == C_COMM ? (uint32_t)TIO_KERNEL_COMM : 0u);
}

void mg_u(struct gen *g, uint32_t t, int32_t mode) {
    if (t == NONE || g->rc < 0) {
        return;
    }
    TIO_ASSERT(g->nub < MAX_UB && t < g->nt);
    g->ub[g->nub].t = t;
    g->ub[g->nub].mode = mode;
    g->nub++;
}

uint64_t mg_ke(struct gen *g) {
    if (g->rc < 0) {
        return 0;
    }
    double traffic = g->ktraffic;
    if (traffic < 0) {
        traffic = 0;
        for (int i = 0; i < g->nub; i++) {
            double b = (double)g->tbytes[g->ub[i].t];
            traffic += g->ub[i].mode == RW ? 2 * b : b;
        }
    }
    double s;
    if (g->kcls == C_COMM) {
        s = g->kfixed_s;
    } else {
        double rate = g->kcls == C_MM         ? g->mm_rate
                      : g->kcls == C_ATTN     ? g->attn_rate * g->p->gpu.attn_efficiency
                      : g->kcls == C_ATTN_BWD ? g->attn_rate * g->p->gpu.attn_bwd_efficiency
                                              : g->vec_rate;
        double tc = g->kflops / rate, tm = traffic / g->bw;
        s = (tc > tm ? tc : tm) + g->p->gpu.launch_overhead_s;
    }
    uint64_t ns = (uint64_t)llround(s * 1e9);
    if (ns > TIO_TRACE_MAX_DURATION) {
        ns = TIO_TRACE_MAX_DURATION;
    }
    if (g->tr) {
        int rc = tio_trace_add_kernel(g->tr, g->kname, ns, g->kflags, NULL);
        for (int i = 0; rc >= 0 && i < g->nub; i++) {
            rc = tio_trace_add_use(g->tr, g->ub[i].t, g->ub[i].mode);
        }
        if (rc < 0) {
            g->rc = rc;
            return 0;
        }
    }
    g->nk++;
    g->nu += (size_t)g->nub;
    g->time_ns += ns;
    g->flops += g->kflops;
    return ns;
}

double mg_p2p_s(const struct gen *g, uint64_t bytes) {
    return (double)bytes / g->link + g->p->gpu.link_latency_s;
}

/* Ring all-reduce over n GPUs: 2(n-1)/n of the bytes cross each link, 2(n-1) steps. */
double mg_allreduce_s(const struct gen *g, uint64_t bytes, uint32_t n) {
    if (n <= 1) {
        return 0;
    }
    return 2.0 * (n - 1) / n * (double)bytes / g->link + 2.0 * (n - 1) * g->p->gpu.link_latency_s;
}

void mg_allreduce(struct gen *g, uint32_t t, uint32_t n) {
    if (n <= 1 || g->rc < 0) {
        return;
    }
    mg_kb(g, "nccl:all_reduce", C_COMM, 0);
    g->kfixed_s = mg_allreduce_s(g, g->tbytes[t], n);
    mg_u(g, t, RW);
    (void)mg_ke(g);
}

/* y = op(x[, x2]) elementwise: flops per output element. */
uint32_t mg_ew(struct gen *g,
               const char *kn,
               double flops,
               uint32_t x,
               uint32_t x2,
               uint64_t obytes,
               int32_t kind,
               const char *nm) {
    uint32_t y = mg_ten(g, obytes, kind, 0, nm);
    mg_kb(g, kn, C_VEC, flops);
    mg_u(g, x, R);
    mg_u(g, x2, R);
    mg_u(g, y, W);
    (void)mg_ke(g);
    return y;
}

/* y[M,N] = x[M,K] . w[K,N] */
uint32_t mg_mm(struct gen *g,
               uint32_t x,
               uint32_t w,
               uint64_t rows,
               uint64_t cols,
               uint64_t inner,
               int32_t kind,
               const char *nm) {
    uint32_t y = mg_ten(g, rows * cols * g->e, kind, 0, nm);
    mg_kb(g, "aten::mm", C_MM, 2.0 * (double)rows * (double)cols * (double)inner);
    mg_u(g, x, R);
    mg_u(g, w, R);
    mg_u(g, y, W);
    (void)mg_ke(g);
    return y;
}

/*
 * Weight gradient into the persistent gradient grad of parameter pi: the first contribution of the
 * iteration writes grad; later ones accumulate. fp32 (PyTorch AccumulateGrad): a temporary then
 * `aten::add_`. bf16: the matmul accumulates into the fp32 main gradient (Megatron's fused
 * gradient accumulation), so no extra kernel.
 */
void mg_wgrad(
    struct gen *g, const char *kn, int cls, double flops, uint32_t a, uint32_t b, size_t pi) {
    if (g->rc < 0) {
        return;
    }
    struct param *pa = &g->par[pi];
    uint32_t grad = pa->grad;
    if (!g->twritten[grad] || g->bf16) {
        mg_kb(g, kn, cls, flops);
        mg_u(g, a, R);
        mg_u(g, b, R);
        mg_u(g, grad, g->twritten[grad] ? RW : W);
        (void)mg_ke(g);
        g->twritten[grad] = 1;
        return;
    }
    uint32_t tmp = mg_ten(g, pa->n * 4, TIO_TENSOR_TEMP, 0, "wgrad");
    mg_kb(g, kn, cls, flops);
    mg_u(g, a, R);
    mg_u(g, b, R);
    mg_u(g, tmp, W);
    (void)mg_ke(g);
    mg_kb(g, "aten::add_", C_VEC, (double)pa->n);
    mg_u(g, grad, RW);
    mg_u(g, tmp, R);
    (void)mg_ke(g);
}
