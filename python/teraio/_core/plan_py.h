/* Private header of teraio._core: the Plan object (plan_py.c), whose C plan the Runtime
 * (runtime_py.c) borrows. */
#ifndef TIO_PY_PLAN_PY_H
#define TIO_PY_PLAN_PY_H

#include "core.h"

typedef struct {
    PyObject_HEAD struct tio_plan *plan;
} PlanObject;

extern PyTypeObject plan_type;

#endif
