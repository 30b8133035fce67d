/* CSV export of an analysis (tio_analysis_write_csv): memory.csv, periods.csv, cdf.csv. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <teraio/analysis.h>

#include "analysis/analysis_impl.h"
#include "common/common_impl.h"
#include "common/outfile.h"

/* mkdir -p: create `dir` and its missing parents. Returns 0 or -errno (detail names the path). */
static int make_dirs(const char *dir) {
    char path[4096];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof path) {
        return tio_set_error(TIO_EINVAL, "analysis: output directory '%s': empty or too long", dir);
    }
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0') {
            continue;
        }
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) < 0 && errno != EEXIST) {
            int err = errno;
            return tio_set_error(-err, "analysis: cannot create directory '%s': %s", path,
                                 tio_strerror(-err));
        }
        path[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        return tio_set_error(-ENOTDIR, "analysis: output path '%s' is not a directory", dir);
    }
    return 0;
}

struct csv_file {
    FILE *f;
    struct tio_outfile *o;
    char path[4200];
};

/* Open dir/name (put in place by csv_close) and write its header line. */
static int csv_open(struct csv_file *c, const char *dir, const char *name, const char *header) {
    (void)snprintf(c->path, sizeof c->path, "%s/%s", dir, name);
    c->f = NULL;
    int rc = tio_outfile_open(c->path, "analysis", &c->o);
    if (rc < 0) {
        return rc;
    }
    c->f = tio_outfile_stream(c->o);
    (void)fputs(header, c->f);
    return 0;
}

/* Put the file in place; any write error on the stream (disk full...) is reported here. */
static int csv_close(struct csv_file *c, int rc) {
    if (!c->o) {
        return rc;
    }
    int crc = tio_outfile_commit(c->o);
    c->o = NULL;
    c->f = NULL;
    return rc < 0 ? rc : crc;
}

/* Append the decimal digits of v at *p. */
static void put_u64(char **p, uint64_t v) {
    *p += tio_u64_to_dec(*p, v);
}

static void put_str(char **p, const char *s) {
    size_t n = strlen(s);
    memcpy(*p, s, n);
    *p += n;
}

/* num/den (0 < num <= den) in decimal with up to 12 digits after the point, truncated by exact
 * long division, trailing zeros dropped: "0.1", "0.000287935502", "1". */
static void put_fraction(char **p, uint64_t num, uint64_t den) {
    if (num >= den) {
        *(*p)++ = '1';
        return;
    }
    char *q = *p;
    *q++ = '0';
    *q++ = '.';
    char *last = q;
    for (int i = 0; i < 12 && num; i++) {
        num *= 10;
        *q++ = (char)('0' + num / den);
        num %= den;
        if (q[-1] != '0') {
            last = q;
        }
    }
    *p = last;
}

/* The minimum bandwidth of a period in bytes/s: 2 * bytes / duration, rounded up, computed
 * exactly in 128 bits (2 * 2^50 bytes * 1e9 does not fit in 64). */
__extension__ typedef unsigned __int128 csv_u128;

static void put_bandwidth(char **p, uint64_t bytes, uint64_t duration_ns) {
    if (duration_ns == 0) {
        put_str(p, "inf");
        return;
    }
    csv_u128 num = (csv_u128)bytes * 2000000000u;
    csv_u128 q = (num + duration_ns - 1) / duration_ns;
    if (q <= UINT64_MAX) {
        put_u64(p, (uint64_t)q);
    } else {
        *p += snprintf(*p, 32, "%.9g", (double)q);
    }
}

/* Append the n numbers v at *p, separated by commas. */
static void put_u64s(char **p, const uint64_t *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (i) {
            *(*p)++ = ',';
        }
        put_u64(p, v[i]);
    }
}

static void put_line(struct csv_file *c, char *line, char *end) {
    *end++ = '\n';
    (void)fwrite(line, 1, (size_t)(end - line), c->f);
}

static int write_memory(const struct tio_analysis *a, const char *dir) {
    struct csv_file c;
    int rc = csv_open(&c, dir, "memory.csv",
                      "kernel,start_ns,duration_ns,resident_bytes,active_bytes\n");
    if (rc < 0) {
        return rc;
    }
    struct tio_analysis_summary s;
    tio_analysis_get_summary(a, &s);
    const uint64_t *start = tio_analysis_kernel_start_ns(a);
    const uint64_t *res = tio_analysis_resident_bytes(a);
    const uint64_t *act = tio_analysis_active_bytes(a);
    for (size_t k = 0; k < s.n_kernels; k++) {
        char line[128], *q = line; /* 5 numbers of at most 20 digits */
        const uint64_t row[] = { k, start[k], start[k + 1] - start[k], res[k], act[k] };
        put_u64s(&q, row, TIO_ARRAY_LEN(row));
        put_line(&c, line, q);
    }
    return csv_close(&c, 0);
}

static int write_periods(const struct tio_analysis *a, const char *dir) {
    struct csv_file c;
    int rc = csv_open(&c, dir, "periods.csv",
                      "tensor,kind,bytes,start,end,duration_ns,wraps,min_bandwidth_Bps\n");
    if (rc < 0) {
        return rc;
    }
    const struct tio_trace *tr = tio_analysis_borrowed_trace(a);
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    size_t n;
    const struct tio_period *p = tio_analysis_periods(a, &n);
    for (size_t i = 0; i < n; i++) {
        char line[256], *q = line; /* 6 numbers, a kind name (< 16), a flag */
        put_u64(&q, p[i].tensor);
        *q++ = ',';
        put_str(&q, tio_tensor_kind_name(v.tensor_kind[p[i].tensor]));
        *q++ = ',';
        const uint64_t nums[] = { p[i].bytes, p[i].start, p[i].end, p[i].duration_ns };
        put_u64s(&q, nums, TIO_ARRAY_LEN(nums));
        *q++ = ',';
        *q++ = (p[i].flags & TIO_PERIOD_WRAPS) ? '1' : '0';
        *q++ = ',';
        put_bandwidth(&q, p[i].bytes, p[i].duration_ns);
        put_line(&c, line, q);
    }
    return csv_close(&c, 0);
}

/* The empirical CDF per bucket: one row per distinct duration d with the fraction of the
 * bucket's periods whose duration is <= d. */
static int write_cdf(const struct tio_analysis *a, const char *dir) {
    struct csv_file c;
    int rc = csv_open(&c, dir, "cdf.csv", "bucket,duration_ns,fraction\n");
    if (rc < 0) {
        return rc;
    }
    for (int b = 0; b < TIO_BUCKET_COUNT; b++) {
        size_t n;
        const uint64_t *d = tio_analysis_bucket_durations(a, b, &n);
        for (size_t i = 0; i < n; i++) {
            if (i + 1 < n && d[i + 1] == d[i]) {
                continue;
            }
            char line[128], *q = line;
            put_str(&q, tio_size_bucket_name(b));
            *q++ = ',';
            put_u64(&q, d[i]);
            *q++ = ',';
            put_fraction(&q, i + 1, n);
            put_line(&c, line, q);
        }
    }
    return csv_close(&c, 0);
}

int tio_analysis_write_csv(const struct tio_analysis *a, const char *dir) {
    if (!a || !dir) {
        return tio_set_error(TIO_EINVAL, "analysis: NULL analysis or directory");
    }
    int rc = make_dirs(dir);
    if (rc == 0) {
        rc = write_memory(a, dir);
    }
    if (rc == 0) {
        rc = write_periods(a, dir);
    }
    if (rc == 0) {
        rc = write_cdf(a, dir);
    }
    return rc;
}
