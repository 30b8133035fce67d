/* The dlopen/dlsym steps shared by the vendor shims (dl_impl.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dl/dl_impl.h"

void *tio_dl_open(const char *env_var,
                  const char *const *names,
                  size_t n_names,
                  const char *what,
                  const char **name,
                  char *reason,
                  size_t reason_len) {
    const char *env = getenv(env_var); /* NOLINT(concurrency-mt-unsafe): under pthread_once */
    void *lib = NULL;
    *name = NULL;
    if (env && *env) {
        *name = env;
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; i < n_names && !lib; i++) {
            *name = names[i];
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!lib) {
        const char *err = dlerror(); /* NOLINT(concurrency-mt-unsafe): under pthread_once */
        char tried[160] = "";
        if (env && *env) {
            (void)snprintf(tried, sizeof tried, "%s=%s", env_var, env);
        } else {
            size_t used = 0;
            for (size_t i = 0; i < n_names && used < sizeof tried; i++) {
                int w =
                    snprintf(tried + used, sizeof tried - used, "%s%s", i ? ", " : "", names[i]);
                used += w > 0 ? (size_t)w : 0;
            }
        }
        (void)snprintf(reason, reason_len, "%s not loadable (%s): %s", what, tried,
                       err ? err : "?");
    }
    return lib;
}

int tio_dl_resolve(void *lib, const char *sym, void *slot) {
    void *p = dlsym(lib, sym);
    if (!p) {
        return -1;
    }
    memcpy(slot, &p, sizeof(p));
    return 0;
}

int tio_dl_resolve_all(void *lib,
                       const struct tio_dl_sym *syms,
                       size_t n,
                       const char *name,
                       char *reason,
                       size_t reason_len) {
    for (size_t i = 0; i < n; i++) {
        if (tio_dl_resolve(lib, syms[i].sym, syms[i].slot) < 0) {
            (void)snprintf(reason, reason_len, "%s: symbol %s missing", name, syms[i].sym);
            return -1; /* never dlclose: see STYLE.md */
        }
    }
    return 0;
}
