/*
 * CLI robustness: every subcommand that reads a file gets hostile inputs in its place (empty,
 * truncated, random, oversized, a directory, a FIFO, /dev/null, /dev/zero, a symlink loop, a
 * symlink to /dev/zero). Each run is bounded in time (alarm, which survives exec) and memory
 * (RLIMIT_AS 1 GiB; under ASan, which maps more address space than that, its soft RSS limit of
 * 1 GiB) and must end with exit 2 (bad input) and a message naming the file: never a signal, a
 * timeout, a runtime failure or success. The runs go in parallel (a pool of 16) so that the test
 * stays short: about 2 s when every case behaves.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tio_test.h"

#define TIME_LIMIT_S 20
#define MEM_LIMIT    (1ull << 30)
#define MAX_PARALLEL 16
#define OUT_BYTES    4096
#define MAX_ARGS     16

static char dir[256];
static char trace[512];

/* Commands that read a file: %F is the hostile input, %T a valid trace, %O an output path. */
static const char *const commands[] = {
    "trace info %F",
    "trace validate %F",
    "trace convert %F %O",
    "analyze %F",
    "plan %F --hw paper-2xh100nvl",
    "plan %T --hw %F",
    "simulate %F --hw paper-2xh100nvl --policy none",
    "simulate %T --hw paper-2xh100nvl --plan %F",
    "simulate %T --hw %F --policy none",
    "sweep %F --hw paper-2xh100nvl --bandwidths 1GB/s",
    "hw show %F",
    "compare --paper --models llama3-8b --systems ideal --hw %F",
};

struct input {
    const char *name; /* file name in dir, or an absolute path */
    const char *what;
};

static const struct input inputs[] = {
    { "empty", "empty file" },
    { "truncated", "first half of a valid trace" },
    { "random", "64 KiB of random bytes" },
    { "oversized", "sparse 3 GiB file" },
    { "adir", "directory" },
    { "fifo", "FIFO without a writer" },
    { "/dev/null", "character device /dev/null" },
    { "/dev/zero", "character device /dev/zero" },
    { "loop", "symlink loop" },
    { "zero-link", "symlink to /dev/zero" },
};

struct run {
    pid_t pid;
    int out_fd; /* read end of the child's stdout+stderr */
    char label[600];
    char path[600];
    char out[OUT_BYTES];
    size_t n;
};

static void expand(const char *tmpl, const char *input, char *buf, size_t len, char **argv) {
    size_t n = 0;
    int argc = 0;
    static char cli[1024];
    (void)snprintf(cli, sizeof cli, "%s", getenv("TIO_CLI"));
    argv[argc++] = cli;
    char *word = buf;
    for (const char *p = tmpl;; p++) {
        if (*p == ' ' || *p == '\0') {
            buf[n++] = '\0';
            if (argc < MAX_ARGS - 1) {
                argv[argc++] = word;
            }
            word = buf + n;
            if (*p == '\0') {
                break;
            }
            continue;
        }
        const char *sub = NULL;
        char out[512];
        if (p[0] == '%' && p[1] == 'F') {
            sub = input;
        } else if (p[0] == '%' && p[1] == 'T') {
            sub = trace;
        } else if (p[0] == '%' && p[1] == 'O') {
            static unsigned outs;
            (void)snprintf(out, sizeof out, "%s/out-%u.tio", dir, outs++);
            sub = out;
        }
        if (sub) {
            n += (size_t)snprintf(buf + n, len - n, "%s", sub);
            p++;
        } else {
            buf[n++] = *p;
        }
        if (n + 1 >= len) {
            break;
        }
    }
    argv[argc] = NULL;
}

static void start(struct run *r, const char *tmpl, const struct input *in) {
    static char words[4096];
    char *argv[MAX_ARGS];
    if (in->name[0] == '/') {
        (void)snprintf(r->path, sizeof r->path, "%s", in->name);
    } else {
        (void)snprintf(r->path, sizeof r->path, "%s/%s", dir, in->name);
    }
    (void)snprintf(r->label, sizeof r->label, "%s|%s", tmpl, in->name);
    expand(tmpl, r->path, words, sizeof words, argv);
    int fds[2];
    r->n = 0;
    r->out[0] = '\0';
    if (pipe(fds) < 0) {
        r->pid = -1;
        return;
    }
    r->pid = fork();
    if (r->pid == 0) {
        close(fds[0]);
        (void)dup2(fds[1], STDOUT_FILENO);
        (void)dup2(fds[1], STDERR_FILENO);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            (void)dup2(devnull, STDIN_FILENO);
        }
#ifndef TIO_ASAN
        struct rlimit lim = { MEM_LIMIT, MEM_LIMIT };
        (void)setrlimit(RLIMIT_AS, &lim);
#else
        /* ASan maps terabytes of shadow, so RLIMIT_AS cannot bound it; its own soft RSS limit
         * makes allocations fail past 1 GiB instead (as the rlimit does elsewhere). */
        static char opts[1024];
        const char *old = getenv("ASAN_OPTIONS");
        (void)snprintf(opts, sizeof opts, "%s%ssoft_rss_limit_mb=1024:allocator_may_return_null=1",
                       old ? old : "", old && *old ? ":" : "");
        (void)setenv("ASAN_OPTIONS", opts, 1);
#endif
        alarm(TIME_LIMIT_S); /* kept across execv: SIGALRM ends a hang */
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    r->out_fd = fds[0];
}

