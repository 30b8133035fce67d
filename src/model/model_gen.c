/*
 * The trace generator (teraio/model.h): one training iteration of one rank of a decoder-only
 * transformer (Llama 3 / Granite style: RMSNorm, GQA attention with RoPE, SwiGLU MLP), emitted
 * at roughly aten granularity in the order PyTorch eager (TorchTitan) runs it, with durations
 * from a roofline model. docs/model.md lists every operator with its tensors and formulas.
 *
 * Two passes. A dry pass per pipeline stage emits the stage's parameters, two micro-batches
 * (the first backward differs: it writes the gradients, later ones accumulate) and the
 * optimizer tail without building a trace; it gives per-block durations, FLOPs and counts. A
 * small discrete-event replay of the 1F1B schedule over all stages then yields the pipeline
 * waits, which become the durations of this rank's p2p receive kernels (NCCL's receive kernel
 * spins until the data arrives, so a profiler sees the bubble there). The real pass emits this
 * rank's full iteration into a trace sized up front from the dry-pass counts.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <teraio/analysis.h>
#include <teraio/model.h>

#include "common/common_impl.h"
#include "model/model_gen_impl.h"
#include "model/model_impl.h"

/* ---- setup -------------------------------------------------------------------------------- */

static void
stage_layers(const struct tio_model_params *p, uint32_t stage, uint32_t *first, uint32_t *n) {
    TIO_ASSERT(p->pp > 0); /* validated */
    uint32_t base = p->layers / p->pp, rem = p->layers % p->pp;
    *n = base + (stage < rem ? 1u : 0u);
    *first = stage * base + TIO_MIN(stage, rem);
}

static int gen_init(struct gen *g, const struct tio_model_params *p, uint32_t stage) {
    memset(g, 0, sizeof *g);
    g->p = p;
    g->tp = p->tp;
    g->dp = p->dp;
    g->pp = p->pp;
    g->stage = stage;
    g->last = stage == p->pp - 1;
    g->ckpt = p->checkpointing;
    g->bf16 = p->precision == TIO_PRECISION_BF16;
    g->e = g->bf16 ? 2 : 4;
    g->m = p->global_batch / (p->micro_batch * p->dp);
    g->T = (uint64_t)p->micro_batch * p->seq_len;
    g->h = p->hidden;
    g->hd = tio_model_head_dim(p);
    g->a = p->heads / p->tp;
    g->hq = g->a * g->hd;
    g->hkv = (uint64_t)(p->kv_heads / p->tp) * g->hd;
    g->ffn = p->ffn_hidden / p->tp;
    g->vs = (p->vocab + p->tp - 1) / p->tp;
    stage_layers(p, stage, &g->first_layer, &g->nlayers);
    const struct tio_gpu *gpu = &p->gpu;
    double mm_peak =
        g->bf16 ? gpu->bf16_flops : (p->allow_tf32 ? gpu->tf32_flops : gpu->fp32_flops);
    g->mm_rate = mm_peak * gpu->mm_efficiency;
    /* fp32 attention runs on the CUDA cores (memory-efficient kernel); bf16 on tensor cores */
    g->attn_rate = g->bf16 ? gpu->bf16_flops : gpu->fp32_flops;
    g->vec_rate = gpu->fp32_flops * gpu->vector_efficiency;
    g->bw = gpu->hbm_Bps * gpu->mem_efficiency;
    g->link = gpu->link_Bps * gpu->link_efficiency;
    g->ring = p->pp + 1;
    g->saved = tio_calloc((size_t)g->ring * g->nlayers, sizeof *g->saved);
    g->hsaved = tio_calloc(g->ring, sizeof *g->hsaved);
    g->tokens = tio_calloc(g->ring, sizeof *g->tokens);
    if (!g->saved || !g->hsaved || !g->tokens) {
        return tio_set_error(TIO_ENOMEM, "model: out of memory");
    }
    return 0;
}

static void gen_fini(struct gen *g) {
    tio_free(g->tbytes);
    tio_free(g->tglobal);
    tio_free(g->twritten);
    tio_free(g->par);
    tio_free(g->saved);
    tio_free(g->hsaved);
    tio_free(g->tokens);
}

/* Per-stage costs from the dry pass. */
struct stage_cost {
    double tf, tb0, tb1, tail; /* seconds: forward block (excl. recv), backward blocks, tail */
    double cf, cb;             /* base receive time before a forward / backward block */
    double ff, fb0, fb1, ftail;
    size_t kpre, kf, kb0, kb1, ktail; /* kernel counts */
    size_t tpre, tf_, tb0_, tb1_, ttail;
    size_t upre, uf, ub0, ub1, utail;
};

