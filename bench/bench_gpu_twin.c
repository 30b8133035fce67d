/*
 * The GPU twin: the real stream-ordered executor and migration engine (libteraio, the "cuda"
 * backend) driving Llama-style traces on the fake CUDA runtime's timed mode
 * (tests/io/fakes/fake_cudart_timed.c): kernels last their trace durations on a compute stream,
 * one copy engine per PCIe direction moves the bytes at the configured rate, a full launch queue
 * blocks the host, the SSD tier is this machine's disk behind an emulated drive at the modelled
 * array's rates (the thread-pool backends' throttle_* options, src/io/throttle.h). Bytes and
 * bandwidths are divided by one factor (--byte-scale) so that a large model fits in this machine's
 * memory; times are unchanged. Per run it prints the twin's step time, the ideal (kernels back to
 * back), the simulator's prediction for the same trace, plan and rates, stalls by reason and the
 * training thread's CPU time per kernel. Self-check: with no moves the twin must equal its ideal
 * within 2% (exit 1 otherwise). docs/bench/twin.md has the method and the results. This file:
 * the options, the traces and the output; one run is gpu_twin_run.c's (gpu_twin.h).
 *
 * usage: bench_gpu_twin [--json] [--quick] [--iters N] [--byte-scale S] [--time-scale T]
 *                       [--tiers LIST] [--budget F] [--models LIST] [--trace FILE]...
 *                       [--no-model] [--no-offloader] [--dir DIR] [--no-throttle] [--depth N]
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <teraio/model.h>
#include <teraio/status.h>
#include <teraio/trace.h>

#include "benchutil.h"
#include "gpu_twin.h"

struct fake_cuda twin_fc;
const char *const twin_tier_names[] = { "bare", "none", "host", "ssd", "both" };

_Noreturn void twin_die(const char *what, int rc) {
    (void)(void)fprintf(stderr, "bench_gpu_twin: %s: %d (%s)\n", what, rc, tio_last_error());
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): the engine's threads are not running here */
    exit(1);
}

/* ---- traces ----------------------------------------------------------------------------- */

/* The built-in traces: a 1.1B Llama-style model, 16 layers of width 2048, fp32 on an H100 NVL
 * (about 3.2k tensors, 3.8k kernels), with two micro-batches per iteration. Equivalent to
 * `teraio model --preset custom --layers 16 --hidden 2048 --heads 16 --kv-heads 4
 * --ffn-hidden 8192 --vocab 32000 --pp 1` and then, for `llama-1b`, `--seq 1024 --batch 4
 * --micro-batch 2`; for `llama-1b-long`, `--seq 2048 --batch 8 --micro-batch 4` (four times the
 * tokens per micro-batch: more compute per byte moved, so that its plan at half the peak hides
 * every transfer). */
static const struct builtin {
    const char *name;
    uint32_t seq, batch, micro;
} builtins[] = { { "llama-1b", 1024, 4, 2 }, { "llama-1b-long", 2048, 8, 4 } };
#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

