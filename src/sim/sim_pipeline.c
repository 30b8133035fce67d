/*
 * tio_sim_run_pipeline: the stages of a pipeline simulated together (docs/simulator.md,
 * "Pipeline stages"). Each stage has its own GPU, PCIe link, SSDs and host share; they are
 * coupled by their point-to-point kernels: a receive ends once the matching send has ended, and
 * an iteration starts when every stage has finished the previous one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_impl.h"

/*
 * SIM_P2P_SEND, SIM_P2P_RECV or SIM_P2P_NONE from a kernel's name: the operator after the
 * namespace "nccl:" (the model's traces), "c10d." or "c10d::" (PyTorch's c10d operators, the
 * Offloader's traces) is send / isend or recv / recv_ / irecv (an overload may follow a dot).
 */
static int p2p_kind(const char *name) {
    static const char *const ns[] = { "nccl:", "c10d::", "c10d." };
    if (!name) {
        return SIM_P2P_NONE;
    }
    const char *op = NULL;
    for (size_t i = 0; i < TIO_ARRAY_LEN(ns); i++) {
        size_t l = strlen(ns[i]);
        if (strncmp(name, ns[i], l) == 0) {
            op = name + l;
            break;
        }
    }
    if (!op) {
        return SIM_P2P_NONE;
    }
    size_t n = strcspn(op, ".");
    static const struct {
        const char *op;
        int kind;
    } ops[] = {
        { "send", SIM_P2P_SEND },  { "isend", SIM_P2P_SEND }, { "recv", SIM_P2P_RECV },
        { "recv_", SIM_P2P_RECV }, { "irecv", SIM_P2P_RECV },
    };
    for (size_t i = 0; i < TIO_ARRAY_LEN(ops); i++) {
        if (strlen(ops[i].op) == n && strncmp(op, ops[i].op, n) == 0) {
            return ops[i].kind;
        }
    }
    return SIM_P2P_NONE;
}

/*
 * Mark stage s's sends and receives and the link of each. Link 2j carries stage j's
 * activations forward to stage j + 1, link 2j + 1 the gradients back from j + 1 to j. The first
 * stage sends forward and receives backward, the last receives forward and sends backward;
 * a stage in between tells them apart by TIO_KERNEL_BACKWARD. sends/recvs count per link.
 */
static int mark_stage(struct sim_view *v,
                      const struct tio_trace *trace,
                      size_t s,
                      size_t n,
                      size_t *sends,
                      size_t *recvs) {
    size_t N = v->n_kernels;
    v->p2p = tio_calloc(N ? N : 1, 1);
    v->p2p_link = tio_calloc(N ? N : 1, sizeof *v->p2p_link);
    if (!v->p2p || !v->p2p_link) {
        return TIO_ENOMEM;
    }
    struct tio_trace_view tv;
    tio_trace_get_view(trace, &tv);
    const char *st = tio_trace_get_meta(trace, "stage");
    if (st && strtoull(st, NULL, 10) != s) {
        return tio_set_error(TIO_EINVAL,
                             "sim: pipeline: trace %zu is stage %s of its pipeline (metadata "
                             "\"stage\"): give the traces in stage order",
                             s, st);
    }
    /* flags, where a trace has them, must agree with the stage's place */
    int flagged = 0;
    for (size_t k = 0; k < N; k++) {
        if ((tv.kernel_flags[k] & TIO_KERNEL_BACKWARD) &&
            p2p_kind(tio_trace_string(trace, tv.kernel_name[k])) != SIM_P2P_NONE) {
            flagged = 1;
        }
    }
    for (size_t k = 0; k < N; k++) {
        int kind = p2p_kind(tio_trace_string(trace, tv.kernel_name[k]));
        if (kind == SIM_P2P_NONE) {
            continue;
        }
        int bwd = (tv.kernel_flags[k] & TIO_KERNEL_BACKWARD) != 0;
        int edge_bwd = kind == SIM_P2P_SEND ? s == n - 1 : s == 0;
        int edge_fwd = kind == SIM_P2P_SEND ? s == 0 : s == n - 1;
        if (flagged && ((edge_bwd && !bwd) || (edge_fwd && bwd))) {
            return tio_set_error(TIO_EINVAL,
                                 "sim: pipeline: trace %zu, kernel %zu: a %s %s, which stage %zu "
                                 "of %zu does not have: give the traces in stage order",
                                 s, k, bwd ? "backward" : "forward",
                                 kind == SIM_P2P_SEND ? "send" : "receive", s, n);
        }
        uint32_t link;
        if (kind == SIM_P2P_SEND) {
            bwd = s == n - 1 || (s > 0 && bwd);
            link = bwd ? (uint32_t)(2 * (s - 1) + 1) : (uint32_t)(2 * s);
            sends[link]++;
        } else {
            bwd = s == 0 || (s < n - 1 && bwd);
            link = bwd ? (uint32_t)(2 * s + 1) : (uint32_t)(2 * (s - 1));
            recvs[link]++;
        }
        v->p2p[k] = (uint8_t)kind;
        v->p2p_link[k] = link;
    }
    return 0;
}

