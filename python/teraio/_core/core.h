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

/* The C trace behind a teraio.Trace (borrowed: valid while obj lives), or NULL with TypeError if
 * obj is not one. To be defined by trace_py.c; weak so that bindings test for it (analysis_py.c
 * falls back to a copy through Trace.to_bytes() without it). */
struct tio_trace;
const struct tio_trace *tio_py_trace_borrow(PyObject *obj) __attribute__((weak));
/* The C trace behind a teraio._core.RtTrace (borrowed), or NULL (no exception) if obj is not
 * one. Defined by runtime_py.c. */
const struct tio_trace *tio_py_rttrace_borrow(PyObject *obj) __attribute__((weak));

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

#endif