/* name is one of the comma-separated list's items */
static int has_name(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) {
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static struct tio_trace *model_trace(const struct builtin *m) {
    struct tio_model_params p;
    int rc = tio_model_preset("llama3-8b", &p);
    if (rc < 0) {
        twin_die("tio_model_preset", rc);
    }
    (void)snprintf(p.model, sizeof p.model, "custom");
    p.layers = 16;
    p.hidden = 2048;
    p.heads = 16;
    p.kv_heads = 4;
    p.head_dim = 0;
    p.ffn_hidden = 8192;
    p.vocab = 32000;
    p.seq_len = m->seq;
    p.global_batch = m->batch;
    p.micro_batch = m->micro;
    p.grad_accum = 0;
    p.pp = 1;
    p.rank = 0;
    struct tio_trace *tr = NULL;
    struct tio_model_info info;
    if ((rc = tio_model_generate(&p, &tr, &info)) < 0) {
        twin_die("tio_model_generate", rc);
    }
    return tr;
}

/* tr with every tensor's bytes divided by s (rounded up to 512) and every kernel's duration
 * multiplied by ts, uses unchanged. */
static struct tio_trace *scaled_trace(const struct tio_trace *tr, double s, double ts) {
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    struct tio_trace *out = NULL;
    int rc = tio_trace_new(NULL, &out);
    for (size_t t = 0; t < v.n_tensors && rc == 0; t++) {
        uint64_t b = (uint64_t)ceil((double)v.tensor_bytes[t] / s);
        b = (b + 511) & ~(uint64_t)511;
        rc = tio_trace_add_tensor(out, b, v.tensor_kind[t], v.tensor_flags[t],
                                  tio_trace_string(tr, v.tensor_name[t]), NULL);
    }
    for (size_t k = 0; k < v.n_kernels && rc == 0; k++) {
        rc = tio_trace_add_kernel(out, tio_trace_string(tr, v.kernel_name[k]),
                                  (uint64_t)((double)v.kernel_duration_ns[k] * ts),
                                  v.kernel_flags[k], NULL);
        for (uint64_t u = v.kernel_use_offset[k]; u < v.kernel_use_offset[k + 1] && rc == 0; u++) {
            rc = tio_trace_add_use(out, v.use_tensor[u], v.use_mode[u]);
        }
    }
    return bench_trace_finish(out, rc, "scaled trace");
}

/* ---- output ------------------------------------------------------------------------------- */

static void print_json(const struct result *r) {
    if (r->error[0]) {
        printf("{\"trace\":\"%s\",\"tier\":\"%s\",\"budget\":%.2f,\"budget_bytes\":%llu,"
               "\"tensors\":%llu,\"kernels\":%llu,\"error\":\"",
               r->trace, twin_tier_names[r->tier], r->budget_frac, (unsigned long long)r->budget,
               (unsigned long long)r->tensors, (unsigned long long)r->kernels);
        for (const char *p = r->error; *p; p++) {
            printf(*p == '"' || *p == '\\' ? "\\%c" : (unsigned char)*p < 32 ? " " : "%c", *p);
        }
        printf("\"}\n");
        return;
    }
    printf("{\"trace\":\"%s\",\"tier\":\"%s\",\"budget\":%.2f,\"budget_bytes\":%llu,"
           "\"peak_bytes\":%llu,\"tensors\":%llu,\"kernels\":%llu,\"moves\":%llu,"
           "\"byte_scale\":%.0f,\"time_scale\":%.4f,\"twin_step_s\":%.6f,\"host_s\":%.6f,\"ideal_"
           "s\":%.6f,\"predicted_"
           "step_s\":%.6f,"
           "\"stall_s\":%.6f,"
           "\"read_stall_s\":%.6f,\"pressure_stall_s\":%.6f,\"demand_stall_s\":%.6f,"
           "\"queue_full\":%llu,\"urgent_reads\":%llu,\"offloads\":%llu,\"prefetches\":%llu,"
           "\"tier_fallbacks\":%llu,\"host_copies_dropped\":%llu,\"clean_offloads\":%llu,"
           "\"h2d_busy\":%.3f,\"d2h_busy\":%.3f,\"pageable_copies\":%llu,"
           "\"thread_us_per_kernel\":%.2f,\"gpu_event_wait_s\":%.6f,\"gpu_event_waits\":%.1f,"
           "\"gpu_host_late_s\":%.6f,\"drive_read_Bps\":%.0f,\"drive_write_Bps\":%.0f,"
           "\"drive_behind_s\":%.6f,\"drive_behind_max_s\":%.6f,\"drive_read_bytes\":%.0f,"
           "\"drive_write_bytes\":%.0f,\"drive_busy_s\":%.6f,\"predicted_ssd_read_bytes\":%.0f,"
           "\"predicted_ssd_write_bytes\":%.0f,\"predicted_stall_data_s\":%.6f,"
           "\"predicted_stall_memory_s\":%.6f,",
           r->trace, twin_tier_names[r->tier], r->budget_frac, (unsigned long long)r->budget,
           (unsigned long long)r->peak, (unsigned long long)r->tensors,
           (unsigned long long)r->kernels, (unsigned long long)r->moves, r->byte_scale,
           r->time_scale, r->twin_s, r->host_s, r->ideal_s,
           isnan(r->predicted_s) ? -1.0 : r->predicted_s, r->stall_s, r->read_stall_s,
           r->pressure_s, r->demand_s, (unsigned long long)r->queue_full,
           (unsigned long long)r->urgent, (unsigned long long)r->offloads,
           (unsigned long long)r->prefetches, (unsigned long long)r->fallbacks,
           (unsigned long long)r->copies_dropped, (unsigned long long)r->clean, r->h2d_util,
           r->d2h_util, (unsigned long long)r->pageable, r->us_per_kernel, r->dep_wait_s,
           r->dep_waits, r->late_s, r->drive_read_Bps, r->drive_write_Bps, r->drive_behind_s,
           r->drive_behind_max_s, r->drive_rd_B, r->drive_wr_B, r->drive_busy_s, r->sim_rd_B,
           r->sim_wr_B, r->sim_stall_data_s, r->sim_stall_mem_s);
    static const char *const why[5] = { "read", "write", "budget", "end", "other" };
    for (int i = 0; i < 5; i++) { /* per step */
        printf("\"wait_%s_count\":%.1f,\"wait_%s_s\":%.6f%s", why[i], r->wait_n[i], why[i],
               r->wait_s[i], i < 4 ? "," : "}\n");
    }
}

static void print_row(const struct result *r) {
    if (r->error[0]) {
        printf("%-15s %-5s %4.0f%% %6llu  FAILED: %s\n", r->trace, twin_tier_names[r->tier],
               100 * r->budget_frac, (unsigned long long)r->tensors, r->error);
        return;
    }
    printf("%-15s %-5s %4.0f%% %6llu %7.3f %7.3f %7.3f %6.3f %7.3f %6.3f %6.3f %6.3f %5llu %5.2f "
           "%5.2f %7.2f\n",
           r->trace, twin_tier_names[r->tier], 100 * r->budget_frac, (unsigned long long)r->tensors,
           r->twin_s, r->ideal_s, r->predicted_s, r->twin_s / r->ideal_s, r->host_s,
           r->read_stall_s, r->pressure_s, r->demand_s, (unsigned long long)r->queue_full,
           r->h2d_util, r->d2h_util, r->us_per_kernel);
}

static void usage(void) {
    (void)fprintf(
        stderr,
        "usage: bench_gpu_twin [--json] [--quick] [--iters N] [--byte-scale S] [--tiers "
        "LIST]\n"
        "                      [--budget F] [--models LIST] [--trace FILE]... [--no-model]\n"
        "                      [--no-offloader] [--time-scale T] [--dir DIR] [--no-throttle] "
        "[--depth N]\n"
        "  --tiers LIST   comma-separated of none,host,ssd,both (default all)\n"
        "  --budget F     device budget as a fraction of the peak (default 0.5)\n"
        "  --byte-scale S bytes and bandwidths divided by S (default: per trace, the power\n"
        "                 of 2 that brings its peak under 400 MiB)\n"
        "  --time-scale T kernel durations times T, bandwidths divided by T (default: 1, or\n"
        "                 less for a trace whose iteration takes over 1 s: then 1 s)\n"
        "  --iters N      measured iterations after one warm-up (default 3; --quick: 1)\n"
        "  --trace FILE   also run a saved trace (.tio or .json), e.g. an Offloader's\n"
        "  --models LIST  built-in 1.1B Llama traces (teraio model), comma-separated of\n"
        "                 llama-1b (2 x 2 x 1024 tokens; the default),\n"
        "                 llama-1b-long (2 x 4 x 2048 tokens)\n"
        "  --no-model     skip the built-in traces\n"
        "  --no-offloader skip the shipped Offloader trace (bench/data/offloader-llama.tio)\n"
        "  --dir DIR      the SSD tier's directory (default: a new one under $TMPDIR)\n"
        "  --depth N      the engine's queue depth (default: its own, 16)\n"
        "  --no-throttle  the SSD tier at the disk's own speed (default: an emulated drive\n"
        "                 at the modelled array's rates and latency, scaled)\n");
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs yet */
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o) {
    *o = (struct opts){
        .iters = 3, .byte_scale = 0, .budget_frac = 0.5, .tiers = "none,host,ssd,both"
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--quick")) {
            o->iters = 1;
        } else if (!strcmp(a, "--no-model")) {
            o->no_model = 1;
        } else if (!strcmp(a, "--no-offloader")) {
            o->no_offloader = 1;
        } else if (!strcmp(a, "--no-throttle")) {
            o->no_throttle = 1;
        } else if (val && !strcmp(a, "--iters")) {
            o->iters = bench_int(val), i++;
        } else if (val && !strcmp(a, "--byte-scale")) {
            o->byte_scale = bench_double(val), i++;
        } else if (val && !strcmp(a, "--time-scale")) {
            o->time_scale = bench_double(val), i++;
        } else if (val && !strcmp(a, "--depth")) {
            o->depth = bench_int(val), i++;
        } else if (val && !strcmp(a, "--budget")) {
            o->budget_frac = bench_double(val), i++;
        } else if (val && !strcmp(a, "--models")) {
            o->models = val, i++;
        } else if (val && !strcmp(a, "--tiers")) {
            o->tiers = val, i++;
        } else if (val && !strcmp(a, "--dir")) {
            o->dir = val, i++;
        } else if (val && !strcmp(a, "--trace") && o->ntraces < MAX_TRACES) {
            o->traces[o->ntraces++] = val, i++;
        } else {
            (void)fprintf(stderr, "bench_gpu_twin: unknown or incomplete option %s\n", a);
            usage();
        }
    }
    for (const char *p = o->models; p;) { /* every name a built-in one */
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p), k = 0;
        while (k < N_BUILTINS &&
               !(strlen(builtins[k].name) == len && !strncmp(p, builtins[k].name, len))) {
            k++;
        }
        if (k == N_BUILTINS) {
            (void)fprintf(stderr, "bench_gpu_twin: --models: unknown trace '%.*s'\n", (int)len, p);
            usage();
        }
        p = end ? end + 1 : NULL;
    }
    if (o->iters < 1 || o->depth < 0 || o->depth > 4096 ||
        !(o->byte_scale == 0 || o->byte_scale >= 1) || !(o->time_scale >= 0) ||
        !(o->budget_frac > 0 && o->budget_frac <= 1)) {
        (void)fprintf(
            stderr,
            "bench_gpu_twin: --iters >= 1, --byte-scale >= 1 (or 0: auto), 0 < --budget <= 1, "
            "--depth 0..4096\n");
        usage();
    }
}

