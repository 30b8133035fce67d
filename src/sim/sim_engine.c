/*
 * The discrete-event engine: one compute stream, four transfer channels shared by a fluid,
 * priority-ordered allocation of bandwidth (docs/simulator.md).
 *
 * Transfers are grouped into path classes (a fixed set of channels, e.g. GPU->SSD uses the SSD
 * write channel and the GPU->host link); each class has an urgent and a normal FIFO. Only the
 * head of a FIFO can move data: the head takes the whole bottleneck of its path, so whatever
 * follows it in the same FIFO would get nothing anyway. Heads are served in priority order
 * (urgent first, then issue order); each takes min over its channels of what is left. This is
 * work-conserving, keeps FIFO order within a path and lets urgent requests pre-empt (the real
 * engine splits tensors into chunks, so pre-emption happens at chunk granularity).
 */
#include <math.h>
#include <string.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_impl.h"

enum { ST_DEAD = 0, ST_GPU, ST_OFFLOADING, ST_OFF, ST_PREFETCHING, ST_QUEUED };

#define NONE32 UINT32_MAX
#define NPATH  6
#define NQ     (NPATH * 2)

/* Path classes and their channel masks. */
enum { P_D2H = 0, P_H2D, P_GPU_SSD, P_SSD_GPU, P_HOST_SSD, P_SSD_HOST };
static const uint32_t path_mask[NPATH] = {
    [P_D2H] = 1u << TIO_SIM_PCIE_D2H,
    [P_H2D] = 1u << TIO_SIM_PCIE_H2D,
    [P_GPU_SSD] = (1u << TIO_SIM_SSD_WRITE) | (1u << TIO_SIM_PCIE_D2H),
    [P_SSD_GPU] = (1u << TIO_SIM_SSD_READ) | (1u << TIO_SIM_PCIE_H2D),
    [P_HOST_SSD] = 1u << TIO_SIM_SSD_WRITE,
    [P_SSD_HOST] = 1u << TIO_SIM_SSD_READ,
};
/* Channel that names the timeline track of a path. */
static const int32_t path_track[NPATH] = {
    [P_D2H] = TIO_SIM_PCIE_D2H,       [P_H2D] = TIO_SIM_PCIE_H2D,
    [P_GPU_SSD] = TIO_SIM_SSD_WRITE,  [P_SSD_GPU] = TIO_SIM_SSD_READ,
    [P_HOST_SSD] = TIO_SIM_SSD_WRITE, [P_SSD_HOST] = TIO_SIM_SSD_READ,
};

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
    uint64_t stamp; /* kernel seq of the last check (used by the kernel being started) */
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

static int q_of(const struct xfer *x) {
    return x->path * 2 + (x->urgent ? 0 : 1);
}

static void q_push(struct eng *e, uint32_t id) {
    struct xfer *x = &e->xf[id];
    int q = q_of(x);
    x->next = NONE32;
    x->prev = e->qtail[q];
    if (e->qtail[q] != NONE32) {
        e->xf[e->qtail[q]].next = id;
    } else {
        e->qhead[q] = id;
    }
    e->qtail[q] = id;
}

static void q_remove(struct eng *e, uint32_t id) {
    struct xfer *x = &e->xf[id];
    int q = q_of(x);
    if (x->prev != NONE32) {
        e->xf[x->prev].next = x->next;
    } else {
        e->qhead[q] = x->next;
    }
    if (x->next != NONE32) {
        e->xf[x->next].prev = x->prev;
    } else {
        e->qtail[q] = x->prev;
    }
    x->next = x->prev = NONE32;
}

static void lru_remove(struct eng *e, uint32_t t) {
    struct tstate *s = &e->ts[t];
    if (!s->in_lru) {
        return;
    }
    if (s->lprev != NONE32) {
        e->ts[s->lprev].lnext = s->lnext;
    } else {
        e->lru_head = s->lnext;
    }
    if (s->lnext != NONE32) {
        e->ts[s->lnext].lprev = s->lprev;
    } else {
        e->lru_tail = s->lprev;
    }
    s->in_lru = 0;
}

/* Move t to the most-recently-used end. */
static void lru_touch(struct eng *e, uint32_t t) {
    if (!e->v->lru && !e->v->demand_evict) {
        return;
    }
    lru_remove(e, t);
    struct tstate *s = &e->ts[t];
    s->lnext = NONE32;
    s->lprev = e->lru_tail;
    if (e->lru_tail != NONE32) {
        e->ts[e->lru_tail].lnext = t;
    } else {
        e->lru_head = t;
    }
    e->lru_tail = t;
    s->in_lru = 1;
}

static void note_gpu(struct eng *e) {
    if (e->measuring && e->gpu_used > e->sim->r.gpu_peak_bytes) {
        e->sim->r.gpu_peak_bytes = e->gpu_used;
    }
}

static void note_host(struct eng *e) {
    uint64_t h = e->host_used + e->v->host_static_bytes;
    if (e->measuring && h > e->sim->r.host_peak_bytes) {
        e->sim->r.host_peak_bytes = h;
    }
}

static int xfer_new(struct eng *e, uint32_t *out) {
    if (e->free_xf != NONE32) {
        *out = e->free_xf;
        e->free_xf = e->xf[*out].next;
        return 0;
    }
    if (e->n_xf >= NONE32 - 1) {
        return tio_set_error(TIO_ENOMEM, "sim: too many transfers in flight");
    }
    if (tio_grow((void **)&e->xf, &e->cap_xf, e->n_xf + 1, sizeof *e->xf) < 0) {
        return TIO_ENOMEM;
    }
    *out = (uint32_t)e->n_xf++;
    return 0;
}

/* Start moving tensor t along `path`. */
static int
xfer_start(struct eng *e, uint32_t t, int path, int from, int to, int urgent, uint64_t deadline_g) {
    uint32_t id = 0;
    int rc = xfer_new(e, &id);
    if (rc < 0) {
        return rc;
    }
    struct xfer *x = &e->xf[id];
    memset(x, 0, sizeof *x);
    x->tensor = t;
    x->path = path;
    x->from = from;
    x->to = to;
    x->urgent = urgent;
    x->seq = e->seq++;
    x->deadline_g = deadline_g;
    x->remaining = (double)e->v->bytes[t];
    x->latency = (path_mask[path] & ((1u << TIO_SIM_SSD_READ) | (1u << TIO_SIM_SSD_WRITE)))
                     ? e->ssd_lat
                     : e->host_lat;
    x->t_issue = e->t;
    x->t_first = -1.0;
    e->ts[t].xfer = id;
    e->n_active++;
    q_push(e, id);
    if (e->measuring) {
        e->sim->r.n_moves_issued++;
    }
    return 0;
}

