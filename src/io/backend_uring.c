/*
 * The `uring` backend: io_uring through liburing (compiled only when liburing is found).
 * Swap files are registered (IOSQE_FIXED_FILE) and so are the engine's staging buffers
 * (read_fixed/write_fixed); caller buffers go through plain read/write SQEs. Containers and
 * seccomp profiles often refuse io_uring_setup: the probe turns that into score 0.
 *
 * Caller-driven completions (arm/park/unpark, see backend.h): an eventfd is registered with
 * the ring (io_uring_register_eventfd) and the kernel signals it for each completion unless
 * IORING_CQ_EVENTFD_DISABLED is set in the ring's CQ flags, which userspace toggles without a
 * system call. The thread that drives disables it while it reaps itself; the progress thread
 * parks in poll() on it. Option "park=0" turns this off (for comparisons and tests).
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "io/backend.h"
#include "io/throttle.h"

/* user_data of the eventfd read that notify() completes */
#define URING_WAKE_USER UINT64_MAX

struct uring_state {
    struct io_uring ring;
    int wake_fd;       /* eventfd written by notify(); a read of it is always armed */
    uint64_t wake_val; /* target of that read */
    int cq_fd;         /* eventfd registered with the ring for park(), or -1 */
    int files_registered;
    int bufs_registered;
    const int *fds;
    uint32_t nfds;
};

static int uring_probe(char *reason, size_t len) {
    struct io_uring ring;
    int rc = io_uring_queue_init(4, &ring, 0);
    if (rc < 0) {
        char buf[128];
        (void)snprintf(reason, len, "io_uring_setup: %s", strerror_r(-rc, buf, sizeof buf));
        return 0;
    }
    struct io_uring_probe *p = io_uring_get_probe_ring(&ring);
    int ok = p && io_uring_opcode_supported(p, IORING_OP_READ) &&
             io_uring_opcode_supported(p, IORING_OP_WRITE);
    if (p) {
        io_uring_free_probe(p);
    }
    io_uring_queue_exit(&ring);
    if (!ok) {
        (void)snprintf(reason, len, "io_uring lacks IORING_OP_READ/WRITE (kernel < 5.6)");
        return 0;
    }
    (void)snprintf(reason, len, "io_uring with O_DIRECT, registered files and buffers (liburing)");
    return 100;
}

/* Queue the read of the wake eventfd (submitted with the next io_uring_submit). */
static int arm_wake(struct uring_state *st) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
    if (!sqe) {
        return -EAGAIN;
    }
    io_uring_prep_read(sqe, st->wake_fd, &st->wake_val, sizeof st->wake_val, 0);
    io_uring_sqe_set_data64(sqe, URING_WAKE_USER);
    return 0;
}

static void uring_fini(void *state);

static int uring_init(const struct tio_io_config *cfg, void **state) {
    struct tio_throttle t;
    if (tio_throttle_parse(cfg->options, &t) != 0) { /* set, or not a number */
        return tio_set_error(TIO_EINVAL, "uring: the throttle_* options need a thread-pool "
                                         "backend (posix, cuda, cufile)");
    }
    struct uring_state *st = tio_calloc(1, sizeof(*st));
    if (!st) {
        return TIO_ENOMEM;
    }
    /* one entry more than the core keeps in flight: the armed wake read */
    int rc = io_uring_queue_init(cfg->depth + 1, &st->ring, 0);
    if (rc < 0) {
        tio_free(st);
        return tio_set_error(TIO_EUNAVAIL, "io_uring_queue_init(%u): %s", cfg->depth,
                             tio_strerror(rc));
    }
    st->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (st->wake_fd < 0 || arm_wake(st) < 0 || io_uring_submit(&st->ring) < 0) {
        int err = st->wake_fd < 0 ? -errno : TIO_EUNAVAIL;
        if (st->wake_fd >= 0) {
            close(st->wake_fd);
        }
        io_uring_queue_exit(&st->ring);
        tio_free(st);
        return tio_set_error(err, "io_uring: cannot arm the wake-up eventfd");
    }
    st->cq_fd = -1;
    uint64_t park = 1;
    if (tio_io_option_u64(cfg->options, "park", &park) < 0) {
        char detail[256];
        (void)snprintf(detail, sizeof detail, "%s", tio_last_error());
        uring_fini(st);
        return tio_set_error(TIO_EINVAL, "uring: %s", detail);
    }
    if (park) {
        /* park() needs the registered eventfd and the CQ flags word (kernel >= 5.8); without
         * them arm() answers -ENOTSUP and the engine uses its progress thread alone */
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd >= 0 && io_uring_register_eventfd(&st->ring, fd) == 0 &&
            io_uring_cq_eventfd_toggle(&st->ring, false) == 0) {
            st->cq_fd = fd;
        } else if (fd >= 0) {
            (void)io_uring_unregister_eventfd(&st->ring);
            close(fd);
        }
    }
    st->fds = cfg->fds;
    st->nfds = cfg->nfds;
    if (cfg->nfds && io_uring_register_files(&st->ring, cfg->fds, cfg->nfds) == 0) {
        st->files_registered = 1;
    }
    *state = st;
    return 0;
}

