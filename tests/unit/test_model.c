/*
 * The workload model (teraio/model.h). Expected values are computed here from the model
 * dimensions with the textbook formulas (parameter count, 6N + attention FLOPs, saved
 * activations per block), never by the generator, and the trace is re-analysed here with an
 * independent liveness sweep.
 */
#include <stdlib.h>
#include <string.h>

#include <teraio/analysis.h>
#include <teraio/model.h>
#include <teraio/trace.h>

#include "tio_test.h"

static struct tio_model_params preset(const char *name) {
    struct tio_model_params p;
    if (tio_model_preset(name, &p) < 0) {
        printf("preset %s: %s\n", name, tio_last_error());
        exit(1);
    }
    return p;
}

/* Parameters from the architecture, written out independently of the library. */
static uint64_t
params_of(uint64_t L, uint64_t h, uint64_t heads, uint64_t kv, uint64_t ffn, uint64_t V, int tied) {
    uint64_t hd = h / heads;
    uint64_t attn = h * (heads * hd) + 2 * h * (kv * hd) + (heads * hd) * h;
    uint64_t mlp = 3 * h * ffn;
    return (tied ? 1 : 2) * V * h + L * (attn + mlp + 2 * h) + h;
}

TIO_TEST(param_counts_match_model_cards) {
    struct tio_model_params p = preset("llama3-8b");
    CHECK_EQ_U(tio_model_param_count(&p), UINT64_C(8030261248));
    p = preset("llama3-70b");
    CHECK_EQ_U(tio_model_param_count(&p), UINT64_C(70553706496));
    p = preset("granite-code-8b"); /* model card: 8.05 B (tied embeddings) */
    double n = (double)tio_model_param_count(&p);
    CHECK(fabs(n - 8.05e9) / 8.05e9 < 0.01);
    CHECK_EQ_U(tio_model_param_count(&p), params_of(36, 4096, 32, 8, 14336, 49152, 1));
    p = preset("small");
    CHECK_EQ_U(tio_model_param_count(&p), params_of(4, 256, 8, 4, 768, 1024, 0));
}

/* Sum of the bytes of the tensors whose name starts with prefix and whose kind is `kind`. */
static uint64_t bytes_with_prefix(const struct tio_trace *tr, const char *prefix, int32_t kind) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    uint64_t sum = 0;
    size_t n = strlen(prefix);
    for (size_t t = 0; t < v.n_tensors; t++) {
        const char *nm = tio_trace_tensor_name(tr, (uint32_t)t);
        if (nm && strncmp(nm, prefix, n) == 0 && v.tensor_kind[t] == kind) {
            sum += v.tensor_bytes[t];
        }
    }
    return sum;
}

static size_t count_kernels(const struct tio_trace *tr, const char *name, uint32_t flag) {
    size_t c = 0, n = tio_trace_kernel_count(tr);
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    for (size_t k = 0; k < n; k++) {
        const char *nm = tio_trace_kernel_name(tr, (uint32_t)k);
        if ((!name || (nm && strcmp(nm, name) == 0)) && (!flag || (v.kernel_flags[k] & flag))) {
            c++;
        }
    }
    return c;
}

/*
 * FLOPs per token: 6N for the matmul parameters (every weight except the input embedding
 * table and the norms; Kaplan et al. 2020) plus causal attention: QK^T and PV cost
 * 2 * 2 * s * d per token and layer in the forward pass for full attention, half of it with a
 * causal mask, and the backward twice the forward: 6 * L * s * d (half of PaLM's 12 L s d).
 */
static void check_flops(struct tio_model_params p) {
    struct tio_trace *tr = NULL;
    struct tio_model_info in;
    CHECK_OK(tio_model_generate(&p, &tr, &in));
    double h = p.hidden, hd = h / p.heads, L = p.layers;
    double n_mm = L * (h * p.heads * hd * 2 + 2 * h * p.kv_heads * hd + 3 * h * p.ffn_hidden) +
                  (double)p.vocab * h;
    double per_token = 6 * n_mm + 6 * L * p.seq_len * h;
    double got = in.model_flops_per_iteration / (double)in.tokens_per_iteration;
    if (fabs(got - per_token) / per_token > 0.05) {
        TIO_T_FAIL("%s: FLOPs/token %.4g vs 6N + attention %.4g", p.model, got, per_token);
    }
    /* pp = 1, tp = 1: the one rank does all the work */
    if (p.pp == 1 && p.tp == 1 && p.dp == 1) {
        CHECK_NEAR(in.flops_per_iteration, in.model_flops_per_iteration,
                   1e-9 * in.model_flops_per_iteration);
    }
    tio_trace_free(tr);
}

