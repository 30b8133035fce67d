/* Hardware descriptions: presets, validation, JSON load/save (teraio/hw.h, docs/hardware.md). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/hw.h>
#include <teraio/units.h>

#include "common/common_impl.h"
#include "plan/planner_impl.h"

/* The largest hardware description file read (bytes); real ones are under 4 KiB. */
#define HW_FILE_MAX (UINT64_C(1) << 20)

/* Decimal units, as vendors quote them. */
#define GB  1e9
#define GiB (1024.0 * 1024.0 * 1024.0)
#define TB  1e12

/*
 * PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 encoding / 8 = 63.0 GB/s per direction raw; TLP
 * header and flow-control overhead leave ~85% of that for large DMA, so ~53 GB/s sustained per
 * direction (the figure nvbandwidth / bandwidthTest report for H100 PCIe hosts is 50-55 GB/s).
 * Gen4 x16 by the same arithmetic: 31.5 GB/s raw, ~26 GB/s sustained.
 */
#define PCIE5_SUSTAINED_Bps (53.0 * GB)

/* Samsung 990 PRO 2 TB datasheet: 7.45/6.9 GB/s; the paper (Table 2) quotes 6.7/6.5 GB/s and
 * measured ~16 GB/s per 4-drive RAID-0 array (Section 3.3): 16 / (4 x 6.5) = 0.615. */
#define PAPER_SSD_EFFICIENCY (16.0 / 26.0)

/* Training-thread CPU time (docs/hardware.md, "Software costs"): the launch is already in the
 * workload model's kernel durations (its 4 us launch_overhead_s, docs/model.md), so none on
 * top; teraio's hook and executor per operator beyond plain PyTorch (docs/bench/torch.md, "Hook
 * overhead per operator": 35.8 - 6.8 us); per issued move (the GPU twin, docs/hardware.md). */
#define KERNEL_LAUNCH_S   0.0
#define KERNEL_EXECUTOR_S 29.0e-6
#define MOVE_ISSUE_S      23.0e-6

static struct tio_hw paper_1t(void) {
    struct tio_hw hw = {
        .struct_size = sizeof(struct tio_hw),
        .name = "paper-2xh100nvl",
        .gpu = "h100-nvl",
        .gpus = 2,
        /* Table 2: "94 GB" HBM per GPU; HBM sizes are binary (an "80 GB" A100 reports 81920
         * MiB), and the workload model (docs/model.md) uses 94 GiB too. */
        .gpu_memory_bytes = UINT64_C(94) << 30,
        .gpu_reserve_bytes = UINT64_C(2) << 30, /* CUDA context, NCCL, allocator slack */
        .pcie_h2d_Bps = PCIE5_SUSTAINED_Bps,
        .pcie_d2h_Bps = PCIE5_SUSTAINED_Bps,
        .ssd_count = 4, /* 8 x 990 PRO as two RAID-0 arrays of 4, one per GPU */
        .ssd_read_Bps = 6.7 * GB,
        .ssd_write_Bps = 6.5 * GB,
        .ssd_efficiency = PAPER_SSD_EFFICIENCY,
        .ssd_latency_s = 20e-6,                       /* G10's default SSD latency */
        .ssd_tbw_bytes = 1200.0 * TB,                 /* 990 PRO 2 TB warranty: 1200 TBW */
        .host_memory_bytes = UINT64_C(1000000000000), /* the 1 TB server of Table 3 */
        /* TeraIO-Mixed gets ZeRO-Infinity's host budget: 770 GB for Llama3-70B (Section 4.4),
         * split over the 2 GPUs. For Llama3-8B the paper's budget is 170 GB (85 GB per GPU). */
        .host_offload_cap_bytes = UINT64_C(385000000000),
        .host_memory_Bps = 460.8 * GB, /* DDR5-4800 x 12 channels, one EPYC 9334 socket */
        .gds = 1,
        .cpu_cores = 64,             /* 2 x EPYC 9334 (32 cores each) */
        .server_price_usd = 91047.9, /* Table 3 */
        .ssd_price_usd = 1360.0,     /* Table 3: 8 x 990 PRO 2 TB */
        /* No 50/50 mixed sequential measurement of the 990 PRO in our sources: time sharing
         * (reads and writes share the drive's time, the harmonic mean at 50/50). */
        .ssd_mixed_Bps = 0,
        /* 990 PRO 2 TB data sheet: Intelligent TurboWrite 2.0 region 216 GB (6 GB static + 210
         * GB dynamic); once it is full the drive writes at ~1.4 GB/s (reviews of the 2 TB model
         * measure 1.4-1.6 GB/s post-cache; the low end is taken). */
        .ssd_write_cache_bytes = UINT64_C(216000000000),
        .ssd_sustained_write_Bps = 1.4 * GB,
        /* Software costs, measured on the training thread (docs/hardware.md, "Software costs",
         * gives the runs): no launch beyond the one in the model's durations; teraio's
         * dispatch hook and executor calls per operator beyond plain PyTorch; the executor's
         * time per issued move on the GPU twin. No measurement of kernels slowed by concurrent
         * transfers: none modelled. */
        .kernel_launch_s = KERNEL_LAUNCH_S,
        .kernel_executor_s = KERNEL_EXECUTOR_S,
        .move_issue_s = MOVE_ISSUE_S,
        .kernel_io_slowdown = 0,
    };
    return hw;
}

