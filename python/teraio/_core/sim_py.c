/* teraio._core.simulate: the simulator (teraio/sim.h) from Python.
 *
 *     r = teraio._core.simulate("run.tio", hw="paper-2xh100nvl", policy="teraio-mixed")
 *     r["fraction_of_ideal"], r["tokens_per_s"], r["oom"], r["bytes"]["ssd_write"]
 *     r = teraio._core.simulate(trace, hw="my.json", plan="run.plan", capacity="70GiB")
 *
 * `trace` is a path or a teraio.Trace; `policy` a simulator baseline (ideal, none, lru,
 * zero-offload, zero-infinity) or a planner policy (planned first on the same hardware); `plan`
 * a plan file. The keys are those of `teraio simulate --json`. The GIL is released while the
 * planner and the simulator run.
 */
#include <string.h>

#include <teraio/sim.h>
#include <teraio/teraio.h>

#include "core.h"

/* {channel name: value} of one per-channel array of a result: bytes (ints) or, when bytes is
 * NULL, bps, bytes/s (floats). */
static PyObject *channel_dict(const uint64_t *bytes, const double *bps) {
    PyObject *d = PyDict_New();
    for (int c = 0; d && c < TIO_SIM_CHANNEL_COUNT; c++) {
        PyObject *v = bytes ? PyLong_FromUnsignedLongLong(bytes[c]) : PyFloat_FromDouble(bps[c]);
        if (tio_py_put(d, tio_sim_channel_name(c), v) < 0) {
            Py_CLEAR(d);
        }
    }
    return d;
}

