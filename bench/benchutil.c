/* Helpers shared by the benchmark programs (benchutil.h). */
#include "benchutil.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <teraio/status.h>

double bench_cpu_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
}

double bench_median(double *v, int n) {
    bench_sort(v, (size_t)n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct tio_trace *bench_trace_finish(struct tio_trace *tr, int rc, const char *what) {
    if (rc == 0) {
        rc = tio_trace_finish(tr);
    }
    if (rc == 0) {
        return tr;
    }
    (void)fprintf(stderr, "%s: %s: %s\n", what, tio_strerror(rc), tio_last_error());
    tio_trace_free(tr);
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs here */
    exit(1);
}

int bench_int(const char *s) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < INT_MIN + 1 || v > INT_MAX) {
        return INT_MIN;
    }
    return (int)v;
}

double bench_double(const char *s) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0) {
        return NAN;
    }
    return v;
}