TIO_TEST(flops_per_token_are_6n_plus_attention) {
    struct tio_model_params p = preset("small");
    check_flops(p);
    p.pp = 1;
    check_flops(p);
    p.precision = TIO_PRECISION_BF16;
    check_flops(p);
    p = preset("llama3-8b");
    p.pp = 1;
    p.global_batch = 4; /* one micro-batch: same FLOPs per token, fast */
    check_flops(p);
    p = preset("llama3-8b"); /* the paper's setting, 2 stages: sum of both stages */
    p.global_batch = 8;
    check_flops(p);
    p = preset("granite-code-8b");
    p.global_batch = 4;
    p.pp = 1;
    check_flops(p);
}

/*
 * Saved activations of one block and micro-batch, TorchTitan's Llama block in eager PyTorch
 * with memory-efficient attention (no s^2 term), elements per token:
 *   RMSNorm x2: output of x*rstd and the weighted output (2h each) + rstd (1, fp32)
 *   residual h after attention (h) and block output (h)
 *   RoPE'd q, repeated k and v, attention output and its contiguous copy (5 * heads*hd)
 *   logsumexp (heads, fp32)
 *   SwiGLU: gate, up, silu(gate), silu*up (4 * ffn)
 * = (6h + 5 q_width + 4 ffn) * elem + (2 + heads) * 4 bytes; with checkpointing only the block
 * output (h * elem) stays until the backward.
 */
static uint64_t act_formula(const struct tio_model_params *p) {
    uint64_t T = (uint64_t)p->micro_batch * p->seq_len, e = p->precision ? 2 : 4;
    uint64_t h = p->hidden, q = (uint64_t)p->heads / p->tp * (h / p->heads),
             ffn = p->ffn_hidden / p->tp, a = p->heads / p->tp;
    if (p->checkpointing) {
        return T * h * e;
    }
    return T * (6 * h + 5 * q + 4 * ffn) * e + T * (2 + a) * 4;
}

static void check_act(struct tio_model_params p) {
    struct tio_trace *tr = NULL;
    struct tio_model_info in;
    CHECK_OK(tio_model_generate(&p, &tr, &in));
    REQUIRE(tr != NULL);
    char prefix[32];
    (void)snprintf(prefix, sizeof prefix, "mb0.L%u.", in.stage_first_layer);
    uint64_t want = act_formula(&p);
    uint64_t got = bytes_with_prefix(tr, prefix, TIO_TENSOR_ACTIVATION);
    if (got != want || in.activation_bytes_per_layer != want) {
        TIO_T_FAIL("%s (prec %d, tp %u, ckpt %d): activation bytes per layer: trace %llu, info "
                   "%llu, formula %llu",
                   p.model, p.precision, p.tp, p.checkpointing, (unsigned long long)got,
                   (unsigned long long)in.activation_bytes_per_layer, (unsigned long long)want);
    }
    tio_trace_free(tr);
}

TIO_TEST(activation_bytes_per_layer_match_formula) {
    struct tio_model_params p = preset("tiny"); /* GQA: 4 heads, 2 KV heads */
    check_act(p);
    p.kv_heads = 4; /* plain multi-head: no repeat_kv copies */
    check_act(p);
    p.precision = TIO_PRECISION_BF16;
    check_act(p);
    p.checkpointing = 1;
    check_act(p);
    p = preset("small");
    p.tp = 2;
    p.rank = 3; /* stage 1, tp shard 1 */
    check_act(p);
    p.checkpointing = 1;
    check_act(p);
    p = preset("llama3-8b");
    p.global_batch = 8;
    p.seq_len = 1024;
    check_act(p);
}

