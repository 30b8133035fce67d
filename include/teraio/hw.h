/*
 * teraio/hw.h - the hardware description planners and the simulator work against.
 *
 * One record per GPU's view of the machine: its memory, its PCIe link, the SSDs assigned to it
 * and the host memory it may offload to. JSON form documented in docs/hardware.md:
 *
 *     struct tio_hw hw;
 *     if (tio_hw_preset("paper-2xh100nvl", &hw) < 0) ...  // or tio_hw_load("my.json", &hw)
 *     hw.ssd_count = 8;                                    // what-if: 8 SSDs per GPU
 *     if (tio_hw_validate(&hw) < 0) ...                    // names the bad field
 *
 * All rates are bytes per second (decimal, as vendors quote them), sizes bytes, times seconds.
 */
#ifndef TERAIO_HW_H
#define TERAIO_HW_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TIO_HW_NAME_MAX 64

/* Latency of one host <-> GPU copy request, s: the simulator's default (tio_sim_params
 * host_latency_s) and what the planner allows for every move to or from host memory. */
#define TIO_HW_HOST_LATENCY_S 10e-6

struct tio_hw {
    /* Size of this struct as the caller's header declares it: set by tio_hw_default(s),
     * tio_hw_preset and tio_hw_load (docs/style.md, "Versioned structs"). */
    uint32_t struct_size;
    char name[TIO_HW_NAME_MAX];      /* preset or file name, NUL-terminated */
    char gpu[TIO_HW_NAME_MAX];       /* GPU model, e.g. "h100-nvl" */
    uint32_t gpus;                   /* GPUs in the server (they share host memory) */
    uint64_t gpu_memory_bytes;       /* per-GPU capacity, bytes */
    uint64_t gpu_reserve_bytes;      /* kept free for context, allocator slack, buffers (bytes) */
    double pcie_h2d_Bps;             /* host -> GPU bandwidth per GPU, bytes/s */
    double pcie_d2h_Bps;             /* GPU -> host bandwidth per GPU, bytes/s */
    uint32_t ssd_count;              /* SSDs per GPU (striped as one array) */
    double ssd_read_Bps;             /* per-SSD sequential read, bytes/s (datasheet) */
    double ssd_write_Bps;            /* per-SSD sequential write, bytes/s (datasheet) */
    double ssd_efficiency;           /* sustained fraction of ssd_count * rate reached in practice
                                        (paper: ~16 GB/s from 4 x 6.5 GB/s, i.e. ~0.62), (0, 1] */
    double ssd_latency_s;            /* per-request latency, s */
    double ssd_tbw_bytes;            /* rated endurance per SSD, bytes written */
    uint64_t host_memory_bytes;      /* host DRAM in the server, bytes */
    uint64_t host_offload_cap_bytes; /* per-GPU cap on host memory used for offloading, bytes */
    double host_memory_Bps;          /* host DRAM bandwidth, bytes/s */
    int32_t gds;                     /* 1: SSD <-> GPU by GPUDirect Storage; 0: bounce via host */
    uint32_t cpu_cores;              /* host cores (CPU Adam in the ZeRO models) */
    double server_price_usd;         /* price of the server as configured (0 = unknown) */
    double ssd_price_usd;            /* price of all the SSDs (0 = unknown) */
    /* Added after the first API freeze (fields only grow at the end). The SSD array has one
     * bandwidth budget shared by reads and writes (docs/hardware.md, "SSD model"): */
    double ssd_mixed_Bps;           /* per-SSD read + write throughput under a 50/50 sequential
                                       mix, bytes/s; 0 = time sharing (the harmonic mean of
                                       ssd_read_Bps and ssd_write_Bps) */
    uint64_t ssd_write_cache_bytes; /* per-SSD write cache (pSLC), bytes; 0 = none modelled */
    double ssd_sustained_write_Bps; /* per-SSD write rate once the cache is full, bytes/s (also
                                       the rate the cache drains at); 0 = ssd_write_Bps */
    /* Software costs the simulator charges (docs/simulator.md, "Software costs"); 0 = none: */
    double kernel_launch_s;    /* training thread's time to launch one kernel (the framework's
                                  dispatch and the launch), s; every policy but the ideal */
    double kernel_executor_s;  /* the offload runtime's time per kernel on the training thread
                                  (its hook and executor calls), s; plan replays only */
    double move_issue_s;       /* the training thread's time to issue one move of a plan, s */
    double kernel_io_slowdown; /* a kernel runs 1 + this x u times longer, u the fraction of the
                                  GPU's PCIe bandwidth (both directions) in use, >= 0 */
};

