/* The trace generator: one pipeline stage's pieces: its parameters, a micro-batch's forward
 * and backward, and the optimizer tail. See model_gen_impl.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <teraio/model.h>

#include "common/common_impl.h"
#include "model/model_gen_impl.h"
#include "model/model_impl.h"

/* ---- stage pieces ------------------------------------------------------------------------- */

static void add_param(struct gen *g, const char *nm, uint64_t n, size_t *idx) {
    struct param *pa = &g->par[g->npar];
    const uint32_t glob = TIO_TENSOR_GLOBAL;
    (void)snprintf(g->scope, sizeof g->scope, "%s", nm);
    (void)snprintf(pa->name, sizeof pa->name, "%s", nm);
    if (g->bf16) {
        pa->master = mg_ten(g, n * 4, TIO_TENSOR_WEIGHT, glob, "master");
        pa->w = mg_ten(g, n * 2, TIO_TENSOR_WEIGHT, glob, "bf16");
    } else {
        pa->master = pa->w = mg_ten(g, n * 4, TIO_TENSOR_WEIGHT, glob, "weight");
    }
    pa->grad = mg_ten(g, n * 4, TIO_TENSOR_GRAD, glob, "grad");
    pa->m = mg_ten(g, n * 4, TIO_TENSOR_OPTIM_STATE, glob, "exp_avg");
    pa->v = mg_ten(g, n * 4, TIO_TENSOR_OPTIM_STATE, glob, "exp_avg_sq");
    pa->n = n;
    if (idx) {
        *idx = g->npar;
    }
    g->npar++;
    g->scope[0] = '\0';
}