/* Counters at a point of the dry pass, to measure one segment. */
struct mark {
    uint64_t time_ns;
    double flops;
    size_t nk, nt, nu;
};

static void mark(const struct gen *g, struct mark *m) {
    m->time_ns = g->time_ns;
    m->flops = g->flops;
    m->nk = g->nk;
    m->nt = g->nt;
    m->nu = g->nu;
}

static void snap(const struct gen *g,
                 const struct mark *m,
                 double *t,
                 double *f,
                 size_t *k,
                 size_t *tn,
                 size_t *un) {
    *t = (double)(g->time_ns - m->time_ns) * 1e-9;
    *f = g->flops - m->flops;
    *k = g->nk - m->nk;
    *tn = g->nt - m->nt;
    *un = g->nu - m->nu;
}

static int dry_stage(const struct tio_model_params *p, uint32_t stage, struct stage_cost *c) {
    struct gen g;
    int rc = gen_init(&g, p, stage);
    if (rc >= 0) {
        rc = mg_emit_params(&g);
    }
    memset(c, 0, sizeof *c);
    if (rc < 0) {
        gen_fini(&g);
        return rc;
    }
    uint64_t act = g.T * g.h * g.e;
    c->cf = stage > 0 ? (double)llround(mg_p2p_s(&g, act) * 1e9) * 1e-9 : 0;
    c->cb = !g.last ? (double)llround(mg_p2p_s(&g, act) * 1e9) * 1e-9 : 0;
    struct mark mk;
    c->kpre = g.nk;
    c->tpre = g.nt;
    c->upre = g.nu;
    mark(&g, &mk);
    mg_fwd_mb(&g, 0);
    snap(&g, &mk, &c->tf, &c->ff, &c->kf, &c->tf_, &c->uf);
    mark(&g, &mk);
    mg_bwd_mb(&g, 0);
    snap(&g, &mk, &c->tb0, &c->fb0, &c->kb0, &c->tb0_, &c->ub0);
    c->tb1 = c->tb0;
    c->fb1 = c->fb0;
    c->kb1 = c->kb0;
    c->tb1_ = c->tb0_;
    c->ub1 = c->ub0;
    if (g.m > 1) {
        mg_fwd_mb(&g, 1);
        mark(&g, &mk);
        mg_bwd_mb(&g, 1);
        snap(&g, &mk, &c->tb1, &c->fb1, &c->kb1, &c->tb1_, &c->ub1);
    }
    mark(&g, &mk);
    mg_tail(&g);
    snap(&g, &mk, &c->tail, &c->ftail, &c->ktail, &c->ttail, &c->utail);
    c->tf -= c->cf;
    c->tb0 -= c->cb;
    c->tb1 -= c->cb;
    rc = g.rc;
    gen_fini(&g);
    return rc;
}

/* 1F1B order of stage s: warm-up forwards, then one forward / one backward, then cool-down. */
static void op_at(uint32_t p, uint32_t s, uint32_t m, uint32_t j, int *is_bwd, uint32_t *mb) {
    uint32_t w = TIO_MIN(p - s - 1, m);
    if (j < w) {
        *is_bwd = 0;
        *mb = j;
    } else if (j < w + 2 * (m - w)) {
        uint32_t q = j - w;
        *is_bwd = (int)(q & 1);
        *mb = (q & 1) ? q / 2 : w + q / 2;
    } else {
        *is_bwd = 1;
        *mb = m - w + (j - w - 2 * (m - w));
    }
}

/*
 * Replay the 1F1B schedule of all stages with a non-blocking send model: the receive before
 * F(s, i) ends at max(start + transfer, end of F(s-1, i)); the same for B with stage s+1. Fills
 * this stage's receive durations and returns the makespan (incl. each stage's tail).
 */