static void promote(struct eng *e, uint32_t id) {
    struct xfer *x = &e->xf[id];
    if (x->urgent || x->in_lat) {
        return;
    }
    q_remove(e, id);
    x->urgent = 1;
    q_push(e, id);
}

static int path_to_gpu(int from) {
    return from == TIO_TIER_HOST ? P_H2D : P_SSD_GPU;
}

/* Allocate and start a prefetch of t (state ST_OFF) if memory allows; else queue it. */
static int fetch(struct eng *e, uint32_t t, int urgent, uint64_t deadline_g) {
    struct tstate *s = &e->ts[t];
    uint64_t b = e->v->bytes[t];
    if ((e->mq_len == 0 || urgent) && e->gpu_used + b <= e->v->capacity) {
        e->gpu_used += b;
        note_gpu(e);
        s->state = ST_PREFETCHING;
        return xfer_start(e, t, path_to_gpu(s->tier), s->tier, TIO_TIER_GPU, urgent, deadline_g);
    }
    if (tio_grow((void **)&e->mq, &e->mq_cap, e->mq_len + 1, sizeof *e->mq) < 0) {
        return TIO_ENOMEM;
    }
    /* ring buffer: compact first so that pushes at both ends are simple */
    if (e->mq_head > 0) {
        memmove(e->mq, e->mq + e->mq_head, e->mq_len * sizeof *e->mq);
        e->mq_head = 0;
    }
    if (urgent) {
        memmove(e->mq + 1, e->mq, e->mq_len * sizeof *e->mq);
        e->mq[0] = t;
    } else {
        e->mq[e->mq_len] = t;
    }
    e->mq_len++;
    s->state = ST_QUEUED;
    s->xfer = NONE32;
    (void)deadline_g;
    return 0;
}

/* Move queued tensor t to the front of the memory queue. */
static void mq_front(struct eng *e, uint32_t t) {
    for (size_t i = 0; i < e->mq_len; i++) {
        if (e->mq[e->mq_head + i] == t) {
            memmove(e->mq + e->mq_head + 1, e->mq + e->mq_head, i * sizeof *e->mq);
            e->mq[e->mq_head] = t;
            return;
        }
    }
}

