/* teraio analyze: tensor lifetimes, inactive periods and memory curves of a
 * trace (the paper's characterization, §2: Observations 1 and 2). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/teraio.h>

#include "cli.h"

static const char *const cmd_name = "analyze";

static void usage(FILE *f) {
    (void)fprintf(f, "usage: teraio analyze TRACE [--capacity SIZE] [--long-idle TIME] "
                     "[--json] [--csv DIR]\n"
                     "                      [--top N]\n\n"
                     "Tensor lifetimes of one training iteration: per kernel the resident "
                     "bytes (if nothing\n"
                     "is offloaded) and the active bytes (tensors the kernel uses); per "
                     "tensor its inactive\n"
                     "periods, where a global tensor's last period wraps into the next "
                     "iteration. Prints\n"
                     "the paper's Observation 1 (active tensors need little memory) and "
                     "Observation 2\n"
                     "(tensors of 10 MB-1 GB stay idle long) beside the paper's values.\n\n"
                     "options:\n"
                     "  --capacity SIZE   GPU memory for capacity-relative fractions (e.g. "
                     "94GiB, 80GB)\n"
                     "  --long-idle TIME  threshold of a long inactive period (default 10ms)\n"
                     "  --json            print the summary as JSON (same names as struct\n"
                     "                    tio_analysis_summary, plus buckets and top "
                     "tensors)\n"
                     "  --csv DIR         write memory.csv, periods.csv and cdf.csv into DIR "
                     "(created)\n"
                     "  --top N           list the N large tensors (>= 10 MB) idle the "
                     "longest (default 10)\n"
                     "  -h, --help        this help\n\n"
                     "examples:\n"
                     "  teraio analyze llama3-8b.tio --capacity 94GiB\n"
                     "  teraio analyze llama3-8b.tio --json --csv out/llama3-8b\n"
                     "  teraio analyze run.json --long-idle 5ms --top 20\n\n" TIO_CLI_EXIT_HELP);
}

static void json_u64_array(FILE *f, const size_t *v, size_t n) {
    (void)fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        (void)fprintf(f, "%s%zu", i ? ", " : "", v[i]);
    }
    (void)fputc(']', f);
}

/* What both printers print: one trace's analysis, its summary and view, the top idle tensors. */
struct report {
    const char *path;
    const struct tio_trace *tr;
    const struct tio_analysis *a;
    const struct tio_analysis_params *prm;
    struct tio_analysis_summary s;
    struct tio_trace_view v;
    const struct tio_idle_tensor *top;
    size_t n_top;
};

