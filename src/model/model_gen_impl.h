/* The trace generator's internals (model_*.c): the generator's state and the emitters its
 * files share. Private; read model_gen.c first.
 *
 * Reading order: model_gen.c (the two passes, the 1F1B schedule, tio_model_generate),
 * model_emit.c (tensors, kernels and uses, matmuls, elementwise ops, communication),
 * model_block.c (RMSNorm and the transformer block, forward and backward), model_stage.c
 * (a pipeline stage: parameters, one micro-batch forward and backward, the optimizer tail). */
#ifndef TIO_MODEL_GEN_IMPL_H
#define TIO_MODEL_GEN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/model.h>
#include <teraio/trace.h>

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

/* One RMSNorm: what names it and what it normalizes (set before mg_rmsnorm_fwd), and what its
 * forward saves for the backward. */
struct mg_norm {
    const char *tag; /* tensors "<tag>.<what>", gradients "g.<tag>.<what>" */
    size_t pi;       /* its weight's parameter */
    uint32_t x;      /* its input */
    uint32_t rstd;   /* saved: 1 / rms per row */
    uint32_t nr;     /* saved: x * rstd */
    uint32_t no;     /* the output, nr * weight */
};

/* What a block's forward saves for its backward (norm1.x is x, norm2.x is hmid). */
struct blk {
    uint32_t x, q, k, qr, krep, vrep, o, lse, oc, hmid, gt, ut, sg, pr, y;
    struct mg_norm norm1, norm2;
};

struct head_saved {
    struct mg_norm norm;
    uint32_t lsm, labels;
};

struct use_buf {
    uint32_t t;
    int32_t mode;
};

struct gen {
    const struct tio_model_params *p;
    struct tio_trace *tr; /* NULL in the dry pass */
    int rc;               /* sticky: the first failure */
    /* own tensor table (traffic; liveness comes from the finished trace) */
    size_t nt, cap;
    uint64_t *tbytes;
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

/* ---- model_emit.c ---- */

/* A new tensor of `bytes` (kind, flags, name under the current scope); its id. On failure
 * g->rc is set and later calls do nothing. */
uint32_t mg_ten(struct gen *g, uint64_t bytes, int32_t kind, uint32_t flags, const char *nm);

/* Kernel building: mg_kb begins a kernel (name, roofline class, FLOPs), mg_u adds a use of
 * tensor t (NONE: none), mg_ke ends it, timing it by the roofline model (FLOPs or bytes moved,
 * whichever is slower); mg_ke returns its duration in ns. */
void mg_kb(struct gen *g, const char *name, int cls, double flops);

void mg_u(struct gen *g, uint32_t t, int32_t mode);

uint64_t mg_ke(struct gen *g);

/* A pipeline point-to-point transfer of `bytes`, seconds. */
double mg_p2p_s(const struct gen *g, uint64_t bytes);

/* Ring all-reduce over n GPUs: 2(n-1)/n of the bytes cross each link, 2(n-1) steps. */
double mg_allreduce_s(const struct gen *g, uint64_t bytes, uint32_t n);

/* An all-reduce kernel of tensor t over n GPUs (none when n <= 1). */
void mg_allreduce(struct gen *g, uint32_t t, uint32_t n);

/* y = op(x[, x2]) elementwise: flops per output element. */
uint32_t mg_ew(struct gen *g,
               const char *kn,
               double flops,
               uint32_t x,
               uint32_t x2,
               uint64_t obytes,
               int32_t kind,
               const char *nm);

/* y[M,N] = x[M,K] . w[K,N] */
uint32_t mg_mm(struct gen *g,
               uint32_t x,
               uint32_t w,
               uint64_t rows,
               uint64_t cols,
               uint64_t inner,
               int32_t kind,
               const char *nm);

/*
 * Weight gradient into the persistent gradient grad of parameter pi: the first contribution of the
 * iteration writes grad; later ones accumulate. fp32 (PyTorch AccumulateGrad): a temporary then
 * `aten::add_`. bf16: the matmul accumulates into the fp32 main gradient (Megatron's fused
 * gradient accumulation), so no extra kernel.
 */
void mg_wgrad(
    struct gen *g, const char *kn, int cls, double flops, uint32_t a, uint32_t b, size_t pi);

/* ---- model_block.c ---- */

/* RMSNorm n of n->x with parameter n->pi (TorchTitan, unfused): sets the saved n->rstd, n->nr
 * and the output n->no, saved as kind ks. */
void mg_rmsnorm_fwd(struct gen *g, struct mg_norm *n, int32_t ks);

/* The backward of n from the output gradient gout: returns the gradient of n->x, plus `gres`
 * (the residual branch's gradient) if not NONE, named `gname`. */
uint32_t mg_rmsnorm_bwd(
    struct gen *g, const struct mg_norm *n, uint32_t gout, uint32_t gres, const char *gname);

/* One transformer block: forward of x (recompute: the checkpointed re-run), saving what the
 * backward needs in *s; backward of gradient gy; each returns the output (gradient). */
void mg_block_fwd(struct gen *g, uint32_t x, uint32_t layer_local, int recompute, struct blk *s);

uint32_t mg_block_bwd(struct gen *g, uint32_t gy, uint32_t layer_local, const struct blk *s);

/* ---- model_stage.c ---- */

/* The stage's parameters (weights, gradients, AdamW moments) as global tensors. 0 or
 * TIO_ENOMEM. */
int mg_emit_params(struct gen *g);

/* One micro-batch's forward and backward through the stage, with its p2p transfers. */
void mg_fwd_mb(struct gen *g, uint32_t mb);

void mg_bwd_mb(struct gen *g, uint32_t mb);

/* After the last backward: shared-embedding and data-parallel gradient all-reduces, AdamW. */
void mg_tail(struct gen *g);

#endif