/* Give freed memory to queued prefetches, in order. */
static int mq_grant(struct eng *e) {
    while (e->mq_len > 0) {
        uint32_t t = e->mq[e->mq_head];
        if (e->ts[t].state != ST_QUEUED) { /* reborn or dropped meanwhile */
            e->mq_head++;
            e->mq_len--;
            continue;
        }
        uint64_t b = e->v->bytes[t];
        if (e->gpu_used + b > e->v->capacity) {
            break;
        }
        e->mq_head++;
        e->mq_len--;
        e->gpu_used += b;
        note_gpu(e);
        e->ts[t].state = ST_PREFETCHING;
        int rc = xfer_start(e, t, path_to_gpu(e->ts[t].tier), e->ts[t].tier, TIO_TIER_GPU, 0,
                            UINT64_MAX);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/* Offload t (ST_GPU) to tier `to`. */
static int offload(struct eng *e, uint32_t t, int to, int clean, int urgent, uint64_t deadline_g) {
    struct tstate *s = &e->ts[t];
    uint64_t b = e->v->bytes[t];
    lru_remove(e, t);
    if (clean && s->valid[to]) {
        /* an identical copy is stored: drop the GPU copy without writing */
        s->state = ST_OFF;
        s->tier = to;
        e->gpu_used -= b;
        if (e->measuring) {
            e->sim->r.n_moves_clean++;
        }
        return 0;
    }
    if (to == TIO_TIER_HOST) {
        s->host_bytes = b;
        e->host_used += b;
        note_host(e);
    }
    s->state = ST_OFFLOADING;
    s->keep = 0;
    e->offload_inflight += b;
    return xfer_start(e, t, to == TIO_TIER_HOST ? P_D2H : P_GPU_SSD, TIO_TIER_GPU, to, urgent,
                      deadline_g);
}

static void xfer_free(struct eng *e, uint32_t id) {
    e->xf[id].next = e->free_xf;
    e->free_xf = id;
}

/* A transfer's bytes and latency are done. */
static int xfer_complete(struct eng *e, uint32_t id) {
    struct xfer *x = &e->xf[id];
    uint32_t t = x->tensor;
    struct tstate *s = &e->ts[t];
    uint64_t b = e->v->bytes[t];
    e->n_active--;
    if (x->deadline_g != UINT64_MAX && e->measuring && e->g > x->deadline_g) {
        e->sim->r.n_moves_late++;
    }
    if (e->p->record_timeline && e->measuring && x->t_first >= 0) {
        if (tio_grow((void **)&e->sim->spans, &e->sim->cap_spans, e->sim->n_spans + 1,
                     sizeof *e->sim->spans) < 0) {
            return TIO_ENOMEM;
        }
        struct sim_span *sp = &e->sim->spans[e->sim->n_spans++];
        sp->t0 = x->t_first - e->t0;
        sp->t1 = e->t - e->t0;
        sp->bytes = b;
        sp->tensor = t;
        sp->channel = path_track[x->path];
        sp->prefetch = x->to == TIO_TIER_GPU;
        sp->urgent = x->urgent;
    }
    s->xfer = NONE32;
    if (x->from == TIO_TIER_GPU) { /* offload */
        e->offload_inflight -= b;
        s->valid[x->to] = 1;
        if (s->dying) { /* intermediate died while its copy was being written */
            s->dying = 0;
            s->state = ST_DEAD;
            e->gpu_used -= b;
            e->host_used -= s->host_bytes;
            s->host_bytes = 0;
        } else if (s->keep) { /* needed again before the offload finished: stays */
            s->keep = 0;
            s->state = ST_GPU;
            e->host_used -= s->host_bytes;
            s->host_bytes = 0;
            s->valid[TIO_TIER_HOST] = 0;
            lru_touch(e, t);
        } else {
            s->state = ST_OFF;
            s->tier = x->to;
            e->gpu_used -= b;
        }
    } else if (x->to == TIO_TIER_GPU) { /* prefetch */
        s->state = ST_GPU;
        if (x->from == TIO_TIER_HOST && !(e->v->tflags[t] & SV_HOSTCOPY)) {
            e->host_used -= s->host_bytes;
            s->host_bytes = 0;
            s->valid[TIO_TIER_HOST] = 0;
        }
        lru_touch(e, t);
    } else { /* host <-> ssd */
        s->tier = x->to;
        if (x->from == TIO_TIER_HOST) {
            e->host_used -= s->host_bytes;
            s->host_bytes = 0;
            s->valid[TIO_TIER_HOST] = 0;
        }
        s->valid[x->to] = 1;
    }
    xfer_free(e, id);
    return mq_grant(e);
}

/* Bandwidth to the heads of the FIFOs, urgent first then by issue order. */
static void allocate_rates(struct eng *e) {
    uint32_t heads[NQ];
    int n = 0;
    for (int q = 0; q < NQ; q++) {
        if (e->qhead[q] != NONE32) {
            uint32_t id = e->qhead[q];
            int i = n++;
            while (i > 0) {
                const struct xfer *a = &e->xf[heads[i - 1]], *b = &e->xf[id];
                if (a->urgent > b->urgent || (a->urgent == b->urgent && a->seq < b->seq)) {
                    break;
                }
                heads[i] = heads[i - 1];
                i--;
            }
            heads[i] = id;
        }
    }
    double cap[TIO_SIM_CHANNEL_COUNT];
    memcpy(cap, e->bw, sizeof cap);
    if (e->cache_cap > 0 && e->cache_level >= e->cache_cap) {
        cap[TIO_SIM_SSD_WRITE] = TIO_MIN(cap[TIO_SIM_SSD_WRITE], e->cache_drain_Bps);
    }
    /* The SSD array's time is one budget (ssd_time, 1 = all of it): a byte read costs
     * 1 / bw[read] of it, a byte written 1 / bw[write], both times ssd_mix when reads and
     * writes are in flight together (docs/simulator.md, "Channels and bandwidth"). */
    const uint32_t rd = 1u << TIO_SIM_SSD_READ, wr = 1u << TIO_SIM_SSD_WRITE;
    uint32_t ssd_dirs = 0;
    for (int i = 0; i < n; i++) {
        ssd_dirs |= path_mask[e->xf[heads[i]].path] & (rd | wr);
    }
    double mix = ssd_dirs == (rd | wr) ? e->ssd_mix : 1.0;
    double ssd_time = 1.0;
    for (int i = 0; i < n; i++) {
        struct xfer *x = &e->xf[heads[i]];
        double r = INFINITY;
        int ssd_c = -1;
        for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
            if (path_mask[x->path] & (1u << c)) {
                r = TIO_MIN(r, cap[c]);
                if (c == TIO_SIM_SSD_READ || c == TIO_SIM_SSD_WRITE) {
                    ssd_c = c;
                }
            }
        }
        if (ssd_c >= 0 && e->ssd_Bps[ssd_c] > 0) {
            r = TIO_MIN(r, ssd_time * e->ssd_Bps[ssd_c] / mix);
        }
        if (!(r > 0.0)) {
            r = 0.0;
        }
        x->rate = r;
        for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
            if (path_mask[x->path] & (1u << c)) {
                cap[c] -= r;
            }
        }
        if (ssd_c >= 0 && e->ssd_Bps[ssd_c] > 0) {
            ssd_time = TIO_MAX(0.0, ssd_time - r * mix / e->ssd_Bps[ssd_c]);
        }
        if (r > 0.0 && x->t_first < 0) {
            x->t_first = e->t;
        }
    }
}

/*
 * Bandwidth bins cover the measured iteration. They start ideal_s / bins wide; when the
 * iteration runs past 2 * bins of them (a slow link stretches it far beyond the ideal), pairs
 * are merged and the width doubles. So the series holds at most 2 * bins bins whatever the
 * simulated time (memory bounded by the parameters, not by the clock).
 */
static void bins_coarsen(struct tio_sim *sim) {
    size_t n = (sim->n_bins + 1) / 2;
    for (size_t i = 0; i < n; i++) {
        for (size_t c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
            double hi =
                2 * i + 1 < sim->n_bins ? sim->bins[(2 * i + 1) * TIO_SIM_CHANNEL_COUNT + c] : 0.0;
            sim->bins[i * TIO_SIM_CHANNEL_COUNT + c] =
                sim->bins[2 * i * TIO_SIM_CHANNEL_COUNT + c] + hi;
        }
    }
    sim->n_bins = n;
    sim->bin_s *= 2.0;
}

static int bins_add(struct eng *e, int c, double a, double b, double rate) {
    struct tio_sim *sim = e->sim;
    a -= e->t0;
    b -= e->t0;
    double max_bins = 2.0 * (double)e->p->bins;
    while (b / sim->bin_s >= max_bins) {
        bins_coarsen(sim);
    }
    size_t last = (size_t)(b / sim->bin_s);
    if (last >= sim->n_bins) {
        size_t need = (last + 1) * TIO_SIM_CHANNEL_COUNT;
        size_t cap = sim->cap_bins;
        if (tio_grow((void **)&sim->bins, &cap, need, sizeof *sim->bins) < 0) {
            return TIO_ENOMEM;
        }
        sim->cap_bins = cap;
        memset(sim->bins + sim->n_bins * TIO_SIM_CHANNEL_COUNT, 0,
               (need - sim->n_bins * TIO_SIM_CHANNEL_COUNT) * sizeof *sim->bins);
        sim->n_bins = last + 1;
    }
    for (size_t i = (size_t)(a / sim->bin_s); i <= last; i++) {
        double lo = TIO_MAX(a, (double)i * sim->bin_s);
        double hi = TIO_MIN(b, (double)(i + 1) * sim->bin_s);
        if (hi > lo) {
            sim->bins[i * TIO_SIM_CHANNEL_COUNT + (size_t)c] += rate * (hi - lo);
        }
    }
    return 0;
}

