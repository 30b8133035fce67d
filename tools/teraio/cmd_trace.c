/* teraio trace info|validate|convert: inspect, check and convert trace files. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/alloc_internal.h>
#include <teraio/trace.h>
#include <teraio/units.h>

#include "cli.h"

#define CMD "trace"

static void usage(FILE *f) {
    (void)fputs(
        "usage: teraio trace info FILE [--json] [--top N]\n"
        "       teraio trace validate FILE\n"
        "       teraio trace convert IN OUT [--format binary|json]\n"
        "\n"
        "  info      counts, iteration time (sum of kernel durations), total and global bytes,\n"
        "            bytes by tensor kind, metadata and the kernels (grouped by name) that\n"
        "            take the most time; --json prints it as one JSON object; --top N (10)\n"
        "  validate  read and fully check FILE; prints 'valid' and exits 0, or prints the\n"
        "            offending field and exits 2\n"
        "  convert   read IN (either format) and write OUT; the format is --format, else JSON\n"
        "            for an OUT ending in .json and binary otherwise. OUT is replaced\n"
        "            atomically (never left truncated)\n"
        "\n"
        "Formats are detected by content (binary starts with TIOTRACE); see docs/trace-format.md.\n"
        "\n"
        "examples:\n"
        "  teraio trace info run.tio\n"
        "  teraio trace info run.tio --json --top 5\n"
        "  teraio trace validate tests/data/example.json\n"
        "  teraio trace convert run.tio run.json\n"
        "  teraio trace convert edited.json run.tio --format binary\n"
        "\n" TIO_CLI_EXIT_HELP,
        f);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...) {
    va_list ap;
    (void)fprintf(stderr, "teraio trace: ");
    va_start(ap, fmt);
    (void)vfprintf(stderr, fmt, ap);
    va_end(ap);
    (void)fprintf(stderr, "\n(teraio trace --help for usage)\n");
    return TIO_EXIT_USAGE;
}

/* "binary" or "json" by the file's first bytes (the same rule as the loader's AUTO). */
static const char *detect_format(const char *path) {
    char head[8] = { 0 };
    FILE *f = fopen(path, "rb");
    if (!f) {
        return "unknown";
    }
    size_t n = fread(head, 1, sizeof head, f);
    (void)fclose(f);
    return n == 8 && memcmp(head, "TIOTRACE", 8) == 0 ? "binary" : "json";
}

struct name_stat {
    const char *name; /* NULL: unnamed kernels */
    uint64_t count;
    uint64_t ns;
};

static int cmp_by_name(const void *a, const void *b) {
    const struct name_stat *x = a, *y = b;
    if (!x->name || !y->name) {
        return (x->name != NULL) - (y->name != NULL);
    }
    return strcmp(x->name, y->name);
}

static int cmp_by_time(const void *a, const void *b) {
    const struct name_stat *x = a, *y = b;
    if (x->ns != y->ns) {
        return x->ns < y->ns ? 1 : -1;
    }
    return cmp_by_name(a, b);
}

/* Per-name totals, sorted by time (descending). Names are grouped by content, not string index,
 * so that duplicate strings in a file still land in one group. Returns the group count. */
static size_t kernel_groups(const struct tio_trace *tr, struct name_stat **out) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    size_t ns = v.n_strings + 1; /* last slot: unnamed */
    struct name_stat *s = tio_calloc(ns, sizeof *s);
    if (!s) {
        *out = NULL;
        return 0;
    }
    for (size_t i = 0; i < v.n_strings; i++) {
        s[i].name = tio_trace_string(tr, (uint32_t)i);
    }
    for (size_t k = 0; k < v.n_kernels; k++) {
        size_t slot = v.kernel_name[k] == TIO_NO_NAME ? ns - 1 : v.kernel_name[k];
        s[slot].count++;
        s[slot].ns += v.kernel_duration_ns[k];
    }
    qsort(s, ns, sizeof *s, cmp_by_name);
    size_t m = 0;
    for (size_t i = 0; i < ns; i++) {
        if (!s[i].count) {
            continue;
        }
        if (m && cmp_by_name(&s[m - 1], &s[i]) == 0) {
            s[m - 1].count += s[i].count;
            s[m - 1].ns += s[i].ns;
        } else {
            s[m++] = s[i];
        }
    }
    qsort(s, m, sizeof *s, cmp_by_time);
    *out = s;
    return m;
}