static PyObject *result_dict(const struct tio_sim *sim) {
    struct tio_sim_result r;
    tio_sim_get_result(sim, &r, sizeof r);
    PyObject *d = PyDict_New();
    if (!d) {
        return NULL;
    }
    static const char *const oom_names[] = { "none", "gpu", "host" };
    int bad =
        tio_py_put(d, "policy", PyUnicode_FromString(tio_sim_policy(sim))) ||
        tio_py_put(d, "iteration_s", PyFloat_FromDouble(r.iteration_s)) ||
        tio_py_put(d, "ideal_s", PyFloat_FromDouble(r.ideal_s)) ||
        tio_py_put(d, "fraction_of_ideal", PyFloat_FromDouble(r.fraction_of_ideal)) ||
        tio_py_put(d, "stall_s", PyFloat_FromDouble(r.stall_s)) ||
        tio_py_put(d, "stall_data_s", PyFloat_FromDouble(r.stall_data_s)) ||
        tio_py_put(d, "stall_memory_s", PyFloat_FromDouble(r.stall_memory_s)) ||
        tio_py_put(d, "cpu_s", PyFloat_FromDouble(r.cpu_s)) ||
        tio_py_put(d, "stall_thread_s", PyFloat_FromDouble(r.stall_thread_s)) ||
        tio_py_put(d, "kernel_slowdown_s", PyFloat_FromDouble(r.kernel_slowdown_s)) ||
        tio_py_put(d, "overlap_s", PyFloat_FromDouble(r.overlap_s)) ||
        tio_py_put(d, "io_busy_s", PyFloat_FromDouble(r.io_busy_s)) ||
        tio_py_put(d, "tokens_per_s", PyFloat_FromDouble(r.tokens_per_s)) ||
        tio_py_put(d, "oom", PyBool_FromLong(r.oom != 0)) ||
        tio_py_put(d, "oom_kind", PyUnicode_FromString(oom_names[r.oom % 3])) ||
        tio_py_put(d, "oom_kernel",
                   r.oom ? PyLong_FromUnsignedLongLong(r.oom_kernel) : Py_NewRef(Py_None)) ||
        tio_py_put(d, "oom_bytes", PyLong_FromUnsignedLongLong(r.oom_bytes)) ||
        tio_py_put(d, "capacity_bytes", PyLong_FromUnsignedLongLong(r.capacity_bytes)) ||
        tio_py_put(d, "gpu_peak_bytes", PyLong_FromUnsignedLongLong(r.gpu_peak_bytes)) ||
        tio_py_put(d, "host_peak_bytes", PyLong_FromUnsignedLongLong(r.host_peak_bytes)) ||
        tio_py_put(d, "ssd_bytes_written", PyLong_FromUnsignedLongLong(r.ssd_bytes_written)) ||
        tio_py_put(d, "drive_life_years", PyFloat_FromDouble(r.drive_life_years)) ||
        tio_py_put(d, "moves_issued", PyLong_FromUnsignedLongLong(r.n_moves_issued)) ||
        tio_py_put(d, "moves_skipped", PyLong_FromUnsignedLongLong(r.n_moves_skipped)) ||
        tio_py_put(d, "moves_clean", PyLong_FromUnsignedLongLong(r.n_moves_clean)) ||
        tio_py_put(d, "moves_late", PyLong_FromUnsignedLongLong(r.n_moves_late)) ||
        tio_py_put(d, "demand_fetches", PyLong_FromUnsignedLongLong(r.n_demand_fetches)) ||
        tio_py_put(d, "demand_evictions", PyLong_FromUnsignedLongLong(r.n_demand_evictions)) ||
        tio_py_put(d, "demand_evicted_bytes",
                   PyLong_FromUnsignedLongLong(r.demand_evicted_bytes)) ||
        tio_py_put(d, "host_full_offloads", PyLong_FromUnsignedLongLong(r.n_host_full_offloads)) ||
        tio_py_put(d, "ssd_cache_full", PyBool_FromLong(r.ssd_cache_full != 0));
    bad = bad || tio_py_put(d, "bytes", channel_dict(r.bytes, NULL)) ||
          tio_py_put(d, "peak_Bps", channel_dict(NULL, r.peak_Bps));
    if (bad) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* Run policy or plan; GIL released by the caller. */
static int run_sim(const struct tio_trace *tr,
                   const struct tio_hw *hw,
                   const char *policy,
                   const char *plan_path,
                   struct tio_sim_params *sp,
                   struct tio_sim **out) {
    struct tio_plan *plan = NULL;
    int rc = 0;
    if (plan_path) {
        rc = tio_plan_load(plan_path, TIO_PLAN_FORMAT_AUTO, &plan);
        if (rc == 0) {
            rc = tio_plan_check_trace(plan, tr);
        }
    } else if (!tio_sim_policy_is_builtin(policy)) {
        struct tio_plan_params pp = tio_plan_params_default();
        pp.policy = policy;
        struct tio_hw h = *hw;
        if (sp->capacity_bytes) {
            h.gpu_reserve_bytes = 0;
            h.gpu_memory_bytes = sp->capacity_bytes;
        }
        rc = tio_plan_make(tr, &h, &pp, &plan);
    }
    if (rc == 0 && plan) { /* as its execution says (its moves or a baseline), not by its name */
        rc = tio_sim_run_plan(tr, hw, plan, sp, out);
    } else if (rc == 0) {
        sp->policy = policy;
        rc = tio_sim_run(tr, hw, NULL, 0, sp, out);
    }
    tio_plan_free(plan);
    return rc;
}

/* The trace argument: a path (loaded into *owned, GIL released) or a teraio.Trace (borrowed).
 * NULL with an exception set on failure. */
static const struct tio_trace *get_trace(PyObject *trace, struct tio_trace **owned) {
    *owned = NULL;
    if (PyUnicode_Check(trace) || PyBytes_Check(trace) ||
        PyObject_HasAttrString(trace, "__fspath__")) {
        PyObject *bytes = NULL;
        if (!PyUnicode_FSConverter(trace, &bytes)) {
            return NULL;
        }
        int rc;
        PyThreadState *ts = PyEval_SaveThread();
        rc = tio_trace_load(PyBytes_AS_STRING(bytes), TIO_TRACE_FORMAT_AUTO, owned);
        PyEval_RestoreThread(ts);
        if (rc < 0) {
            tio_py_raise(rc, PyBytes_AS_STRING(bytes));
            Py_DECREF(bytes);
            return NULL;
        }
        Py_DECREF(bytes);
        return *owned;
    }
    return tio_py_trace_borrow(trace);
}

static PyObject *py_simulate(PyObject *mod, PyObject *args, PyObject *kwds) {
    (void)mod;
    static char *kwlist[] = { "trace",  "hw",           "policy", "plan", "capacity",
                              "warmup", "demand_evict", "csv",    NULL };
    PyObject *trace = NULL, *csv = Py_None;
    const char *hw_name = "paper-2xh100nvl", *policy = NULL, *plan_path = NULL, *cap = NULL;
    unsigned int warmup = 1;
    int demand_evict = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|szzzIpO", kwlist, &trace, &hw_name, &policy,
                                     &plan_path, &cap, &warmup, &demand_evict, &csv)) {
        return NULL;
    }
    if ((policy == NULL) == (plan_path == NULL)) {
        PyErr_SetString(PyExc_ValueError, "simulate: give exactly one of policy= or plan=");
        return NULL;
    }
    struct tio_sim_params sp = tio_sim_params_default();
    sp.warmup_iterations = warmup;
    sp.demand_evict = demand_evict;
    if (cap) {
        int rc = tio_parse_bytes(cap, &sp.capacity_bytes);
        if (rc < 0) {
            return tio_py_raise(rc, "simulate: capacity");
        }
    }
    struct tio_hw hw;
    int rc = tio_hw_load(hw_name, &hw);
    if (rc < 0) {
        return tio_py_raise(rc, "simulate: hw");
    }
    PyObject *csv_dir = NULL;
    if (csv != Py_None && !PyUnicode_FSConverter(csv, &csv_dir)) {
        return NULL;
    }
    struct tio_trace *owned = NULL;
    const struct tio_trace *tr = get_trace(trace, &owned);
    if (!tr) {
        Py_XDECREF(csv_dir);
        return NULL;
    }
    struct tio_sim *sim = NULL;
    PyThreadState *ts = PyEval_SaveThread();
    rc = run_sim(tr, &hw, policy, plan_path, &sp, &sim);
    if (rc == 0 && csv_dir) {
        rc = tio_sim_write_csv(sim, PyBytes_AS_STRING(csv_dir));
    }
    PyEval_RestoreThread(ts);
    PyObject *res = rc < 0 ? tio_py_raise(rc, "simulate") : result_dict(sim);
    tio_sim_free(sim);
    tio_trace_free(owned);
    Py_XDECREF(csv_dir);
    return res;
}