static struct tio_hw paper_128g(void) {
    struct tio_hw hw = paper_1t();
    (void)snprintf(hw.name, sizeof hw.name, "%s", "paper-2xh100nvl-128g");
    hw.host_memory_bytes = UINT64_C(128000000000);
    /* 128 GB minus ~32 GB for the OS, the framework and data loading, split over 2 GPUs. */
    hw.host_offload_cap_bytes = UINT64_C(48000000000);
    hw.server_price_usd = 84139.9; /* Table 3 */
    return hw;
}

/*
 * An 8-GPU server (2 TB host memory, 112 cores, no list price) with the paper's drives and PCIe
 * links: ssds_per_gpu 990 PRO drives per GPU at $170 each.
 */
static struct tio_hw eight_gpu_server(const char *name,
                                      const char *gpu,
                                      uint64_t gpu_memory_bytes,
                                      uint32_t ssds_per_gpu) {
    struct tio_hw hw = paper_1t();
    (void)snprintf(hw.name, sizeof hw.name, "%s", name);
    (void)snprintf(hw.gpu, sizeof hw.gpu, "%s", gpu);
    hw.gpus = 8;
    hw.gpu_memory_bytes = gpu_memory_bytes;
    hw.ssd_count = ssds_per_gpu;
    hw.host_memory_bytes = UINT64_C(2000000000000);
    hw.host_offload_cap_bytes = UINT64_C(128000000000);
    hw.cpu_cores = 112;
    hw.server_price_usd = 0;
    hw.ssd_price_usd = (double)(hw.gpus * ssds_per_gpu) * 170.0;
    return hw;
}

static struct tio_hw h100_sxm_8ssd(void) {
    /* Section 3.3: 8 SSDs per GPU behind PCIe Gen5 switches, ~32 GB/s */
    return eight_gpu_server("h100-sxm-8ssd", "h100-sxm", UINT64_C(80) << 30, 8);
}

static struct tio_hw h200_4ssd(void) {
    return eight_gpu_server("h200-4ssd", "h200", UINT64_C(141) << 30, 4);
}

/* A small machine for CI and laptops: CPU "device" memory, one NVMe, no GDS. */
static struct tio_hw cpu_ci(void) {
    struct tio_hw hw = {
        .struct_size = sizeof(struct tio_hw),
        .name = "cpu-ci",
        .gpu = "cpu",
        .gpus = 1,
        .gpu_memory_bytes = UINT64_C(8589934592), /* 8 GiB budget */
        .gpu_reserve_bytes = UINT64_C(268435456),
        .pcie_h2d_Bps = 10.0 * GB, /* memcpy-bound "transfers" */
        .pcie_d2h_Bps = 10.0 * GB,
        .ssd_count = 1,
        .ssd_read_Bps = 3.5 * GB,
        .ssd_write_Bps = 3.0 * GB,
        .ssd_efficiency = 0.8,
        .ssd_latency_s = 50e-6,
        .ssd_tbw_bytes = 600.0 * TB,
        .host_memory_bytes = UINT64_C(34359738368), /* 32 GiB */
        .host_offload_cap_bytes = UINT64_C(8589934592),
        .host_memory_Bps = 40.0 * GB,
        .gds = 0,
        .cpu_cores = 4,
        .server_price_usd = 0,
        .ssd_price_usd = 0,
        .ssd_mixed_Bps = 0,         /* time sharing */
        .ssd_write_cache_bytes = 0, /* not modelled: CI traces write little */
        .ssd_sustained_write_Bps = 0,
        /* no software costs: a CPU trace's durations are the operators' wall times on the
         * training thread, its own costs included */
        .kernel_launch_s = 0,
        .kernel_executor_s = 0,
        .move_issue_s = 0,
        .kernel_io_slowdown = 0,
    };
    return hw;
}

