/*
 * bench_runtime: the training thread's time per kernel in the plan executor (teraio/runtime.h),
 * on the model generator's Llama3-8B traces cut to a growing number of blocks, so that the
 * structure per kernel stays the same and only the number of tensors grows. The executor's own
 * bookkeeping is what is measured: the engine runs the `null` backend (every transfer completes
 * at once, no byte is touched) over a sparse swap file, and the bound pointers are a dummy.
 *
 *   bench_runtime [--runs N] [--layers A,B,...] [--budget F] [--tsv]
 *
 * For each block count: the trace (teraio model --preset llama3-8b --layers N), a teraio-ssd
 * plan for a GPU of half the trace's peak memory, and the executor with that budget (times F,
 * default 1; below 1 the executor must add demand offloads to the plan's moves). One
 * iteration warms up; each of N more (default 5) is timed on the training thread's CPU clock
 * (CLOCK_THREAD_CPUTIME_ID: the machine is shared, CPU time measures the code) and on the wall
 * clock, over every call a framework makes per kernel (before_kernel, binding what it hands out,
 * ready, binding the tensors the kernel creates, after_kernel). Prints the medians per kernel,
 * and what the executor did per iteration (the same in every build of the same plan).
 * --tsv prints one line per size for bench/runtime_ab.sh instead of the table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <teraio/hw.h>
#include <teraio/io.h>
#include <teraio/model.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/trace.h>

#include "benchutil.h"
#include "common/common_impl.h"

#define MAX_RUNS 31

/* What every bound tensor points to: an address range as large as the largest tensor, never
 * touched (the null backend reads and writes no memory), so it costs no memory. */
static void *dummy;

struct result {
    size_t tensors, kernels, moves;
    double cpu_us, wall_us;      /* medians per kernel */
    struct tio_runtime_stats st; /* what the last timed iteration added */
};

static int fail(const char *what, int rc) {
    (void)fprintf(stderr, "bench_runtime: %s: %s: %s\n", what, tio_strerror(rc), tio_last_error());
    return 1;
}

/* Perform the actions: bind every MATERIALIZE (a RELEASE needs nothing: no memory is real). */
static int perform(struct tio_runtime *rt, const struct tio_runtime_action *a, int n) {
    for (int i = 0; i < n; i++) {
        if (a[i].kind == TIO_RUNTIME_MATERIALIZE) {
            int rc = tio_runtime_bind(rt, a[i].tensor, dummy);
            if (rc < 0) {
                return rc;
            }
        }
    }
    return 0;
}

/* One iteration as a framework drives it; `created` lists per kernel the tensors it creates. */
static int iteration(struct tio_runtime *rt,
                     const struct tio_trace_view *v,
                     const uint64_t *created_off,
                     const uint32_t *created,
                     struct tio_runtime_action *act,
                     size_t cap) {
    int n = tio_runtime_begin_iteration(rt, act, cap);
    if (n < 0 || (n = perform(rt, act, n)) < 0) {
        return n;
    }
    for (uint64_t k = 0; k < v->n_kernels; k++) {
        int rc = tio_runtime_before_kernel(rt, k, act, cap);
        if (rc < 0 || (rc = perform(rt, act, rc)) < 0 || (rc = tio_runtime_ready(rt, k)) < 0) {
            return rc;
        }
        for (uint64_t i = created_off[k]; i < created_off[k + 1]; i++) {
            if ((rc = tio_runtime_bind(rt, created[i], dummy)) < 0) {
                return rc;
            }
        }
        if ((rc = tio_runtime_after_kernel(rt, k)) < 0) {
            return rc;
        }
    }
    n = tio_runtime_end_iteration(rt, act, cap);
    return n < 0 ? n : perform(rt, act, n);
}

/* The intermediates each kernel creates (first use), in CSR form; globals start resident. */
static int created_by_kernel(const struct tio_trace_view *v, uint64_t **off, uint32_t **list) {
    size_t nk = v->n_kernels, nt = v->n_tensors;
    uint8_t *seen = calloc(nt ? nt : 1, 1);
    *off = calloc(nk + 1, sizeof **off);
    *list = malloc((nt ? nt : 1) * sizeof **list);
    if (!seen || !*off || !*list) {
        free(seen);
        return TIO_ENOMEM;
    }
    size_t n = 0;
    for (size_t k = 0; k < nk; k++) {
        for (uint64_t u = v->kernel_use_offset[k]; u < v->kernel_use_offset[k + 1]; u++) {
            uint32_t t = v->use_tensor[u];
            if (!seen[t]) {
                seen[t] = 1;
                if (!(v->tensor_flags[t] & TIO_TENSOR_GLOBAL)) {
                    (*list)[n++] = t;
                }
            }
        }
        (*off)[k + 1] = n;
    }
    free(seen);
    return 0;
}