/* Independent liveness sweep: peak resident bytes. */
static uint64_t peak_of(const struct tio_trace *tr) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    uint64_t *first = malloc(v.n_tensors * sizeof *first);
    uint64_t *last = calloc(v.n_tensors, sizeof *last);
    int64_t *delta = calloc(v.n_kernels + 1, sizeof *delta);
    uint64_t base = 0, peak = 0;
    for (size_t t = 0; t < v.n_tensors; t++) {
        first[t] = UINT64_MAX;
    }
    for (size_t k = 0; k < v.n_kernels; k++) {
        for (uint64_t x = v.kernel_use_offset[k]; x < v.kernel_use_offset[k + 1]; x++) {
            uint32_t t = v.use_tensor[x];
            if (first[t] == UINT64_MAX) {
                first[t] = k;
            }
            last[t] = k;
        }
    }
    for (size_t t = 0; t < v.n_tensors; t++) {
        if (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            base += v.tensor_bytes[t];
        } else if (first[t] != UINT64_MAX) {
            delta[first[t]] += (int64_t)v.tensor_bytes[t];
            delta[last[t] + 1] -= (int64_t)v.tensor_bytes[t];
        }
    }
    int64_t cur = 0;
    for (size_t k = 0; k < v.n_kernels; k++) {
        cur += delta[k];
        if (base + (uint64_t)cur > peak) {
            peak = base + (uint64_t)cur;
        }
    }
    free(first);
    free(last);
    free(delta);
    return peak;
}

TIO_TEST(peak_and_metadata) {
    struct tio_model_params p = preset("small");
    for (uint32_t r = 0; r < 2; r++) {
        p.rank = r;
        struct tio_trace *tr = NULL;
        struct tio_model_info in;
        CHECK_OK(tio_model_generate(&p, &tr, &in));
        REQUIRE(tr != NULL);
        CHECK_EQ_U(in.peak_bytes, peak_of(tr));
        CHECK_EQ_U(in.n_kernels, tio_trace_kernel_count(tr));
        CHECK_NEAR(in.memory_ratio, (double)in.peak_bytes / (double)p.gpu.memory_bytes, 1e-12);
        char buf[32];
        (void)snprintf(buf, sizeof buf, "%llu", (unsigned long long)p.gpu.memory_bytes);
        CHECK_STR(tio_trace_get_meta(tr, "capacity_bytes"), buf);
        CHECK_STR(tio_trace_get_meta(tr, "tokens_per_iteration"), "1024"); /* 8 x 128 */
        CHECK_STR(tio_trace_get_meta(tr, "model"), "small");
        CHECK_STR(tio_trace_get_meta(tr, "gpu"), "h100-nvl");
        CHECK_STR(tio_trace_get_meta(tr, "source"), "teraio model");
        CHECK_STR(tio_trace_get_meta(tr, "precision"), "fp32");
        CHECK_STR(tio_trace_get_meta(tr, "pp"), "2");
        CHECK_STR(tio_trace_get_meta(tr, "rank"), r ? "1" : "0");
        tio_trace_free(tr);
    }
}