struct preset {
    const char *name;
    struct tio_hw (*make)(void);
};

static const struct preset presets[] = {
    { "paper-2xh100nvl", paper_1t },
    { "paper-2xh100nvl-128g", paper_128g },
    { "h100-sxm-8ssd", h100_sxm_8ssd },
    { "h200-4ssd", h200_4ssd },
    { "cpu-ci", cpu_ci },
};

/* The defaults tio_hw_defaults hands out (the header's tio_hw_default goes through it). */
static struct tio_hw builtin_defaults(void) {
    return paper_1t();
}

int tio_hw_defaults(struct tio_hw *out, size_t size) {
    struct tio_hw d = builtin_defaults();
    return tio_struct_out("tio_hw", out, size, &d, sizeof d, TIO_HW_MIN_SIZE);
}

size_t tio_hw_preset_count(void) {
    return TIO_ARRAY_LEN(presets);
}

const char *tio_hw_preset_name(size_t i) {
    return i < TIO_ARRAY_LEN(presets) ? presets[i].name : NULL;
}

static const struct preset *find_preset(const char *name) {
    for (size_t i = 0; name && i < TIO_ARRAY_LEN(presets); i++) {
        if (strcmp(presets[i].name, name) == 0) {
            return &presets[i];
        }
    }
    return NULL;
}

int tio_hw_preset(const char *name, struct tio_hw *out) {
    const struct preset *p = find_preset(name);
    if (!p) {
        char list[512] = "";
        size_t len = 0;
        for (size_t i = 0; i < TIO_ARRAY_LEN(presets) && len < sizeof list; i++) {
            int n = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", presets[i].name);
            if (n < 0) {
                break;
            }
            len += (size_t)n;
        }
        return tio_set_error(TIO_ENOTFOUND, "hw: unknown preset '%s' (known: %s)",
                             name ? name : "(null)", list);
    }
    *out = p->make();
    return 0;
}

double tio_hw_ssd_read_Bps(const struct tio_hw *hw) {
    return (double)hw->ssd_count * hw->ssd_read_Bps * hw->ssd_efficiency;
}

double tio_hw_ssd_write_Bps(const struct tio_hw *hw) {
    return (double)hw->ssd_count * hw->ssd_write_Bps * hw->ssd_efficiency;
}

double tio_hw_ssd_mix_factor(const struct tio_hw *hw) {
    double r = hw->ssd_read_Bps, w = hw->ssd_write_Bps, m = hw->ssd_mixed_Bps;
    if (!(m > 0) || !(r > 0) || !(w > 0)) {
        return 1.0;
    }
    return (2.0 / (1.0 / r + 1.0 / w)) / m;
}

double tio_hw_ssd_sustained_write_Bps(const struct tio_hw *hw) {
    double w = tio_hw_ssd_write_Bps(hw);
    if (hw->ssd_write_cache_bytes == 0 || !(hw->ssd_sustained_write_Bps > 0)) {
        return w;
    }
    return TIO_MIN(w, (double)hw->ssd_count * hw->ssd_sustained_write_Bps);
}

uint64_t tio_hw_plan_capacity(const struct tio_hw *hw) {
    return hw->gpu_memory_bytes > hw->gpu_reserve_bytes
               ? hw->gpu_memory_bytes - hw->gpu_reserve_bytes
               : 0;
}

