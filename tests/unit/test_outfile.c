/* Output files (src/common/outfile.c) and the writers that go through it (trace and plan save,
 * analysis CSV): symlinks written through, non-regular files refused and left alone, owner and
 * mode kept, hard links kept, nothing followed at a temporary name. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <teraio/analysis.h>
#include <teraio/plan.h>
#include <teraio/trace.h>

#include "common/outfile.h"
#include "tio_test.h"

static char dir[256];

static const char *at(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    (void)snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        (void)fputs(text, f);
        (void)fclose(f);
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

/* Entries in the test directory (a leftover temporary file shows up here). */
static int entries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        n += e->d_name[0] != '.';
    }
    if (d) {
        (void)closedir(d);
    }
    return n;
}

static void clean(void) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] != '.' || strlen(e->d_name) > 2) {
            (void)unlink(at(e->d_name));
        }
    }
    if (d) {
        (void)closedir(d);
    }
}

static struct tio_trace *example(void) {
    char path[512];
    (void)snprintf(path, sizeof path, "%s/example.json", getenv("TIO_TEST_DATA"));
    struct tio_trace *tr = NULL;
    return tio_trace_load(path, TIO_TRACE_FORMAT_AUTO, &tr) < 0 ? NULL : tr;
}

static struct tio_plan *small_plan(void) {
    struct tio_plan *p = NULL;
    if (tio_plan_new(42, 4, "none", &p) < 0) {
        return NULL;
    }
    if (tio_plan_finish(p) < 0) {
        tio_plan_free(p);
        return NULL;
    }
    return p;
}

TIO_TEST(plan_save_ignores_planted_tmp_symlink) {
    /* The old plan save opened PATH.tmp<pid> without O_EXCL: a link planted there was followed
     * and its target overwritten. */
    clean();
    struct tio_plan *p = small_plan();
    CHECK(p != NULL);
    put(at("victim"), "precious\n");
    char planted[512];
    (void)snprintf(planted, sizeof planted, "%s.tmp%ld", at("out.plan"), (long)getpid());
    CHECK_EQ_I(symlink(at("victim"), planted), 0);
    CHECK_OK(tio_plan_save(p, at("out.plan"), TIO_PLAN_FORMAT_JSON));
    CHECK_STR(head(at("victim")), "precious\n");
    struct stat st;
    CHECK(lstat(planted, &st) == 0 && S_ISLNK(st.st_mode));
    struct tio_plan *back = NULL;
    CHECK_OK(tio_plan_load(at("out.plan"), TIO_PLAN_FORMAT_AUTO, &back));
    CHECK_EQ_U(back ? tio_plan_trace_hash(back) : 0, 42);
    tio_plan_free(back);
    tio_plan_free(p);
}

