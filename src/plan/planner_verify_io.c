/*
 * The verifier's transfer checks (planner_verify.h, docs/planner.md "The verifier"):
 *
 * Clean copies: a CLEAN offload writes nothing, so the copy it relies on must exist: on the
 * SSDs (host copies are freed when their tensor comes back), written by an offload of the same
 * tensor that precedes it on the cyclic axis, with no use writing the tensor in between.
 *
 * Bandwidth: three budgets, each one resource served earliest deadline first, as the simulator
 * serves its queues (docs/simulator.md, "Sharing"):
 *   - the SSD array's time, shared by reads and writes: a byte read costs mix / R seconds, a
 *     byte written mix / W; W is the sustained rate when the hardware models write caches and
 *     the plan's writes spend them (more bytes per iteration than the caches drain in one, or
 *     more than they hold), else the cached rate;
 *   - the PCIe link's host share each way: the link less what the array can take of it.
 * Every move but a CLEAN offload is a job: released when its trigger kernel starts, due a
 * latency (the SSDs', or the host path's) before its deadline kernel starts. Three iterations
 * are unrolled so that wrap-around moves meet their successors. Time is continuous: within a
 * kernel the job due first is served first and may use the kernel's time only up to its due
 * time. EDF is optimal for one preemptive resource with these release times, so a miss means no
 * schedule meets every deadline. Stall moves are jobs like any other; the moves without them are
 * checked first, so that a miss is attributed to the plan's own budget ("over the bandwidth")
 * or to its stall moves ("planned beyond the bandwidth: compute waits for it").
 */
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "plan/planner_verify.h"

enum { B_SSD, B_D2H, B_H2D, B_COUNT };

struct job {
    double due, rem;
    uint64_t trig, dead; /* kernels, for the message */
    uint32_t tensor;
    int stall;
};

/* min-heap of job indices by due time */
struct jheap {
    uint32_t *a;
    size_t n;
};

static void jpush(struct jheap *h, const struct job *jobs, uint32_t j) {
    size_t i = h->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (jobs[h->a[up]].due <= jobs[j].due) {
            break;
        }
        h->a[i] = h->a[up];
        i = up;
    }
    h->a[i] = j;
}

static void jpop(struct jheap *h, const struct job *jobs) {
    uint32_t last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, b = i;
        double bd = jobs[last].due;
        if (l < h->n && jobs[h->a[l]].due < bd) {
            b = l;
            bd = jobs[h->a[l]].due;
        }
        if (r < h->n && jobs[h->a[r]].due < bd) {
            b = r;
        }
        if (b == i) {
            break;
        }
        h->a[i] = h->a[b];
        i = b;
    }
    if (h->n > 0) {
        h->a[i] = last;
    }
}

static int job_cmp(const void *x, const void *y) {
    const struct job *a = x, *b = y;
    if (a->trig != b->trig) {
        return a->trig < b->trig ? -1 : 1;
    }
    return (a->due > b->due) - (a->due < b->due);
}

static int miss(const struct tio_vmodel *m,
                const char *name,
                const struct job *j,
                double rate,
                int with_stalls) {
    size_t n = m->n;
    return tio_set_error(
        TIO_EPLAN,
        "plan: channel %s: a %s of tensor %u released at kernel %llu misses its "
        "deadline %llu by %.0f bytes (%s)",
        name, j->stall ? "stall move" : "move", j->tensor, (unsigned long long)(j->trig % n),
        (unsigned long long)(j->dead % n), j->rem * rate,
        with_stalls ? "planned beyond the bandwidth: compute waits for it" : "over the bandwidth");
}

/* EDF over the unrolled iterations on one budget of `rate` units per second (the jobs' rem is
 * in the same units); `tol`: what a job may miss by. with_stalls = 0 leaves the stall moves'
 * jobs out. `bytes_per_unit` turns a miss into bytes for the message. */
