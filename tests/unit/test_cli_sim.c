/* teraio simulate / sweep / compare: exit codes, --json keys, exports. */
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tio_test.h"

static char out[1 << 17];

static int run(const char *args) {
    return tio_test_run_cli(args, out, sizeof out);
}

static char trace[1024], tmp[256], big[512];

static int has(const char *needle) {
    int ok = strstr(out, needle) != NULL;
    if (!ok) {
        printf("  output lacks \"%s\":\n%.2000s\n", needle, out);
    }
    return ok;
}

TIO_TEST(simulate_json_keys) {
    char a[2048];
    snprintf(a, sizeof a, "simulate %s --hw cpu-ci --policy ideal --json", trace);
    CHECK_EQ_I(run(a), 0);
    const char *keys[] = { "\"iteration_s\"",      "\"ideal_s\"",         "\"fraction_of_ideal\"",
                           "\"stall_s\"",          "\"tokens_per_s\"",    "\"oom\": false",
                           "\"gpu_peak_bytes\"",   "\"host_peak_bytes\"", "\"ssd_bytes_written\"",
                           "\"drive_life_years\"", "\"bytes\"",           "\"overlap_s\"" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        CHECK(has(keys[i]));
    }
    CHECK(has("\"fraction_of_ideal\": 1.000000"));
}

/* A 4-layer model (`teraio model --preset custom`, peak 1.63 GB): at 1.2 GB "none" runs out
 * of memory (a result, exit 0) and the planner's teraio moves tensors, keeping the simulated
 * peak under the capacity. */
TIO_TEST(simulate_oom_and_plan) {
    char a[2048];
    snprintf(a, sizeof a,
             "model --preset custom --layers 4 --hidden 1024 --heads 8 --kv-heads 8 --ffn-hidden "
             "4096 --vocab 8000 --batch 8 --micro-batch 2 --seq 1024 -o %s",
             big);
    CHECK_EQ_I(run(a), 0);
    snprintf(a, sizeof a, "simulate %s --hw paper-2xh100nvl --policy none --capacity 1.2GB --json",
             big);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"oom\": true"));
    CHECK(has("\"oom_kind\": \"gpu\""));
    snprintf(a, sizeof a,
             "simulate %s --hw paper-2xh100nvl --policy teraio --capacity 1.2GB --csv %s/csv "
             "--timeline %s/tl.json",
             big, tmp, tmp);
    int rc = run(a);
    CHECK_EQ_I(rc, 0);
    CHECK(has("policy            teraio"));
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/csv/kernels.csv", tmp);
    CHECK(stat(path, &st) == 0 && st.st_size > 0);
    snprintf(path, sizeof path, "%s/csv/bandwidth.csv", tmp);
    CHECK(stat(path, &st) == 0 && st.st_size > 0);
    snprintf(path, sizeof path, "%s/tl.json", tmp);
    CHECK(stat(path, &st) == 0 && st.st_size > 0);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = '\0';
        fclose(f);
        CHECK(has("\"traceEvents\""));
        CHECK(has("\"gpu_memory\""));
        CHECK(has("\"ssd_read\""));
    }
    snprintf(a, sizeof a,
             "simulate %s --hw paper-2xh100nvl --policy teraio --capacity 1.2GB --json", big);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"oom\": false"));
    CHECK(has("\"policy\": \"teraio\""));
    const char *p = strstr(out, "\"gpu_peak_bytes\": ");
    CHECK(p != NULL);
    if (p) {
        CHECK(strtoull(p + 18, NULL, 10) <= 1200000000);
    }
}

/* A plan remembers the capacity it was made for: `simulate --plan` replays it against that
 * capacity unless --capacity says otherwise; --min-tensor belongs to --policy. */
