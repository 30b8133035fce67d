/*
 * The CLI's exit-code convention, checked over every subcommand from one table: 0 success,
 * 1 usage error (unknown option, bad or meaningless value: 0, nan, inf), 2 bad input or output
 * path, 3 runtime failure; each --help states it; every error message names what is wrong.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tio_test.h"

static char dir[256];   /* scratch: file, fifo, sub/, ww/ (world-writable) */
static char trace[512]; /* tests/data/example.tio */

struct row {
    const char *args; /* %T is the trace, %D the scratch directory */
    int code;
    const char *needle; /* must appear in the output */
};

/* Every subcommand; "report" is a Python program, its table is in tests/python. */
static const char *const commands[] = { "model", "trace",   "analyze", "plan",     "simulate",
                                        "sweep", "compare", "hw",      "bench-io", "probe" };

static const struct row rows[] = {
    /* usage errors: 1, naming the option */
    { "trace info %T --bogus", 1, "--bogus" },
    { "model --layers", 1, "--layers" },
    { "model --preset tiny --gpu-memory 0", 1, "--gpu-memory" },
    { "model --preset tiny --grad-accum 0", 1, "--grad-accum" },
    { "model --preset tiny --layers 0", 1, "--layers" },
    { "model --preset tiny --batch -3", 1, "--batch" },
    { "analyze %T --capacity 0", 1, "--capacity" },
    { "analyze %T --long-idle 1e300h", 1, "out of range" },
    { "analyze %T --long-idle nan", 1, "--long-idle" },
    { "analyze %T --long-idle 0", 1, "--long-idle" },
    { "plan %T --capacity 0", 1, "--capacity" },
    { "plan %T --bandwidth-scale nan", 1, "--bandwidth-scale" },
    { "plan %T --bandwidth-scale 0", 1, "--bandwidth-scale" },
    { "simulate %T --hw paper-2xh100nvl --policy none --iterations-per-day nan", 1,
      "--iterations-per-day" },
    { "simulate %T --hw paper-2xh100nvl --policy none --iterations-per-day 0", 1,
      "--iterations-per-day" },
    { "simulate %T --hw paper-2xh100nvl --policy none --ssd-scale inf", 1, "--ssd-scale" },
    { "simulate %T --hw paper-2xh100nvl --policy none --ssd-scale 1e999", 1, "--ssd-scale" },
    { "simulate %T --hw paper-2xh100nvl --policy none --capacity 0", 1, "--capacity" },
    { "sweep %T --hw paper-2xh100nvl --capacity 0", 1, "--capacity" },
    { "sweep %T --hw paper-2xh100nvl --bandwidths 1,nan", 1, "--bandwidths" },
    { "compare --paper --cpu-adam inf", 1, "--cpu-adam" },
    { "compare --paper --zero-offload-fetch 0", 1, "--zero-offload-fetch" },
    { "bench-io --dir %D/sub --depth 0", 1, "--depth" },
    { "bench-io --dir %D/sub --size 0", 1, "--size" },
    /* bad input: 2, naming the file */
    { "trace info %D/nosuch.tio", 2, "nosuch.tio" },
    { "trace validate %D/nosuch.tio", 2, "nosuch.tio" },
    { "trace convert %D/nosuch.tio %D/out.tio", 2, "nosuch.tio" },
    { "analyze %D/nosuch.tio", 2, "nosuch.tio" },
    { "plan %D/nosuch.tio", 2, "nosuch.tio" },
    { "simulate %D/nosuch.tio --hw paper-2xh100nvl --policy none", 2, "nosuch.tio" },
    { "simulate %T --hw paper-2xh100nvl --plan %D/nosuch.plan", 2, "nosuch.plan" },
    { "sweep %D/nosuch.tio --hw paper-2xh100nvl", 2, "nosuch.tio" },
    { "hw show %D/nosuch.json", 2, "nosuch.json" },
    { "model --preset nosuch-model", 2, "nosuch-model" },
    { "plan %T --policy nosuch-policy", 2, "nosuch-policy" },
    /* output paths the user named wrong: 2 in every command, naming the path */
    { "trace convert %T %D/nodir/out.tio", 2, "nodir" },
    { "model --preset tiny -o %D/nodir/out.tio", 2, "nodir" },
    { "plan %T -o %D/nodir/out.plan", 2, "nodir" },
    { "trace convert %T %D/sub", 2, "directory" },
    { "model --preset tiny -o %D/sub/", 2, "directory" },
    { "plan %T -o %D/fifo", 2, "FIFO" },
    { "trace convert %T %D/fifo", 2, "FIFO" },
    { "analyze %T --csv %D/file", 2, "not a directory" },
    { "simulate %T --hw paper-2xh100nvl --policy none --csv %D/file", 2, "file" },
    { "simulate %T --hw paper-2xh100nvl --policy none --timeline %D/sub", 2, "directory" },
    /* unsafe swap directories: 2, saying why */
    { "bench-io --dir %D/ww --size 4MiB --block 1MiB", 2, "sticky bit" },
    { "bench-io --dir %D/link/ --size 4MiB --block 1MiB", 2, "symbolic link" },
    { "bench-io --dir %D/nodir --size 4MiB --block 1MiB", 2, "nodir" },
    /* successes */
    { "trace validate %T", 0, "valid" },
    { "trace convert %T %D/ok.json", 0, "" },
    { "analyze %T --long-idle 1ms", 0, "" },
};