/* Every message sent is received, per iteration and link. */
static int check_links(size_t n, const size_t *sends, const size_t *recvs) {
    for (size_t j = 0; j + 1 < n; j++) {
        if (sends[2 * j] != recvs[2 * j]) {
            return tio_set_error(TIO_EINVAL,
                                 "sim: pipeline: stage %zu sends %zu activations forward per "
                                 "iteration, stage %zu receives %zu (give the stages' traces in "
                                 "stage order)",
                                 j, sends[2 * j], j + 1, recvs[2 * j]);
        }
        if (sends[2 * j + 1] != recvs[2 * j + 1]) {
            return tio_set_error(TIO_EINVAL,
                                 "sim: pipeline: stage %zu sends %zu gradients back per "
                                 "iteration, stage %zu receives %zu (give the stages' traces in "
                                 "stage order)",
                                 j + 1, sends[2 * j + 1], j, recvs[2 * j + 1]);
        }
        if (sends[2 * j] == 0 && sends[2 * j + 1] == 0) {
            return tio_set_error(TIO_EINVAL,
                                 "sim: pipeline: stages %zu and %zu exchange no messages (no "
                                 "send/recv kernels: nccl:send, c10d.send, ...)",
                                 j, j + 1);
        }
    }
    return 0;
}

/* The coupled makespan with unlimited memory: every stage's kernels at their durations. */
static int ideal_makespan(const struct tio_trace *const *traces,
                          const struct sim_group *g,
                          const struct tio_hw *hw,
                          const struct tio_sim_params *p,
                          double *out) {
    struct sim_view *const *views = g->v;
    const size_t n = g->n;
    struct sim_view iv[SIM_MAX_STAGES];
    struct sim_view *ivp[SIM_MAX_STAGES];
    struct tio_sim *is[SIM_MAX_STAGES];
    struct sim_stage_out so[SIM_MAX_STAGES];
    int rc = 0;
    size_t opened = 0;
    memset(is, 0, sizeof is);
    for (size_t i = 0; i < n; i++, opened++) {
        rc = sim_view_init(&iv[i], traces[i]);
        if (rc < 0) {
            goto out;
        }
        ivp[i] = &iv[i];
        iv[i].capacity = UINT64_MAX;
        iv[i].p2p = views[i]->p2p; /* borrowed: cleared before sim_view_fini */
        iv[i].p2p_link = views[i]->p2p_link;
        is[i] = tio_calloc(1, sizeof *is[i]);
        if (!is[i] || sim_series_alloc(is[i], iv[i].n_kernels) < 0) {
            opened++;
            rc = TIO_ENOMEM;
            goto out;
        }
        is[i]->bin_s = iv[i].ideal_s > 0 ? iv[i].ideal_s / (double)p->bins : 1.0;
    }
    struct tio_sim_params ip = *p;
    ip.record_timeline = 0;
    const struct sim_group ig = { .v = ivp, .n = n, .n_links = g->n_links, .sims = is, .out = so };
    rc = sim_engine_run_group(&ig, hw, &ip);
    if (rc >= 0) {
        *out = 0;
        for (size_t i = 0; i < n; i++) {
            *out = fmax(*out, so[i].end_s);
        }
    }
out:
    for (size_t i = 0; i < opened && i < n; i++) {
        iv[i].p2p = NULL;
        iv[i].p2p_link = NULL;
        sim_view_fini(&iv[i]);
        tio_sim_free(is[i]);
    }
    return rc;
}