int tio_hw_at_ssd_bandwidth(const struct tio_hw *hw, double bandwidth, struct tio_hw *out) {
    if (hw->ssd_count == 0) {
        return tio_set_error(TIO_EINVAL, "hw %s: has no SSDs, so no SSD bandwidth to vary",
                             hw->name);
    }
    if (!isfinite(bandwidth) || bandwidth <= 0) {
        return tio_set_error(TIO_EINVAL, "hw: SSD array bandwidth must be > 0 (got %g)", bandwidth);
    }
    struct tio_hw h = *hw;
    double eff = h.ssd_efficiency > 0 ? h.ssd_efficiency : 1.0;
    h.ssd_read_Bps = h.ssd_write_Bps = bandwidth / ((double)h.ssd_count * eff);
    h.ssd_write_cache_bytes = 0; /* Figure 3's model: a bandwidth, no drive caches */
    h.ssd_mixed_Bps = 0;
    h.pcie_h2d_Bps = TIO_MAX(h.pcie_h2d_Bps, bandwidth);
    h.pcie_d2h_Bps = TIO_MAX(h.pcie_d2h_Bps, bandwidth);
    *out = h;
    return 0;
}

/* ---- validation ---------------------------------------------------------------------------- */

static int check_pos(const char *field, double v) {
    if (!isfinite(v) || v <= 0) {
        return tio_set_error(TIO_EINVAL, "hw: %s: must be > 0 (got %g)", field, v);
    }
    return 0;
}

static int check_nonneg(const char *field, double v) {
    if (!isfinite(v) || v < 0) {
        return tio_set_error(TIO_EINVAL, "hw: %s: must be >= 0 (got %g)", field, v);
    }
    return 0;
}

/* Names are printed to terminals and reports: no control characters (an escape sequence in a
 * hardware file must not reach the terminal). */
static int check_name(const char *field, const char *s) {
    if (memchr(s, '\0', TIO_HW_NAME_MAX) == NULL) {
        return tio_set_error(TIO_EINVAL, "hw: %s: not NUL-terminated within %d bytes", field,
                             TIO_HW_NAME_MAX);
    }
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            return tio_set_error(TIO_EINVAL,
                                 "hw: %s: control character 0x%02x at byte %zu (names must be "
                                 "printable)",
                                 field, *p, (size_t)(p - (const unsigned char *)s));
        }
    }
    return 0;
}

/* A byte count no machine has: capacities above it are refused as absurd. */
static int check_bytes_max(const char *field, uint64_t v) {
    if (v > TIO_PLAN_MAX_CAPACITY) {
        return tio_set_error(TIO_EINVAL, "hw: %s: %llu is above the limit of 2^60 bytes (1 EiB)",
                             field, (unsigned long long)v);
    }
    return 0;
}

/* The software costs (fields a caller's older header may lack: those count as 0). */
static int check_software_costs(const struct tio_hw *hw) {
    static const struct {
        const char *name;
        size_t off;
        double max;
    } costs[] = {
        { "kernel_launch_s", offsetof(struct tio_hw, kernel_launch_s), 1.0 },
        { "kernel_executor_s", offsetof(struct tio_hw, kernel_executor_s), 1.0 },
        { "move_issue_s", offsetof(struct tio_hw, move_issue_s), 1.0 },
        { "kernel_io_slowdown", offsetof(struct tio_hw, kernel_io_slowdown), 100.0 },
    };
    for (size_t i = 0; i < TIO_ARRAY_LEN(costs); i++) {
        if (hw->struct_size < costs[i].off + sizeof(double)) {
            continue;
        }
        double v;
        memcpy(&v, (const char *)hw + costs[i].off, sizeof v);
        int rc = check_nonneg(costs[i].name, v);
        if (rc < 0) {
            return rc;
        }
        if (v > costs[i].max) {
            return tio_set_error(TIO_EINVAL, "hw: %s: must be at most %g (got %g)", costs[i].name,
                                 costs[i].max, v);
        }
    }
    return 0;
}