TIO_TEST(pipeline_rank_traces) {
    struct tio_model_params p = preset("small"); /* 4 layers, 2 stages, 4 micro-batches */
    struct tio_trace *tr[2] = { NULL, NULL };
    struct tio_model_info in[2];
    for (uint32_t r = 0; r < 2; r++) {
        p.rank = r;
        CHECK_OK(tio_model_generate(&p, &tr[r], &in[r]));
        REQUIRE(tr[r] != NULL);
    }
    CHECK_EQ_U(in[0].stage, 0);
    CHECK_EQ_U(in[1].stage, 1);
    CHECK_EQ_U(in[0].stage_layers + in[1].stage_layers, 4);
    CHECK_EQ_U(in[1].stage_first_layer, in[0].stage_layers);
    CHECK_EQ_U(in[0].micro_batches, 4);
    /* stage 0: embedding, no loss; stage 1: loss, no embedding */
    CHECK_EQ_U(count_kernels(tr[0], "aten::embedding", 0), 4);
    CHECK_EQ_U(count_kernels(tr[0], "aten::_log_softmax", 0), 0);
    CHECK_EQ_U(count_kernels(tr[1], "aten::embedding", 0), 0);
    CHECK_EQ_U(count_kernels(tr[1], "aten::_log_softmax", 0), 4);
    /* one send and one receive per micro-batch and direction */
    CHECK_EQ_U(count_kernels(tr[0], "nccl:send", TIO_KERNEL_COMM), 4);
    CHECK_EQ_U(count_kernels(tr[0], "nccl:recv", TIO_KERNEL_COMM), 4);
    CHECK_EQ_U(count_kernels(tr[1], "nccl:send", TIO_KERNEL_COMM), 4);
    CHECK_EQ_U(count_kernels(tr[1], "nccl:recv", TIO_KERNEL_COMM), 4);
    /* 1F1B on stage 0 of 2: F0 F1 B0 F2 B1 F3 B2 B3 -> the first backward's receive comes
     * right after the second forward's send */
    size_t n = tio_trace_kernel_count(tr[0]);
    int order[8], no = 0;
    for (size_t k = 0; k < n && no < 8; k++) {
        const char *nm = tio_trace_kernel_name(tr[0], (uint32_t)k);
        if (strcmp(nm, "aten::embedding") == 0) {
            order[no++] = 0;
        } else if (strcmp(nm, "aten::embedding_dense_backward") == 0) {
            order[no++] = 1;
        }
    }
    int want[8] = { 0, 0, 1, 0, 1, 0, 1, 1 };
    CHECK_EQ_I(no, 8);
    for (int i = 0; i < 8 && i < no; i++) {
        CHECK_EQ_I(order[i], want[i]);
    }
    /* every parameter gets one AdamW step; the stages split the parameters */
    CHECK_EQ_U(count_kernels(tr[0], "aten::addcdiv_", TIO_KERNEL_OPTIM), 1 + 2 * 9);
    CHECK_EQ_U(count_kernels(tr[1], "aten::addcdiv_", TIO_KERNEL_OPTIM), 2 * 9 + 2);
    CHECK_EQ_U(count_kernels(tr[0], NULL, TIO_KERNEL_OPTIM), 8 * (1 + 2 * 9));
    CHECK_EQ_U(in[0].params_rank + in[1].params_rank, in[0].params_total);
    CHECK(count_kernels(tr[0], NULL, TIO_KERNEL_BACKWARD) > 0);
    /* both ranks report the same makespan; no rank is busier than it */
    CHECK_NEAR(in[0].ideal_iteration_s, in[1].ideal_iteration_s, 1e-12);
    double t0 = (double)tio_trace_total_duration_ns(tr[0]) * 1e-9;
    double t1 = (double)tio_trace_total_duration_ns(tr[1]) * 1e-9;
    CHECK(t0 <= in[0].ideal_iteration_s * (1 + 1e-6));
    CHECK(t1 <= in[0].ideal_iteration_s * (1 + 1e-6));
    CHECK(fmax(t0, t1) >= in[0].ideal_iteration_s * (1 - 1e-3));
    CHECK(in[0].rank_busy_s < t0); /* stage 0 waits for stage 1's gradients */
    /* The pipeline fill: stage 1's first receive ends when stage 0's first send does, so its
     * duration equals stage 0's time up to the end of that send (same clock origin). */
    struct tio_trace_view v0, v1;
    tio_trace_get_view(tr[0], &v0);
    tio_trace_get_view(tr[1], &v1);
    uint64_t until_send = 0;
    for (size_t k = 0; k < v0.n_kernels; k++) {
        until_send += v0.kernel_duration_ns[k];
        if (strcmp(tio_trace_kernel_name(tr[0], (uint32_t)k), "nccl:send") == 0) {
            break;
        }
    }
    CHECK_STR(tio_trace_kernel_name(tr[1], 0), "nccl:recv");
    CHECK_NEAR((double)v1.kernel_duration_ns[0], (double)until_send, 2.0); /* ns rounding */
    tio_trace_free(tr[0]);
    tio_trace_free(tr[1]);
}