/* Move time forward to t1, moving bytes at the current rates. */
static int advance(struct eng *e, double t1) {
    double dt = t1 - e->t;
    if (dt <= 0.0) {
        return 0;
    }
    double chan_rate[TIO_SIM_CHANNEL_COUNT] = { 0 };
    for (int q = 0; q < NQ; q++) {
        uint32_t id = e->qhead[q];
        if (id == NONE32) {
            continue;
        }
        struct xfer *x = &e->xf[id];
        if (x->rate > 0.0) {
            x->remaining -= x->rate * dt;
            for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
                if (path_mask[x->path] & (1u << c)) {
                    chan_rate[c] += x->rate;
                }
            }
        }
    }
    if (e->cache_cap > 0) {
        /* the write caches fill with what is written and drain at the sustained rate */
        double lvl = e->cache_level + (chan_rate[TIO_SIM_SSD_WRITE] - e->cache_drain_Bps) * dt;
        e->cache_level = TIO_MIN(e->cache_cap, TIO_MAX(0.0, lvl));
    }
    if (e->measuring) {
        struct tio_sim_result *r = &e->sim->r;
        int any = 0;
        for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
            if (chan_rate[c] > 0.0) {
                any = 1;
                r->busy_s[c] += dt;
                e->bytes_acc[c] += chan_rate[c] * dt;
                int rc = bins_add(e, c, e->t, t1, chan_rate[c]);
                if (rc < 0) {
                    return rc;
                }
            }
        }
        if (any || e->n_lat > 0) {
            r->io_busy_s += dt;
            if (e->running && !e->in_cpu) {
                r->overlap_s += dt;
            }
        }
    }
    e->t = t1;
    return 0;
}

/*
 * An offload of a tensor whose previous offload is still running and was told to keep it (a
 * kernel used it meanwhile, or its prefetch came): the plan sends it away again, so the running
 * transfer frees it after all instead of keeping it. Skipping the move would leave the tensor
 * on the GPU for the whole of its next idle period, which the plan counts as free memory (with
 * slow, overcommitted offloads this happens often). Unless the move is CLEAN (the copy being
 * written is still current), the use in between may have changed the tensor: the write starts
 * over.
 */
static void rekeep_offload(struct eng *e, uint32_t t, const struct tio_move *m) {
    struct tstate *s = &e->ts[t];
    struct xfer *x = &e->xf[s->xfer];
    s->keep = 0;
    if (!(m->flags & TIO_MOVE_CLEAN) && !x->in_lat) {
        x->remaining = (double)e->v->bytes[t];
    }
}