int tio_hw_validate(const struct tio_hw *hw) {
    int rc;
    if (!hw) {
        return tio_set_error(TIO_EINVAL, "hw: NULL description");
    }
    if ((rc = tio_struct_check("hw", hw, sizeof *hw, TIO_HW_MIN_SIZE)) < 0) {
        return rc;
    }
    if ((rc = check_name("name", hw->name)) < 0 || (rc = check_name("gpu", hw->gpu)) < 0) {
        return rc;
    }
    if (hw->gpus == 0 || hw->gpus > 4096) {
        return tio_set_error(TIO_EINVAL, "hw: gpus: must be in [1, 4096] (got %u)", hw->gpus);
    }
    if (hw->gpu_memory_bytes == 0) {
        return tio_set_error(TIO_EINVAL, "hw: gpu_memory_bytes: must be > 0 (got 0)");
    }
    if ((rc = check_bytes_max("gpu_memory_bytes", hw->gpu_memory_bytes)) < 0 ||
        (rc = check_bytes_max("host_memory_bytes", hw->host_memory_bytes)) < 0) {
        return rc;
    }
    if (hw->gpu_reserve_bytes >= hw->gpu_memory_bytes) {
        return tio_set_error(
            TIO_EINVAL, "hw: gpu_reserve_bytes: %llu must be below gpu_memory_bytes %llu",
            (unsigned long long)hw->gpu_reserve_bytes, (unsigned long long)hw->gpu_memory_bytes);
    }
    if ((rc = check_pos("pcie_h2d_Bps", hw->pcie_h2d_Bps)) < 0 ||
        (rc = check_pos("pcie_d2h_Bps", hw->pcie_d2h_Bps)) < 0) {
        return rc;
    }
    if (hw->ssd_count > 1024) {
        return tio_set_error(TIO_EINVAL, "hw: ssd_count: must be at most 1024 (got %u)",
                             hw->ssd_count);
    }
    if (hw->ssd_count > 0) {
        if ((rc = check_pos("ssd_read_Bps", hw->ssd_read_Bps)) < 0 ||
            (rc = check_pos("ssd_write_Bps", hw->ssd_write_Bps)) < 0) {
            return rc;
        }
    } else if ((rc = check_nonneg("ssd_read_Bps", hw->ssd_read_Bps)) < 0 ||
               (rc = check_nonneg("ssd_write_Bps", hw->ssd_write_Bps)) < 0) {
        return rc;
    }
    if (!isfinite(hw->ssd_efficiency) || hw->ssd_efficiency <= 0 || hw->ssd_efficiency > 1) {
        return tio_set_error(TIO_EINVAL, "hw: ssd_efficiency: must be in (0, 1] (got %g)",
                             hw->ssd_efficiency);
    }
    if ((rc = check_nonneg("ssd_latency_s", hw->ssd_latency_s)) < 0 ||
        (rc = check_nonneg("ssd_tbw_bytes", hw->ssd_tbw_bytes)) < 0) {
        return rc;
    }
    if (hw->ssd_latency_s > 1.0) {
        return tio_set_error(TIO_EINVAL, "hw: ssd_latency_s: must be at most 1 s (got %g)",
                             hw->ssd_latency_s);
    }
    if (hw->host_memory_bytes == 0) {
        return tio_set_error(TIO_EINVAL, "hw: host_memory_bytes: must be > 0 (got 0)");
    }
    if (hw->host_offload_cap_bytes > hw->host_memory_bytes) {
        return tio_set_error(TIO_EINVAL,
                             "hw: host_offload_cap_bytes: %llu exceeds host_memory_bytes %llu",
                             (unsigned long long)hw->host_offload_cap_bytes,
                             (unsigned long long)hw->host_memory_bytes);
    }
    if ((rc = check_pos("host_memory_Bps", hw->host_memory_Bps)) < 0) {
        return rc;
    }
    if (hw->gds != 0 && hw->gds != 1) {
        return tio_set_error(TIO_EINVAL, "hw: gds: must be 0 or 1 (got %d)", hw->gds);
    }
    if (hw->cpu_cores == 0) {
        return tio_set_error(TIO_EINVAL, "hw: cpu_cores: must be >= 1 (got 0)");
    }
    if ((rc = check_nonneg("ssd_mixed_Bps", hw->ssd_mixed_Bps)) < 0 ||
        (rc = check_nonneg("ssd_sustained_write_Bps", hw->ssd_sustained_write_Bps)) < 0) {
        return rc;
    }
    if (hw->ssd_mixed_Bps > hw->ssd_read_Bps + hw->ssd_write_Bps) {
        return tio_set_error(TIO_EINVAL,
                             "hw: ssd_mixed_Bps: %g exceeds ssd_read_Bps + ssd_write_Bps (%g): "
                             "a mix cannot beat both directions at full rate",
                             hw->ssd_mixed_Bps, hw->ssd_read_Bps + hw->ssd_write_Bps);
    }
    if ((rc = check_nonneg("server_price_usd", hw->server_price_usd)) < 0 ||
        (rc = check_nonneg("ssd_price_usd", hw->ssd_price_usd)) < 0) {
        return rc;
    }
    return check_software_costs(hw);
}

