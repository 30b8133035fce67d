/* Shared fixtures of the simulator tests (test_sim*.c; header-only, each test is one
 * executable): the test hardware, traces from tensor and kernel specs, moves, one run. */
#ifndef TIO_TESTS_SIM_UTIL_H
#define TIO_TESTS_SIM_UTIL_H

#include <string.h>
#include <unistd.h>

#include <teraio/sim.h>
#include <teraio/teraio.h>

#include "tio_test.h"

#define MS 1e-3

/* Test hardware: `gpus` GPUs of `capacity` bytes, 1 SSD at 1 GB/s each way, PCIe 10 GB/s each
 * way (never the bottleneck of an SSD path), no latencies. */
static inline struct tio_hw sim_test_hw(uint32_t gpus, uint64_t capacity) {
    struct tio_hw hw;
    memset(&hw, 0, sizeof hw);
    hw.struct_size = sizeof hw;
    snprintf(hw.name, sizeof hw.name, "test");
    hw.gpus = gpus;
    hw.gpu_memory_bytes = capacity;
    hw.gpu_reserve_bytes = 0;
    hw.pcie_h2d_Bps = 1e10;
    hw.pcie_d2h_Bps = 1e10;
    hw.ssd_count = 1;
    hw.ssd_read_Bps = 1e9;
    hw.ssd_write_Bps = 1e9;
    hw.ssd_efficiency = 1.0;
    hw.ssd_latency_s = 0.0;
    hw.ssd_tbw_bytes = 1.2e15;
    hw.host_memory_bytes = UINT64_C(1) << 40;
    hw.host_offload_cap_bytes = 0;
    hw.host_memory_Bps = 1e11;
    hw.gds = 1;
    hw.cpu_cores = 4;
    return hw;
}

static inline struct tio_sim_params test_params(void) {
    struct tio_sim_params p = tio_sim_params_default();
    p.host_latency_s = 0.0;
    return p;
}

/* Tensor and kernel specs: uses are tensor ids terminated by -1 (mode read+write). */
struct tspec {
    uint64_t bytes;
    int32_t kind;
    uint32_t flags;
};
struct kspec {
    double ms;
    uint32_t flags;
    int uses[6];
};

static inline struct tio_trace *
mk(const struct tspec *ts, size_t nt, const struct kspec *ks, size_t nk, const char *tokens) {
    struct tio_trace *tr = NULL;
    if (tio_trace_new(NULL, &tr) < 0) {
        return NULL;
    }
    for (size_t i = 0; i < nt; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%zu", i);
        if (tio_trace_add_tensor(tr, ts[i].bytes, ts[i].kind, ts[i].flags, name, NULL) < 0) {
            goto fail;
        }
    }
    for (size_t k = 0; k < nk; k++) {
        uint64_t ns = (uint64_t)(ks[k].ms * 1e6 + 0.5);
        if (tio_trace_add_kernel(tr, "k", ns, ks[k].flags, NULL) < 0) {
            goto fail;
        }
        for (int u = 0; u < 6 && ks[k].uses[u] >= 0; u++) {
            if (tio_trace_add_use(tr, (uint32_t)ks[k].uses[u], TIO_USE_READ_WRITE) < 0) {
                goto fail;
            }
        }
    }
    if (tokens && tio_trace_set_meta(tr, "tokens_per_iteration", tokens) < 0) {
        goto fail;
    }
    if (tio_trace_finish(tr) < 0) {
        goto fail;
    }
    return tr;
fail:
    tio_trace_free(tr);
    return NULL;
}

#define W   TIO_TENSOR_WEIGHT
#define ACT TIO_TENSOR_ACTIVATION
#define G   TIO_TENSOR_GLOBAL

static inline struct tio_move
mv(uint32_t t, int from, int to, uint64_t trig, uint64_t dl, uint32_t fl) {
    struct tio_move m = { .tensor = t,
                          .from = from,
                          .to = to,
                          .flags = fl,
                          .trigger = trig,
                          .deadline = dl,
                          .bytes = 0 };
    return m;
}

static inline int run(const struct tio_trace *tr,
                      const struct tio_hw *hw,
                      const struct tio_move *m,
                      size_t n,
                      const char *policy,
                      struct tio_sim_result *r,
                      struct tio_sim **keep) {
    struct tio_sim_params p = test_params();
    p.policy = policy;
    struct tio_sim *sim = NULL;
    int rc = tio_sim_run(tr, hw, m, n, &p, &sim);
    if (rc < 0) {
        printf("  tio_sim_run: %s: %s\n", tio_strerror(rc), tio_last_error());
        return rc;
    }
    tio_sim_get_result(sim, r, sizeof *r);
    if (keep) {
        *keep = sim;
    } else {
        tio_sim_free(sim);
    }
    return 0;
}

#endif