/* Issue the plan's moves triggered at kernel k of the current iteration. */
static int issue_moves(struct eng *e, uint64_t k, uint64_t iter_base) {
    const struct sim_view *v = e->v;
    while (e->move_pos < v->n_moves && v->moves[e->move_pos].trigger == k) {
        const struct tio_move *m = &v->moves[e->move_pos++];
        uint32_t t = m->tensor;
        struct tstate *s = &e->ts[t];
        uint64_t dl = iter_base + m->deadline;
        int urgent = (m->flags & TIO_MOVE_URGENT) != 0;
        int rc = 0;
        if (v->tflags[t] & SV_EXTERNAL) {
            continue;
        }
        if (m->to == TIO_TIER_GPU) {
            if (s->state == ST_OFF) {
                rc = fetch(e, t, urgent, dl);
            } else if (s->state == ST_OFFLOADING) {
                s->keep = 1; /* still on the GPU: cancel the free instead of fetching back */
                if (e->measuring) {
                    e->sim->r.n_moves_skipped++;
                }
            } else if (e->measuring) {
                e->sim->r.n_moves_skipped++;
            }
        } else if (m->from == TIO_TIER_GPU) {
            if (s->state == ST_GPU) {
                rc = offload(e, t, m->to, (m->flags & TIO_MOVE_CLEAN) != 0, urgent, dl);
            } else if (s->state == ST_OFFLOADING && s->keep) {
                rekeep_offload(e, t, m);
            } else if (e->measuring) {
                e->sim->r.n_moves_skipped++;
            }
        } else { /* host <-> ssd */
            if (s->state == ST_OFF && s->tier == m->from) {
                rc = xfer_start(e, t, m->to == TIO_TIER_SSD ? P_HOST_SSD : P_SSD_HOST, m->from,
                                m->to, urgent, dl);
            } else if (e->measuring) {
                e->sim->r.n_moves_skipped++;
            }
        }
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/* LRU: evict least-recently-used resident tensors until `need` more bytes fit. */
static int lru_evict(struct eng *e, uint64_t need) {
    uint64_t stamp = e->g + 1;
    uint32_t t = e->lru_head;
    uint64_t host_cap = e->hw->host_offload_cap_bytes;
    while (t != NONE32 && e->gpu_used - e->offload_inflight + need > e->v->capacity) {
        uint32_t next = e->ts[t].lnext;
        struct tstate *s = &e->ts[t];
        if (s->state == ST_GPU && s->stamp != stamp && !(e->v->tflags[t] & SV_PINNED)) {
            uint64_t b = e->v->bytes[t];
            /* LRU uses the host cap; a plan's evictions go to the SSDs where there are some:
             * the host budget is the plan's, which counts on it for its own moves */
            int host_ok = e->v->lru || e->hw->ssd_count == 0;
            int to = (host_ok && e->host_used + b <= host_cap) ? TIO_TIER_HOST : TIO_TIER_SSD;
            if (e->measuring) {
                e->sim->r.n_demand_evictions++;
                e->sim->r.demand_evicted_bytes += b;
            }
            int rc = offload(e, t, to, 1, 1, UINT64_MAX);
            if (rc < 0) {
                return rc;
            }
        }
        t = next;
    }
    return 0;
}

static void set_oom(struct eng *e, uint64_t need) {
    e->oom = TIO_SIM_OOM_GPU;
    e->oom_kernel = e->g % e->N;
    e->oom_iter = (uint32_t)(e->g / e->N);
    e->oom_bytes = e->gpu_used + need > e->v->capacity ? e->gpu_used + need - e->v->capacity : need;
}

/*
 * A receive kernel of a coupled stage: once the next message on its link has been sent, the
 * receive ends at max(its start + the send kernel's duration, the send's end) (the rule of the
 * trace generator's 1F1B replay, docs/model.md). Until then its end is unknown (infinite).
 */
static void pipe_receive(struct eng *e) {
    if (!e->recv_pending) {
        return;
    }
    const struct pipe_link *l = &e->grp->links[e->recv_link];
    size_t i = e->recv_next[e->recv_link];
    if (i >= l->n) {
        return;
    }
    e->recv_next[e->recv_link]++;
    e->recv_pending = 0;
    double own = e->recv_t0 + l->msg[i].dur;
    e->t_end = TIO_MAX(own, l->msg[i].t_end);
    if (e->measuring) {
        uint64_t k = e->g % e->N;
        e->pipe_wait_s += e->t_end - own;
        e->sim->k_dur_s[k] = e->v->cpu_s[k] + (e->t_end - e->recv_t0);
    }
}

/* A send kernel of a coupled stage has ended: its message is on the link. */
static int pipe_send(struct eng *e, uint64_t k) {
    struct pipe_link *l = &e->grp->links[e->v->p2p_link[k]];
    if (tio_grow((void **)&l->msg, &l->cap, l->n + 1, sizeof *l->msg) < 0) {
        return TIO_ENOMEM;
    }
    l->msg[l->n].t_end = e->t;
    l->msg[l->n].dur = e->v->dur_s[k];
    l->n++;
    return 0;
}

/* Try to start kernel g. Returns <0 error, else 0 (e->running tells whether it started). */
static int try_start(struct eng *e) {
    const struct sim_view *v = e->v;
    uint64_t k = e->g % e->N;
    uint64_t iter_base = e->g - k;
    if (k == 0 && e->grp->n > 1 && e->g > 0) {
        /* coupled stages: an iteration starts when every stage has finished the previous one */
        uint64_t it = e->g / e->N;
        for (size_t i = 0; i < e->grp->n; i++) {
            const struct eng *o = &e->grp->e[i];
            if (o->N > 0 && o->g / o->N < it) {
                e->at_barrier = 1;
                return 0;
            }
        }
        if (e->at_barrier) { /* the wait lies between iterations: not a stall of kernel 0 */
            e->at_barrier = 0;
            e->t_ready = e->t;
        }
    }
    if (e->issued_g != e->g) {
        if (k == 0) {
            e->move_pos = 0;
            if (e->g == e->g0) {
                e->measuring = 1;
                e->t0 = e->t;
                e->cache_level_meas = e->cache_level;
                note_gpu(e);
                note_host(e);
            }
        }
        e->issued_g = e->g;
        int rc = issue_moves(e, k, iter_base);
        if (rc < 0) {
            return rc;
        }
    }
    uint64_t births = 0, queued = 0;
    int wait_data = 0;
    uint64_t stamp = e->g + 1;
    if (!v->skip_uses[k]) {
        for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1]; u++) {
            uint32_t t = v->use_tensor[u];
            if (v->tflags[t] & SV_EXTERNAL) {
                continue;
            }
            struct tstate *s = &e->ts[t];
            s->stamp = stamp;
            switch (s->state) {
            case ST_DEAD:
                births += v->bytes[t];
                break;
            case ST_GPU:
                break;
            case ST_OFFLOADING:
                s->keep = 1;
                break;
            case ST_PREFETCHING:
                promote(e, s->xfer);
                wait_data = 1;
                break;
            case ST_QUEUED:
                mq_front(e, t);
                queued += v->bytes[t];
                wait_data = 1;
                break;
            case ST_OFF:
                if (v->tflags[t] & SV_FRESH) {
                    births += v->bytes[t]; /* re-created by this use: no need to fetch it */
                    break;
                }
                if (e->measuring) {
                    e->sim->r.n_demand_fetches++;
                }
                {
                    int rc = fetch(e, t, 1, e->g);
                    if (rc < 0) {
                        return rc;
                    }
                }
                if (s->state == ST_QUEUED) {
                    queued += v->bytes[t];
                }
                wait_data = 1;
                break;
            default:
                break;
            }
        }
    }
    uint64_t need = births + queued;
    if (e->gpu_used + need > v->capacity && (v->lru || v->demand_evict)) {
        int rc = lru_evict(e, need);
        if (rc < 0) {
            return rc;
        }
        rc = mq_grant(e); /* clean evictions free memory at once */
        if (rc < 0) {
            return rc;
        }
        if (queued && e->gpu_used + births <= v->capacity) {
            need = births; /* the queued fetches may have started meanwhile */
            for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1]; u++) {
                uint32_t t = v->use_tensor[u];
                if (!(v->tflags[t] & SV_EXTERNAL) && e->ts[t].state == ST_QUEUED) {
                    need += v->bytes[t];
                }
            }
        }
    }
    if (e->gpu_used + need > v->capacity) {
        if (e->offload_inflight == 0 && e->n_active == 0) {
            set_oom(e, need);
            return 0;
        }
        /* without eviction only an offload can free memory; with it, a prefetch in flight
         * will land and become evictable */
        if (e->offload_inflight == 0 && !wait_data && !(v->lru || v->demand_evict)) {
            set_oom(e, need);
            return 0;
        }
        e->stall_kind = wait_data ? 1 : 2;
        return mq_grant(e);
    }
    if (wait_data) {
        e->stall_kind = 1;
        return mq_grant(e); /* a needed fetch moved to the front may fit now */
    }
    /* start: allocate the tensors it creates */
    if (!v->skip_uses[k]) {
        for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1]; u++) {
            uint32_t t = v->use_tensor[u];
            if (v->tflags[t] & SV_EXTERNAL) {
                continue;
            }
            struct tstate *s = &e->ts[t];
            if (s->state == ST_DEAD || (s->state == ST_OFF && (v->tflags[t] & SV_FRESH))) {
                if (s->state == ST_OFF) {
                    e->host_used -= s->host_bytes;
                    s->host_bytes = 0;
                }
                s->state = ST_GPU;
                e->gpu_used += v->bytes[t];
                memset(s->valid, 0, sizeof s->valid);
            }
            if (v->use_mode[u] & TIO_USE_WRITE) {
                s->valid[TIO_TIER_HOST] = s->valid[TIO_TIER_SSD] = 0;
            }
            lru_touch(e, t);
        }
    }
    note_gpu(e);
    double stall = e->t - e->t_ready;
    if (e->measuring) {
        struct tio_sim_result *r = &e->sim->r;
        r->stall_s += stall;
        if (e->stall_kind == 1) {
            r->stall_data_s += stall;
        } else if (e->stall_kind == 2) {
            r->stall_memory_s += stall;
        }
        e->sim->k_stall_s[k] = stall;
        e->sim->k_start_s[k] = e->t - e->t0;
        e->sim->k_gpu[k] = e->gpu_used;
    }
    e->stall_kind = 0;
    e->running = 1;
    e->in_cpu = v->cpu_s[k] > 0.0;
    e->t_cpu_end = e->t + v->cpu_s[k];
    e->t_end = e->t_cpu_end + v->dur_s[k];
    if (v->p2p && v->p2p[k] == SIM_P2P_RECV) {
        /* ends when its message has arrived: pipe_receive() sets the end */
        e->recv_pending = 1;
        e->recv_link = v->p2p_link[k];
        e->recv_t0 = e->t_cpu_end;
        e->t_end = INFINITY;
        pipe_receive(e);
    }
    return 0;
}

