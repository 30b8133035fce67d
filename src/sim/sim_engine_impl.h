/*
 * Private state of the simulator's discrete-event engine, shared by its parts, read in this
 * order: sim_engine.c (the loop: init, the next event, handling it, coupled stages),
 * sim_engine_kernel.c (the compute stream), sim_engine_victims.c (eviction on demand),
 * sim_engine_xfer.c (transfers and queues), sim_engine_rates.c (bandwidth and the clock).
 *
 * The engine: one compute stream, four transfer channels shared by a fluid,
 * priority-ordered allocation of bandwidth (docs/simulator.md).
 *
 * Transfers are grouped into path classes (a fixed set of channels, e.g. GPU->SSD uses the SSD
 * write channel and the GPU->host link); each class has an urgent and a normal queue, kept in
 * deadline order (earliest first, issue order among equal deadlines, transfers without a
 * deadline last). Only the head of a queue can move data: the head takes the whole bottleneck
 * of its path, so whatever follows it in the same queue would get nothing anyway. Heads are
 * served in priority order (urgent first, then earliest deadline, then issue order); each takes
 * min over its channels of what is left. This is work-conserving, is the earliest-deadline-first
 * order in which tio_plan_verify proves a plan's moves fit the kernels' time, and lets urgent
 * requests pre-empt (the real engine splits tensors into chunks, so pre-emption happens at chunk
 * granularity).
 */
#ifndef TIO_SIM_ENGINE_IMPL_H
#define TIO_SIM_ENGINE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/hw.h>
#include <teraio/sim.h>

#include "sim/sim_impl.h"

enum { ST_DEAD = 0, ST_GPU, ST_OFFLOADING, ST_OFF, ST_PREFETCHING, ST_QUEUED };

#define NONE32 UINT32_MAX
#define NPATH  6
#define NQ     (NPATH * 2)

/* Path classes and their channel masks. */
enum { P_D2H = 0, P_H2D, P_GPU_SSD, P_SSD_GPU, P_HOST_SSD, P_SSD_HOST };
extern const uint32_t sim_eng_path_mask[NPATH];

struct xfer {
    uint32_t tensor;
    int32_t path;
    int32_t from, to;
    int32_t urgent;
    int32_t in_lat; /* bytes done, waiting for the latency */
    uint64_t seq;
    uint64_t deadline_g; /* global kernel index, UINT64_MAX = none */
    double remaining;    /* bytes */
    double rate;         /* bytes/s now */
    double latency;      /* s */
    double t_issue, t_first, t_lat_done;
    uint32_t next, prev; /* FIFO links (class queue) */
};

struct tstate {
    int32_t state;
    int32_t tier; /* tier of the off-GPU copy */
    uint8_t keep; /* offload in flight but the tensor is needed again: keep it */
    uint8_t dying;
    uint8_t valid[TIO_TIER_COUNT]; /* an up-to-date copy exists in that tier */
    uint32_t xfer;
    uint64_t host_bytes; /* host memory it holds */
    /* LRU list (resident tensors only) */
    uint32_t lnext, lprev;
    uint8_t in_lru;
    uint32_t hpos;        /* position in the victim heap, NONE32 when not in it */
    uint64_t next_use;    /* by next use: the global index of the kernel that uses it next */
    uint64_t stamp;       /* kernel seq of the last check (used by the kernel being started) */
    uint64_t mq_deadline; /* queued for memory (ST_QUEUED): the prefetch's deadline ... */
    int32_t mq_urgent;    /* ... and urgency, which it keeps when memory is granted */
};

struct eng_group;

