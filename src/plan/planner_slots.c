/* The teraio planner: bandwidth slots (walk_fwd/walk_bwd reserve transfer time on the SSD and
 * PCIe channels) and the memory curve on the extended axis. See planner_teraio_impl.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "plan/planner_impl.h"
#include "plan/planner_teraio_impl.h"
#include "plan/planner_tree.h"

/* ---- slots --------------------------------------------------------------------------------- */

/* Free capacity of slot k of channel ch, in bytes of that channel's direction. */
static double slot_free(const struct planner *p, int ch, size_t k) {
    /* capacity: bytes for PCIe (rate x tau), seconds of the array's time for the shared SSD
     * slot (tau; capmul 1) */
    return (p->capmul[ch] * p->m->tau[k] - p->used[ch][k]) / p->unit[ch];
}

/* Deposit `bytes` in slot k of channel ch. */
static void slot_take(struct planner *p, int ch, size_t k, double bytes) {
    p->used[ch][k] += bytes * p->unit[ch];
}

/* x mod n for an extended kernel: almost always under 2n, where a compare beats a division. */
static inline size_t ext_mod(uint64_t x, size_t n) {
    return (size_t)(x < n ? x : (x < 2 * (uint64_t)n ? x - n : x % n));
}

/* Root of k in a path-compressed "next non-full slot" forest. fnext links a full slot k to
 * k + 1; bprev is indexed by k + 1 (0 is the sentinel "nothing before") and links to k. */
static uint32_t dsu_find(uint32_t *parent, uint32_t k) {
    uint32_t r = k;
    while (parent[r] != r) {
        r = parent[r];
    }
    while (parent[k] != r) {
        uint32_t nx = parent[k];
        parent[k] = r;
        k = nx;
    }
    return r;
}

void pt_mark_one(struct planner *p, int ch, size_t k) {
    if (slot_free(p, ch, k) < FULL_EPS) {
        if (p->fnext[ch]) {
            p->fnext[ch][k] = (uint32_t)(k + 1);
        }
        if (p->bprev[ch]) {
            p->bprev[ch][k + 1] = (uint32_t)k;
        }
    }
}

/* Mark slot k full in the "next slot with room" forests of ch (both SSD directions when ch is
 * an SSD channel: they share the slot). */
static void mark_if_full(struct planner *p, int ch, size_t k) {
    if (pt_is_ssd_ch(ch)) {
        pt_mark_one(p, TIO_CH_SSD_W, k);
        pt_mark_one(p, TIO_CH_SSD_R, k);
    } else {
        pt_mark_one(p, ch, k);
    }
}

/* The channel a transfer uses. SSD traffic crosses the GPU's PCIe link too (with or without
 * GDS: GDS removes the host bounce, not the link), but on the link's SSD share, which the PCIe
 * channels here (the host share) do not include (planner_model.c). */
static int tier_channel(int tier, int offload) {
    if (tier == TIO_TIER_SSD) {
        return offload ? TIO_CH_SSD_W : TIO_CH_SSD_R;
    }
    return offload ? TIO_CH_D2H : TIO_CH_H2D;
}

/* Take up to rem bytes from slot k of channel ch, reserving them when reserve is set. The bytes
 * taken, or -1 if the slot is full. */
static double slot_fill(struct planner *p, int ch, size_t k, double rem, int reserve) {
    double f = slot_free(p, ch, k);
    if (!(f >= FULL_EPS)) {
        return -1;
    }
    double take = TIO_MIN(f, rem);
    if (reserve) {
        slot_take(p, ch, k, take);
        mark_if_full(p, ch, k);
    }
    return take;
}

/* First extended kernel in [x, b) whose slot of channel ch has room, or NONE. */
static uint64_t free_after(struct planner *p, int ch, uint64_t x, uint64_t b) {
    size_t n = p->n;
    while (x < b) {
        size_t k = ext_mod(x, n);
        uint32_t j = dsu_find(p->fnext[ch], (uint32_t)k);
        if (j < n) {
            x += j - k;
            return x < b ? x : NONE;
        }
        x += n - k; /* nothing free until the end of the iteration */
    }
    return NONE;
}