static int schedule(const struct tio_model_params *p,
                    const struct stage_cost *c,
                    uint32_t me,
                    double *recv_f,
                    double *recv_b,
                    double *makespan) {
    uint32_t npp = p->pp, m = p->global_batch / (p->micro_batch * p->dp);
    size_t n = (size_t)npp * m;
    double *endf = tio_malloc(n * sizeof *endf), *endb = tio_malloc(n * sizeof *endb);
    double *freet = tio_calloc(npp, sizeof *freet);
    uint32_t *ptr = tio_calloc(npp, sizeof *ptr);
    int rc = 0;
    if (!endf || !endb || !freet || !ptr) {
        rc = tio_set_error(TIO_ENOMEM, "model: out of memory for the pipeline schedule");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        endf[i] = endb[i] = -1;
    }
    for (int progress = 1; progress;) {
        progress = 0;
        for (uint32_t s = 0; s < npp; s++) {
            while (ptr[s] < 2 * m) {
                int bwd;
                uint32_t mb;
                op_at(npp, s, m, ptr[s], &bwd, &mb);
                double t = freet[s], rdur = 0, dur;
                if (!bwd) {
                    if (s > 0) {
                        double ready = endf[(size_t)(s - 1) * m + mb];
                        if (ready < 0) {
                            break;
                        }
                        rdur = fmax(c[s].cf, ready - t);
                    }
                    dur = rdur + c[s].tf;
                    endf[(size_t)s * m + mb] = t + dur;
                    if (s == me && recv_f) {
                        recv_f[mb] = rdur;
                    }
                } else {
                    if (s + 1 < npp) {
                        double ready = endb[(size_t)(s + 1) * m + mb];
                        if (ready < 0) {
                            break;
                        }
                        rdur = fmax(c[s].cb, ready - t);
                    }
                    dur = rdur + (mb == 0 ? c[s].tb0 : c[s].tb1);
                    endb[(size_t)s * m + mb] = t + dur;
                    if (s == me && recv_b) {
                        recv_b[mb] = rdur;
                    }
                }
                freet[s] = t + dur;
                ptr[s]++;
                progress = 1;
            }
        }
    }
    *makespan = 0;
    for (uint32_t s = 0; s < npp; s++) {
        TIO_ASSERT(ptr[s] == 2 * m); /* 1F1B with non-blocking sends cannot deadlock */
        *makespan = fmax(*makespan, freet[s] + c[s].tail);
    }
out:
    tio_free(endf);
    tio_free(endb);
    tio_free(freet);
    tio_free(ptr);
    return rc;
}

static int set_meta_u64(struct tio_trace *tr, const char *key, uint64_t v) {
    char buf[32];
    (void)snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return tio_trace_set_meta(tr, key, buf);
}

/* Global bytes and the peak of the other tensors' resident bytes (first kernel reaching it) of
 * the finished trace, from the shared liveness (tio_analysis_liveness). */
static int peak_bytes(const struct gen *g, uint64_t *global_bytes, uint64_t *peak, size_t *peak_k) {
    uint64_t *first = tio_malloc((g->nt ? g->nt : 1) * sizeof *first);
    uint64_t *last = tio_malloc((g->nt ? g->nt : 1) * sizeof *last);
    uint64_t *res = tio_malloc((g->nk ? g->nk : 1) * sizeof *res);
    int rc = TIO_ENOMEM;
    if (!first || !last || !res) {
        rc = tio_set_error(TIO_ENOMEM, "model: out of memory");
        goto out;
    }
    if ((rc = tio_analysis_liveness(g->tr, NULL, g->tglobal, first, last, res)) < 0) {
        goto out;
    }
    *global_bytes = 0;
    for (size_t t = 0; t < g->nt; t++) {
        *global_bytes += g->tglobal[t] ? g->tbytes[t] : 0;
    }
    *peak = 0;
    *peak_k = 0;
    for (size_t k = 0; k < g->nk; k++) {
        if (res[k] > *peak) {
            *peak = res[k];
            *peak_k = k;
        }
    }
out:
    tio_free(first);
    tio_free(last);
    tio_free(res);
    return rc;
}

/* Bytes one block saves for its backward (one micro-batch), from a block emitted on its own. */
static int saved_per_block(const struct tio_model_params *p, uint32_t stage, uint64_t *out) {
    struct blk s;
    struct gen d;
    int rc = gen_init(&d, p, stage);
    if (rc >= 0) {
        rc = mg_emit_params(&d);
    }
    if (rc < 0) {
        gen_fini(&d);
        return rc;
    }
    uint32_t x = mg_ten(&d, d.T * d.h * d.e, TIO_TENSOR_ACTIVATION, 0, "x");
    mg_block_fwd(&d, x, 0, 0, &s);
    const uint32_t ids[] = { s.norm1.rstd, s.norm1.nr, s.norm1.no, s.qr,   s.krep,       s.vrep,
                             s.o,          s.lse,      s.oc,       s.hmid, s.norm2.rstd, s.norm2.nr,
                             s.norm2.no,   s.gt,       s.ut,       s.sg,   s.pr,         s.y };
    *out = 0;
    for (size_t i = 0; i < TIO_ARRAY_LEN(ids); i++) {
        if (ids[i] == NONE || (d.ckpt && ids[i] != s.y)) {
            continue; /* under checkpointing only the block output (next input) is kept */
        }
        *out += d.tbytes[ids[i]];
    }
    rc = d.rc;
    gen_fini(&d);
    return rc;
}