static void print_json(const struct report *r) {
    FILE *f = stdout;
    (void)fputs("{\n  \"trace\": ", f);
    cli_json_string(f, r->path);
    (void)fprintf(f,
                  ",\n  \"capacity_bytes\": %" PRIu64 ",\n  \"long_idle_ns\": %" PRIu64
                  ",\n  \"n_kernels\": %zu,\n  \"n_tensors\": %zu,\n  \"n_uses\": %zu,\n"
                  "  \"n_periods\": %zu,\n  \"inactive_periods\": %zu,\n"
                  "  \"iteration_ns\": %" PRIu64 ",\n  \"global_bytes\": %" PRIu64 ",\n"
                  "  \"peak_resident_bytes\": %" PRIu64 ",\n  \"peak_kernel\": %zu,\n"
                  "  \"peak_kernel_name\": ",
                  r->prm->capacity_bytes, r->prm->long_idle_ns, r->s.n_kernels, r->s.n_tensors,
                  r->s.n_uses, r->s.n_periods, r->s.n_periods, r->s.iteration_ns, r->s.global_bytes,
                  r->s.peak_resident_bytes, r->s.peak_kernel);
    const char *kname =
        r->s.n_kernels ? tio_trace_kernel_name(r->tr, (uint32_t)r->s.peak_kernel) : NULL;
    if (kname) {
        cli_json_string(f, kname);
    } else {
        (void)fputs("null", f);
    }
    (void)fprintf(f,
                  ",\n  \"peak_active_bytes\": %" PRIu64 ",\n"
                  "  \"active_fraction_mean\": %.17g,\n  \"active_fraction_max\": %.17g,\n"
                  "  \"active_capacity_fraction_mean\": %.17g,\n"
                  "  \"active_capacity_fraction_max\": %.17g,\n"
                  "  \"long_idle_fraction_10mb_1gb\": %.17g,\n  \"periods_per_bucket\": ",
                  r->s.peak_active_bytes, r->s.active_fraction_mean, r->s.active_fraction_max,
                  r->s.active_capacity_fraction_mean, r->s.active_capacity_fraction_max,
                  r->s.long_idle_fraction_10mb_1gb);
    json_u64_array(f, r->s.periods_per_bucket, TIO_BUCKET_COUNT);
    (void)fputs(",\n  \"tensors_per_bucket\": ", f);
    json_u64_array(f, r->s.tensors_per_bucket, TIO_BUCKET_COUNT);
    (void)fputs(",\n  \"buckets\": [", f);
    for (int b = 0; b < TIO_BUCKET_COUNT; b++) {
        size_t n = r->s.periods_per_bucket[b];
        (void)fprintf(f,
                      "%s\n    {\"name\": \"%s\", \"tensors\": %zu, \"periods\": %zu, "
                      "\"median_idle_ns\": %" PRIu64 ", \"long_idle_periods\": %zu}",
                      b ? "," : "", tio_size_bucket_name(b), r->s.tensors_per_bucket[b], n,
                      tio_analysis_bucket_median(r->a, b),
                      tio_analysis_bucket_count_above(r->a, b, r->prm->long_idle_ns));
    }
    (void)fputs("\n  ],\n  \"top\": [", f);
    for (size_t i = 0; i < r->n_top; i++) {
        const struct tio_idle_tensor *e = &r->top[i];
        (void)fprintf(f, "%s\n    {\"tensor\": %u, \"name\": ", i ? "," : "", e->tensor);
        const char *name = tio_trace_tensor_name(r->tr, e->tensor);
        if (name) {
            cli_json_string(f, name);
        } else {
            (void)fputs("null", f);
        }
        (void)fprintf(f,
                      ", \"kind\": \"%s\", \"bytes\": %" PRIu64 ", \"longest_idle_ns\": %" PRIu64
                      ", \"start\": %" PRIu64 ", \"end\": %" PRIu64 ", \"total_idle_ns\": %" PRIu64
                      ", \"periods\": %u, \"wraps\": %s}",
                      tio_tensor_kind_name(r->v.tensor_kind[e->tensor]),
                      r->v.tensor_bytes[e->tensor], e->longest.duration_ns, e->longest.start,
                      e->longest.end, e->total_ns, e->n_periods,
                      (e->longest.flags & TIO_PERIOD_WRAPS) ? "true" : "false");
    }
    (void)fputs(r->n_top ? "\n  ]\n}\n" : "]\n}\n", f);
}

/* "15.8%", "0.0312%", "0%": one decimal from 10% up, three significant digits below. */
static const char *pct(double x, char *buf, size_t len) {
    if (x == 0) {
        (void)snprintf(buf, len, "0%%");
    } else {
        (void)snprintf(buf, len, x >= 0.1 ? "%.1f%%" : "%.3g%%", 100 * x);
    }
    return buf;
}

static const char *dur(uint64_t ns, char *buf, size_t len) {
    return tio_format_duration((double)ns * 1e-9, buf, len);
}