static int edf(const struct tio_vmodel *m,
               double rate,
               double tol,
               double bytes_per_unit,
               const char *name,
               const struct job *all,
               size_t n_all,
               int with_stalls) {
    struct job *jobs = tio_malloc((n_all ? n_all : 1) * sizeof *jobs);
    struct jheap h = { tio_malloc((n_all ? n_all : 1) * sizeof(uint32_t)), 0 };
    if (!jobs || !h.a) {
        tio_free(jobs);
        tio_free(h.a);
        return TIO_ENOMEM;
    }
    size_t nj = 0;
    for (size_t i = 0; i < n_all; i++) {
        if (with_stalls || !all[i].stall) {
            jobs[nj++] = all[i];
        }
    }
    qsort(jobs, nj, sizeof *jobs, job_cmp);
    size_t next = 0, kmax = 4 * m->n;
    int rc = 0;
    for (size_t k = 0; k < kmax && rc == 0 && (next < nj || h.n > 0); k++) {
        while (next < nj && jobs[next].trig <= k) {
            jpush(&h, jobs, (uint32_t)next++);
        }
        double cur = m->start_s[k], end = m->start_s[k + 1];
        while (h.n > 0 && rc == 0) {
            struct job *j = &jobs[h.a[0]];
            double stop = j->due < end ? j->due : end;
            if (stop > cur && rate > 0) {
                double take = (stop - cur) * rate;
                take = take < j->rem ? take : j->rem;
                j->rem -= take;
                cur += take / rate;
            }
            if (j->rem <= tol + 1e-9 * j->rem) {
                jpop(&h, jobs);
                continue;
            }
            if (j->due <= end) { /* its time is up with bytes left */
                rc = miss(m, name, j, bytes_per_unit, with_stalls);
            }
            break; /* the kernel's time is spent */
        }
    }
    if (rc == 0 && h.n > 0) {
        rc = miss(m, name, &jobs[h.a[0]], bytes_per_unit, with_stalls);
    }
    tio_free(jobs);
    tio_free(h.a);
    return rc;
}

int tio_vmodel_check_bandwidth(const struct tio_vmodel *m, const struct tio_plan *plan) {
    size_t nm = 0, n = m->n;
    const struct tio_move *mv = tio_plan_moves(plan, &nm);
    struct job *jobs[B_COUNT] = { NULL };
    size_t nj[B_COUNT] = { 0 };
    int rc = TIO_ENOMEM;
    for (int b = 0; b < B_COUNT; b++) {
        jobs[b] = tio_malloc((3 * nm + 1) * sizeof *jobs[b]);
        if (!jobs[b]) {
            goto out;
        }
    }
    /* the write rate: sustained once the plan's writes spend the caches */
    double written = 0;
    for (size_t i = 0; i < nm; i++) {
        if (mv[i].from == TIO_TIER_GPU && mv[i].to == TIO_TIER_SSD &&
            !(mv[i].flags & TIO_MOVE_CLEAN)) {
            written += (double)mv[i].bytes;
        }
    }
    double w = m->ssd_write_cached_Bps;
    if (m->cache_modelled &&
        (written > m->ssd_write_sustained_Bps * m->iteration_s || written >= m->cache_bytes)) {
        w = m->ssd_write_sustained_Bps;
    }
    rc = 0;
    for (size_t i = 0; i < nm && rc == 0; i++) {
        const struct tio_move *q = &mv[i];
        int off = q->from == TIO_TIER_GPU;
        int tier = off ? q->to : q->from;
        if (off && tier == TIO_TIER_SSD && (q->flags & TIO_MOVE_CLEAN)) {
            continue; /* no write */
        }
        int b;
        double amount = (double)q->bytes, lat = m->host_latency_s;
        if (tier == TIO_TIER_SSD) {
            double r = off ? w : m->ssd_read_Bps;
            if (!(r > 0)) {
                rc = tio_set_error(TIO_EPLAN,
                                   "plan: move %zu of tensor %u uses SSDs the hardware "
                                   "does not have",
                                   i, q->tensor);
                break;
            }
            b = B_SSD;
            amount *= m->ssd_mix / r; /* seconds of the array's time */
            lat = m->ssd_latency_s;
        } else {
            b = off ? B_D2H : B_H2D;
        }
        for (uint64_t r = 0; r < 3; r++) {
            uint64_t a = q->trigger + r * n, d = q->deadline + r * n;
            jobs[b][nj[b]++] = (struct job){ .due = m->start_s[d] - lat,
                                             .rem = amount,
                                             .trig = a,
                                             .dead = d,
                                             .tensor = q->tensor,
                                             .stall = (q->flags & TIO_MOVE_STALL) != 0 };
        }
    }
    static const char *const names[B_COUNT] = { "ssd", "pcie-d2h", "pcie-h2d" };
    double rate[B_COUNT] = { 1.0, m->d2h_host_Bps, m->h2d_host_Bps };
    /* 16 bytes of rounding, in each budget's unit; a miss in bytes for the message */
    double rd = m->ssd_read_Bps > 0 ? m->ssd_read_Bps : 1.0;
    double tol[B_COUNT] = { 16.0 * m->ssd_mix / rd, 16.0, 16.0 };
    double per[B_COUNT] = { rd / m->ssd_mix, 1.0, 1.0 };
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (int b = 0; b < B_COUNT && rc == 0; b++) {
            int stalls = 0;
            for (size_t i = 0; i < nj[b] && !stalls; i++) {
                stalls = jobs[b][i].stall;
            }
            if (pass == 0 || stalls) {
                rc = edf(m, rate[b], tol[b], per[b], names[b], jobs[b], nj[b], pass);
            }
        }
    }