/* Last extended kernel in [a, x) whose slot of channel ch has room, or NONE. */
static uint64_t free_before(struct planner *p, int ch, uint64_t a, uint64_t x) {
    size_t n = p->n;
    while (x > a) {
        size_t k1 = ext_mod(x - 1, n) + 1; /* DSU index of kernel x - 1 */
        uint32_t j1 = dsu_find(p->bprev[ch], (uint32_t)k1);
        if (j1 != 0) {
            x -= k1 - j1;
            return x > a ? x - 1 : NONE;
        }
        x -= k1; /* nothing free back to the start of the iteration */
    }
    return NONE;
}

/* Latency of one request to or from `tier`: it ends that long after its last byte (it does
 * not occupy the channel). */
static double tier_latency(const struct planner *p, int tier) {
    return tier == TIO_TIER_SSD ? p->m->ssd_latency_s : TIO_HW_HOST_LATENCY_S;
}

/*
 * Spread `bytes` over the free capacity of the slots of extended kernels [a, b): an offload
 * forward from a on the write channels, a prefetch backward from b - 1 on the read channels.
 * Returns the extended kernel whose slot takes the last byte (an offload's end, a prefetch's
 * start), or NONE. reserve: commit.
 */
static uint64_t
walk(struct planner *p, int tier, int offload, uint64_t a, uint64_t b, double bytes, int reserve) {
    int prim = tier_channel(tier, offload);
    double rem = bytes;
    uint64_t k = offload ? free_after(p, prim, a, b) : free_before(p, prim, a, b);
    while (k != NONE) {
        double take = slot_fill(p, prim, ext_mod(k, p->n), rem, reserve);
        if (take >= 0) {
            rem -= take;
            if (rem < FULL_EPS) {
                return k;
            }
        }
        k = offload ? free_after(p, prim, k + 1, b) : free_before(p, prim, a, k);
    }
    return NONE;
}

/* Forward walk over extended kernels [a, b): spread `bytes` over the free write capacity.
 * Returns the extended kernel j such that the transfer, its latency included, is complete
 * before kernel j + 1 starts (the last byte may move at the end of its slot), or NONE.
 * reserve: commit. */
uint64_t
pt_walk_fwd(struct planner *p, int tier, uint64_t a, uint64_t b, double bytes, int reserve) {
    uint64_t j = walk(p, tier, 1, a, b, bytes, reserve);
    double lat = tier_latency(p, tier);
    if (j == NONE || !(lat > 0)) {
        return j;
    }
    uint64_t d = j + 1; /* first kernel that starts at least lat after slot j ends */
    while (d < b && pt_ext_time(p, j + 1, d) < lat) {
        d++;
    }
    return d < b ? d - 1 : NONE;
}

/* Backward walk over extended kernels [a, b') from b' - 1 down, b' the last kernel that ends
 * at least the latency before kernel b starts: returns the extended kernel at which the
 * prefetch must start (its first byte moves there), or NONE. */
uint64_t
pt_walk_bwd(struct planner *p, int tier, uint64_t a, uint64_t b, double bytes, int reserve) {
    double lat = tier_latency(p, tier);
    uint64_t e = b; /* walk over [a, e): slot e - 1 must end lat before b starts */
    while (lat > 0 && e > a && pt_ext_time(p, e, b) < lat) {
        e--;
    }
    return walk(p, tier, 0, a, e, bytes, reserve);
}

/* ---- extended-axis helpers (a window [a, b) with b - a <= n maps to one or two pieces) ----- */

/* Shift a window that starts in the second iteration back into the first. */
static void ext_fold(size_t n, uint64_t *a, uint64_t *b) {
    if (*a >= n) {
        *a -= n;
        *b -= n;
    }
}

void pt_ext_add(struct tio_stree *t, size_t n, uint64_t a, uint64_t b, int64_t d) {
    if (a >= b) {
        return;
    }
    ext_fold(n, &a, &b);
    if (b <= n) {
        tio_stree_add(t, (size_t)a, (size_t)b, d);
    } else {
        tio_stree_add(t, (size_t)a, n, d);
        tio_stree_add(t, 0, (size_t)(b - n), d);
    }
}

int64_t pt_ext_max(struct tio_stree *t, size_t n, uint64_t a, uint64_t b) {
    if (a >= b) {
        return INT64_MIN;
    }
    ext_fold(n, &a, &b);
    if (b <= n) {
        return tio_stree_max(t, (size_t)a, (size_t)b);
    }
    int64_t x = tio_stree_max(t, (size_t)a, n), y = tio_stree_max(t, 0, (size_t)(b - n));
    return TIO_MAX(x, y);
}

