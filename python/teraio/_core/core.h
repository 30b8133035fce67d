/* Private header of the teraio._core extension: each binding file adds its types to the module
 * through one hook, declared weak so that a file can be added without touching module.c. */
#ifndef TIO_PY_CORE_H
#define TIO_PY_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The exception type raised for every teraio error: teraio.Error(status, message). */
extern PyObject *tio_py_error;

/* Raise teraio.Error from a status code and tio_last_error(); returns NULL. */
PyObject *tio_py_raise(int status, const char *what);

/* None for a status >= 0, else NULL with teraio.Error raised as by tio_py_raise (util_py.c). */
PyObject *tio_py_none_or_raise(int status, const char *what);

/* d[key] = v, stealing the new reference v; v NULL (its maker failed, an exception is set) is
 * passed on. Returns 0 or -1 with an exception set (util_py.c). */
int tio_py_put(PyObject *d, const char *key, PyObject *v);

/* The C trace behind a teraio.Trace (borrowed: valid while obj lives), or NULL with TypeError if
 * obj is not one. To be defined by trace_py.c; weak so that bindings test for it (analysis_py.c
 * falls back to a copy through Trace.to_bytes() without it). */
struct tio_trace;
const struct tio_trace *tio_py_trace_borrow(PyObject *obj) __attribute__((weak));

/* Trace <-> Python lists (trace_lists_py.c): tio_py_trace_from_lists parses the arguments of
 * Trace.build(tensors, kernels, meta) into a finished trace (0, or -1 with an exception set);
 * the list functions return new lists of tuples of a finished trace (NULL with an exception). */
int tio_py_trace_from_lists(PyObject *args, struct tio_trace **out);
PyObject *tio_py_trace_tensor_list(const struct tio_trace *tr);
PyObject *tio_py_trace_kernel_list(const struct tio_trace *tr);

/* The C engine behind a teraio._core.Engine, for a Runtime that drives it: counts a user, so
 * that Engine.close() refuses while one remains; NULL with TypeError/ValueError when obj is
 * not an open Engine. Each acquire is paired with one tio_py_engine_release(obj). */
struct tio_engine;
struct tio_engine *tio_py_engine_acquire(PyObject *obj);
void tio_py_engine_release(PyObject *obj);

/* Hooks: add types/functions to the module; return 0 or -1 with an exception set. */
int tio_py_add_trace(PyObject *m) __attribute__((weak));
int tio_py_add_analysis(PyObject *m) __attribute__((weak));
int tio_py_add_model(PyObject *m) __attribute__((weak));
int tio_py_add_plan(PyObject *m) __attribute__((weak));
int tio_py_add_sim(PyObject *m) __attribute__((weak));
int tio_py_add_engine(PyObject *m) __attribute__((weak));
int tio_py_add_runtime(PyObject *m) __attribute__((weak));
int tio_py_add_dispatch(PyObject *m) __attribute__((weak));
int tio_py_add_iobuf(PyObject *m) __attribute__((weak));
int tio_py_add_bounded(PyObject *m) __attribute__((weak));
int tio_py_add_log(PyObject *m) __attribute__((weak));

#endif
