/*
 * teraio/model.h - training traces of decoder-only transformers, without running anything.
 *
 * The workload model (docs/model.md) emits one training iteration of one GPU (rank) as a trace:
 * every operator of the forward pass, its backward, the gradient accumulation, the
 * communication (pipeline p2p, tensor-parallel and data-parallel all-reduce) and an AdamW step
 * per parameter, at roughly aten granularity, with the exact tensors each one reads and writes.
 * Durations come from a roofline model of a GPU preset:
 *
 *     duration = max(FLOPs / (peak FLOP/s * efficiency), bytes / (HBM B/s * efficiency))
 *                + launch overhead
 *
 * Formulas, preset values and efficiency factors are listed with their sources in docs/model.md.
 *
 *     struct tio_model_params p;
 *     if (tio_model_preset("llama3-8b", &p) < 0) ...     // the paper's setting: 2-stage 1F1B
 *     p.seq_len = 2048;                                   // what-if
 *     p.rank = 1;                                         // second pipeline stage
 *     struct tio_trace *tr;
 *     struct tio_model_info info;
 *     if (tio_model_generate(&p, &tr, &info) < 0)
 *         fprintf(stderr, "%s\n", tio_last_error());      // names the field to change
 *     printf("peak %.1f%% of the GPU\n", 100.0 * info.memory_ratio);
 *     tio_trace_free(tr);
 *
 * Thread safety: the functions keep no global state and may be called from several threads.
 */
#ifndef TERAIO_MODEL_H
#define TERAIO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>
#include <teraio/trace.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TIO_MODEL_NAME_MAX 64

/* Numeric precision of the training run. Stored as int32_t. */
enum tio_model_precision {
    TIO_PRECISION_FP32 = 0, /* everything fp32 (the paper), matmuls on the fp32 (SIMT) pipes */
    TIO_PRECISION_BF16 = 1, /* mixed: bf16 weights copy, activations and matmuls; fp32 master
                               weights, gradients and AdamW moments */
    TIO_PRECISION_COUNT
};

/*
 * A GPU for the roofline model. Rates are per GPU, dense (no sparsity), decimal bytes/s.
 * Efficiency factors are the fraction of the peak a kernel class reaches (docs/model.md).
 */
struct tio_gpu {
    char name[TIO_MODEL_NAME_MAX]; /* "h100-nvl" */
    uint64_t memory_bytes;         /* HBM capacity, bytes */
    double fp32_flops;             /* peak fp32 FLOP/s on the CUDA cores (non-tensor) */
    double tf32_flops;             /* peak dense TF32 tensor-core FLOP/s */
    double bf16_flops;             /* peak dense BF16 tensor-core FLOP/s */
    double hbm_Bps;                /* HBM bandwidth, bytes/s */
    double link_Bps;               /* GPU-GPU bandwidth per direction (NVLink), bytes/s */
    double link_latency_s;         /* per-message latency of p2p / collectives, s */
    double mm_efficiency;          /* matmul: achieved / peak FLOP/s, (0, 1] */
    double attn_efficiency;        /* fused attention forward: achieved / peak FLOP/s, (0, 1] */
    double attn_bwd_efficiency;    /* fused attention backward (recomputes P), (0, 1] */
    double vector_efficiency;      /* elementwise / reductions: achieved / peak FP32 FLOP/s */
    double mem_efficiency;         /* achieved / peak HBM bandwidth, (0, 1] */
    double link_efficiency;        /* achieved / peak link bandwidth, (0, 1] */
    double launch_overhead_s;      /* per-kernel launch and dispatch gap, s */
};

/* tio_gpu_preset: "h100-nvl" (94 GiB), "h100-sxm" (80 GiB), "h200" (141 GB), "a100-80gb".
 * Returns 0 or TIO_ENOTFOUND (detail lists the known names). */
TIO_API TIO_MUST_CHECK int tio_gpu_preset(const char *name, struct tio_gpu *out);
TIO_API size_t tio_gpu_preset_count(void);
TIO_API const char *tio_gpu_preset_name(size_t i); /* NULL when out of range */

struct tio_model_params {
    /* Size of this struct as the caller's header declares it: set by tio_model_params_default(s)
     * and tio_model_preset (docs/style.md, "Versioned structs"). */
    uint32_t struct_size;
    char model[TIO_MODEL_NAME_MAX]; /* name for metadata ("llama3-8b", "custom") */
    /* architecture */
    uint32_t layers;         /* transformer blocks */
    uint32_t hidden;         /* model width d */
    uint32_t heads;          /* query heads */
    uint32_t kv_heads;       /* key/value heads (grouped-query attention), divides heads */
    uint32_t head_dim;       /* per-head width; 0 = hidden / heads */
    uint32_t ffn_hidden;     /* SwiGLU inner width */
    uint32_t vocab;          /* vocabulary size */
    int32_t tied_embeddings; /* 1: LM head shares the embedding matrix */
    /* training */
    uint32_t global_batch; /* sequences per iteration, over all data-parallel replicas */
    uint32_t micro_batch;  /* sequences per micro-batch */
    uint32_t seq_len;      /* tokens per sequence */
    int32_t precision;     /* enum tio_model_precision */
    uint32_t dp;           /* data-parallel degree */
    uint32_t tp;           /* tensor-parallel degree (Megatron-style, divides heads) */
    uint32_t pp;           /* pipeline stages (1F1B over the micro-batches) */
    uint32_t rank;         /* which GPU's trace: rank = (stage * dp + dp_index) * tp + tp_index */
    int32_t checkpointing; /* 1: activation checkpointing per block (recompute in backward) */
    uint32_t grad_accum;   /* micro-batches per iteration; 0 = global_batch/(micro_batch*dp),
                              else it must equal that */
    int32_t allow_tf32;    /* fp32 only: 1 = matmuls on TF32 tensor cores (PyTorch's
                              allow_tf32); 0 = true fp32 (PyTorch default, the paper) */
    struct tio_gpu gpu;    /* the GPU the durations are modelled for */
    int32_t fused_adamw;   /* 0: PyTorch's per-parameter AdamW loop (foreach=False: 8 kernels
                              per parameter, at most 3 tensors each, the paper's granularity);
                              1: one fused kernel per parameter (all 4 tensors at once) */
};

