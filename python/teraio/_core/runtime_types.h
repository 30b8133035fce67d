/* Private header of the teraio._core runtime bindings (rt_trace_py.c, plan_py.c, rt_engine_py.c,
 * runtime_py.c): the object layouts and types that the executor's binding borrows from. */
#ifndef TIO_PY_RUNTIME_TYPES_H
#define TIO_PY_RUNTIME_TYPES_H

#include "core.h"

typedef struct {
    PyObject_HEAD struct tio_trace *tr;
} RtTraceObject;

typedef struct {
    PyObject_HEAD struct tio_plan *plan;
} RtPlanObject;

typedef struct {
    PyObject_HEAD struct tio_engine *e;
} RtEngineObject;

extern PyTypeObject RtTraceType, RtPlanType, RtEngineType;

#endif