static int
set_meta(struct tio_trace *tr, const struct tio_model_params *p, uint32_t me, double makespan) {
    int rc;
    char buf[64];
    if ((rc = tio_trace_set_meta(tr, "model", p->model[0] ? p->model : "custom")) < 0 ||
        (rc = tio_trace_set_meta(tr, "gpu", p->gpu.name[0] ? p->gpu.name : "custom")) < 0 ||
        (rc = set_meta_u64(tr, "tokens_per_iteration", (uint64_t)p->global_batch * p->seq_len)) <
            0 ||
        (rc = set_meta_u64(tr, "rank", p->rank)) < 0 || (rc = set_meta_u64(tr, "pp", p->pp)) < 0 ||
        (rc = set_meta_u64(tr, "tp", p->tp)) < 0 || (rc = set_meta_u64(tr, "dp", p->dp)) < 0 ||
        (rc = set_meta_u64(tr, "stage", me)) < 0 ||
        (rc = set_meta_u64(tr, "micro_batch", p->micro_batch)) < 0 ||
        (rc = set_meta_u64(tr, "global_batch", p->global_batch)) < 0 ||
        (rc = set_meta_u64(tr, "seq_len", p->seq_len)) < 0 ||
        (rc = set_meta_u64(tr, "checkpointing", (uint64_t)p->checkpointing)) < 0 ||
        (rc = tio_trace_set_meta(tr, "precision", tio_model_precision_name(p->precision))) < 0 ||
        (rc = tio_trace_set_meta(tr, "source", "teraio model")) < 0 ||
        (rc = set_meta_u64(tr, "capacity_bytes", p->gpu.memory_bytes)) < 0) {
        return rc;
    }
    (void)snprintf(buf, sizeof buf, "%.6f", makespan);
    if ((rc = tio_trace_set_meta(tr, "ideal_iteration_s", buf)) < 0) {
        return rc;
    }
    return 0;
}

