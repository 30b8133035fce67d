/*
 * The engine's tensor table and placement: which copy of a tensor is stored (and which write
 * is pending), and where its chunks are. Chunk c of a tensor on the SSD tier lives on swap file
 * (first + c) mod nfiles at its own extent, `first` rotating from tensor to tensor; a tensor on
 * the host tier is one extent of the host pool. Everything here runs under mu (H1).
 */
#include <errno.h>
#include <stdio.h>

#include <teraio/units.h>

#include "common/common_impl.h"
#include "io/engine_internal.h"

static size_t bucket_of(const struct tio_engine *e, uint64_t id) {
    return (size_t)(tio_hash64(TIO_HASH64_SEED, &id, sizeof id) & (e->nbuckets - 1));
}

struct tensor *tio_eng_tensor_find(struct tio_engine *e, uint64_t id) {
    for (struct tensor *t = e->buckets[bucket_of(e, id)]; t; t = t->next) {
        if (t->id == id) {
            return t;
        }
    }
    return NULL;
}

struct tensor *tio_eng_tensor_get(struct tio_engine *e, uint64_t id) {
    struct tensor *t = tio_eng_tensor_find(e, id);
    if (t) {
        return t;
    }
    if (e->ntensors + 1 > e->nbuckets) { /* rehash at load factor 1 */
        size_t nb = e->nbuckets * 2;
        struct tensor **b = tio_calloc(nb, sizeof(struct tensor *));
        if (b) {
            for (size_t i = 0; i < e->nbuckets; i++) {
                while (e->buckets[i]) {
                    struct tensor *x = e->buckets[i];
                    e->buckets[i] = x->next;
                    size_t h =
                        (size_t)(tio_hash64(TIO_HASH64_SEED, &x->id, sizeof x->id) & (nb - 1));
                    x->next = b[h];
                    b[h] = x;
                }
            }
            tio_free(e->buckets);
            e->buckets = b;
            e->nbuckets = nb;
        }
    }
    t = tio_calloc(1, sizeof(*t));
    if (!t) {
        return NULL;
    }
    t->id = id;
    size_t h = bucket_of(e, id);
    t->next = e->buckets[h];
    e->buckets[h] = t;
    e->ntensors++;
    return t;
}

/* Remove t from the table if nothing references it any more. */
void tio_eng_tensor_maybe_remove(struct tio_engine *e, struct tensor *t) {
    if (t->stored || t->pending || t->readers) {
        return;
    }
    struct tensor **pp = &e->buckets[bucket_of(e, t->id)];
    while (*pp != t) {
        pp = &(*pp)->next;
    }
    *pp = t->next;
    e->ntensors--;
    tio_free(t);
}

/* ------------------------------------------------------------------------------------------ */
/* Placement (extents)                                                                        */
/* ------------------------------------------------------------------------------------------ */

uint64_t tio_eng_chunk_len(const struct tio_engine *e, const struct placement *pl, uint32_t c) {
    uint64_t start = (uint64_t)c * e->p.chunk_bytes;
    return TIO_MIN(e->p.chunk_bytes, pl->bytes - start);
}

uint32_t tio_eng_chunk_file(const struct tio_engine *e, const struct placement *pl, uint32_t c) {
    return (uint32_t)((pl->first + (uint64_t)c) % e->nfiles);
}

void tio_eng_placement_free(struct tio_engine *e, struct placement *pl) {
    if (!pl) {
        return;
    }
    tio_eng_gpu_landing_free(e, pl); /* H8 */
    for (uint32_t c = 0; c < pl->nchunks; c++) {
        if (pl->off[c] == UINT64_MAX) {
            continue;
        }
        int rc;
        if (pl->tier == TIO_TIER_HOST) {
            rc = c == 0 ? tio_extents_free(&e->host_ext, pl->off[0], pl->bytes) : 0;
        } else {
            struct tio_swapfile *sf = &e->files[tio_eng_chunk_file(e, pl, c)];
            rc = tio_extents_free(&sf->ext, pl->off[c], tio_eng_chunk_len(e, pl, c));
        }
        TIO_ASSERT(rc == 0); /* a double free would corrupt other tensors */
    }
    tio_free(pl->off);
    tio_free(pl->crc);
    tio_free(pl);
}

