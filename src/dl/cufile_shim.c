/* libcufile through dlopen (see cufile_shim.h). */
#include "dl/cufile_shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "dl/dl_impl.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct tio_cufile_api loaded;
static int loaded_ok;
static char load_reason[300];
static const struct tio_cufile_api *override;

static void load(void) {
    static const char *const names[] = { "libcufile.so.0", "libcufile.so.1", "libcufile.so" };
    const char *name = NULL;
    void *lib = tio_dl_open("TIO_CUFILE_LIB", names, TIO_ARRAY_LEN(names), "libcufile", &name,
                            load_reason, sizeof load_reason);
    if (!lib) {
        return;
    }
    const struct tio_dl_sym syms[] = {
        { "cuFileDriverOpen", &loaded.driver_open },
        { "cuFileHandleRegister", &loaded.handle_register },
        { "cuFileHandleDeregister", &loaded.handle_deregister },
        { "cuFileRead", &loaded.read },
        { "cuFileWrite", &loaded.write },
    };
    if (tio_dl_resolve_all(lib, syms, TIO_ARRAY_LEN(syms), name, load_reason, sizeof load_reason) <
        0) {
        return;
    }
    if (tio_dl_resolve(lib, "cuFileDriverClose_v2", &loaded.driver_close) < 0 &&
        tio_dl_resolve(lib, "cuFileDriverClose", &loaded.driver_close) < 0) {
        (void)snprintf(load_reason, sizeof load_reason, "%s: symbol cuFileDriverClose missing",
                       name);
        return;
    }
    loaded_ok = 1;
    (void)snprintf(load_reason, sizeof load_reason, "loaded %s", name);
}

const struct tio_cufile_api *tio_cufile(void) {
    if (override) {
        return override;
    }
    pthread_once(&load_once, load);
    return loaded_ok ? &loaded : NULL;
}

const char *tio_cufile_reason(void) {
    if (override) {
        return "test table";
    }
    pthread_once(&load_once, load);
    return load_reason;
}

void tio_cufile_set_api(const struct tio_cufile_api *fake) {
    override = fake;
}