static int run_size(uint32_t layers, int runs, double budget, const char *dir, struct result *out) {
    struct tio_model_params mp;
    int rc = tio_model_preset("llama3-8b", &mp);
    if (rc < 0) {
        return fail("model preset", rc);
    }
    mp.layers = layers;
    struct tio_trace *tr = NULL;
    struct tio_model_info info;
    if ((rc = tio_model_generate(&mp, &tr, &info)) < 0) {
        return fail("model", rc);
    }
    struct tio_hw hw;
    if ((rc = tio_hw_preset("paper-2xh100nvl", &hw)) < 0) {
        tio_trace_free(tr);
        return fail("hw", rc);
    }
    hw.gpu_memory_bytes = info.peak_bytes / 2;
    hw.gpu_reserve_bytes = 0;
    struct tio_plan_params pp = tio_plan_params_default();
    pp.policy = "teraio-ssd";
    struct tio_plan *plan = NULL;
    if ((rc = tio_plan_make(tr, &hw, &pp, &plan)) < 0) {
        tio_trace_free(tr);
        return fail("plan", rc);
    }
    struct tio_plan_summary ps;
    tio_plan_get_summary(plan, &ps);
    const char *dirs[] = { dir };
    struct tio_engine_params ep = tio_engine_params_default();
    ep.dirs = dirs;
    ep.ndirs = 1;
    ep.backend = "null";
    ep.preallocate = 0;
    struct tio_engine *eng = NULL;
    struct tio_runtime *rt = NULL;
    struct tio_trace_view v;
    tio_trace_get_view(tr, &v);
    uint64_t *coff = NULL;
    uint32_t *created = NULL;
    struct tio_runtime_action *act = NULL;
    uint64_t largest = 4096;
    if ((rc = tio_engine_new(&ep, &eng)) < 0) {
        fail("engine", rc);
        goto out;
    }
    struct tio_runtime_params rp = tio_runtime_params_default();
    rp.trace = tr;
    rp.plan = plan;
    rp.engine = eng;
    rp.budget_bytes = (uint64_t)((double)ps.capacity_bytes * budget);
    if ((rc = tio_runtime_new(&rp, &rt)) < 0) {
        fail("runtime", rc);
        goto out;
    }
    for (uint32_t t = 0; t < v.n_tensors; t++) {
        largest = v.tensor_bytes[t] > largest ? v.tensor_bytes[t] : largest;
    }
    dummy = mmap(NULL, largest, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
    if (dummy == MAP_FAILED) {
        dummy = NULL;
        rc = TIO_ENOMEM;
        fail("mmap", rc);
        goto out;
    }
    size_t cap = tio_runtime_max_actions(rt);
    act = malloc((cap ? cap : 1) * sizeof *act);
    if (!act || (rc = created_by_kernel(&v, &coff, &created)) < 0) {
        rc = TIO_ENOMEM;
        fail("setup", rc);
        goto out;
    }
    /* the globals start resident: bind them all */
    for (uint32_t t = 0; t < v.n_tensors && rc == 0; t++) {
        if (v.tensor_flags[t] & TIO_TENSOR_GLOBAL) {
            rc = tio_runtime_bind(rt, t, dummy);
        }
    }
    if (rc < 0 || (rc = iteration(rt, &v, coff, created, act, cap)) < 0) {
        fail("warm-up iteration", rc);
        goto out;
    }
    double cpu[MAX_RUNS], wall[MAX_RUNS];
    struct tio_runtime_stats s0;
    memset(&s0, 0, sizeof s0);
    for (int r = 0; r < runs; r++) {
        tio_runtime_get_stats(rt, &s0);
        double c0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID), w0 = tio_now_s();
        rc = iteration(rt, &v, coff, created, act, cap);
        cpu[r] = (bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0) / (double)v.n_kernels * 1e6;
        wall[r] = (tio_now_s() - w0) / (double)v.n_kernels * 1e6;
        if (rc < 0) {
            fail("iteration", rc);
            goto out;
        }
    }
    out->tensors = v.n_tensors;
    out->kernels = v.n_kernels;
    out->moves = ps.n_moves;
    out->cpu_us = bench_median(cpu, runs);
    out->wall_us = bench_median(wall, runs);
    tio_runtime_get_stats(rt, &out->st);
    /* NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment meanwhile */
    if (getenv("BENCH_RUNTIME_STATS")) {
        struct tio_runtime_stats *a = &out->st;
        (void)fprintf(
            stderr,
            "iter: off %llu clean %llu pre %llu urgent %llu skip %llu boff %llu bpre %llu "
            "dem %llu def %llu over %llu res %llu peak %llu stored %llu\n",
            (unsigned long long)(a->offloads - s0.offloads),
            (unsigned long long)(a->clean_offloads - s0.clean_offloads),
            (unsigned long long)(a->prefetches - s0.prefetches),
            (unsigned long long)(a->urgent_reads - s0.urgent_reads),
            (unsigned long long)(a->moves_skipped - s0.moves_skipped),
            (unsigned long long)(a->bytes_offloaded - s0.bytes_offloaded),
            (unsigned long long)(a->bytes_prefetched - s0.bytes_prefetched),
            (unsigned long long)(a->demand_offloads - s0.demand_offloads),
            (unsigned long long)(a->deferred_prefetches - s0.deferred_prefetches),
            (unsigned long long)(a->over_budget_kernels - s0.over_budget_kernels),
            (unsigned long long)a->resident_bytes, (unsigned long long)a->peak_resident_bytes,
            (unsigned long long)a->stored_bytes);
    }
    out->st.offloads -= s0.offloads;
    out->st.prefetches -= s0.prefetches;
    out->st.demand_offloads -= s0.demand_offloads;
    out->st.over_budget_kernels -= s0.over_budget_kernels;
    rc = 0;
out:
    if (dummy) {
        (void)munmap(dummy, largest);
        dummy = NULL;
    }
    free(act);
    free(coff);
    free(created);
    tio_runtime_free(rt);
    tio_engine_free(eng);
    tio_plan_free(plan);
    tio_trace_free(tr);
    return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv) {
    int runs = 5, tsv = 0;
    double budget = 1.0;
    const char *layers_arg = "2,24";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            runs = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
            layers_arg = argv[++i];
        } else if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc) {
            budget = strtod(argv[++i], NULL);
        } else if (strcmp(argv[i], "--tsv") == 0) {
            tsv = 1;
        } else {
            (void)fprintf(
                stderr,
                "usage: bench_runtime [--runs N] [--layers A,B,...] [--budget F] [--tsv]\n");
            return 1;
        }
    }
    if (!(budget > 0 && budget <= 1)) {
        (void)fprintf(stderr, "bench_runtime: --budget must be in (0, 1]\n");
        return 1;
    }
    if (runs < 1 || runs > MAX_RUNS) {
        (void)fprintf(stderr, "bench_runtime: --runs must be 1..%d\n", MAX_RUNS);
        return 1;
    }
    char dir[] = "/tmp/tio-bench-runtime-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench_runtime: mkdtemp");
        return 1;
    }
    if (!tsv) {
        printf("llama3-8b cut to N blocks, teraio-ssd plan at 50%% of the peak, executor budget "
               "%.2fx the plan's, null backend; median of %d iterations after one warm-up\n\n",
               budget, runs);
        printf("| blocks | tensors | kernels | moves | thread CPU us/kernel | wall us/kernel "
               "| offloads | prefetches | demand offloads | over-budget kernels |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|\n");
    }
    int status = 0;
    const char *p = layers_arg;
    while (*p && status == 0) {
        char *end = NULL;
        long layers = strtol(p, &end, 10);
        if (end == p || layers < 1 || layers > 4096 || (*end && *end != ',')) {
            (void)fprintf(stderr, "bench_runtime: --layers: '%s' is not a list of block counts\n",
                          layers_arg);
            status = 1;
            break;
        }
        p = *end ? end + 1 : end;
        struct result r;
        memset(&r, 0, sizeof r);
        status = run_size((uint32_t)layers, runs, budget, dir, &r);
        if (status) {
            break;
        }
        if (tsv) {
            printf("%ld\t%zu\t%zu\t%.4f\t%.4f\t%llu\t%llu\t%llu\t%llu\n", layers, r.tensors,
                   r.kernels, r.cpu_us, r.wall_us, (unsigned long long)r.st.offloads,
                   (unsigned long long)r.st.prefetches, (unsigned long long)r.st.demand_offloads,
                   (unsigned long long)r.st.over_budget_kernels);
        } else {
            printf("| %ld | %zu | %zu | %zu | %.2f | %.2f | %llu | %llu | %llu | %llu |\n", layers,
                   r.tensors, r.kernels, r.moves, r.cpu_us, r.wall_us,
                   (unsigned long long)r.st.offloads, (unsigned long long)r.st.prefetches,
                   (unsigned long long)r.st.demand_offloads,
                   (unsigned long long)r.st.over_budget_kernels);
        }
        (void)fflush(stdout);
    }
    (void)rmdir(dir);
    return status;
}
