/*
 * Model and GPU presets, parameter defaults and validation (teraio/model.h).
 * Every value is listed with its source in docs/model.md.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <teraio/model.h>

#include "common/common_impl.h"
#include "model/model_impl.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Efficiency factors shared by every GPU preset (docs/model.md, "Efficiency factors"). */
#define EFF_MM       0.75
#define EFF_ATTN     0.50
#define EFF_ATTN_BWD 0.40
#define EFF_VECTOR   0.50
#define EFF_MEM      0.85
#define EFF_LINK     0.80
#define LINK_LAT_S   10e-6
#define LAUNCH_S     4e-6

#define GPU_COMMON                                                                      \
    .link_latency_s = LINK_LAT_S, .mm_efficiency = EFF_MM, .attn_efficiency = EFF_ATTN, \
    .attn_bwd_efficiency = EFF_ATTN_BWD, .vector_efficiency = EFF_VECTOR,               \
    .mem_efficiency = EFF_MEM, .link_efficiency = EFF_LINK, .launch_overhead_s = LAUNCH_S

/* Datasheet peaks; tensor-core rates are the dense ones (half of the "with sparsity" figures). */
static const struct tio_gpu gpu_presets[] = {
    { .name = "h100-nvl",
      .memory_bytes = (uint64_t)(94 * GIB),
      .fp32_flops = 60e12,
      .tf32_flops = 417.5e12,
      .bf16_flops = 835e12,
      .hbm_Bps = 3.9e12,
      .link_Bps = 300e9, /* NVLink bridge 600 GB/s bidirectional */
      GPU_COMMON },
    { .name = "h100-sxm",
      .memory_bytes = (uint64_t)(80 * GIB),
      .fp32_flops = 67e12,
      .tf32_flops = 494.5e12,
      .bf16_flops = 989.5e12,
      .hbm_Bps = 3.35e12,
      .link_Bps = 450e9, /* NVLink 4: 900 GB/s bidirectional */
      GPU_COMMON },
    { .name = "h200",
      .memory_bytes = (uint64_t)(141 * GIB),
      .fp32_flops = 67e12,
      .tf32_flops = 494.5e12,
      .bf16_flops = 989.5e12,
      .hbm_Bps = 4.8e12,
      .link_Bps = 450e9,
      GPU_COMMON },
    { .name = "a100-80gb",
      .memory_bytes = (uint64_t)(80 * GIB),
      .fp32_flops = 19.5e12,
      .tf32_flops = 156e12,
      .bf16_flops = 312e12,
      .hbm_Bps = 2.039e12,
      .link_Bps = 300e9, /* NVLink 3: 600 GB/s bidirectional */
      GPU_COMMON },
};

struct arch_preset {
    const char *name;
    uint32_t layers, hidden, heads, kv_heads, ffn_hidden, vocab;
    int32_t tied;
    /* the paper's setting for this model (paper §2 and §4.1) */
    uint32_t global_batch, micro_batch, seq_len, pp;
};

static const struct arch_preset arch_presets[] = {
    /* Meta Llama 3 8B config.json: 32 layers, d 4096, 32 heads, 8 KV heads, FFN 14336,
     * vocab 128256, untied. Paper s.2: batch 128, sequence 4096, 2-stage 1F1B. */
    { "llama3-8b", 32, 4096, 32, 8, 14336, 128256, 0, 128, 4, 4096, 2 },
    /* Meta Llama 3 70B: 80 layers, d 8192, 64 heads, 8 KV heads, FFN 28672. Paper s.2: batch
     * 256, sequence 2048. */
    { "llama3-70b", 80, 8192, 64, 8, 28672, 128256, 0, 256, 4, 2048, 2 },
    /* IBM granite-8b-code-base (Llama architecture): 36 layers, d 4096, 32 heads, 8 KV heads,
     * FFN 14336, vocab 49152, tied embeddings (8.05 B on its model card). Paper s.9.1: batch 64,
     * sequence 4096. */
    { "granite-code-8b", 36, 4096, 32, 8, 14336, 49152, 1, 64, 4, 4096, 2 },
    /* Small ones for tests. */
    { "tiny", 2, 64, 4, 2, 128, 256, 0, 4, 1, 32, 1 },
    { "small", 4, 256, 8, 4, 768, 1024, 0, 8, 2, 128, 2 },
};

/*
 * *index = the preset i with name_of(i) equal to name (name_of returns NULL past the end); else
 * TIO_ENOTFOUND "model: unknown <what> '<name>'; use one of <every name><hint>".
 */
