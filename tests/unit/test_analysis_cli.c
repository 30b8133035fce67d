/* teraio analyze end to end: a hand-checked trace saved as JSON and .tio, the CLI's --json and
 * --csv outputs against values computed by hand, and its exit codes. Needs TIO_CLI. */
#include <jansson.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <teraio/teraio.h>

#include "tio_test.h"

static const char *cli;
static char dir[256];

/*
 * The trace (4 kernels of 1, 2, 3, 4 ms; iteration 10 ms):
 *   t0 "w"  weight 50,000,000 B global, used by k0 and k2: gap [1,2) = 2 ms,
 *           wrap [3,4) = 4 ms (ends at N: first use is k0)
 *   t1 "m"  optim_state 200,000,000 B global, used by k3 only: wrap [4,7) = k0 k1 k2 = 6 ms
 *           (starts at N: last use is k3)
 *   t2 "a"  activation 20,000,000 B, used by k0 and k3: gap [1,3) = 2+3 = 5 ms
 *   t3 "x"  input 500 B, used by k1 only: no period
 * Resident: globals 250,000,000 everywhere, t2 on [0,3], t3 on [1,1]:
 *   k0 270,000,000  k1 270,000,500  k2 270,000,000  k3 270,000,000
 * Active: k0 w+a = 70,000,000; k1 x = 500; k2 w = 50,000,000; k3 m+a = 220,000,000.
 * Periods of [10 MB, 1 GB): 2, 4, 6, 5 ms; with --long-idle 4ms, those > 4 ms: 6 and 5 -> 0.5.
 */
static int make_trace(const char *path) {
    struct tio_trace *tr;
    uint32_t w, m, a, x;
    int rc = tio_trace_new(NULL, &tr);
    if (rc < 0) {
        return rc;
    }
    if ((rc = tio_trace_add_tensor(tr, 50000000, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "w", &w)) ||
        (rc = tio_trace_add_tensor(tr, 200000000, TIO_TENSOR_OPTIM_STATE, TIO_TENSOR_GLOBAL, "m",
                                   &m)) ||
        (rc = tio_trace_add_tensor(tr, 20000000, TIO_TENSOR_ACTIVATION, 0, "a", &a)) ||
        (rc = tio_trace_add_tensor(tr, 500, TIO_TENSOR_INPUT, 0, "x", &x)) ||
        (rc = tio_trace_add_kernel(tr, "fwd", 1000000, 0, NULL)) ||
        (rc = tio_trace_add_use(tr, w, TIO_USE_READ)) ||
        (rc = tio_trace_add_use(tr, a, TIO_USE_WRITE)) ||
        (rc = tio_trace_add_kernel(tr, "load", 2000000, 0, NULL)) ||
        (rc = tio_trace_add_use(tr, x, TIO_USE_READ)) ||
        (rc = tio_trace_add_kernel(tr, "fwd2", 3000000, 0, NULL)) ||
        (rc = tio_trace_add_use(tr, w, TIO_USE_READ)) ||
        (rc = tio_trace_add_kernel(tr, "adam", 4000000, TIO_KERNEL_OPTIM, NULL)) ||
        (rc = tio_trace_add_use(tr, m, TIO_USE_READ_WRITE)) ||
        (rc = tio_trace_add_use(tr, a, TIO_USE_READ)) || (rc = tio_trace_finish(tr)) ||
        (rc = tio_trace_save(tr, path, TIO_TRACE_FORMAT_AUTO))) {
        tio_trace_free(tr);
        return rc;
    }
    tio_trace_free(tr);
    return 0;
}

/* Run a shell command; its exit status, output into out (if not NULL). */
static int run(const char *cmd, char *out, size_t len) {
    FILE *p = popen(cmd, "r");
    if (!p) {
        return -1;
    }
    size_t n = 0;
    char tmp[4096];
    size_t got;
    while ((got = fread(tmp, 1, sizeof tmp, p)) > 0) {
        if (out && n + got < len) {
            memcpy(out + n, tmp, got);
            n += got;
        }
    }
    if (out) {
        out[n] = '\0';
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static uint64_t ju(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) {
        TIO_T_FAIL("JSON member %s missing or not an integer", key);
        return UINT64_MAX;
    }
    return (uint64_t)json_integer_value(v);
}

static double jd(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) {
        TIO_T_FAIL("JSON member %s missing or not a number", key);
        return -1;
    }
    return json_number_value(v);
}