/* ---- JSON ---------------------------------------------------------------------------------- */

enum ftype { F_STR, F_U32, F_I32, F_BYTES, F_RATE, F_TIME, F_REAL, F_BYTES_REAL };

struct field {
    const char *key;
    enum ftype type;
    size_t off;
};

#define FLD(name, type) \
    { #name, type, offsetof(struct tio_hw, name) }
static const struct field fields[] = {
    FLD(name, F_STR),
    FLD(gpu, F_STR),
    FLD(gpus, F_U32),
    FLD(gpu_memory_bytes, F_BYTES),
    FLD(gpu_reserve_bytes, F_BYTES),
    FLD(pcie_h2d_Bps, F_RATE),
    FLD(pcie_d2h_Bps, F_RATE),
    FLD(ssd_count, F_U32),
    FLD(ssd_read_Bps, F_RATE),
    FLD(ssd_write_Bps, F_RATE),
    FLD(ssd_efficiency, F_REAL),
    FLD(ssd_latency_s, F_TIME),
    FLD(ssd_tbw_bytes, F_BYTES_REAL),
    FLD(host_memory_bytes, F_BYTES),
    FLD(host_offload_cap_bytes, F_BYTES),
    FLD(host_memory_Bps, F_RATE),
    FLD(gds, F_I32),
    FLD(cpu_cores, F_U32),
    FLD(server_price_usd, F_REAL),
    FLD(ssd_price_usd, F_REAL),
    FLD(ssd_mixed_Bps, F_RATE),
    FLD(ssd_write_cache_bytes, F_BYTES),
    FLD(ssd_sustained_write_Bps, F_RATE),
    FLD(kernel_launch_s, F_TIME),
    FLD(kernel_executor_s, F_TIME),
    FLD(move_issue_s, F_TIME),
    FLD(kernel_io_slowdown, F_REAL),
};
#undef FLD

/* A JSON number that must be a non-negative integer <= max. */
static int json_uint(const char *key, const json_t *v, uint64_t max, uint64_t *out) {
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 || (uint64_t)i > max) {
            return tio_set_error(TIO_EINVAL, "hw: %s: must be an integer in [0, %llu] (got %lld)",
                                 key, (unsigned long long)max, (long long)i);
        }
        *out = (uint64_t)i;
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d >= 0) || d > (double)max || d != floor(d)) {
            return tio_set_error(TIO_EINVAL, "hw: %s: must be an integer in [0, %llu] (got %g)",
                                 key, (unsigned long long)max, d);
        }
        *out = (uint64_t)d;
        return 0;
    }
    return tio_set_error(TIO_EFORMAT, "hw: %s: expected a number", key);
}

static int prefixed(int rc, const char *key) {
    char pre[96];
    (void)snprintf(pre, sizeof pre, "hw: %s: ", key);
    return tio_plan_rewrap(rc, pre, "");
}

