/*
 * The GPU twin (bench_gpu_twin): what its two files share. bench_gpu_twin.c: the options, the
 * traces and the output; gpu_twin_run.c: one run (the plan, the simulator's prediction, the
 * executor and engine on the fake CUDA runtime's timed mode, the counts of one step).
 */
#ifndef TIO_BENCH_GPU_TWIN_H
#define TIO_BENCH_GPU_TWIN_H

#include <stdint.h>

#include <teraio/trace.h>

#include "io/fake_cuda.h"

#define MAX_TRACES 8
#define PAGE       UINT64_C(4096)

/* the fake CUDA runtime (loaded by main) */
extern struct fake_cuda twin_fc;

struct opts {
    int json, iters, no_model, no_offloader;
    int no_throttle;    /* the SSD tier at the disk's own speed, not the modelled drive's */
    int depth;          /* the engine's queue_depth (0: its default) */
    const char *models; /* built-in traces, comma-separated (NULL: llama-1b) */
    double byte_scale, budget_frac;
    double time_scale; /* 0: per trace, so that an iteration's ideal is at most 1 s */
    /* byte_scale 0: per trace, the power of 2 that brings its peak under 400 MiB */
    const char *tiers, *dir;
    const char *traces[MAX_TRACES];
    int ntraces;
};

/* TIER_BARE: the self-check, the trace's kernels launched with no executor at all */
enum tier { TIER_BARE, TIER_NONE, TIER_HOST, TIER_SSD, TIER_BOTH };
extern const char *const twin_tier_names[]; /* by enum tier */

/* ---- one run ------------------------------------------------------------------------------ */

struct result {
    const char *trace;
    enum tier tier;
    double time_scale, byte_scale;
    double budget_frac;
    uint64_t budget, peak, tensors, kernels, moves;
    double twin_s, ideal_s, predicted_s, stall_s, read_stall_s, pressure_s, demand_s, us_per_kernel,
        h2d_util, d2h_util, host_s;
    /* per step, the compute stream: held back by copies' events; idle for the host */
    double dep_wait_s, dep_waits, late_s;
    uint64_t queue_full, urgent, offloads, prefetches, pageable;
    /* per step: host-tier offloads the host tier had no room for, sent to the SSD instead; host
     * copies of tensors in memory dropped to make room; offloads that wrote nothing (clean) */
    uint64_t fallbacks, copies_dropped, clean;
    /* the emulated drive (SSD tiers): its read and write rates (B/s), and per step the time
     * the real transfers ended past their modelled completion (sum, largest one) */
    double drive_read_Bps, drive_write_Bps, drive_behind_s, drive_behind_max_s;
    /* per step: the drive's bytes (read, write) and its busy time, on the twin and predicted;
     * the predicted stall waiting for data and for memory */
    double drive_rd_B, drive_wr_B, drive_busy_s, sim_rd_B, sim_wr_B, sim_stall_data_s,
        sim_stall_mem_s;
    /* the training thread's waits per step by reason (tio_runtime_stats): read, write, budget,
     * end, other */
    double wait_n[5], wait_s[5];
    char error[300];
};

/* Print "bench_gpu_twin: <what>: <rc> (<detail>)" and exit 1. */
_Noreturn void twin_die(const char *what, int rc);

/* The bytes resident at the peak of tr when nothing moves. */
uint64_t twin_raw_peak(const struct tio_trace *tr);

/* One run of tr (bytes divided by bs, times by ts: the hardware's rates follow) on `tier`, the
 * planner's smallest movable tensor min_bytes; *r gets the result (r->error on failure). */
void twin_run(const struct opts *o,
              const char *name,
              const struct tio_trace *tr,
              double bs,
              double ts,
              uint64_t min_bytes,
              enum tier tier,
              struct result *r);

#endif
