/*
 * Event models of DeepSpeed ZeRO-Offload and ZeRO-Infinity on the simulator's engine. Every
 * assumption, its source and the calibration of the free parameters: docs/baselines.md.
 *
 * Both: the trace's precision (the paper trains in FP32; zero_bytes_scale scales the bytes of
 * parameters, gradients and activations for mixed-precision what-ifs), the
 * optimizer states never on the GPU, the GPU optimizer kernels replaced by a host phase (CPU
 * Adam) at the position of the first optimizer kernel, gradients copied to the host after their
 * last backward use. Activations always stay on the GPU.
 * ZeRO-Offload: parameters stay on the GPU; after CPU Adam the fp16 parameters are copied back.
 * ZeRO-Infinity: parameters live on NVMe and are fetched layer by layer, zero_prefetch_layers
 * layers ahead, and released after their layer (clean: no write); optimizer states are swapped
 * from/to NVMe during CPU Adam, overlapped (pipeline_read/write).
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_impl.h"

/* Layer number in a parameter name ("layers.12.attn.wq", "h.3.mlp", "blocks.7"), or -1. */
static long layer_of(const char *name) {
    static const char *const keys[] = { "layers.", "layer.", "layers_", "layer_", "blocks.",
                                        "block.",  "h.",     "layer",   "block",  "L" };
    if (!name) {
        return -1;
    }
    for (size_t i = 0; i < TIO_ARRAY_LEN(keys); i++) {
        const char *p = name;
        size_t kl = strlen(keys[i]);
        while ((p = strstr(p, keys[i])) != NULL) {
            int boundary = p == name || !isalnum((unsigned char)p[-1]);
            const char *d = p + kl;
            if (boundary && isdigit((unsigned char)*d)) {
                return strtol(d, NULL, 10);
            }
            p += kl;
        }
    }
    return -1;
}

/* DeepSpeed's stage3_param_persistence_threshold (the paper's Table 4: the default, 100K):
 * parameters with fewer values are not partitioned; they stay on the GPU and are never
 * fetched. */
#define ZERO_PERSISTENCE_VALUES 1e5

static int zero_persistent(const struct tio_trace_view *tv, size_t t, double dtype_bytes) {
    return (double)tv->tensor_bytes[t] / dtype_bytes < ZERO_PERSISTENCE_VALUES;
}

struct zev {
    uint32_t group;
    uint64_t k;      /* first kernel of the event */
    uint8_t release; /* release the group at the next event's kernel */
    uint8_t fetch;   /* fetch the group for this event */
};

static int add_move(struct tio_move **mv, size_t *n, size_t *cap, const struct tio_move *m) {
    if (tio_grow((void **)mv, cap, *n + 1, sizeof **mv) < 0) {
        return TIO_ENOMEM;
    }
    (*mv)[(*n)++] = *m;
    return 0;
}

/* Layer groups of the weights: from names, else equal chunks in first-use order. */
static int weight_groups(const struct sim_view *v,
                         const struct tio_trace *trace,
                         const struct tio_trace_view *tv,
                         uint32_t layers,
                         double dtype_bytes,
                         uint32_t *group,
                         uint32_t *n_groups) {
    size_t T = v->n_tensors;
    uint32_t maxg = 0;
    size_t named = 0, n_w = 0;
    for (size_t t = 0; t < T; t++) {
        group[t] = UINT32_MAX;
        if (tv->tensor_kind[t] != TIO_TENSOR_WEIGHT || v->first_use[t] == TIO_NEVER_USED ||
            zero_persistent(tv, t, dtype_bytes)) {
            continue;
        }
        n_w++;
        long l = layer_of(tio_trace_tensor_name(trace, (uint32_t)t));
        if (l >= 0 && l < 1000000) {
            group[t] = (uint32_t)l + 1;
            named++;
        } else {
            group[t] = 0;
        }
        maxg = TIO_MAX(maxg, group[t]);
    }
    if (n_w == 0) {
        *n_groups = 0;
        return 0;
    }
    if (named == 0 && layers > 1) {
        /* chunk by first use into `layers` groups of about equal bytes */
        uint64_t total = 0;
        for (size_t t = 0; t < T; t++) {
            if (group[t] != UINT32_MAX) {
                total += v->bytes[t];
            }
        }
        uint32_t *order = tio_malloc(n_w * sizeof *order);
        if (!order) {
            return TIO_ENOMEM;
        }
        size_t n = 0;
        for (size_t k = 0; k < v->n_kernels; k++) { /* first-use order, stable */
            if (v->skip_uses[k]) {
                continue;
            }
            for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1]; u++) {
                uint32_t t = v->use_tensor[u];
                if (group[t] != UINT32_MAX && v->first_use[t] == k) {
                    order[n++] = t;
                }
            }
        }
        uint64_t acc = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t g = (uint32_t)((double)acc / (double)total * layers);
            group[order[i]] = TIO_MIN(g, layers - 1);
            acc += v->bytes[order[i]];
        }
        tio_free(order);
        maxg = layers - 1;
    }
    *n_groups = maxg + 1;
    return 0;
}