static void print_text(const struct report *r, int want_top) {
    char b1[64], b2[64], b3[64];
    printf("trace %s\n", r->path);
    printf("  %zu kernels, %zu tensors, %zu uses, %zu inactive periods\n", r->s.n_kernels,
           r->s.n_tensors, r->s.n_uses, r->s.n_periods);
    printf("  iteration time      %s (sum of kernel durations)\n", dur(r->s.iteration_ns, b1, 64));
    const char *kname =
        r->s.n_kernels ? tio_trace_kernel_name(r->tr, (uint32_t)r->s.peak_kernel) : NULL;
    printf("  peak resident       %s at kernel %zu (%s)",
           tio_format_bytes(r->s.peak_resident_bytes, b1, 64), r->s.peak_kernel,
           kname ? kname : "unnamed");
    if (r->prm->capacity_bytes) {
        double ratio = (double)r->s.peak_resident_bytes / (double)r->prm->capacity_bytes;
        if (ratio >= 1) {
            printf(", %.2fx the capacity of %s", ratio,
                   tio_format_bytes(r->prm->capacity_bytes, b2, 64));
        } else {
            printf(", %s of the capacity of %s", pct(ratio, b3, 64),
                   tio_format_bytes(r->prm->capacity_bytes, b2, 64));
        }
    }
    printf("\n  global tensors      %s\n", tio_format_bytes(r->s.global_bytes, b1, 64));
    printf("  peak active         %s\n\n", tio_format_bytes(r->s.peak_active_bytes, b1, 64));

    printf("Observation 1: active tensors need little memory\n");
    printf("  active / resident   mean %s, max %s%s\n", pct(r->s.active_fraction_mean, b1, 64),
           pct(r->s.active_fraction_max, b2, 64),
           r->prm->capacity_bytes ? "" : "   (paper, of GPU capacity: 1.7% mean, <14% max)");
    if (r->prm->capacity_bytes) {
        printf("  active / capacity   mean %s, max %s   paper: 1.7%% mean, <14%% "
               "max\n",
               pct(r->s.active_capacity_fraction_mean, b1, 64),
               pct(r->s.active_capacity_fraction_max, b2, 64));
    } else {
        printf("  (pass --capacity to compare with the GPU capacity as the paper "
               "does)\n");
    }
    printf("Observation 2: inactive tensors are large and idle long\n");
    size_t mid = r->s.periods_per_bucket[TIO_BUCKET_10_100MB] +
                 r->s.periods_per_bucket[TIO_BUCKET_100MB_1GB];
    if (mid) {
        printf("  periods of 10 MB-1 GB tensors idle > %s: %s of %zu   paper: >40%%\n\n",
               dur(r->prm->long_idle_ns, b1, 64), pct(r->s.long_idle_fraction_10mb_1gb, b2, 64),
               mid);
    } else {
        printf("  periods of 10 MB-1 GB tensors idle > %s: none (no such periods)   "
               "paper: >40%%\n\n",
               dur(r->prm->long_idle_ns, b1, 64));
    }

    printf("%-10s %10s %10s %12s %12s\n", "size", "tensors", "periods", "median idle",
           "> long-idle");
    for (int b = 0; b < TIO_BUCKET_COUNT; b++) {
        size_t n = r->s.periods_per_bucket[b];
        char m[64] = "-";
        if (n) {
            dur(tio_analysis_bucket_median(r->a, b), m, sizeof m);
        }
        size_t n_long = tio_analysis_bucket_count_above(r->a, b, r->prm->long_idle_ns);
        printf("%-10s %10zu %10zu %12s %12s\n", tio_size_bucket_name(b), r->s.tensors_per_bucket[b],
               n, m, n ? pct((double)n_long / (double)n, b3, 64) : "-");
    }
    if (r->n_top == 0) {
        if (want_top) {
            printf("\nno tensor of 10 MB or more has an inactive period\n");
        }
        return;
    }
    printf("\ntop %zu tensors >= 10 MB by longest inactive period\n", r->n_top);
    printf("%8s  %-24s %-12s %10s %12s %20s %12s %7s\n", "tensor", "name", "kind", "size",
           "longest idle", "kernels [start,end)", "total idle", "periods");
    for (size_t i = 0; i < r->n_top; i++) {
        const struct tio_idle_tensor *e = &r->top[i];
        const char *name = tio_trace_tensor_name(r->tr, e->tensor);
        char range[64];
        /* "w": the period wraps into the next iteration. */
        (void)snprintf(range, sizeof range, "[%" PRIu64 ",%" PRIu64 ")%s", e->longest.start,
                       e->longest.end, (e->longest.flags & TIO_PERIOD_WRAPS) ? "w" : "");
        printf("%8u  %-24.24s %-12s %10s %12s %20s %12s %7u\n", e->tensor, name ? name : "-",
               tio_tensor_kind_name(r->v.tensor_kind[e->tensor]),
               tio_format_bytes(r->v.tensor_bytes[e->tensor], b1, 64),
               dur(e->longest.duration_ns, b2, 64), range, dur(e->total_ns, b3, 64), e->n_periods);
    }
}