TIO_TEST(simulate_plan_capacity_and_min_tensor) {
    char a[2048];
    snprintf(a, sizeof a, "plan %s --hw paper-2xh100nvl --capacity 1.2GB --reserve 0 -o %s/p.plan",
             big, tmp);
    CHECK_EQ_I(run(a), 0);
    snprintf(a, sizeof a, "simulate %s --hw paper-2xh100nvl --plan %s/p.plan --json", big, tmp);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"capacity_bytes\": 1200000000,"));
    CHECK(has("\"oom\": false"));
    CHECK(has("\"moves_clean\": "));
    snprintf(a, sizeof a, "simulate %s --hw paper-2xh100nvl --plan %s/p.plan --capacity 2GB --json",
             big, tmp);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"capacity_bytes\": 2000000000,"));
    snprintf(a, sizeof a, "simulate %s --hw paper-2xh100nvl --plan %s/p.plan --min-tensor 1MiB",
             big, tmp);
    CHECK_EQ_I(run(a), 1);
    CHECK(has("--min-tensor applies to --policy"));
    snprintf(a, sizeof a, "simulate %s --hw cpu-ci --policy teraio --min-tensor 0", trace);
    CHECK_EQ_I(run(a), 1);
    /* nothing of 1 GB or more exists in this model, so nothing can move: infeasible at 1.2 GB
     * (the planner names the kernel), while the default 1 MiB minimum fits */
    snprintf(a, sizeof a,
             "simulate %s --hw paper-2xh100nvl --policy teraio --capacity 1.2GB --min-tensor 1GB",
             big);
    CHECK_EQ_I(run(a), 2);
    CHECK(has("unmovable"));
    snprintf(a, sizeof a,
             "sweep %s --hw paper-2xh100nvl --capacity 1.2GB --bandwidths 16GB/s --min-tensor 1GB",
             big);
    CHECK_EQ_I(run(a), 2);
    snprintf(a, sizeof a,
             "sweep %s --hw paper-2xh100nvl --capacity 1.2GB --bandwidths 16GB/s --min-tensor 1MiB "
             "--json --demand-evict",
             big);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"oom\": false"));
    /* plan-only (the default): at 0.7 GB Algorithm 1's plan falls short, and that is an OOM,
     * not a silent rescue by on-demand eviction, which is an explicit option */
    snprintf(a, sizeof a,
             "simulate %s --hw paper-2xh100nvl --policy teraio-paper --capacity 0.7GB --json", big);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"oom\": true"));
    CHECK(has("\"demand_evicted_bytes\": 0"));
    CHECK(has("\"host_full_offloads\": 0,"));
    snprintf(a, sizeof a,
             "simulate %s --hw paper-2xh100nvl --policy teraio-paper --capacity 0.7GB --json "
             "--demand-evict",
             big);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"oom\": false"));
    CHECK(!has("\"demand_evicted_bytes\": 0,"));
    /* our planner plans the stalls itself (overcommit): plan-only, no eviction on demand */
    snprintf(a, sizeof a,
             "simulate %s --hw paper-2xh100nvl --policy teraio --capacity 0.7GB --json", big);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"oom\": false"));
    CHECK(has("\"demand_evicted_bytes\": 0,"));
}

/* Copy the JSON plan `src` to `dst` with its policy name `from` replaced by `to`. */
static int rename_policy(const char *src, const char *dst, const char *from, const char *to) {
    static char text[1 << 20];
    char old[128], new[128];
    snprintf(old, sizeof old, "\"policy\": \"%s\"", from);
    snprintf(new, sizeof new, "\"policy\": \"%s\"", to);
    FILE *f = fopen(src, "r");
    if (!f) {
        return -1;
    }
    size_t n = fread(text, 1, sizeof text - 1, f);
    (void)fclose(f);
    text[n] = '\0';
    char *at = strstr(text, old);
    f = at ? fopen(dst, "w") : NULL;
    if (!f) {
        return -1;
    }
    int bad = fwrite(text, 1, (size_t)(at - text), f) != (size_t)(at - text);
    bad |= fputs(new, f) < 0;
    bad |= fputs(at + strlen(old), f) < 0;
    bad |= fclose(f) != 0;
    return bad ? -1 : 0;
}

/* The line of `key` in the last output (for comparing two runs). */
static void line_of(const char *key, char *buf, size_t len) {
    const char *p = strstr(out, key);
    const char *e = p ? strchr(p, '\n') : NULL;
    snprintf(buf, len, "%.*s", p && e ? (int)(e - p) : 0, p ? p : "");
}

