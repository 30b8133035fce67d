/* `teraio plan` and `teraio hw`: outputs, files and exit codes (runs the built CLI). */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <teraio/plan.h>
#include <teraio/trace.h>

#include "tio_test.h"

#define MB 1000000ull

static char tmpdir[128];
static char trace_path[256], hw_path[256], bad_hw_path[256];

static int run(const char *args, char *out, size_t outlen) {
    return tio_test_run_cli(args, out, outlen);
}

/* Same fixture as test_plan_teraio.c: W (global 100 MB, k0 and k9), X (100 MB, k3 and k6),
 * Y (60 MB, k4 and k5), ten 1 ms kernels; resident peaks at 260 MB. */
static int make_fixtures(void) {
    struct tio_trace *tr = NULL;
    uint32_t w, x, y, k;
    int rc = tio_trace_new(NULL, &tr);
    rc |= tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_WEIGHT, TIO_TENSOR_GLOBAL, "W", &w);
    rc |= tio_trace_add_tensor(tr, 100 * MB, TIO_TENSOR_ACTIVATION, 0, "X", &x);
    rc |= tio_trace_add_tensor(tr, 60 * MB, TIO_TENSOR_ACTIVATION, 0, "Y", &y);
    const char *names[10] = { "embed", "k1",    "k2", "mm_x", "mm_y",
                              "act_y", "use_x", "k7", "k8",   "adam" };
    for (uint32_t i = 0; i < 10; i++) {
        rc |= tio_trace_add_kernel(tr, names[i], 1000000, 0, &k);
        if (i == 0 || i == 9) {
            rc |= tio_trace_add_use(tr, w, i == 0 ? TIO_USE_READ : TIO_USE_READ_WRITE);
        } else if (i == 3 || i == 6) {
            rc |= tio_trace_add_use(tr, x, i == 3 ? TIO_USE_WRITE : TIO_USE_READ);
        } else if (i == 4 || i == 5) {
            rc |= tio_trace_add_use(tr, y, i == 4 ? TIO_USE_WRITE : TIO_USE_READ);
        }
    }
    rc |= tio_trace_finish(tr);
    (void)snprintf(trace_path, sizeof trace_path, "%s/wxy.tio", tmpdir);
    rc |= tio_trace_save(tr, trace_path, TIO_TRACE_FORMAT_BINARY);
    tio_trace_free(tr);
    (void)snprintf(hw_path, sizeof hw_path, "%s/tiny.json", tmpdir);
    FILE *f = fopen(hw_path, "w");
    if (!f) {
        return -1;
    }
    (void)fprintf(f, "{\"base\": \"cpu-ci\", \"name\": \"tiny\", \"gpu_memory_bytes\": \"170MB\","
                     " \"gpu_reserve_bytes\": 0, \"ssd_count\": 1, \"ssd_read_Bps\": \"50GB/s\","
                     " \"ssd_write_Bps\": \"50GB/s\", \"ssd_efficiency\": 1, \"ssd_latency_s\": 0,"
                     " \"pcie_h2d_Bps\": \"1000GB/s\", \"pcie_d2h_Bps\": \"1000GB/s\","
                     " \"host_offload_cap_bytes\": 0}\n");
    (void)fclose(f);
    (void)snprintf(bad_hw_path, sizeof bad_hw_path, "%s/bad.json", tmpdir);
    f = fopen(bad_hw_path, "w");
    if (!f) {
        return -1;
    }
    (void)fprintf(f, "{\"base\": \"cpu-ci\", \"ssd_write_Bps\": -6.5e9}\n");
    (void)fclose(f);
    return rc < 0 ? -1 : 0;
}

TIO_TEST(help_and_usage_errors) {
    char out[8192], args[2048];
    CHECK_EQ_I(run("plan --help", out, sizeof out), 0);
    CHECK(strstr(out, "usage: teraio plan") != NULL);
    CHECK(strstr(out, "examples:") != NULL);
    CHECK_EQ_I(run("plan", out, sizeof out), 1);
    CHECK_EQ_I(run("plan x.tio --frobnicate", out, sizeof out), 1);
    CHECK_EQ_I(run("plan x.tio --hw", out, sizeof out), 1);
    (void)snprintf(args, sizeof args, "plan %s --capacity 12parsecs", trace_path);
    CHECK_EQ_I(run(args, out, sizeof out), 1);
    CHECK_EQ_I(run("plan /nonexistent/trace.tio", out, sizeof out), 2);
    (void)snprintf(args, sizeof args, "plan %s --policy lfu", trace_path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "teraio-mixed") != NULL); /* lists the known policies */
}

