/* Exports of a simulation: JSON summary, CSV series, Chrome/Perfetto trace-event timeline. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <teraio/sim.h>

#include "common/common_impl.h"
#include "common/outfile.h"
#include "sim/sim_impl.h"

static const char *oom_name(int32_t oom) {
    return oom == TIO_SIM_OOM_GPU ? "gpu" : oom == TIO_SIM_OOM_HOST ? "host" : "none";
}

/* A JSON number: finite doubles only (JSON has no inf/nan). */
static double jnum(double x) {
    return x == x && x < 1e300 && x > -1e300 ? x : 0.0;
}

int tio_sim_write_json(const struct tio_sim *sim, FILE *f) {
    const struct tio_sim_result *r = &sim->r;
    (void)fprintf(f, "{\n  \"policy\": \"%s\",\n", sim->policy);
    (void)fprintf(f, "  \"iteration_s\": %.9g,\n  \"ideal_s\": %.9g,\n", jnum(r->iteration_s),
                  jnum(r->ideal_s));
    (void)fprintf(f, "  \"fraction_of_ideal\": %.6f,\n", jnum(r->fraction_of_ideal));
    (void)fprintf(f, "  \"stall_s\": %.9g,\n  \"stall_data_s\": %.9g,\n", jnum(r->stall_s),
                  jnum(r->stall_data_s));
    (void)fprintf(f, "  \"stall_memory_s\": %.9g,\n  \"cpu_s\": %.9g,\n", jnum(r->stall_memory_s),
                  jnum(r->cpu_s));
    (void)fprintf(f, "  \"stall_thread_s\": %.9g,\n  \"kernel_slowdown_s\": %.9g,\n",
                  jnum(r->stall_thread_s), jnum(r->kernel_slowdown_s));
    (void)fprintf(f, "  \"overlap_s\": %.9g,\n  \"io_busy_s\": %.9g,\n", jnum(r->overlap_s),
                  jnum(r->io_busy_s));
    (void)fprintf(f, "  \"tokens_per_s\": %.6f,\n  \"tokens_per_iteration\": %.0f,\n",
                  jnum(r->tokens_per_s), jnum(r->tokens_per_iteration));
    (void)fprintf(f, "  \"oom\": %s,\n  \"oom_kind\": \"%s\",\n", r->oom ? "true" : "false",
                  oom_name(r->oom));
    if (r->oom) {
        (void)fprintf(
            f, "  \"oom_kernel\": %llu,\n  \"oom_bytes\": %llu,\n  \"oom_iteration\": %u,\n",
            (unsigned long long)r->oom_kernel, (unsigned long long)r->oom_bytes, r->oom_iteration);
    } else {
        (void)fprintf(f, "  \"oom_kernel\": null,\n  \"oom_bytes\": 0,\n");
    }
    (void)fprintf(f, "  \"capacity_bytes\": %llu,\n", (unsigned long long)r->capacity_bytes);
    (void)fprintf(f, "  \"gpu_peak_bytes\": %llu,\n  \"host_peak_bytes\": %llu,\n",
                  (unsigned long long)r->gpu_peak_bytes, (unsigned long long)r->host_peak_bytes);
    (void)fprintf(f, "  \"ssd_bytes_written\": %llu,\n", (unsigned long long)r->ssd_bytes_written);
    (void)fprintf(f, "  \"drive_life_years\": %.6g,\n", jnum(r->drive_life_years));
    (void)fprintf(f, "  \"bytes\": {");
    for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
        (void)fprintf(f, "%s\"%s\": %llu", c ? ", " : "", tio_sim_channel_name(c),
                      (unsigned long long)r->bytes[c]);
    }
    (void)fprintf(f, "},\n  \"busy_s\": {");
    for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
        (void)fprintf(f, "%s\"%s\": %.9g", c ? ", " : "", tio_sim_channel_name(c),
                      jnum(r->busy_s[c]));
    }
    (void)fprintf(f, "},\n  \"peak_Bps\": {");
    for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
        (void)fprintf(f, "%s\"%s\": %.6g", c ? ", " : "", tio_sim_channel_name(c),
                      jnum(r->peak_Bps[c]));
    }
    (void)fprintf(f, "},\n  \"moves_issued\": %llu,\n  \"moves_skipped\": %llu,\n",
                  (unsigned long long)r->n_moves_issued, (unsigned long long)r->n_moves_skipped);
    (void)fprintf(f, "  \"moves_late\": %llu,\n  \"demand_fetches\": %llu,\n",
                  (unsigned long long)r->n_moves_late, (unsigned long long)r->n_demand_fetches);
    (void)fprintf(f, "  \"demand_evictions\": %llu,\n", (unsigned long long)r->n_demand_evictions);
    (void)fprintf(f, "  \"moves_clean\": %llu,\n", (unsigned long long)r->n_moves_clean);
    (void)fprintf(f, "  \"demand_evicted_bytes\": %llu,\n",
                  (unsigned long long)r->demand_evicted_bytes);
    (void)fprintf(f, "  \"host_full_offloads\": %llu,\n",
                  (unsigned long long)r->n_host_full_offloads);
    (void)fprintf(f,
                  "  \"ssd_cache_full\": %s,\n  \"ssd_cache_start_bytes\": %llu,\n"
                  "  \"ssd_cache_end_bytes\": %llu,\n",
                  r->ssd_cache_full ? "true" : "false",
                  (unsigned long long)r->ssd_cache_start_bytes,
                  (unsigned long long)r->ssd_cache_end_bytes);
    if (r->pipeline_stages > 0) {
        (void)fprintf(f,
                      "  \"pipeline_stages\": %u,\n  \"pipeline_stage\": %u,\n"
                      "  \"stage_end_s\": %.9g,\n  \"pipeline_wait_s\": %.9g,\n",
                      r->pipeline_stages, r->pipeline_stage, jnum(r->stage_end_s),
                      jnum(r->pipeline_wait_s));
        if (r->oom) {
            (void)fprintf(f, "  \"oom_stage\": %u,\n", r->oom_stage);
        }
    }
    (void)fprintf(f, "  \"sim_wall_s\": %.6g\n}\n", jnum(r->sim_wall_s));
    return ferror(f) ? tio_set_error(-EIO, "sim: writing the JSON summary failed") : 0;
}

