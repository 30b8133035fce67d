/*
 * Loading a vendor library once (src/dl/dl_common.c), on libc instead of CUDA: the table filled,
 * alternative symbol names, the reasons for a missing library or symbol, the environment
 * variable that names the library, and a test table in place of the loaded one.
 */
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "dl/dl_impl.h"
#include "tio_test.h"

struct libc_api {
    size_t (*strlen)(const char *s);
    int (*abs)(int x);
};

static const char *const libc_names[] = { "libtio-no-such-library.so.9", "libc.so.6" };
static const char *const no_names[] = { "libtio-no-such-library.so.9", "libtio-nor-this.so" };

TIO_TEST(loads_the_first_name_that_opens) {
    static struct libc_api t;
    static const struct tio_dl_sym syms[] = { { "strlen", &t.strlen, 0 }, { "abs", &t.abs, 0 } };
    static struct tio_dl_shim s = { .what = "libc",
                                    .env_var = "TIO_TEST_DL_UNSET",
                                    .names = libc_names,
                                    .n_names = TIO_ARRAY_LEN(libc_names),
                                    .syms = syms,
                                    .n_syms = TIO_ARRAY_LEN(syms),
                                    .table = &t };
    unsetenv("TIO_TEST_DL_UNSET");
    const struct libc_api *api = tio_dl_shim_api(&s);
    CHECK(api == &t);
    if (api) {
        CHECK_EQ_U(api->strlen("teraio"), 6);
        CHECK_EQ_I(api->abs(-3), 3);
    }
    CHECK_STR(tio_dl_shim_reason(&s), "loaded libc.so.6");
    CHECK(tio_dl_shim_api(&s) == &t); /* loaded once, handed out again */
}

TIO_TEST(alternative_names_in_order) {
    static struct libc_api t;
    /* the first name missing, the second there; then the first there */
    static const struct tio_dl_sym syms[] = { { "tio_no_such_strlen_v2|strlen", &t.strlen, 0 },
                                              { "abs|tio_no_such_abs", &t.abs, 0 } };
    static struct tio_dl_shim s = { .what = "libc",
                                    .env_var = "TIO_TEST_DL_UNSET",
                                    .names = libc_names,
                                    .n_names = TIO_ARRAY_LEN(libc_names),
                                    .syms = syms,
                                    .n_syms = TIO_ARRAY_LEN(syms),
                                    .table = &t };
    const struct libc_api *api = tio_dl_shim_api(&s);
    CHECK(api == &t);
    if (api) {
        CHECK_EQ_U(api->strlen("abc"), 3);
        CHECK_EQ_I(api->abs(-7), 7);
    }
}

TIO_TEST(missing_symbol_names_the_last_alternative) {
    static struct libc_api t;
    static const struct tio_dl_sym syms[] = { { "strlen", &t.strlen, 0 },
                                              { "tio_no_such_v2|tio_no_such", &t.abs, 0 } };
    static struct tio_dl_shim s = { .what = "libc",
                                    .env_var = "TIO_TEST_DL_UNSET",
                                    .names = libc_names,
                                    .n_names = TIO_ARRAY_LEN(libc_names),
                                    .syms = syms,
                                    .n_syms = TIO_ARRAY_LEN(syms),
                                    .table = &t };
    CHECK(tio_dl_shim_api(&s) == NULL);
    CHECK_STR(tio_dl_shim_reason(&s), "libc.so.6: symbol tio_no_such missing");
}

TIO_TEST(missing_optional_symbol_leaves_its_slot_null) {
    static struct libc_api t;
    static const struct tio_dl_sym syms[] = { { "strlen", &t.strlen, 0 },
                                              { "tio_no_such_abs", &t.abs, 1 } };
    static struct tio_dl_shim s = { .what = "libc",
                                    .env_var = "TIO_TEST_DL_UNSET",
                                    .names = libc_names,
                                    .n_names = TIO_ARRAY_LEN(libc_names),
                                    .syms = syms,
                                    .n_syms = TIO_ARRAY_LEN(syms),
                                    .table = &t };
    const struct libc_api *api = tio_dl_shim_api(&s);
    CHECK(api == &t); /* available: only an optional symbol is missing */
    if (api) {
        CHECK_EQ_U(api->strlen("ab"), 2);
        CHECK(api->abs == NULL);
    }
    CHECK_STR(tio_dl_shim_reason(&s), "loaded libc.so.6");
}

TIO_TEST(missing_library_lists_the_names_tried) {
    static struct libc_api t;
    static const struct tio_dl_sym syms[] = { { "strlen", &t.strlen, 0 } };
    static struct tio_dl_shim s = { .what = "nolib",
                                    .env_var = "TIO_TEST_DL_UNSET",
                                    .names = no_names,
                                    .n_names = TIO_ARRAY_LEN(no_names),
                                    .syms = syms,
                                    .n_syms = TIO_ARRAY_LEN(syms),
                                    .table = &t };
    CHECK(tio_dl_shim_api(&s) == NULL);
    const char *why = tio_dl_shim_reason(&s);
    const char *want = "nolib not loadable (libtio-no-such-library.so.9, libtio-nor-this.so): ";
    CHECK(strncmp(why, want, strlen(want)) == 0);
    if (strncmp(why, want, strlen(want)) != 0) {
        printf("  reason: %s\n", why);
    }
}

TIO_TEST(environment_variable_replaces_the_search) {
    static struct libc_api t;
    static const struct tio_dl_sym syms[] = { { "strlen", &t.strlen, 0 } };
    /* the names would load libc; the variable names a library that is not there */
    static struct tio_dl_shim s = { .what = "libc",
                                    .env_var = "TIO_TEST_DL_LIB",
                                    .names = libc_names,
                                    .n_names = TIO_ARRAY_LEN(libc_names),
                                    .syms = syms,
                                    .n_syms = TIO_ARRAY_LEN(syms),
                                    .table = &t };
    setenv("TIO_TEST_DL_LIB", "/nonexistent/libtio-test.so", 1);
    CHECK(tio_dl_shim_api(&s) == NULL);
    const char *why = tio_dl_shim_reason(&s);
    const char *want = "libc not loadable (TIO_TEST_DL_LIB=/nonexistent/libtio-test.so): ";
    CHECK(strncmp(why, want, strlen(want)) == 0);
    if (strncmp(why, want, strlen(want)) != 0) {
        printf("  reason: %s\n", why);
    }
    unsetenv("TIO_TEST_DL_LIB");
}

TIO_TEST(test_table_replaces_the_library) {
    static struct libc_api t, fake;
    static const struct tio_dl_sym syms[] = { { "strlen", &t.strlen, 0 } };
    static struct tio_dl_shim s = { .what = "nolib",
                                    .env_var = "TIO_TEST_DL_UNSET",
                                    .names = no_names,
                                    .n_names = TIO_ARRAY_LEN(no_names),
                                    .syms = syms,
                                    .n_syms = TIO_ARRAY_LEN(syms),
                                    .table = &t };
    s.override = &fake;
    CHECK(tio_dl_shim_api(&s) == &fake);
    CHECK_STR(tio_dl_shim_reason(&s), "test table");
    s.override = NULL;
    CHECK(tio_dl_shim_api(&s) == NULL);
}

int main(void) {
    RUN(loads_the_first_name_that_opens);
    RUN(alternative_names_in_order);
    RUN(missing_symbol_names_the_last_alternative);
    RUN(missing_optional_symbol_leaves_its_slot_null);
    RUN(missing_library_lists_the_names_tried);
    RUN(environment_variable_replaces_the_search);
    RUN(test_table_replaces_the_library);
    return tio_test_done();
}
