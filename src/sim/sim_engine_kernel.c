/* The compute stream: issuing the plan's moves, starting and ending kernels, evictions, pipeline
 * messages. */
#include <math.h>
#include <string.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_engine_impl.h"

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
                rc = sim_eng_fetch(e, t, urgent, dl);
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
                rc = sim_eng_offload(e, t, m->to, (m->flags & TIO_MOVE_CLEAN) != 0, urgent, dl);
            } else if (s->state == ST_OFFLOADING && s->keep) {
                rekeep_offload(e, t, m);
            } else if (e->measuring) {
                e->sim->r.n_moves_skipped++;
            }
        } else { /* host <-> ssd */
            if (s->state == ST_OFF && s->tier == m->from) {
                rc = sim_eng_xfer_start(e, t, m->to == TIO_TIER_SSD ? P_HOST_SSD : P_SSD_HOST,
                                        m->from, m->to, urgent, dl);
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

void sim_eng_set_oom(struct eng *e, uint64_t need) {
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
void sim_eng_pipe_receive(struct eng *e) {
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

/* Coupled stages: an iteration starts when every stage has finished the previous one. Returns 1
 * while kernel 0 of e's next iteration must wait for them. */
static int wait_barrier(struct eng *e) {
    uint64_t it = e->g / e->N;
    for (size_t i = 0; i < e->grp->n; i++) {
        const struct eng *o = &e->grp->e[i];
        if (o->N > 0 && o->g / o->N < it) {
            e->at_barrier = 1;
            return 1;
        }
    }
    if (e->at_barrier) { /* the wait lies between iterations: not a stall of kernel 0 */
        e->at_barrier = 0;
        e->t_ready = e->t;
    }
    return 0;
}

/* Once per kernel g: start measuring at the measured iteration, issue the moves it triggers. */
static int begin_kernel(struct eng *e, uint64_t k) {
    if (e->issued_g == e->g) {
        return 0;
    }
    if (k == 0) {
        e->move_pos = 0;
        if (e->g == e->g0) {
            e->measuring = 1;
            e->t0 = e->t;
            e->cache_level_meas = e->cache_level;
            sim_eng_note_gpu(e);
            sim_eng_note_host(e);
        }
    }
    e->issued_g = e->g;
    return issue_moves(e, k, e->g - k);
}

/* What kernel k needs before it can start: the bytes of the tensors it creates (*births) and of
 * those queued for memory (*queued); *wait_data = 1 when a tensor is not on the GPU yet (its
 * fetch is promoted, moved to the front of the queue or started on demand). */
static int
claim_uses(struct eng *e, uint64_t k, uint64_t *births, uint64_t *queued, int *wait_data) {
    int executor = e->v->executor_cost;
    const struct sim_view *v = e->v;
    uint64_t stamp = e->g + 1;
    if (v->skip_uses[k]) {
        return 0;
    }
    for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1]; u++) {
        uint32_t t = v->use_tensor[u];
        if (v->tflags[t] & SV_EXTERNAL) {
            continue;
        }
        struct tstate *s = &e->ts[t];
        s->stamp = stamp;
        switch (s->state) {
        case ST_DEAD:
            *births += v->bytes[t];
            break;
        case ST_OFFLOADING:
            s->keep = 1;
            break;
        case ST_PREFETCHING:
            sim_eng_promote(e, s->xfer);
            *wait_data = 1;
            /* the executor's thread waits for a read from the SSDs; one from host memory is
             * queued at once and the compute stream waits for it (stream order) */
            e->thread_waits |= !executor || e->xf[s->xfer].path == P_SSD_GPU;
            break;
        case ST_QUEUED:
            sim_eng_mq_front(e, t);
            *queued += v->bytes[t];
            *wait_data = 1;
            e->thread_waits = 1; /* it waits for the memory to bring it back into */
            break;
        case ST_OFF: {
            if (v->tflags[t] & SV_FRESH) {
                *births += v->bytes[t]; /* re-created by this use: no need to fetch it */
                break;
            }
            if (e->measuring) {
                e->sim->r.n_demand_fetches++;
            }
            int rc = sim_eng_fetch(e, t, 1, e->g);
            if (rc < 0) {
                return rc;
            }
            if (s->state == ST_QUEUED) {
                *queued += v->bytes[t];
            }
            *wait_data = 1;
            e->thread_waits |= !executor || s->state == ST_QUEUED || s->tier == TIO_TIER_SSD;
            break;
        }
        default: /* ST_GPU: in place */
            break;
        }
    }
    return 0;
}

/* With eviction on demand: evict idle tensors until kernel k's *need bytes fit; *need is
 * recounted when the queued fetches may have started meanwhile. */
static int make_room(struct eng *e, uint64_t k, uint64_t births, uint64_t queued, uint64_t *need) {
    const struct sim_view *v = e->v;
    int rc = sim_eng_evict(e, *need);
    if (rc < 0) {
        return rc;
    }
    rc = sim_eng_mq_grant(e); /* clean evictions free memory at once */
    if (rc < 0) {
        return rc;
    }
    if (queued && e->gpu_used + births <= v->capacity) {
        *need = births;
        for (uint64_t u = v->use_offset[k]; u < v->use_offset[k + 1]; u++) {
            uint32_t t = v->use_tensor[u];
            if (!(v->tflags[t] & SV_EXTERNAL) && e->ts[t].state == ST_QUEUED) {
                *need += v->bytes[t];
            }
        }
    }
    return 0;
}

/* Kernel k starts: allocate the tensors it creates, record its stall, set its end. */
static void start_kernel(struct eng *e, uint64_t k) {
    const struct sim_view *v = e->v;
    for (uint64_t u = v->use_offset[k]; !v->skip_uses[k] && u < v->use_offset[k + 1]; u++) {
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
        sim_eng_victim_used(e, t, u);
    }
    sim_eng_note_gpu(e);
    double stall = e->t - e->t_ready;
    if (e->measuring) {
        struct tio_sim_result *r = &e->sim->r;
        double thread = TIO_MIN(e->thread_stall, stall);
        r->stall_s += stall;
        r->stall_thread_s += thread;
        if (e->stall_kind == 1) {
            r->stall_data_s += stall - thread;
        } else if (e->stall_kind == 2) {
            r->stall_memory_s += stall - thread;
        }
        e->sim->k_stall_s[k] = stall;
        e->sim->k_start_s[k] = e->t - e->t0;
        e->sim->k_gpu[k] = e->gpu_used;
    }
    e->stall_kind = 0;
    e->thread_stall = 0;
    e->running = 1;
    e->in_cpu = v->cpu_s[k] > 0.0;
    e->t_cpu_end = e->t + v->cpu_s[k];
    e->t_end = e->t_cpu_end + v->dur_s[k];
    e->k_work = v->dur_s[k];
    e->k_speed = 1.0;
    if (v->p2p && v->p2p[k] == SIM_P2P_RECV) {
        /* ends when its message has arrived: sim_eng_pipe_receive() sets the end */
        e->recv_pending = 1;
        e->recv_link = v->p2p_link[k];
        e->recv_t0 = e->t_cpu_end;
        e->t_end = HUGE_VAL;
        sim_eng_pipe_receive(e);
    }
}

/*
 * The training thread (docs/simulator.md, "Software costs"). It issues kernel k's moves (c_move
 * each), then launches k (c_kernel); the kernel starts no earlier than its launch, its moves no
 * earlier than their issue. The thread runs ahead of the GPU, except that it starts each
 * iteration with the GPU (the step's end is a synchronisation) and, where it waited for kernel
 * k's data or memory itself, launches k only once the wait is over.
 *
 * thread_moves_issued: 1 once the thread has issued kernel k's moves (the stream may then issue
 * them), else 0 with the stream waiting for the thread.
 */
static int thread_moves_issued(struct eng *e, uint64_t k) {
    const struct sim_view *v = e->v;
    if (e->c_kernel <= 0.0 && e->c_move <= 0.0) {
        return 1;
    }
    if (!e->thread_set) {
        size_t n = 0;
        for (size_t i = k == 0 ? 0 : e->move_pos; i < v->n_moves && v->moves[i].trigger == k; i++) {
            n++;
        }
        double h = k == 0 ? TIO_MAX(e->h, e->t) : e->h;
        e->h_moves = h + (double)n * e->c_move;
        e->thread_set = 1;
        e->launch_set = 0;
        e->thread_waits = 0;
        e->thread_stall = 0;
    }
    if (e->t < e->h_moves) {
        e->host_wait = 1;
        e->host_t = e->h_moves;
        return 0;
    }
    /* until h_moves the stream waited for nothing else (this comes first) */
    e->thread_stall += TIO_MAX(0.0, e->h_moves - e->t_ready);
    return 1;
}

/* thread_launched: 1 once the thread has launched kernel g (its data and memory are in place),
 * else 0 with the stream waiting for the thread. */
static int thread_launched(struct eng *e) {
    if (e->c_kernel <= 0.0 && e->c_move <= 0.0) {
        return 1;
    }
    if (!e->launch_set) {
        double h = e->thread_waits ? TIO_MAX(e->h_moves, e->t) : e->h_moves;
        e->h_launch = h + e->c_kernel;
        e->t_ok = e->t;
        e->launch_set = 1;
    }
    if (e->t < e->h_launch) {
        e->host_wait = 1;
        e->host_t = e->h_launch;
        return 0;
    }
    e->thread_stall += TIO_MAX(0.0, e->h_launch - TIO_MAX(e->t_ok, e->t_ready));
    e->h = e->h_launch;
    e->thread_set = 0;
    return 1;
}

/* Try to start kernel g. Returns <0 error, else 0 (e->running tells whether it started). */
int sim_eng_try_start(struct eng *e) {
    const struct sim_view *v = e->v;
    uint64_t k = e->g % e->N;
    e->host_wait = 0; /* armed again below while the stream waits for the thread */
    if (k == 0 && e->grp->n > 1 && e->g > 0 && wait_barrier(e)) {
        return 0;
    }
    if (e->issued_g != e->g && !thread_moves_issued(e, k)) {
        return 0;
    }
    int rc = begin_kernel(e, k);
    if (rc < 0) {
        return rc;
    }
    uint64_t births = 0, queued = 0;
    int wait_data = 0;
    rc = claim_uses(e, k, &births, &queued, &wait_data);
    if (rc < 0) {
        return rc;
    }
    uint64_t need = births + queued;
    int evicts = v->lru || v->demand_evict;
    if (e->gpu_used + need > v->capacity && evicts) {
        rc = make_room(e, k, births, queued, &need);
        if (rc < 0) {
            return rc;
        }
    }
    if (e->gpu_used + need > v->capacity) {
        /* nothing in flight can free memory; without eviction only an offload can, with it a
         * prefetch in flight will land and become evictable */
        if ((e->offload_inflight == 0 && e->n_active == 0) ||
            (e->offload_inflight == 0 && !wait_data && !evicts)) {
            sim_eng_set_oom(e, need);
            return 0;
        }
        e->stall_kind = wait_data ? 1 : 2;
        e->thread_waits = 1; /* the executor waits for memory under its budget */
        return sim_eng_mq_grant(e);
    }
    if (wait_data) {
        e->stall_kind = 1;
        return sim_eng_mq_grant(e); /* a needed fetch moved to the front may fit now */
    }
    if (!thread_launched(e)) {
        return 0;
    }
    start_kernel(e, k);
    return 0;
}

int sim_eng_end_kernel(struct eng *e) {
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
                sim_eng_victim_remove(e, t);
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
