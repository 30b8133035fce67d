/*
 * A fake libcufile for CI: the cuFile entry points the shim resolves, over the fake cudart's
 * shadow memory and pread/pwrite. It checks what the real library would rely on: the
 * descriptor's handle type is OPAQUE_FD and its fs_ops pointer is NULL (a stand-in struct
 * without that member would make us pass garbage here). Environment:
 * FAKE_CUFILE_REFUSE=1 makes cuFileHandleRegister refuse every file (per-file fallback),
 * FAKE_CUFILE_DRIVER_ERROR=e makes cuFileDriverOpen fail with e.
 *
 * The optional calls: cuFileBufRegister/Deregister and cuFileStreamRegister/Deregister keep
 * counts of what is registered (fake_cufile_registered); cuFileReadAsync/cuFileWriteAsync queue
 * a host function on the stream (cudaLaunchHostFunc of the fake cudart) that reads *size_p and
 * the offsets when the stream reaches it, moves the bytes and writes *bytes_p, as the real ones
 * do; fake_cufile_set_async_error(e) makes them fail with e at once (the caller's fallback).
 * Built with FAKE_CUFILE_SYNC_ONLY (libtio_fake_cufile_sync.so), the library lacks them all, as
 * libcufile before the stream API did.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

void *fake_cuda_translate(const void *p, size_t len);
uint64_t fake_cufile_io_calls(void);
uint64_t fake_cufile_async_calls(void);
int fake_cufile_registered(int streams);
void fake_cufile_set_async_error(int e);
int cudaLaunchHostFunc(void *s, void (*fn)(void *), void *user);

typedef struct {
    int err;
    int cu_err;
} CUfileError_t;

typedef struct {
    int type;
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops;
} CUfileDescr_t;

struct fake_handle {
    int fd;
};

static _Atomic uint64_t io_calls, async_calls;
static _Atomic int opens, async_error, n_streams, n_bufs;

/* Synchronous reads and writes (cuFileRead, cuFileWrite). */
uint64_t fake_cufile_io_calls(void) {
    return atomic_load(&io_calls);
}

/* Asynchronous ones queued (cuFileReadAsync, cuFileWriteAsync), failed ones included. */
uint64_t fake_cufile_async_calls(void) {
    return atomic_load(&async_calls);
}

/* Streams (streams != 0) or buffers registered and not deregistered. */
int fake_cufile_registered(int streams) {
    return atomic_load(streams ? &n_streams : &n_bufs);
}

/* cuFileReadAsync/cuFileWriteAsync fail with e from now on (0: they work). */
void fake_cufile_set_async_error(int e) {
    atomic_store(&async_error, e);
}

CUfileError_t cuFileDriverOpen(void);
CUfileError_t cuFileDriverClose_v2(void);
CUfileError_t cuFileHandleRegister(void **fh, CUfileDescr_t *descr);
void cuFileHandleDeregister(void *fh);
ssize_t cuFileRead(void *fh, void *buf, size_t size, off_t off, off_t buf_off);
ssize_t cuFileWrite(void *fh, const void *buf, size_t size, off_t off, off_t buf_off);

CUfileError_t cuFileDriverOpen(void) {
    const char *e = getenv("FAKE_CUFILE_DRIVER_ERROR");
    if (e && atoi(e))
        return (CUfileError_t){ atoi(e), 0 };
    atomic_fetch_add(&opens, 1);
    return (CUfileError_t){ 0, 0 };
}

CUfileError_t cuFileDriverClose_v2(void) {
    atomic_fetch_sub(&opens, 1);
    return (CUfileError_t){ 0, 0 };
}

CUfileError_t cuFileHandleRegister(void **fh, CUfileDescr_t *descr) {
    if (atomic_load(&opens) <= 0)
        return (CUfileError_t){ 5001, 0 }; /* CU_FILE_DRIVER_NOT_INITIALIZED */
    if (!descr || descr->type != 1 || descr->fs_ops != NULL)
        return (CUfileError_t){ 5009, 0 }; /* CU_FILE_INVALID_VALUE-ish */
    const char *refuse = getenv("FAKE_CUFILE_REFUSE");
    if (refuse && atoi(refuse))
        return (CUfileError_t){ 5030, 0 }; /* CU_FILE_IO_NOT_SUPPORTED */
    struct fake_handle *h = malloc(sizeof(*h));
    if (!h)
        return (CUfileError_t){ 5010, 0 };
    h->fd = descr->handle.fd;
    *fh = h;
    return (CUfileError_t){ 0, 0 };
}

void cuFileHandleDeregister(void *fh) {
    free(fh);
}

ssize_t cuFileRead(void *fh, void *buf, size_t size, off_t off, off_t buf_off) {
    atomic_fetch_add(&io_calls, 1);
    unsigned char *shadow = fake_cuda_translate((unsigned char *)buf + buf_off, size);
    if (!shadow) {
        errno = EFAULT;
        return -1;
    }
    return pread(((struct fake_handle *)fh)->fd, shadow, size, off);
}

ssize_t cuFileWrite(void *fh, const void *buf, size_t size, off_t off, off_t buf_off) {
    atomic_fetch_add(&io_calls, 1);
    const unsigned char *shadow = fake_cuda_translate((const unsigned char *)buf + buf_off, size);
    if (!shadow) {
        errno = EFAULT;
        return -1;
    }
    return pwrite(((struct fake_handle *)fh)->fd, shadow, size, off);
}