static int end_kernel(struct eng *e) {
    const struct sim_view *v = e->v;
    uint64_t k = e->g % e->N;
    if (v->p2p && v->p2p[k] == SIM_P2P_SEND) {
        int rc = pipe_send(e, k);
        if (rc < 0) {
            return rc;
        }
    }
    if (!v->skip_uses[k]) {
        for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1]; u++) {
            uint32_t t = v->use_tensor[u];
            if ((v->tflags[t] & (SV_EXTERNAL | SV_GLOBAL)) || v->last_use[t] != k) {
                continue;
            }
            struct tstate *s = &e->ts[t];
            if (s->state == ST_GPU) {
                s->state = ST_DEAD;
                e->gpu_used -= v->bytes[t];
                lru_remove(e, t);
            } else if (s->state == ST_OFFLOADING) {
                s->dying = 1;
            }
        }
    }
    e->running = 0;
    e->in_cpu = 0;
    e->g++;
    e->t_ready = e->t;
    return 0;
}

static int eng_init(struct eng *e) {
    const struct sim_view *v = e->v;
    const struct tio_hw *hw = e->hw;
    const struct tio_sim_params *p = e->p;
    double eff = hw->ssd_efficiency > 0 ? hw->ssd_efficiency : 1.0;
    e->bw[TIO_SIM_SSD_READ] =
        (double)hw->ssd_count * hw->ssd_read_Bps * eff * p->ssd_bandwidth_scale;
    e->bw[TIO_SIM_SSD_WRITE] =
        (double)hw->ssd_count * hw->ssd_write_Bps * eff * p->ssd_bandwidth_scale;
    e->ssd_mix = tio_hw_ssd_mix_factor(hw);
    if (hw->ssd_count > 0 && hw->ssd_write_cache_bytes > 0 && hw->ssd_sustained_write_Bps > 0) {
        e->cache_cap = (double)hw->ssd_count * (double)hw->ssd_write_cache_bytes;
        e->cache_drain_Bps = tio_hw_ssd_sustained_write_Bps(hw) * p->ssd_bandwidth_scale;
        e->cache_level = TIO_MIN(TIO_MAX(v->cache_level0, 0.0), e->cache_cap);
    }
    e->ssd_Bps[TIO_SIM_SSD_READ] = e->bw[TIO_SIM_SSD_READ];
    e->ssd_Bps[TIO_SIM_SSD_WRITE] = e->bw[TIO_SIM_SSD_WRITE];
    e->bw[TIO_SIM_PCIE_H2D] = hw->pcie_h2d_Bps * p->pcie_bandwidth_scale;
    e->bw[TIO_SIM_PCIE_D2H] = hw->pcie_d2h_Bps * p->pcie_bandwidth_scale;
    for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
        if (v->chan_cap_Bps[c] > 0 && v->chan_cap_Bps[c] < e->bw[c]) {
            e->bw[c] = v->chan_cap_Bps[c];
        }
    }
    e->ssd_lat = hw->ssd_latency_s;
    e->host_lat = p->host_latency_s;
    e->N = v->n_kernels;
    e->total = (uint64_t)(p->warmup_iterations + 1) * e->N;
    e->g0 = (uint64_t)p->warmup_iterations * e->N;
    e->free_xf = NONE32;
    e->lru_head = e->lru_tail = NONE32;
    e->issued_g = UINT64_MAX;
    for (int q = 0; q < NQ; q++) {
        e->qhead[q] = e->qtail[q] = NONE32;
    }
    e->ts = tio_calloc(v->n_tensors ? v->n_tensors : 1, sizeof *e->ts);
    if (!e->ts) {
        return TIO_ENOMEM;
    }
    for (size_t t = 0; t < v->n_tensors; t++) {
        struct tstate *s = &e->ts[t];
        s->xfer = NONE32;
        s->lnext = s->lprev = NONE32;
        uint8_t f = v->tflags[t];
        if (f & SV_EXTERNAL) {
            s->state = ST_OFF;
            s->tier = TIO_TIER_HOST;
        } else if (f & SV_INIT_OFF) {
            s->state = ST_OFF;
            s->tier = v->init_tier[t];
            s->valid[s->tier] = 1;
            if (s->tier == TIO_TIER_HOST && !(f & SV_HOSTCOPY)) {
                s->host_bytes = v->bytes[t];
                e->host_used += v->bytes[t];
            }
        } else if (f & SV_GLOBAL) {
            s->state = ST_GPU;
            e->gpu_used += v->bytes[t];
            lru_touch(e, (uint32_t)t);
        } else {
            s->state = ST_DEAD;
        }
    }
    return 0;
}

/* The earliest pending event, as next_event() found it. */
struct event {
    double t;
    int kind;    /* EV_* */
    uint32_t id; /* EV_DATA: the transfer whose data finishes */
};
enum { EV_NONE = 0, EV_CPU, EV_KERNEL, EV_DATA, EV_LAT, EV_CACHE };

