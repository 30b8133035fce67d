/*
 * src/dl/cufile_shim.h - GPUDirect Storage (libcufile), reached only through dlopen.
 *
 * We call cuFile through these declarations, so they must match the real cufile.h layout
 * (tests/io/test_cufile_layout.c checks sizeof/offsetof against it where it is installed):
 * the descriptor is {handle-type enum, union {int fd; void *handle}, const fs-ops pointer
 * (must be NULL)}, the error struct is {CUfileOpError, CUresult}, the handle is void *.
 * Loaded once like cudart_shim.h: TIO_CUFILE_LIB, else libcufile.so.0, libcufile.so.1,
 * libcufile.so. cuFileDriverClose is a macro for cuFileDriverClose_v2 in CUDA 12+ headers,
 * so that name is resolved first.
 *
 * Optional (NULL where the library lacks them, as older releases lack the stream calls): the
 * asynchronous stream API (cuFileReadAsync/cuFileWriteAsync on a stream cuFileStreamRegister
 * prepared) and buffer registration (cuFileBufRegister, resolved but not called yet). The
 * backend falls back to the synchronous calls when one is missing or returns an error
 * (KvikIO's pattern).
 */
#ifndef TIO_DL_CUFILE_SHIM_H
#define TIO_DL_CUFILE_SHIM_H

#include <stddef.h>
#include <sys/types.h>

#define TIO_CU_FILE_SUCCESS               0
#define TIO_CU_FILE_HANDLE_TYPE_OPAQUE_FD 1
/* cuFileStreamRegister flags: the buffer offset, file offset and size are final when an
 * operation is queued; size and offsets are 4 KiB aligned. */
#define TIO_CU_FILE_STREAM_FIXED_BUF_OFFSET    1u
#define TIO_CU_FILE_STREAM_FIXED_FILE_OFFSET   2u
#define TIO_CU_FILE_STREAM_FIXED_FILE_SIZE     4u
#define TIO_CU_FILE_STREAM_PAGE_ALIGNED_INPUTS 8u

/* CUfileError_t: { CUfileOpError err; CUresult cu_err; } (both C enums, int-sized). */
struct tio_cufile_error {
    int err;
    int cu_err;
};

/* CUfileDescr_t */
struct tio_cufile_descr {
    int type; /* enum CUfileFileHandleType */
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops; /* const CUfileFSOps_t *: NULL for ordinary files */
};

typedef void *tio_cufile_handle; /* CUfileHandle_t */
struct CUstream_st;              /* CUstream is struct CUstream_st *, as is cudaStream_t */

struct tio_cufile_api {
    struct tio_cufile_error (*driver_open)(void);
    struct tio_cufile_error (*driver_close)(void);
    struct tio_cufile_error (*handle_register)(tio_cufile_handle *fh,
                                               struct tio_cufile_descr *descr);
    void (*handle_deregister)(tio_cufile_handle fh);
    ssize_t (*read)(tio_cufile_handle fh, void *buf, size_t size, off_t file_off, off_t buf_off);
    ssize_t (*write)(
        tio_cufile_handle fh, const void *buf, size_t size, off_t file_off, off_t buf_off);
    /* Optional. The stream is a cudaStream_t (a tio_cuda_stream converts). The async calls read
     * *size, *file_off and *buf_off when the stream reaches them (at queueing with the FIXED flags)
     * and write *bytes then: bytes moved, -1 (an OS error) or -CUfileOpError; all four must stay
     * valid until the stream has passed the operation. A stream is deregistered before it is
     * destroyed. */
    struct tio_cufile_error (*buf_register)(const void *buf, size_t len, int flags);
    struct tio_cufile_error (*buf_deregister)(const void *buf);
    struct tio_cufile_error (*stream_register)(struct CUstream_st *stream, unsigned flags);
    struct tio_cufile_error (*stream_deregister)(struct CUstream_st *stream);
    struct tio_cufile_error (*read_async)(tio_cufile_handle fh,
                                          void *buf,
                                          size_t *size,
                                          off_t *file_off,
                                          off_t *buf_off,
                                          ssize_t *bytes,
                                          struct CUstream_st *stream);
    struct tio_cufile_error (*write_async)(tio_cufile_handle fh,
                                           void *buf,
                                           size_t *size,
                                           off_t *file_off,
                                           off_t *buf_off,
                                           ssize_t *bytes,
                                           struct CUstream_st *stream);
};

/* The loaded table (or the test one), NULL if unavailable (reason in tio_cufile_reason). */
const struct tio_cufile_api *tio_cufile(void);
const char *tio_cufile_reason(void);
/* Tests: replace the table (NULL restores the loaded one). */
void tio_cufile_set_api(const struct tio_cufile_api *fake);

#endif