#ifndef FAKE_CUFILE_SYNC_ONLY
/* ---- the optional calls ------------------------------------------------------------------ */
#define MAX_REG 256
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static const void *regs[2][MAX_REG]; /* [0] buffers, [1] streams (under reg_mu) */

/* Add (add != 0) or remove p in table t: 0, or CU_FILE_INVALID_VALUE-ish (already there when
 * added, absent when removed, table full). */
static int reg_change(int t, const void *p, int add) {
    int rc = 5009;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < MAX_REG; i++) {
        if (regs[t][i] == p && p) {
            if (!add) {
                regs[t][i] = NULL;
                atomic_fetch_sub(t ? &n_streams : &n_bufs, 1);
                rc = 0;
            }
            pthread_mutex_unlock(&reg_mu);
            return rc;
        }
    }
    for (int i = 0; add && i < MAX_REG; i++) {
        if (!regs[t][i]) {
            regs[t][i] = p;
            atomic_fetch_add(t ? &n_streams : &n_bufs, 1);
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

CUfileError_t cuFileBufRegister(const void *buf, size_t len, int flags);
CUfileError_t cuFileBufDeregister(const void *buf);
CUfileError_t cuFileStreamRegister(void *stream, unsigned flags);
CUfileError_t cuFileStreamDeregister(void *stream);
CUfileError_t cuFileReadAsync(
    void *fh, void *buf, size_t *size_p, off_t *off_p, off_t *buf_off_p, ssize_t *bytes_p, void *s);
CUfileError_t cuFileWriteAsync(
    void *fh, void *buf, size_t *size_p, off_t *off_p, off_t *buf_off_p, ssize_t *bytes_p, void *s);

CUfileError_t cuFileBufRegister(const void *buf, size_t len, int flags) {
    (void)flags;
    if (!buf || len == 0)
        return (CUfileError_t){ 5009, 0 };
    return (CUfileError_t){ reg_change(0, buf, 1), 0 };
}

CUfileError_t cuFileBufDeregister(const void *buf) {
    return (CUfileError_t){ reg_change(0, buf, 0), 0 };
}

CUfileError_t cuFileStreamRegister(void *stream, unsigned flags) {
    if (atomic_load(&opens) <= 0)
        return (CUfileError_t){ 5001, 0 };
    if (flags & ~0xFu)
        return (CUfileError_t){ 5009, 0 };
    return (CUfileError_t){ reg_change(1, stream, 1), 0 };
}

CUfileError_t cuFileStreamDeregister(void *stream) {
    return (CUfileError_t){ reg_change(1, stream, 0), 0 };
}

struct async_op {
    int fd, write;
    void *buf;
    size_t *size_p;
    off_t *off_p, *buf_off_p;
    ssize_t *bytes_p;
};

/* On the stream: the parameters are read now, as the real library does without FIXED flags. */
static void run_async(void *arg) {
    struct async_op *o = arg;
    unsigned char *shadow =
        fake_cuda_translate((unsigned char *)o->buf + *o->buf_off_p, *o->size_p);
    ssize_t n = -1;
    if (shadow)
        n = o->write ? pwrite(o->fd, shadow, *o->size_p, *o->off_p)
                     : pread(o->fd, shadow, *o->size_p, *o->off_p);
    *o->bytes_p = n;
    free(o);
}

static CUfileError_t queue_async(int write,
                                 void *fh,
                                 void *buf,
                                 size_t *size_p,
                                 off_t *off_p,
                                 off_t *buf_off_p,
                                 ssize_t *bytes_p,
                                 void *s) {
    atomic_fetch_add(&async_calls, 1);
    int e = atomic_load(&async_error);
    if (e)
        return (CUfileError_t){ e, 0 };
    if (!fh || !buf || !size_p || !off_p || !buf_off_p || !bytes_p)
        return (CUfileError_t){ 5009, 0 };
    struct async_op *o = malloc(sizeof *o);
    if (!o)
        return (CUfileError_t){ 5010, 0 };
    *o = (struct async_op){
        ((struct fake_handle *)fh)->fd, write, buf, size_p, off_p, buf_off_p, bytes_p
    };
    if (cudaLaunchHostFunc(s, run_async, o) != 0) {
        free(o);
        return (CUfileError_t){ 5011, 400 }; /* a CUDA error: an invalid stream */
    }
    return (CUfileError_t){ 0, 0 };
}

CUfileError_t cuFileReadAsync(void *fh,
                              void *buf,
                              size_t *size_p,
                              off_t *off_p,
                              off_t *buf_off_p,
                              ssize_t *bytes_p,
                              void *s) {
    return queue_async(0, fh, buf, size_p, off_p, buf_off_p, bytes_p, s);
}

CUfileError_t cuFileWriteAsync(void *fh,
                               void *buf,
                               size_t *size_p,
                               off_t *off_p,
                               off_t *buf_off_p,
                               ssize_t *bytes_p,
                               void *s) {
    return queue_async(1, fh, buf, size_p, off_p, buf_off_p, bytes_p, s);
}
#endif