/* Read what an exited child wrote (it is gone, so the pipe ends). */
static void collect(struct run *r) {
    for (;;) {
        char buf[1024];
        ssize_t k = read(r->out_fd, buf, sizeof buf);
        if (k <= 0) {
            break;
        }
        size_t room = sizeof r->out - 1 - r->n;
        size_t take = (size_t)k < room ? (size_t)k : room;
        memcpy(r->out + r->n, buf, take);
        r->n += take;
    }
    r->out[r->n] = '\0';
    close(r->out_fd);
}

/* What went wrong with one run, or NULL when it behaved. */
static const char *verdict(const struct run *r, int st, char *why, size_t len) {
    const char *base = strrchr(r->path, '/') ? strrchr(r->path, '/') + 1 : r->path;
    if (WIFSIGNALED(st)) {
        (void)snprintf(why, len, "killed by signal %d%s", WTERMSIG(st),
                       WTERMSIG(st) == SIGALRM ? " (over the time limit)" : "");
        return why;
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code != 2) {
        (void)snprintf(why, len, "exit %d, want 2 (bad input)", code);
        return why;
    }
    if (!strstr(r->out, base)) {
        (void)snprintf(why, len, "the message does not name '%s'", base);
        return why;
    }
    if (strcmp(base, "adir") == 0 && !strstr(r->out, "directory")) {
        (void)snprintf(why, len, "the message does not say it is a directory");
        return why;
    }
    return NULL;
}

static void judge(struct run *r, int st) {
    char why[256];
    const char *bad = verdict(r, st, why, sizeof why);
    if (bad) {
        TIO_T_FAIL("%s: %s; output:\n%s", r->label, bad, r->out);
    }
}

TIO_TEST(hostile_inputs) {
    size_t n_cmd = sizeof commands / sizeof commands[0];
    size_t n_in = sizeof inputs / sizeof inputs[0];
    size_t total = n_cmd * n_in, next = 0, running = 0;
    static struct run runs[MAX_PARALLEL];
    /* a pool: a hung case holds one slot until its alarm, the others keep going */
    while (next < total || running) {
        for (size_t j = 0; j < MAX_PARALLEL && next < total; j++) {
            if (runs[j].pid > 0) {
                continue;
            }
            start(&runs[j], commands[next / n_in], &inputs[next % n_in]);
            next++;
            if (runs[j].pid < 0) {
                TIO_T_FAIL("%s: cannot start", runs[j].label);
                runs[j].pid = 0;
            } else {
                running++;
            }
        }
        if (!running) {
            break;
        }
        int st = 0;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0) {
            TIO_T_FAIL("waitpid failed");
            return;
        }
        for (size_t j = 0; j < MAX_PARALLEL; j++) {
            if (runs[j].pid == pid) {
                collect(&runs[j]);
                judge(&runs[j], st);
                runs[j].pid = 0;
                running--;
            }
        }
    }
}

static int make_inputs(void) {
    char p[600];
    int ok = 1;
    (void)snprintf(p, sizeof p, "%s/empty", dir);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ok &= fd >= 0 && close(fd) == 0;
    /* truncated: the first half of the valid binary trace */
    FILE *in = fopen(trace, "rb");
    static unsigned char buf[1 << 16];
    size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
    if (in) {
        (void)fclose(in);
    }
    ok &= n > 16;
    (void)snprintf(p, sizeof p, "%s/truncated", dir);
    FILE *f = fopen(p, "wb");
    ok &= f && fwrite(buf, 1, n / 2, f) == n / 2;
    ok &= f && fclose(f) == 0;
    /* random: xorshift, fixed seed */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof buf; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    (void)snprintf(p, sizeof p, "%s/random", dir);
    f = fopen(p, "wb");
    ok &= f && fwrite(buf, 1, sizeof buf, f) == sizeof buf;
    ok &= f && fclose(f) == 0;
    /* oversized: 3 GiB, sparse (no disk space used), starting like a JSON document */
    (void)snprintf(p, sizeof p, "%s/oversized", dir);
    fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ok &= fd >= 0 && write(fd, "{\"a\": \"", 7) == 7 && ftruncate(fd, 3ll << 30) == 0;
    ok &= fd >= 0 && close(fd) == 0;
    (void)snprintf(p, sizeof p, "%s/adir", dir);
    ok &= mkdir(p, 0700) == 0;
    (void)snprintf(p, sizeof p, "%s/fifo", dir);
    ok &= mkfifo(p, 0600) == 0;
    (void)snprintf(p, sizeof p, "%s/loop", dir);
    ok &= symlink("loop", p) == 0;
    (void)snprintf(p, sizeof p, "%s/zero-link", dir);
    ok &= symlink("/dev/zero", p) == 0;
    return ok;
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI")) {
        TIO_SKIP("TIO_CLI not set (CLI not built)");
    }
    (void)snprintf(trace, sizeof trace, "%s/example.tio", getenv("TIO_TEST_DATA"));
    (void)snprintf(dir, sizeof dir, "/tmp/tio_cli_robust_%ld", (long)getpid());
    if (mkdir(dir, 0700) < 0 || !make_inputs()) {
        printf("cannot prepare the inputs in %s\n", dir);
        return 1;
    }
    RUN(hostile_inputs);
    char cmd[600];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) { /* NOLINT(concurrency-mt-unsafe): single-threaded test */
        printf("cannot remove %s\n", dir);
    }
    return tio_test_done();
}
