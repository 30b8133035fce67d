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

#include <teraio/model.h>

#include "common/common_impl.h"
#include "model/model_impl.h"

enum kcls { C_MM, C_ATTN, C_ATTN_BWD, C_VEC, C_COMM };

#define R  TIO_USE_READ
#define W  TIO_USE_WRITE
#define RW TIO_USE_READ_WRITE

#define NONE     UINT32_MAX
#define MAX_UB   12
#define MAX_KERN (UINT64_C(1) << 24) /* 16.7M kernels (~1.5 GB of trace): 76x Llama3-70B */

/* One parameter: working weight (bf16 copy under mixed precision, else the fp32 weight),
 * fp32 master (== w under fp32), fp32 gradient, AdamW moments. */
struct param {
    uint32_t w, master, grad, m, v;
    uint64_t n;    /* elements */
    char name[32]; /* "L12.wq" */
};

/* Layer parameter slots. */
enum { P_N1, P_WQ, P_WK, P_WV, P_WO, P_N2, P_W1, P_W2, P_W3, P_PER_LAYER };

/* What a block's forward saves for its backward. */
struct blk {
    uint32_t x, rstd1, n1, n1o, q, k, qr, krep, vrep, o, lse, oc, hmid, rstd2, n2, n2o, gt, ut, sg,
        pr, y;
};

struct head_saved {
    uint32_t x, rstd, nr, no, lsm, labels;
};

struct use_buf {
    uint32_t t;
    int32_t mode;
};

struct gen {
    const struct tio_model_params *p;
    struct tio_trace *tr; /* NULL in the dry pass */
    int rc;               /* sticky: the first failure */
    /* own tensor table (liveness, traffic) */
    size_t nt, cap;
    uint64_t *tbytes;
    uint32_t *tfirst, *tlast;
    uint8_t *tglobal, *twritten;
    /* counters */
    size_t nk, nu;
    uint64_t time_ns, wait_ns;
    double flops;
    /* the kernel being built */
    const char *kname;
    uint32_t kflags;
    int kcls;
    double kflops, kfixed_s, ktraffic;
    struct use_buf ub[MAX_UB];
    int nub;
    uint32_t phase_flags; /* TIO_KERNEL_BACKWARD / OPTIM for the kernels being emitted */
    char scope[48];
    /* dims (per rank, tensor-parallel shards) */
    uint64_t T, h, hq, hkv, ffn, a, hd, vs, e;
    uint32_t m, stage, first_layer, nlayers, tp, dp, pp;
    int last, ckpt, bf16;
    double mm_rate, attn_rate, vec_rate, bw, link;
    /* parameters of the stage */
    struct param *par;
    size_t npar;
    uint32_t freqs, emb_par, head_par, normf_par; /* param indices or NONE */
    /* per in-flight micro-batch saved state, [pp + 1][nlayers] ring */
    struct blk *saved;
    struct head_saved *hsaved;
    uint32_t *tokens; /* [pp + 1] */
    uint32_t ring;
    /* real pass: receive durations from the schedule replay, [m] each (NULL: no wait) */
    const double *recv_f, *recv_b;
};

/* ---- tensors and kernels ---------------------------------------------------------------- */