TIO_TEST(every_global_used_and_kinds) {
    struct tio_model_params p = preset("tiny");
    p.precision = TIO_PRECISION_BF16;
    struct tio_trace *tr = NULL;
    struct tio_model_info in;
    CHECK_OK(tio_model_generate(&p, &tr, &in));
    REQUIRE(tr != NULL);
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    uint8_t *used = calloc(v.n_tensors, 1);
    for (size_t x = 0; x < v.n_uses; x++) {
        used[v.use_tensor[x]] = 1;
    }
    size_t unused = 0, weights = 0, grads = 0, states = 0;
    for (size_t t = 0; t < v.n_tensors; t++) {
        unused += !used[t];
        if (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            weights += v.tensor_kind[t] == TIO_TENSOR_WEIGHT;
            grads += v.tensor_kind[t] == TIO_TENSOR_GRAD;
            states += v.tensor_kind[t] == TIO_TENSOR_OPTIM_STATE;
        }
    }
    free(used);
    CHECK_EQ_U(unused, 0);
    size_t nparam = 1 + 2 * 9 + 2;   /* embedding, 2 blocks, final norm, head */
    CHECK_EQ_U(weights, 2 * nparam); /* fp32 master + bf16 copy */
    CHECK_EQ_U(grads, nparam);
    CHECK_EQ_U(states, 2 * nparam);
    CHECK_EQ_U(count_kernels(tr, "aten::copy_", TIO_KERNEL_OPTIM), nparam);
    tio_trace_free(tr);
    p.fused_adamw = 1; /* one kernel per parameter reading all four tensors */
    CHECK_OK(tio_model_generate(&p, &tr, &in));
    if (tr) {
        CHECK_EQ_U(count_kernels(tr, "aten::_fused_adamw_", TIO_KERNEL_OPTIM), nparam);
        CHECK_EQ_U(count_kernels(tr, NULL, TIO_KERNEL_OPTIM), 2 * nparam);
        struct tio_trace_view fv;
        tio_trace_get_view(tr, &fv);
        size_t k = tio_trace_kernel_count(tr) - 2; /* the last parameter's AdamW */
        CHECK_EQ_U(fv.kernel_use_offset[k + 1] - fv.kernel_use_offset[k], 4);
        tio_trace_free(tr);
    }
}

TIO_TEST(parallel_degrees) {
    struct tio_model_params p = preset("small");
    p.pp = 1;
    struct tio_model_info one, tp2, dp2;
    struct tio_trace *tr = NULL;
    CHECK_OK(tio_model_generate(&p, &tr, &one));
    tio_trace_free(tr);
    p.tp = 2;
    CHECK_OK(tio_model_generate(&p, &tr, &tp2));
    if (tr) {
        /* Megatron: 2 all-reduces per block forward, 2 backward, per micro-batch */
        size_t ar = count_kernels(tr, "nccl:all_reduce", TIO_KERNEL_COMM);
        CHECK(ar >= 4u * 4 * 4);
        tio_trace_free(tr);
    }
    /* half of every sharded weight; the norms are replicated */
    CHECK(tp2.params_rank < one.params_rank / 2 + 4 * 2 * 256 + 256 + 1);
    CHECK(tp2.params_rank > one.params_rank / 2);
    p.tp = 1;
    p.dp = 2;
    p.rank = 1;
    CHECK_OK(tio_model_generate(&p, &tr, &dp2));
    if (tr) {
        CHECK_EQ_U(count_kernels(tr, "nccl:all_reduce", TIO_KERNEL_COMM), 1 + 4 * 9 + 2);
        tio_trace_free(tr);
    }
    CHECK_EQ_U(dp2.micro_batches, one.micro_batches / 2);
    /* the same model work; each replica runs its own AdamW step on top */
    CHECK(dp2.model_flops_per_iteration > one.model_flops_per_iteration);
    CHECK_NEAR(dp2.model_flops_per_iteration, one.model_flops_per_iteration,
               0.01 * one.model_flops_per_iteration);
}

