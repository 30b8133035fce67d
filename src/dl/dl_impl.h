/* Private: the dlopen/dlsym steps every vendor shim shares (STYLE.md: load once, resolve every
 * required symbol up front, never dlclose). */
#ifndef TIO_DL_IMPL_H
#define TIO_DL_IMPL_H

#include <stddef.h>

/* One required symbol and the function-pointer slot it fills. */
struct tio_dl_sym {
    const char *sym;
    void *slot;
};

/*
 * tio_dl_open: dlopen (RTLD_NOW | RTLD_LOCAL) the library named by the environment variable
 * `env_var` if it is set, else the first of `names` that loads. On success returns the handle
 * and sets *name to the name that loaded; on failure returns NULL and writes
 * "<what> not loadable (<names tried>): <dlerror>" into reason. Call only under pthread_once.
 */
void *tio_dl_open(const char *env_var,
                  const char *const *names,
                  size_t n_names,
                  const char *what,
                  const char **name,
                  char *reason,
                  size_t reason_len);

/* tio_dl_resolve: dlsym into a function-pointer slot (through memcpy: POSIX allows the
 * conversion, ISO C does not). 0 or -1 if the symbol is missing. */
int tio_dl_resolve(void *lib, const char *sym, void *slot);

/* tio_dl_resolve_all: every symbol of `syms`, or -1 with "<name>: symbol <sym> missing" in
 * reason (the backend is then unavailable as a whole). */
int tio_dl_resolve_all(void *lib,
                       const struct tio_dl_sym *syms,
                       size_t n,
                       const char *name,
                       char *reason,
                       size_t reason_len);

#endif