static uint32_t ten(struct gen *g, uint64_t bytes, int32_t kind, uint32_t flags, const char *nm) {
    if (g->rc < 0) {
        return 0;
    }
    if (g->nt == g->cap) {
        size_t c1 = g->cap, c2 = g->cap, c3 = g->cap, c4 = g->cap, c5 = g->cap;
        if (tio_grow((void **)&g->tbytes, &c1, g->nt + 1, sizeof *g->tbytes) < 0 ||
            tio_grow((void **)&g->tfirst, &c2, g->nt + 1, sizeof *g->tfirst) < 0 ||
            tio_grow((void **)&g->tlast, &c3, g->nt + 1, sizeof *g->tlast) < 0 ||
            tio_grow((void **)&g->tglobal, &c4, g->nt + 1, 1) < 0 ||
            tio_grow((void **)&g->twritten, &c5, g->nt + 1, 1) < 0) {
            g->rc = tio_set_error(TIO_ENOMEM, "model: out of memory for %zu tensors", g->nt + 1);
            return 0;
        }
        g->cap = TIO_MIN(TIO_MIN(c1, c2), TIO_MIN(TIO_MIN(c3, c4), c5));
    }
    uint32_t id = (uint32_t)g->nt++;
    g->tbytes[id] = bytes ? bytes : 1;
    g->tfirst[id] = UINT32_MAX;
    g->tlast[id] = 0;
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

static void kb(struct gen *g, const char *name, int cls, double flops) {
    g->kname = name;
    g->kcls = cls;
    g->kflops = flops;
    g->kfixed_s = 0;
    g->ktraffic = -1;
    g->nub = 0;
    g->kflags = g->phase_flags | (cls == C_COMM ? (uint32_t)TIO_KERNEL_COMM : 0u);
}

static void u(struct gen *g, uint32_t t, int32_t mode) {
    if (t == NONE || g->rc < 0) {
        return;
    }
    TIO_ASSERT(g->nub < MAX_UB && t < g->nt);
    g->ub[g->nub].t = t;
    g->ub[g->nub].mode = mode;
    g->nub++;
}

static uint64_t ke(struct gen *g) {
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
    uint32_t k = (uint32_t)g->nk;
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
    for (int i = 0; i < g->nub; i++) {
        uint32_t t = g->ub[i].t;
        if (g->tfirst[t] == UINT32_MAX) {
            g->tfirst[t] = k;
        }
        g->tlast[t] = k;
    }
    g->nk++;
    g->nu += (size_t)g->nub;
    g->time_ns += ns;
    g->flops += g->kflops;
    return ns;
}

static double p2p_s(const struct gen *g, uint64_t bytes) {
    return (double)bytes / g->link + g->p->gpu.link_latency_s;
}

/* Ring all-reduce over n GPUs: 2(n-1)/n of the bytes cross each link, 2(n-1) steps. */
static double allreduce_s(const struct gen *g, uint64_t bytes, uint32_t n) {
    if (n <= 1) {
        return 0;
    }
    return 2.0 * (n - 1) / n * (double)bytes / g->link + 2.0 * (n - 1) * g->p->gpu.link_latency_s;
}

static void allreduce(struct gen *g, uint32_t t, uint32_t n) {
    if (n <= 1 || g->rc < 0) {
        return;
    }
    kb(g, "nccl:all_reduce", C_COMM, 0);
    g->kfixed_s = allreduce_s(g, g->tbytes[t], n);
    u(g, t, RW);
    (void)ke(g);
}

/* y = op(x[, x2]) elementwise: flops per output element. */
static uint32_t ew(struct gen *g,
                   const char *kn,
                   double flops,
                   uint32_t x,
                   uint32_t x2,
                   uint64_t obytes,
                   int32_t kind,
                   const char *nm) {
    uint32_t y = ten(g, obytes, kind, 0, nm);
    kb(g, kn, C_VEC, flops);
    u(g, x, R);
    u(g, x2, R);
    u(g, y, W);
    (void)ke(g);
    return y;
}

/* y[M,N] = x[M,K] . w[K,N] */
static uint32_t mm(struct gen *g,
                   uint32_t x,
                   uint32_t w,
                   uint64_t rows,
                   uint64_t cols,
                   uint64_t inner,
                   int32_t kind,
                   const char *nm) {
    uint32_t y = ten(g, rows * cols * g->e, kind, 0, nm);
    kb(g, "aten::mm", C_MM, 2.0 * (double)rows * (double)cols * (double)inner);
    u(g, x, R);
    u(g, w, R);
    u(g, y, W);
    (void)ke(g);
    return y;
}

/*
 * Weight gradient into the persistent gradient grad of parameter pi: the first contribution of the
 * iteration writes grad; later ones accumulate. fp32 (PyTorch AccumulateGrad): a temporary then
 * `aten::add_`. bf16: the matmul accumulates into the fp32 main gradient (Megatron's fused
 * gradient accumulation), so no extra kernel.
 */
static void
wgrad(struct gen *g, const char *kn, int cls, double flops, uint32_t a, uint32_t b, size_t pi) {
    if (g->rc < 0) {
        return;
    }
    struct param *pa = &g->par[pi];
    uint32_t grad = pa->grad;
    if (!g->twritten[grad] || g->bf16) {
        kb(g, kn, cls, flops);
        u(g, a, R);
        u(g, b, R);
        u(g, grad, g->twritten[grad] ? RW : W);
        (void)ke(g);
        g->twritten[grad] = 1;
        return;
    }
    uint32_t tmp = ten(g, pa->n * 4, TIO_TENSOR_TEMP, 0, "wgrad");
    kb(g, kn, cls, flops);
    u(g, a, R);
    u(g, b, R);
    u(g, tmp, W);
    (void)ke(g);
    kb(g, "aten::add_", C_VEC, (double)pa->n);
    u(g, grad, RW);
    u(g, tmp, R);
    (void)ke(g);
}

/* ---- RMSNorm (TorchTitan: x * rsqrt(mean(x^2) + eps) * weight, unfused) ------------------ */

/* "<tag>.<suffix>" into buf (names are only built for the real pass). */
static const char *
tagged(const struct gen *g, char *buf, size_t n, const char *tag, const char *suffix) {
    if (g->tr) {
        (void)snprintf(buf, n, "%s.%s", tag, suffix);
    }
    return buf;
}

static void rmsnorm_fwd(struct gen *g,
                        const char *tag,
                        uint32_t x,
                        size_t pi,
                        int32_t ks,
                        uint32_t *rstd,
                        uint32_t *nr,
                        uint32_t *no) {
    double th = (double)(g->T * g->h);
    uint64_t full = g->T * g->h * g->e, row = g->T * 4;
    char b[48] = "";
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    uint32_t sq = ew(g, "aten::pow", th, x, NONE, full, k_tmp, tagged(g, b, sizeof b, tag, "sq"));
    uint32_t ms =
        ew(g, "aten::mean", th, sq, NONE, row, k_tmp, tagged(g, b, sizeof b, tag, "mean"));
    uint32_t mse = ew(g, "aten::add", (double)g->T, ms, NONE, row, k_tmp,
                      tagged(g, b, sizeof b, tag, "mean_eps"));
    *rstd =
        ew(g, "aten::rsqrt", (double)g->T, mse, NONE, row, ks, tagged(g, b, sizeof b, tag, "rstd"));
    *nr = ew(g, "aten::mul", th, x, *rstd, full, ks, tagged(g, b, sizeof b, tag, "normed"));
    *no = ew(g, "aten::mul", th, *nr, g->par[pi].w, full, ks, tagged(g, b, sizeof b, tag, "out"));
}

/* Returns the gradient of x, plus `gres` (the residual branch's gradient) if not NONE, named
 * `gname`. */
static uint32_t rmsnorm_bwd(struct gen *g,
                            const char *tag,
                            uint32_t gout,
                            uint32_t x,
                            uint32_t rstd,
                            uint32_t nr,
                            size_t pi,
                            uint32_t gres,
                            const char *gname) {
    double th = (double)(g->T * g->h);
    uint64_t full = g->T * g->h * g->e, row = g->T * 4;
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    char b[48] = "";
    char gt[40];
    (void)snprintf(gt, sizeof gt, "g.%s", tag);
    uint32_t t1 = ew(g, "aten::mul", th, gout, nr, full, k_tmp, tagged(g, b, sizeof b, gt, "t1"));
    wgrad(g, "aten::sum", C_VEC, th, t1, NONE, pi);
    uint32_t gnr = ew(g, "aten::mul", th, gout, g->par[pi].w, full, k_tmp,
                      tagged(g, b, sizeof b, gt, "normed"));
    uint32_t gx1 = ew(g, "aten::mul", th, gnr, rstd, full, k_tmp, tagged(g, b, sizeof b, gt, "x1"));
    uint32_t t2 = ew(g, "aten::mul", th, gnr, x, full, k_tmp, tagged(g, b, sizeof b, gt, "t2"));
    uint32_t grs = ew(g, "aten::sum", th, t2, NONE, row, k_tmp, tagged(g, b, sizeof b, gt, "rstd"));
    uint32_t gms = ew(g, "aten::mul", 4.0 * (double)g->T, grs, rstd, row, k_tmp,
                      tagged(g, b, sizeof b, gt, "mean"));
    uint32_t gsq = ew(g, "aten::div", th, gms, NONE, full, k_tmp, tagged(g, b, sizeof b, gt, "sq"));
    uint32_t gx2 =
        ew(g, "aten::mul", 2 * th, gsq, x, full, k_tmp, tagged(g, b, sizeof b, gt, "x2"));
    uint32_t gx = ew(g, "aten::add", th, gx1, gx2, full, k_tmp,
                     gres == NONE ? gname : tagged(g, b, sizeof b, gt, "x"));
    if (gres != NONE) {
        gx = ew(g, "aten::add", th, gres, gx, full, k_tmp, gname);
    }
    return gx;
}

/* ---- transformer block -------------------------------------------------------------------- */

static void
block_fwd(struct gen *g, uint32_t x, uint32_t layer_local, int recompute, struct blk *s) {
    size_t base = (size_t)(g->emb_par != NONE) + (size_t)layer_local * P_PER_LAYER;
    struct param *pa = &g->par[base];
    /* Saved tensors: activations, except in the first forward under checkpointing where only
     * the block input (the checkpoint) survives to the backward. */
    int32_t ks = (g->ckpt && !recompute) ? TIO_TENSOR_TEMP : TIO_TENSOR_ACTIVATION;
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    uint64_t tok = g->T, e = g->e;
    double th = (double)(tok * g->h);
    memset(s, 0xff, sizeof *s);
    s->x = x;
    rmsnorm_fwd(g, "attn_norm", x, base + P_N1, ks, &s->rstd1, &s->n1, &s->n1o);
    /* q and k are not saved: RoPE multiplies by freqs_cis, which needs no gradient, so
     * autograd keeps neither operand */
    s->q = mm(g, s->n1o, pa[P_WQ].w, tok, g->hq, g->h, k_tmp, "q");
    s->k = mm(g, s->n1o, pa[P_WK].w, tok, g->hkv, g->h, k_tmp, "k");
    int rep = g->hq != g->hkv;
    uint32_t v = mm(g, s->n1o, pa[P_WV].w, tok, g->hkv, g->h, rep ? k_tmp : ks, "v");
    /* RoPE as a complex multiply with freqs_cis (saves its input q/k) */
    s->qr = ew(g, "aten::mul", 3.0 * (double)(tok * g->hq), s->q, g->freqs, tok * g->hq * e, ks,
               "q_rope");
    uint32_t kr = ew(g, "aten::mul", 3.0 * (double)(tok * g->hkv), s->k, g->freqs, tok * g->hkv * e,
                     rep ? k_tmp : ks, "k_rope");
    if (rep) { /* repeat_kv: expand + reshape copies K and V to all query heads */
        s->krep = ew(g, "aten::clone", 0, kr, NONE, tok * g->hq * e, ks, "k_rep");
        s->vrep = ew(g, "aten::clone", 0, v, NONE, tok * g->hq * e, ks, "v_rep");
    } else {
        s->krep = kr;
        s->vrep = v;
    }
    /* fused (memory-efficient) causal attention: saves output and logsumexp */
    double af = 2.0 * (double)(g->p->micro_batch) * (double)g->a * (double)g->p->seq_len *
                (double)g->p->seq_len * (double)g->hd;
    s->o = ten(g, tok * g->hq * e, ks, 0, "attn");
    s->lse = ten(g, tok * g->a * 4, ks, 0, "attn.lse");
    kb(g, "aten::_efficient_attention_forward", C_ATTN, af);
    u(g, s->qr, R);
    u(g, s->krep, R);
    u(g, s->vrep, R);
    u(g, s->o, W);
    u(g, s->lse, W);
    (void)ke(g);
    s->oc = ew(g, "aten::clone", 0, s->o, NONE, tok * g->hq * e, ks, "attn.contig");
    uint32_t ao = mm(g, s->oc, pa[P_WO].w, tok, g->h, g->hq, k_tmp, "attn.proj");
    allreduce(g, ao, g->tp);
    s->hmid = ew(g, "aten::add", th, x, ao, tok * g->h * e, ks, "h");
    rmsnorm_fwd(g, "ffn_norm", s->hmid, base + P_N2, ks, &s->rstd2, &s->n2, &s->n2o);
    s->gt = mm(g, s->n2o, pa[P_W1].w, tok, g->ffn, g->h, ks, "mlp.gate");
    s->ut = mm(g, s->n2o, pa[P_W3].w, tok, g->ffn, g->h, ks, "mlp.up");
    double tf = (double)(tok * g->ffn);
    s->sg = ew(g, "aten::silu", 4 * tf, s->gt, NONE, tok * g->ffn * e, ks, "mlp.silu");
    s->pr = ew(g, "aten::mul", tf, s->sg, s->ut, tok * g->ffn * e, ks, "mlp.prod");
    uint32_t f = mm(g, s->pr, pa[P_W2].w, tok, g->h, g->ffn, k_tmp, "mlp.down");
    allreduce(g, f, g->tp);
    s->y = ew(g, "aten::add", th, s->hmid, f, tok * g->h * e,
              recompute ? k_tmp : TIO_TENSOR_ACTIVATION, "out");
}

static uint32_t block_bwd(struct gen *g, uint32_t gy, uint32_t layer_local, const struct blk *s) {
    size_t base = (size_t)(g->emb_par != NONE) + (size_t)layer_local * P_PER_LAYER;
    struct param *pa = &g->par[base];
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    uint64_t tok = g->T, e = g->e;
    double tf = (double)(tok * g->ffn), mmf = 2.0 * (double)tok * (double)g->h * (double)g->ffn;
    /* MLP: out = h + w2(silu(w1 n) * w3 n) */
    uint32_t gp = mm(g, gy, pa[P_W2].w, tok, g->ffn, g->h, k_tmp, "g.mlp.prod");
    wgrad(g, "aten::mm", C_MM, mmf, gy, s->pr, base + P_W2);
    uint32_t gsg = ew(g, "aten::mul", tf, gp, s->ut, tok * g->ffn * e, k_tmp, "g.mlp.silu");
    uint32_t gu = ew(g, "aten::mul", tf, gp, s->sg, tok * g->ffn * e, k_tmp, "g.mlp.up");
    uint32_t gg =
        ew(g, "aten::silu_backward", 6 * tf, gsg, s->gt, tok * g->ffn * e, k_tmp, "g.mlp.gate");
    uint32_t gna = mm(g, gu, pa[P_W3].w, tok, g->h, g->ffn, k_tmp, "g.ffn_norm.out_up");
    wgrad(g, "aten::mm", C_MM, mmf, gu, s->n2o, base + P_W3);
    uint32_t gnb = mm(g, gg, pa[P_W1].w, tok, g->h, g->ffn, k_tmp, "g.ffn_norm.out_gate");
    wgrad(g, "aten::mm", C_MM, mmf, gg, s->n2o, base + P_W1);
    uint32_t gn2 =
        ew(g, "aten::add", (double)(tok * g->h), gna, gnb, tok * g->h * e, k_tmp, "g.ffn_norm.out");
    allreduce(g, gn2, g->tp);
    uint32_t gh = rmsnorm_bwd(g, "ffn_norm", gn2, s->hmid, s->rstd2, s->n2, base + P_N2, gy, "g.h");
    /* attention */
    double mq = 2.0 * (double)tok * (double)g->h * (double)g->hq;
    double mkv = 2.0 * (double)tok * (double)g->h * (double)g->hkv;
    uint32_t goc = mm(g, gh, pa[P_WO].w, tok, g->hq, g->h, k_tmp, "g.attn");
    wgrad(g, "aten::mm", C_MM, mq, gh, s->oc, base + P_WO);
    double af = 4.0 * (double)g->p->micro_batch * (double)g->a * (double)g->p->seq_len *
                (double)g->p->seq_len * (double)g->hd;
    uint32_t gq = ten(g, tok * g->hq * e, k_tmp, 0, "g.q_rope");
    uint32_t gk = ten(g, tok * g->hq * e, k_tmp, 0, "g.k_rep");
    uint32_t gv = ten(g, tok * g->hq * e, k_tmp, 0, "g.v_rep");
    kb(g, "aten::_efficient_attention_backward", C_ATTN_BWD, af);
    u(g, goc, R);
    u(g, s->qr, R);
    u(g, s->krep, R);
    u(g, s->vrep, R);
    u(g, s->o, R);
    u(g, s->lse, R);
    u(g, gq, W);
    u(g, gk, W);
    u(g, gv, W);
    (void)ke(g);
    if (g->hq != g->hkv) { /* repeat_kv backward: sum over the repeated heads */
        gk = ew(g, "aten::sum", (double)(tok * g->hq), gk, NONE, tok * g->hkv * e, k_tmp,
                "g.k_rope");
        gv = ew(g, "aten::sum", (double)(tok * g->hq), gv, NONE, tok * g->hkv * e, k_tmp, "g.v");
    }
    uint32_t gqq = ew(g, "aten::mul", 3.0 * (double)(tok * g->hq), gq, g->freqs, tok * g->hq * e,
                      k_tmp, "g.q");
    uint32_t gkk = ew(g, "aten::mul", 3.0 * (double)(tok * g->hkv), gk, g->freqs, tok * g->hkv * e,
                      k_tmp, "g.k");
    uint32_t g1 = mm(g, gqq, pa[P_WQ].w, tok, g->h, g->hq, k_tmp, "g.attn_norm.out_q");
    wgrad(g, "aten::mm", C_MM, mq, gqq, s->n1o, base + P_WQ);
    uint32_t g2 = mm(g, gkk, pa[P_WK].w, tok, g->h, g->hkv, k_tmp, "g.attn_norm.out_k");
    wgrad(g, "aten::mm", C_MM, mkv, gkk, s->n1o, base + P_WK);
    uint32_t g3 = mm(g, gv, pa[P_WV].w, tok, g->h, g->hkv, k_tmp, "g.attn_norm.out_v");
    wgrad(g, "aten::mm", C_MM, mkv, gv, s->n1o, base + P_WV);
    double th = (double)(tok * g->h);
    uint32_t gn = ew(g, "aten::add", th, g1, g2, tok * g->h * e, k_tmp, "g.attn_norm.out_qk");
    gn = ew(g, "aten::add", th, gn, g3, tok * g->h * e, k_tmp, "g.attn_norm.out");
    allreduce(g, gn, g->tp);
    return rmsnorm_bwd(g, "attn_norm", gn, s->x, s->rstd1, s->n1, base + P_N1, gh, "g.x");
}

/* ---- stage pieces ------------------------------------------------------------------------- */

static void add_param(struct gen *g, const char *nm, uint64_t n, size_t *idx) {
    struct param *pa = &g->par[g->npar];
    const uint32_t glob = TIO_TENSOR_GLOBAL;
    (void)snprintf(g->scope, sizeof g->scope, "%s", nm);
    (void)snprintf(pa->name, sizeof pa->name, "%s", nm);
    if (g->bf16) {
        pa->master = ten(g, n * 4, TIO_TENSOR_WEIGHT, glob, "master");
        pa->w = ten(g, n * 2, TIO_TENSOR_WEIGHT, glob, "bf16");
    } else {
        pa->master = pa->w = ten(g, n * 4, TIO_TENSOR_WEIGHT, glob, "weight");
    }
    pa->grad = ten(g, n * 4, TIO_TENSOR_GRAD, glob, "grad");
    pa->m = ten(g, n * 4, TIO_TENSOR_OPTIM_STATE, glob, "exp_avg");
    pa->v = ten(g, n * 4, TIO_TENSOR_OPTIM_STATE, glob, "exp_avg_sq");
    pa->n = n;
    if (idx) {
        *idx = g->npar;
    }
    g->npar++;
    g->scope[0] = '\0';
}

static int emit_params(struct gen *g) {
    size_t total = (size_t)g->nlayers * P_PER_LAYER + 3;
    g->par = tio_calloc(total, sizeof *g->par);
    if (!g->par) {
        return tio_set_error(TIO_ENOMEM, "model: out of memory");
    }
    size_t idx;
    g->emb_par = g->head_par = g->normf_par = NONE;
    if (g->stage == 0) {
        add_param(g, "embed", g->vs * g->h, &idx);
        g->emb_par = (uint32_t)idx;
    }
    static const char *const lname[P_PER_LAYER] = { "attn_norm", "wq", "wk", "wv", "wo",
                                                    "ffn_norm",  "w1", "w2", "w3" };
    for (uint32_t l = 0; l < g->nlayers; l++) {
        uint64_t n[P_PER_LAYER] = { g->h, g->h * g->hq,  g->h * g->hkv, g->h * g->hkv, g->hq * g->h,
                                    g->h, g->h * g->ffn, g->ffn * g->h, g->h * g->ffn };
        for (int j = 0; j < P_PER_LAYER; j++) {
            char nm[sizeof g->par[0].name]; /* "L4294967295.attn_norm" fits */
            (void)snprintf(nm, sizeof nm, "L%u.%s", g->first_layer + l, lname[j]);
            add_param(g, nm, n[j], NULL);
        }
    }
    if (g->last) {
        add_param(g, "norm", g->h, &idx);
        g->normf_par = (uint32_t)idx;
        if (g->p->tied_embeddings && g->pp == 1) {
            g->head_par = g->emb_par;
        } else {
            add_param(g, g->p->tied_embeddings ? "output.tied" : "output", g->vs * g->h, &idx);
            g->head_par = (uint32_t)idx;
        }
    }
    /* RoPE table freqs_cis: seq x head_dim/2 complex64 */
    g->scope[0] = '\0';
    g->freqs = ten(g, (uint64_t)g->p->seq_len * g->hd * 4, TIO_TENSOR_OTHER, TIO_TENSOR_GLOBAL,
                   "freqs_cis");
    return g->rc;
}

static uint32_t ring_slot(const struct gen *g, uint32_t mb) {
    return mb % g->ring;
}

/* Tensor-name prefix: "mb<i>.<tag>" or, for a block, "mb<i>.<tag>L<layer>". */
static void set_scope(struct gen *g, uint32_t mb, const char *tag, uint32_t layer) {
    if (!g->tr) {
        return; /* the dry pass names nothing */
    }
    if (layer == NONE) {
        (void)snprintf(g->scope, sizeof g->scope, "mb%u.%s", mb, tag);
    } else {
        (void)snprintf(g->scope, sizeof g->scope, "mb%u.%sL%u", mb, tag, layer);
    }
}

static void fwd_mb(struct gen *g, uint32_t mb) {
    uint32_t slot = ring_slot(g, mb);
    uint64_t act = g->T * g->h * g->e;
    g->phase_flags = 0;
    uint32_t x;
    if (g->stage == 0) {
        set_scope(g, mb, "emb", NONE);
        uint32_t tok = ten(g, g->T * 8, TIO_TENSOR_INPUT, 0, "tokens");
        g->tokens[slot] = tok;
        x = ten(g, act, TIO_TENSOR_ACTIVATION, 0, "out");
        kb(g, "aten::embedding", C_VEC, 0);
        g->ktraffic = (double)(2 * act + g->T * 8); /* gathers T rows */
        u(g, g->par[g->emb_par].w, R);
        u(g, tok, R);
        u(g, x, W);
        (void)ke(g);
        allreduce(g, x, g->tp); /* vocab-parallel embedding */
    } else {
        set_scope(g, mb, "recv", NONE);
        x = ten(g, act, TIO_TENSOR_ACTIVATION, 0, "x");
        kb(g, "nccl:recv", C_COMM, 0);
        g->kfixed_s = g->recv_f ? g->recv_f[mb] : p2p_s(g, act);
        u(g, x, W);
        uint64_t ns = ke(g);
        uint64_t base = (uint64_t)llround(p2p_s(g, act) * 1e9);
        g->wait_ns += ns > base ? ns - base : 0;
    }
    for (uint32_t l = 0; l < g->nlayers; l++) {
        set_scope(g, mb, "", g->first_layer + l);
        struct blk *s = &g->saved[(size_t)slot * g->nlayers + l];
        block_fwd(g, x, l, 0, s);
        x = s->y;
    }
    if (g->last) {
        struct head_saved *hs = &g->hsaved[slot];
        set_scope(g, mb, "head", NONE);
        hs->x = x;
        rmsnorm_fwd(g, "norm", x, g->normf_par, TIO_TENSOR_ACTIVATION, &hs->rstd, &hs->nr, &hs->no);
        uint64_t tv = g->T * g->vs;
        uint32_t logits =
            mm(g, hs->no, g->par[g->head_par].w, g->T, g->vs, g->h, TIO_TENSOR_TEMP, "logits");
        if (g->bf16) { /* cross-entropy in fp32: pred.float() */
            logits =
                ew(g, "aten::_to_copy", 0, logits, NONE, tv * 4, TIO_TENSOR_TEMP, "logits.fp32");
        }
        hs->lsm = ew(g, "aten::_log_softmax", 4.0 * (double)tv, logits, NONE, tv * 4,
                     TIO_TENSOR_ACTIVATION, "log_softmax");
        if (g->tp > 1) { /* vocab-parallel softmax: max and sum over the shards */
            uint32_t st = ten(g, g->T * 8, TIO_TENSOR_TEMP, 0, "ce.stats");
            allreduce(g, st, g->tp);
        }
        hs->labels = ten(g, g->T * 8, TIO_TENSOR_INPUT, 0, "labels");
        uint32_t loss = ew(g, "aten::nll_loss_forward", (double)g->T, hs->lsm, hs->labels, 8,
                           TIO_TENSOR_ACTIVATION, "loss");
        (void)ew(g, "aten::div", 1, loss, NONE, 4, TIO_TENSOR_TEMP, "loss.scaled");
    } else {
        set_scope(g, mb, "send", NONE);
        kb(g, "nccl:send", C_COMM, 0);
        g->kfixed_s = p2p_s(g, act);
        u(g, x, R);
        (void)ke(g);
    }
    g->scope[0] = '\0';
}

static void bwd_mb(struct gen *g, uint32_t mb) {
    uint32_t slot = ring_slot(g, mb);
    uint64_t act = g->T * g->h * g->e;
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    g->phase_flags = TIO_KERNEL_BACKWARD;
    uint32_t gy;
    if (g->last) {
        struct head_saved *hs = &g->hsaved[slot];
        set_scope(g, mb, "head", NONE);
        uint64_t tv = g->T * g->vs;
        uint32_t glsm = ew(g, "aten::nll_loss_backward", (double)g->T, hs->labels, NONE, tv * 4,
                           k_tmp, "g.log_softmax");
        uint32_t glog = ew(g, "aten::_log_softmax_backward_data", 3.0 * (double)tv, glsm, hs->lsm,
                           tv * 4, k_tmp, "g.logits");
        if (g->bf16) {
            glog = ew(g, "aten::_to_copy", 0, glog, NONE, tv * 2, k_tmp, "g.logits.bf16");
        }
        uint32_t gno = mm(g, glog, g->par[g->head_par].w, g->T, g->h, g->vs, k_tmp, "g.norm.out");
        wgrad(g, "aten::mm", C_MM, 2.0 * (double)tv * (double)g->h, glog, hs->no, g->head_par);
        allreduce(g, gno, g->tp);
        gy = rmsnorm_bwd(g, "norm", gno, hs->x, hs->rstd, hs->nr, g->normf_par, NONE, "g.x");
    } else {
        set_scope(g, mb, "recv", NONE);
        gy = ten(g, act, k_tmp, 0, "g.y");
        kb(g, "nccl:recv", C_COMM, 0);
        g->kfixed_s = g->recv_b ? g->recv_b[mb] : p2p_s(g, act);
        u(g, gy, W);
        uint64_t ns = ke(g);
        uint64_t base = (uint64_t)llround(p2p_s(g, act) * 1e9);
        g->wait_ns += ns > base ? ns - base : 0;
    }
    for (uint32_t l = g->nlayers; l-- > 0;) {
        const struct blk *s = &g->saved[(size_t)slot * g->nlayers + l];
        if (g->ckpt) { /* recompute the block's forward from its saved input */
            struct blk rs;
            set_scope(g, mb, "rc.", g->first_layer + l);
            block_fwd(g, s->x, l, 1, &rs);
            set_scope(g, mb, "", g->first_layer + l);
            gy = block_bwd(g, gy, l, &rs);
        } else {
            set_scope(g, mb, "", g->first_layer + l);
            gy = block_bwd(g, gy, l, s);
        }
    }
    if (g->stage == 0) {
        set_scope(g, mb, "emb", NONE);
        allreduce(g, gy, g->tp);
        /* dense embedding gradient: zero-fill the whole table, scatter-add the rows */
        uint64_t tbl = g->vs * g->h;
        struct param *pa = &g->par[g->emb_par];
        uint32_t dst = pa->grad;
        int acc = g->twritten[dst] != 0;
        if (acc) {
            dst = ten(g, tbl * g->e, k_tmp, 0, "g.table");
        }
        kb(g, "aten::embedding_dense_backward", C_VEC, (double)(g->T * g->h));
        u(g, gy, R);
        u(g, g->tokens[slot], R);
        u(g, dst, W);
        (void)ke(g);
        if (acc) {
            kb(g, "aten::add_", C_VEC, (double)tbl);
            u(g, pa->grad, RW);
            u(g, dst, R);
            (void)ke(g);
        }
        g->twritten[pa->grad] = 1;
    } else {
        set_scope(g, mb, "send", NONE);
        kb(g, "nccl:send", C_COMM, 0);
        g->kfixed_s = p2p_s(g, act);
        u(g, gy, R);
        (void)ke(g);
    }
    g->scope[0] = '\0';
}

/* After the last backward: shared-embedding and data-parallel gradient all-reduces, AdamW. */
static void tail(struct gen *g) {
    g->phase_flags = 0;
    if (g->p->tied_embeddings && g->pp > 1) {
        uint32_t pi = g->stage == 0 ? g->emb_par : (g->last ? g->head_par : NONE);
        if (pi != NONE) {
            kb(g, "nccl:all_reduce", C_COMM, 0);
            g->kfixed_s = allreduce_s(g, g->par[pi].n * 4, 2);
            u(g, g->par[pi].grad, RW);
            (void)ke(g);
        }
    }
    for (size_t i = 0; i < g->npar; i++) {
        allreduce(g, g->par[i].grad, g->dp);
    }
    g->phase_flags = TIO_KERNEL_OPTIM;
    for (size_t i = 0; i < g->npar; i++) {
        struct param *pa = &g->par[i];
        double n = (double)pa->n;
        if (g->p->fused_adamw) {
            kb(g, "aten::_fused_adamw_", C_VEC, 12.0 * n);
            u(g, pa->master, RW);
            u(g, pa->grad, R);
            u(g, pa->m, RW);
            u(g, pa->v, RW);
            (void)ke(g);
        } else {
            /* torch.optim.AdamW, _single_tensor_adamw: decoupled weight decay, moments,
             * bias-corrected denominator, update */
            if (g->tr) {
                (void)snprintf(g->scope, sizeof g->scope, "%s.adamw", pa->name);
            }
            kb(g, "aten::mul_", C_VEC, n); /* param *= 1 - lr * wd */
            u(g, pa->master, RW);
            (void)ke(g);
            kb(g, "aten::lerp_", C_VEC, 3 * n); /* exp_avg.lerp_(grad, 1 - beta1) */
            u(g, pa->m, RW);
            u(g, pa->grad, R);
            (void)ke(g);
            kb(g, "aten::mul_", C_VEC, n); /* exp_avg_sq *= beta2 */
            u(g, pa->v, RW);
            (void)ke(g);
            kb(g, "aten::addcmul_", C_VEC, 3 * n); /* += (1 - beta2) grad^2 */
            u(g, pa->v, RW);
            u(g, pa->grad, R);
            (void)ke(g);
            uint32_t den = ew(g, "aten::sqrt", n, pa->v, NONE, pa->n * 4, TIO_TENSOR_TEMP, "denom");
            kb(g, "aten::div_", C_VEC, n); /* / sqrt(bias_correction2) */
            u(g, den, RW);
            (void)ke(g);
            kb(g, "aten::add_", C_VEC, n); /* + eps */
            u(g, den, RW);
            (void)ke(g);
            kb(g, "aten::addcdiv_", C_VEC, 3 * n); /* param -= step * exp_avg / denom */
            u(g, pa->master, RW);
            u(g, pa->m, R);
            u(g, den, R);
            (void)ke(g);
            g->scope[0] = '\0';
        }
        if (g->bf16) {
            kb(g, "aten::copy_", C_VEC, (double)pa->n);
            u(g, pa->master, R);
            u(g, pa->w, W);
            (void)ke(g);
        }
    }
    g->phase_flags = 0;
}

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
    tio_free(g->tfirst);
    tio_free(g->tlast);
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
        rc = emit_params(&g);
    }
    memset(c, 0, sizeof *c);
    if (rc < 0) {
        gen_fini(&g);
        return rc;
    }
    uint64_t act = g.T * g.h * g.e;
    c->cf = stage > 0 ? (double)llround(p2p_s(&g, act) * 1e9) * 1e-9 : 0;
    c->cb = !g.last ? (double)llround(p2p_s(&g, act) * 1e9) * 1e-9 : 0;
    struct mark mk;
    c->kpre = g.nk;
    c->tpre = g.nt;
    c->upre = g.nu;
    mark(&g, &mk);
    fwd_mb(&g, 0);
    snap(&g, &mk, &c->tf, &c->ff, &c->kf, &c->tf_, &c->uf);
    mark(&g, &mk);
    bwd_mb(&g, 0);
    snap(&g, &mk, &c->tb0, &c->fb0, &c->kb0, &c->tb0_, &c->ub0);
    c->tb1 = c->tb0;
    c->fb1 = c->fb0;
    c->kb1 = c->kb0;
    c->tb1_ = c->tb0_;
    c->ub1 = c->ub0;
    if (g.m > 1) {
        fwd_mb(&g, 1);
        mark(&g, &mk);
        bwd_mb(&g, 1);
        snap(&g, &mk, &c->tb1, &c->fb1, &c->kb1, &c->tb1_, &c->ub1);
    }
    mark(&g, &mk);
    tail(&g);
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