/* A plan is simulated as its execution says, never by its policy name: a baseline's plan
 * renamed is still that baseline, and a teraio plan without moves named like a baseline is
 * simulated as its (no) moves. */
TIO_TEST(simulate_plan_by_execution_not_name) {
    char a[2048], want[256], got[256], src[512], dst[512];
    /* the LRU baseline at 1.2 GB: without its swapping the model runs out of memory */
    snprintf(a, sizeof a, "simulate %s --hw paper-2xh100nvl --policy lru --capacity 1.2GB --json",
             big);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"oom\": false"));
    line_of("\"iteration_s\"", want, sizeof want);
    snprintf(src, sizeof src, "%s/lru.json", tmp);
    snprintf(dst, sizeof dst, "%s/my-lru.json", tmp);
    snprintf(a, sizeof a,
             "plan %s --hw paper-2xh100nvl --policy lru --capacity 1.2GB --reserve 0 -o %s", big,
             src);
    CHECK_EQ_I(run(a), 0);
    CHECK_EQ_I(rename_policy(src, dst, "lru", "my-lru"), 0);
    snprintf(a, sizeof a, "simulate %s --hw paper-2xh100nvl --plan %s --json", big, dst);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"oom\": false"));
    line_of("\"iteration_s\"", got, sizeof got);
    CHECK(want[0] != '\0');
    CHECK_STR(got, want);
    /* the model fits the default capacity: teraio plans no moves; named "zero-offload" it
     * must not become the ZeRO model (CPU optimizer, far from the ideal) but replay as the
     * same plan under its own name (no moves: the ideal but for the executor's per-kernel
     * cost, docs/simulator.md "Software costs") */
    snprintf(src, sizeof src, "%s/fit.json", tmp);
    snprintf(dst, sizeof dst, "%s/fit-named-zero.json", tmp);
    snprintf(a, sizeof a, "plan %s --hw paper-2xh100nvl --policy teraio -o %s", big, src);
    CHECK_EQ_I(run(a), 0);
    snprintf(a, sizeof a, "simulate %s --hw paper-2xh100nvl --plan %s --json", big, src);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"moves_issued\": 0,"));
    line_of("\"iteration_s\"", want, sizeof want);
    CHECK_EQ_I(rename_policy(src, dst, "teraio", "zero-offload"), 0);
    snprintf(a, sizeof a, "simulate %s --hw paper-2xh100nvl --plan %s --json", big, dst);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"cpu_s\": 0,")); /* no CPU optimizer */
    line_of("\"iteration_s\"", got, sizeof got);
    CHECK(want[0] != '\0');
    CHECK_STR(got, want);
    /* a pipeline's plans: dispatched the same way */
    snprintf(a, sizeof a, "simulate %s %s --hw paper-2xh100nvl --plan %s --plan %s/lru.json", big,
             big, dst, tmp);
    CHECK_EQ_I(run(a), 2);
    CHECK(has("different executions (moves, lru)"));
}

TIO_TEST(simulate_exit_codes) {
    char a[2048];
    CHECK_EQ_I(run("simulate --help"), 0);
    CHECK(has("usage: teraio simulate"));
    CHECK_EQ_I(run("simulate"), 1);
    snprintf(a, sizeof a, "simulate %s --hw cpu-ci", trace);
    CHECK_EQ_I(run(a), 1); /* neither --plan nor --policy */
    snprintf(a, sizeof a, "simulate %s --hw cpu-ci --policy ideal --plan x.plan", trace);
    CHECK_EQ_I(run(a), 1);
    snprintf(a, sizeof a, "simulate %s --hw cpu-ci --policy ideal --ssd-scale -1", trace);
    CHECK_EQ_I(run(a), 1);
    snprintf(a, sizeof a, "simulate %s --hw cpu-ci --policy frobnicate", trace);
    CHECK_EQ_I(run(a), 2);
    snprintf(a, sizeof a, "simulate %s --hw no-such-hw --policy ideal", trace);
    CHECK_EQ_I(run(a), 2);
    CHECK_EQ_I(run("simulate /nonexistent.tio --hw cpu-ci --policy ideal"), 2);
    snprintf(a, sizeof a, "simulate %s --hw cpu-ci --plan /nonexistent.plan", trace);
    CHECK_EQ_I(run(a), 2);
}

