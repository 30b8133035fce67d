/* The engine's loop: init, the next event, handling events, the group run (sim_engine_impl.h). */
#include <math.h>
#include <string.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_engine_impl.h"

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
    /* software costs (docs/simulator.md, "Software costs") */
    double launch = sim_hw_cost(hw, offsetof(struct tio_hw, kernel_launch_s));
    double executor = sim_hw_cost(hw, offsetof(struct tio_hw, kernel_executor_s));
    e->c_kernel = (v->launch_cost ? launch : 0.0) + (v->executor_cost ? executor : 0.0);
    e->c_move = v->executor_cost ? sim_hw_cost(hw, offsetof(struct tio_hw, move_issue_s)) : 0.0;
    e->slowdown =
        v->launch_cost ? sim_hw_cost(hw, offsetof(struct tio_hw, kernel_io_slowdown)) : 0.0;
    e->k_speed = 1.0;
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
    int rc = sim_eng_victims_init(e);
    if (rc < 0) {
        return rc;
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
            sim_eng_victim_touch(e, (uint32_t)t);
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
enum { EV_NONE = 0, EV_CPU, EV_KERNEL, EV_DATA, EV_LAT, EV_CACHE, EV_THREAD };

/*
 * Find the earliest pending event. process_events() handles this event whatever the rounding of
 * the clock: at large times (a double's spacing is 3.6e-12 s at 2^14 s) a short transfer's end
 * rounds to the current time, and a test "is it done?" on the remaining bytes would never
 * become true. So every step handles at least one event, and the number of steps is bounded
 * by the number of events, which the trace bounds (step_budget()).
 */
static struct event next_event(const struct eng *e) {
    struct event ev = { .t = HUGE_VAL, .kind = EV_NONE, .id = NONE32 };
    if (e->running) {
        ev.t = e->in_cpu ? e->t_cpu_end : e->t_end;
        ev.kind = e->in_cpu ? EV_CPU : EV_KERNEL;
    } else if (e->host_wait) {
        ev.t = e->host_t; /* the training thread issues the moves or launches the kernel */
        ev.kind = EV_THREAD;
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
            if (id != NONE32 && (sim_eng_path_mask[e->xf[id].path] & (1u << TIO_SIM_SSD_WRITE))) {
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
            sim_eng_q_remove(e, id);
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
            rc = sim_eng_xfer_complete(e, id);
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
        rc = sim_eng_end_kernel(e);
        if (rc < 0) {
            return rc;
        }
        rc = sim_eng_mq_grant(e);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/*
 * An upper bound on the engine's steps, from the trace alone. Each step handles at least one
 * event (process_events), and the events are: per kernel run, the end of its host part, its
 * end and the training thread's issue of its moves and its launch; per transfer, its data and its
 * latency. Transfers per iteration: the plan's moves, one demand fetch per use, and evictions,
 * which need a tensor on the GPU (a birth at a use, an arrival of a fetch, a global at start, an
 * offload kept). So a run of I iterations has fewer than 2 I N + 2 (4 I (moves + uses) + tensors)
 * events; the budget doubles that. Exceeding it means an engine bug, reported as an error instead
 * of a hang.
 */
static uint64_t step_budget(const struct eng *e) {
    const struct sim_view *v = e->v;
    uint64_t iters = e->total / (e->N ? e->N : 1);
    uint64_t uses = v->use_offset[v->n_kernels];
    uint64_t xfers = 4 * iters * ((uint64_t)v->n_moves + uses) + (uint64_t)v->n_tensors;
    /* per kernel: its host part, its end and two waits for the training thread */
    uint64_t events = 4 * e->total + 2 * xfers;
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
    sim_eng_victims_fini(e);
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
        sim_eng_set_oom(e, 0);
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
            sim_eng_pipe_receive(e);
            if (!e->running) {
                int rc = sim_eng_try_start(e);
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
        double t = HUGE_VAL;
        for (size_t i = 0; i < n; i++) {
            struct eng *e = &grp->e[i];
            evs[i].t = HUGE_VAL;
            evs[i].kind = EV_NONE;
            if (e->g >= e->total) {
                continue;
            }
            sim_eng_allocate_rates(e);
            sim_eng_kernel_pace(e);
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
            int rc = sim_eng_advance(e, t);
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

int sim_engine_run_group(const struct sim_group *g,
                         const struct tio_hw *hw,
                         const struct tio_sim_params *p) {
    struct sim_view *const *v = g->v;
    struct tio_sim *const *sims = g->sims;
    struct sim_stage_out *out = g->out;
    const size_t n = g->n, n_links = g->n_links;
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