TIO_TEST(deterministic) {
    struct tio_model_params p = preset("small");
    p.rank = 1;
    struct tio_trace *a = NULL, *b = NULL;
    CHECK_OK(tio_model_generate(&p, &a, NULL));
    CHECK_OK(tio_model_generate(&p, &b, NULL));
    if (a && b) {
        uint64_t ha = 0, hb = 1;
        CHECK_OK(tio_trace_hash(a, &ha));
        CHECK_OK(tio_trace_hash(b, &hb));
        CHECK_EQ_U(ha, hb);
        CHECK_EQ_U(tio_trace_tensor_count(a), tio_trace_tensor_count(b));
        for (uint32_t t = 0; t < tio_trace_tensor_count(a); t += 97) {
            CHECK_STR(tio_trace_tensor_name(a, t), tio_trace_tensor_name(b, t));
        }
    }
    tio_trace_free(a);
    tio_trace_free(b);
}

TIO_TEST(checkpointing_lowers_peak_raises_time) {
    struct tio_model_params p = preset("small");
    struct tio_model_info off, on;
    struct tio_trace *tr = NULL;
    CHECK_OK(tio_model_generate(&p, &tr, &off));
    tio_trace_free(tr);
    p.checkpointing = 1;
    CHECK_OK(tio_model_generate(&p, &tr, &on));
    tio_trace_free(tr);
    CHECK(on.peak_bytes < off.peak_bytes);
    CHECK(on.ideal_iteration_s > off.ideal_iteration_s);
    /* recompute adds one forward: ~4/3 of the FLOPs */
    double r = on.model_flops_per_iteration / off.model_flops_per_iteration;
    CHECK(r > 1.2 && r < 1.4);
}

static void bad(struct tio_model_params p, int code, const char *needle) {
    struct tio_trace *tr = (struct tio_trace *)&p; /* must be reset to NULL */
    int rc = tio_model_generate(&p, &tr, NULL);
    if (rc != code) {
        TIO_T_FAIL("want %d (%s), got %d: %s", code, needle, rc, tio_last_error());
    }
    CHECK(tr == NULL);
    CHECK_ERR_HAS(needle);
}

TIO_TEST(bad_inputs_name_the_fix) {
    struct tio_model_params p;
    CHECK_RC(tio_model_preset("llama4", &p), TIO_ENOTFOUND);
    CHECK_ERR_HAS("use one of llama3-8b");
    struct tio_gpu g;
    CHECK_RC(tio_gpu_preset("b200", &g), TIO_ENOTFOUND);
    CHECK_ERR_HAS("h100-nvl");
    p = preset("small");
    p.global_batch = 9;
    bad(p, TIO_EINVAL, "use a multiple of 2");
    p = preset("small");
    p.dp = 2;
    p.global_batch = 6;
    bad(p, TIO_EINVAL, "micro_batch 2 x dp 2");
    p = preset("small");
    p.pp = 5;
    bad(p, TIO_EINVAL, "use pp <= 4");
    p = preset("small");
    p.tp = 3;
    bad(p, TIO_EINVAL, "tensor-parallel");
    p = preset("small");
    p.hidden = 0;
    bad(p, TIO_EINVAL, "hidden must be positive");
    p = preset("small");
    p.seq_len = 0;
    bad(p, TIO_EINVAL, "seq_len");
    p = preset("small");
    p.micro_batch = 0;
    bad(p, TIO_EINVAL, "micro_batch");
    p = preset("small");
    p.rank = 2;
    bad(p, TIO_EINVAL, "use 0..1");
    p = preset("small");
    p.kv_heads = 3;
    bad(p, TIO_EINVAL, "kv_heads");
    p = preset("small");
    p.grad_accum = 3;
    bad(p, TIO_EINVAL, "use 4");
    p = preset("small");
    p.gpu.mm_efficiency = 1.5;
    bad(p, TIO_EINVAL, "gpu.mm_efficiency");
    p = preset("small");
    p.gpu.hbm_Bps = -1;
    bad(p, TIO_EINVAL, "gpu.hbm_Bps");
    p = preset("small");
    p.precision = 7;
    bad(p, TIO_EINVAL, "precision");
    p = preset("small");
    p.layers = 100000;
    bad(p, TIO_EINVAL, "too large");
    p = preset("small");
    p.micro_batch = 65536;
    p.global_batch = 65536;
    p.seq_len = 1u << 22;
    p.vocab = 1u << 24;
    bad(p, TIO_EINVAL, "exceeds the trace limit");
    p = preset("llama3-70b"); /* 2^20 micro-batches x 40 blocks: too many kernels */
    p.micro_batch = 1;
    p.global_batch = 65536;
    p.layers = 1024;
    bad(p, TIO_EINVAL, "reduce global_batch");
    CHECK_RC(tio_model_generate(&p, NULL, NULL), TIO_EINVAL);
}

