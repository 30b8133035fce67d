/* teraio probe: which I/O backends can run on this machine, and why (not). */
#include <stdio.h>
#include <string.h>

#include <teraio/io.h>

#include "cli.h"

static void usage(FILE *f) {
    (void)fprintf(
        f, "usage: teraio probe [--json]\n\n"
           "Probe every I/O backend of the migration engine (uring, posix, cufile,\n"
           "cuda, null, fault) and say whether it can run here and why. The engine's\n"
           "\"auto\" choice is the available backend with the highest score among those\n"
           "not marked test-only.\n\n"
           "options:\n"
           "  --json    machine-readable output: {\"backends\": [{name, available, score,\n"
           "            caps, reason}], \"auto\": name}\n\n"
           "examples:\n"
           "  teraio probe\n"
           "  teraio probe --json | jq '.backends[] | select(.available)'\n\n"
           "a backend that is unavailable is a result (exit 0), not an error.\n" TIO_CLI_EXIT_HELP);
}

static void print_caps(FILE *f, uint32_t caps, int json) {
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {
        { TIO_ENGINE_CAP_ASYNC, "async" },           { TIO_ENGINE_CAP_SYNC, "sync" },
        { TIO_ENGINE_CAP_DEVICE_MEM, "device_mem" }, { TIO_ENGINE_CAP_NEEDS_ALIGN, "needs_align" },
        { TIO_ENGINE_CAP_REG_BUFS, "reg_bufs" },     { TIO_ENGINE_CAP_REG_FILES, "reg_files" },
        { TIO_ENGINE_CAP_TEST_ONLY, "test_only" }
    };
    int first = 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(caps & names[i].bit)) {
            continue;
        }
        if (json) {
            (void)fprintf(f, "%s\"%s\"", first ? "" : ", ", names[i].name);
        } else {
            (void)fprintf(f, "%s%s", first ? "" : ",", names[i].name);
        }
        first = 0;
    }
}

int cli_cmd_probe(int argc, char **argv) {
    int json = 0;
    const struct cli_opt opts[] = {
        { .name = "--json", .kind = CLI_FLAG, .dst = &json, .value = 1 }
    };
    struct cli_spec spec = { "probe", opts, 1, usage, NULL, 0, 0, "options only" };
    int prc = cli_parse_args(&spec, argc, argv, 1, NULL);
    if (prc) {
        return prc == CLI_HELP_SHOWN ? TIO_EXIT_OK : prc;
    }
    struct tio_engine_backend_info b[32];
    int n = tio_engine_probe_all(b, 32);
    if (n > 32) {
        n = 32;
    }
    const char *best = "none";
    int best_score = 0;
    for (int i = 0; i < n; i++) {
        if (b[i].available && !(b[i].caps & TIO_ENGINE_CAP_TEST_ONLY) && b[i].score > best_score) {
            best_score = b[i].score;
            best = b[i].name;
        }
    }
    if (json) {
        printf("{\"backends\": [");
        for (int i = 0; i < n; i++) {
            printf("%s\n  {\"name\": ", i ? "," : "");
            cli_json_string(stdout, b[i].name);
            printf(", \"available\": %s, \"score\": %d, \"caps\": [",
                   b[i].available ? "true" : "false", b[i].score);
            print_caps(stdout, b[i].caps, 1);
            printf("], \"reason\": ");
            cli_json_string(stdout, b[i].reason);
            printf("}");
        }
        printf("\n], \"auto\": ");
        cli_json_string(stdout, best);
        printf("}\n");
        return TIO_EXIT_OK;
    }
    printf("%-8s %-5s %5s  %-40s %s\n", "backend", "avail", "score", "caps", "reason");
    for (int i = 0; i < n; i++) {
        printf("%-8s %-5s %5d  ", b[i].name, b[i].available ? "yes" : "no", b[i].score);
        char caps[128];
        FILE *m = fmemopen(caps, sizeof caps, "w");
        if (m) {
            print_caps(m, b[i].caps, 0);
            (void)fclose(m);
        } else {
            caps[0] = 0;
        }
        printf("%-40s %s\n", caps, b[i].reason);
    }
    printf("auto selects: %s\n", best);
    return TIO_EXIT_OK;
}