static void uring_fini(void *state) {
    struct uring_state *st = state;
    /* drain what is still in flight so the kernel no longer touches the buffers */
    struct io_uring_cqe *cqe;
    while (io_uring_cq_ready(&st->ring) || io_uring_sq_ready(&st->ring)) {
        if (io_uring_wait_cqe(&st->ring, &cqe) < 0) {
            break;
        }
        io_uring_cqe_seen(&st->ring, cqe);
    }
    io_uring_queue_exit(&st->ring); /* also drops registrations and the armed wake read */
    close(st->wake_fd);
    if (st->cq_fd >= 0) {
        close(st->cq_fd);
    }
    tio_free(st);
}

static int uring_register_bufs(void *state, void *const *bufs, const uint64_t *lens, uint32_t n) {
    struct uring_state *st = state;
    struct iovec *iov = tio_calloc(n, sizeof(*iov));
    if (!iov) {
        return TIO_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        iov[i] = (struct iovec){ bufs[i], (size_t)lens[i] };
    }
    int rc = io_uring_register_buffers(&st->ring, iov, n);
    tio_free(iov);
    if (rc < 0) {
        return rc; /* e.g. RLIMIT_MEMLOCK too small: the core runs unregistered */
    }
    st->bufs_registered = 1;
    return 0;
}

static void uring_unregister_bufs(void *state) {
    struct uring_state *st = state;
    if (st->bufs_registered) {
        (void)io_uring_unregister_buffers(&st->ring);
    }
    st->bufs_registered = 0;
}

static int uring_submit(void *state, const struct tio_io_req *reqs, uint32_t n) {
    struct uring_state *st = state;
    uint32_t k = 0;
    for (; k < n; k++) {
        const struct tio_io_req *r = &reqs[k];
        if (r->mem != TIO_MEM_HOST || r->file < 0 || (uint32_t)r->file >= st->nfds) {
            break; /* the core never sends these: caps has no DEVICE_MEM */
        }
        struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
        if (!sqe) {
            break;
        }
        int fd = st->files_registered ? r->file : st->fds[r->file];
        int fixed_buf = st->bufs_registered && r->buf_index >= 0;
        if (r->op == TIO_IO_OP_WRITE) {
            if (fixed_buf) {
                io_uring_prep_write_fixed(sqe, fd, r->buf, r->len, r->off, r->buf_index);
            } else {
                io_uring_prep_write(sqe, fd, r->buf, r->len, r->off);
            }
        } else {
            if (fixed_buf) {
                io_uring_prep_read_fixed(sqe, fd, r->buf, r->len, r->off, r->buf_index);
            } else {
                io_uring_prep_read(sqe, fd, r->buf, r->len, r->off);
            }
        }
        if (st->files_registered) {
            sqe->flags |= IOSQE_FIXED_FILE;
        }
        io_uring_sqe_set_data64(sqe, r->user);
    }
    if (k) {
        int rc;
        do {
            rc = io_uring_submit(&st->ring);
        } while (rc == -EINTR);
        if (rc < 0) {
            return rc;
        }
    }
    return (k || !n) ? (int)k : -EAGAIN;
}