/* ZeRO-3 parameter streaming: layer-granular fetches from `tier` with a fixed depth, clean
 * releases. */
static int stream_moves(struct sim_view *v,
                        int tier,
                        const struct tio_trace *trace,
                        const struct tio_trace_view *tv,
                        double dtype_bytes,
                        const struct tio_sim_params *p,
                        struct tio_move **mv,
                        size_t *n_mv,
                        size_t *cap_mv) {
    size_t N = v->n_kernels, T = v->n_tensors;
    uint32_t layers = p->zero_layers;
    const char *nl = tio_trace_get_meta(trace, "n_layers");
    if (!layers && nl) {
        layers = (uint32_t)strtoul(nl, NULL, 10);
    }
    if (!layers) {
        layers = 32;
    }
    uint32_t *group = tio_malloc((T ? T : 1) * sizeof *group);
    struct zev *ev = NULL;
    uint32_t *last_ev = NULL;
    size_t n_ev = 0, cap_ev = 0;
    uint32_t n_groups = 0;
    int rc = group ? 0 : TIO_ENOMEM;
    if (rc == 0) {
        rc = weight_groups(v, trace, tv, layers, dtype_bytes, group, &n_groups);
    }
    if (rc < 0 || n_groups == 0) {
        goto done;
    }
    /* events: maximal runs of kernels using the same group */
    uint32_t cur = UINT32_MAX;
    for (size_t k = 0; k < N && rc == 0; k++) {
        if (v->skip_uses[k]) {
            continue;
        }
        for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1]; u++) {
            uint32_t g = group[v->use_tensor[u]];
            if (g == UINT32_MAX || g == cur) {
                continue;
            }
            cur = g;
            if (tio_grow((void **)&ev, &cap_ev, n_ev + 1, sizeof *ev) < 0) {
                rc = TIO_ENOMEM;
                break;
            }
            ev[n_ev++] = (struct zev){ .group = g, .k = k, .release = 1, .fetch = 1 };
        }
    }
    uint32_t D = p->zero_prefetch_layers;
    if (rc < 0 || n_ev <= D) {
        /* everything fits in the prefetch window: parameters simply stay resident */
        for (size_t t = 0; t < T; t++) {
            if (group[t] != UINT32_MAX) {
                v->tflags[t] &= (uint8_t)~SV_INIT_OFF;
            }
        }
        goto done;
    }
    /* position of event e's fetch on the extended axis (previous iteration < 0) */
#define FETCH_POS(e) ((e) >= D ? (int64_t)ev[(e)-D].k : (int64_t)ev[n_ev - D + (e)].k - (int64_t)N)
    last_ev = tio_malloc(n_groups * sizeof *last_ev);
    if (!last_ev) {
        rc = TIO_ENOMEM;
        goto done;
    }
    for (uint32_t g = 0; g < n_groups; g++) {
        last_ev[g] = UINT32_MAX;
    }
    for (size_t e = 0; e < n_ev; e++) {
        last_ev[ev[e].group] = (uint32_t)e;
    }
    /* keep a group when its next fetch would be issued before the release */
    for (size_t e = 0; e < n_ev; e++) {
        if (e + 1 >= n_ev) {
            ev[e].release = 0; /* release point would be kernel N: keep over the boundary */
            continue;
        }
        int64_t rel = (int64_t)ev[e + 1].k;
        size_t e2 = e + 1;
        while (e2 < n_ev && ev[e2].group != ev[e].group) {
            e2++;
        }
        int64_t next_fetch;
        if (e2 < n_ev) {
            next_fetch = FETCH_POS(e2);
        } else { /* first event of the group in the next iteration */
            size_t f = 0;
            while (ev[f].group != ev[e].group) {
                f++;
            }
            next_fetch = FETCH_POS(f) + (int64_t)N;
        }
        if (next_fetch <= rel) {
            ev[e].release = 0;
        }
    }
    for (size_t e = 0; e < n_ev; e++) { /* fetch only what the previous event released */
        size_t prev = e;
        int found = 0;
        for (size_t i = e; i-- > 0;) {
            if (ev[i].group == ev[e].group) {
                prev = i;
                found = 1;
                break;
            }
        }
        if (!found) {
            prev = last_ev[ev[e].group];
        }
        ev[e].fetch = ev[prev].release;
    }
    for (size_t e = 0; e < n_ev && rc == 0; e++) {
        int64_t fp = FETCH_POS(e);
        for (size_t t = 0; t < T && rc == 0; t++) {
            if (group[t] != ev[e].group) {
                continue;
            }
            if (ev[e].fetch) {
                struct tio_move m = { .tensor = (uint32_t)t,
                                      .from = tier,
                                      .to = TIO_TIER_GPU,
                                      .flags = fp < 0 ? TIO_MOVE_WRAPS : 0,
                                      .trigger = (uint64_t)(fp < 0 ? fp + (int64_t)N : fp),
                                      .deadline = ev[e].k + (fp < 0 ? N : 0),
                                      .bytes = v->bytes[t] };
                rc = add_move(mv, n_mv, cap_mv, &m);
            }
            if (rc == 0 && ev[e].release) {
                struct tio_move m = { .tensor = (uint32_t)t,
                                      .from = TIO_TIER_GPU,
                                      .to = tier,
                                      .flags = TIO_MOVE_CLEAN,
                                      .trigger = ev[e + 1].k,
                                      .deadline = ev[e + 1].k,
                                      .bytes = v->bytes[t] };
                rc = add_move(mv, n_mv, cap_mv, &m);
            }
        }
    }
