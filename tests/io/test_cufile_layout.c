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
