/*
 * Hostile files for the loaders (trace, plan, hardware description): a FIFO with no writer, a
 * character device that never ends (/dev/zero), a directory and a 5 GiB sparse file. Each load
 * runs in a child limited to 20 s and 1 GiB of address space (tio_test_bounded), so a blocking
 * open or a read of the whole file fails the test; the load must return an error whose detail
 * names the file and the reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/trace.h>

#include "tio_test.h"

enum { LOAD_TRACE, LOAD_PLAN, LOAD_HW };

struct job {
    int kind;
    const char *path;
    int want;           /* expected status */
    const char *reason; /* expected in the detail, with the path */
};

/* Child side: 0 if the load failed as expected, else 1 (with what happened). */
static int load_job(void *arg) {
    const struct job *j = arg;
    int rc;
    if (j->kind == LOAD_TRACE) {
        struct tio_trace *tr = NULL;
        rc = tio_trace_load(j->path, TIO_TRACE_FORMAT_AUTO, &tr);
        tio_trace_free(tr);
    } else if (j->kind == LOAD_PLAN) {
        struct tio_plan *p = NULL;
        rc = tio_plan_load(j->path, TIO_PLAN_FORMAT_AUTO, &p);
        tio_plan_free(p);
    } else {
        struct tio_hw hw;
        rc = tio_hw_load(j->path, &hw);
    }
    const char *d = tio_last_error();
    if (rc != j->want || !strstr(d, j->path) || !strstr(d, j->reason)) {
        printf("  %s: got %d (%s), want %d; detail \"%s\" should name \"%s\"\n", j->path, rc,
               tio_strerror(rc), j->want, d, j->reason);
        return 1;
    }
    return 0;
}

static void expect(int kind, const char *path, int want, const char *reason) {
    struct job j = { kind, path, want, reason };
    int r = tio_test_bounded(load_job, &j, 1024, 20);
    if (r != 0) {
        TIO_T_FAIL("load %d of '%s': child returned %d", kind, path, r);
    }
}

static char dir[256];

static void path_in(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}

TIO_TEST(fifo_is_refused_without_blocking) {
    char fifo[300];
    path_in(fifo, sizeof fifo, "pipe");
    CHECK_EQ_I(mkfifo(fifo, 0600), 0);
    for (int k = LOAD_TRACE; k <= LOAD_HW; k++) {
        expect(k, fifo, TIO_EINVAL, "FIFO");
    }
}

TIO_TEST(endless_device_is_refused) {
    for (int k = LOAD_TRACE; k <= LOAD_HW; k++) {
        expect(k, "/dev/zero", TIO_EINVAL, "character device");
    }
}

TIO_TEST(directory_is_refused) {
    for (int k = LOAD_TRACE; k <= LOAD_HW; k++) {
        expect(k, dir, -EISDIR, "directory");
    }
}

/* Make a sparse file of `size` bytes that starts with `head`. */
static int sparse(const char *path, const void *head, size_t n, off_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        return -1;
    }
    int ok = (n == 0 || write(fd, head, n) == (ssize_t)n) && ftruncate(fd, size) == 0;
    return close(fd) == 0 && ok ? 0 : -1;
}

/*
 * A 5 GiB sparse file is refused before it is read (it was read whole, 5 GiB resident, before
 * the JSON size limit was checked): zeros, then headers whose counts or sizes lie.
 */
TIO_TEST(huge_sparse_files_are_refused_unread) {
    const off_t five = (off_t)5 << 30;
    char p[300];
    path_in(p, sizeof p, "zeros");
    CHECK_EQ_I(sparse(p, NULL, 0, five), 0);
    expect(LOAD_TRACE, p, TIO_EFORMAT, "above the JSON limit");
    expect(LOAD_PLAN, p, TIO_EFORMAT, "above the JSON limit");
    expect(LOAD_HW, p, TIO_EFORMAT, "above the limit");
    /* 3 GiB of zeros fits the JSON limits but is not text */
    CHECK_EQ_I(sparse(p, NULL, 0, (off_t)3 << 30), 0);
    expect(LOAD_TRACE, p, TIO_EFORMAT, "nor JSON text");
    /* a binary trace header whose file_bytes is the file's size, with counts that cannot be */
    unsigned char h[80] = "TIOTRACE";
    uint32_t v32 = 1, hb = 80;
    uint64_t v64 = (uint64_t)five, nk = (uint64_t)1 << 40;
    memcpy(h + 8, &v32, 4);
    memcpy(h + 12, &hb, 4);
    memcpy(h + 16, &nk, 8);
    memcpy(h + 72, &v64, 8);
    CHECK_EQ_I(sparse(p, h, sizeof h, five), 0);
    expect(LOAD_TRACE, p, TIO_EFORMAT, "n_kernels");
    /* a binary plan header whose move count does not match the size */
    unsigned char ph[200] = "TIOPLAN";
    v32 = 1;
    hb = 200;
    uint64_t nm = 3;
    memcpy(ph + 8, &v32, 4);
    memcpy(ph + 12, &hb, 4);
    memcpy(ph + 32, &nm, 8);
    CHECK_EQ_I(sparse(p, ph, sizeof ph, five), 0);
    expect(LOAD_PLAN, p, TIO_EFORMAT, "does not match the file size");
    CHECK_EQ_I(unlink(p), 0);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tio_hostile_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        TIO_SKIP("cannot create a temporary directory");
    }
    RUN(fifo_is_refused_without_blocking);
    RUN(endless_device_is_refused);
    RUN(directory_is_refused);
    RUN(huge_sparse_files_are_refused_unread);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_I(system(cmd), 0);
    return tio_test_done();
}