/* tio_model_params_defaults: fill the `size` bytes of *out (size = sizeof *out) with the
 * defaults (llama3-8b at the paper's characterization setting on h100-nvl) as far as this
 * library knows them (a newer header's extra fields are zeroed), and set out->struct_size.
 * Returns 0; TIO_EINVAL (NULL), TIO_EVERSION (size below the first versioned struct
 * tio_model_params). */
TIO_API int tio_model_params_defaults(struct tio_model_params *out, size_t size);
/* tio_model_params_default: the same by value. Inline, so that the size is the one this header
 * declares: not an exported function, whose by-value struct would be the library's size
 * (docs/style.md, "Versioned structs"). */
static inline struct tio_model_params tio_model_params_default(void) {
    struct tio_model_params p;
    (void)tio_model_params_defaults(&p, sizeof p);
    return p;
}

/*
 * tio_model_preset: fill *out with a named preset (architecture + the paper's setting for it):
 * "llama3-8b", "llama3-70b", "granite-code-8b", "tiny", "small". Returns 0 or TIO_ENOTFOUND
 * (detail lists the known names).
 */
TIO_API TIO_MUST_CHECK int tio_model_preset(const char *name, struct tio_model_params *out);
TIO_API size_t tio_model_preset_count(void);
TIO_API const char *tio_model_preset_name(size_t i); /* NULL when out of range */

/*
 * tio_model_validate: check the parameters. Returns 0 or TIO_EINVAL with a detail that names the
 * field and says what to change (e.g. "model: global_batch 100 is not divisible by micro_batch 4
 * x dp 1; use a multiple of 4").
 */
TIO_API TIO_MUST_CHECK int tio_model_validate(const struct tio_model_params *params);

/* tio_model_param_count: parameters of the whole model (all ranks), tied embeddings once. */
TIO_API uint64_t tio_model_param_count(const struct tio_model_params *params);

/* What tio_model_generate computed besides the trace. */
struct tio_model_info {
    uint64_t params_total;         /* parameters of the whole model */
    uint64_t params_rank;          /* parameters held by this rank */
    uint64_t tokens_per_iteration; /* global_batch * seq_len */
    uint32_t micro_batches;        /* per iteration and replica (gradient accumulation steps) */
    uint32_t stage;                /* this rank's pipeline stage */
    uint32_t stage_first_layer;    /* first block of this stage */
    uint32_t stage_layers;         /* blocks in this stage */
    size_t n_kernels, n_tensors, n_uses;
    double flops_per_iteration;          /* FLOPs of this rank's kernels */
    double model_flops_per_iteration;    /* FLOPs of all ranks together */
    uint64_t global_bytes;               /* weights + grads + optimizer states (+ buffers) here */
    uint64_t peak_bytes;                 /* max over kernels of resident bytes, nothing offloaded */
    size_t peak_kernel;                  /* first kernel at the peak */
    uint64_t capacity_bytes;             /* gpu.memory_bytes */
    double memory_ratio;                 /* peak_bytes / capacity_bytes */
    uint64_t activation_bytes_per_layer; /* bytes saved for backward by one block for one
                                            micro-batch (this rank's share under tp) */
    double ideal_iteration_s;  /* 1F1B makespan over all stages, incl. bubbles and optimizer */
    double rank_busy_s;        /* this rank's kernel time without pipeline waits */
    double ideal_tokens_per_s; /* tokens_per_iteration / ideal_iteration_s */
};

/*
 * tio_model_generate: build this rank's trace for one iteration (finished, with metadata
 * "model", "gpu", "tokens_per_iteration", "rank", "pp", "precision", "source" = "teraio model",
 * "capacity_bytes"), and fill *info if not NULL. Deterministic: the same parameters give the
 * same trace. Returns 0, TIO_EINVAL (bad parameters, see tio_model_validate) or TIO_ENOMEM.
 * The caller frees *out with tio_trace_free.
 */
TIO_API TIO_MUST_CHECK int tio_model_generate(const struct tio_model_params *params,
                                              struct tio_trace **out,
                                              struct tio_model_info *info);

/* tio_model_precision_name / parse: "fp32", "bf16". parse returns the value or TIO_EINVAL. */
TIO_API const char *tio_model_precision_name(int32_t precision);
TIO_API int tio_model_precision_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif
