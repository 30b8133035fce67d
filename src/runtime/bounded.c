/* The memory table and victim policy of the steps without a plan (src/include/teraio/bounded.h).
 * Entries live in a dense array (a removal moves the last one into the hole); an open-addressing
 * index (linear probing, backward-shift deletion) maps keys to array slots. `seq` numbers entries
 * in tracking order: the tie-break of the policy and the order of tio_bounded_keys. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/bounded.h>

#include "common/common_impl.h"

struct entry {
    uint64_t key, bytes, eid, last, seq, round;
    uint32_t flags;
};

struct tio_bounded {
    struct tio_bounded_params p;
    struct entry *ent;
    size_t n, cap;
    uint32_t *index; /* slot + 1; 0 = empty */
    size_t nindex;   /* power of two, > 2 * n */
    uint64_t seq, round;
    struct tio_bounded_stats st;
    uint64_t *reads;
    size_t nreads, capreads;
    struct cand *cands;
    size_t capcands;
};

struct cand {
    uint64_t cls, order, seq;
    size_t slot;
};

struct tio_bounded_params tio_bounded_params_default(void) {
    return (struct tio_bounded_params){ .min_bytes = 1, .grace = 32 };
}

int tio_bounded_new(const struct tio_bounded_params *params, struct tio_bounded **out) {
    *out = NULL;
    struct tio_bounded *tb = tio_calloc(1, sizeof *tb);
    if (!tb) {
        return TIO_ENOMEM;
    }
    tb->p = params ? *params : tio_bounded_params_default();
    if (tb->p.min_bytes == 0) {
        tb->p.min_bytes = 1;
    }
    *out = tb;
    return 0;
}

void tio_bounded_free(struct tio_bounded *tb) {
    if (!tb) {
        return;
    }
    tio_free(tb->ent);
    tio_free(tb->index);
    tio_free(tb->reads);
    tio_free(tb->cands);
    tio_free(tb);
}

static size_t home(const struct tio_bounded *tb, uint64_t key) {
    return (size_t)(tio_hash64(TIO_HASH64_SEED, &key, sizeof key) & (tb->nindex - 1));
}

/* The index position of key, or of the empty place where it would go. */
static size_t probe(const struct tio_bounded *tb, uint64_t key) {
    size_t i = home(tb, key);
    while (tb->index[i] && tb->ent[tb->index[i] - 1].key != key) {
        i = (i + 1) & (tb->nindex - 1);
    }
    return i;
}

static struct entry *find(const struct tio_bounded *tb, uint64_t key) {
    if (!tb->nindex) {
        return NULL;
    }
    uint32_t s = tb->index[probe(tb, key)];
    return s ? &tb->ent[s - 1] : NULL;
}

static int reindex(struct tio_bounded *tb, size_t nindex) {
    uint32_t *idx = tio_calloc(nindex, sizeof *idx);
    if (!idx) {
        return TIO_ENOMEM;
    }
    tio_free(tb->index);
    tb->index = idx;
    tb->nindex = nindex;
    for (size_t s = 0; s < tb->n; s++) {
        tb->index[probe(tb, tb->ent[s].key)] = (uint32_t)(s + 1);
    }
    return 0;
}

static int
insert(struct tio_bounded *tb, uint64_t key, uint64_t bytes, uint32_t flags, struct entry **out) {
    if (key == 0) {
        (void)tio_set_error(TIO_EINVAL, "bounded: key 0 is reserved");
        return TIO_EINVAL;
    }
    if (tb->n + 1 > UINT32_MAX - 1) {
        (void)tio_set_error(TIO_ENOMEM, "bounded: more than 2^32 entries");
        return TIO_ENOMEM;
    }
    int rc = tio_grow((void **)&tb->ent, &tb->cap, tb->n + 1, sizeof *tb->ent);
    if (rc < 0) {
        return rc;
    }
    if (2 * (tb->n + 1) > tb->nindex) {
        rc = reindex(tb, tb->nindex ? 2 * tb->nindex : 64);
        if (rc < 0) {
            return rc;
        }
    }
    struct entry *e = &tb->ent[tb->n];
    *e = (struct entry){
        .key = key, .bytes = bytes, .last = tb->st.clock, .seq = tb->seq++, .flags = flags
    };
    tb->index[probe(tb, key)] = (uint32_t)(++tb->n);
    tb->st.live += bytes;
    if (flags & TIO_BOUNDED_RESIDENT) {
        tb->st.resident += bytes;
    }
    tb->st.peak_live = TIO_MAX(tb->st.peak_live, tb->st.live);
    *out = e;
    return 0;
}

/* Remove the index position i (backward shift: no tombstones). */
static void unindex(struct tio_bounded *tb, size_t i) {
    size_t mask = tb->nindex - 1;
    size_t j = i;
    tb->index[i] = 0;
    for (;;) {
        j = (j + 1) & mask;
        if (!tb->index[j]) {
            return;
        }
        size_t h = home(tb, tb->ent[tb->index[j] - 1].key);
        /* move j to the hole i unless its home lies cyclically in (i, j] */
        if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
            tb->index[i] = tb->index[j];
            tb->index[j] = 0;
            i = j;
        }
    }
}

static void erase(struct tio_bounded *tb, struct entry *e) {
    tb->st.live -= e->bytes;
    if (e->flags & TIO_BOUNDED_RESIDENT) {
        tb->st.resident -= e->bytes;
    }
    unindex(tb, probe(tb, e->key));
    size_t last = tb->n - 1;
    size_t s = (size_t)(e - tb->ent);
    if (s != last) {
        tb->ent[s] = tb->ent[last];
        tb->index[probe(tb, tb->ent[s].key)] = (uint32_t)(s + 1);
    }
    tb->n--;
}

void tio_bounded_begin_op(struct tio_bounded *tb) {
    tb->st.clock++;
    tb->st.op_input_max = tb->st.op_made = tb->st.op_read_bytes = 0;
    tb->nreads = 0;
}

static int track(struct tio_bounded *tb, uint64_t key, uint64_t bytes, struct entry **out) {
    *out = find(tb, key);
    if (*out) {
        return TIO_BOUNDED_TRACKED;
    }
    if (bytes < tb->p.min_bytes) {
        return 0;
    }
    int rc = insert(tb, key, bytes, TIO_BOUNDED_RESIDENT, out);
    return rc < 0 ? rc : TIO_BOUNDED_TRACKED | TIO_BOUNDED_CREATED;
}

int tio_bounded_track(struct tio_bounded *tb, uint64_t key, uint64_t bytes) {
    struct entry *e;
    return track(tb, key, bytes, &e);
}

int tio_bounded_use(struct tio_bounded *tb, uint64_t key, uint64_t bytes, uint32_t how) {
    struct entry *e;
    int rc = track(tb, key, bytes, &e);
    if (rc <= 0) {
        return rc;
    }
    if (how & TIO_BOUNDED_USE_COMM) {
        e->flags |= TIO_BOUNDED_FIXED;
    }
    if (how & TIO_BOUNDED_USE_OUTPUT) {
        if (rc & TIO_BOUNDED_CREATED) {
            tb->st.op_made += e->bytes;
        }
        how |= TIO_BOUNDED_USE_WRITE;
    } else {
        int first = (rc & TIO_BOUNDED_CREATED) || e->last != tb->st.clock;
        if (first && !(e->flags & TIO_BOUNDED_RESIDENT) &&
            (!(e->flags & TIO_BOUNDED_FIXED) || (how & TIO_BOUNDED_USE_COMM))) {
            int g = tio_grow((void **)&tb->reads, &tb->capreads, tb->nreads + 1, sizeof *tb->reads);
            if (g < 0) {
                return g;
            }
            tb->reads[tb->nreads++] = key;
            tb->st.op_read_bytes += e->bytes;
        }
        if (!(e->flags & TIO_BOUNDED_GLOBAL)) {
            tb->st.op_input_max = TIO_MAX(tb->st.op_input_max, e->bytes);
        }
    }
    e->last = tb->st.clock;
    if (how & TIO_BOUNDED_USE_WRITE) {
        e->flags &= ~(uint32_t)TIO_BOUNDED_CLEAN;
    }
    if (how & TIO_BOUNDED_USE_OPTIM) {
        e->flags |= TIO_BOUNDED_OPTIM_USED;
    }
    return rc;
}

size_t tio_bounded_op_reads(const struct tio_bounded *tb, const uint64_t **keys) {
    *keys = tb->reads;
    return tb->nreads;
}

static int cand_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->cls != y->cls) {
        return x->cls < y->cls ? -1 : 1;
    }
    if (x->order != y->order) {
        return x->order < y->order ? -1 : 1;
    }
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A candidate's place: class first, then `order` ascending (UINT64_MAX - last: most recent
 * first). */
