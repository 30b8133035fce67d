/*
 * teraio/sim.h - discrete-event replay of a trace and a migration plan on a hardware model
 * (docs/architecture.md). Model and assumptions: docs/simulator.md; baselines: docs/baselines.md.
 *
 * The simulator runs one compute stream (kernels in trace order) and four transfer channels
 * (SSD array read, SSD array write, PCIe host->GPU, PCIe GPU->host). A move from the plan is
 * issued when the compute stream reaches its trigger kernel; a kernel starts only when every
 * tensor it uses is on the GPU and the tensors it creates fit under the capacity. Warm-up
 * iterations run first; the results describe the steady-state iteration that follows them.
 *
 *     struct tio_sim_params sp = tio_sim_params_default();
 *     struct tio_sim *sim;
 *     size_t n; const struct tio_move *mv = tio_plan_moves(plan, &n);
 *     if (tio_sim_run(trace, &hw, mv, n, &sp, &sim) < 0) ...      // replay a plan
 *     sp.policy = "zero-infinity";
 *     if (tio_sim_run(trace, &hw, NULL, 0, &sp, &sim2) < 0) ...   // or a built-in baseline
 *     struct tio_sim_result r; tio_sim_get_result(sim, &r);
 *     printf("%.1f%% of ideal%s\n", 100 * r.fraction_of_ideal, r.oom ? " (OOM)" : "");
 *     tio_sim_write_timeline(sim, "run.trace.json");              // open in ui.perfetto.dev
 *     tio_sim_free(sim);
 *
 * An out-of-memory condition is a result (oom = 1, with the kernel), not an error. The trace
 * must outlive nothing: the simulation copies what it keeps. Thread safety: a tio_sim is
 * immutable after tio_sim_run; independent runs may proceed in parallel threads.
 */
#ifndef TERAIO_SIM_H
#define TERAIO_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/status.h>
#include <teraio/trace.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Transfer channels. Stored as int32_t. */
enum tio_sim_channel {
    TIO_SIM_SSD_READ = 0,  /* SSD array -> (host or GPU) */
    TIO_SIM_SSD_WRITE = 1, /* (host or GPU) -> SSD array */
    TIO_SIM_PCIE_H2D = 2,  /* host -> GPU link (also carries SSD reads into the GPU) */
    TIO_SIM_PCIE_D2H = 3,  /* GPU -> host link (also carries SSD writes out of the GPU) */
    TIO_SIM_CHANNEL_COUNT
};

/* Why a simulation ran out of memory. */
enum tio_sim_oom_kind { TIO_SIM_OOM_NONE = 0, TIO_SIM_OOM_GPU = 1, TIO_SIM_OOM_HOST = 2 };

struct tio_sim_params {
    /* Size of this struct as the caller's header declares it: set by tio_sim_params_default(s)
     * (docs/style.md, "Versioned structs"). */
    uint32_t struct_size;
    const char *policy;          /* baseline run without moves: "ideal", "none", "lru",
                                    "zero-offload", "zero-infinity"; NULL or "plan" = replay the
                                    moves given to tio_sim_run (default NULL) */
    uint32_t warmup_iterations;  /* iterations simulated before the measured one (default 1) */
    uint64_t capacity_bytes;     /* GPU capacity; 0 = gpu_memory_bytes - gpu_reserve_bytes */
    double ssd_bandwidth_scale;  /* multiplies the SSD array's read and write rates (sweeps;
                                    default 1.0) */
    double pcie_bandwidth_scale; /* multiplies both PCIe directions (default 1.0) */
    double host_latency_s;       /* per-request latency of host<->GPU copies (default 10 us) */
    double iterations_per_day;   /* for drive life; 0 = continuous training (default 0) */
    uint32_t bins;               /* bandwidth-over-time bins over the ideal iteration time
                                    (default 400; at most 2 x bins are kept, see
                                    tio_sim_bandwidth_bins) */
    int32_t record_timeline;     /* 1: keep per-transfer events for tio_sim_write_timeline
                                    (default 0; per-kernel series are always kept) */
    /* Baseline parameters (docs/baselines.md gives their sources and the calibration). */
    double cpu_adam_params_per_core_s; /* CPU Adam throughput per core, parameters/s */
    uint32_t zero_prefetch_layers;     /* ZeRO: layers fetched ahead of compute (0: a layer's
                                          parameters are fetched when it starts) */
    double zero_offload_fetch_Bps;     /* ZeRO (both): host->GPU byte rate of DeepSpeed's
                                          parameter fetch path (calibrated); ZeRO-Infinity
                                          reads into host buffers first, then takes the same
                                          path */
    double zero_infinity_fetch_Bps;    /* ZeRO-Infinity: cap on its NVMe read leg (default
                                          +inf: the SSD array's own rate) */
    double zero_bytes_scale;           /* ZeRO's bytes per value / the trace's (fp16 vs fp32:
                                          0.5) for parameters, gradients and activations */
    uint32_t zero_layers;              /* layer count for layer-granular fetches; 0 = from the
                                          trace (metadata "n_layers", else tensor names) */
    const char *label;                 /* policy name reported for a move list (the plan's
                                          policy; default NULL = "plan") */
    int32_t demand_evict;              /* plans only: 1 = when memory is short and nothing in
                                          flight frees it, evict idle tensors on demand (the
                                          paper's runtime stalls "waiting for more inactive
                                          tensors to leave the GPU"); 0 = report OOM there
                                          (default 0) */
    /* Added after the first API freeze (fields only grow at the end): */
    double zero_fetch_overhead_s; /* ZeRO (both): fixed cost of fetching one partitioned
                                     parameter tensor (a submodule's hook, its all-gather, the
                                     stream synchronisation), on the fetch path (calibrated) */
};