/* Peak resident bytes: globals throughout, intermediates from first to last use. */
static int liveness(const struct gen *g, uint64_t *global_bytes, uint64_t *peak, size_t *peak_k) {
    int64_t *diff = tio_calloc(g->nk + 1, sizeof *diff);
    if (!diff) {
        return tio_set_error(TIO_ENOMEM, "model: out of memory");
    }
    *global_bytes = 0;
    for (size_t t = 0; t < g->nt; t++) {
        if (g->tglobal[t]) {
            *global_bytes += g->tbytes[t];
        } else if (g->tfirst[t] != UINT32_MAX) {
            diff[g->tfirst[t]] += (int64_t)g->tbytes[t];
            diff[(size_t)g->tlast[t] + 1] -= (int64_t)g->tbytes[t];
        }
    }
    int64_t cur = 0, best = 0;
    *peak_k = 0;
    for (size_t k = 0; k < g->nk; k++) {
        cur += diff[k];
        if (cur > best) {
            best = cur;
            *peak_k = k;
        }
    }
    *peak = (uint64_t)best;
    tio_free(diff);
    return 0;
}

/* Bytes one block saves for its backward (one micro-batch), from a block emitted on its own. */
static int saved_per_block(const struct tio_model_params *p, uint32_t stage, uint64_t *out) {
    struct blk s;
    struct gen d;
    int rc = gen_init(&d, p, stage);
    if (rc >= 0) {
        rc = emit_params(&d);
    }
    if (rc < 0) {
        gen_fini(&d);
        return rc;
    }
    uint32_t x = ten(&d, d.T * d.h * d.e, TIO_TENSOR_ACTIVATION, 0, "x");
    block_fwd(&d, x, 0, 0, &s);
    const uint32_t ids[] = { s.rstd1, s.n1,    s.n1o, s.qr,  s.krep, s.vrep, s.o,  s.lse, s.oc,
                             s.hmid,  s.rstd2, s.n2,  s.n2o, s.gt,   s.ut,   s.sg, s.pr,  s.y };
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
        size_t c2 = 0, c3 = 0, c4 = 0, c5 = 0;
        if (tio_grow((void **)&g.tfirst, &c2, g.cap, sizeof *g.tfirst) < 0 ||
            tio_grow((void **)&g.tlast, &c3, g.cap, sizeof *g.tlast) < 0 ||
            tio_grow((void **)&g.tglobal, &c4, g.cap, 1) < 0 ||
            tio_grow((void **)&g.twritten, &c5, g.cap, 1) < 0) {
            rc = tio_set_error(TIO_ENOMEM, "model: out of memory");
            goto fail;
        }
        g.cap = TIO_MIN(TIO_MIN(g.cap, c2), TIO_MIN(TIO_MIN(c3, c4), c5));
    }
    g.recv_f = me > 0 ? recv : NULL;
    g.recv_b = me + 1 < npp ? recv + m : NULL;
    if ((rc = emit_params(&g)) < 0) {
        goto fail;
    }
    for (uint32_t j = 0; j < 2 * m && g.rc >= 0; j++) {
        int bwd;
        uint32_t mb;
        op_at(npp, me, m, j, &bwd, &mb);
        if (bwd) {
            bwd_mb(&g, mb);
        } else {
            fwd_mb(&g, mb);
        }
    }
    tail(&g);
    if ((rc = g.rc) < 0) {
        goto fail;
    }
    uint64_t global_bytes = 0, peak = 0, params_rank = 0;
    size_t peak_k = 0;
    if ((rc = liveness(&g, &global_bytes, &peak, &peak_k)) < 0) {
        goto fail;
    }
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
    if ((rc = tio_trace_finish(tr)) < 0) {
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
