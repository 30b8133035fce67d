/*
 * teraio/assert.h - the hookable abort behind TIO_ASSERT.
 *
 * Inside the library, TIO_ASSERT(cond) is always compiled (also in Release) and calls
 * tio_abort(file, line, expr) when cond is false; tio_abort prints a backtrace and aborts, unless
 * an application (or a test) installed its own handler with tio_set_abort_handler().
 */
#ifndef TERAIO_ASSERT_H
#define TERAIO_ASSERT_H

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*tio_abort_fn)(const char *file, int line, const char *expr, void *user_data);

/* tio_set_abort_handler: replace the default handler (NULL restores it). If the handler
 * returns, the process aborts anyway. */
void tio_set_abort_handler(tio_abort_fn fn, void *user_data);

/* tio_abort: report a failed assertion and abort. Never returns. */
TIO_NORETURN void tio_abort(const char *file, int line, const char *expr);

#ifdef __cplusplus
}
#endif
#endif
