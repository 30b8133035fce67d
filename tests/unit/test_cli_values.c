/*
 * Hostile option values, one table for every command (the one parser, tools/teraio/cli_args.c):
 * spaces at either end, hexadecimal, inf and nan, bandwidths and scales outside the physical
 * range, sizes over an option's documented limit, fractions of a byte, empty values, list
 * elements and names, values given to flags. Each must be refused with exit 1 and a message
 * naming the option or the problem; the valid spellings beside them must still work.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "tio_test.h"

static char dir[256];   /* scratch: sub/ */
static char trace[512]; /* tests/data/example.tio */

struct row {
    const char *args; /* shell words; %T is the trace, %D the scratch directory */
    int code;
    const char *needle; /* must appear in the output */
};

#define SIM "simulate %T --hw paper-2xh100nvl --policy none"
#define SWP "sweep %T --hw paper-2xh100nvl"

static const struct row rows[] = {
    /* a space at either end, the same for every kind of value */
    { "analyze %T --capacity ' 1MiB'", 1, "--capacity" },
    { "analyze %T --capacity '1MiB '", 1, "--capacity" },
    { "analyze %T --top ' 3'", 1, "--top" },
    { "analyze %T --top '3 '", 1, "--top" },
    { "analyze %T --long-idle ' 1ms'", 1, "--long-idle" },
    { "plan %T --bandwidth-scale ' 2'", 1, "--bandwidth-scale" },
    { SWP " --bandwidths ' 1GB/s'", 1, "--bandwidths" },
    { SWP " --bandwidths '1GB/s '", 1, "--bandwidths" },
    /* hexadecimal nowhere */
    { "analyze %T --capacity 0x100000", 1, "--capacity" },
    { "analyze %T --top 0x10", 1, "--top" },
    { "plan %T --bandwidth-scale 0x2", 1, "--bandwidth-scale" },
    { SIM " --ssd-scale 0x1p1", 1, "--ssd-scale" },
    { SWP " --bandwidths 0x10GB/s", 1, "--bandwidths" },
    { "compare --paper --cpu-adam 0x10", 1, "--cpu-adam" },
    /* not finite */
    { "plan %T --capacity inf", 1, "--capacity" },
    { "plan %T --capacity nan", 1, "--capacity" },
    { "analyze %T --long-idle infinity", 1, "--long-idle" },
    /* bandwidths and scales outside the physical range */
    { SWP " --bandwidths 1e308", 1, "--bandwidths" },
    { SWP " --bandwidths 1e-300", 1, "--bandwidths" },
    { SWP " --bandwidths 1,2,1e308GB/s", 1, "--bandwidths" },
    { "compare --paper --zero-offload-fetch 1e308", 1, "--zero-offload-fetch" },
    { "compare --paper --zero-infinity-fetch 1e-300", 1, "--zero-infinity-fetch" },
    { "plan %T --bandwidth-scale 1e308", 1, "--bandwidth-scale" },
    { "plan %T --bandwidth-scale 1e-300", 1, "--bandwidth-scale" },
    { SIM " --ssd-scale 1e300", 1, "--ssd-scale" },
    { "compare --paper --cpu-adam 1e300", 1, "--cpu-adam" },
    /* sizes and counts over their documented limits */
    { "bench-io --dir %D/sub --chunk 8EiB", 1, "--chunk" },
    { "bench-io --dir %D/sub --chunk 2GiB", 1, "--chunk" },
    { "bench-io --dir %D/sub --depth 5000", 1, "--depth" },
    { "plan %T --capacity 8EiB", 1, "--capacity" },
    { "model --preset tiny --gpu-memory 2PiB", 1, "--gpu-memory" },
    { "compare --paper --zero-prefetch 65", 1, "--zero-prefetch" },
    { SIM " --warmup 17", 1, "--warmup" },
    { "plan %T --ssds 1025", 1, "--ssds" },
    /* a fraction of a byte is not a size */
    { "analyze %T --capacity 1.5", 1, "whole number of bytes" },
    { "plan %T --min-tensor 0.5B", 1, "whole number of bytes" },
    { "model --preset tiny --layers 1e3", 1, "--layers" },
    { "model --preset tiny --layers 2.5", 1, "--layers" },
    /* empty list elements */
    { SWP " --bandwidths 1,,2GB/s", 1, "empty element" },
    { SWP " --bandwidths ,", 1, "empty element" },
    { "compare --paper --systems ideal,", 1, "empty element" },
    { "compare --paper --models ,llama3-8b", 1, "empty element" },
    { "compare --paper --systems 'ideal, g10'", 1, "--systems" },
    /* empty values, names and arguments */
    { "plan %T --hw ''", 1, "--hw: empty value" },
    { "plan %T --policy ''", 1, "--policy: empty value" },
    { "plan %T -o ''", 1, "--output: empty value" },
    { "model --preset ''", 1, "--preset: empty value" },
    { "model --gpu ''", 1, "--gpu: empty value" },
    { SIM " --timeline ''", 1, "--timeline: empty value" },
    { "analyze %T --csv ''", 1, "--csv: empty value" },
    { "compare --paper --hw ''", 1, "--hw: empty value" },
    { "bench-io --dir ''", 1, "--dir: empty value" },
    { "analyze ''", 1, "empty" },
    { "trace info ''", 1, "empty" },
    /* a flag takes no value; a value option needs one, also after '=' */
    { "plan %T --json=1", 1, "--json takes no value" },
    { "analyze %T --capacity=", 1, "--capacity: empty value" },
    /* the valid spellings beside them */
    { "analyze %T --capacity 1048576 --top 3", 0, "" },
    { "analyze %T --capacity '1 MiB' --long-idle 1e-3", 0, "" },
    { "analyze %T --capacity=1.5KiB --top=2", 0, "" },
    { "plan %T --policy=teraio --bandwidth-scale 1e-3", 0, "" },
    { SWP " --bandwidths 1,2.5,4e0GB/s", 0, "" },
    { "analyze -- %T", 0, "" },
};

/* args with %T and %D expanded */
static void expand(const char *args, char *out, size_t len) {
    tio_test_expand(args, trace, dir, out, len);
}

TIO_TEST(hostile_values) {
    static char out[65536];
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char args[2048];
        expand(rows[i].args, args, sizeof args);
        int code = tio_test_run_cli(args, out, sizeof out);
        if (code != rows[i].code || !strstr(out, rows[i].needle)) {
            TIO_T_FAIL("'teraio %s' exited %d, want %d with \"%s\":\n%s", args, code, rows[i].code,
                       rows[i].needle, out);
        }
    }
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI")) {
        TIO_SKIP("TIO_CLI not set (CLI not built)");
    }
    (void)snprintf(trace, sizeof trace, "%s/example.tio", getenv("TIO_TEST_DATA"));
    (void)snprintf(dir, sizeof dir, "/tmp/tio_cli_values_%ld", (long)getpid());
    char p[512];
    (void)snprintf(p, sizeof p, "%s/sub", dir);
    if (mkdir(dir, 0700) < 0 || mkdir(p, 0700) < 0) {
        printf("cannot create %s\n", p);
        return 1;
    }
    RUN(hostile_values);
    (void)rmdir(p);
    (void)rmdir(dir);
    return tio_test_done();
}
