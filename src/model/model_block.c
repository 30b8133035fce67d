/* The trace generator: RMSNorm and the transformer block (GQA attention with RoPE, SwiGLU
 * MLP), forward and backward, at aten granularity. See model_gen_impl.h and docs/model.md. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <teraio/model.h>

#include "common/common_impl.h"
#include "model/model_gen_impl.h"
#include "model/model_impl.h"

/* ---- RMSNorm (TorchTitan: x * rsqrt(mean(x^2) + eps) * weight, unfused) ------------------ */

/* "<tag>.<suffix>" into buf (names are only built for the real pass). */
static const char *
tagged(const struct gen *g, char *buf, size_t n, const char *tag, const char *suffix) {
    if (g->tr) {
        (void)snprintf(buf, n, "%s.%s", tag, suffix);
    }
    return buf;
}

void mg_rmsnorm_fwd(struct gen *g, struct mg_norm *n, int32_t ks) {
    const char *tag = n->tag;
    const uint32_t x = n->x;
    double th = (double)(g->T * g->h);
    uint64_t full = g->T * g->h * g->e, row = g->T * 4;
    char b[48] = "";
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    uint32_t sq =
        mg_ew(g, "aten::pow", th, x, NONE, full, k_tmp, tagged(g, b, sizeof b, tag, "sq"));
    uint32_t ms =
        mg_ew(g, "aten::mean", th, sq, NONE, row, k_tmp, tagged(g, b, sizeof b, tag, "mean"));
    uint32_t mse = mg_ew(g, "aten::add", (double)g->T, ms, NONE, row, k_tmp,
                         tagged(g, b, sizeof b, tag, "mean_eps"));
    n->rstd = mg_ew(g, "aten::rsqrt", (double)g->T, mse, NONE, row, ks,
                    tagged(g, b, sizeof b, tag, "rstd"));
    n->nr = mg_ew(g, "aten::mul", th, x, n->rstd, full, ks, tagged(g, b, sizeof b, tag, "normed"));
    n->no = mg_ew(g, "aten::mul", th, n->nr, g->par[n->pi].w, full, ks,
                  tagged(g, b, sizeof b, tag, "out"));
}

uint32_t mg_rmsnorm_bwd(
    struct gen *g, const struct mg_norm *n, uint32_t gout, uint32_t gres, const char *gname) {
    const uint32_t x = n->x, rstd = n->rstd, nr = n->nr;
    const size_t pi = n->pi;
    double th = (double)(g->T * g->h);
    uint64_t full = g->T * g->h * g->e, row = g->T * 4;
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    char b[48] = "";
    char gt[40];
    (void)snprintf(gt, sizeof gt, "g.%s", n->tag);
    uint32_t t1 =
        mg_ew(g, "aten::mul", th, gout, nr, full, k_tmp, tagged(g, b, sizeof b, gt, "t1"));
    mg_wgrad(g, "aten::sum", C_VEC, th, t1, NONE, pi);
    uint32_t gnr = mg_ew(g, "aten::mul", th, gout, g->par[pi].w, full, k_tmp,
                         tagged(g, b, sizeof b, gt, "normed"));
    uint32_t gx1 =
        mg_ew(g, "aten::mul", th, gnr, rstd, full, k_tmp, tagged(g, b, sizeof b, gt, "x1"));
    uint32_t t2 = mg_ew(g, "aten::mul", th, gnr, x, full, k_tmp, tagged(g, b, sizeof b, gt, "t2"));
    uint32_t grs =
        mg_ew(g, "aten::sum", th, t2, NONE, row, k_tmp, tagged(g, b, sizeof b, gt, "rstd"));
    uint32_t gms = mg_ew(g, "aten::mul", 4.0 * (double)g->T, grs, rstd, row, k_tmp,
                         tagged(g, b, sizeof b, gt, "mean"));
    uint32_t gsq =
        mg_ew(g, "aten::div", th, gms, NONE, full, k_tmp, tagged(g, b, sizeof b, gt, "sq"));
    uint32_t gx2 =
        mg_ew(g, "aten::mul", 2 * th, gsq, x, full, k_tmp, tagged(g, b, sizeof b, gt, "x2"));
    uint32_t gx = mg_ew(g, "aten::add", th, gx1, gx2, full, k_tmp,
                        gres == NONE ? gname : tagged(g, b, sizeof b, gt, "x"));
    if (gres != NONE) {
        gx = mg_ew(g, "aten::add", th, gres, gx, full, k_tmp, gname);
    }
    return gx;
}

/* ---- transformer block -------------------------------------------------------------------- */

