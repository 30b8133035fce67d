/*
 * A fake libcufile for CI: the cuFile entry points the shim resolves, over the fake cudart's
 * shadow memory and pread/pwrite. It checks what the real library would rely on: the
 * descriptor's handle type is OPAQUE_FD and its fs_ops pointer is NULL (a stand-in struct
 * without that member would make us pass garbage here). Environment:
 * FAKE_CUFILE_REFUSE=1 makes cuFileHandleRegister refuse every file (per-file fallback),
 * FAKE_CUFILE_DRIVER_ERROR=e makes cuFileDriverOpen fail with e.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

void *fake_cuda_translate(const void *p, size_t len);
uint64_t fake_cufile_io_calls(void);

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

static _Atomic uint64_t io_calls;
static _Atomic int opens;

uint64_t fake_cufile_io_calls(void) {
    return atomic_load(&io_calls);
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