TIO_TEST(save_writes_through_symlink) {
    clean();
    struct tio_trace *tr = example();
    struct tio_plan *p = small_plan();
    REQUIRE_OR(tr && p, (tio_trace_free(tr), tio_plan_free(p)));
    put(at("real.tio"), "old\n");
    CHECK_EQ_I(symlink("real.tio", at("link.tio")), 0); /* relative, as ln -s makes them */
    CHECK_OK(tio_trace_save(tr, at("link.tio"), TIO_TRACE_FORMAT_BINARY));
    struct stat st;
    CHECK(lstat(at("link.tio"), &st) == 0 && S_ISLNK(st.st_mode));
    struct tio_trace *back = NULL;
    CHECK_OK(tio_trace_load(at("real.tio"), TIO_TRACE_FORMAT_AUTO, &back));
    CHECK_EQ_U(back ? tio_trace_kernel_count(back) : 0, tio_trace_kernel_count(tr));
    tio_trace_free(back);
    /* a dangling link: its target is created */
    CHECK_EQ_I(symlink(at("new.plan"), at("link.plan")), 0);
    CHECK_OK(tio_plan_save(p, at("link.plan"), TIO_PLAN_FORMAT_BINARY));
    CHECK(lstat(at("link.plan"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(lstat(at("new.plan"), &st) == 0 && S_ISREG(st.st_mode));
    CHECK_EQ_I(entries(), 4); /* no temporary file left behind */
    /* a link loop is an error, not a hang */
    CHECK_EQ_I(symlink("loop", at("loop")), 0);
    CHECK_RC(tio_plan_save(p, at("loop"), TIO_PLAN_FORMAT_BINARY), -ELOOP);
    tio_plan_free(p);
    tio_trace_free(tr);
}

TIO_TEST(save_refuses_what_is_not_a_regular_file) {
    clean();
    struct tio_plan *p = small_plan();
    CHECK(p != NULL);
    struct stat st;
    /* A character device: renaming over it replaced the node (as root). The test makes its own
     * node (null's numbers) when it can, never aiming a save at /dev/null itself, so that a
     * broken save cannot replace the machine's /dev/null. */
    if (mknod(at("null"), S_IFCHR | 0666, makedev(1, 3)) == 0) {
        CHECK_RC(tio_plan_save(p, at("null"), TIO_PLAN_FORMAT_BINARY), TIO_EINVAL);
        CHECK_ERR_HAS("character device");
        CHECK(lstat(at("null"), &st) == 0 && S_ISCHR(st.st_mode));
    }
    /* a symlink to a device: written through, so refused the same way */
    CHECK_EQ_I(symlink("/dev/null", at("null-link")), 0);
    CHECK_RC(tio_plan_save(p, at("null-link"), TIO_PLAN_FORMAT_BINARY), TIO_EINVAL);
    CHECK_ERR_HAS("character device");
    CHECK(lstat(at("null-link"), &st) == 0 && S_ISLNK(st.st_mode));
    /* a FIFO: refused at once (opening it for writing would block) */
    CHECK_EQ_I(mkfifo(at("fifo"), 0600), 0);
    CHECK_RC(tio_plan_save(p, at("fifo"), TIO_PLAN_FORMAT_JSON), TIO_EINVAL);
    CHECK_ERR_HAS("FIFO");
    CHECK(lstat(at("fifo"), &st) == 0 && S_ISFIFO(st.st_mode));
    /* a directory, also with a trailing slash */
    CHECK_EQ_I(mkdir(at("sub"), 0700), 0);
    CHECK_RC(tio_plan_save(p, at("sub"), TIO_PLAN_FORMAT_JSON), -EISDIR);
    CHECK_RC(tio_plan_save(p, at("sub/"), TIO_PLAN_FORMAT_JSON), -EISDIR);
    CHECK_ERR_HAS("directory");
    CHECK(lstat(at("sub"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_EQ_I(rmdir(at("sub")), 0);
    /* a missing directory */
    CHECK_RC(tio_plan_save(p, at("nosuch/x.plan"), TIO_PLAN_FORMAT_JSON), -ENOENT);
    CHECK_ERR_HAS("nosuch");
    tio_plan_free(p);
}

TIO_TEST(save_keeps_mode_and_hard_links) {
    clean();
    struct tio_plan *p = small_plan();
    CHECK(p != NULL);
    mode_t old_mask = umask(022);
    put(at("secret.plan"), "old\n");
    CHECK_EQ_I(chmod(at("secret.plan"), 0600), 0);
    CHECK_OK(tio_plan_save(p, at("secret.plan"), TIO_PLAN_FORMAT_JSON));
    struct stat st;
    CHECK(stat(at("secret.plan"), &st) == 0);
    CHECK_EQ_I(st.st_mode & 07777, 0600);
    CHECK(strcmp(head(at("secret.plan")), "old\n") != 0);
    /* a new file gets 0666 less the umask */
    CHECK_OK(tio_plan_save(p, at("fresh.plan"), TIO_PLAN_FORMAT_JSON));
    CHECK(stat(at("fresh.plan"), &st) == 0);
    CHECK_EQ_I(st.st_mode & 07777, 0644);
    /* hard links: both names see the new content */
    put(at("a.plan"), "old\n");
    CHECK_EQ_I(link(at("a.plan"), at("b.plan")), 0);
    CHECK_OK(tio_plan_save(p, at("a.plan"), TIO_PLAN_FORMAT_JSON));
    CHECK(strcmp(head(at("b.plan")), "old\n") != 0);
    CHECK_STR(head(at("b.plan")), head(at("a.plan")));
    CHECK_EQ_I(entries(), 4);
    (void)umask(old_mask);
    tio_plan_free(p);
}

TIO_TEST(save_keeps_owner) {
    if (geteuid() != 0)
        SKIP_CASE("needs root to chown a file to another user");
    /* As root, rename put a root-owned file in place of another user's. */
    clean();
    struct tio_plan *p = small_plan();
    CHECK(p != NULL);
    put(at("theirs.plan"), "old\n");
    CHECK_EQ_I(chown(at("theirs.plan"), 65534, 65534), 0);
    CHECK_EQ_I(chmod(at("theirs.plan"), 0600), 0);
    CHECK_OK(tio_plan_save(p, at("theirs.plan"), TIO_PLAN_FORMAT_JSON));
    struct stat st;
    CHECK(stat(at("theirs.plan"), &st) == 0);
    CHECK_EQ_U(st.st_uid, 65534);
    CHECK_EQ_U(st.st_gid, 65534);
    CHECK_EQ_I(st.st_mode & 07777, 0600);
    CHECK(strcmp(head(at("theirs.plan")), "old\n") != 0);
    tio_plan_free(p);
}

TIO_TEST(save_in_place_when_owner_cannot_be_kept) {
    if (geteuid() != 0)
        SKIP_CASE("needs root to become another user");
    /* A user who may write another user's file but not chown a new one to that user: the file
     * is rewritten in place (same inode, owner and mode) rather than replaced by one of theirs.
     * Run as nobody in a child, on a root-owned 0666 file in a sticky world-writable folder. */
    clean();
    CHECK_EQ_I(chmod(dir, 0711), 0);
    CHECK_EQ_I(mkdir(at("pub"), 0700), 0);
    CHECK_EQ_I(chmod(at("pub"), 01777), 0);
    char path[512];
    (void)snprintf(path, sizeof path, "%s", at("pub/shared.plan"));
    put(path, "old\n");
    CHECK_EQ_I(chmod(path, 0666), 0);
    struct stat before, after;
    CHECK(stat(path, &before) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) {
            _exit(3);
        }
        struct tio_plan *p = small_plan();
        _exit(p && tio_plan_save(p, path, TIO_PLAN_FORMAT_JSON) == 0 ? 0 : 1);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(stat(path, &after) == 0);
    CHECK_EQ_U(after.st_ino, before.st_ino);
    CHECK_EQ_U(after.st_uid, 0);
    CHECK_EQ_I(after.st_mode & 07777, 0666);
    CHECK(strcmp(head(path), "old\n") != 0);
    struct tio_plan *back = NULL;
    CHECK_OK(tio_plan_load(path, TIO_PLAN_FORMAT_AUTO, &back));
    tio_plan_free(back);
    (void)unlink(path);
    CHECK_EQ_I(rmdir(at("pub")), 0);
    CHECK_EQ_I(chmod(dir, 0700), 0);
}

TIO_TEST(abort_leaves_target_untouched) {
    clean();
    put(at("keep.txt"), "kept\n");
    struct tio_outfile *o = NULL;
    CHECK_OK(tio_outfile_open(at("keep.txt"), "test", &o));
    CHECK(o != NULL);
    if (o) {
        (void)fputs("half", tio_outfile_stream(o));
        tio_outfile_abort(o);
    }
    CHECK_STR(head(at("keep.txt")), "kept\n");
    CHECK_EQ_I(entries(), 1);
    CHECK_RC(tio_outfile_open("", "test", &o), TIO_EINVAL);
    CHECK(o == NULL);
}

TIO_TEST(analysis_csv_refuses_fifo) {
    /* fopen("w") on a FIFO named memory.csv blocked for ever; now it is refused by name. */
    clean();
    struct tio_trace *tr = example();
    struct tio_analysis *a = NULL;
    REQUIRE(tr != NULL);
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    CHECK_EQ_I(mkfifo(at("memory.csv"), 0600), 0);
    alarm(20); /* a hang is a failure, not a stuck CI job */
    CHECK_RC(tio_analysis_write_csv(a, dir), TIO_EINVAL);
    alarm(0);
    CHECK_ERR_HAS("memory.csv");
    CHECK_ERR_HAS("FIFO");
    tio_analysis_free(a);
    tio_trace_free(tr);
}

TIO_TEST(save_refuses_protected_symlink) {
    if (geteuid() != 0)
        SKIP_CASE("needs root to chown a link to another user");
    /* As root, a link planted by another user in a sticky world-writable folder (/tmp) pointing
     * at a root-only file got that file replaced, and a dangling one made root create a file
     * where it pointed. The kernel's protected-symlink rule would not follow either. */
    clean();
    struct tio_plan *p = small_plan();
    CHECK(p != NULL);
    CHECK_EQ_I(mkdir(at("shared"), 0755), 0);
    CHECK_EQ_I(chmod(at("shared"), 01777), 0);
    put(at("secret"), "secret\n");
    CHECK_EQ_I(chmod(at("secret"), 0600), 0);
    CHECK_EQ_I(symlink(at("secret"), at("shared/out.plan")), 0);
    CHECK_EQ_I(lchown(at("shared/out.plan"), 65534, 65534), 0);
    CHECK_RC(tio_plan_save(p, at("shared/out.plan"), TIO_PLAN_FORMAT_JSON), -EACCES);
    CHECK_ERR_HAS("protected-symlink");
    CHECK_STR(head(at("secret")), "secret\n");
    struct stat st;
    CHECK(lstat(at("shared/out.plan"), &st) == 0 && S_ISLNK(st.st_mode));
    /* a dangling one: nothing is created at its target */
    CHECK_EQ_I(symlink(at("created"), at("shared/dangling.plan")), 0);
    CHECK_EQ_I(lchown(at("shared/dangling.plan"), 65534, 65534), 0);
    CHECK_RC(tio_plan_save(p, at("shared/dangling.plan"), TIO_PLAN_FORMAT_JSON), -EACCES);
    CHECK(lstat(at("created"), &st) < 0);
    /* the analysis CSV files go through the same routine */
    struct tio_trace *tr = example();
    struct tio_analysis *a = NULL;
    CHECK(tr != NULL);
    CHECK_OK(tio_analysis_new(tr, NULL, &a));
    CHECK_EQ_I(symlink(at("secret"), at("shared/memory.csv")), 0);
    CHECK_EQ_I(lchown(at("shared/memory.csv"), 65534, 65534), 0);
    CHECK_RC(tio_analysis_write_csv(a, at("shared")), -EACCES);
    CHECK_STR(head(at("secret")), "secret\n");
    tio_analysis_free(a);
    tio_trace_free(tr);
    /* links the rule allows: the caller's own, and one in a folder that is not sticky */
    CHECK_EQ_I(symlink(at("mine.plan"), at("shared/mine.plan")), 0);
    CHECK_OK(tio_plan_save(p, at("shared/mine.plan"), TIO_PLAN_FORMAT_JSON));
    CHECK(lstat(at("mine.plan"), &st) == 0 && S_ISREG(st.st_mode));
    CHECK_EQ_I(symlink(at("theirs.plan"), at("their-link.plan")), 0);
    CHECK_EQ_I(lchown(at("their-link.plan"), 65534, 65534), 0);
    CHECK_OK(tio_plan_save(p, at("their-link.plan"), TIO_PLAN_FORMAT_JSON));
    CHECK(lstat(at("theirs.plan"), &st) == 0 && S_ISREG(st.st_mode));
    /* and one owned by the folder's owner */
    CHECK_EQ_I(chown(at("shared"), 65534, 65534), 0);
    CHECK_OK(tio_plan_save(p, at("shared/out.plan"), TIO_PLAN_FORMAT_JSON));
    CHECK(strcmp(head(at("secret")), "secret\n") != 0);
    tio_plan_free(p);
    DIR *d = opendir(at("shared"));
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[600];
        (void)snprintf(path, sizeof path, "%s/shared/%s", dir, e->d_name);
        (void)unlink(path);
    }
    if (d) {
        (void)closedir(d);
    }
    CHECK_EQ_I(rmdir(at("shared")), 0);
}

int main(void) {
    (void)snprintf(dir, sizeof dir, "/tmp/tio_outfile_%ld", (long)getpid());
    if (mkdir(dir, 0700) < 0) {
        printf("cannot create %s\n", dir);
        return 1;
    }
    RUN(plan_save_ignores_planted_tmp_symlink);
    RUN(save_writes_through_symlink);
    RUN(save_refuses_what_is_not_a_regular_file);
    RUN(save_keeps_mode_and_hard_links);
    RUN(save_keeps_owner);
    RUN(save_in_place_when_owner_cannot_be_kept);
    RUN(save_refuses_protected_symlink);
    RUN(abort_leaves_target_untouched);
    RUN(analysis_csv_refuses_fifo);
    clean();
    (void)rmdir(dir);
    return tio_test_done();
}
