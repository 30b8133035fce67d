/*
 * Swap-file security: mode 0600, never reachable by a name while in use, gone after the
 * process exits (also after SIGKILL), and a directory reached through a symbolic link (anywhere
 * in the path, with or without a trailing slash) or writable by everyone without the sticky bit
 * is refused.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "../tio_test.h"
#include "common/common_impl.h"
#include "io_util.h"

static char g_dir[512];
static const char *g_dirv[1] = { g_dir };

/* Find our fd whose /proc/self/fd link points into dir; fill its link text. */
static int find_swap_fd(const char *dir, char *link, size_t len) {
    for (int fd = 3; fd < 1024; fd++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, link, len - 1);
        if (n <= 0)
            continue;
        link[n] = 0;
        if (!strncmp(link, dir, strlen(dir)) && link[strlen(dir)] == '/')
            return fd;
    }
    return -1;
}

TIO_TEST(mode_0600_and_no_name) {
    mode_t old = umask(0); /* the file must be 0600 even with a permissive umask */
    struct tio_engine_params p = io_params("posix", g_dirv, 1);
    p.ssd_reserve_bytes = 1 << 20;
    struct tio_engine *e = NULL;
    CHECK_OK(tio_engine_new(&p, &e));
    umask(old);
    REQUIRE(e != NULL);
    static unsigned char buf[4096] = { 1, 2, 3 };
    CHECK_OK(io_write(e, 1, buf, sizeof buf, TIO_MEM_HOST, TIO_TIER_SSD, TIO_PRIO_NORMAL, 1, NULL));
    CHECK_EQ_I(io_wait1(e).res, 4096);
    char link[1024];
    int fd = find_swap_fd(g_dir, link, sizeof link);
    CHECK(fd >= 0);
    if (fd >= 0) {
        printf("  swap file: fd %d -> %s\n", fd, link);
        struct stat st;
        CHECK(fstat(fd, &st) == 0);
        CHECK_EQ_U(st.st_mode & 07777, 0600);
        CHECK(S_ISREG(st.st_mode));
        CHECK_EQ_U(st.st_nlink, 0); /* no directory entry refers to it */
        CHECK(strstr(link, "(deleted)") != NULL);
        CHECK(st.st_size >= 1 << 20);
        CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC); /* not inherited by exec'd children */
    }
    CHECK_EQ_I(io_dir_entries(g_dir), 0); /* nothing to open by name */
    tio_engine_free(e);
    CHECK_EQ_I(io_dir_entries(g_dir), 0);
}

TIO_TEST(gone_after_sigkill) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        struct tio_engine_params p = io_params("posix", g_dirv, 1);
        p.ssd_reserve_bytes = 8 << 20;
        struct tio_engine *e = NULL;
        char ok = tio_engine_new(&p, &e) == 0 ? 'y' : 'n';
        if (write(pipefd[1], &ok, 1) != 1)
            _exit(2);
        pause(); /* killed here, engine open */
        _exit(0);
    }
    close(pipefd[1]);
    char ok = 0;
    CHECK(read(pipefd[0], &ok, 1) == 1);
    CHECK(ok == 'y');
    /* while the child lives: its fd shows a deleted file, the directory has no entry */
    char fdpath[64], link[1024];
    int found = 0;
    for (int fd = 3; fd < 64 && !found; fd++) {
        snprintf(fdpath, sizeof fdpath, "/proc/%d/fd/%d", (int)pid, fd);
        ssize_t n = readlink(fdpath, link, sizeof link - 1);
        if (n > 0) {
            link[n] = 0;
            found = !strncmp(link, g_dir, strlen(g_dir));
        }
    }
    CHECK(found);
    CHECK_EQ_I(io_dir_entries(g_dir), 0);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK_EQ_I(io_dir_entries(g_dir), 0); /* nothing left behind */
    close(pipefd[0]);
}

TIO_TEST(symlinked_directory_refused) {
    char link[600];
    snprintf(link, sizeof link, "%s.link", g_dir);
    unlink(link);
    CHECK(symlink(g_dir, link) == 0);
    const char *dirs[1] = { link };
    struct tio_engine_params p = io_params("posix", dirs, 1);
    struct tio_engine *e = NULL;
    CHECK_RC(tio_engine_new(&p, &e), -ELOOP);
    CHECK_ERR_HAS("symbolic link");
    CHECK(e == NULL);
    /* with a trailing slash (O_NOFOLLOW alone follows "link/") */
    char slashed[620];
    snprintf(slashed, sizeof slashed, "%s/", link);
    dirs[0] = slashed;
    p = io_params("posix", dirs, 1);
    CHECK_RC(tio_engine_new(&p, &e), -ELOOP);
    CHECK_ERR_HAS("symbolic link");
    CHECK(e == NULL);
    /* a link earlier in the path: LINK/sub */
    char sub[620], via[640];
    snprintf(sub, sizeof sub, "%s/sub", g_dir);
    snprintf(via, sizeof via, "%s/sub", link);
    CHECK(mkdir(sub, 0700) == 0);
    dirs[0] = via;
    p = io_params("posix", dirs, 1);
    CHECK_RC(tio_engine_new(&p, &e), -ELOOP);
    CHECK_ERR_HAS(".link is a symbolic link");
    CHECK(e == NULL);
    /* the real path works, also with a trailing slash and doubled slashes */
    snprintf(via, sizeof via, "%s//sub/", g_dir);
    dirs[0] = via;
    p = io_params("posix", dirs, 1);
    CHECK_OK(tio_engine_new(&p, &e));
    tio_engine_free(e);
    e = NULL;
    CHECK(rmdir(sub) == 0);
    dirs[0] = link;
    CHECK(unlink(link) == 0);
    /* a regular file is not a directory either */
    char file[600];
    snprintf(file, sizeof file, "%s.file", g_dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    close(fd);
    dirs[0] = file;
    p = io_params("posix", dirs, 1);
    CHECK_RC(tio_engine_new(&p, &e), -ENOTDIR);
    unlink(file);
}

TIO_TEST(world_writable_directory_refused) {
    /* Without the sticky bit, any user can rename our directory entries (or a parent's). */
    char dir[600], sub[620];
    snprintf(dir, sizeof dir, "%s/ww", g_dir);
    snprintf(sub, sizeof sub, "%s/ww/sub", g_dir);
    CHECK(mkdir(dir, 0700) == 0 && mkdir(sub, 0700) == 0);
    CHECK(chmod(dir, 0777) == 0);
    const char *dirs[1] = { dir };
    struct tio_engine_params p = io_params("posix", dirs, 1);
    struct tio_engine *e = NULL;
    CHECK_RC(tio_engine_new(&p, &e), -EPERM);
    CHECK_ERR_HAS("world-writable without the sticky bit");
    CHECK(e == NULL);
    dirs[0] = sub; /* a parent counts too */
    p = io_params("posix", dirs, 1);
    CHECK_RC(tio_engine_new(&p, &e), -EPERM);
    CHECK_ERR_HAS("/ww (in ");
    CHECK(e == NULL);
    CHECK(chmod(dir, 01777) == 0); /* sticky, like /tmp: accepted */
    CHECK_OK(tio_engine_new(&p, &e));
    tio_engine_free(e);
    CHECK(rmdir(sub) == 0 && rmdir(dir) == 0);
}

int main(void) {
    io_mkdtemp(g_dir, sizeof g_dir, "sec");
    RUN(mode_0600_and_no_name);
    RUN(gone_after_sigkill);
    RUN(symlinked_directory_refused);
    RUN(world_writable_directory_refused);
    CHECK(rmdir(g_dir) == 0);
    return tio_test_done();
}