/* sweep(trace, hw, policy='teraio-ssd', bandwidths=None, capacity=None, demand_evict=False):
 * the policy simulated at each SSD array bandwidth (tio_hw_at_ssd_bandwidth); the dict of
 * `teraio sweep --json`. */
static PyObject *py_sweep(PyObject *mod, PyObject *args, PyObject *kwds) {
    (void)mod;
    static char *kwlist[] = { "trace",    "hw",           "policy", "bandwidths",
                              "capacity", "demand_evict", NULL };
    PyObject *trace = NULL, *bw_obj = Py_None;
    const char *hw_name = NULL, *policy = "teraio-ssd", *cap = NULL;
    int demand_evict = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Os|sOzp", kwlist, &trace, &hw_name, &policy,
                                     &bw_obj, &cap, &demand_evict)) {
        return NULL;
    }
    static const double default_bws[] = TIO_HW_SWEEP_BANDWIDTHS;
    double bws[64];
    Py_ssize_t n = (Py_ssize_t)(sizeof default_bws / sizeof default_bws[0]);
    if (bw_obj == Py_None) {
        memcpy(bws, default_bws, sizeof default_bws);
    } else {
        PyObject *seq = PySequence_Fast(bw_obj, "sweep: bandwidths must be a sequence of B/s");
        if (!seq) {
            return NULL;
        }
        n = PySequence_Fast_GET_SIZE(seq);
        if (n < 1 || n > 64) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "sweep: give 1 to 64 bandwidths");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            bws[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        }
        Py_DECREF(seq);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    struct tio_sim_params sp = tio_sim_params_default();
    sp.demand_evict = demand_evict;
    int rc = cap ? tio_parse_bytes(cap, &sp.capacity_bytes) : 0;
    if (rc < 0) {
        return tio_py_raise(rc, "sweep: capacity");
    }
    struct tio_hw hw;
    if ((rc = tio_hw_load(hw_name, &hw)) < 0) {
        return tio_py_raise(rc, "sweep: hw");
    }
    struct tio_trace *owned = NULL;
    const struct tio_trace *tr = get_trace(trace, &owned);
    if (!tr) {
        return NULL;
    }
    struct tio_sim_result res[64];
    memset(res, 0, sizeof res);
    PyThreadState *ts = PyEval_SaveThread();
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        struct tio_hw h;
        struct tio_sim *sim = NULL;
        struct tio_sim_params p = sp;
        rc = tio_hw_at_ssd_bandwidth(&hw, bws[i], &h);
        if (rc == 0) {
            rc = run_sim(tr, &h, policy, NULL, &p, &sim);
        }
        if (rc == 0) {
            tio_sim_get_result(sim, &res[i], sizeof res[i]);
        }
        tio_sim_free(sim);
    }
    PyEval_RestoreThread(ts);
    tio_trace_free(owned);
    if (rc < 0) {
        return tio_py_raise(rc, "sweep");
    }
    PyObject *points = PyList_New(n);
    for (Py_ssize_t i = 0; points && i < n; i++) {
        PyObject *pt = Py_BuildValue("{s:d,s:d,s:d,s:d,s:d,s:O}", "bandwidth_Bps", bws[i],
                                     "fraction_of_ideal", res[i].fraction_of_ideal, "iteration_s",
                                     res[i].iteration_s, "ideal_s", res[i].ideal_s, "stall_s",
                                     res[i].stall_s, "oom", res[i].oom ? Py_True : Py_False);
        if (!pt) {
            Py_CLEAR(points);
            break;
        }
        PyList_SET_ITEM(points, i, pt);
    }
    if (!points) {
        return NULL;
    }
    return Py_BuildValue("{s:s,s:s,s:s,s:N}", "hw", hw.name, "policy", policy, "varied",
                         "ssd_array_bandwidth", "points", points);
}