int mg_emit_params(struct gen *g) {
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
    g->freqs = mg_ten(g, (uint64_t)g->p->seq_len * g->hd * 4, TIO_TENSOR_OTHER, TIO_TENSOR_GLOBAL,
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

/* A pipeline send of tensor t (`act` bytes) to the next or previous stage. */
static void send_to_stage(struct gen *g, uint32_t mb, uint64_t act, uint32_t t) {
    set_scope(g, mb, "send", NONE);
    mg_kb(g, "nccl:send", C_COMM, 0);
    g->kfixed_s = mg_p2p_s(g, act);
    mg_u(g, t, R);
    (void)mg_ke(g);
}

/* A pipeline receive of `act` bytes into a new tensor (kind, name nm): the kernel lasts the
 * wait the schedule replay found (waits[mb]; NULL: the transfer alone), and what exceeds the
 * transfer counts as waiting. The new tensor. */
static uint32_t recv_from_stage(
    struct gen *g, uint32_t mb, uint64_t act, int32_t kind, const char *nm, const double *waits) {
    set_scope(g, mb, "recv", NONE);
    uint32_t x = mg_ten(g, act, kind, 0, nm);
    mg_kb(g, "nccl:recv", C_COMM, 0);
    g->kfixed_s = waits ? waits[mb] : mg_p2p_s(g, act);
    mg_u(g, x, W);
    uint64_t ns = mg_ke(g);
    uint64_t base = (uint64_t)llround(mg_p2p_s(g, act) * 1e9);
    g->wait_ns += ns > base ? ns - base : 0;
    return x;
}

void mg_fwd_mb(struct gen *g, uint32_t mb) {
    uint32_t slot = ring_slot(g, mb);
    uint64_t act = g->T * g->h * g->e;
    g->phase_flags = 0;
    uint32_t x;
    if (g->stage == 0) {
        set_scope(g, mb, "emb", NONE);
        uint32_t tok = mg_ten(g, g->T * 8, TIO_TENSOR_INPUT, 0, "tokens");
        g->tokens[slot] = tok;
        x = mg_ten(g, act, TIO_TENSOR_ACTIVATION, 0, "out");
        mg_kb(g, "aten::embedding", C_VEC, 0);
        g->ktraffic = (double)(2 * act + g->T * 8); /* gathers T rows */
        mg_u(g, g->par[g->emb_par].w, R);
        mg_u(g, tok, R);
        mg_u(g, x, W);
        (void)mg_ke(g);
        mg_allreduce(g, x, g->tp); /* vocab-parallel embedding */
    } else {
        x = recv_from_stage(g, mb, act, TIO_TENSOR_ACTIVATION, "x", g->recv_f);
    }
    for (uint32_t l = 0; l < g->nlayers; l++) {
        set_scope(g, mb, "", g->first_layer + l);
        struct blk *s = &g->saved[(size_t)slot * g->nlayers + l];
        mg_block_fwd(g, x, l, 0, s);
        x = s->y;
    }
    if (g->last) {
        struct head_saved *hs = &g->hsaved[slot];
        set_scope(g, mb, "head", NONE);
        hs->norm = (struct mg_norm){ .tag = "norm", .pi = g->normf_par, .x = x };
        mg_rmsnorm_fwd(g, &hs->norm, TIO_TENSOR_ACTIVATION);
        uint64_t tv = g->T * g->vs;
        uint32_t logits = mg_mm(g, hs->norm.no, g->par[g->head_par].w, g->T, g->vs, g->h,
                                TIO_TENSOR_TEMP, "logits");
        if (g->bf16) { /* cross-entropy in fp32: pred.float() */
            logits =
                mg_ew(g, "aten::_to_copy", 0, logits, NONE, tv * 4, TIO_TENSOR_TEMP, "logits.fp32");
        }
        hs->lsm = mg_ew(g, "aten::_log_softmax", 4.0 * (double)tv, logits, NONE, tv * 4,
                        TIO_TENSOR_ACTIVATION, "log_softmax");
        if (g->tp > 1) { /* vocab-parallel softmax: max and sum over the shards */
            uint32_t st = mg_ten(g, g->T * 8, TIO_TENSOR_TEMP, 0, "ce.stats");
            mg_allreduce(g, st, g->tp);
        }
        hs->labels = mg_ten(g, g->T * 8, TIO_TENSOR_INPUT, 0, "labels");
        uint32_t loss = mg_ew(g, "aten::nll_loss_forward", (double)g->T, hs->lsm, hs->labels, 8,
                              TIO_TENSOR_ACTIVATION, "loss");
        (void)mg_ew(g, "aten::div", 1, loss, NONE, 4, TIO_TENSOR_TEMP, "loss.scaled");
    } else {
        send_to_stage(g, mb, act, x);
    }
    g->scope[0] = '\0';
}

void mg_bwd_mb(struct gen *g, uint32_t mb) {
    uint32_t slot = ring_slot(g, mb);
    uint64_t act = g->T * g->h * g->e;
    const int32_t k_tmp = TIO_TENSOR_TEMP;
    g->phase_flags = TIO_KERNEL_BACKWARD;
    uint32_t gy;
    if (g->last) {
        struct head_saved *hs = &g->hsaved[slot];
        set_scope(g, mb, "head", NONE);
        uint64_t tv = g->T * g->vs;
        uint32_t glsm = mg_ew(g, "aten::nll_loss_backward", (double)g->T, hs->labels, NONE, tv * 4,
                              k_tmp, "g.log_softmax");
        uint32_t glog = mg_ew(g, "aten::_log_softmax_backward_data", 3.0 * (double)tv, glsm,
                              hs->lsm, tv * 4, k_tmp, "g.logits");
        if (g->bf16) {
            glog = mg_ew(g, "aten::_to_copy", 0, glog, NONE, tv * 2, k_tmp, "g.logits.bf16");
        }
        uint32_t gno =
            mg_mm(g, glog, g->par[g->head_par].w, g->T, g->h, g->vs, k_tmp, "g.norm.out");
        mg_wgrad(g, "aten::mm", C_MM, 2.0 * (double)tv * (double)g->h, glog, hs->norm.no,
                 g->head_par);
        mg_allreduce(g, gno, g->tp);
        gy = mg_rmsnorm_bwd(g, &hs->norm, gno, NONE, "g.x");
    } else {
        gy = recv_from_stage(g, mb, act, k_tmp, "g.y", g->recv_b);
    }
    for (uint32_t l = g->nlayers; l-- > 0;) {
        const struct blk *s = &g->saved[(size_t)slot * g->nlayers + l];
        if (g->ckpt) { /* recompute the block's forward from its saved input */
            struct blk rs;
            set_scope(g, mb, "rc.", g->first_layer + l);
            mg_block_fwd(g, s->x, l, 1, &rs);
            set_scope(g, mb, "", g->first_layer + l);
            gy = mg_block_bwd(g, gy, l, &rs);
        } else {
            set_scope(g, mb, "", g->first_layer + l);
            gy = mg_block_bwd(g, gy, l, s);
        }
    }
    if (g->stage == 0) {
        set_scope(g, mb, "emb", NONE);
        mg_allreduce(g, gy, g->tp);
        /* dense embedding gradient: zero-fill the whole table, scatter-add the rows */
        uint64_t tbl = g->vs * g->h;
        struct param *pa = &g->par[g->emb_par];
        uint32_t dst = pa->grad;
        int acc = g->twritten[dst] != 0;
        if (acc) {
            dst = mg_ten(g, tbl * g->e, k_tmp, 0, "g.table");
        }
        mg_kb(g, "aten::embedding_dense_backward", C_VEC, (double)(g->T * g->h));
        mg_u(g, gy, R);
        mg_u(g, g->tokens[slot], R);
        mg_u(g, dst, W);
        (void)mg_ke(g);
        if (acc) {
            mg_kb(g, "aten::add_", C_VEC, (double)tbl);
            mg_u(g, pa->grad, RW);
            mg_u(g, dst, R);
            (void)mg_ke(g);
        }
        g->twritten[pa->grad] = 1;
    } else {
        send_to_stage(g, mb, act, gy);
    }
    g->scope[0] = '\0';
}

/* After the last backward: shared-embedding and data-parallel gradient all-reduces, AdamW. */
void mg_tail(struct gen *g) {
    g->phase_flags = 0;
    if (g->p->tied_embeddings && g->pp > 1) {
        uint32_t pi = g->stage == 0 ? g->emb_par : (g->last ? g->head_par : NONE);
        if (pi != NONE) {
            mg_kb(g, "nccl:all_reduce", C_COMM, 0);
            g->kfixed_s = mg_allreduce_s(g, g->par[pi].n * 4, 2);
            mg_u(g, g->par[pi].grad, RW);
            (void)mg_ke(g);
        }
    }
    for (size_t i = 0; i < g->npar; i++) {
        mg_allreduce(g, g->par[i].grad, g->dp);
    }
    g->phase_flags = TIO_KERNEL_OPTIM;
    for (size_t i = 0; i < g->npar; i++) {
        struct param *pa = &g->par[i];
        double n = (double)pa->n;
        if (g->p->fused_adamw) {
            mg_kb(g, "aten::_fused_adamw_", C_VEC, 12.0 * n);
            mg_u(g, pa->master, RW);
            mg_u(g, pa->grad, R);
            mg_u(g, pa->m, RW);
            mg_u(g, pa->v, RW);
            (void)mg_ke(g);
        } else {
            /* torch.optim.AdamW, _single_tensor_adamw: decoupled weight decay, moments,
             * bias-corrected denominator, update */
            if (g->tr) {
                (void)snprintf(g->scope, sizeof g->scope, "%s.adamw", pa->name);
            }
            mg_kb(g, "aten::mul_", C_VEC, n); /* param *= 1 - lr * wd */
            mg_u(g, pa->master, RW);
            (void)mg_ke(g);
            mg_kb(g, "aten::lerp_", C_VEC, 3 * n); /* exp_avg.lerp_(grad, 1 - beta1) */
            mg_u(g, pa->m, RW);
            mg_u(g, pa->grad, R);
            (void)mg_ke(g);
            mg_kb(g, "aten::mul_", C_VEC, n); /* exp_avg_sq *= beta2 */
            mg_u(g, pa->v, RW);
            (void)mg_ke(g);
            mg_kb(g, "aten::addcmul_", C_VEC, 3 * n); /* += (1 - beta2) grad^2 */
            mg_u(g, pa->v, RW);
            mg_u(g, pa->grad, R);
            (void)mg_ke(g);
            uint32_t den =
                mg_ew(g, "aten::sqrt", n, pa->v, NONE, pa->n * 4, TIO_TENSOR_TEMP, "denom");
            mg_kb(g, "aten::div_", C_VEC, n); /* / sqrt(bias_correction2) */
            mg_u(g, den, RW);
            (void)mg_ke(g);
            mg_kb(g, "aten::add_", C_VEC, n); /* + eps */
            mg_u(g, den, RW);
            (void)mg_ke(g);
            mg_kb(g, "aten::addcdiv_", C_VEC, 3 * n); /* param -= step * exp_avg / denom */
            mg_u(g, pa->master, RW);
            mg_u(g, pa->m, R);
            mg_u(g, den, R);
            (void)mg_ke(g);
            g->scope[0] = '\0';
        }
        if (g->bf16) {
            mg_kb(g, "aten::copy_", C_VEC, (double)pa->n);
            mg_u(g, pa->master, R);
            mg_u(g, pa->w, W);
            (void)mg_ke(g);
        }
    }
    g->phase_flags = 0;
}
