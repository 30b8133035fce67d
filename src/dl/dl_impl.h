/* Private: loading a vendor library once, the way every shim does (docs/style.md: load once,
 * resolve every required symbol up front, never dlclose). */
#ifndef TIO_DL_IMPL_H
#define TIO_DL_IMPL_H

#include <stdatomic.h>
#include <stddef.h>

/* One symbol and the function-pointer slot it fills. `sym` may list names separated by '|',
 * tried in order: the first the library has fills the slot (the last is named if none). A
 * required symbol that is missing makes the library unavailable; an optional one leaves its slot
 * NULL (callers then use another way). */
struct tio_dl_sym {
    const char *sym;
    void *slot;
    int optional; /* 0: required */
};

/*
 * One vendor library: a shim defines one, static, with the description (what, env_var, names,
 * syms, table); the state below it starts zeroed. The first tio_dl_shim_api or
 * tio_dl_shim_reason loads it, once, under a lock: dlopen (RTLD_NOW | RTLD_LOCAL) the path in
 * the environment variable `env_var` if it is set, else the first of `names` that loads, then
 * every symbol of `syms` into its slot in `table`. A missing library or symbol leaves the table
 * unavailable as a whole, and the reason says why (a missing optional symbol leaves its slot
 * NULL).
 */
struct tio_dl_shim {
    const char *what;         /* "cudart": names the library in reasons */
    const char *env_var;      /* "TIO_CUDART_LIB" */
    const char *const *names; /* sonames, in the order tried */
    size_t n_names;
    const struct tio_dl_sym *syms;
    size_t n_syms;
    const void *table; /* the function table the slots of syms lie in */
    /* state */
    _Atomic int tried;
    int loaded_ok;
    const void *override; /* a test table handed out instead (the shims' *_set_api) */
    char reason[300];     /* "loaded <name>", or why not */
};

/* The override if set, else the table once loaded, else NULL (reason in tio_dl_shim_reason). */
const void *tio_dl_shim_api(struct tio_dl_shim *shim);

/* "test table" under an override; else "loaded <name>", "<what> not loadable (<names tried>):
 * <dlerror>" or "<name>: symbol <sym> missing". */
const char *tio_dl_shim_reason(struct tio_dl_shim *shim);

/*
 * TIO_DL_SHIM_DEFINE(fn, api, what, env_var, names, syms, table): a shim's static struct
 * tio_dl_shim over those fields and its typed calls, declared in the shim's header:
 * `const struct api *fn(void)` (tio_dl_shim_api), `const char *fn##_reason(void)`
 * (tio_dl_shim_reason) and `void fn##_set_api(const struct api *fake)` (a test table handed out
 * in place of the library's; NULL hands the library's out again).
 */
#define TIO_DL_SHIM_DEFINE(fn, api, what_, env_var_, names_, syms_, table_)   \
    static struct tio_dl_shim fn##_shim = { .what = (what_),                  \
                                            .env_var = (env_var_),            \
                                            .names = (names_),                \
                                            .n_names = TIO_ARRAY_LEN(names_), \
                                            .syms = (syms_),                  \
                                            .n_syms = TIO_ARRAY_LEN(syms_),   \
                                            .table = (table_) };              \
    const struct api *fn(void) {                                              \
        return tio_dl_shim_api(&fn##_shim);                                   \
    }                                                                         \
    const char *fn##_reason(void) {                                           \
        return tio_dl_shim_reason(&fn##_shim);                                \
    }                                                                         \
    void fn##_set_api(const struct api *fake) {                               \
        fn##_shim.override = fake;                                            \
    }

#endif
