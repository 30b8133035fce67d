/* libcufile through dlopen (see cufile_shim.h). */
#include "dl/cufile_shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct tio_cufile_api loaded;
static int loaded_ok;
static char load_reason[300];
static const struct tio_cufile_api *override;

static int resolve(void *lib, const char *sym, void *fnptr_out) {
    void *p = dlsym(lib, sym);
    if (!p)
        return -1;
    memcpy(fnptr_out, &p, sizeof(p));
    return 0;
}

static void load(void) {
    static const char *const names[] = { "libcufile.so.0", "libcufile.so.1", "libcufile.so" };
    const char *env = getenv("TIO_CUFILE_LIB"); /* NOLINT(concurrency-mt-unsafe): once */
    void *lib = NULL;
    const char *name = NULL;
    if (env && *env) {
        name = env;
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; i < TIO_ARRAY_LEN(names) && !lib; i++) {
            name = names[i];
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!lib) {
        const char *err = dlerror(); /* NOLINT(concurrency-mt-unsafe): under pthread_once */
        (void)snprintf(load_reason, sizeof load_reason, "libcufile not loadable (%s): %s",
                       env ? env : "libcufile.so.0/.1", err ? err : "?");
        return;
    }
    struct {
        const char *sym;
        void *slot;
    } syms[] = {
        { "cuFileDriverOpen", &loaded.driver_open },
        { "cuFileHandleRegister", &loaded.handle_register },
        { "cuFileHandleDeregister", &loaded.handle_deregister },
        { "cuFileRead", &loaded.read },
        { "cuFileWrite", &loaded.write },
    };
    for (size_t i = 0; i < TIO_ARRAY_LEN(syms); i++) {
        if (resolve(lib, syms[i].sym, syms[i].slot) < 0) {
            (void)snprintf(load_reason, sizeof load_reason, "%s: symbol %s missing", name,
                           syms[i].sym);
            return;
        }
    }
    if (resolve(lib, "cuFileDriverClose_v2", &loaded.driver_close) < 0 &&
        resolve(lib, "cuFileDriverClose", &loaded.driver_close) < 0) {
        (void)snprintf(load_reason, sizeof load_reason, "%s: symbol cuFileDriverClose missing",
                       name);
        return;
    }
    loaded_ok = 1;
    (void)snprintf(load_reason, sizeof load_reason, "loaded %s", name);
}

const struct tio_cufile_api *tio_cufile(void) {
    if (override)
        return override;
    pthread_once(&load_once, load);
    return loaded_ok ? &loaded : NULL;
}

const char *tio_cufile_reason(void) {
    if (override)
        return "test table";
    pthread_once(&load_once, load);
    return load_reason;
}

void tio_cufile_set_api(const struct tio_cufile_api *fake) {
    override = fake;
}