static int find_preset(const char *(*name_of)(size_t),
                       const char *what,
                       const char *hint,
                       const char *name,
                       size_t *index) {
    char list[256] = "";
    size_t len = 0;
    const char *s;
    for (size_t i = 0; (s = name_of(i)) != NULL; i++) {
        if (name && strcmp(name, s) == 0) {
            *index = i;
            return 0;
        }
        int n = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", s);
        len = n < 0 ? len : TIO_MIN(len + (size_t)n, sizeof list - 1);
    }
    return tio_set_error(TIO_ENOTFOUND, "model: unknown %s '%s'; use one of %s%s", what,
                         name ? name : "(null)", list, hint);
}

int tio_gpu_preset(const char *name, struct tio_gpu *out) {
    size_t i = 0;
    int rc = find_preset(tio_gpu_preset_name, "GPU", "", name, &i);
    if (rc == 0) {
        *out = gpu_presets[i];
    }
    return rc;
}

size_t tio_gpu_preset_count(void) {
    return TIO_ARRAY_LEN(gpu_presets);
}

const char *tio_gpu_preset_name(size_t i) {
    return i < TIO_ARRAY_LEN(gpu_presets) ? gpu_presets[i].name : NULL;
}

static void apply_arch(const struct arch_preset *a, struct tio_model_params *p) {
    (void)snprintf(p->model, sizeof p->model, "%s", a->name);
    p->layers = a->layers;
    p->hidden = a->hidden;
    p->heads = a->heads;
    p->kv_heads = a->kv_heads;
    p->head_dim = 0;
    p->ffn_hidden = a->ffn_hidden;
    p->vocab = a->vocab;
    p->tied_embeddings = a->tied;
    p->global_batch = a->global_batch;
    p->micro_batch = a->micro_batch;
    p->seq_len = a->seq_len;
    p->pp = a->pp;
}

/* The first versioned struct tio_model_params ends with fused_adamw (fixed: fields only
 * grow). */
#define MODEL_PARAMS_MIN TIO_SIZE_THROUGH(struct tio_model_params, fused_adamw)

/* The defaults tio_model_params_defaults hands out (the header's tio_model_params_default goes
 * through it). */
static struct tio_model_params builtin_defaults(void) {
    struct tio_model_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    apply_arch(&arch_presets[0], &p);
    p.precision = TIO_PRECISION_FP32;
    p.dp = 1;
    p.tp = 1;
    p.rank = 0;
    p.checkpointing = 0;
    p.grad_accum = 0;
    p.allow_tf32 = 0;
    p.gpu = gpu_presets[0];
    return p;
}

int tio_model_params_defaults(struct tio_model_params *out, size_t size) {
    struct tio_model_params d = builtin_defaults();
    return tio_struct_out("tio_model_params", out, size, &d, sizeof d, MODEL_PARAMS_MIN);
}

int tio_model_preset(const char *name, struct tio_model_params *out) {
    size_t i = 0;
    int rc = find_preset(tio_model_preset_name, "preset",
                         " (or --preset custom with --layers/--hidden/...)", name, &i);
    if (rc == 0) {
        *out = tio_model_params_default();
        apply_arch(&arch_presets[i], out);
    }
    return rc;
}

size_t tio_model_preset_count(void) {
    return TIO_ARRAY_LEN(arch_presets);
}

const char *tio_model_preset_name(size_t i) {
    return i < TIO_ARRAY_LEN(arch_presets) ? arch_presets[i].name : NULL;
}

static const char *const precision_names[TIO_PRECISION_COUNT] = {
    [TIO_PRECISION_FP32] = "fp32",
    [TIO_PRECISION_BF16] = "bf16",
};
_Static_assert(TIO_ARRAY_LEN(precision_names) == TIO_PRECISION_COUNT, "one name per precision");

const char *tio_model_precision_name(int32_t precision) {
    return tio_enum_name(precision_names, TIO_PRECISION_COUNT, precision, "unknown");
}

int tio_model_precision_parse(const char *name) {
    int32_t precision = tio_enum_parse(precision_names, TIO_PRECISION_COUNT, name);
    if (precision >= 0) {
        return precision;
    }
    return tio_set_error(TIO_EINVAL, "model: unknown precision '%s'; use fp32 or bf16",
                         name ? name : "(null)");
}

uint32_t tio_model_head_dim(const struct tio_model_params *p) {
    return p->head_dim ? p->head_dim : (p->heads ? p->hidden / p->heads : 0);
}