struct eng {
    const struct sim_view *v;
    struct eng_group *grp; /* the stages simulated together (one for a stage alone) */
    size_t stage;          /* this engine's index in grp */
    const struct tio_sim_params *p;
    const struct tio_hw *hw;
    struct tio_sim *sim;
    size_t N;
    uint64_t total; /* kernels to run */
    double t;
    double bw[TIO_SIM_CHANNEL_COUNT];
    double ssd_lat, host_lat;
    /* SSD array: one budget shared by reads and writes; a write cache (ssd_cache_*) */
    double ssd_mix; /* tio_hw_ssd_mix_factor: cost multiplier when both directions run */
    double ssd_Bps[TIO_SIM_CHANNEL_COUNT]; /* the array's read / write rate alone (hardware) */
    double cache_cap;        /* bytes the array's write caches hold (0: not modelled) */
    double cache_level;      /* bytes in them now */
    double cache_drain_Bps;  /* the sustained (post-cache) rate, which also drains the cache */
    double cache_level_meas; /* level when the measured iteration began */
    struct tstate *ts;
    struct xfer *xf;
    size_t n_xf, cap_xf;
    uint32_t free_xf;
    uint32_t qhead[NQ], qtail[NQ];
    /* prefetches waiting for GPU memory: FIFO of tensor ids (urgent ones at the front) */
    uint32_t *mq;
    size_t mq_head, mq_len, mq_cap;
    /* transfers in their latency phase */
    uint32_t *lat;
    size_t n_lat, cap_lat;
    uint64_t seq;
    uint64_t gpu_used, host_used;
    uint64_t offload_inflight; /* bytes that offloads in flight will free */
    size_t n_active;           /* transfers in flight (queued on a channel or in latency) */
    uint32_t lru_head, lru_tail;
    /* eviction by next use (a plan's replay with demand eviction: sim_engine_victims.c) */
    uint32_t *vheap;    /* [n_tensors] the resident tensors an eviction may take, best on top */
    uint64_t *use_next; /* [n_uses] the next use of the use's tensor: a kernel of this
                           iteration, N + first for a global's next iteration, UINT64_MAX none */
    uint32_t vheap_n;
    int by_next_use;
    /* compute */
    uint64_t g;       /* next kernel (global index) */
    int running;      /* kernel g is running */
    int in_cpu;       /* running its host-side part */
    double t_end;     /* end of the running kernel */
    double t_cpu_end; /* end of its host-side part */
    double t_ready;   /* when the stream became ready for kernel g */
    int stall_kind;   /* 0 none, 1 data, 2 memory */
    size_t move_pos;  /* next move to issue in this iteration */
    uint64_t issued_g;
    /* measurement */
    int measuring;
    double t0;
    uint64_t g0;
    int oom;
    uint64_t oom_kernel, oom_bytes;
    uint32_t oom_iter;
    double bytes_acc[TIO_SIM_CHANNEL_COUNT]; /* bytes moved in the measured iteration */
    /* pipeline coupling (docs/simulator.md, "Pipeline stages") */
    int recv_pending;   /* the running kernel is a receive whose message has not been sent */
    uint32_t recv_link; /* ... on this link */
    double recv_t0;     /* ... and started receiving at this time */
    int at_barrier;     /* waiting for the other stages to finish the previous iteration */
    size_t *recv_next;  /* [n_links] messages of each link this stage has received */
    double pipe_wait_s; /* measured: receive time beyond the transfer (waiting for the peer) */
    /* the training thread (docs/simulator.md, "Software costs") */
    double c_kernel;     /* its time per kernel: the launch, plus the executor's for plans */
    double c_move;       /* its time per move a plan triggers */
    double slowdown;     /* kernel_io_slowdown: kernels slow down with the PCIe traffic */
    double h;            /* when it has launched the last kernel it launched */
    double h_moves;      /* kernel g: when it has issued g's moves */
    double h_launch;     /* kernel g: when it has launched g */
    double t_ok;         /* kernel g: when its data and memory were in place */
    double thread_stall; /* kernel g: time the stream waited for the thread */
    int thread_set;      /* h_moves is set for kernel g */
    int launch_set;      /* h_launch is set for kernel g */
    int thread_waits;    /* the thread itself waited for kernel g's data or memory */
    int host_wait;       /* the stream waits for the thread until host_t */
    double host_t;
    double k_work;  /* running kernel: GPU seconds of work left (at full speed) */
    double k_speed; /* ... and the speed it runs at now (1 / (1 + slowdown x PCIe use)) */
};

/* One message on a link: when its send kernel ended and how long that kernel took (the time
 * the receive needs at least: docs/simulator.md). */
struct pipe_msg {
    double t_end, dur;
};

/* A directed link between two stages: the messages sent so far, in order. */
struct pipe_link {
    struct pipe_msg *msg;
    size_t n, cap;
};