static struct cand rank(const struct tio_bounded *tb, const struct entry *e, int in_optim) {
    struct cand c = { .seq = e->seq, .slot = (size_t)(e - tb->ent) };
    if (!in_optim) {
        c.cls = e->flags & TIO_BOUNDED_OPTIM_STATE ? 0 : 1;
        c.order = e->last;
    } else if (!(e->flags & TIO_BOUNDED_OPTIM_USED)) {
        c.cls = 1;
        c.order = e->last;
    } else {
        /* done with: used by the optimizer, not in its last `grace` operators */
        int done = e->last < tb->st.clock && tb->st.clock - e->last > tb->p.grace;
        c.cls = done ? 0 : 2;
        c.order = UINT64_MAX - e->last;
    }
    return c;
}

int tio_bounded_pick(
    struct tio_bounded *tb, uint64_t budget, int in_optim, int more, uint64_t *keys, size_t cap) {
    if (!more) {
        tb->round++;
    }
    if (tb->st.resident <= budget || cap == 0) {
        return 0;
    }
    int rc = tio_grow((void **)&tb->cands, &tb->capcands, tb->n, sizeof *tb->cands);
    if (rc < 0) {
        return rc;
    }
    cap = TIO_MIN(cap, (size_t)INT_MAX);
    size_t nc = 0;
    for (size_t s = 0; s < tb->n; s++) {
        const struct entry *e = &tb->ent[s];
        if ((e->flags & (TIO_BOUNDED_RESIDENT | TIO_BOUNDED_FIXED)) != TIO_BOUNDED_RESIDENT ||
            e->last == tb->st.clock || e->round == tb->round) {
            continue;
        }
        tb->cands[nc++] = rank(tb, e, in_optim);
    }
    qsort(tb->cands, nc, sizeof *tb->cands, cand_cmp);
    uint64_t resident = tb->st.resident;
    size_t n = 0;
    for (size_t i = 0; i < nc && n < cap && resident > budget; i++) {
        struct entry *e = &tb->ent[tb->cands[i].slot];
        e->round = tb->round;
        keys[n++] = e->key;
        resident -= TIO_MIN(resident, e->bytes);
    }
    return (int)n;
}

static int entry_of(const struct tio_bounded *tb, uint64_t key, struct entry **out) {
    *out = find(tb, key);
    if (!*out) {
        (void)tio_set_error(TIO_ENOTFOUND, "bounded: key %#llx is not tracked",
                            (unsigned long long)key);
        return TIO_ENOTFOUND;
    }
    return 0;
}

int tio_bounded_get(const struct tio_bounded *tb, uint64_t key, struct tio_bounded_entry *out) {
    struct entry *e;
    int rc = entry_of(tb, key, &e);
    if (rc == 0) {
        *out = (struct tio_bounded_entry){
            .key = e->key, .bytes = e->bytes, .eid = e->eid, .last = e->last, .flags = e->flags
        };
    }
    return rc;
}

/* The entry of key when (flags & mask) == want, else TIO_ENOTFOUND / TIO_ESTATE. */
static int entry_in(const struct tio_bounded *tb,
                    uint64_t key,
                    uint32_t mask,
                    uint32_t want,
                    const char *what,
                    struct entry **out) {
    int rc = entry_of(tb, key, out);
    if (rc == 0 && ((*out)->flags & mask) != want) {
        (void)tio_set_error(TIO_ESTATE, "bounded: %s: key %#llx has flags %#x", what,
                            (unsigned long long)key, (unsigned)(*out)->flags);
        return TIO_ESTATE;
    }
    return rc;
}

int tio_bounded_offloaded(struct tio_bounded *tb, uint64_t key, uint64_t eid) {
    struct entry *e;
    int rc = entry_in(tb, key, TIO_BOUNDED_RESIDENT, TIO_BOUNDED_RESIDENT, "offloaded", &e);
    if (rc == 0) {
        e->eid = eid;
        e->flags =
            (e->flags & ~(uint32_t)TIO_BOUNDED_RESIDENT) | TIO_BOUNDED_STORED | TIO_BOUNDED_CLEAN;
        tb->st.resident -= e->bytes;
    }
    return rc;
}

int tio_bounded_loaded(struct tio_bounded *tb, uint64_t key) {
    struct entry *e;
    int rc = entry_in(tb, key, TIO_BOUNDED_RESIDENT, 0, "loaded", &e);
    if (rc == 0) {
        e->flags |= TIO_BOUNDED_RESIDENT;
        tb->st.resident += e->bytes;
    }
    return rc;
}

