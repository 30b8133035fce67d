/* Levelled logging with a replaceable sink (teraio/log.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/log.h>

static const char *const level_names[TIO_LOG_LEVEL_COUNT] = {
    [TIO_LOG_ERROR] = "error", [TIO_LOG_WARN] = "warn",   [TIO_LOG_INFO] = "info",
    [TIO_LOG_DEBUG] = "debug", [TIO_LOG_TRACE] = "trace",
};
_Static_assert(sizeof level_names / sizeof level_names[0] == TIO_LOG_LEVEL_COUNT, "level names");

static atomic_int log_level = -1; /* -1: not yet read from the environment */
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static tio_log_fn sink_fn;
static void *sink_ud;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* A child of fork() has only the forking thread: another thread that was writing a message held
 * sink_lock, which nobody would release there; the child starts with it free. (Not taken across
 * fork in a prepare handler: a sink may take its own locks under sink_lock, and their prepare
 * handlers would run in an order this file cannot know.) */
static void fork_child(void) {
    (void)pthread_mutex_init(&sink_lock, NULL);
}

static void register_fork(void) {
    (void)pthread_atfork(NULL, NULL, fork_child);
}

static int level_from_env(void) {
    const char *v = getenv("TIO_LOG_LEVEL"); /* NOLINT(concurrency-mt-unsafe): read once */
    if (!v || !*v) {
        return TIO_LOG_WARN;
    }
    for (int i = 0; i < TIO_LOG_LEVEL_COUNT; i++) {
        if (strcmp(v, level_names[i]) == 0 || (v[0] == (char)('0' + i) && v[1] == '\0')) {
            return i;
        }
    }
    return TIO_LOG_WARN;
}

int tio_log_get_level(void) {
    int l = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (l < 0) {
        l = level_from_env();
        int expected = -1;
        (void)atomic_compare_exchange_strong(&log_level, &expected, l);
        l = atomic_load(&log_level);
    }
    return l;
}

void tio_log_set_level(int level) {
    if (level < TIO_LOG_ERROR) {
        level = TIO_LOG_ERROR;
    }
    if (level > TIO_LOG_TRACE) {
        level = TIO_LOG_TRACE;
    }
    atomic_store(&log_level, level);
}

void tio_log_set(tio_log_fn fn, void *user_data) {
    (void)pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&sink_lock);
    sink_fn = fn;
    sink_ud = user_data;
    pthread_mutex_unlock(&sink_lock);
}

void tio_log_write(int level, const char *func, const char *fmt, ...) {
    if (level > tio_log_get_level()) {
        return;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    (void)pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&sink_lock);
    if (sink_fn) {
        sink_fn(level, func ? func : "", msg, sink_ud);
    } else {
        const char *ln = (level >= 0 && level < TIO_LOG_LEVEL_COUNT) ? level_names[level] : "?";
        if (level >= TIO_LOG_DEBUG) {
            (void)fprintf(stderr, "teraio: %s: %s: %s\n", ln, func ? func : "", msg);
        } else {
            (void)fprintf(stderr, "teraio: %s: %s\n", ln, msg);
        }
    }
    pthread_mutex_unlock(&sink_lock);
}