void pt_host_add(struct planner *p, uint64_t a, uint64_t b, int64_t d) {
    size_t n = p->n;
    if (a >= b) {
        return;
    }
    ext_fold(n, &a, &b);
    if (b <= n) {
        tio_mtree_add(&p->host, (size_t)a, (size_t)b, d);
    } else {
        tio_mtree_add(&p->host, (size_t)a, n, d);
        tio_mtree_add(&p->host, 0, (size_t)(b - n), d);
    }
}

int pt_host_above(const struct planner *p, uint64_t a, uint64_t b, int64_t thr) {
    size_t n = p->n;
    if (a >= b) {
        return 0;
    }
    ext_fold(n, &a, &b);
    if (b <= n) {
        return tio_mtree_any_above(&p->host, (size_t)a, (size_t)b, thr);
    }
    return tio_mtree_any_above(&p->host, (size_t)a, n, thr) ||
           tio_mtree_any_above(&p->host, 0, (size_t)(b - n), thr);
}

double pt_ext_benefit(struct planner *p, uint64_t a, uint64_t b, int64_t s) {
    size_t n = p->n;
    if (a >= b) {
        return 0;
    }
    ext_fold(n, &a, &b);
    int paper = pt_is_paper(p->variant) || p->variant == TIO_VAR_G10;
    size_t l1 = (size_t)a, r1 = (size_t)TIO_MIN(b, (uint64_t)n);
    const struct tio_stree_table *tb = p->fixed;
    if (!paper && tb && !tb->by_leaf && tb->s == s) {
        return tio_stree_table_sum(&p->mem, tb, l1, r1) +
               (b > n ? tio_stree_table_sum(&p->mem, tb, 0, (size_t)(b - n)) : 0);
    }
    double r = 0;
    r += paper ? (double)s * tio_stree_crit(&p->mem, l1, r1, p->cap)
               : tio_stree_capped(&p->mem, l1, r1, p->cap, s);
    if (b > n) {
        r += paper ? (double)s * tio_stree_crit(&p->mem, 0, (size_t)(b - n), p->cap)
                   : tio_stree_capped(&p->mem, 0, (size_t)(b - n), p->cap, s);
    }
    return r;
}

/* An upper bound of every benefit a period can have: s x (time over capacity in the period).
 * Cheaper than the capped integral (only crossings of the capacity line cost anything). */
double pt_ext_bound(struct planner *p, uint64_t a, uint64_t b, int64_t s) {
    size_t n = p->n;
    if (a >= b) {
        return 0;
    }
    ext_fold(n, &a, &b);
    size_t r1 = (size_t)TIO_MIN(b, (uint64_t)n);
    const struct tio_stree_table *tb = p->fixed && p->fixed->by_leaf ? p->fixed : NULL;
    double r = tb ? tio_stree_table_sum(&p->mem, tb, (size_t)a, r1)
                  : tio_stree_crit(&p->mem, (size_t)a, r1, p->cap);
    if (b > n) {
        r += tb ? tio_stree_table_sum(&p->mem, tb, 0, (size_t)(b - n))
                : tio_stree_crit(&p->mem, 0, (size_t)(b - n), p->cap);
    }
    return (double)s * r;
}

/* Last extended kernel k in [a, b) with M'[k] > thr, or NONE. */
uint64_t pt_ext_last_above(struct planner *p, uint64_t a, uint64_t b, int64_t thr) {
    size_t n = p->n;
    if (a >= b) {
        return NONE;
    }
    uint64_t shift = 0;
    if (a >= n) {
        a -= n;
        b -= n;
        shift = n;
    }
    if (b > n) {
        size_t k = tio_stree_last_above(&p->mem, 0, (size_t)(b - n), thr);
        if (k != SIZE_MAX) {
            return k + n + shift;
        }
        b = n;
    }
    size_t k = tio_stree_last_above(&p->mem, (size_t)a, (size_t)b, thr);
    return k != SIZE_MAX ? k + shift : NONE;
}

double pt_ext_time(const struct planner *p, uint64_t a, uint64_t b) {
    size_t n = p->n;
    double it = p->tprefix[n];
    uint64_t ia = a < n ? 0 : a / n, ib = b < n ? 0 : b / n; /* whole iterations */
    double ta = (double)ia * it + p->tprefix[a - ia * n];
    double tb = (double)ib * it + p->tprefix[b - ib * n];
    return tb - ta;
}