uint64_t tio_model_param_count(const struct tio_model_params *p) {
    uint64_t h = p->hidden, hd = tio_model_head_dim(p);
    uint64_t q = (uint64_t)p->heads * hd, kv = (uint64_t)p->kv_heads * hd;
    uint64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * p->ffn_hidden + 2 * h;
    uint64_t emb = (uint64_t)p->vocab * h;
    return emb * (p->tied_embeddings ? 1 : 2) + (uint64_t)p->layers * per_layer + h;
}

static int positive(const char *field, uint64_t v, const char *hint) {
    if (v == 0) {
        return tio_set_error(TIO_EINVAL, "model: %s must be positive (got 0); %s", field, hint);
    }
    return 0;
}

static int check_gpu(const struct tio_gpu *g) {
    const struct {
        const char *name;
        double v;
        int fraction;
    } f[] = {
        { "gpu.fp32_flops", g->fp32_flops, 0 },
        { "gpu.tf32_flops", g->tf32_flops, 0 },
        { "gpu.bf16_flops", g->bf16_flops, 0 },
        { "gpu.hbm_Bps", g->hbm_Bps, 0 },
        { "gpu.link_Bps", g->link_Bps, 0 },
        { "gpu.mm_efficiency", g->mm_efficiency, 1 },
        { "gpu.attn_efficiency", g->attn_efficiency, 1 },
        { "gpu.attn_bwd_efficiency", g->attn_bwd_efficiency, 1 },
        { "gpu.vector_efficiency", g->vector_efficiency, 1 },
        { "gpu.mem_efficiency", g->mem_efficiency, 1 },
        { "gpu.link_efficiency", g->link_efficiency, 1 },
    };
    for (size_t i = 0; i < TIO_ARRAY_LEN(f); i++) {
        /* written as !(v > 0) so that NaN is rejected too */
        if (!(f[i].v > 0) || (f[i].fraction && f[i].v > 1) || f[i].v > 1e30) {
            return tio_set_error(TIO_EINVAL, "model: %s = %g is out of range; use a value %s",
                                 f[i].name, f[i].v, f[i].fraction ? "in (0, 1]" : "> 0");
        }
    }
    if (!(g->launch_overhead_s >= 0) || g->launch_overhead_s > 1 || !(g->link_latency_s >= 0) ||
        g->link_latency_s > 1) {
        return tio_set_error(TIO_EINVAL,
                             "model: gpu.launch_overhead_s / link_latency_s must be in [0, 1] s");
    }
    if (g->memory_bytes == 0) {
        return tio_set_error(TIO_EINVAL,
                             "model: gpu.memory_bytes must be positive; use e.g. 94GiB");
    }
    return 0;
}