static int make_dir(const char *dir) {
    if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
        return tio_set_error(-errno, "sim: cannot create directory '%s'", dir);
    }
    return 0;
}

/* Open dir/name (or path when name is NULL) through the shared save routine (outfile.h). */
static int open_out(
    const char *dir, const char *name, char *path, size_t len, struct tio_outfile **o, FILE **f) {
    if (name) {
        (void)snprintf(path, len, "%s/%s", dir, name);
    }
    int rc = tio_outfile_open(name ? path : dir, "sim", o);
    *f = rc < 0 ? NULL : tio_outfile_stream(*o);
    return rc;
}

int tio_sim_write_csv(const struct tio_sim *sim, const char *dir) {
    char path[4096];
    int rc = make_dir(dir);
    if (rc < 0) {
        return rc;
    }
    struct tio_outfile *o = NULL;
    FILE *f = NULL;
    rc = open_out(dir, "kernels.csv", path, sizeof path, &o, &f);
    if (rc < 0) {
        return rc;
    }
    (void)fprintf(f, "kernel,start_s,stall_s,duration_s,gpu_bytes\n");
    for (size_t k = 0; k < sim->n_kernels && !sim->r.oom; k++) {
        (void)fprintf(f, "%zu,%.9g,%.9g,%.9g,%llu\n", k, sim->k_start_s[k], sim->k_stall_s[k],
                      sim->k_dur_s[k], (unsigned long long)sim->k_gpu[k]);
    }
    rc = tio_outfile_commit(o);
    if (rc < 0) {
        return rc;
    }
    rc = open_out(dir, "bandwidth.csv", path, sizeof path, &o, &f);
    if (rc < 0) {
        return rc;
    }
    (void)fprintf(f, "t_s");
    for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
        (void)fprintf(f, ",%s_Bps", tio_sim_channel_name(c));
    }
    (void)fprintf(f, "\n");
    for (size_t i = 0; i < sim->n_bins && !sim->r.oom; i++) {
        (void)fprintf(f, "%.9g", (double)i * sim->bin_s);
        for (size_t c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
            (void)fprintf(f, ",%.6g", sim->bins[i * TIO_SIM_CHANNEL_COUNT + c]);
        }
        (void)fprintf(f, "\n");
    }
    return tio_outfile_commit(o);
}