int main(int argc, char **argv) {
    struct opts o;
    parse(argc, argv, &o);
    /* NOLINTBEGIN(concurrency-mt-unsafe): no other thread runs yet */
#ifdef TIO_FAKE_CUDART_PATH
    if (setenv("TIO_CUDART_LIB", TIO_FAKE_CUDART_PATH, 0) != 0) {
        twin_die("setenv", -errno);
    }
#endif
    if (fake_cuda_load(&twin_fc) < 0) {
        return 1;
    }
    char tmp[512] = "";
    if (!o.dir) {
        const char *base = getenv("TMPDIR");
        /* NOLINTEND(concurrency-mt-unsafe) */
        (void)snprintf(tmp, sizeof tmp, "%s/tio-twin-XXXXXX", base && *base ? base : "/var/tmp");
        if (!mkdtemp(tmp)) {
            twin_die("mkdtemp", -errno);
        }
        o.dir = tmp;
    }
    struct tio_trace *raw[MAX_TRACES + N_BUILTINS];
    const char *names[MAX_TRACES + N_BUILTINS];
    char *owned[MAX_TRACES + N_BUILTINS] = { NULL };
    int n = 0;
    for (size_t i = 0; i < N_BUILTINS && !o.no_model; i++) {
        if (o.models ? has_name(o.models, builtins[i].name) : i == 0) {
            raw[n] = model_trace(&builtins[i]);
            names[n++] = builtins[i].name;
        }
    }
#ifdef TIO_TWIN_OFFLOADER_TRACE
    if (!o.no_offloader && o.ntraces < MAX_TRACES) { /* shipped: bench/gpu_twin_offloader.py */
        o.traces[o.ntraces++] = TIO_TWIN_OFFLOADER_TRACE;
    }
#endif
    for (int i = 0; i < o.ntraces; i++) {
        int rc = tio_trace_load(o.traces[i], TIO_TRACE_FORMAT_AUTO, &raw[n]);
        if (rc < 0) {
            twin_die(o.traces[i], rc);
        }
        const char *slash = strrchr(o.traces[i], '/');
        char *base = strdup(slash ? slash + 1 : o.traces[i]),
             *dot = base ? strrchr(base, '.') : NULL;
        if (!base) {
            twin_die("strdup", TIO_ENOMEM);
        }
        if (dot && dot != base) {
            *dot = '\0';
        }
        owned[n] = base;
        names[n++] = base;
    }
    if (!o.json) {
        printf("%d measured iteration(s) after a warm-up, SSD tier in %s\n"
               "%-15s %-5s %5s %6s %7s %7s %7s %6s %7s %6s %6s %6s %5s %5s %5s %7s\n",
               o.iters, o.dir, "trace", "tier", "budg", "tens", "twin_s", "ideal", "predict",
               "x_idl", "host_s", "read", "press", "demand", "qfull", "h2d", "d2h", "us/kern");
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double ideal = (double)tio_trace_total_duration_ns(raw[i]) * 1e-9;
        double ts = o.time_scale > 0 ? o.time_scale : ideal > 1 ? 1 / ideal : 1;
        uint64_t peak = twin_raw_peak(raw[i]);
        double bs = o.byte_scale;
        if (bs == 0) {
            for (bs = 1; (double)peak / bs > 400.0 * 1024 * 1024;) {
                bs *= 2;
            }
        }
        /* the planner's smallest movable tensor: 1 MiB, or a thousandth of a small trace's peak */
        uint64_t min_bytes =
            (uint64_t)((double)(peak / 1000 < (1u << 20) ? peak / 1000 : 1u << 20) / bs);
        struct tio_trace *tr = scaled_trace(raw[i], bs, ts);
        for (int t = TIER_BARE; t <= TIER_BOTH; t++) {
            if (t != TIER_BARE && !strstr(o.tiers, twin_tier_names[t])) {
                continue;
            }
            struct result r;
            twin_run(&o, names[i], tr, bs, ts, min_bytes, (enum tier)t, &r);
            if (o.json) {
                print_json(&r);
            } else {
                print_row(&r);
            }
            (void)fflush(stdout);
            if (t == TIER_BARE && (r.error[0] || fabs(r.twin_s / r.ideal_s - 1) > 0.02)) {
                (void)fprintf(stderr,
                              "bench_gpu_twin: self-check failed on %s: the kernels alone took "
                              "%.4f s on the twin, their ideal is %.4f s (more than 2%% apart)\n",
                              names[i], r.twin_s, r.ideal_s);
                bad = 1;
            }
        }
        tio_trace_free(tr);
        tio_trace_free(raw[i]);
        free(owned[i]);
    }
    if (tmp[0]) { /* the engine removed its files; the directory is ours */
        if (rmdir(tmp) != 0) {
            (void)fprintf(stderr, "bench_gpu_twin: could not remove %s\n", tmp);
        }
    }
    return bad;
}
