/* Transfers: the per-path FIFOs, prefetches, offloads and their completion. */
#include <math.h>
#include <string.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_engine_impl.h"

/* Channel that names the timeline track of a path. */
static const int32_t path_track[NPATH] = {
    [P_D2H] = TIO_SIM_PCIE_D2H,       [P_H2D] = TIO_SIM_PCIE_H2D,
    [P_GPU_SSD] = TIO_SIM_SSD_WRITE,  [P_SSD_GPU] = TIO_SIM_SSD_READ,
    [P_HOST_SSD] = TIO_SIM_SSD_WRITE, [P_SSD_HOST] = TIO_SIM_SSD_READ,
};

static int q_of(const struct xfer *x) {
    return x->path * 2 + (x->urgent ? 0 : 1);
}

/* Queue x in deadline order (earliest deadline first, issue order among equal deadlines): the
 * order in which tio_plan_verify proves a plan's moves meet their deadlines. Transfers without
 * a deadline (UINT64_MAX) stay in issue order behind the others. Deadlines mostly grow with
 * issue order, so the walk from the tail is short. */
static void q_push(struct eng *e, uint32_t id) {
    struct xfer *x = &e->xf[id];
    int q = q_of(x);
    uint32_t after = e->qtail[q];
    while (after != NONE32 && e->xf[after].deadline_g > x->deadline_g) {
        after = e->xf[after].prev;
    }
    x->prev = after;
    x->next = after != NONE32 ? e->xf[after].next : e->qhead[q];
    if (x->next != NONE32) {
        e->xf[x->next].prev = id;
    } else {
        e->qtail[q] = id;
    }
    if (after != NONE32) {
        e->xf[after].next = id;
    } else {
        e->qhead[q] = id;
    }
}

void sim_eng_q_remove(struct eng *e, uint32_t id) {
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

void sim_eng_note_gpu(struct eng *e) {
    if (e->measuring && e->gpu_used > e->sim->r.gpu_peak_bytes) {
        e->sim->r.gpu_peak_bytes = e->gpu_used;
    }
}

void sim_eng_note_host(struct eng *e) {
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
int sim_eng_xfer_start(
    struct eng *e, uint32_t t, int path, int from, int to, int urgent, uint64_t deadline_g) {
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
    /* A plan's URGENT flag says that lateness costs a stall, which its deadline already
     * orders; served ahead of earlier deadlines it made them late. Ahead of the deadline order
     * go only transfers a kernel waits for now (at or past their deadline, or without one:
     * an eviction on demand); a transfer a kernel comes to wait for is promoted. */
    x->urgent = urgent && (deadline_g == UINT64_MAX || deadline_g <= e->g);
    x->seq = e->seq++;
    x->deadline_g = deadline_g;
    x->remaining = (double)e->v->bytes[t];
    x->latency = (sim_eng_path_mask[path] & ((1u << TIO_SIM_SSD_READ) | (1u << TIO_SIM_SSD_WRITE)))
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

void sim_eng_promote(struct eng *e, uint32_t id) {
    struct xfer *x = &e->xf[id];
    if (x->urgent || x->in_lat) {
        return;
    }
    sim_eng_q_remove(e, id);
    x->urgent = 1;
    q_push(e, id);
}

static int path_to_gpu(int from) {
    return from == TIO_TIER_HOST ? P_H2D : P_SSD_GPU;
}

/* Allocate and start a prefetch of t (state ST_OFF) if memory allows; else queue it. */
int sim_eng_fetch(struct eng *e, uint32_t t, int urgent, uint64_t deadline_g) {
    struct tstate *s = &e->ts[t];
    uint64_t b = e->v->bytes[t];
    if ((e->mq_len == 0 || urgent) && e->gpu_used + b <= e->v->capacity) {
        e->gpu_used += b;
        sim_eng_note_gpu(e);
        s->state = ST_PREFETCHING;
        return sim_eng_xfer_start(e, t, path_to_gpu(s->tier), s->tier, TIO_TIER_GPU, urgent,
                                  deadline_g);
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
    s->mq_deadline = deadline_g;
    s->mq_urgent = urgent;
    return 0;
}

/* Move queued tensor t to the front of the memory queue. */
void sim_eng_mq_front(struct eng *e, uint32_t t) {
    e->ts[t].mq_urgent = 1; /* a kernel waits for it */
    for (size_t i = 0; i < e->mq_len; i++) {
        if (e->mq[e->mq_head + i] == t) {
            memmove(e->mq + e->mq_head + 1, e->mq + e->mq_head, i * sizeof *e->mq);
            e->mq[e->mq_head] = t;
            return;
        }
    }
}

/* Give freed memory to queued prefetches, in order. */
int sim_eng_mq_grant(struct eng *e) {
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
        sim_eng_note_gpu(e);
        e->ts[t].state = ST_PREFETCHING;
        int rc = sim_eng_xfer_start(e, t, path_to_gpu(e->ts[t].tier), e->ts[t].tier, TIO_TIER_GPU,
                                    e->ts[t].mq_urgent, e->ts[t].mq_deadline);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/* Offload t (ST_GPU) to tier `to`. */
int sim_eng_offload(struct eng *e, uint32_t t, int to, int clean, int urgent, uint64_t deadline_g) {
    struct tstate *s = &e->ts[t];
    uint64_t b = e->v->bytes[t];
    if (to == TIO_TIER_HOST && e->v->demand_evict && e->v->host_capped &&
        e->host_used + e->v->host_static_bytes + b > e->v->host_limit_bytes) {
        /* the runtime (docs/runtime.md): the host tier is full (a prefetch that frees it is
         * late), so the offload goes to the SSDs, or without SSDs the tensor stays */
        if (e->measuring) {
            e->sim->r.n_host_full_offloads++;
        }
        if (e->hw->ssd_count == 0) {
            return 0;
        }
        to = TIO_TIER_SSD;
    }
    sim_eng_victim_remove(e, t);
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
        sim_eng_note_host(e);
    }
    s->state = ST_OFFLOADING;
    s->keep = 0;
    e->offload_inflight += b;
    return sim_eng_xfer_start(e, t, to == TIO_TIER_HOST ? P_D2H : P_GPU_SSD, TIO_TIER_GPU, to,
                              urgent, deadline_g);
}

static void xfer_free(struct eng *e, uint32_t id) {
    e->xf[id].next = e->free_xf;
    e->free_xf = id;
}

/* A transfer's bytes and latency are done. */
int sim_eng_xfer_complete(struct eng *e, uint32_t id) {
    struct xfer *x = &e->xf[id];
    uint32_t t = x->tensor;
    struct tstate *s = &e->ts[t];
    uint64_t b = e->v->bytes[t];
    e->n_active--;
    /* late: its deadline kernel has started (a kernel that waits for it has not) */
    if (x->deadline_g != UINT64_MAX && e->measuring &&
        (e->g > x->deadline_g || (e->g == x->deadline_g && e->running))) {
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
            sim_eng_victim_touch(e, t);
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
        sim_eng_victim_touch(e, t);
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
    return sim_eng_mq_grant(e);
}
