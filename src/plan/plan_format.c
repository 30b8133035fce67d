/*
 * Plan files: binary (.plan) and JSON (docs/planner.md, "Plan format").
 *
 * Binary, little-endian:
 *   0   magic "TIOPLAN\0" (8)        8  u32 version (2)          12 u32 header bytes (208)
 *   16  u64 trace_hash               24 u64 n_kernels            32 u64 n_moves
 *   40  char policy[64] (NUL-padded)
 *   104 summary: u64 n_moves, n_offloads, i64 feasible, f64 planning_seconds, u64 capacity,
 *       planned_peak, shortfall_bytes, shortfall_kernel, host_peak, ssd_peak, bytes_to_ssd,
 *       bytes_to_host (12 x 8 = 96)   -> ends at 200
 *   200 u32 execution (enum tio_plan_exec)   204 u32 reserved (0)
 *   ... header is 208 bytes (version 1: 200, without the execution); then n_moves records of
 *   40 bytes:
 *       u32 tensor, i32 from, i32 to, u32 flags, u64 trigger, u64 deadline, u64 bytes
 *   then u32 CRC32C of everything before it.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <teraio/plan.h>

#include "common/common_impl.h"
#include "common/outfile.h"
#include "plan/planner_impl.h"

#define PLAN_MAGIC      "TIOPLAN"
#define PLAN_VERSION    2u
#define PLAN_HEADER     208u
#define PLAN_HEADER_V1  200u /* version 1: no execution (plan_legacy_execution) */
#define PLAN_RECORD     40u
#define PLAN_JSON_LIMIT (UINT64_C(1) << 31) /* refuse JSON plans above 2 GiB */
/* The largest file tio_plan_load opens: a binary plan of TIO_PLAN_MAX_MOVES moves. */
#define PLAN_BINARY_LIMIT                                                           \
    (PLAN_HEADER + (uint64_t)TIO_PLAN_MAX_MOVES * PLAN_RECORD + 4 > PLAN_JSON_LIMIT \
         ? PLAN_HEADER + (uint64_t)TIO_PLAN_MAX_MOVES * PLAN_RECORD + 4             \
         : PLAN_JSON_LIMIT)

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint32_t get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        v |= (uint32_t)p[i] << (8 * i);
    }
    return v;
}