/* Room needed on each directory for n chunks of the engine's chunk size (upper bound). */
static int grow_for(struct tio_engine *e, uint32_t fi, uint64_t need) {
    struct tio_swapfile *sf = &e->files[fi];
    /* grow in steps of 64 chunks (at most 1 GiB unless needed) to keep fallocate rare */
    uint64_t step = TIO_MAX(need, TIO_MIN(64 * e->p.chunk_bytes, (uint64_t)1 << 30));
    int rc = tio_swapfile_grow(sf, sf->size + step, e->p.preallocate);
    if (rc < 0 && step > need) {
        rc = tio_swapfile_grow(sf, sf->size + need, e->p.preallocate);
    }
    return rc;
}

/* Allocate a placement for `bytes` on `tier` (under mu). 0, -ENOSPC (detail), TIO_ENOMEM. */
int tio_eng_placement_new(
    struct tio_engine *e, uint64_t id, uint64_t bytes, int32_t tier, struct placement **out) {
    uint64_t nch = (bytes + e->p.chunk_bytes - 1) / e->p.chunk_bytes;
    if (nch > UINT32_MAX) {
        return tio_set_error(TIO_EINVAL, "engine: tensor %llu: too many chunks",
                             (unsigned long long)id);
    }
    struct placement *pl = tio_calloc(1, sizeof(*pl));
    if (!pl) {
        return TIO_ENOMEM;
    }
    pl->bytes = bytes;
    pl->tier = tier;
    pl->nchunks = (uint32_t)nch;
    pl->off = tio_malloc(nch * sizeof(*pl->off));
    if (e->p.verify) {
        pl->crc = tio_calloc(nch, sizeof(*pl->crc));
    }
    if (!pl->off || (e->p.verify && !pl->crc)) {
        tio_free(pl->off);
        tio_free(pl->crc);
        tio_free(pl);
        return TIO_ENOMEM;
    }
    for (uint32_t c = 0; c < pl->nchunks; c++) {
        pl->off[c] = UINT64_MAX;
    }
    int rc = 0;
    if (tier == TIO_TIER_HOST) {
        uint64_t off;
        rc = tio_extents_alloc(&e->host_ext, bytes, &off);
        if (rc < 0) {
            char a[32], b[32];
            uint64_t avail = e->host_ext.capacity - e->host_ext.used;
            rc = tio_set_error(-ENOSPC,
                               "engine: host tier full for tensor %llu: needed %s, available %s "
                               "(largest free extent %llu bytes; raise host_tier_bytes)",
                               (unsigned long long)id, tio_format_bytes(bytes, a, sizeof a),
                               tio_format_bytes(avail, b, sizeof b),
                               (unsigned long long)tio_extents_largest(&e->host_ext));
        } else {
            for (uint32_t c = 0; c < pl->nchunks; c++) {
                pl->off[c] = off + (uint64_t)c * e->p.chunk_bytes;
            }
        }
    } else {
        pl->first = e->next_dir++ % e->nfiles; /* rotate so small tensors spread too */
        for (uint32_t c = 0; c < pl->nchunks && rc >= 0; c++) {
            uint32_t fi = tio_eng_chunk_file(e, pl, c);
            uint64_t len = tio_eng_chunk_len(e, pl, c);
            rc = tio_extents_alloc(&e->files[fi].ext, len, &pl->off[c]);
            if (rc == -ENOSPC) {
                /* the rest of this tensor's chunks on this directory, at most */
                uint64_t left = (pl->nchunks - c + e->nfiles - 1) / e->nfiles;
                rc = grow_for(e, fi, TIO_MAX(left * e->p.chunk_bytes, len));
                if (rc >= 0) {
                    rc = tio_extents_alloc(&e->files[fi].ext, len, &pl->off[c]);
                }
                if (rc < 0) {
                    char detail[400];
                    (void)snprintf(detail, sizeof detail, "%s", tio_last_error());
                    rc = tio_set_error(-ENOSPC, "engine: no room for tensor %llu (%llu bytes): %s",
                                       (unsigned long long)id, (unsigned long long)bytes, detail);
                }
            }
        }
    }
    if (rc < 0) {
        tio_eng_placement_free(e, pl);
        return rc;
    }
    *out = pl;
    return 0;
}