/* tio_sim_params_defaults: fill the `size` bytes of *out (size = sizeof *out) with the defaults
 * (the defaults above, calibrated baseline parameters included) as far as this library knows
 * them (a newer header's extra fields are zeroed), and set out->struct_size. Returns 0;
 * TIO_EINVAL (NULL), TIO_EVERSION (size below the first versioned struct tio_sim_params). */
TIO_API int tio_sim_params_defaults(struct tio_sim_params *out, size_t size);
/* tio_sim_params_default: the same by value. Inline, so that the size is the one this header
 * declares: not an exported function, whose by-value struct would be the library's size
 * (docs/style.md, "Versioned structs"). */
static inline struct tio_sim_params tio_sim_params_default(void) {
    struct tio_sim_params p;
    (void)tio_sim_params_defaults(&p, sizeof p);
    return p;
}

/* Results of the measured (steady-state) iteration. */
struct tio_sim_result {
    /* Bytes of this struct that tio_sim_get_result filled: its `size` argument. */
    uint32_t struct_size;
    double iteration_s;       /* wall time of the measured iteration */
    double ideal_s;           /* sum of kernel durations (unlimited memory) */
    double fraction_of_ideal; /* ideal_s / iteration_s (0 when OOM) */
    double stall_s;           /* compute stream idle: waiting for data, memory or the CPU */
    double stall_data_s;      /* ... of which waiting for a tensor to arrive */
    double stall_memory_s;    /* ... of which waiting for memory to be freed */
    double cpu_s;             /* ... of which host-side work (CPU optimizer of the ZeRO models) */
    double overlap_s;         /* time with both compute and at least one transfer running */
    double io_busy_s;         /* time with at least one transfer running */
    double tokens_per_s;      /* trace metadata tokens_per_iteration / iteration_s (0 unknown) */
    double tokens_per_iteration;
    uint64_t bytes[TIO_SIM_CHANNEL_COUNT];  /* bytes moved per channel in the iteration */
    double busy_s[TIO_SIM_CHANNEL_COUNT];   /* time each channel carried data */
    double peak_Bps[TIO_SIM_CHANNEL_COUNT]; /* highest binned bandwidth */
    uint64_t gpu_peak_bytes;                /* max GPU memory in use */
    uint64_t host_peak_bytes;               /* max host memory used by offloading */
    uint64_t capacity_bytes;                /* the GPU capacity simulated against */
    uint64_t ssd_bytes_written;             /* per iteration (SSD write channel) */
    double drive_life_years;                /* rated TBW * ssd_count / write rate; 0 if
                                               nothing is written or TBW unknown */
    uint64_t n_moves_issued;                /* moves started in the iteration */
    uint64_t n_moves_skipped;               /* no-ops: prefetch of a resident tensor ... */
    uint64_t n_moves_late;                  /* finished after their deadline kernel began */
    uint64_t n_demand_fetches;              /* fetches the plan did not ask for */
    uint64_t n_demand_evictions;            /* evictions the plan did not ask for */
    int32_t oom;                            /* enum tio_sim_oom_kind (0: none) */
    uint32_t oom_iteration;                 /* 0-based iteration (warm-up ones included) */
    uint64_t oom_kernel;                    /* kernel index where it happened */
    uint64_t oom_bytes;                     /* bytes needed beyond the capacity */
    double sim_wall_s;                      /* wall time of the simulation itself */
    /* Added after the first API freeze (fields only grow at the end): */
    uint64_t n_moves_clean;         /* offloads that wrote nothing: an identical copy was stored
                                       (TIO_MOVE_CLEAN); counted in neither issued nor skipped */
    uint64_t demand_evicted_bytes;  /* bytes of the evictions the plan did not ask for */
    uint64_t ssd_cache_start_bytes; /* bytes in the SSD write caches when the measured
                                       iteration began (steady state, docs/simulator.md) */
    uint64_t ssd_cache_end_bytes;   /* ... and when it ended */
    int32_t ssd_cache_full;         /* 1: the steady state of continuous training has the
                                       write caches full (writes at the sustained rate) */
    /* Pipeline stages simulated together (tio_sim_run_pipeline); 0 for a stage alone: */
    uint32_t pipeline_stages; /* stages coupled (0: this trace was simulated alone) */
    uint32_t pipeline_stage;  /* this stage's index */
    uint32_t oom_stage;       /* with oom: the stage that ran out of memory (every stage's
                                 result reports the pipeline's OOM) */
    double stage_end_s;       /* this stage's last kernel ends this long after the iteration's
                                 start (iteration_s is the makespan over the stages) */
    double pipeline_wait_s;   /* its receives' time beyond their transfer (waiting for the
                                 peer stage) plus the wait from stage_end_s to the makespan */
    /* Software costs (the hardware's kernel_launch_s, kernel_executor_s, move_issue_s,
     * kernel_io_slowdown; docs/simulator.md, "Software costs"): */
    double stall_thread_s;         /* ... of stall_s: the compute stream waiting for the training
                                      thread to issue moves and launch kernels */
    double kernel_slowdown_s;      /* time kernels ran longer than their duration because transfers
                                      ran beside them (not part of stall_s) */
    uint64_t n_host_full_offloads; /* with demand_evict: offloads to host memory that found the
                                      cap reached, written to the SSDs instead (kept on the GPU
                                      without SSDs), as the runtime does */
};