TIO_TEST(sweep_json) {
    char a[2048];
    snprintf(a, sizeof a,
             "sweep %s --hw paper-2xh100nvl --capacity 1.2GB --bandwidths 1,4,16GB/s --json "
             "--demand-evict",
             big);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"points\""));
    CHECK(has("\"bandwidth_Bps\": 1e+09"));
    CHECK(has("\"bandwidth_Bps\": 1.6e+10"));
    CHECK(has("\"fraction_of_ideal\""));
    CHECK(has("\"varied\": \"ssd_array_bandwidth\""));
    snprintf(a, sizeof a, "sweep %s --hw cpu-ci --bandwidths 0GB/s", trace);
    CHECK_EQ_I(run(a), 1);
    CHECK_EQ_I(run("sweep"), 1);
    CHECK_EQ_I(run("sweep --help"), 0);
}

TIO_TEST(compare_usage_and_json) {
    CHECK_EQ_I(run("compare --help"), 0);
    CHECK(has("usage: teraio compare"));
    CHECK_EQ_I(run("compare"), 1); /* --paper is required */
    CHECK_EQ_I(run("compare --paper --models gpt5"), 1);
    CHECK_EQ_I(run("compare --paper --systems ideal,frobnicate"), 1);
    /* the ideal system only: fast, and every key of the JSON is there */
    CHECK_EQ_I(run("compare --paper --models llama3-8b --systems ideal --json"), 0);
    const char *keys[] = { "\"rows\"",
                           "\"model\": \"llama3-8b\"",
                           "\"batch\": 32",
                           "\"seq\": 4096",
                           "\"system\": \"ideal\"",
                           "\"tokens_per_s\"",
                           "\"fraction_of_ideal\": 1.000000",
                           "\"oom\": false",
                           "\"summary\"",
                           "\"mean_fraction_of_ideal\"",
                           "\"mean_fraction_of_ideal_all_runs\"",
                           "\"host_cap_bytes\": 500000000000", /* every system: 1 TB / 2 GPUs */
                           "\"mean_speedup_vs_best_zero\"",
                           "\"paper\"" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        CHECK(has(keys[i]));
    }
    /* teraio-ssd offloads to the SSDs only (host cap 0), teraio-mixed gets the host memory
     * given to every system (here the paper's budget for Llama3-8B, 85 GB per GPU); every row
     * says whether its plan stands on its own, and --demand-evict adds on-demand eviction as a
     * column of its own */
    CHECK_EQ_I(run("compare --paper --models llama3-8b --systems teraio-ssd,teraio-mixed --json "
                   "--demand-evict --host-per-gpu 85GB"),
               0);
    CHECK(has("\"system\": \"teraio-ssd\", \"tokens_per_s\""));
    CHECK(has("\"host_cap_bytes\": 0"));
    CHECK(has("\"host_cap_bytes\": 85000000000"));
    CHECK(has("\"plan_feasible\": "));
    CHECK(has("\"moves_late\": "));
    CHECK(has("\"fraction_demand_evict\": "));
    CHECK(has("\"demand_evicted_bytes\": "));
}

/* The value after "key": in the output (or -1). */
static double num_after(const char *key) {
    const char *p = strstr(out, key);
    return p ? strtod(p + strlen(key), NULL) : -1.0;
}

/*
 * The two stages of the tiny model's 2-stage pipeline simulated together: with unlimited
 * memory the coupled makespan is the generator's own 1F1B makespan (`teraio model --json`,
 * ideal_iteration_s, from its separate replay of the schedule); plans given per stage; the
 * stages out of order, and one plan for two traces, are errors.
 */