int tio_bounded_pin(struct tio_bounded *tb, uint64_t key) {
    struct entry *e;
    int rc = entry_in(tb, key, TIO_BOUNDED_RESIDENT, TIO_BOUNDED_RESIDENT, "pin", &e);
    if (rc == 0) {
        e->flags =
            (e->flags & ~(uint32_t)(TIO_BOUNDED_STORED | TIO_BOUNDED_CLEAN)) | TIO_BOUNDED_FIXED;
    }
    return rc;
}

int tio_bounded_resize(struct tio_bounded *tb, uint64_t key, uint64_t bytes) {
    struct entry *e;
    int rc = entry_in(tb, key, TIO_BOUNDED_RESIDENT, TIO_BOUNDED_RESIDENT, "resize", &e);
    if (rc == 0) {
        tb->st.live = tb->st.live - e->bytes + bytes;
        tb->st.resident = tb->st.resident - e->bytes + bytes;
        e->bytes = bytes;
        e->flags =
            bytes == 0 ? e->flags | TIO_BOUNDED_FIXED : e->flags & ~(uint32_t)TIO_BOUNDED_FIXED;
    }
    return rc;
}

int tio_bounded_set_global(struct tio_bounded *tb, uint64_t key, int optim_state) {
    struct entry *e;
    int rc = entry_of(tb, key, &e);
    if (rc == 0) {
        e->flags |= TIO_BOUNDED_GLOBAL | (optim_state ? TIO_BOUNDED_OPTIM_STATE : 0);
    }
    return rc;
}

int tio_bounded_remove(struct tio_bounded *tb, uint64_t key, int *stored, uint64_t *eid) {
    struct entry *e;
    int rc = entry_of(tb, key, &e);
    *stored = 0;
    if (rc == 0) {
        *stored = (e->flags & TIO_BOUNDED_STORED) != 0;
        *eid = e->eid;
        erase(tb, e);
    }
    return rc;
}

int tio_bounded_adopt(
    struct tio_bounded *tb, uint64_t key, uint64_t bytes, uint64_t eid, int resident, int global) {
    if (find(tb, key)) {
        return tio_set_error(TIO_ESTATE, "bounded: adopt: key %#llx is tracked already",
                             (unsigned long long)key);
    }
    struct entry *e;
    uint32_t flags = TIO_BOUNDED_STORED | TIO_BOUNDED_CLEAN |
                     (resident ? TIO_BOUNDED_RESIDENT : 0) | (global ? TIO_BOUNDED_GLOBAL : 0);
    int rc = insert(tb, key, bytes, flags, &e);
    if (rc == 0) {
        e->eid = eid;
    }
    return rc;
}

void tio_bounded_begin_step(struct tio_bounded *tb) {
    for (size_t s = 0; s < tb->n; s++) {
        tb->ent[s].flags &= ~(uint32_t)TIO_BOUNDED_OPTIM_USED;
    }
}

void tio_bounded_mark_peak(struct tio_bounded *tb) {
    tb->st.peak_resident = TIO_MAX(tb->st.peak_resident, tb->st.resident);
}

void tio_bounded_clear(struct tio_bounded *tb) {
    tb->n = 0;
    tb->nreads = 0;
    if (tb->index) {
        memset(tb->index, 0, tb->nindex * sizeof *tb->index);
    }
    tb->st.resident = tb->st.live = 0;
}

size_t tio_bounded_count(const struct tio_bounded *tb) {
    return tb->n;
}

static int seq_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int tio_bounded_keys(struct tio_bounded *tb, uint64_t *keys, size_t cap) {
    int rc = tio_grow((void **)&tb->cands, &tb->capcands, tb->n, sizeof *tb->cands);
    if (rc < 0) {
        return rc;
    }
    for (size_t s = 0; s < tb->n; s++) {
        tb->cands[s] = (struct cand){ .seq = tb->ent[s].seq, .slot = s };
    }
    qsort(tb->cands, tb->n, sizeof *tb->cands, seq_cmp);
    size_t n = TIO_MIN(TIO_MIN(cap, tb->n), (size_t)INT_MAX);
    for (size_t i = 0; i < n; i++) {
        keys[i] = tb->ent[tb->cands[i].slot].key;
    }
    return (int)n;
}

void tio_bounded_get_stats(const struct tio_bounded *tb, struct tio_bounded_stats *out) {
    *out = tb->st;
}