int tio_model_generate(const struct tio_model_params *p,
                       struct tio_trace **out,
                       struct tio_model_info *info) {
    if (!out) {
        return tio_set_error(TIO_EINVAL, "model: out is NULL");
    }
    *out = NULL;
    int rc = tio_model_validate(p);
    if (rc < 0) {
        return rc;
    }
    uint32_t npp = p->pp, m = p->global_batch / (p->micro_batch * p->dp);
    uint32_t me = p->rank / (p->dp * p->tp);
    if ((uint64_t)npp * m > (UINT64_C(1) << 22)) {
        return tio_set_error(TIO_EINVAL,
                             "model: pp x micro-batches = %llu is too large; use at most 4194304",
                             (unsigned long long)npp * m);
    }
    struct stage_cost *cost = tio_calloc(npp, sizeof *cost);
    double *recv = tio_calloc(2 * (size_t)m, sizeof *recv);
    struct gen g;
    memset(&g, 0, sizeof g);
    struct tio_trace *tr = NULL;
    if (!cost || !recv) {
        rc = tio_set_error(TIO_ENOMEM, "model: out of memory");
        goto fail;
    }
    double model_flops = 0;
    for (uint32_t s = 0; s < npp; s++) {
        if ((rc = dry_stage(p, s, &cost[s])) < 0) {
            goto fail;
        }
        const struct stage_cost *c = &cost[s];
        model_flops += (c->ff * m + c->fb0 + c->fb1 * (m - 1) + c->ftail) * p->dp * p->tp;
    }
    double makespan = 0;
    if ((rc = schedule(p, cost, me, recv, recv + m, &makespan)) < 0) {
        goto fail;
    }
    const struct stage_cost *c = &cost[me];
    uint64_t nk = c->kpre + (uint64_t)c->kf * m + c->kb0 + (uint64_t)c->kb1 * (m - 1) + c->ktail;
    uint64_t ntn =
        c->tpre + (uint64_t)c->tf_ * m + c->tb0_ + (uint64_t)c->tb1_ * (m - 1) + c->ttail;
    uint64_t nuu = c->upre + (uint64_t)c->uf * m + c->ub0 + (uint64_t)c->ub1 * (m - 1) + c->utail;
    if (nk > MAX_KERN || ntn > TIO_TRACE_MAX_TENSORS) {
        rc = tio_set_error(TIO_EINVAL,
                           "model: this setting needs %llu kernels and %llu tensors per rank, more "
                           "than the supported %llu; reduce global_batch or raise micro_batch",
                           (unsigned long long)nk, (unsigned long long)ntn,
                           (unsigned long long)MAX_KERN);
        goto fail;
    }
    struct tio_trace_params tp = tio_trace_params_default();
    tp.kernels_hint = (size_t)nk;
    tp.tensors_hint = (size_t)ntn;
    tp.uses_hint = (size_t)nuu;
    if ((rc = tio_trace_new(&tp, &tr)) < 0) {
        goto fail;
    }
    /* the real pass */
    if ((rc = gen_init(&g, p, me)) < 0) {
        goto fail;
    }
    g.tr = tr;
    size_t cap = (size_t)ntn;
    if (tio_grow((void **)&g.tbytes, &g.cap, cap, sizeof *g.tbytes) < 0) {
        rc = tio_set_error(TIO_ENOMEM, "model: out of memory");
        goto fail;
    }
    {
        size_t c4 = 0, c5 = 0;
        if (tio_grow((void **)&g.tglobal, &c4, g.cap, 1) < 0 ||
            tio_grow((void **)&g.twritten, &c5, g.cap, 1) < 0) {
            rc = tio_set_error(TIO_ENOMEM, "model: out of memory");
            goto fail;
        }
        g.cap = TIO_MIN(g.cap, TIO_MIN(c4, c5));
    }
    g.recv_f = me > 0 ? recv : NULL;
    g.recv_b = me + 1 < npp ? recv + m : NULL;
    if ((rc = mg_emit_params(&g)) < 0) {
        goto fail;
    }
    for (uint32_t j = 0; j < 2 * m && g.rc >= 0; j++) {
        int bwd;
        uint32_t mb;
        op_at(npp, me, m, j, &bwd, &mb);
        if (bwd) {
            mg_bwd_mb(&g, mb);
        } else {
            mg_fwd_mb(&g, mb);
        }
    }
    mg_tail(&g);
    if ((rc = g.rc) < 0) {
        goto fail;
    }
    uint64_t global_bytes = 0, peak = 0, params_rank = 0;
    size_t peak_k = 0;
    for (size_t i = 0; i < g.npar; i++) {
        params_rank += g.par[i].n;
    }
    uint64_t act_layer = 0;
    if ((rc = saved_per_block(p, me, &act_layer)) < 0) {
        goto fail;
    }
    if ((rc = set_meta(tr, p, me, makespan)) < 0) {
        goto fail;
    }
    if ((rc = tio_trace_finish(tr)) < 0 ||
        (rc = peak_bytes(&g, &global_bytes, &peak, &peak_k)) < 0) {
        goto fail;
    }
    if (info) {
        memset(info, 0, sizeof *info);
        info->params_total = tio_model_param_count(p);
        info->params_rank = params_rank;
        info->tokens_per_iteration = (uint64_t)p->global_batch * p->seq_len;
        info->micro_batches = m;
        info->stage = me;
        info->stage_first_layer = g.first_layer;
        info->stage_layers = g.nlayers;
        info->n_kernels = g.nk;
        info->n_tensors = g.nt;
        info->n_uses = g.nu;
        info->flops_per_iteration = g.flops;
        info->model_flops_per_iteration = model_flops;
        info->global_bytes = global_bytes;
        info->peak_bytes = global_bytes + peak;
        info->peak_kernel = peak_k;
        info->capacity_bytes = p->gpu.memory_bytes;
        info->memory_ratio = (double)info->peak_bytes / (double)p->gpu.memory_bytes;
        info->activation_bytes_per_layer = act_layer;
        info->ideal_iteration_s = makespan;
        info->rank_busy_s = (double)(g.time_ns - g.wait_ns) * 1e-9;
        info->ideal_tokens_per_s = makespan > 0 ? (double)info->tokens_per_iteration / makespan : 0;
    }
    *out = tr;
    tr = NULL;
    rc = 0;
fail:
    tio_trace_free(tr);
    gen_fini(&g);
    tio_free(cost);
    tio_free(recv);
    return rc;
}