/* hw_json(name_or_file) -> str: the hardware description with every field, as
 * `teraio hw show --json` prints it. */
static PyObject *py_hw_json(PyObject *mod, PyObject *arg) {
    (void)mod;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) {
        return NULL;
    }
    struct tio_hw hw;
    char *text = NULL;
    int rc = tio_hw_load(name, &hw);
    if (rc == 0) {
        rc = tio_hw_to_json(&hw, &text);
    }
    if (rc < 0) {
        return tio_py_raise(rc, name);
    }
    PyObject *out = PyUnicode_FromString(text);
    tio_free(text);
    return out;
}

static PyMethodDef sim_methods[] = {
    { "simulate", (PyCFunction)(void (*)(void))py_simulate, METH_VARARGS | METH_KEYWORDS,
      "simulate(trace, hw='paper-2xh100nvl', policy=None, plan=None, capacity=None, warmup=1, "
      "demand_evict=False, csv=None)"
      " -> dict with the keys of `teraio simulate --json`; csv: a folder for kernels.csv and "
      "bandwidth.csv (`teraio simulate --csv`)." },
    { "sweep", (PyCFunction)(void (*)(void))py_sweep, METH_VARARGS | METH_KEYWORDS,
      "sweep(trace, hw, policy='teraio-ssd', bandwidths=None, capacity=None, demand_evict=False)"
      " -> dict with the keys of `teraio sweep --json` (bandwidths in B/s; None: 4 to 64 GB/s)." },
    { "hw_json", py_hw_json, METH_O,
      "hw_json(name_or_file) -> str: the hardware description as `teraio hw show --json`." },
    { NULL, NULL, 0, NULL }
};

int tio_py_add_sim(PyObject *m) {
    return PyModule_AddFunctions(m, sim_methods);
}