#undef FETCH_POS
done:
    tio_free(group);
    tio_free(ev);
    tio_free(last_ev);
    return rc;
}

int sim_zero_build(struct sim_view *v,
                   const struct tio_trace *trace,
                   const struct tio_hw *hw,
                   const struct tio_sim_params *p,
                   int infinity) {
    struct tio_trace_view tv;
    tio_trace_get_view(trace, &tv);
    size_t N = v->n_kernels, T = v->n_tensors;
    double dtype_bytes = 4.0;
    const char *db = tio_trace_get_meta(trace, "dtype_bytes");
    if (db && strtod(db, NULL) > 0) {
        dtype_bytes = strtod(db, NULL);
    }
    double scale = p->zero_bytes_scale;
    uint64_t w_trace = 0, g_zero = 0;
    for (size_t t = 0; t < T; t++) {
        int32_t kind = tv.tensor_kind[t];
        if (kind == TIO_TENSOR_OPTIM_STATE) {
            v->tflags[t] |= SV_EXTERNAL;
            continue;
        }
        uint64_t b = (uint64_t)((double)tv.tensor_bytes[t] * scale + 0.5);
        v->bytes[t] = b ? b : 1;
        if (kind == TIO_TENSOR_WEIGHT) {
            w_trace += tv.tensor_bytes[t];
        } else if (kind == TIO_TENSOR_GRAD) {
            g_zero += v->bytes[t];
        }
    }
    /* the optimizer runs on the host: GPU optimizer kernels vanish, their uses too */
    size_t k_opt = N;
    for (size_t k = 0; k < N; k++) {
        if (tv.kernel_flags[k] & TIO_KERNEL_OPTIM) {
            v->skip_uses[k] = 1;
            v->dur_s[k] = 0.0;
            if (k_opt == N) {
                k_opt = k;
            }
        }
    }
    sim_view_uses_refresh(v);
    double params = (double)w_trace / dtype_bytes; /* parameters on this GPU */
    uint32_t gpus = hw->gpus ? hw->gpus : 1;
    double cores = (double)(hw->cpu_cores ? hw->cpu_cores : 1) / gpus;
    if (cores < 1) {
        cores = 1;
    }
    double t_adam = params / (cores * p->cpu_adam_params_per_core_s);
    double eff = hw->ssd_efficiency > 0 ? hw->ssd_efficiency : 1.0;
    double ssd_r = (double)hw->ssd_count * hw->ssd_read_Bps * eff * p->ssd_bandwidth_scale;
    double ssd_w = (double)hw->ssd_count * hw->ssd_write_Bps * eff * p->ssd_bandwidth_scale;
    double t_opt;
    if (infinity) {
        /* m, v and the fp32 weights (12 B/param) read and written back; in mixed precision
         * (scale < 1) the fp32 master copy is separate and the low-precision parameters are
         * written too. Reads and writes share the array's budget (pipeline_read/write
         * overlaps them): mix x (read / R + write / W). */
        double wr_b = 12.0 + (scale < 1.0 ? 4.0 * scale : 0.0);
        double mix = tio_hw_ssd_mix_factor(hw);
        double io =
            ssd_r > 0 && ssd_w > 0 ? mix * (12.0 * params / ssd_r + wr_b * params / ssd_w) : 0.0;
        t_opt = TIO_MAX(t_adam, io);
        /* host: fp32 gradient partition + 18 parameter buffers of 540M values + 4 optimizer
         * swap buffers (Table 4) */
        v->host_static_bytes = (uint64_t)(4.0 * params) +
                               (uint64_t)(18.0 * 540e6 * dtype_bytes * scale) +
                               (uint64_t)(4.0 * 16.0 * 1e8);
    } else {
        t_opt = t_adam; /* updates the host partition in place: nothing to copy back */
        /* DeepSpeed's estimator for offload_optimizer=cpu: 16 B/param (fp32 master, m, v, fp32
         * grads) x 1.5 buffer factor; gradients are counted when they arrive */
        double need = 24.0 * params - (double)g_zero;
        v->host_static_bytes = need > 0 ? (uint64_t)need : 0;
    }
    v->host_limit_bytes = hw->host_memory_bytes / gpus;
    v->host_capped = 1;
    /* GPU-side working buffer of ZeRO-3 at DeepSpeed's defaults: reduce_bucket_size 5e8
     * values in the training precision. stage3_max_live_parameters (1e9) and
     * stage3_prefetch_bucket_size (5e8) bound the parameters fetched to the GPU, which this
     * model simulates as tensors (a layer at a time): subtracting them too would count those
     * parameters twice. */
    const uint64_t zero_gpu_buffers = (uint64_t)(5e8 * dtype_bytes * scale);
    if (v->capacity != UINT64_MAX) {
        v->capacity = v->capacity > zero_gpu_buffers ? v->capacity - zero_gpu_buffers : 0;
    }
    /* The parameter fetch path (docs/baselines.md, "parameter fetch"): DeepSpeed fetches each
     * submodule's partitioned parameters in its hook, tensor by tensor, each at a fixed cost
     * (hook, all-gather, synchronisation) plus its bytes at the host->GPU rate; ZeRO-Infinity
     * first reads them from NVMe into pinned host buffers (the "extra hop", paper §4.2),
     * pipelined with that copy through its 18 buffers (Table 4). Fetched one after another, n
     * tensors of B bytes take n x overhead + B / rate: the path runs at mean / (overhead + mean /
     * rate), mean = B / n over the tensors streamed. */
    double fetched_b = 0, fetched_n = 0;
    for (size_t t = 0; t < T; t++) {
        if (tv.tensor_kind[t] == TIO_TENSOR_WEIGHT && v->first_use[t] != TIO_NEVER_USED &&
            !zero_persistent(&tv, t, dtype_bytes)) {
            fetched_b += (double)v->bytes[t];
            fetched_n += 1;
        }
    }
    if (fetched_n > 0) {
        double mean = fetched_b / fetched_n;
        v->chan_cap_Bps[TIO_SIM_PCIE_H2D] =
            mean / (p->zero_fetch_overhead_s + mean / p->zero_offload_fetch_Bps);
    }
    if (infinity && isfinite(p->zero_infinity_fetch_Bps)) {
        v->chan_cap_Bps[TIO_SIM_SSD_READ] = p->zero_infinity_fetch_Bps;
    }
    if (N > 0) {
        v->cpu_s[k_opt < N ? k_opt : 0] += t_opt;
    }
    /* gradients: each micro-batch's gradient is copied to the host after the kernel that
     * produced it and accumulated there (ZeRO-Offload's CPU-side accumulation); the next
     * micro-batch re-creates it on the GPU */
    struct tio_move *mv = NULL;
    size_t n_mv = 0, cap_mv = 0;
    int rc = 0;
    for (size_t k = 0; k + 1 < N && rc == 0; k++) {
        if (v->skip_uses[k]) {
            continue;
        }
        for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1] && rc == 0; u++) {
            uint32_t t = v->use_tensor[u];
            if (tv.tensor_kind[t] != TIO_TENSOR_GRAD) {
                continue;
            }
            v->tflags[t] |= SV_GLOBAL | SV_FRESH;
            struct tio_move m = { .tensor = t,
                                  .from = TIO_TIER_GPU,
                                  .to = TIO_TIER_HOST,
                                  .trigger = k + 1,
                                  .deadline = k + 1,
                                  .bytes = v->bytes[t] };
            rc = add_move(&mv, &n_mv, &cap_mv, &m);
        }
    }
    if (rc == 0) {
        /* ZeRO-3 (Table 4: stage 3): the parameter partition lives on the host (Offload) or on
         * NVMe (Infinity) and is fetched layer by layer */
        int tier = infinity ? TIO_TIER_SSD : TIO_TIER_HOST;
        for (size_t t = 0; t < T; t++) {
            if (tv.tensor_kind[t] == TIO_TENSOR_WEIGHT && !zero_persistent(&tv, t, dtype_bytes)) {
                v->tflags[t] |= SV_INIT_OFF | (infinity ? 0 : SV_HOSTCOPY);
                v->init_tier[t] = (uint8_t)tier;
            }
        }
        rc = stream_moves(v, tier, trace, &tv, dtype_bytes, p, &mv, &n_mv, &cap_mv);
    }
    if (rc == 0) {
        rc = sim_view_set_moves(v, mv, n_mv);
    }
    tio_free(mv);
    return rc;
}