struct tio_sim;

/*
 * tio_sim_run: simulate `trace` (finished) on `hw` (validated by the caller or here) with the
 * plan's moves (`moves`, n_moves; may be NULL/0 for baselines) and `params` (NULL =
 * defaults). The moves are copied. Returns 0 and *out; TIO_EINVAL (bad hw field, bad move:
 * names it), TIO_ENOTFOUND (unknown policy), TIO_ESTATE (trace not finished), TIO_ENOMEM.
 * OOM is reported in the result, not as an error.
 */
TIO_API TIO_MUST_CHECK int tio_sim_run(const struct tio_trace *trace,
                                       const struct tio_hw *hw,
                                       const struct tio_move *moves,
                                       size_t n_moves,
                                       const struct tio_sim_params *params,
                                       struct tio_sim **out);

/*
 * tio_sim_run_plan: simulate `plan` as its execution says (tio_plan_execution): its moves
 * (reported under the plan's policy name), or the baseline it names (ideal, none, lru,
 * zero-offload, zero-infinity), whatever the plan's policy name. params->policy and ->label are
 * ignored. The caller checks that the plan is for `trace` (tio_plan_check_trace). Returns and
 * errors as tio_sim_run; TIO_EINVAL for a NULL plan.
 */
TIO_API TIO_MUST_CHECK int tio_sim_run_plan(const struct tio_trace *trace,
                                            const struct tio_hw *hw,
                                            const struct tio_plan *plan,
                                            const struct tio_sim_params *params,
                                            struct tio_sim **out);

