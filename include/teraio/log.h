/*
 * teraio/log.h - levelled logging with a replaceable sink.
 *
 * The default sink writes "teraio: LEVEL: message" to stderr. The threshold comes from the
 * environment variable TIO_LOG_LEVEL (error|warn|info|debug|trace or 0-4), read once, and can be
 * changed with tio_log_set_level(). Applications may install their own sink:
 *
 *     static void my_sink(int level, const char *func, const char *msg, void *ud) { ... }
 *     tio_log_set(my_sink, NULL);
 */
#ifndef TERAIO_LOG_H
#define TERAIO_LOG_H

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tio_log_level {
    TIO_LOG_ERROR = 0,
    TIO_LOG_WARN = 1,
    TIO_LOG_INFO = 2,
    TIO_LOG_DEBUG = 3,
    TIO_LOG_TRACE = 4,
    TIO_LOG_LEVEL_COUNT
};

/* A log sink. `func` is the emitting function, `msg` the formatted message (no newline). */
typedef void (*tio_log_fn)(int level, const char *func, const char *msg, void *user_data);

/* tio_log_set: install `fn` (NULL restores the stderr default). Thread-safe. */
TIO_API void tio_log_set(tio_log_fn fn, void *user_data);

/* tio_log_set_level / tio_log_get_level: the threshold; messages above it are not formatted. */
TIO_API void tio_log_set_level(int level);
TIO_API int tio_log_get_level(void);

/* tio_log_write: emit a message (used by the TIO_LOG_* macros in the library; exported for
 * bindings). Thread-safe. */
TIO_API void tio_log_write(int level, const char *func, const char *fmt, ...) TIO_PRINTF(3, 4);

#ifdef __cplusplus
}
#endif
#endif
