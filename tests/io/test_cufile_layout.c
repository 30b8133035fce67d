/*
 * Our cuFile declarations (src/dl/cufile_shim.h) against the real cufile.h (docs/style.md
 * pitfall 1): we call libcufile through them, so sizes and offsets must match exactly. The
 * checks are compile-time; the program only reports. Without cufile.h (nvidia-cufile wheel)
 * and cuda.h it exits 77.
 */
#include <stddef.h>
#include <stdio.h>

#include "../tio_test.h"
#include "dl/cufile_shim.h"

#if defined(TIO_HAVE_CUFILE_H)
#include <cufile.h>

#define SAME_LAYOUT(ours, theirs) _Static_assert(sizeof(ours) == sizeof(theirs), #ours " size")
#define SAME_OFFSET(ours, f1, theirs, f2)                                                \
    _Static_assert(offsetof(ours, f1) == offsetof(theirs, f2), #ours "." #f1 " offset"); \
    _Static_assert(sizeof(((ours *)0)->f1) == sizeof(((theirs *)0)->f2), #ours "." #f1 " size")

SAME_LAYOUT(struct tio_cufile_error, CUfileError_t);
SAME_OFFSET(struct tio_cufile_error, err, CUfileError_t, err);
SAME_OFFSET(struct tio_cufile_error, cu_err, CUfileError_t, cu_err);
SAME_LAYOUT(struct tio_cufile_descr, CUfileDescr_t);
SAME_OFFSET(struct tio_cufile_descr, type, CUfileDescr_t, type);
SAME_OFFSET(struct tio_cufile_descr, handle, CUfileDescr_t, handle);
SAME_OFFSET(struct tio_cufile_descr, handle.fd, CUfileDescr_t, handle.fd);
SAME_OFFSET(struct tio_cufile_descr, handle.handle, CUfileDescr_t, handle.handle);
SAME_OFFSET(struct tio_cufile_descr, fs_ops, CUfileDescr_t, fs_ops);
SAME_LAYOUT(tio_cufile_handle, CUfileHandle_t);
_Static_assert(TIO_CU_FILE_SUCCESS == CU_FILE_SUCCESS, "CU_FILE_SUCCESS");
_Static_assert(TIO_CU_FILE_HANDLE_TYPE_OPAQUE_FD == CU_FILE_HANDLE_TYPE_OPAQUE_FD,
               "CU_FILE_HANDLE_TYPE_OPAQUE_FD");
/* the data-path functions have exactly our pointer types */
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuFileRead),
                                            __typeof__(((struct tio_cufile_api *)0)->read)),
               "cuFileRead signature");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuFileWrite),
                                            __typeof__(((struct tio_cufile_api *)0)->write)),
               "cuFileWrite signature");
_Static_assert(
    __builtin_types_compatible_p(__typeof__(&cuFileHandleDeregister),
                                 __typeof__(((struct tio_cufile_api *)0)->handle_deregister)),
    "cuFileHandleDeregister signature");

/* the optional calls (buffer registration, the stream API) too: our parameter types with the
 * header's result type (CUfileError_t, whose layout matches ours above) */
#define SAME_SIGNATURE(fn, ...)                                                                   \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), CUfileError_t (*)(__VA_ARGS__)), \
                   #fn " signature")
SAME_SIGNATURE(cuFileBufRegister, const void *, size_t, int);
SAME_SIGNATURE(cuFileBufDeregister, const void *);
SAME_SIGNATURE(cuFileStreamRegister, struct CUstream_st *, unsigned);
SAME_SIGNATURE(cuFileStreamDeregister, struct CUstream_st *);
SAME_SIGNATURE(cuFileReadAsync,
               tio_cufile_handle,
               void *,
               size_t *,
               off_t *,
               off_t *,
               ssize_t *,
               struct CUstream_st *);
SAME_SIGNATURE(cuFileWriteAsync,
               tio_cufile_handle,
               void *,
               size_t *,
               off_t *,
               off_t *,
               ssize_t *,
               struct CUstream_st *);
/* and ours are those parameter types (the table's members, result aside) */
_Static_assert(__builtin_types_compatible_p(__typeof__(((struct tio_cufile_api *)0)->read_async),
                                            struct tio_cufile_error (*)(tio_cufile_handle,
                                                                        void *,
                                                                        size_t *,
                                                                        off_t *,
                                                                        off_t *,
                                                                        ssize_t *,
                                                                        struct CUstream_st *)),
               "read_async member");
_Static_assert(__builtin_types_compatible_p(__typeof__(((struct tio_cufile_api *)0)->write_async),
                                            struct tio_cufile_error (*)(tio_cufile_handle,
                                                                        void *,
                                                                        size_t *,
                                                                        off_t *,
                                                                        off_t *,
                                                                        ssize_t *,
                                                                        struct CUstream_st *)),
               "write_async member");
_Static_assert(
    __builtin_types_compatible_p(__typeof__(((struct tio_cufile_api *)0)->stream_register),
                                 struct tio_cufile_error (*)(struct CUstream_st *, unsigned)),
    "stream_register member");
_Static_assert(
    __builtin_types_compatible_p(__typeof__(((struct tio_cufile_api *)0)->stream_deregister),
                                 struct tio_cufile_error (*)(struct CUstream_st *)),
    "stream_deregister member");
_Static_assert(
    __builtin_types_compatible_p(__typeof__(((struct tio_cufile_api *)0)->buf_deregister),
                                 struct tio_cufile_error (*)(const void *)),
    "buf_deregister member");
_Static_assert(__builtin_types_compatible_p(__typeof__(((struct tio_cufile_api *)0)->buf_register),
                                            struct tio_cufile_error (*)(const void *, size_t, int)),
               "buf_register member");
_Static_assert(TIO_CU_FILE_STREAM_FIXED_BUF_OFFSET == CU_FILE_STREAM_FIXED_BUF_OFFSET, "flag");
_Static_assert(TIO_CU_FILE_STREAM_FIXED_FILE_OFFSET == CU_FILE_STREAM_FIXED_FILE_OFFSET, "flag");
_Static_assert(TIO_CU_FILE_STREAM_FIXED_FILE_SIZE == CU_FILE_STREAM_FIXED_FILE_SIZE, "flag");
_Static_assert(TIO_CU_FILE_STREAM_PAGE_ALIGNED_INPUTS == CU_FILE_STREAM_PAGE_ALIGNED_INPUTS,
               "flag");

TIO_TEST(layout_matches) {
    printf("  CUfileDescr_t %zu bytes, CUfileError_t %zu bytes: match\n", sizeof(CUfileDescr_t),
           sizeof(CUfileError_t));
    CHECK(1);
}

int main(void) {
    RUN(layout_matches);
    return tio_test_done();
}
#else
int main(void) {
    (void)tio_t_name;
    (void)tio_t_cur_failed;
    (void)tio_t_cur_skipped;
    TIO_SKIP("cufile.h not found at build time (pip install nvidia-cufile; see "
             "cmake/modules/io.cmake, TIO_CUFILE_INCLUDE_DIR)");
}
#endif