/*
 * tio_sim_run_pipeline: simulate the n_stages stages of a pipeline together (docs/simulator.md,
 * "Pipeline stages"): traces[i] is stage i's trace (in stage order), moves[i] / n_moves[i] its
 * plan's moves (moves and n_moves may be NULL for a built-in policy), each stage on its own
 * copy of `hw` (one GPU with its PCIe link, SSDs and host share; capacity_bytes[i], when the
 * array is given and the entry is not 0, is stage i's GPU capacity instead of
 * params->capacity_bytes: each stage's plan may be made for its own). The stages' send and receive
 * kernels (nccl:send/recv, c10d.send/recv_) couple them: the n-th message a stage sends on a
 * link is the n-th its peer receives, and a receive ends at max(its start + the send kernel's
 * duration, the send's end). Every iteration starts when all stages have finished the previous
 * one. out[i] (n_stages entries) gets stage i's results: iteration_s is the coupled makespan,
 * ideal_s the coupled makespan with unlimited memory, the same in every stage's result; an OOM
 * in any stage is reported by all (oom_stage). Returns 0; TIO_EINVAL (fewer than 2 or more than
 * 64 stages, sends and receives that do not pair up, a deadlock: names the stage), or
 * tio_sim_run's errors prefixed with the stage.
 */
TIO_API TIO_MUST_CHECK int tio_sim_run_pipeline(const struct tio_trace *const *traces,
                                                const struct tio_move *const *moves,
                                                const size_t *n_moves,
                                                size_t n_stages,
                                                const struct tio_hw *hw,
                                                const struct tio_sim_params *params,
                                                const uint64_t *capacity_bytes,
                                                struct tio_sim **out);

/* tio_sim_free: accepts NULL. */
TIO_API void tio_sim_free(struct tio_sim *sim);

/* tio_sim_get_result: copy the results into *out, `size` bytes (size = sizeof *out): the
 * fields this library knows, zeros for those of a newer header; out->struct_size = size.
 * Returns 0; TIO_EINVAL (NULL), TIO_EVERSION (size below the first versioned
 * struct tio_sim_result). */
TIO_API int tio_sim_get_result(const struct tio_sim *sim, struct tio_sim_result *out, size_t size);

/* tio_sim_policy: the policy simulated ("plan" for a move list). Owned by the sim. */
TIO_API const char *tio_sim_policy(const struct tio_sim *sim);

/* tio_sim_policy_is_builtin: 1 if tio_sim_run can simulate `name` without moves (the name of a
 * baseline execution, tio_plan_exec_name). */
TIO_API int tio_sim_policy_is_builtin(const char *name);

/* tio_sim_channel_name: "ssd_read", "ssd_write", "pcie_h2d", "pcie_d2h". */
TIO_API const char *tio_sim_channel_name(int32_t channel);

/*
 * Per-kernel series of the measured iteration (arrays of tio_sim_kernel_count entries, owned by
 * the sim): start time (s, from the iteration's start), stall before the kernel (s), GPU
 * memory in use while it runs (bytes).
 */
TIO_API size_t tio_sim_kernel_count(const struct tio_sim *sim);
TIO_API const double *tio_sim_kernel_start_s(const struct tio_sim *sim);
TIO_API const double *tio_sim_kernel_stall_s(const struct tio_sim *sim);
TIO_API const uint64_t *tio_sim_kernel_gpu_bytes(const struct tio_sim *sim);

/* Bandwidth over time: *n bins of *bin_s seconds each; bandwidth of channel c in bin i is
 * out[i * TIO_SIM_CHANNEL_COUNT + c], bytes/s. Owned by the sim. Bins start ideal_s / bins
 * wide and double in width (pairs merged) while the measured iteration would need more than
 * 2 x bins of them, so *n <= 2 x bins whatever the simulated time. */
TIO_API const double *tio_sim_bandwidth_bins(const struct tio_sim *sim, size_t *n, double *bin_s);

/* Exports. JSON summary (the keys of `teraio simulate --json`) to a stream; CSV series
 * (kernels.csv: kernel,start_s,stall_s,duration_s,gpu_bytes; bandwidth.csv: t_s and one column
 * per channel in bytes/s) into a directory (created if needed); Chrome/Perfetto trace-event
 * JSON (compute track, one track per channel with record_timeline, memory counters).
 * Return 0 or -errno / TIO_EINVAL (detail names the file). */
TIO_API TIO_MUST_CHECK int tio_sim_write_json(const struct tio_sim *sim, FILE *f);
TIO_API TIO_MUST_CHECK int tio_sim_write_csv(const struct tio_sim *sim, const char *dir);
TIO_API TIO_MUST_CHECK int tio_sim_write_timeline(const struct tio_sim *sim, const char *path);

#ifdef __cplusplus
}
#endif
#endif
