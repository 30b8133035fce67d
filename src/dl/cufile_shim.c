/* libcufile through dlopen (see cufile_shim.h). */
#include "dl/cufile_shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "dl/dl_impl.h"

static struct tio_cufile_api loaded;
static const char *const names[] = { "libcufile.so.0", "libcufile.so.1", "libcufile.so" };
static const struct tio_dl_sym syms[] = {
    { "cuFileDriverOpen", &loaded.driver_open, 0 },
    { "cuFileHandleRegister", &loaded.handle_register, 0 },
    { "cuFileHandleDeregister", &loaded.handle_deregister, 0 },
    { "cuFileRead", &loaded.read, 0 },
    { "cuFileWrite", &loaded.write, 0 },
    /* the _v2 name where the library has it (CUDA 12.x and later) */
    { "cuFileDriverClose_v2|cuFileDriverClose", &loaded.driver_close, 0 },
    /* optional: the backend falls back to the calls above without them */
    { "cuFileBufRegister", &loaded.buf_register, 1 },
    { "cuFileBufDeregister", &loaded.buf_deregister, 1 },
    { "cuFileStreamRegister", &loaded.stream_register, 1 },
    { "cuFileStreamDeregister", &loaded.stream_deregister, 1 },
    { "cuFileReadAsync", &loaded.read_async, 1 },
    { "cuFileWriteAsync", &loaded.write_async, 1 },
};
TIO_DL_SHIM_DEFINE(tio_cufile, tio_cufile_api, "libcufile", "TIO_CUFILE_LIB", names, syms, &loaded)