static int set_field(struct tio_hw *hw, const struct field *f, const json_t *v) {
    char *base = (char *)hw + f->off;
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    uint64_t u = 0;
    double d = 0;
    int rc = 0;
    switch (f->type) {
    case F_STR:
        if (!s) {
            return tio_set_error(TIO_EFORMAT, "hw: %s: expected a string", f->key);
        }
        if (strlen(s) >= TIO_HW_NAME_MAX) {
            return tio_set_error(TIO_EINVAL, "hw: %s: longer than %d bytes", f->key,
                                 TIO_HW_NAME_MAX - 1);
        }
        (void)snprintf(base, TIO_HW_NAME_MAX, "%s", s);
        return 0;
    case F_U32: {
        if ((rc = json_uint(f->key, v, UINT32_MAX, &u)) < 0) {
            return rc;
        }
        uint32_t u32 = (uint32_t)u;
        memcpy(base, &u32, sizeof u32);
        return 0;
    }
    case F_I32: {
        if (!json_is_integer(v) && !json_is_real(v)) {
            return tio_set_error(TIO_EFORMAT, "hw: %s: expected a number", f->key);
        }
        double x = json_number_value(v);
        if (x != floor(x) || x < INT32_MIN || x > INT32_MAX) {
            return tio_set_error(TIO_EINVAL, "hw: %s: must be an integer (got %g)", f->key, x);
        }
        int32_t i32 = (int32_t)x;
        memcpy(base, &i32, sizeof i32);
        return 0;
    }
    case F_BYTES:
        if (s) {
            rc = tio_parse_bytes(s, &u);
        } else {
            rc = json_uint(f->key, v, UINT64_MAX, &u);
        }
        if (rc < 0) {
            return s ? prefixed(rc, f->key) : rc;
        }
        memcpy(base, &u, sizeof u);
        return 0;
    case F_RATE:
    case F_TIME:
    case F_REAL:
    case F_BYTES_REAL:
        if (s) {
            if (f->type == F_RATE) {
                rc = tio_parse_rate(s, &d);
            } else if (f->type == F_TIME) {
                rc = tio_parse_duration(s, &d);
            } else if (f->type == F_BYTES_REAL) {
                rc = tio_parse_bytes(s, &u);
                d = (double)u;
            } else {
                rc = tio_set_error(TIO_EINVAL, "'%s' is not a number", s);
            }
            if (rc < 0) {
                return prefixed(rc, f->key);
            }
        } else if (json_is_number(v)) {
            d = json_number_value(v);
        } else {
            return tio_set_error(TIO_EFORMAT, "hw: %s: expected a number or a string with a unit",
                                 f->key);
        }
        memcpy(base, &d, sizeof d);
        return 0;
    }
    return tio_set_error(TIO_EINVAL, "hw: %s: internal: unknown type", f->key);
}

// NOLINTBEGIN(misc-no-recursion): a 'base' chain, at most 8 deep
static int load_depth(const char *path_or_preset, struct tio_hw *out, int depth);

static int apply_json(const json_t *root, const char *path, struct tio_hw *out, int depth) {
    if (!json_is_object(root)) {
        return tio_set_error(TIO_EFORMAT, "hw: %s: top level must be a JSON object", path);
    }
    const json_t *b = json_object_get(root, "base");
    struct tio_hw hw = tio_hw_default();
    int rc;
    if (b) {
        if (!json_is_string(b)) {
            return tio_set_error(TIO_EFORMAT, "hw: %s: base: expected a preset name or a file",
                                 path);
        }
        if ((rc = load_depth(json_string_value(b), &hw, depth + 1)) < 0) {
            return rc;
        }
    } else {
        hw = tio_hw_default();
    }
    const char *key;
    json_t *v;
    void *iter;
    for (iter = json_object_iter((json_t *)tio_unconst(root));
         iter && (key = json_object_iter_key(iter), v = json_object_iter_value(iter), 1);
         iter = json_object_iter_next((json_t *)tio_unconst(root), iter)) {
        if (strcmp(key, "base") == 0 || key[0] == '_' || strcmp(key, "comment") == 0) {
            continue; /* "_note", "comment": free text for humans */
        }
        const struct field *f = NULL;
        for (size_t i = 0; i < TIO_ARRAY_LEN(fields); i++) {
            if (strcmp(fields[i].key, key) == 0) {
                f = &fields[i];
                break;
            }
        }
        if (!f) {
            return tio_set_error(TIO_EFORMAT, "hw: %s: unknown key '%s' (see docs/hardware.md)",
                                 path, key);
        }
        if ((rc = set_field(&hw, f, v)) < 0) {
            return rc;
        }
    }
    if (!json_object_get(root, "name")) {
        /* Name it after the file (basename without directories). */
        const char *slash = strrchr(path, '/');
        (void)snprintf(hw.name, sizeof hw.name, "%s", slash ? slash + 1 : path);
        for (char *c = hw.name; *c; c++) {
            if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                *c = '?'; /* a file name may hold anything; the name is printed */
            }
        }
    }
    *out = hw;
    return 0;
}

/* Parse a hardware description held in memory; `path` names it in errors. */
static int
parse_text(const void *text, size_t len, const char *path, struct tio_hw *out, int depth) {
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        return tio_set_error(TIO_EFORMAT, "hw: %s:%d:%d: %s", path, err.line, err.column, err.text);
    }
    int rc = apply_json(root, path, out, depth);
    json_decref(root);
    return rc;
}