static void check_json(const char *trace) {
    char cmd[1024], out[1 << 16];
    (void)snprintf(cmd, sizeof cmd,
                   "'%s' analyze '%s' --json --capacity 1GB --long-idle 4ms --top 2 --csv '%s/csv'",
                   cli, trace, dir);
    CHECK_EQ_I(run(cmd, out, sizeof out), 0);
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    if (!j) {
        TIO_T_FAIL("not JSON (%s): %s", err.text, out);
        return;
    }
    CHECK_EQ_U(ju(j, "n_kernels"), 4);
    CHECK_EQ_U(ju(j, "n_tensors"), 4);
    CHECK_EQ_U(ju(j, "n_uses"), 6);
    CHECK_EQ_U(ju(j, "n_periods"), 4);
    CHECK_EQ_U(ju(j, "inactive_periods"), 4);
    CHECK_EQ_U(ju(j, "iteration_ns"), 10000000);
    CHECK_EQ_U(ju(j, "global_bytes"), 250000000);
    CHECK_EQ_U(ju(j, "peak_resident_bytes"), 270000500);
    CHECK_EQ_U(ju(j, "peak_kernel"), 1);
    CHECK_STR(json_string_value(json_object_get(j, "peak_kernel_name")), "load");
    CHECK_EQ_U(ju(j, "peak_active_bytes"), 220000000);
    CHECK_EQ_U(ju(j, "capacity_bytes"), 1000000000);
    CHECK_EQ_U(ju(j, "long_idle_ns"), 4000000);
    double mean = (70000000.0 / 270000000 + 500.0 / 270000500 + 50000000.0 / 270000000 +
                   220000000.0 / 270000000) /
                  4;
    CHECK_NEAR(jd(j, "active_fraction_mean"), mean, 1e-15);
    CHECK_NEAR(jd(j, "active_fraction_max"), 220000000.0 / 270000000, 1e-15);
    CHECK_NEAR(jd(j, "active_capacity_fraction_mean"), 340000500.0 / 4 / 1e9, 1e-15);
    CHECK_NEAR(jd(j, "active_capacity_fraction_max"), 0.22, 1e-15);
    CHECK_NEAR(jd(j, "long_idle_fraction_10mb_1gb"), 0.5, 0);
    /* Buckets: w (50 MB) and a (20 MB) in 10-100MB, m (200 MB) in 100MB-1GB, x in <1MB. */
    static const uint64_t tpb[] = { 1, 0, 2, 1, 0 }, ppb[] = { 0, 0, 3, 1, 0 };
    json_t *a = json_object_get(j, "tensors_per_bucket"),
           *p = json_object_get(j, "periods_per_bucket");
    json_t *b = json_object_get(j, "buckets");
    CHECK(json_array_size(a) == 5 && json_array_size(p) == 5 && json_array_size(b) == 5);
    for (size_t i = 0; i < 5 && json_array_size(b) == 5; i++) {
        CHECK_EQ_U(json_integer_value(json_array_get(a, i)), tpb[i]);
        CHECK_EQ_U(json_integer_value(json_array_get(p, i)), ppb[i]);
        CHECK_EQ_U(ju(json_array_get(b, i), "periods"), ppb[i]);
    }
    /* 10-100MB periods sorted: 2, 4, 5 ms: lower median 4 ms; > 4 ms: one. */
    CHECK_EQ_U(ju(json_array_get(b, 2), "median_idle_ns"), 4000000);
    CHECK_EQ_U(ju(json_array_get(b, 2), "long_idle_periods"), 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(b, 3), "name")), "100MB-1GB");
    /* Top 2 by longest period: m (6 ms, wraps [4,7)), then a (5 ms, [1,3)). */
    json_t *top = json_object_get(j, "top");
    CHECK_EQ_U(json_array_size(top), 2);
    if (json_array_size(top) == 2) {
        json_t *t0 = json_array_get(top, 0), *t1 = json_array_get(top, 1);
        CHECK_EQ_U(ju(t0, "tensor"), 1);
        CHECK_STR(json_string_value(json_object_get(t0, "name")), "m");
        CHECK_EQ_U(ju(t0, "start"), 4);
        CHECK_EQ_U(ju(t0, "end"), 7);
        CHECK(json_is_true(json_object_get(t0, "wraps")));
        CHECK_EQ_U(ju(t1, "tensor"), 2);
        CHECK_EQ_U(ju(t1, "longest_idle_ns"), 5000000);
        CHECK(json_is_false(json_object_get(t1, "wraps")));
    }
    json_decref(j);

    char path[512], text[4096];
    (void)snprintf(path, sizeof path, "%s/csv/periods.csv", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        (void)fclose(f);
        /* 2 x bytes / duration: 1e8 B / 2 ms = 5e10; 1e8 / 4 ms = 2.5e10; 4e7 / 5 ms = 8e9;
         * 4e8 / 6 ms = 66666666666.7, rounded up. */
        CHECK_STR(text, "tensor,kind,bytes,start,end,duration_ns,wraps,min_bandwidth_Bps\n"
                        "0,weight,50000000,1,2,2000000,0,50000000000\n"
                        "2,activation,20000000,1,3,5000000,0,8000000000\n"
                        "0,weight,50000000,3,4,4000000,1,25000000000\n"
                        "1,optim_state,200000000,4,7,6000000,1,66666666667\n");
    }
}

