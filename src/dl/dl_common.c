/* Loading a vendor library once, shared by the shims (dl_impl.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "dl/dl_impl.h"

/* Serialises the loads (of any shim): dlopen, getenv and dlerror run under it. */
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;

/* The library's handle, *name the path or soname that loaded; NULL with the reason written. */
static void *open_lib(struct tio_dl_shim *shim, const char **name) {
    const char *env = getenv(shim->env_var); /* NOLINT(concurrency-mt-unsafe): under load_mu */
    void *lib = NULL;
    *name = NULL;
    if (env && *env) {
        *name = env;
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; i < shim->n_names && !lib; i++) {
            *name = shim->names[i];
            lib = dlopen(shim->names[i], RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!lib) {
        const char *err = dlerror(); /* NOLINT(concurrency-mt-unsafe): under load_mu */
        char tried[160] = "";
        if (env && *env) {
            (void)snprintf(tried, sizeof tried, "%s=%s", shim->env_var, env);
        } else {
            size_t used = 0;
            for (size_t i = 0; i < shim->n_names && used < sizeof tried; i++) {
                int w = snprintf(tried + used, sizeof tried - used, "%s%s", i ? ", " : "",
                                 shim->names[i]);
                used += w > 0 ? (size_t)w : 0;
            }
        }
        (void)snprintf(shim->reason, sizeof shim->reason, "%s not loadable (%s): %s", shim->what,
                       tried, err ? err : "?");
    }
    return lib;
}

/* dlsym into a function-pointer slot (through memcpy: POSIX allows the conversion, ISO C does
 * not). 0, or -1 if the symbol is missing. */
static int resolve(void *lib, const char *sym, void *slot) {
    void *p = dlsym(lib, sym);
    if (!p) {
        return -1;
    }
    memcpy(slot, &p, sizeof(p));
    return 0;
}

/* resolve() the first of the '|'-separated names in `names` the library has; -1, with *last the
 * last name, if it has none. */
static int resolve_first(void *lib, const char *names, void *slot, const char **last) {
    for (const char *p = names;; p += strcspn(p, "|") + 1) {
        size_t n = strcspn(p, "|");
        char one[128];
        (void)snprintf(one, sizeof one, "%.*s", (int)n, p);
        if (resolve(lib, one, slot) == 0) {
            return 0;
        }
        if (!p[n]) {
            *last = p;
            return -1;
        }
    }
}

static void load(struct tio_dl_shim *shim) {
    const char *name = NULL;
    void *lib = open_lib(shim, &name);
    if (!lib) {
        return;
    }
    for (size_t i = 0; i < shim->n_syms; i++) {
        const char *missing = NULL;
        if (resolve_first(lib, shim->syms[i].sym, shim->syms[i].slot, &missing) < 0 &&
            !shim->syms[i].optional) {
            (void)snprintf(shim->reason, sizeof shim->reason, "%s: symbol %s missing", name,
                           missing);
            return; /* never dlclose: see docs/style.md */
        }
    }
    shim->loaded_ok = 1;
    (void)snprintf(shim->reason, sizeof shim->reason, "loaded %s", name);
    TIO_LOG_DEBUG("%s: %s", shim->what, shim->reason);
}

static void load_once(struct tio_dl_shim *shim) {
    if (atomic_load_explicit(&shim->tried, memory_order_acquire)) {
        return;
    }
    pthread_mutex_lock(&load_mu);
    if (!atomic_load_explicit(&shim->tried, memory_order_relaxed)) {
        load(shim);
        atomic_store_explicit(&shim->tried, 1, memory_order_release);
    }
    pthread_mutex_unlock(&load_mu);
}

const void *tio_dl_shim_api(struct tio_dl_shim *shim) {
    if (shim->override) {
        return shim->override;
    }
    load_once(shim);
    return shim->loaded_ok ? shim->table : NULL;
}

const char *tio_dl_shim_reason(struct tio_dl_shim *shim) {
    if (shim->override) {
        return "test table";
    }
    load_once(shim);
    return shim->reason;
}