void mg_block_fwd(struct gen *g, uint32_t x, uint32_t layer_local, int recompute, struct blk *s) {
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
    s->norm1 = (struct mg_norm){ .tag = "attn_norm", .pi = base + P_N1, .x = x };
    mg_rmsnorm_fwd(g, &s->norm1, ks);
    /* q and k are not saved: RoPE multiplies by freqs_cis, which needs no gradient, so
     * autograd keeps neither operand */
    s->q = mg_mm(g, s->norm1.no, pa[P_WQ].w, tok, g->hq, g->h, k_tmp, "q");
    s->k = mg_mm(g, s->norm1.no, pa[P_WK].w, tok, g->hkv, g->h, k_tmp, "k");
    int rep = g->hq != g->hkv;
    uint32_t v = mg_mm(g, s->norm1.no, pa[P_WV].w, tok, g->hkv, g->h, rep ? k_tmp : ks, "v");
    /* RoPE as a complex multiply with freqs_cis (saves its input q/k) */
    s->qr = mg_ew(g, "aten::mul", 3.0 * (double)(tok * g->hq), s->q, g->freqs, tok * g->hq * e, ks,
                  "q_rope");
    uint32_t kr = mg_ew(g, "aten::mul", 3.0 * (double)(tok * g->hkv), s->k, g->freqs,
                        tok * g->hkv * e, rep ? k_tmp : ks, "k_rope");
    if (rep) { /* repeat_kv: expand + reshape copies K and V to all query heads */
        s->krep = mg_ew(g, "aten::clone", 0, kr, NONE, tok * g->hq * e, ks, "k_rep");
        s->vrep = mg_ew(g, "aten::clone", 0, v, NONE, tok * g->hq * e, ks, "v_rep");
    } else {
        s->krep = kr;
        s->vrep = v;
    }
    /* fused (memory-efficient) causal attention: saves output and logsumexp */
    double af = 2.0 * (double)(g->p->micro_batch) * (double)g->a * (double)g->p->seq_len *
                (double)g->p->seq_len * (double)g->hd;
    s->o = mg_ten(g, tok * g->hq * e, ks, 0, "attn");
    s->lse = mg_ten(g, tok * g->a * 4, ks, 0, "attn.lse");
    mg_kb(g, "aten::_efficient_attention_forward", C_ATTN, af);
    mg_u(g, s->qr, R);
    mg_u(g, s->krep, R);
    mg_u(g, s->vrep, R);
    mg_u(g, s->o, W);
    mg_u(g, s->lse, W);
    (void)mg_ke(g);
    s->oc = mg_ew(g, "aten::clone", 0, s->o, NONE, tok * g->hq * e, ks, "attn.contig");
    uint32_t ao = mg_mm(g, s->oc, pa[P_WO].w, tok, g->h, g->hq, k_tmp, "attn.proj");
    mg_allreduce(g, ao, g->tp);
    s->hmid = mg_ew(g, "aten::add", th, x, ao, tok * g->h * e, ks, "h");
    s->norm2 = (struct mg_norm){ .tag = "ffn_norm", .pi = base + P_N2, .x = s->hmid };
    mg_rmsnorm_fwd(g, &s->norm2, ks);
    s->gt = mg_mm(g, s->norm2.no, pa[P_W1].w, tok, g->ffn, g->h, ks, "mlp.gate");
    s->ut = mg_mm(g, s->norm2.no, pa[P_W3].w, tok, g->ffn, g->h, ks, "mlp.up");
    double tf = (double)(tok * g->ffn);
    s->sg = mg_ew(g, "aten::silu", 4 * tf, s->gt, NONE, tok * g->ffn * e, ks, "mlp.silu");
    s->pr = mg_ew(g, "aten::mul", tf, s->sg, s->ut, tok * g->ffn * e, ks, "mlp.prod");
    uint32_t f = mg_mm(g, s->pr, pa[P_W2].w, tok, g->h, g->ffn, k_tmp, "mlp.down");
    mg_allreduce(g, f, g->tp);
    s->y = mg_ew(g, "aten::add", th, s->hmid, f, tok * g->h * e,
                 recompute ? k_tmp : TIO_TENSOR_ACTIVATION, "out");
}