int tio_model_validate(const struct tio_model_params *p) {
    int rc;
    if (!p) {
        return tio_set_error(TIO_EINVAL, "model: params is NULL");
    }
    if ((rc = tio_struct_check("model: params", p, sizeof *p, MODEL_PARAMS_MIN)) < 0) {
        return rc;
    }
    if ((rc = positive("layers", p->layers, "use --layers N")) < 0 ||
        (rc = positive("hidden", p->hidden, "use --hidden N")) < 0 ||
        (rc = positive("heads", p->heads, "use --heads N")) < 0 ||
        (rc = positive("kv_heads", p->kv_heads, "use --kv-heads N (a divisor of heads)")) < 0 ||
        (rc = positive("ffn_hidden", p->ffn_hidden, "use --ffn-hidden N")) < 0 ||
        (rc = positive("vocab", p->vocab, "use --vocab N")) < 0 ||
        (rc = positive("global_batch", p->global_batch, "use --batch N")) < 0 ||
        (rc = positive("micro_batch", p->micro_batch, "use --micro-batch N")) < 0 ||
        (rc = positive("seq_len", p->seq_len, "use --seq N")) < 0 ||
        (rc = positive("dp", p->dp, "use --dp 1 or more")) < 0 ||
        (rc = positive("tp", p->tp, "use --tp 1 or more")) < 0 ||
        (rc = positive("pp", p->pp, "use --pp 1 or more")) < 0) {
        return rc;
    }
    /* Bound the sizes so that byte counts stay far from overflow and a typo cannot ask for an
     * unbounded trace. */
    const struct {
        const char *name;
        uint32_t v, max;
    } lim[] = {
        { "layers", p->layers, 1024 },
        { "hidden", p->hidden, 1u << 17 },
        { "heads", p->heads, 4096 },
        { "ffn_hidden", p->ffn_hidden, 1u << 20 },
        { "vocab", p->vocab, 1u << 24 },
        { "seq_len", p->seq_len, 1u << 22 },
        { "micro_batch", p->micro_batch, 1u << 16 },
        { "dp", p->dp, 1u << 16 },
        { "tp", p->tp, 1024 },
        { "pp", p->pp, 1024 },
        { "head_dim", p->head_dim, 1u << 14 },
    };
    for (size_t i = 0; i < TIO_ARRAY_LEN(lim); i++) {
        if (lim[i].v > lim[i].max) {
            return tio_set_error(TIO_EINVAL, "model: %s %u is too large; use at most %u",
                                 lim[i].name, lim[i].v, lim[i].max);
        }
    }
    if (p->precision < 0 || p->precision >= TIO_PRECISION_COUNT) {
        return tio_set_error(TIO_EINVAL, "model: unknown precision %d; use fp32 or bf16",
                             (int)p->precision);
    }
    if (p->heads % p->kv_heads) {
        return tio_set_error(TIO_EINVAL,
                             "model: heads %u is not divisible by kv_heads %u; use a kv_heads "
                             "that divides heads",
                             p->heads, p->kv_heads);
    }
    if (!p->head_dim && p->hidden % p->heads) {
        return tio_set_error(TIO_EINVAL,
                             "model: hidden %u is not divisible by heads %u; change one or set "
                             "head_dim",
                             p->hidden, p->heads);
    }
    if (p->heads % p->tp || p->kv_heads % p->tp) {
        return tio_set_error(TIO_EINVAL,
                             "model: heads %u / kv_heads %u are not divisible by the "
                             "tensor-parallel degree tp %u; use a tp that divides both",
                             p->heads, p->kv_heads, p->tp);
    }
    if (p->ffn_hidden % p->tp) {
        return tio_set_error(TIO_EINVAL,
                             "model: ffn_hidden %u is not divisible by tp %u; use a tp that "
                             "divides it",
                             p->ffn_hidden, p->tp);
    }
    if (p->pp > p->layers) {
        return tio_set_error(TIO_EINVAL,
                             "model: %u pipeline stages for %u layers; use pp <= %u (at least "
                             "one layer per stage)",
                             p->pp, p->layers, p->layers);
    }
    uint64_t per_step = (uint64_t)p->micro_batch * p->dp;
    if (p->global_batch % per_step) {
        return tio_set_error(TIO_EINVAL,
                             "model: global_batch %u is not divisible by micro_batch %u x dp %u; "
                             "use a multiple of %llu",
                             p->global_batch, p->micro_batch, p->dp, (unsigned long long)per_step);
    }
    uint64_t m = p->global_batch / per_step;
    if (p->grad_accum && p->grad_accum != m) {
        return tio_set_error(TIO_EINVAL,
                             "model: grad_accum %u does not match global_batch / (micro_batch x "
                             "dp) = %llu; leave it 0 or use %llu",
                             p->grad_accum, (unsigned long long)m, (unsigned long long)m);
    }
    if (m > 65536) {
        return tio_set_error(TIO_EINVAL,
                             "model: %llu micro-batches per iteration is too many; use at most "
                             "65536 (raise micro_batch)",
                             (unsigned long long)m);
    }
    /* The largest tensors (logits and their gradients, the SwiGLU activations, the embedding)
     * must stay within the trace's per-tensor limit; computed in double so nothing overflows. */
    double tok = (double)p->micro_batch * (double)p->seq_len;
    double hd = p->head_dim ? (double)p->head_dim : (double)p->hidden / (double)p->heads;
    double big = tok * (double)p->vocab * 4;
    big = fmax(big, tok * (double)p->ffn_hidden * 4);
    big = fmax(big, tok * (double)p->heads * hd * 4);
    big = fmax(big, (double)p->vocab * (double)p->hidden * 4);
    big = fmax(big, (double)p->ffn_hidden * (double)p->hidden * 4);
    if (big > (double)TIO_TRACE_MAX_BYTES) {
        return tio_set_error(TIO_EINVAL,
                             "model: a tensor of %.3g bytes exceeds the trace limit of 1 PiB; "
                             "reduce micro_batch, seq_len, vocab or the model width",
                             big);
    }
    uint64_t world = (uint64_t)p->dp * p->tp * p->pp;
    if (p->rank >= world) {
        return tio_set_error(TIO_EINVAL, "model: rank %u out of range; use 0..%llu (dp x tp x pp)",
                             p->rank, (unsigned long long)(world - 1));
    }
    if (p->checkpointing != 0 && p->checkpointing != 1) {
        return tio_set_error(TIO_EINVAL, "model: checkpointing must be 0 or 1");
    }
    if (p->tied_embeddings != 0 && p->tied_embeddings != 1) {
        return tio_set_error(TIO_EINVAL, "model: tied_embeddings must be 0 or 1");
    }
    return check_gpu(&p->gpu);
}