TIO_TEST(json_and_binary_traces) {
    char path[512];
    (void)snprintf(path, sizeof path, "%s/t.json", dir);
    CHECK_OK(make_trace(path));
    check_json(path);
    (void)snprintf(path, sizeof path, "%s/t.tio", dir);
    CHECK_OK(make_trace(path));
    check_json(path);
}

TIO_TEST(human_output) {
    char cmd[1024], out[1 << 16];
    (void)snprintf(cmd, sizeof cmd, "'%s' analyze '%s/t.json' --capacity 1GB --long-idle 4ms", cli,
                   dir);
    CHECK_EQ_I(run(cmd, out, sizeof out), 0);
    CHECK(strstr(out, "paper: 1.7% mean, <14% max") != NULL);
    CHECK(strstr(out, "paper: >40%") != NULL);
    CHECK(strstr(out, "at kernel 1 (load)") != NULL);
    CHECK(strstr(out, "50.0% of 4") != NULL); /* Observation 2: 2 of the 4 periods > 4 ms */
}

TIO_TEST(exit_codes) {
    char cmd[1024], out[1 << 16];
    char path[512];
    (void)snprintf(path, sizeof path, "%s/bad.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        (void)fputs("{\"format\": \"teraio-trace\", \"version\": 1, \"tensors\": [], "
                    "\"kernels\": [{\"name\": \"k\", \"duration_ns\": 1, \"uses\": [[3, \"r\"]]}]}",
                    f);
        (void)fclose(f);
    }
    (void)snprintf(cmd, sizeof cmd, "'%s' analyze '%s' 2>&1", cli, path);
    CHECK_EQ_I(run(cmd, out, sizeof out), 2);
    CHECK(strstr(out, "bad.json") != NULL);
    (void)snprintf(cmd, sizeof cmd, "'%s' analyze '%s/none.tio' 2>&1", cli, dir);
    CHECK_EQ_I(run(cmd, out, sizeof out), 2);
    (void)snprintf(cmd, sizeof cmd, "'%s' analyze 2>&1", cli);
    CHECK_EQ_I(run(cmd, out, sizeof out), 1);
    (void)snprintf(cmd, sizeof cmd, "'%s' analyze '%s/t.json' --top -3 2>&1", cli, dir);
    CHECK_EQ_I(run(cmd, out, sizeof out), 1);
    (void)snprintf(cmd, sizeof cmd, "'%s' analyze --help", cli);
    CHECK_EQ_I(run(cmd, out, sizeof out), 0);
    CHECK(strstr(out, "examples:") != NULL);
}

int main(void) {
    cli = getenv("TIO_CLI");
    if (!cli || !*cli || access(cli, X_OK) != 0) {
        TIO_SKIP("TIO_CLI is not set to the built teraio CLI");
    }
    (void)snprintf(dir, sizeof dir, "/tmp/tio_test_analysis_cli_%d", (int)getpid());
    char cmd[512];
    (void)snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (run(cmd, NULL, 0) != 0) {
        TIO_SKIP("cannot create %s", dir);
    }
    RUN(json_and_binary_traces);
    RUN(human_output);
    RUN(exit_codes);
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)run(cmd, NULL, 0);
    return tio_test_done();
}
