/* The hookable abort behind TIO_ASSERT (teraio/assert.h). */
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <teraio/assert.h>

static tio_abort_fn abort_fn;
static void *abort_ud;

void tio_set_abort_handler(tio_abort_fn fn, void *user_data) {
    abort_fn = fn;
    abort_ud = user_data;
}

void tio_abort(const char *file, int line, const char *expr) {
    if (abort_fn) {
        abort_fn(file, line, expr, abort_ud);
    } else {
        (void)fprintf(stderr, "teraio: assertion failed at %s:%d: %s\n", file, line, expr);
        void *frames[32];
        int n = backtrace(frames, 32);
        backtrace_symbols_fd(frames, n, STDERR_FILENO);
    }
    abort();
}