TIO_TEST(simulate_pipeline_stages) {
    char a[4096], t0[400], t1[400], p0[400], p1[400];
    snprintf(t0, sizeof t0, "%s/s0.tio", tmp);
    snprintf(t1, sizeof t1, "%s/s1.tio", tmp);
    snprintf(p0, sizeof p0, "%s/s0.plan", tmp);
    snprintf(p1, sizeof p1, "%s/s1.plan", tmp);
    snprintf(a, sizeof a, "model --preset tiny --pp 2 --rank 0 --json -o %s", t0);
    CHECK_EQ_I(run(a), 0);
    double ideal = num_after("\"ideal_iteration_s\": ");
    CHECK(ideal > 0);
    snprintf(a, sizeof a, "model --preset tiny --pp 2 --rank 1 -o %s", t1);
    CHECK_EQ_I(run(a), 0);
    snprintf(a, sizeof a, "simulate %s %s --hw cpu-ci --policy ideal --json", t0, t1);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"pipeline_stages\": 2"));
    CHECK(has("\"stages\": ["));
    CHECK(has("\"pipeline_stage\": 1"));
    CHECK(has("\"pipeline_wait_s\": "));
    CHECK_NEAR(num_after("\"iteration_s\": "), ideal, 2e-6); /* model JSON: 6 decimals */
    CHECK_NEAR(num_after("\"fraction_of_ideal\": "), 1.0, 1e-9);
    /* each stage planned on its own for its own capacity (0.7 MB and 0.95 MB), then simulated
     * together from the plan files, each at the capacity its plan was made for */
    snprintf(a, sizeof a,
             "plan %s --hw cpu-ci --policy teraio --capacity 0.7MB --reserve 0 --min-tensor 1KiB "
             "-o %s",
             t0, p0);
    CHECK_EQ_I(run(a), 0);
    snprintf(a, sizeof a,
             "plan %s --hw cpu-ci --policy teraio --capacity 0.95MB --reserve 0 --min-tensor 1KiB "
             "-o %s",
             t1, p1);
    CHECK_EQ_I(run(a), 0);
    snprintf(a, sizeof a, "simulate %s %s --hw cpu-ci --plan %s --plan %s --json", t0, t1, p0, p1);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("\"pipeline_stages\": 2"));
    CHECK(has("\"capacity_bytes\": 700000"));
    CHECK(has("\"capacity_bytes\": 950000"));
    CHECK(has("\"oom\": false"));
    double it = num_after("\"iteration_s\": ");
    CHECK(it >= ideal - 2e-6);
    snprintf(a, sizeof a, "simulate %s %s --hw cpu-ci --plan %s --plan %s", t0, t1, p0, p1);
    CHECK_EQ_I(run(a), 0);
    CHECK(has("coupled makespan"));
    CHECK(has("stage 1 "));
    snprintf(a, sizeof a, "simulate %s %s --hw cpu-ci --policy ideal", t1, t0);
    CHECK(run(a) != 0);
    CHECK(has("give the traces in stage order"));
    snprintf(a, sizeof a, "simulate %s %s --hw cpu-ci --plan %s", t0, t1, p0);
    CHECK_EQ_I(run(a), 1); /* usage */
    CHECK(has("2 traces and 1 --plan"));
    snprintf(a, sizeof a, "simulate %s %s --hw cpu-ci --policy ideal --csv %s/c", t0, t1, tmp);
    CHECK_EQ_I(run(a), 1); /* usage */
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI")) {
        TIO_SKIP("TIO_CLI not set (CLI not built)");
    }
    const char *data = getenv("TIO_TEST_DATA");
    snprintf(trace, sizeof trace, "%s/example.json", data ? data : "tests/data");
    snprintf(tmp, sizeof tmp, "/tmp/tio_cli_sim_XXXXXX");
    if (!mkdtemp(tmp)) {
        TIO_SKIP("mkdtemp failed");
    }
    snprintf(big, sizeof big, "%s/custom.tio", tmp);
    RUN(simulate_json_keys);
    RUN(simulate_oom_and_plan);
    RUN(simulate_plan_capacity_and_min_tensor);
    RUN(simulate_plan_by_execution_not_name);
    RUN(simulate_exit_codes);
    RUN(simulate_pipeline_stages);
    RUN(sweep_json);
    RUN(compare_usage_and_json);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) {
        printf("note: could not remove %s\n", tmp);
    }
    return tio_test_done();
}