static int load_depth(const char *path_or_preset, struct tio_hw *out, int depth) {
    if (!path_or_preset || !*path_or_preset) {
        return tio_set_error(TIO_EINVAL, "hw: empty file or preset name");
    }
    if (depth > 8) {
        return tio_set_error(TIO_EFORMAT, "hw: %s: 'base' chain deeper than 8 (a loop?)",
                             path_or_preset);
    }
    if (find_preset(path_or_preset)) {
        return tio_hw_preset(path_or_preset, out);
    }
    /* A regular file of at most HW_FILE_MAX bytes (never a FIFO or a device: tio_input_open) */
    struct tio_input in;
    int rc = tio_input_open("hw", path_or_preset, HW_FILE_MAX, &in);
    if (rc == -ENOENT && !strchr(path_or_preset, '/') && !strchr(path_or_preset, '.')) {
        struct tio_hw dummy;
        return tio_hw_preset(path_or_preset, &dummy); /* lists the presets */
    }
    if (rc < 0) {
        return rc;
    }
    void *text = NULL;
    size_t len = 0;
    rc = tio_input_read_all(&in, &text, &len);
    tio_input_close(&in);
    if (rc < 0) {
        return rc;
    }
    rc = parse_text(text, len, path_or_preset, out, depth);
    tio_free(text);
    return rc;
}
// NOLINTEND(misc-no-recursion)

int tio_hw_parse_json(const void *text, size_t len, const char *name, struct tio_hw *out) {
    struct tio_hw hw = tio_hw_default();
    int rc = parse_text(text, len, name, &hw, 0);
    if (rc == 0) {
        rc = tio_hw_validate(&hw);
    }
    if (rc == 0) {
        *out = hw;
    }
    return rc;
}

int tio_hw_load(const char *path_or_preset, struct tio_hw *out) {
    struct tio_hw hw = tio_hw_default();
    int rc = load_depth(path_or_preset, &hw, 0);
    if (rc < 0) {
        return rc;
    }
    if ((rc = tio_hw_validate(&hw)) < 0) {
        char ctx[300];
        (void)snprintf(ctx, sizeof ctx, " (in %s)", path_or_preset);
        return tio_plan_rewrap(rc, "", ctx);
    }
    *out = hw;
    return 0;
}

int tio_hw_to_json(const struct tio_hw *hw, char **json) {
    json_t *o = json_object();
    if (!o) {
        return TIO_ENOMEM;
    }
    int bad = 0;
    for (size_t i = 0; i < TIO_ARRAY_LEN(fields); i++) {
        const struct field *f = &fields[i];
        const char *base = (const char *)hw + f->off;
        json_t *v = NULL;
        if (f->off >= TIO_HW_MIN_SIZE && hw->struct_size < f->off + sizeof(double)) {
            continue; /* a caller's older header: a field it does not have */
        }
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        double d;
        switch (f->type) {
        case F_STR: {
            char s[TIO_HW_NAME_MAX];
            memcpy(s, base, sizeof s);
            s[sizeof s - 1] = '\0';
            v = json_string(s);
            break;
        }
        case F_U32:
            memcpy(&u32, base, sizeof u32);
            v = json_integer((json_int_t)u32);
            break;
        case F_I32:
            memcpy(&i32, base, sizeof i32);
            v = json_integer((json_int_t)i32);
            break;
        case F_BYTES:
            memcpy(&u64, base, sizeof u64);
            /* jansson integers are signed 64-bit: sizes above 2^63 cannot occur in valid hw */
            v = u64 <= (uint64_t)INT64_MAX ? json_integer((json_int_t)u64) : json_real((double)u64);
            break;
        default:
            memcpy(&d, base, sizeof d);
            v = json_real(d);
            break;
        }
        bad |= v == NULL || json_object_set_new(o, f->key, v) != 0;
    }
    char *text =
        bad ? NULL : json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!text) {
        return tio_set_error(TIO_ENOMEM, "hw: cannot serialize to JSON");
    }
    *json = tio_strdup(text);
    free(text);
    return *json ? 0 : TIO_ENOMEM;
}