/* The paper's settings: kernels per iteration of the same order as its Figure 1 x-axes. */
TIO_TEST(paper_scale_kernel_counts) {
    struct tio_model_params p = preset("llama3-8b");
    struct tio_trace *tr = NULL;
    struct tio_model_info in;
    CHECK_OK(tio_model_generate(&p, &tr, &in));
    tio_trace_free(tr);
    CHECK(in.n_kernels > 25000 && in.n_kernels < 100000); /* paper: about 50,000 */
    CHECK(in.ideal_tokens_per_s > 500 && in.ideal_tokens_per_s < 2500);
    p = preset("llama3-70b");
    CHECK_OK(tio_model_generate(&p, &tr, &in));
    tio_trace_free(tr);
    CHECK(in.n_kernels > 125000 && in.n_kernels < 500000); /* paper: about 250,000 */
    CHECK_EQ_U(in.params_total, UINT64_C(70553706496));
    CHECK(in.ideal_tokens_per_s > 50 && in.ideal_tokens_per_s < 400);
}

/*
 * The paper's Observations 1 and 2 (paper §2) on GPU 0 of its settings, through the
 * project's analysis: active memory under 14% of the GPU at most and a few percent on average;
 * more than 40% of the inactive periods of 10 MB-1 GB tensors longer than 10 ms.
 */
static void check_observations(const char *name) {
    struct tio_model_params p = preset(name);
    struct tio_trace *tr = NULL;
    struct tio_model_info in;
    CHECK_OK(tio_model_generate(&p, &tr, &in));
    REQUIRE(tr != NULL);
    struct tio_analysis_params ap = tio_analysis_params_default();
    ap.capacity_bytes = in.capacity_bytes;
    struct tio_analysis *a = NULL;
    CHECK_OK(tio_analysis_new(tr, &ap, &a));
    CHECK(a != NULL);
    if (a) {
        struct tio_analysis_summary s;
        tio_analysis_get_summary(a, &s);
        CHECK_EQ_U(s.peak_resident_bytes, in.peak_bytes);
        CHECK(s.active_capacity_fraction_max < 0.14);
        CHECK(s.active_capacity_fraction_mean > 0.002 && s.active_capacity_fraction_mean < 0.05);
        CHECK(s.long_idle_fraction_10mb_1gb > 0.40);
        printf("  %s GPU0: active mean %.2f%% max %.2f%%, long idle %.1f%%\n", name,
               100 * s.active_capacity_fraction_mean, 100 * s.active_capacity_fraction_max,
               100 * s.long_idle_fraction_10mb_1gb);
    }
    tio_analysis_free(a);
    tio_trace_free(tr);
}

TIO_TEST(paper_observations_on_gpu0) {
    check_observations("llama3-8b");
    check_observations("llama3-70b");
    check_observations("granite-code-8b");
}

int main(void) {
    RUN(param_counts_match_model_cards);
    RUN(flops_per_token_are_6n_plus_attention);
    RUN(activation_bytes_per_layer_match_formula);
    RUN(peak_and_metadata);
    RUN(pipeline_rank_traces);
    RUN(every_global_used_and_kinds);
    RUN(parallel_degrees);
    RUN(deterministic);
    RUN(checkpointing_lowers_peak_raises_time);
    RUN(bad_inputs_name_the_fix);
    RUN(paper_scale_kernel_counts);
    RUN(paper_observations_on_gpu0);
    return tio_test_done();
}
