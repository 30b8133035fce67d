/*
 * teraio._core: the C library's log messages to Python (log_to_python, log_flush, log_write,
 * log_level). teraio/__init__.py hands log_to_python a function that passes each message to
 * the "teraio" logger (teraio/_log.py).
 *
 * The library logs from any thread, the engine's own threads included, while the training
 * thread may hold the GIL and wait for that engine. So the sink never takes the GIL: it copies
 * the message into a bounded queue and asks the interpreter to drain it on its main thread
 * (Py_AddPendingCall, which needs neither the GIL nor a thread state). log_flush() drains it
 * at once from any thread that holds the GIL (the Offloader does at the end of each step).
 * A full queue drops messages and says how many when it is drained next.
 */
#include <pthread.h>
#include <string.h>

#include <teraio/log.h>

#include "core.h"

#define LOG_SLOTS 256
#define LOG_FUNC  64
#define LOG_MSG   1024 /* tio_log_write formats at most this much */

struct log_entry {
    int level;
    char func[LOG_FUNC];
    char msg[LOG_MSG];
};

/* q_*: under q_lock. q_emit: under the GIL. */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_entry q[LOG_SLOTS];
static unsigned q_head, q_count;
static unsigned long long q_dropped;
static int q_scheduled; /* a pending call is queued and has not started draining */
static PyObject *q_emit;

static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Call emit(level, func, msg); an exception in it is reported as unraisable, never raised
 * into whatever code the main thread was running. */
static void emit_one(int level, const char *func, const char *msg) {
    if (!q_emit) {
        return;
    }
    PyObject *r = PyObject_CallFunction(q_emit, "iss", level, func, msg);
    if (!r) {
        PyErr_WriteUnraisable(q_emit);
    }
    Py_XDECREF(r);
}

/* Drain the queue into emit (GIL held). */
static void drain(void) {
    struct log_entry *e = PyMem_Malloc(sizeof *e);
    if (!e) {
        PyErr_Clear();
        return;
    }
    for (;;) {
        pthread_mutex_lock(&q_lock);
        q_scheduled = 0; /* messages from now on ask for another drain */
        unsigned long long dropped = q_dropped;
        q_dropped = 0;
        int have = q_count > 0;
        if (have) {
            *e = q[q_head];
            q_head = (q_head + 1) % LOG_SLOTS;
            q_count--;
        }
        pthread_mutex_unlock(&q_lock);
        if (dropped) {
            char note[128];
            (void)snprintf(note, sizeof note,
                           "%llu message(s) of the C library were dropped (log queue full)",
                           dropped);
            emit_one(TIO_LOG_WARN, "", note);
        }
        if (!have) {
            break;
        }
        emit_one(e->level, e->func, e->msg);
    }
    PyMem_Free(e);
}

static int pending_drain(void *unused) {
    (void)unused;
    drain();
    return 0;
}

/* The library's sink (called under the library's sink lock, from any thread, GIL or not). */
static void sink(int level, const char *func, const char *msg, void *user_data) {
    (void)user_data;
    pthread_mutex_lock(&q_lock);
    if (q_count == LOG_SLOTS) {
        q_dropped++;
    } else {
        struct log_entry *e = &q[(q_head + q_count) % LOG_SLOTS];
        e->level = level;
        copy_str(e->func, sizeof e->func, func);
        copy_str(e->msg, sizeof e->msg, msg);
        q_count++;
    }
    int schedule = !q_scheduled;
    q_scheduled = 1;
    pthread_mutex_unlock(&q_lock);
    if (schedule && Py_AddPendingCall(pending_drain, NULL) < 0) {
        pthread_mutex_lock(&q_lock); /* the interpreter's list is full: ask again next time */
        q_scheduled = 0;
        pthread_mutex_unlock(&q_lock);
    }
}

/* A child of fork() has only the forking thread: an engine thread queueing a message held
 * q_lock, maybe with the slot half written. The child starts with the lock free and the queue
 * empty (the parent keeps and emits those messages), and asks for a drain with its next one. */
static void fork_child(void) {
    (void)pthread_mutex_init(&q_lock, NULL);
    q_head = 0;
    q_count = 0;
    q_dropped = 0;
    q_scheduled = 0;
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void register_fork(void) {
    (void)pthread_atfork(NULL, NULL, fork_child);
}

static PyObject *py_log_to_python(PyObject *self, PyObject *fn) {
    (void)self;
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "log_to_python: expected a callable or None");
        return NULL;
    }
    if (fn == Py_None) {
        /* back to stderr; after tio_log_set returns no thread is in sink any more */
        tio_log_set(NULL, NULL);
        drain();
        Py_CLEAR(q_emit);
    } else {
        (void)pthread_once(&fork_once, register_fork);
        Py_INCREF(fn);
        Py_XSETREF(q_emit, fn);
        tio_log_set(sink, NULL);
    }
    Py_RETURN_NONE;
}

static PyObject *py_log_flush(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    drain();
    Py_RETURN_NONE;
}

static PyObject *py_log_write(PyObject *self, PyObject *args) {
    (void)self;
    int level, count = 1;
    const char *msg;
    if (!PyArg_ParseTuple(args, "is|i:log_write", &level, &msg, &count)) {
        return NULL;
    }
    for (int i = 0; i < count; i++) {
        tio_log_write(level, "log_write", "%s %d", msg, i);
    }
    Py_RETURN_NONE;
}

static PyObject *py_log_level(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *level = Py_None;
    if (!PyArg_ParseTuple(args, "|O:log_level", &level)) {
        return NULL;
    }
    int old = tio_log_get_level();
    if (level != Py_None) {
        long l = PyLong_AsLong(level);
        if (l == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (l < TIO_LOG_ERROR || l > TIO_LOG_TRACE) {
            PyErr_Format(PyExc_ValueError, "log_level: expected 0 (error) to 4 (trace), got %ld",
                         l);
            return NULL;
        }
        tio_log_set_level((int)l);
    }
    return PyLong_FromLong(old);
}

static PyMethodDef log_methods[] = {
    { "log_to_python", py_log_to_python, METH_O,
      "log_to_python(fn or None): the C library's messages go to fn(level, func, msg) on the "
      "main thread (queued, never under another thread's GIL wait); None: back to stderr." },
    { "log_flush", py_log_flush, METH_NOARGS,
      "log_flush(): hand the queued C messages to the function now (GIL held)." },
    { "log_write", py_log_write, METH_VARARGS,
      "log_write(level, msg, count=1): emit msg + ' 0' ... ' count-1' through the C library's "
      "logging (levels 0 error, 1 warn, 2 info, 3 debug, 4 trace)." },
    { "log_level", py_log_level, METH_VARARGS,
      "log_level([level]) -> int: the C library's threshold (TIO_LOG_LEVEL), set if given; "
      "returns the previous one." },
    { NULL, NULL, 0, NULL },
};

int tio_py_add_log(PyObject *m) {
    return PyModule_AddFunctions(m, log_methods);
}