static int cmd_info(const char *path, int json, uint64_t top) {
    struct tio_trace *tr = NULL;
    int rc = tio_trace_load(path, TIO_TRACE_FORMAT_AUTO, &tr);
    if (rc < 0) {
        return cli_fail(CMD, path, rc);
    }
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    uint64_t kind_bytes[TIO_TENSOR_KIND_COUNT] = { 0 }, kind_count[TIO_TENSOR_KIND_COUNT] = { 0 };
    uint64_t total = 0, global = 0, n_global = 0, flag_count[3] = { 0 };
    for (size_t t = 0; t < v.n_tensors; t++) {
        kind_bytes[v.tensor_kind[t]] += v.tensor_bytes[t];
        kind_count[v.tensor_kind[t]]++;
        total += v.tensor_bytes[t];
        if (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            global += v.tensor_bytes[t];
            n_global++;
        }
    }
    for (size_t k = 0; k < v.n_kernels; k++) {
        for (unsigned f = 0; f < 3; f++) {
            flag_count[f] += (v.kernel_flags[k] >> f) & 1u;
        }
    }
    uint64_t iter_ns = tio_trace_total_duration_ns(tr), hash = 0;
    if (tio_trace_hash(tr, &hash) < 0) {
        hash = 0;
    }
    struct name_stat *groups = NULL;
    size_t ng = kernel_groups(tr, &groups);
    if (!groups) {
        tio_trace_free(tr);
        cli_error(CMD, "out of memory");
        return TIO_EXIT_RUNTIME;
    }
    size_t shown = top < ng ? (size_t)top : ng;
    const char *fmt = detect_format(path);
    char b1[32], b2[32];
    if (json) {
        printf("{\"file\": ");
        cli_json_string(stdout, path);
        printf(", \"format\": \"%s\", \"kernels\": %zu, \"tensors\": %zu, \"uses\": %zu,\n", fmt,
               v.n_kernels, v.n_tensors, v.n_uses);
        printf(" \"iteration_ns\": %llu, \"total_bytes\": %llu, \"global_bytes\": %llu, "
               "\"global_tensors\": %llu, \"hash\": \"%016llx\",\n",
               (unsigned long long)iter_ns, (unsigned long long)total, (unsigned long long)global,
               (unsigned long long)n_global, (unsigned long long)hash);
        printf(" \"kernel_flags\": {\"comm\": %llu, \"optim\": %llu, \"backward\": %llu},\n",
               (unsigned long long)flag_count[0], (unsigned long long)flag_count[1],
               (unsigned long long)flag_count[2]);
        printf(" \"by_kind\": {");
        for (int k = 0; k < TIO_TENSOR_KIND_COUNT; k++) {
            printf("%s\"%s\": {\"tensors\": %llu, \"bytes\": %llu}", k ? ", " : "",
                   tio_tensor_kind_name(k), (unsigned long long)kind_count[k],
                   (unsigned long long)kind_bytes[k]);
        }
        printf("},\n \"meta\": {");
        for (size_t i = 0; i < tio_trace_meta_count(tr); i++) {
            const char *key, *val;
            if (tio_trace_meta_at(tr, i, &key, &val) == 0) {
                printf("%s", i ? ", " : "");
                cli_json_string(stdout, key);
                printf(": ");
                cli_json_string(stdout, val);
            }
        }
        printf("},\n \"top_kernels\": [");
        for (size_t i = 0; i < shown; i++) {
            printf("%s{\"name\": ", i ? ", " : "");
            if (groups[i].name) {
                cli_json_string(stdout, groups[i].name);
            } else {
                printf("null");
            }
            printf(", \"count\": %llu, \"duration_ns\": %llu}", (unsigned long long)groups[i].count,
                   (unsigned long long)groups[i].ns);
        }
        printf("]}\n");
    } else {
        printf("file            %s (%s)\n", path, fmt);
        printf("kernels         %zu (comm %llu, optim %llu, backward %llu)\n", v.n_kernels,
               (unsigned long long)flag_count[0], (unsigned long long)flag_count[1],
               (unsigned long long)flag_count[2]);
        printf("tensors         %zu (%llu global)\n", v.n_tensors, (unsigned long long)n_global);
        printf("uses            %zu\n", v.n_uses);
        printf("iteration time  %s (sum of kernel durations)\n",
               tio_format_duration((double)iter_ns * 1e-9, b1, sizeof b1));
        printf("total bytes     %s (%llu)\n", tio_format_bytes(total, b1, sizeof b1),
               (unsigned long long)total);
        printf("global bytes    %s (%llu)\n", tio_format_bytes(global, b1, sizeof b1),
               (unsigned long long)global);
        printf("hash            %016llx\n", (unsigned long long)hash);
        printf("bytes by kind\n");
        for (int k = 0; k < TIO_TENSOR_KIND_COUNT; k++) {
            if (kind_count[k]) {
                printf("  %-12s %8llu tensors  %12s\n", tio_tensor_kind_name(k),
                       (unsigned long long)kind_count[k],
                       tio_format_bytes(kind_bytes[k], b2, sizeof b2));
            }
        }
        if (tio_trace_meta_count(tr)) {
            printf("metadata\n");
        }
        for (size_t i = 0; i < tio_trace_meta_count(tr); i++) {
            const char *key, *val;
            if (tio_trace_meta_at(tr, i, &key, &val) == 0) {
                printf("  %s = %s\n", key, val);
            }
        }
        if (shown) {
            printf("top kernels by time\n");
            printf("  %-40s %8s %12s %7s\n", "name", "count", "time", "share");
        }
        for (size_t i = 0; i < shown; i++) {
            double share = iter_ns ? 100.0 * (double)groups[i].ns / (double)iter_ns : 0.0;
            printf("  %-40.40s %8llu %12s %6.1f%%\n", groups[i].name ? groups[i].name : "(unnamed)",
                   (unsigned long long)groups[i].count,
                   tio_format_duration((double)groups[i].ns * 1e-9, b1, sizeof b1), share);
        }
    }
    tio_free(groups);
    tio_trace_free(tr);
    return TIO_EXIT_OK;
}