/*
 * Find the earliest pending event. process_events() handles this event whatever the rounding of
 * the clock: at large times (a double's spacing is 3.6e-12 s at 2^14 s) a short transfer's end
 * rounds to the current time, and a test "is it done?" on the remaining bytes would never
 * become true. So every step handles at least one event, and the number of steps is bounded
 * by the number of events, which the trace bounds (step_budget()).
 */
static struct event next_event(const struct eng *e) {
    struct event ev = { .t = INFINITY, .kind = EV_NONE, .id = NONE32 };
    if (e->running) {
        ev.t = e->in_cpu ? e->t_cpu_end : e->t_end;
        ev.kind = e->in_cpu ? EV_CPU : EV_KERNEL;
    }
    for (int q = 0; q < NQ; q++) {
        uint32_t id = e->qhead[q];
        if (id != NONE32 && e->xf[id].rate > 0.0) {
            double td = e->t + TIO_MAX(e->xf[id].remaining, 0.0) / e->xf[id].rate;
            if (td < ev.t) {
                ev.t = td;
                ev.kind = EV_DATA;
                ev.id = id;
            }
        }
    }
    for (size_t i = 0; i < e->n_lat; i++) {
        if (e->xf[e->lat[i]].t_lat_done < ev.t) {
            ev.t = e->xf[e->lat[i]].t_lat_done;
            ev.kind = EV_LAT;
        }
    }
    if (e->cache_cap > 0 && e->cache_level < e->cache_cap) {
        /* the SSD write caches fill up: from then on the drives write at the sustained rate */
        double w = 0.0;
        for (int q = 0; q < NQ; q++) {
            uint32_t id = e->qhead[q];
            if (id != NONE32 && (path_mask[e->xf[id].path] & (1u << TIO_SIM_SSD_WRITE))) {
                w += e->xf[id].rate;
            }
        }
        if (w > e->cache_drain_Bps) {
            double tf = e->t + (e->cache_cap - e->cache_level) / (w - e->cache_drain_Bps);
            if (tf < ev.t) {
                ev.t = tf;
                ev.kind = EV_CACHE;
            }
        }
    }
    return ev;
}

/*
 * Handle everything due at time e->t, and at least `ev` (the event the clock was advanced to).
 * Latency ends and kernel ends compare stored times with the clock exactly (the clock was set
 * to the event's own time); only a transfer's remaining bytes carry rounding, so the transfer
 * that set the clock is finished explicitly.
 */