out:
    for (int b = 0; b < B_COUNT; b++) {
        tio_free(jobs[b]);
    }
    return rc;
}

/* Is there a use writing tensor t in the kernels [a, b) of the extended axis (b - a <= n)? */
static int written_in(const struct tio_vmodel *m, uint32_t t, uint64_t a, uint64_t b) {
    size_t n = m->n;
    for (size_t u = m->uoff[t]; u < m->uoff[t + 1]; u++) {
        if (!(m->umode[u] & TIO_USE_WRITE)) {
            continue;
        }
        uint64_t p = (a / n) * n + m->uk[u]; /* its first position at or after a */
        if (p < a) {
            p += n;
        }
        if (p < b) {
            return 1;
        }
    }
    return 0;
}

int tio_vmodel_check_clean(const struct tio_vmodel *m, const struct tio_plan *plan) {
    size_t nm = 0, n = m->n;
    const struct tio_move *mv = tio_plan_moves(plan, &nm);
    /* the triggers of the written SSD offloads, by tensor (CSR; ascending, as plans are sorted
     * by trigger) */
    size_t *off = tio_calloc(m->nt + 2, sizeof *off);
    uint64_t *trig = tio_malloc((nm ? nm : 1) * sizeof *trig);
    if (!off || !trig) {
        tio_free(off);
        tio_free(trig);
        return TIO_ENOMEM;
    }
    for (size_t j = 0; j < nm; j++) {
        const struct tio_move *o = &mv[j];
        if (o->from == TIO_TIER_GPU && o->to == TIO_TIER_SSD && !(o->flags & TIO_MOVE_CLEAN)) {
            off[o->tensor + 2]++;
        }
    }
    for (size_t t = 0; t < m->nt; t++) {
        off[t + 2] += off[t + 1];
    }
    for (size_t j = 0; j < nm; j++) {
        const struct tio_move *o = &mv[j];
        if (o->from == TIO_TIER_GPU && o->to == TIO_TIER_SSD && !(o->flags & TIO_MOVE_CLEAN)) {
            trig[off[o->tensor + 1]++] = o->trigger;
        }
    }
    int rc = 0;
    for (size_t i = 0; i < nm && rc == 0; i++) {
        const struct tio_move *c = &mv[i];
        if (c->from != TIO_TIER_GPU || !(c->flags & TIO_MOVE_CLEAN)) {
            continue;
        }
        if (c->to != TIO_TIER_SSD) {
            rc = tio_set_error(TIO_EPLAN,
                               "plan: move %zu: clean offload of tensor %u to host memory (a "
                               "host copy is freed when its tensor comes back)",
                               i, c->tensor);
            break;
        }
        size_t lo = off[c->tensor], hi = off[c->tensor + 1], cnt = hi - lo;
        if (cnt == 0) {
            rc = tio_set_error(TIO_EPLAN,
                               "plan: move %zu: clean offload of tensor %u, which no offload "
                               "writes to the SSDs",
                               i, c->tensor);
            break;
        }
        /* the written offload closest before it, cyclically: the last trigger below c's, or
         * the tensor's last one (in the previous iteration) */
        size_t a = lo, b = hi;
        while (a < b) {
            size_t mid = a + (b - a) / 2;
            if (trig[mid] < c->trigger) {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        uint64_t from = a > lo ? trig[a - 1] + n : trig[hi - 1];
        uint64_t to = c->trigger + n; /* [from, to) on the extended axis */
        if (from < to && to - from < n && written_in(m, c->tensor, from, to)) {
            rc = tio_set_error(TIO_EPLAN,
                               "plan: move %zu: clean offload of tensor %u at kernel %llu, but "
                               "the tensor is written after its last offload to the SSDs (at "
                               "kernel %llu)",
                               i, c->tensor, (unsigned long long)c->trigger,
                               (unsigned long long)(from % n));
        }
    }
    tio_free(off);
    tio_free(trig);
    return rc;
}