struct eng_group {
    struct eng *e; /* [n] */
    size_t n;
    struct pipe_link *links; /* [n_links] */
    size_t n_links;
};

/* ---- sim_engine_victims.c: eviction on demand ---- */

/* Set up the victims (before any tensor is touched); 0 or TIO_ENOMEM. _fini frees them. */
int sim_eng_victims_init(struct eng *e);
void sim_eng_victims_fini(struct eng *e);
/* Take t out of the victims (no-op when it is not among them). */
void sim_eng_victim_remove(struct eng *e, uint32_t t);
/* t changed state or was used: LRU moves it to the most-recently-used end, the heap takes it
 * in or re-keys it (no-op unless the view evicts on demand). */
void sim_eng_victim_touch(struct eng *e, uint32_t t);
/* The kernel being started (e->g) uses t through use u: its next use moves on, then touch. */
void sim_eng_victim_used(struct eng *e, uint32_t t, uint64_t u);
/* Evict idle tensors until `need` more bytes fit, as far as the policy can; 0 or < 0. */
int sim_eng_evict(struct eng *e, uint64_t need);

/* ---- sim_engine_xfer.c: transfers, the FIFOs of the path classes ---- */

/* Unlink transfer id from its FIFO. */
void sim_eng_q_remove(struct eng *e, uint32_t id);
/* Record the GPU / host peak while measuring. */
void sim_eng_note_gpu(struct eng *e);
void sim_eng_note_host(struct eng *e);
/* Start moving tensor t along path class `path` (P_*). Returns 0 or TIO_ENOMEM. */
int sim_eng_xfer_start(
    struct eng *e, uint32_t t, int path, int from, int to, int urgent, uint64_t deadline_g);
/* Make a queued, not yet transferring, transfer urgent. */
void sim_eng_promote(struct eng *e, uint32_t id);
/* Prefetch t (ST_OFF) if GPU memory allows, else queue it for memory. Returns 0 or < 0. */
int sim_eng_fetch(struct eng *e, uint32_t t, int urgent, uint64_t deadline_g);
/* Move queued tensor t to the front of the memory queue. */
void sim_eng_mq_front(struct eng *e, uint32_t t);
/* Give freed GPU memory to queued prefetches, in order. Returns 0 or < 0. */
int sim_eng_mq_grant(struct eng *e);
/* Offload t (ST_GPU) to tier `to`; clean: drop it without writing if an identical copy is
 * stored. Returns 0 or < 0. */
int sim_eng_offload(struct eng *e, uint32_t t, int to, int clean, int urgent, uint64_t deadline_g);
/* Transfer id's bytes and latency are done: update the tensor, free the record, grant memory.
 * Returns 0 or < 0. */
int sim_eng_xfer_complete(struct eng *e, uint32_t id);

/* ---- sim_engine_rates.c: bandwidth, the clock, the bandwidth bins ---- */

/* Give bandwidth to the heads of the FIFOs, urgent first, then by issue order. */
void sim_eng_allocate_rates(struct eng *e);
/* Move the clock to t1, moving bytes at the current rates (and recording them while
 * measuring). Returns 0 or TIO_ENOMEM. */
int sim_eng_advance(struct eng *e, double t1);
/* After sim_eng_allocate_rates: the running kernel's speed under the PCIe traffic now, and its
 * end at that speed (no-op without kernel_io_slowdown). */
void sim_eng_kernel_pace(struct eng *e);

/* ---- sim_engine_kernel.c: the compute stream ---- */

/* Kernel e->g cannot get `need` bytes: record a GPU OOM. */
void sim_eng_set_oom(struct eng *e, uint64_t need);
/* A receive kernel whose message has been sent gets its end time (no-op otherwise). */
void sim_eng_pipe_receive(struct eng *e);
/* Issue the moves of kernel e->g and start it if its tensors are in place and memory allows.
 * Returns < 0 on error, else 0 (e->running tells whether it started, e->oom whether it never
 * can). */
int sim_eng_try_start(struct eng *e);
/* The running kernel has ended: free the tensors it used last, go to the next kernel. */
int sim_eng_end_kernel(struct eng *e);

#endif