/* tio_hw_defaults: fill the `size` bytes of *out (size = sizeof *out) with the defaults (the
 * paper's server, as preset "paper-2xh100nvl") as far as this library knows them (a newer
 * header's extra fields are zeroed), and set out->struct_size. Returns 0; TIO_EINVAL (NULL),
 * TIO_EVERSION (size below the first versioned struct tio_hw). */
TIO_API int tio_hw_defaults(struct tio_hw *out, size_t size);
/* tio_hw_default: the same by value. Inline, so that the size is the one this header declares:
 * not an exported function, whose by-value struct would be the library's size (docs/style.md,
 * "Versioned structs"). */
static inline struct tio_hw tio_hw_default(void) {
    struct tio_hw p;
    (void)tio_hw_defaults(&p, sizeof p);
    return p;
}

/* tio_hw_preset: fill *out with a named preset. Returns 0 or TIO_ENOTFOUND (detail lists the
 * known names). */
TIO_API TIO_MUST_CHECK int tio_hw_preset(const char *name, struct tio_hw *out);

/* tio_hw_preset_count / tio_hw_preset_name: enumerate presets (name or NULL if out of range). */
TIO_API size_t tio_hw_preset_count(void);
TIO_API const char *tio_hw_preset_name(size_t i);

/*
 * tio_hw_load: read a JSON hardware file, or a preset name if `path_or_preset` names one.
 * Fields not in the file keep the value of the preset named by its "base" key (default
 * "paper-2xh100nvl"). Units may be numbers (bytes, bytes/s, s) or strings ("94GiB", "6.5GB/s",
 * "20us"). Validated. Returns 0, -errno, TIO_EFORMAT or TIO_EINVAL naming the field.
 */
TIO_API TIO_MUST_CHECK int tio_hw_load(const char *path_or_preset, struct tio_hw *out);

/* tio_hw_validate: zero or negative bandwidths or capacities, efficiency outside (0,1], reserve
 * >= capacity, ...: TIO_EINVAL naming the field and value. */
TIO_API TIO_MUST_CHECK int tio_hw_validate(const struct tio_hw *hw);

/* tio_hw_to_json: JSON text (tio_malloc'd, caller tio_frees) with every field. */
TIO_API TIO_MUST_CHECK int tio_hw_to_json(const struct tio_hw *hw, char **json);

/* Derived rates: the SSD array's read / write bandwidth per GPU when it does only that,
 * ssd_count x rate x ssd_efficiency, bytes/s. */
TIO_API double tio_hw_ssd_read_Bps(const struct tio_hw *hw);
TIO_API double tio_hw_ssd_write_Bps(const struct tio_hw *hw);

/*
 * tio_hw_ssd_mix_factor: the shared budget's mixing penalty k = H / M, H the harmonic mean of
 * ssd_read_Bps and ssd_write_Bps, M = ssd_mixed_Bps (1 when ssd_mixed_Bps is 0). Reading r
 * bytes/s and writing w bytes/s at once takes the array's whole budget when
 * k x (r / read + w / write) = 1 (read, write: tio_hw_ssd_read_Bps, tio_hw_ssd_write_Bps); one
 * direction alone costs 1 / read or 1 / write per byte.
 */
TIO_API double tio_hw_ssd_mix_factor(const struct tio_hw *hw);

/* tio_hw_ssd_sustained_write_Bps: the array's write rate once every drive's cache is full:
 * min(ssd_count x ssd_sustained_write_Bps, tio_hw_ssd_write_Bps); the array's write rate when
 * no sustained rate or no cache is given. */
TIO_API double tio_hw_ssd_sustained_write_Bps(const struct tio_hw *hw);

/* tio_hw_plan_capacity: gpu_memory_bytes - gpu_reserve_bytes, the line planners keep under. */
TIO_API uint64_t tio_hw_plan_capacity(const struct tio_hw *hw);

/*
 * tio_hw_at_ssd_bandwidth: *out = *hw with the SSD array's bandwidth per GPU set to `bandwidth`
 * (bytes/s), the model of a bandwidth sweep (the paper's Figure 3, `teraio sweep`): each drive
 * reads and writes at bandwidth / (ssd_count x ssd_efficiency), no drive write caches, no
 * mixed-workload point, and the PCIe links at least that fast each way. TIO_EINVAL when hw has no
 * SSDs or bandwidth is not > 0.
 */
TIO_API TIO_MUST_CHECK int
tio_hw_at_ssd_bandwidth(const struct tio_hw *hw, double bandwidth, struct tio_hw *out);

/* The SSD array bandwidths (bytes/s) a sweep visits unless told otherwise: 4 to 64 GB/s. */
#define TIO_HW_SWEEP_BANDWIDTHS \
    { 4e9, 8e9, 12e9, 16e9, 24e9, 32e9, 48e9, 64e9 }

#ifdef __cplusplus
}
#endif
#endif