static int cmd_validate(const char *path) {
    struct tio_trace *tr = NULL;
    int rc = tio_trace_load(path, TIO_TRACE_FORMAT_AUTO, &tr);
    if (rc < 0) {
        return cli_fail(CMD, path, rc);
    }
    printf("%s: valid (%zu kernels, %zu tensors, %zu uses)\n", path, tio_trace_kernel_count(tr),
           tio_trace_tensor_count(tr), tio_trace_use_count(tr));
    tio_trace_free(tr);
    return TIO_EXIT_OK;
}

static int cmd_convert(const char *in, const char *out, int32_t format) {
    struct tio_trace *tr = NULL;
    int rc = tio_trace_load(in, TIO_TRACE_FORMAT_AUTO, &tr);
    if (rc < 0) {
        return cli_fail(CMD, in, rc);
    }
    rc = tio_trace_save(tr, out, format);
    tio_trace_free(tr);
    if (rc < 0) {
        return cli_fail(CMD, out, rc); /* an OUT the user named wrong is 2, a failed write 3 */
    }
    return TIO_EXIT_OK;
}

/* --format of convert: binary or json. */
static int parse_format(void *ctx, const char *opt, const char *text) {
    if (strcmp(text, "binary") == 0) {
        *(int32_t *)ctx = TIO_TRACE_FORMAT_BINARY;
    } else if (strcmp(text, "json") == 0) {
        *(int32_t *)ctx = TIO_TRACE_FORMAT_JSON;
    } else {
        return usage_error("%s: '%s' is not binary or json", opt, text);
    }
    return 0;
}

int cli_cmd_trace(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return TIO_EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        usage(stdout);
        return TIO_EXIT_OK;
    }
    if (strcmp(sub, "info") != 0 && strcmp(sub, "validate") != 0 && strcmp(sub, "convert") != 0) {
        return usage_error("unknown subcommand '%s' (info, validate, convert)", sub);
    }
    const char *pos[2] = { NULL, NULL };
    int json = 0;
    uint64_t top = 10;
    int32_t format = TIO_TRACE_FORMAT_AUTO;
    const struct cli_opt opts[] = {
        /* info */
        { .name = "--json", .kind = CLI_FLAG, .dst = &json, .value = 1 },
        { .name = "--top", .kind = CLI_COUNT, .dst = &top, CLI_LIMITS_COUNT(0, 4294967295.0) },
        /* convert */
        { .name = "--format", .kind = CLI_CALL, .call = parse_format },
    };
    int is_info = strcmp(sub, "info") == 0, is_convert = strcmp(sub, "convert") == 0;
    struct cli_spec spec = { CMD,
                             is_convert ? opts + 2 : opts,
                             is_info ? 2 : is_convert,
                             usage,
                             pos,
                             2,
                             0,
                             "convert takes IN and OUT, info and validate one FILE" };
    int rc = cli_parse_args(&spec, argc, argv, 2, &format);
    if (rc) {
        return rc == CLI_HELP_SHOWN ? TIO_EXIT_OK : rc;
    }
    int npos = (int)spec.n_pos;
    if (strcmp(sub, "convert") == 0) {
        if (npos != 2) {
            return usage_error("%s needs IN and OUT", "convert");
        }
        return cmd_convert(pos[0], pos[1], format);
    }
    if (npos != 1) {
        return usage_error("%s %s", sub, npos ? "takes one FILE" : "needs a FILE");
    }
    return strcmp(sub, "info") == 0 ? cmd_info(pos[0], json, top) : cmd_validate(pos[0]);
}