/* args with %T and %D expanded */
static void expand(const char *args, char *out, size_t len) {
    tio_test_expand(args, trace, dir, out, len);
}

TIO_TEST(every_help_states_the_convention) {
    static char out[65536];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        char args[128];
        (void)snprintf(args, sizeof args, "%s --help", commands[i]);
        int code = tio_test_run_cli(args, out, sizeof out);
        if (code != 0 || !strstr(out, "exit codes (every command): 0 success; 1 usage error") ||
            !strstr(out, "2 bad input or output") || !strstr(out, "3 runtime")) {
            TIO_T_FAIL("'teraio %s' exited %d without the exit-code convention:\n%s", args, code,
                       out);
        }
    }
    CHECK_EQ_I(tio_test_run_cli("--help", out, sizeof out), 0);
    CHECK(strstr(out, "exit codes (every command)") != NULL);
}

TIO_TEST(unknown_option_is_usage_error_everywhere) {
    static char out[65536];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        char args[128];
        /* trace and hw take a subcommand first */
        const char *sub = strcmp(commands[i], "trace") == 0 ? " info"
                          : strcmp(commands[i], "hw") == 0  ? " list"
                                                            : "";
        (void)snprintf(args, sizeof args, "%s%s --no-such-option", commands[i], sub);
        int code = tio_test_run_cli(args, out, sizeof out);
        if (code != 1 || !strstr(out, "--no-such-option")) {
            TIO_T_FAIL("'teraio %s' exited %d (want 1, naming the option):\n%s", args, code, out);
        }
    }
}

TIO_TEST(table) {
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

/* The first line of a file ("" when unreadable). */
static const char *head(const char *path) {
    static char buf[256];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) {
            buf[0] = '\0';
        }
        (void)fclose(f);
    }
    return buf;
}

TIO_TEST(outputs_refuse_protected_symlinks) {
    if (geteuid() != 0)
        SKIP_CASE("needs root to chown a link to another user");
    /* -o, --timeline and the files of --csv DIR, through links planted by another user (uid
     * 65534) in a sticky world-writable folder: exit 2 naming the rule; the target unchanged. */
    static char out[65536];
    char p[600], q[600], args[2048];
    (void)snprintf(p, sizeof p, "%s/shared", dir);
    CHECK_EQ_I(mkdir(p, 0755) == 0 && chmod(p, 01777) == 0, 1);
    (void)snprintf(p, sizeof p, "%s/secret", dir);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        (void)fputs("secret\n", f);
        (void)fclose(f);
    }
    static const char *const cmds[] = {
        "plan %T -o %D/shared/link",
        "model --preset tiny -o %D/shared/link",
        "trace convert %T %D/shared/link",
        "simulate %T --hw paper-2xh100nvl --policy none --timeline %D/shared/link",
        "analyze %T --csv %D/shared",
        "simulate %T --hw paper-2xh100nvl --policy none --csv %D/shared",
    };
    static const char *const links[] = { "link",    "memory.csv",  "periods.csv",
                                         "cdf.csv", "kernels.csv", "bandwidth.csv" };
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        (void)snprintf(q, sizeof q, "%s/shared/%s", dir, links[i]);
        CHECK_EQ_I(symlink(p, q) == 0 && lchown(q, 65534, 65534) == 0, 1);
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        expand(cmds[i], args, sizeof args);
        int code = tio_test_run_cli(args, out, sizeof out);
        if (code != 2 || !strstr(out, "protected-symlink")) {
            TIO_T_FAIL("'teraio %s' exited %d, want 2 naming the protected-symlink rule:\n%s", args,
                       code, out);
        }
        CHECK_STR(head(p), "secret\n");
    }
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI")) {
        TIO_SKIP("TIO_CLI not set (CLI not built)");
    }
    (void)snprintf(trace, sizeof trace, "%s/example.tio", getenv("TIO_TEST_DATA"));
    (void)snprintf(dir, sizeof dir, "/tmp/tio_cli_exit_%ld", (long)getpid());
    char p[512];
    if (mkdir(dir, 0700) < 0) {
        printf("cannot create %s\n", dir);
        return 1;
    }
    (void)snprintf(p, sizeof p, "%s/sub", dir);
    int ok = mkdir(p, 0700) == 0;
    (void)snprintf(p, sizeof p, "%s/ww", dir);
    ok &= mkdir(p, 0700) == 0 && chmod(p, 0777) == 0;
    (void)snprintf(p, sizeof p, "%s/fifo", dir);
    ok &= mkfifo(p, 0600) == 0;
    (void)snprintf(p, sizeof p, "%s/file", dir);
    int fd = open(p, O_CREAT | O_WRONLY, 0600);
    ok &= fd >= 0;
    if (fd >= 0) {
        close(fd);
    }
    (void)snprintf(p, sizeof p, "%s/link", dir);
    ok &= symlink("sub", p) == 0;
    if (!ok) {
        printf("cannot prepare %s\n", dir);
        return 1;
    }
    RUN(every_help_states_the_convention);
    RUN(unknown_option_is_usage_error_everywhere);
    RUN(table);
    RUN(outputs_refuse_protected_symlinks);
    char cmd[600];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) { /* NOLINT(concurrency-mt-unsafe): single-threaded test */
        printf("cannot remove %s\n", dir);
    }
    return tio_test_done();
}