uint32_t mg_block_bwd(struct gen *g, uint32_t gy, uint32_t layer_local, const struct blk *s) {
    size_t base = (size_t)(g->emb_par != NONE) + (size_t)layer_local * P_PER_LAYER;
    struct param *pa = &g->par[base];
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    uint64_t tok = g->T, e = g->e;
    double tf = (double)(tok * g->ffn), mmf = 2.0 * (double)tok * (double)g->h * (double)g->ffn;
    /* MLP: out = h + w2(silu(w1 n) * w3 n) */
    uint32_t gp = mg_mm(g, gy, pa[P_W2].w, tok, g->ffn, g->h, k_tmp, "g.mlp.prod");
    mg_wgrad(g, "aten::mm", C_MM, mmf, gy, s->pr, base + P_W2);
    uint32_t gsg = mg_ew(g, "aten::mul", tf, gp, s->ut, tok * g->ffn * e, k_tmp, "g.mlp.silu");
    uint32_t gu = mg_ew(g, "aten::mul", tf, gp, s->sg, tok * g->ffn * e, k_tmp, "g.mlp.up");
    uint32_t gg =
        mg_ew(g, "aten::silu_backward", 6 * tf, gsg, s->gt, tok * g->ffn * e, k_tmp, "g.mlp.gate");
    uint32_t gna = mg_mm(g, gu, pa[P_W3].w, tok, g->h, g->ffn, k_tmp, "g.ffn_norm.out_up");
    mg_wgrad(g, "aten::mm", C_MM, mmf, gu, s->norm2.no, base + P_W3);
    uint32_t gnb = mg_mm(g, gg, pa[P_W1].w, tok, g->h, g->ffn, k_tmp, "g.ffn_norm.out_gate");
    mg_wgrad(g, "aten::mm", C_MM, mmf, gg, s->norm2.no, base + P_W1);
    uint32_t gn2 = mg_ew(g, "aten::add", (double)(tok * g->h), gna, gnb, tok * g->h * e, k_tmp,
                         "g.ffn_norm.out");
    mg_allreduce(g, gn2, g->tp);
    uint32_t gh = mg_rmsnorm_bwd(g, &s->norm2, gn2, gy, "g.h");
    /* attention */
    double mq = 2.0 * (double)tok * (double)g->h * (double)g->hq;
    double mkv = 2.0 * (double)tok * (double)g->h * (double)g->hkv;
    uint32_t goc = mg_mm(g, gh, pa[P_WO].w, tok, g->hq, g->h, k_tmp, "g.attn");
    mg_wgrad(g, "aten::mm", C_MM, mq, gh, s->oc, base + P_WO);
    double af = 4.0 * (double)g->p->micro_batch * (double)g->a * (double)g->p->seq_len *
                (double)g->p->seq_len * (double)g->hd;
    uint32_t gq = mg_ten(g, tok * g->hq * e, k_tmp, 0, "g.q_rope");
    uint32_t gk = mg_ten(g, tok * g->hq * e, k_tmp, 0, "g.k_rep");
    uint32_t gv = mg_ten(g, tok * g->hq * e, k_tmp, 0, "g.v_rep");
    mg_kb(g, "aten::_efficient_attention_backward", C_ATTN_BWD, af);
    mg_u(g, goc, R);
    mg_u(g, s->qr, R);
    mg_u(g, s->krep, R);
    mg_u(g, s->vrep, R);
    mg_u(g, s->o, R);
    mg_u(g, s->lse, R);
    mg_u(g, gq, W);
    mg_u(g, gk, W);
    mg_u(g, gv, W);
    (void)mg_ke(g);
    if (g->hq != g->hkv) { /* repeat_kv backward: sum over the repeated heads */
        gk = mg_ew(g, "aten::sum", (double)(tok * g->hq), gk, NONE, tok * g->hkv * e, k_tmp,
                   "g.k_rope");
        gv = mg_ew(g, "aten::sum", (double)(tok * g->hq), gv, NONE, tok * g->hkv * e, k_tmp, "g.v");
    }
    uint32_t gqq = mg_ew(g, "aten::mul", 3.0 * (double)(tok * g->hq), gq, g->freqs, tok * g->hq * e,
                         k_tmp, "g.q");
    uint32_t gkk = mg_ew(g, "aten::mul", 3.0 * (double)(tok * g->hkv), gk, g->freqs,
                         tok * g->hkv * e, k_tmp, "g.k");
    uint32_t g1 = mg_mm(g, gqq, pa[P_WQ].w, tok, g->h, g->hq, k_tmp, "g.attn_norm.out_q");
    mg_wgrad(g, "aten::mm", C_MM, mq, gqq, s->norm1.no, base + P_WQ);
    uint32_t g2 = mg_mm(g, gkk, pa[P_WK].w, tok, g->h, g->hkv, k_tmp, "g.attn_norm.out_k");
    mg_wgrad(g, "aten::mm", C_MM, mkv, gkk, s->norm1.no, base + P_WK);
    uint32_t g3 = mg_mm(g, gv, pa[P_WV].w, tok, g->h, g->hkv, k_tmp, "g.attn_norm.out_v");
    mg_wgrad(g, "aten::mm", C_MM, mkv, gv, s->norm1.no, base + P_WV);
    double th = (double)(tok * g->h);
    uint32_t gn = mg_ew(g, "aten::add", th, g1, g2, tok * g->h * e, k_tmp, "g.attn_norm.out_qk");
    gn = mg_ew(g, "aten::add", th, gn, g3, tok * g->h * e, k_tmp, "g.attn_norm.out");
    mg_allreduce(g, gn, g->tp);
    return mg_rmsnorm_bwd(g, &s->norm1, gn, gh, "g.x");
}