static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double bitsd(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static int save_binary_mem(const struct tio_plan *p, unsigned char **data, size_t *len) {
    size_t n = p->n_moves;
    size_t total = PLAN_HEADER + n * PLAN_RECORD + 4;
    unsigned char *b = tio_calloc(1, total);
    if (!b) {
        return TIO_ENOMEM;
    }
    memcpy(b, PLAN_MAGIC, 8);
    put32(b + 8, PLAN_VERSION);
    put32(b + 12, PLAN_HEADER);
    put64(b + 16, p->trace_hash);
    put64(b + 24, p->n_kernels);
    put64(b + 32, n);
    memcpy(b + 40, p->policy, strnlen(p->policy, TIO_PLAN_POLICY_MAX - 1));
    const struct tio_plan_summary *s = &p->summary;
    uint64_t sv[12] = { s->n_moves,
                        s->n_offloads,
                        (uint64_t)(int64_t)s->feasible,
                        dbits(s->planning_seconds),
                        s->capacity_bytes,
                        s->planned_peak_bytes,
                        s->shortfall_bytes,
                        s->shortfall_kernel,
                        s->host_peak_bytes,
                        s->ssd_peak_bytes,
                        s->bytes_to_ssd,
                        s->bytes_to_host };
    for (int i = 0; i < 12; i++) {
        put64(b + 104 + 8 * (size_t)i, sv[i]);
    }
    put32(b + 200, (uint32_t)p->exec);
    for (size_t i = 0; i < n; i++) {
        const struct tio_move *m = &p->moves[i];
        unsigned char *r = b + PLAN_HEADER + i * PLAN_RECORD;
        put32(r, m->tensor);
        put32(r + 4, (uint32_t)m->from);
        put32(r + 8, (uint32_t)m->to);
        put32(r + 12, m->flags);
        put64(r + 16, m->trigger);
        put64(r + 24, m->deadline);
        put64(r + 32, m->bytes);
    }
    put32(b + total - 4, tio_crc32c(0, b, total - 4));
    *data = b;
    *len = total;
    return 0;
}

/*
 * A plan file of version 1 has no execution. One with moves is executed by them (a baseline
 * never holds any); one without cannot be told apart: a baseline of the simulator (lru, ideal,
 * zero-*) and a plan that needs no moves look the same, and guessing from the policy's name
 * could simulate the wrong thing. It is refused, naming the field.
 */
static int plan_legacy_execution(struct tio_plan *p) {
    if (p->n_moves == 0) {
        return tio_set_error(TIO_EFORMAT,
                             "plan: no \"execution\" (a version 1 plan file) and no moves: "
                             "it cannot tell a simulator baseline from a plan that needs no "
                             "moves; make the plan again (teraio plan --policy %s)",
                             p->policy);
    }
    p->exec = TIO_PLAN_EXEC_MOVES;
    return 0;
}

/* Checks shared by both readers once the moves are in: counts and summary consistency. */
static int finish_loaded(struct tio_plan *p, const struct tio_plan_summary *s) {
    int rc = tio_plan_check_execution(p);
    if (rc < 0) {
        return rc;
    }
    for (size_t i = 0; i < p->n_moves; i++) {
        rc = tio_plan_check_move(&p->moves[i], p->n_kernels, i);
        if (rc < 0) {
            return rc;
        }
        if (i > 0 && p->moves[i - 1].trigger > p->moves[i].trigger) {
            return tio_set_error(TIO_EPLAN, "plan: move %zu: not sorted by trigger", i);
        }
    }
    if (s->n_moves != p->n_moves) {
        return tio_set_error(TIO_EFORMAT, "plan: summary.n_moves %zu != %zu moves", s->n_moves,
                             p->n_moves);
    }
    if (s->feasible != 0 && s->feasible != 1) {
        return tio_set_error(TIO_EFORMAT, "plan: summary.feasible must be 0 or 1 (got %d)",
                             s->feasible);
    }
    if (!isfinite(s->planning_seconds) || s->planning_seconds < 0) {
        return tio_set_error(TIO_EFORMAT, "plan: summary.planning_seconds %g is not a time >= 0",
                             s->planning_seconds);
    }
    if (s->capacity_bytes > TIO_PLAN_MAX_CAPACITY) {
        return tio_set_error(TIO_EFORMAT,
                             "plan: summary.capacity_bytes %llu is above the limit of 2^60 bytes",
                             (unsigned long long)s->capacity_bytes);
    }
    if (s->feasible && s->shortfall_bytes != 0) {
        return tio_set_error(TIO_EFORMAT,
                             "plan: summary: feasible, yet shortfall_bytes is %llu (must be 0)",
                             (unsigned long long)s->shortfall_bytes);
    }
    if (s->shortfall_kernel >= p->n_kernels) {
        return tio_set_error(
            TIO_EFORMAT, "plan: summary.shortfall_kernel %llu outside [0, n_kernels %llu)",
            (unsigned long long)s->shortfall_kernel, (unsigned long long)p->n_kernels);
    }
    size_t off = 0;
    for (size_t i = 0; i < p->n_moves; i++) {
        off += p->moves[i].from == TIO_TIER_GPU;
    }
    if (s->n_offloads != off) {
        return tio_set_error(TIO_EFORMAT, "plan: summary.n_offloads %zu != %zu offloads",
                             s->n_offloads, off);
    }
    p->summary = *s;
    p->finished = 1;
    return 0;
}

static int load_binary(const unsigned char *b, size_t len, struct tio_plan **out) {
    if (len < PLAN_HEADER_V1 + 4) {
        return tio_set_error(TIO_EFORMAT, "plan: file of %zu bytes is shorter than the header",
                             len);
    }
    if (memcmp(b, PLAN_MAGIC, 8) != 0) {
        return tio_set_error(TIO_EFORMAT, "plan: bad magic (not a teraio plan)");
    }
    uint32_t version = get32(b + 8);
    if (version != PLAN_VERSION && version != 1) {
        return tio_set_error(
            TIO_EVERSION, "plan: version %u not supported (this build reads 1 to %u)%s", version,
            PLAN_VERSION, version > PLAN_VERSION ? "; written by a newer teraio" : "");
    }
    uint32_t hdr = version == 1 ? PLAN_HEADER_V1 : PLAN_HEADER;
    if (get32(b + 12) != hdr) {
        return tio_set_error(TIO_EFORMAT, "plan: header size %u != %u", get32(b + 12), hdr);
    }
    if (len < (size_t)hdr + 4) {
        return tio_set_error(TIO_EFORMAT, "plan: file of %zu bytes is shorter than the header",
                             len);
    }
    uint64_t n = get64(b + 32);
    if (n > (len - hdr - 4) / PLAN_RECORD || hdr + n * PLAN_RECORD + 4 != len) {
        return tio_set_error(TIO_EFORMAT, "plan: n_moves %llu does not match the file size %zu",
                             (unsigned long long)n, len);
    }
    uint32_t crc = tio_crc32c(0, b, len - 4);
    if (crc != get32(b + len - 4)) {
        return tio_set_error(TIO_EFORMAT, "plan: CRC32C mismatch (stored %08x, computed %08x)",
                             get32(b + len - 4), crc);
    }
    char policy[TIO_PLAN_POLICY_MAX];
    memcpy(policy, b + 40, sizeof policy);
    if (policy[sizeof policy - 1] != '\0') {
        return tio_set_error(TIO_EFORMAT, "plan: policy name not NUL-terminated");
    }
    struct tio_plan *p;
    int rc = tio_plan_new(get64(b + 16), get64(b + 24), policy, &p);
    if (rc < 0) {
        return tio_plan_rewrap(TIO_EFORMAT, "", "");
    }
    if (n > 0) {
        p->moves = tio_malloc((size_t)n * sizeof *p->moves);
        if (!p->moves) {
            tio_plan_free(p);
            return TIO_ENOMEM;
        }
        p->cap_moves = (size_t)n;
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *r = b + hdr + i * PLAN_RECORD;
        struct tio_move *m = &p->moves[i];
        m->tensor = get32(r);
        m->from = (int32_t)get32(r + 4);
        m->to = (int32_t)get32(r + 8);
        m->flags = get32(r + 12);
        m->trigger = get64(r + 16);
        m->deadline = get64(r + 24);
        m->bytes = get64(r + 32);
    }
    p->n_moves = (size_t)n;
    if (version == 1) {
        rc = plan_legacy_execution(p);
    } else if (get32(b + 204) != 0) {
        rc = tio_set_error(TIO_EFORMAT, "plan: header bytes 204-207 (reserved) must be 0");
    } else if (!tio_plan_exec_name((int32_t)get32(b + 200))) {
        rc = tio_set_error(TIO_EFORMAT, "plan: execution %u out of range [0, %d)", get32(b + 200),
                           TIO_PLAN_EXEC_COUNT);
    } else {
        p->exec = (int32_t)get32(b + 200);
    }
    if (rc < 0) {
        tio_plan_free(p);
        return rc;
    }
    uint64_t sv[12];
    for (int i = 0; i < 12; i++) {
        sv[i] = get64(b + 104 + 8 * (size_t)i);
    }
    struct tio_plan_summary s = {
        .n_moves = (size_t)sv[0],
        .n_offloads = (size_t)sv[1],
        .feasible = (int32_t)(int64_t)sv[2],
        .planning_seconds = bitsd(sv[3]),
        .capacity_bytes = sv[4],
        .planned_peak_bytes = sv[5],
        .shortfall_bytes = sv[6],
        .shortfall_kernel = sv[7],
        .host_peak_bytes = sv[8],
        .ssd_peak_bytes = sv[9],
        .bytes_to_ssd = sv[10],
        .bytes_to_host = sv[11],
    };
    if ((int64_t)sv[2] != 0 && (int64_t)sv[2] != 1) {
        tio_plan_free(p);
        return tio_set_error(TIO_EFORMAT, "plan: summary.feasible must be 0 or 1");
    }
    if ((rc = finish_loaded(p, &s)) < 0) {
        tio_plan_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static const char *const flag_names[] = { "urgent", "wraps", "clean", "stall" };

static json_t *plan_to_json(const struct tio_plan *p) {
    json_t *o = json_object();
    json_t *moves = json_array();
    json_t *sum = json_object();
    char hash[24];
    (void)snprintf(hash, sizeof hash, "%016llx", (unsigned long long)p->trace_hash);
    const struct tio_plan_summary *s = &p->summary;
    int bad = !o || !moves || !sum;
    if (!bad) {
        bad |= json_object_set_new(o, "format", json_string("teraio-plan"));
        bad |= json_object_set_new(o, "version", json_integer(PLAN_VERSION));
        bad |= json_object_set_new(o, "policy", json_string(p->policy));
        bad |= json_object_set_new(o, "execution", json_string(tio_plan_exec_name(p->exec)));
        bad |= json_object_set_new(o, "trace_hash", json_string(hash));
        bad |= json_object_set_new(o, "n_kernels", json_integer((json_int_t)p->n_kernels));
        bad |= json_object_set_new(sum, "n_moves", json_integer((json_int_t)s->n_moves));
        bad |= json_object_set_new(sum, "n_offloads", json_integer((json_int_t)s->n_offloads));
        bad |= json_object_set_new(sum, "feasible", json_boolean(s->feasible));
        bad |= json_object_set_new(sum, "planning_seconds", json_real(s->planning_seconds));
        bad |=
            json_object_set_new(sum, "capacity_bytes", json_integer((json_int_t)s->capacity_bytes));
        bad |= json_object_set_new(sum, "planned_peak_bytes",
                                   json_integer((json_int_t)s->planned_peak_bytes));
        bad |= json_object_set_new(sum, "shortfall_bytes",
                                   json_integer((json_int_t)s->shortfall_bytes));
        bad |= json_object_set_new(sum, "shortfall_kernel",
                                   json_integer((json_int_t)s->shortfall_kernel));
        bad |= json_object_set_new(sum, "host_peak_bytes",
                                   json_integer((json_int_t)s->host_peak_bytes));
        bad |=
            json_object_set_new(sum, "ssd_peak_bytes", json_integer((json_int_t)s->ssd_peak_bytes));
        bad |= json_object_set_new(sum, "bytes_to_ssd", json_integer((json_int_t)s->bytes_to_ssd));
        bad |=
            json_object_set_new(sum, "bytes_to_host", json_integer((json_int_t)s->bytes_to_host));
        bad |= json_object_set_new(o, "summary", sum);
        sum = NULL;
    }
    for (size_t i = 0; !bad && i < p->n_moves; i++) {
        const struct tio_move *m = &p->moves[i];
        json_t *j = json_object();
        json_t *fl = json_array();
        if (!j || !fl) {
            json_decref(j);
            json_decref(fl);
            bad = 1;
            break;
        }
        for (size_t b = 0; b < TIO_ARRAY_LEN(flag_names); b++) {
            if (m->flags & (1u << b)) {
                bad |= json_array_append_new(fl, json_string(flag_names[b]));
            }
        }
        bad |= json_object_set_new(j, "tensor", json_integer(m->tensor));
        bad |= json_object_set_new(j, "from", json_string(tio_tier_name(m->from)));
        bad |= json_object_set_new(j, "to", json_string(tio_tier_name(m->to)));
        bad |= json_object_set_new(j, "trigger", json_integer((json_int_t)m->trigger));
        bad |= json_object_set_new(j, "deadline", json_integer((json_int_t)m->deadline));
        bad |= json_object_set_new(j, "bytes", json_integer((json_int_t)m->bytes));
        bad |= json_object_set_new(j, "flags", fl);
        bad |= json_array_append_new(moves, j);
    }
    if (!bad) {
        bad |= json_object_set_new(o, "moves", moves);
        moves = NULL;
    }
    json_decref(moves);
    json_decref(sum);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int
json_u64(const json_t *obj, const char *key, const char *where, uint64_t max, uint64_t *out) {
    const json_t *v = json_object_get(obj, key);
    if (!v) {
        return tio_set_error(TIO_EFORMAT, "plan: %s: missing \"%s\"", where, key);
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max) {
        return tio_set_error(TIO_EFORMAT, "plan: %s: \"%s\" must be an integer in [0, %llu]", where,
                             key, (unsigned long long)max);
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Unknown members are errors (a typo must not be silently ignored): `allowed` ends with NULL. */
static int check_members(const json_t *obj, const char *const *allowed, const char *where) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)tio_unconst(obj), key, v) {
        const char *const *a = allowed;
        while (*a && strcmp(*a, key) != 0) {
            a++;
        }
        if (!*a) {
            return tio_set_error(TIO_EFORMAT, "plan: %s: unknown member \"%.64s\"", where, key);
        }
    }
    return 0;
}

static int tier_parse(const json_t *v, const char *where, const char *key, int32_t *out) {
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    for (int32_t t = 0; s && t < TIO_TIER_COUNT; t++) {
        if (strcmp(s, tio_tier_name(t)) == 0) {
            *out = t;
            return 0;
        }
    }
    return tio_set_error(TIO_EFORMAT, "plan: %s: \"%s\" must be \"gpu\", \"host\" or \"ssd\"",
                         where, key);
}

/* Move i of a JSON plan into *m. 0 or TIO_EFORMAT naming the move and the field. */
static int load_json_move(const json_t *j, size_t i, struct tio_move *m) {
    static const char *const move_keys[] = { "tensor",   "from",  "to",    "trigger",
                                             "deadline", "bytes", "flags", NULL };
    char where[64];
    memset(m, 0, sizeof *m);
    (void)snprintf(where, sizeof where, "move %zu", i);
    uint64_t t = 0;
    int rc;
    if (!json_is_object(j)) {
        return tio_set_error(TIO_EFORMAT, "plan: %s: must be an object", where);
    }
    if ((rc = check_members(j, move_keys, where)) < 0) {
        return rc;
    }
    if ((rc = json_u64(j, "tensor", where, UINT32_MAX, &t)) < 0 ||
        (rc = json_u64(j, "trigger", where, UINT64_MAX >> 1, &m->trigger)) < 0 ||
        (rc = json_u64(j, "deadline", where, UINT64_MAX >> 1, &m->deadline)) < 0 ||
        (rc = json_u64(j, "bytes", where, UINT64_MAX >> 1, &m->bytes)) < 0 ||
        (rc = tier_parse(json_object_get(j, "from"), where, "from", &m->from)) < 0 ||
        (rc = tier_parse(json_object_get(j, "to"), where, "to", &m->to)) < 0) {
        return rc;
    }
    m->tensor = (uint32_t)t;
    const json_t *fl = json_object_get(j, "flags");
    if (fl && !json_is_array(fl)) {
        return tio_set_error(TIO_EFORMAT, "plan: %s: \"flags\" must be an array", where);
    }
    for (size_t f = 0; fl && f < json_array_size(fl); f++) {
        const json_t *fv = json_array_get(fl, f);
        size_t b = 0;
        while (b < TIO_ARRAY_LEN(flag_names) &&
               !(json_is_string(fv) && strcmp(json_string_value(fv), flag_names[b]) == 0)) {
            b++;
        }
        if (b == TIO_ARRAY_LEN(flag_names)) {
            return tio_set_error(TIO_EFORMAT,
                                 "plan: %s: unknown flag (known: urgent, wraps, clean)", where);
        }
        m->flags |= 1u << b;
    }
    return 0;
}

static int load_json_obj(const json_t *o, struct tio_plan **out) {
    if (!json_is_object(o)) {
        return tio_set_error(TIO_EFORMAT, "plan: top level must be a JSON object");
    }
    static const char *const top_keys[] = { "format",    "version",    "policy",
                                            "execution", "trace_hash", "n_kernels",
                                            "summary",   "moves",      NULL };
    static const char *const sum_keys[] = { "n_moves",
                                            "n_offloads",
                                            "feasible",
                                            "planning_seconds",
                                            "capacity_bytes",
                                            "planned_peak_bytes",
                                            "shortfall_bytes",
                                            "shortfall_kernel",
                                            "host_peak_bytes",
                                            "ssd_peak_bytes",
                                            "bytes_to_ssd",
                                            "bytes_to_host",
                                            NULL };
    const json_t *fmt = json_object_get(o, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "teraio-plan") != 0) {
        return tio_set_error(TIO_EFORMAT, "plan: \"format\" must be \"teraio-plan\"");
    }
    uint64_t version = 0, nk = 0, hash = 0;
    int rc;
    if ((rc = check_members(o, top_keys, "top level")) < 0) {
        return rc;
    }
    if ((rc = json_u64(o, "version", "header", UINT32_MAX, &version)) < 0) {
        return rc;
    }
    if (version != PLAN_VERSION && version != 1) {
        return tio_set_error(TIO_EVERSION,
                             "plan: version %llu not supported (this build reads 1 to %u)%s",
                             (unsigned long long)version, PLAN_VERSION,
                             version > PLAN_VERSION ? "; written by a newer teraio" : "");
    }
    const json_t *ex = json_object_get(o, "execution");
    int32_t exec = -1;
    if (ex && (!json_is_string(ex) || (exec = tio_plan_exec_parse(json_string_value(ex))) < 0)) {
        return tio_set_error(TIO_EFORMAT,
                             "plan: \"execution\" must be one of \"moves\", \"none\", "
                             "\"ideal\", \"lru\", \"zero-offload\", \"zero-infinity\"");
    }
    if (!ex && version != 1) {
        return tio_set_error(TIO_EFORMAT, "plan: \"execution\" missing (required from version 2)");
    }
    if ((rc = json_u64(o, "n_kernels", "header", TIO_TRACE_MAX_KERNELS, &nk)) < 0) {
        return rc;
    }
    const json_t *jh = json_object_get(o, "trace_hash");
    const char *hs = json_is_string(jh) ? json_string_value(jh) : NULL;
    char *end = NULL;
    if (!hs || strlen(hs) != 16 || (errno = 0, hash = strtoull(hs, &end, 16), *end) || errno) {
        return tio_set_error(TIO_EFORMAT, "plan: \"trace_hash\" must be 16 hex digits");
    }
    const json_t *pol = json_object_get(o, "policy");
    if (!json_is_string(pol)) {
        return tio_set_error(TIO_EFORMAT, "plan: \"policy\" must be a string");
    }
    const json_t *moves = json_object_get(o, "moves");
    const json_t *sum = json_object_get(o, "summary");
    if (!json_is_array(moves)) {
        return tio_set_error(TIO_EFORMAT, "plan: \"moves\" must be an array");
    }
    if (!json_is_object(sum)) {
        return tio_set_error(TIO_EFORMAT, "plan: \"summary\" must be an object");
    }
    if ((rc = check_members(sum, sum_keys, "summary")) < 0) {
        return rc;
    }
    struct tio_plan *p = NULL;
    if (tio_plan_new(hash, nk, json_string_value(pol), &p) < 0) {
        return tio_plan_rewrap(TIO_EFORMAT, "", "");
    }
    size_t n = json_array_size(moves);
    if (n > 0) {
        p->moves = tio_malloc(n * sizeof *p->moves);
        if (!p->moves) {
            tio_plan_free(p);
            return TIO_ENOMEM;
        }
        p->cap_moves = n;
    }
    for (size_t i = 0; i < n; i++) {
        if ((rc = load_json_move(json_array_get(moves, i), i, &p->moves[i])) < 0) {
            goto fail;
        }
        p->n_moves = i + 1;
    }
    if (exec < 0) {
        rc = plan_legacy_execution(p);
        if (rc < 0) {
            goto fail;
        }
    } else {
        p->exec = exec;
    }
    struct tio_plan_summary s;
    memset(&s, 0, sizeof s);
    uint64_t v = 0;
#define SUM_U64(field)                                                          \
    do {                                                                        \
        if ((rc = json_u64(sum, #field, "summary", UINT64_MAX >> 1, &v)) < 0) { \
            goto fail;                                                          \
        }                                                                       \
        s.field = v;                                                            \
    } while (0)
    SUM_U64(n_moves);
    SUM_U64(n_offloads);
    SUM_U64(capacity_bytes);
    SUM_U64(planned_peak_bytes);
    SUM_U64(shortfall_bytes);
    SUM_U64(shortfall_kernel);
    SUM_U64(host_peak_bytes);
    SUM_U64(ssd_peak_bytes);
    SUM_U64(bytes_to_ssd);
    SUM_U64(bytes_to_host);
#undef SUM_U64
    const json_t *fe = json_object_get(sum, "feasible");
    if (!json_is_boolean(fe)) {
        rc = tio_set_error(TIO_EFORMAT, "plan: summary: \"feasible\" must be true or false");
        goto fail;
    }
    s.feasible = json_is_true(fe);
    const json_t *ps = json_object_get(sum, "planning_seconds");
    if (!json_is_number(ps) || json_number_value(ps) < 0) {
        rc = tio_set_error(TIO_EFORMAT, "plan: summary: \"planning_seconds\" must be >= 0");
        goto fail;
    }
    s.planning_seconds = json_number_value(ps);
    if ((rc = finish_loaded(p, &s)) < 0) {
        goto fail;
    }
    *out = p;
    return 0;
fail:
    tio_plan_free(p);
    return rc;
}

/* ---- entry points -------------------------------------------------------------------------- */

static int save_mem(const struct tio_plan *plan, int32_t format, void **data, size_t *len) {
    if (format == TIO_PLAN_FORMAT_BINARY) {
        unsigned char *b = NULL;
        int rc = save_binary_mem(plan, &b, len);
        *data = b;
        return rc;
    }
    json_t *o = plan_to_json(plan);
    char *text = o ? json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text) {
        return tio_set_error(TIO_ENOMEM, "plan: cannot serialize to JSON");
    }
    size_t n = strlen(text);
    char *copy = tio_malloc(n + 2);
    if (!copy) {
        free(text);
        return TIO_ENOMEM;
    }
    memcpy(copy, text, n);
    copy[n] = '\n';
    copy[n + 1] = '\0';
    free(text);
    *data = copy;
    *len = n + 1;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int tio_plan_save(const struct tio_plan *plan, const char *path, int32_t format) {
    if (!plan || !path) {
        return tio_set_error(TIO_EINVAL, "plan: NULL argument");
    }
    if (!plan->finished) {
        return tio_set_error(TIO_ESTATE, "plan: save before tio_plan_finish");
    }
    if (format == TIO_PLAN_FORMAT_AUTO) {
        format = ends_with(path, ".json") ? TIO_PLAN_FORMAT_JSON : TIO_PLAN_FORMAT_BINARY;
    }
    if (format != TIO_PLAN_FORMAT_BINARY && format != TIO_PLAN_FORMAT_JSON) {
        return tio_set_error(TIO_EINVAL, "plan: unknown format %d", format);
    }
    void *data = NULL;
    size_t len = 0;
    int rc = save_mem(plan, format, &data, &len);
    if (rc < 0) {
        return rc;
    }
    rc = tio_outfile_save(path, "plan", data, len);
    tio_free(data);
    return rc;
}

int tio_plan_load_mem(const void *data, size_t len, int32_t format, struct tio_plan **out) {
    if (!data || !out) {
        return tio_set_error(TIO_EINVAL, "plan: NULL argument");
    }
    *out = NULL;
    if (format == TIO_PLAN_FORMAT_AUTO) {
        format = len >= 8 && memcmp(data, PLAN_MAGIC, 8) == 0 ? TIO_PLAN_FORMAT_BINARY
                                                              : TIO_PLAN_FORMAT_JSON;
    }
    if (format == TIO_PLAN_FORMAT_BINARY) {
        return load_binary(data, len, out);
    }
    if (format != TIO_PLAN_FORMAT_JSON) {
        return tio_set_error(TIO_EINVAL, "plan: unknown format %d", format);
    }
    if (len > PLAN_JSON_LIMIT) {
        return tio_set_error(TIO_EFORMAT, "plan: JSON plan larger than 2 GiB");
    }
    json_error_t err;
    json_t *o = json_loadb(data, len, JSON_REJECT_DUPLICATES, &err);
    if (!o) {
        return tio_set_error(TIO_EFORMAT, "plan: JSON %d:%d: %s", err.line, err.column, err.text);
    }
    int rc = load_json_obj(o, out);
    json_decref(o);
    return rc;
}

/*
 * Only a regular file is read (tio_input_open), and its size is checked before its bytes: a
 * binary plan must be exactly header + n_moves records + CRC with n_moves within the limit, a
 * JSON plan at most PLAN_JSON_LIMIT bytes of text.
 */
int tio_plan_load(const char *path, int32_t format, struct tio_plan **out) {
    if (!path || !out) {
        return tio_set_error(TIO_EINVAL, "plan: NULL argument");
    }
    *out = NULL;
    struct tio_input in;
    int rc = tio_input_open("plan", path, PLAN_BINARY_LIMIT, &in);
    if (rc < 0) {
        return rc;
    }
    unsigned char head[PLAN_HEADER];
    size_t nh = (size_t)TIO_MIN(in.size, (uint64_t)sizeof head);
    rc = tio_input_read(&in, 0, head, nh);
    int binary = format == TIO_PLAN_FORMAT_BINARY ||
                 (format == TIO_PLAN_FORMAT_AUTO && nh >= 8 && memcmp(head, PLAN_MAGIC, 8) == 0);
    if (rc == 0 && binary && nh >= PLAN_HEADER_V1) {
        uint64_t n = get64(head + 32);
        uint64_t hdr = get32(head + 8) == 1 ? PLAN_HEADER_V1 : PLAN_HEADER;
        if (n > TIO_PLAN_MAX_MOVES || hdr + n * PLAN_RECORD + 4 != in.size) {
            rc = tio_set_error(TIO_EFORMAT,
                               "plan: '%s': n_moves %llu in the header does not match the file "
                               "size %llu (limit %llu moves)",
                               path, (unsigned long long)n, (unsigned long long)in.size,
                               (unsigned long long)TIO_PLAN_MAX_MOVES);
        }
    } else if (rc == 0 && !binary) {
        if (in.size > PLAN_JSON_LIMIT) {
            rc = tio_set_error(TIO_EFORMAT,
                               "plan: '%s' is %llu bytes: not a binary plan, and above the JSON "
                               "limit of %llu bytes",
                               path, (unsigned long long)in.size,
                               (unsigned long long)PLAN_JSON_LIMIT);
        } else if (!tio_input_looks_textual(head, nh)) {
            rc = tio_set_error(TIO_EFORMAT,
                               "plan: '%s' is neither a binary plan (no TIOPLAN magic) nor JSON "
                               "text",
                               path);
        }
    }
    void *buf = NULL;
    size_t len = 0;
    if (rc == 0) {
        rc = tio_input_read_all(&in, &buf, &len);
    }
    tio_input_close(&in);
    if (rc == 0) {
        rc = tio_plan_load_mem(buf, len, format, out);
        if (rc < 0) {
            char ctx[300];
            (void)snprintf(ctx, sizeof ctx, " (in %s)", path);
            rc = tio_plan_rewrap(rc, "", ctx);
        }
    }
    tio_free(buf);
    return rc;
}