static int
uring_reap(void *state, uint32_t min, uint32_t max, int64_t timeout_ns, struct tio_io_cqe *out) {
    struct uring_state *st = state;
    uint32_t got = 0;
    while (got < max) {
        struct io_uring_cqe *cqe = NULL;
        int rc = io_uring_peek_cqe(&st->ring, &cqe);
        if (rc == -EAGAIN) {
            if (got >= min) {
                break;
            }
            if (timeout_ns < 0) {
                rc = io_uring_wait_cqe(&st->ring, &cqe);
            } else {
                struct __kernel_timespec ts = { .tv_sec = timeout_ns / 1000000000,
                                                .tv_nsec = timeout_ns % 1000000000 };
                rc = io_uring_wait_cqe_timeout(&st->ring, &cqe, &ts);
            }
            if (rc == -ETIME || rc == -EINTR || rc == -EAGAIN) {
                break;
            }
            if (rc < 0) {
                return got ? (int)got : rc;
            }
        }
        uint64_t user = io_uring_cqe_get_data64(cqe);
        int32_t res = cqe->res;
        io_uring_cqe_seen(&st->ring, cqe);
        if (user == URING_WAKE_USER) {
            /* notify(): re-arm and return what we have, so the core looks at new work */
            if (arm_wake(st) == 0) {
                (void)io_uring_submit(&st->ring);
            }
            (void)res;
            break;
        }
        out[got++] = (struct tio_io_cqe){ user, res };
    }
    return (int)got;
}

static void uring_notify(void *state) {
    struct uring_state *st = state;
    uint64_t one = 1;
    ssize_t n = write(st->wake_fd, &one, sizeof one); /* thread-safe; never blocks */
    (void)n; /* EAGAIN: the counter is saturated, a wake-up is pending anyway */
}

static int uring_arm(void *state, int on) {
    struct uring_state *st = state;
    if (st->cq_fd < 0) {
        return -ENOTSUP;
    }
    (void)io_uring_cq_eventfd_toggle(&st->ring, on != 0);
    if (!on) {
        return 0;
    }
    /* the kernel posts a CQE, then reads the flag; we write the flag, then read the CQ tail:
     * a full fence here so that at least one side sees the other (park() also has a timeout) */
    atomic_thread_fence(memory_order_seq_cst);
    return io_uring_cq_ready(&st->ring) > 0;
}

static void uring_park(void *state, int64_t timeout_ns) {
    struct uring_state *st = state;
    struct pollfd pfd = { .fd = st->cq_fd, .events = POLLIN };
    struct timespec ts = { 0, 0 };
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / 1000000000);
        ts.tv_nsec = (long)(timeout_ns % 1000000000);
    }
    if (ppoll(&pfd, 1, timeout_ns >= 0 ? &ts : NULL, NULL) > 0) {
        uint64_t v;
        ssize_t n = read(st->cq_fd, &v, sizeof v); /* reset the counter (non-blocking) */
        (void)n;
    }
}

static void uring_unpark(void *state) {
    struct uring_state *st = state;
    uint64_t one = 1;
    ssize_t n = write(st->cq_fd, &one, sizeof one); /* thread-safe; never blocks */
    (void)n;
}

const struct tio_io_backend_ops tio_io_backend_uring = {
    .api_version = TIO_IO_BACKEND_API,
    .name = "uring",
    .caps = TIO_ENGINE_CAP_ASYNC | TIO_ENGINE_CAP_NEEDS_ALIGN | TIO_ENGINE_CAP_REG_BUFS |
            TIO_ENGINE_CAP_REG_FILES,
    .probe = uring_probe,
    .init = uring_init,
    .fini = uring_fini,
    .register_bufs = uring_register_bufs,
    .unregister_bufs = uring_unregister_bufs,
    .submit = uring_submit,
    .reap = uring_reap,
    .notify = uring_notify,
    .arm = uring_arm,
    .park = uring_park,
    .unpark = uring_unpark,
};