int cli_cmd_analyze(int argc, char **argv) {
    const char *path = NULL, *csv_dir = NULL;
    int json = 0;
    uint64_t top_n = 10;
    double long_idle_s = 0;
    struct tio_analysis_params prm = tio_analysis_params_default();
    const struct cli_opt opts[] = {
        { .name = "--json", .kind = CLI_FLAG, .dst = &json, .value = 1 },
        { .name = "--capacity", .kind = CLI_BYTES, .dst = &prm.capacity_bytes, CLI_LIMITS_MEMORY },
        /* the threshold is kept in 64-bit nanoseconds: at most 500 years */
        { .name = "--long-idle",
          .kind = CLI_DURATION,
          .dst = &long_idle_s,
          .min = 0,
          .max = 500 * 365.25 * 86400,
          .min_excl = 1 },
        { .name = "--csv", .kind = CLI_TEXT, .dst = &csv_dir },
        { .name = "--top", .kind = CLI_COUNT, .dst = &top_n, CLI_LIMITS_COUNT(0, 4294967295.0) },
    };
    struct cli_spec spec = { cmd_name, opts, sizeof opts / sizeof opts[0], usage, &path,
                             1,        0,    "one trace per run" };
    int prc = cli_parse_args(&spec, argc, argv, 1, NULL);
    if (prc) {
        return prc == CLI_HELP_SHOWN ? TIO_EXIT_OK : prc;
    }
    if (long_idle_s > 0) {
        prm.long_idle_ns = (uint64_t)llround(long_idle_s * 1e9);
    }
    if (!path) {
        cli_error(cmd_name, "missing TRACE (see teraio analyze --help)");
        return TIO_EXIT_USAGE;
    }

    struct tio_trace *tr = NULL;
    int rc = tio_trace_load(path, TIO_TRACE_FORMAT_AUTO, &tr);
    if (rc < 0) {
        int code = cli_fail(cmd_name, path, rc);
        return rc == TIO_ENOMEM ? code : TIO_EXIT_INPUT;
    }
    struct tio_analysis *a = NULL;
    rc = tio_analysis_new(tr, &prm, &a);
    if (rc < 0) {
        tio_trace_free(tr);
        return cli_fail(cmd_name, "analysis", rc);
    }
    int code = TIO_EXIT_OK;
    struct tio_trace_view tv;
    tio_trace_get_view(tr, &tv);
    size_t max_top = (size_t)top_n < tv.n_tensors ? (size_t)top_n : tv.n_tensors, n_top = 0;
    struct tio_idle_tensor *top = malloc((max_top ? max_top : 1) * sizeof *top);
    rc = top ? tio_analysis_top_idle(a, UINT64_C(10000000), top, max_top, &n_top) : TIO_ENOMEM;
    if (rc < 0) {
        code = cli_fail(cmd_name, "analysis", rc);
        goto done;
    }
    if (csv_dir) {
        rc = tio_analysis_write_csv(a, csv_dir);
        if (rc < 0) {
            code = cli_fail(cmd_name, "--csv", rc);
            goto done;
        }
    }
    struct report r = { .path = path, .tr = tr, .a = a, .prm = &prm, .top = top, .n_top = n_top };
    tio_analysis_get_summary(a, &r.s);
    tio_trace_get_view(tr, &r.v);
    if (json) {
        print_json(&r);
    } else {
        print_text(&r, top_n > 0);
        if (csv_dir) {
            printf("\nwrote %s/memory.csv, periods.csv, cdf.csv\n", csv_dir);
        }
    }
    if (fflush(stdout) != 0) {
        cli_error(cmd_name, "cannot write the output");
        code = TIO_EXIT_RUNTIME;
    }
done:
    free(top);
    tio_analysis_free(a);
    tio_trace_free(tr);
    return code;
}
