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
    { "cuFileDriverOpen", &loaded.driver_open },
    { "cuFileHandleRegister", &loaded.handle_register },
    { "cuFileHandleDeregister", &loaded.handle_deregister },
    { "cuFileRead", &loaded.read },
    { "cuFileWrite", &loaded.write },
    /* the _v2 name where the library has it (CUDA 12.x and later) */
    { "cuFileDriverClose_v2|cuFileDriverClose", &loaded.driver_close },
};
TIO_DL_SHIM_DEFINE(tio_cufile, tio_cufile_api, "libcufile", "TIO_CUFILE_LIB", names, syms, &loaded)
