/* Private header of teraio._core: the per-operator calls into a Runtime (runtime_py.c) that
 * OpFast (dispatch_ids.c) makes in C, without going through the Runtime's Python methods.
 *
 * Every call into the executor holds the GIL; the executor's wait hook drops it only while the
 * executor waits for the engine (tio_runtime_set_wait_hook), so a call that has nothing to wait
 * for never lets another thread in. Errors raise teraio.Error with the message the Runtime's
 * methods give. */
#ifndef TIO_PY_RUNTIME_PY_H
#define TIO_PY_RUNTIME_PY_H

#include <stdint.h>

#include "core.h"

/* 1 if obj is a teraio._core.Runtime (not a subclass or a wrapper: those are called by name). */
int tio_py_runtime_check(PyObject *obj);

/* before_kernel(k): the number of actions (>= 0) and, when there are any, *acts a new tuple of
 * (kind, tensor, bytes) (NULL when none); -1 with an exception. */
int tio_py_runtime_before(PyObject *obj, uint64_t k, PyObject **acts);

/* ready(k), after_kernel(k), forget(t), bind(t, ptr): 0, or -1 with an exception. */
int tio_py_runtime_ready(PyObject *obj, uint64_t k);
int tio_py_runtime_after(PyObject *obj, uint64_t k);
int tio_py_runtime_forget(PyObject *obj, uint32_t t);
int tio_py_runtime_bind(PyObject *obj, uint32_t t, void *ptr);

#endif