static int process_events(struct eng *e, const struct event *ev) {
    const double eps = 1e-12;
    int rc;
    if (ev->kind == EV_DATA) {
        e->xf[ev->id].remaining = 0.0;
    } else if (ev->kind == EV_CACHE) {
        e->cache_level = e->cache_cap; /* whatever the rounding: the next rates see it full */
    }
    /* transfers whose data is done enter their latency phase */
    for (int q = 0; q < NQ; q++) {
        uint32_t id = e->qhead[q];
        while (id != NONE32 && e->xf[id].rate > 0.0 &&
               e->xf[id].remaining <= e->xf[id].rate * eps + 1e-6) {
            struct xfer *x = &e->xf[id];
            q_remove(e, id);
            x->in_lat = 1;
            x->rate = 0.0;
            x->t_lat_done = e->t + x->latency;
            if (tio_grow((void **)&e->lat, &e->cap_lat, e->n_lat + 1, sizeof *e->lat) < 0) {
                return TIO_ENOMEM;
            }
            e->lat[e->n_lat++] = id;
            id = e->qhead[q];
        }
    }
    for (size_t i = 0; i < e->n_lat;) {
        uint32_t id = e->lat[i];
        if (e->xf[id].t_lat_done <= e->t + eps) {
            e->lat[i] = e->lat[--e->n_lat];
            rc = xfer_complete(e, id);
            if (rc < 0) {
                return rc;
            }
        } else {
            i++;
        }
    }
    if (e->running && e->in_cpu && e->t_cpu_end <= e->t + eps) {
        e->in_cpu = 0;
    }
    if (e->running && !e->in_cpu && e->t_end <= e->t + eps) {
        rc = end_kernel(e);
        if (rc < 0) {
            return rc;
        }
        rc = mq_grant(e);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/*
 * An upper bound on the engine's steps, from the trace alone. Each step handles at least one
 * event (process_events), and the events are: per kernel run, the end of its host part and its
 * end; per transfer, its data and its latency. Transfers per iteration: the plan's moves, one
 * demand fetch per use, and evictions, which need a tensor on the GPU (a birth at a use, an
 * arrival of a fetch, a global at start, an offload kept). So a run of I iterations has fewer
 * than 2 I N + 2 (4 I (moves + uses) + tensors) events; the budget doubles that. Exceeding it
 * means an engine bug, reported as an error instead of a hang.
 */
static uint64_t step_budget(const struct eng *e) {
    const struct sim_view *v = e->v;
    uint64_t iters = e->total / (e->N ? e->N : 1);
    uint64_t uses = v->use_offset[v->n_kernels];
    uint64_t xfers = 4 * iters * ((uint64_t)v->n_moves + uses) + (uint64_t)v->n_tensors;
    uint64_t events = 2 * e->total + 2 * xfers;
    /* the SSD caches fill at most once after each other event (the level falls below full
     * only when rates change, which happens at events) */
    if (e->cache_cap > 0) {
        events *= 2;
    }
    return 2 * events + 64;
}

/* The result of one engine after its run (or its group's). */
static void eng_result(struct eng *e) {
    struct tio_sim_result *r = &e->sim->r;
    if (e->oom) {
        r->oom = e->oom;
        r->oom_kernel = e->oom_kernel;
        r->oom_bytes = e->oom_bytes;
        r->oom_iteration = e->oom_iter;
    } else {
        r->iteration_s = e->t - e->t0;
    }
    for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
        r->bytes[c] = (uint64_t)llround(e->bytes_acc[c]);
    }
    r->ssd_cache_start_bytes = (uint64_t)llround(e->cache_level_meas);
    r->ssd_cache_end_bytes = (uint64_t)llround(e->cache_level);
}

static void eng_fini(struct eng *e) {
    tio_free(e->ts);
    tio_free(e->xf);
    tio_free(e->mq);
    tio_free(e->lat);
    tio_free(e->recv_next);
}

/* Nothing runs and nothing is in flight in any stage, yet a kernel cannot start: a stage
 * stuck for memory is OOM; stages that all wait for each other are a deadlock (an error). */
static int group_stuck(struct eng_group *grp) {
    for (size_t i = 0; i < grp->n; i++) {
        struct eng *e = &grp->e[i];
        if (e->g >= e->total || e->recv_pending || e->at_barrier) {
            continue;
        }
        TIO_LOG_DEBUG("sim: stuck at kernel %llu: %zu transfers, %zu latency, %zu queued for "
                      "memory, gpu %llu / %llu",
                      (unsigned long long)e->g, e->n_active, e->n_lat, e->mq_len,
                      (unsigned long long)e->gpu_used, (unsigned long long)e->v->capacity);
        set_oom(e, 0);
        return 0;
    }
    for (size_t i = 0; i < grp->n; i++) {
        const struct eng *e = &grp->e[i];
        if (e->recv_pending) {
            return tio_set_error(TIO_EINVAL,
                                 "sim: pipeline deadlock: stage %zu waits at kernel %llu of "
                                 "iteration %llu for a message that no stage sends (the stages' "
                                 "send and receive orders do not match)",
                                 i, (unsigned long long)(e->g % e->N),
                                 (unsigned long long)(e->g / e->N));
        }
    }
    return tio_set_error(TIO_EINVAL, "sim: pipeline deadlock between the stages");
}

/*
 * Run the engines of a group in lockstep: every step, each stage that has not finished starts
 * what it can, the earliest event over all stages sets the common clock, every stage advances
 * to it and handles what is due. A stage alone (n = 1) runs exactly as it always has.
 */
static int group_run(struct eng_group *grp, const struct tio_sim_params *p) {
    size_t n = grp->n;
    struct event evs[SIM_MAX_STAGES];
    uint64_t budget = 0, steps = 0;
    for (size_t i = 0; i < n; i++) {
        budget += step_budget(&grp->e[i]);
    }
    (void)p;
    for (;;) {
        int active = 0;
        for (size_t i = 0; i < n; i++) {
            struct eng *e = &grp->e[i];
            if (e->g >= e->total) {
                continue;
            }
            active = 1;
            pipe_receive(e);
            if (!e->running) {
                int rc = try_start(e);
                if (rc < 0) {
                    return rc;
                }
                if (e->oom) {
                    return 0;
                }
            }
        }
        if (!active) {
            return 0;
        }
        if (++steps > budget) {
            const struct eng *e = &grp->e[0];
            return tio_set_error(TIO_ENOMEM,
                                 "sim: step limit of %llu events exceeded at kernel %llu of "
                                 "iteration %llu (an engine bug: please report it with the trace "
                                 "and plan)",
                                 (unsigned long long)budget, (unsigned long long)(e->g % e->N),
                                 (unsigned long long)(e->g / e->N));
        }
        double t = INFINITY;
        for (size_t i = 0; i < n; i++) {
            struct eng *e = &grp->e[i];
            evs[i].t = INFINITY;
            evs[i].kind = EV_NONE;
            if (e->g >= e->total) {
                continue;
            }
            allocate_rates(e);
            evs[i] = next_event(e);
            t = TIO_MIN(t, evs[i].t);
        }
        if (isinf(t)) {
            return group_stuck(grp);
        }
        for (size_t i = 0; i < n; i++) {
            struct eng *e = &grp->e[i];
            if (e->g >= e->total) {
                continue;
            }
            int rc = advance(e, t);
            if (rc < 0) {
                return rc;
            }
        }
        for (size_t i = 0; i < n; i++) {
            struct eng *e = &grp->e[i];
            if (e->g >= e->total) {
                continue;
            }
            const struct event none = { .t = t, .kind = EV_NONE, .id = NONE32 };
            int rc = process_events(e, evs[i].t <= t ? &evs[i] : &none);
            if (rc < 0) {
                return rc;
            }
        }
    }
}

int sim_engine_run_group(const struct sim_view *const *v,
                         size_t n,
                         size_t n_links,
                         const struct tio_hw *hw,
                         const struct tio_sim_params *p,
                         struct tio_sim *const *sims,
                         struct sim_stage_out *out) {
    if (n == 0 || n > SIM_MAX_STAGES) {
        return tio_set_error(TIO_EINVAL, "sim: %zu stages (1 to %d)", n, SIM_MAX_STAGES);
    }
    struct eng *e = tio_calloc(n, sizeof *e);
    struct eng_group grp = { .e = e, .n = n, .n_links = n_links };
    int rc = 0;
    if (!e) {
        return TIO_ENOMEM;
    }
    if (n_links) {
        grp.links = tio_calloc(n_links, sizeof *grp.links);
        if (!grp.links) {
            tio_free(e);
            return TIO_ENOMEM;
        }
    }
    int any_kernels = 0;
    for (size_t i = 0; i < n; i++) {
        e[i].v = v[i];
        e[i].p = p;
        e[i].hw = hw;
        e[i].sim = sims[i];
        e[i].grp = &grp;
        e[i].stage = i;
        rc = eng_init(&e[i]);
        if (rc < 0) {
            goto done;
        }
        if (n_links) {
            e[i].recv_next = tio_calloc(n_links, sizeof *e[i].recv_next);
            if (!e[i].recv_next) {
                rc = TIO_ENOMEM;
                goto done;
            }
        }
        any_kernels |= v[i]->n_kernels > 0;
    }
    if (any_kernels) {
        rc = group_run(&grp, p);
    }
    if (rc >= 0) {
        for (size_t i = 0; i < n; i++) {
            eng_result(&e[i]);
            if (out) {
                out[i].end_s = e[i].t - e[i].t0;
                out[i].wait_s = e[i].pipe_wait_s;
                out[i].oom = e[i].oom;
            }
        }
        rc = 0;
    }
done:
    for (size_t i = 0; i < n; i++) {
        eng_fini(&e[i]);
    }
    for (size_t l = 0; l < n_links; l++) {
        tio_free(grp.links[l].msg);
    }
    tio_free(grp.links);
    tio_free(e);
    return rc;
}

int sim_engine_run(const struct sim_view *v,
                   const struct tio_hw *hw,
                   const struct tio_sim_params *p,
                   struct tio_sim *sim) {
    return sim_engine_run_group(&v, 1, 0, hw, p, &sim, NULL);
}