static void json_str(FILE *f, const char *s) {
    (void)fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            (void)fprintf(f, "\\%c", c);
        } else if (c < 0x20) {
            (void)fprintf(f, "\\u%04x", c);
        } else {
            (void)fputc(c, f);
        }
    }
    (void)fputc('"', f);
}

int tio_sim_write_timeline(const struct tio_sim *sim, const char *path) {
    struct tio_outfile *o = NULL;
    FILE *f = NULL;
    int rc = open_out(path, NULL, NULL, 0, &o, &f);
    if (rc < 0) {
        return rc;
    }
    /* trace-event format: ts/dur in microseconds; pid 1 = GPU, tid 0 compute, 1.. channels */
    (void)fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    (void)fprintf(f,
                  "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"teraio "
                  "sim (%s)\"}},\n",
                  sim->policy);
    (void)fprintf(f,
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":"
                  "\"compute\"}}");
    for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
        (void)fprintf(f,
                      ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{"
                      "\"name\":\"%s\"}}",
                      c + 1, tio_sim_channel_name(c));
    }
    if (!sim->r.oom) {
        for (size_t k = 0; k < sim->n_kernels; k++) {
            uint32_t id = sim->k_name[k];
            const char *name = id < sim->n_names && sim->names[id] ? sim->names[id] : "kernel";
            (void)fprintf(f, ",\n{\"name\":");
            json_str(f, name);
            (void)fprintf(f,
                          ",\"ph\":\"X\",\"pid\":1,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,\"args\":{"
                          "\"kernel\":%zu,\"stall_us\":%.3f}}",
                          sim->k_start_s[k] * 1e6, sim->k_dur_s[k] * 1e6, k,
                          sim->k_stall_s[k] * 1e6);
            (void)fprintf(
                f,
                ",\n{\"name\":\"gpu_memory\",\"ph\":\"C\",\"pid\":1,\"ts\":%.3f,\"args\":{"
                "\"bytes\":%llu}}",
                sim->k_start_s[k] * 1e6, (unsigned long long)sim->k_gpu[k]);
        }
        for (size_t i = 0; i < sim->n_spans; i++) {
            const struct sim_span *s = &sim->spans[i];
            (void)fprintf(f,
                          ",\n{\"name\":\"%s t%u\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,"
                          "\"dur\":%.3f,\"args\":{\"tensor\":%u,\"bytes\":%llu,\"urgent\":%d}}",
                          s->prefetch ? "prefetch" : "offload", s->tensor, s->channel + 1,
                          s->t0 * 1e6, (s->t1 - s->t0) * 1e6, s->tensor,
                          (unsigned long long)s->bytes, s->urgent);
        }
        for (size_t i = 0; i < sim->n_bins; i++) {
            (void)fprintf(f,
                          ",\n{\"name\":\"bandwidth_GBps\",\"ph\":\"C\",\"pid\":1,\"ts\":%.3f,"
                          "\"args\":{",
                          (double)i * sim->bin_s * 1e6);
            for (int c = 0; c < TIO_SIM_CHANNEL_COUNT; c++) {
                (void)fprintf(f, "%s\"%s\":%.4f", c ? "," : "", tio_sim_channel_name(c),
                              sim->bins[i * TIO_SIM_CHANNEL_COUNT + (size_t)c] * 1e-9);
            }
            (void)fprintf(f, "}}");
        }
    }
    (void)fprintf(f, "\n]}\n");
    return tio_outfile_commit(o);
}
