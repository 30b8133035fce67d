/* Bandwidth: rates of the queue heads, moving time forward, the bandwidth bins. */
#include <math.h>
#include <string.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "sim/sim_engine_impl.h"

const uint32_t sim_eng_path_mask[NPATH] = {
    [P_D2H] = 1u << TIO_SIM_PCIE_D2H,
    [P_H2D] = 1u << TIO_SIM_PCIE_H2D,
    [P_GPU_SSD] = (1u << TIO_SIM_SSD_WRITE) | (1u << TIO_SIM_PCIE_D2H),
    [P_SSD_GPU] = (1u << TIO_SIM_SSD_READ) | (1u << TIO_SIM_PCIE_H2D),
    [P_HOST_SSD] = 1u << TIO_SIM_SSD_WRITE,
    [P_SSD_HOST] = 1u << TIO_SIM_SSD_READ,
};

/* Whether x's path crosses the SSD array. */
static int on_ssd(const struct xfer *x) {
    return (sim_eng_path_mask[x->path] & ((1u << TIO_SIM_SSD_READ) | (1u << TIO_SIM_SSD_WRITE))) !=
           0;
}

/* Whether head a is served before head b: urgent first, then transfers over the SSDs (they take
 * the link's SSD share, host transfers the rest: docs/simulator.md, "Sharing"), then earliest
 * deadline (transfers without one last), then issue order: per budget the order in which
 * tio_plan_verify proves a plan's moves meet their deadlines. */
static int served_before(const struct xfer *a, const struct xfer *b) {
    if (a->urgent != b->urgent) {
        return a->urgent > b->urgent;
    }
    if (on_ssd(a) != on_ssd(b)) {
        return on_ssd(a);
    }
    return a->deadline_g < b->deadline_g || (a->deadline_g == b->deadline_g && a->seq < b->seq);
}

void sim_eng_allocate_rates(struct eng *e) {
    uint32_t heads[NQ];
    int n = 0;
    for (int q = 0; q < NQ; q++) {
        if (e->qhead[q] != NONE32) {
            uint32_t id = e->qhead[q];
            int i = n++;
            while (i > 0 && !served_before(&e->xf[heads[i - 1]], &e->xf[id])) {
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
        ssd_dirs |= sim_eng_path_mask[e->xf[heads[i]].path] & (rd | wr);
    }
    double mix = ssd_dirs == (rd | wr) ? e->ssd_mix : 1.0;
    double ssd_time = 1.0;
    for (int i = 0; i < n; i++) {
        struct xfer *x = &e->xf[heads[i]];
        double r = HUGE_VAL;
        int ssd_c = -1;
        for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
            if (sim_eng_path_mask[x->path] & (1u << c)) {
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
            if (sim_eng_path_mask[x->path] & (1u << c)) {
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

/* Whether the running kernel is slowed by the PCIe traffic (on its GPU part; a coupled
 * receive's end is its message's). */
static int kernel_paced(const struct eng *e) {
    if (!(e->slowdown > 0.0) || !e->running || e->in_cpu || e->recv_pending) {
        return 0;
    }
    uint64_t k = e->g % e->N;
    return !e->v->p2p || e->v->p2p[k] != SIM_P2P_RECV;
}

void sim_eng_kernel_pace(struct eng *e) {
    if (!kernel_paced(e)) {
        return;
    }
    /* u: the fraction of the link in use, both directions together */
    double r[TIO_SIM_CHANNEL_COUNT] = { 0 };
    for (int q = 0; q < NQ; q++) {
        uint32_t id = e->qhead[q];
        if (id == NONE32) {
            continue;
        }
        for (int c = TIO_SIM_PCIE_H2D; c <= TIO_SIM_PCIE_D2H; c++) {
            if (sim_eng_path_mask[e->xf[id].path] & (1u << c)) {
                r[c] += e->xf[id].rate;
            }
        }
    }
    double u = 0.5 * (r[TIO_SIM_PCIE_H2D] / e->bw[TIO_SIM_PCIE_H2D] +
                      r[TIO_SIM_PCIE_D2H] / e->bw[TIO_SIM_PCIE_D2H]);
    e->k_speed = 1.0 / (1.0 + e->slowdown * TIO_MIN(TIO_MAX(u, 0.0), 1.0));
    e->t_end = e->t + TIO_MAX(e->k_work, 0.0) / e->k_speed;
}

/* Move time forward to t1, moving bytes at the current rates. */
int sim_eng_advance(struct eng *e, double t1) {
    double dt = t1 - e->t;
    if (dt <= 0.0) {
        return 0;
    }
    if (kernel_paced(e)) {
        e->k_work -= dt * e->k_speed;
        if (e->measuring) {
            e->sim->r.kernel_slowdown_s += dt * (1.0 - e->k_speed);
        }
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
                if (sim_eng_path_mask[x->path] & (1u << c)) {
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