TIO_TEST(plan_json_and_file) {
    char out[8192], args[2048], plan_path[256];
    (void)snprintf(plan_path, sizeof plan_path, "%s/wxy.plan", tmpdir);
    (void)snprintf(args, sizeof args, "plan %s --hw %s --policy teraio-ssd -o %s --json --verify",
                   trace_path, hw_path, plan_path);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "\"planning_seconds\": ") != NULL);
    CHECK(strstr(out, "\"moves\": 2,") != NULL);
    CHECK(strstr(out, "\"feasible\": true") != NULL);
    CHECK(strstr(out, "\"planned_peak_bytes\": 160000000") != NULL);
    CHECK(strstr(out, "\"verified\": true") != NULL);
    struct tio_plan *p = NULL;
    CHECK_OK(tio_plan_load(plan_path, TIO_PLAN_FORMAT_AUTO, &p));
    CHECK(p != NULL);
    if (p) {
        size_t n;
        const struct tio_move *m = tio_plan_moves(p, &n);
        CHECK_EQ_U(n, 2);
        CHECK(n == 2 && m[0].trigger == 1 && m[0].deadline == 3 && m[1].trigger == 7 &&
              m[1].deadline == 9 && m[0].to == TIO_TIER_SSD);
        struct tio_trace *tr = NULL;
        CHECK_OK(tio_trace_load(trace_path, TIO_TRACE_FORMAT_AUTO, &tr));
        CHECK_OK(tio_plan_check_trace(p, tr));
        tio_trace_free(tr);
        tio_plan_free(p);
    }
    /* --format json wins over the extension */
    (void)snprintf(args, sizeof args, "plan %s --hw %s -o %s --format json", trace_path, hw_path,
                   plan_path);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "wrote") != NULL);
    FILE *f = fopen(plan_path, "r");
    CHECK(f && fgetc(f) == '{');
    if (f) {
        (void)fclose(f);
    }
    CHECK_OK(tio_plan_load(plan_path, TIO_PLAN_FORMAT_AUTO, &p));
    tio_plan_free(p);
}

TIO_TEST(infeasible_and_working_set) {
    char out[8192], args[2048];
    /* SSD at 0.02x: nothing can move in time; the shortfall is 90 MB at kernel 4 (mm_y) */
    (void)snprintf(args, sizeof args,
                   "plan %s --hw %s --bandwidth-scale 0.02 --json --no-overcommit", trace_path,
                   hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "\"feasible\": false") != NULL);
    CHECK(strstr(out, "\"shortfall_bytes\": 90000000") != NULL);
    CHECK(strstr(out, "\"shortfall_kernel\": 4") != NULL);
    CHECK(strstr(out, "infeasible") != NULL);
    CHECK(strstr(out, "kernel 4 (mm_y)") != NULL);
    (void)snprintf(args, sizeof args,
                   "plan %s --hw %s --bandwidth-scale 0.02 --strict --no-overcommit", trace_path,
                   hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    /* overcommitting (the default), the plan fits memory with moves that state their stall:
     * not feasible (a replay waits for them), no shortfall, the warning counts them */
    (void)snprintf(args, sizeof args, "plan %s --hw %s --bandwidth-scale 0.02 --json", trace_path,
                   hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "\"feasible\": false") != NULL);
    CHECK(strstr(out, "\"shortfall_bytes\": 0") != NULL);
    CHECK(strstr(out, "only with 2 stall moves") != NULL);
    (void)snprintf(args, sizeof args, "plan %s --hw %s --bandwidth-scale 0.02 --strict", trace_path,
                   hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    /* --verify on it: not feasible, as the plan says (exit 2, naming a stall move) */
    (void)snprintf(args, sizeof args, "plan %s --hw %s --bandwidth-scale 0.02 --verify", trace_path,
                   hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "verify: the plan is not feasible") != NULL);
    CHECK(strstr(out, "stall move") != NULL);
    /* capacity under W alone: the error names the kernel and both sizes */
    (void)snprintf(args, sizeof args, "plan %s --hw %s --capacity 90MB", trace_path, hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "kernel 0 (embed)") != NULL);
    CHECK(strstr(out, "100000000 bytes") != NULL);
    CHECK(strstr(out, "90000000 bytes") != NULL);
    /* bad hardware values are named */
    (void)snprintf(args, sizeof args, "plan %s --hw %s", trace_path, bad_hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "ssd_write_Bps") != NULL);
}

TIO_TEST(hw_commands) {
    char out[16384], args[2048];
    CHECK_EQ_I(run("hw list", out, sizeof out), 0);
    CHECK(strstr(out, "paper-2xh100nvl") != NULL);
    CHECK(strstr(out, "paper-2xh100nvl-128g") != NULL);
    CHECK_EQ_I(run("hw list --json", out, sizeof out), 0);
    CHECK(out[0] == '[');
    CHECK_EQ_I(run("hw show paper-2xh100nvl", out, sizeof out), 0);
    CHECK(strstr(out, "16.00 GB/s write") != NULL);
    /* the drives' cache and the rate once it is full: 216 GB (201 GiB) each, 4 x 1.4 GB/s */
    CHECK(strstr(out, "SSD write cache 201 GiB per SSD, then the array writes at 5.60 GB/s") !=
          NULL);
    CHECK(strstr(out, "reads and writes share each drive's time") != NULL);
    CHECK_EQ_I(run("hw show cpu-ci --json", out, sizeof out), 0);
    CHECK(strstr(out, "\"gpu_memory_bytes\": 8589934592") != NULL);
    (void)snprintf(args, sizeof args, "hw check %s", hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "ok") != NULL);
    (void)snprintf(args, sizeof args, "hw check %s", bad_hw_path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "ssd_write_Bps") != NULL);
    CHECK_EQ_I(run("hw show no-such-preset", out, sizeof out), 2);
    CHECK_EQ_I(run("hw frob", out, sizeof out), 1);
    CHECK_EQ_I(run("hw --help", out, sizeof out), 0);
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI")) {
        TIO_SKIP("TIO_CLI not set (CLI not built)");
    }
    (void)snprintf(tmpdir, sizeof tmpdir, "/tmp/tio_test_cli_plan_XXXXXX");
    if (!mkdtemp(tmpdir) || make_fixtures() < 0) {
        TIO_SKIP("cannot create fixtures in /tmp");
    }
    RUN(help_and_usage_errors);
    RUN(plan_json_and_file);
    RUN(infeasible_and_working_set);
    RUN(hw_commands);
    char cmd[300];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) {
        printf("warning: could not remove %s\n", tmpdir);
    }
    return tio_test_done();
}
