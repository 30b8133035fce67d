/* teraio._core: helpers every binding file uses (declared in core.h). */
#include "core.h"

int tio_py_put(PyObject *d, const char *key, PyObject *v) {
    if (!v) {
        return -1;
    }
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

PyObject *tio_py_none_or_raise(int status, const char *what) {
    if (status < 0) {
        return tio_py_raise(status, what);
    }
    Py_RETURN_NONE;
}