int tio_sim_run_pipeline(const struct tio_trace *const *traces,
                         const struct tio_move *const *moves,
                         const size_t *n_moves,
                         size_t n_stages,
                         const struct tio_hw *hw,
                         const struct tio_sim_params *params,
                         const uint64_t *capacity_bytes,
                         struct tio_sim **out) {
    if (!traces || !hw || !out) {
        return tio_set_error(TIO_EINVAL, "sim: NULL argument");
    }
    if (n_stages < 2 || n_stages > SIM_MAX_STAGES) {
        return tio_set_error(TIO_EINVAL, "sim: pipeline of %zu stages: 2 to %d", n_stages,
                             SIM_MAX_STAGES);
    }
    for (size_t i = 0; i < n_stages; i++) {
        out[i] = NULL;
        if (!traces[i] || (n_moves && n_moves[i] && (!moves || !moves[i]))) {
            return tio_set_error(TIO_EINVAL, "sim: pipeline stage %zu: NULL trace or moves", i);
        }
    }
    struct tio_sim_params p;
    int prc = sim_params_in(params, &p);
    if (prc < 0) {
        return prc;
    }
    double t_wall = tio_now_s();
    size_t n = n_stages, n_links = 2 * (n - 1);
    struct sim_view v[SIM_MAX_STAGES];
    struct sim_view *vp[SIM_MAX_STAGES];
    struct tio_sim *sims[SIM_MAX_STAGES];
    struct sim_stage_out so[SIM_MAX_STAGES];
    size_t sends[2 * SIM_MAX_STAGES] = { 0 }, recvs[2 * SIM_MAX_STAGES] = { 0 };
    int host_oom[SIM_MAX_STAGES] = { 0 }, any_host_oom = 0;
    size_t opened = 0;
    int rc = 0;
    memset(sims, 0, sizeof sims);
    memset(so, 0, sizeof so);
    for (size_t i = 0; i < n; i++) {
        struct tio_sim_params ps = p;
        if (capacity_bytes && capacity_bytes[i]) {
            ps.capacity_bytes = capacity_bytes[i];
        }
        rc = sim_stage_open(traces[i], hw, moves ? moves[i] : NULL, n_moves ? n_moves[i] : 0, &ps,
                            &sims[i], &v[i], &host_oom[i]);
        if (rc < 0) {
            char detail[256];
            (void)snprintf(detail, sizeof detail, "%s", tio_last_error());
            rc = tio_set_error(rc, "sim: pipeline stage %zu: %s", i, detail);
            goto fail;
        }
        opened++;
        vp[i] = &v[i];
        any_host_oom |= host_oom[i];
        if (v[i].n_kernels == 0) {
            rc = tio_set_error(TIO_EINVAL, "sim: pipeline stage %zu: the trace has no kernels", i);
            goto fail;
        }
        rc = mark_stage(&v[i], traces[i], i, n, sends, recvs);
        if (rc < 0) {
            goto fail;
        }
    }
    rc = check_links(n, sends, recvs);
    if (rc < 0) {
        goto fail;
    }
    double ideal = 0;
    const struct sim_group g = { .v = vp, .n = n, .n_links = n_links, .sims = sims, .out = so };
    rc = ideal_makespan(traces, &g, hw, &p, &ideal);
    if (rc < 0) {
        goto fail;
    }
    if (!any_host_oom) {
        rc = sim_run_steady(&g, hw, &p);
        if (rc < 0) {
            goto fail;
        }
    }
    double makespan = 0;
    for (size_t i = 0; i < n; i++) {
        makespan = fmax(makespan, so[i].end_s);
    }
    for (size_t i = 0; i < n; i++) {
        struct tio_sim_result *r = &sims[i]->r;
        v[i].ideal_s = ideal;
        if (!r->oom) {
            r->iteration_s = makespan;
        }
        r->pipeline_stages = (uint32_t)n;
        r->pipeline_stage = (uint32_t)i;
        r->stage_end_s = so[i].end_s;
        r->pipeline_wait_s = so[i].wait_s + (makespan - so[i].end_s);
        sim_finish_result(sims[i], &v[i], traces[i], hw, &p);
    }
    /* one stage out of memory stops the pipeline: every stage reports it */
    for (size_t i = 0; i < n; i++) {
        if (!sims[i]->r.oom) {
            continue;
        }
        struct tio_sim_result f = sims[i]->r;
        for (size_t j = 0; j < n; j++) {
            struct tio_sim_result *r = &sims[j]->r;
            r->oom_stage = (uint32_t)i;
            if (j == i || r->oom) {
                continue;
            }
            r->oom = f.oom;
            r->oom_kernel = f.oom_kernel;
            r->oom_bytes = f.oom_bytes;
            r->oom_iteration = f.oom_iteration;
            r->iteration_s = r->fraction_of_ideal = r->tokens_per_s = 0;
            r->stall_s = r->stall_data_s = r->stall_memory_s = r->cpu_s = 0;
            r->stall_thread_s = r->kernel_slowdown_s = 0;
        }
        break;
    }
    double wall = tio_now_s() - t_wall;
    for (size_t i = 0; i < n; i++) {
        sim_view_fini(&v[i]);
        sims[i]->r.sim_wall_s = wall;
        out[i] = sims[i];
    }
    return 0;
fail:
    for (size_t i = 0; i < opened; i++) {
        sim_view_fini(&v[i]);
        tio_sim_free(sims[i]);
    }
    return rc;
}
