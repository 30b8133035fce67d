/*
 * teraio._core.model: the workload model from Python (teraio/model.h).
 *
 *     trace, info = teraio._core.model("llama3-8b", rank=1, seq_len=2048)
 *     # trace: a teraio.Trace (the .tio bytes with as_bytes=True); info: dict of the summary
 *
 * Options are the fields of struct tio_model_params (see docs/model.md), plus `gpu` (a preset
 * name), `gpu_memory` (bytes or "94GiB") and `precision` ("fp32" / "bf16"); `batch` and `seq`
 * are accepted for global_batch and seq_len.
 */
#include <string.h>

#include <teraio/alloc.h>
#include <teraio/model.h>
#include <teraio/trace.h>
#include <teraio/units.h>

#include "core.h"

struct u32_field {
    const char *name;
    size_t offset;
};

#define F(n, field) \
    { n, offsetof(struct tio_model_params, field) }
static const struct u32_field u32_fields[] = {
    F("layers", layers),
    F("hidden", hidden),
    F("heads", heads),
    F("kv_heads", kv_heads),
    F("head_dim", head_dim),
    F("ffn_hidden", ffn_hidden),
    F("vocab", vocab),
    F("global_batch", global_batch),
    F("batch", global_batch),
    F("micro_batch", micro_batch),
    F("seq_len", seq_len),
    F("seq", seq_len),
    F("dp", dp),
    F("tp", tp),
    F("pp", pp),
    F("rank", rank),
    F("grad_accum", grad_accum),
};
static const struct u32_field bool_fields[] = {
    F("tied_embeddings", tied_embeddings),
    F("checkpointing", checkpointing),
    F("allow_tf32", allow_tf32),
    F("fused_adamw", fused_adamw),
};
#undef F

static int set_option(struct tio_model_params *p, const char *key, PyObject *val) {
    for (size_t i = 0; i < sizeof u32_fields / sizeof u32_fields[0]; i++) {
        if (strcmp(key, u32_fields[i].name) == 0) {
            long long v = PyLong_AsLongLong(val);
            if (v == -1 && PyErr_Occurred()) {
                return -1;
            }
            if (v < 0 || v > UINT32_MAX) {
                PyErr_Format(PyExc_ValueError, "model: %s = %lld is out of range", key, v);
                return -1;
            }
            uint32_t u = (uint32_t)v;
            memcpy((char *)p + u32_fields[i].offset, &u, sizeof u);
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof bool_fields / sizeof bool_fields[0]; i++) {
        if (strcmp(key, bool_fields[i].name) == 0) {
            int b = PyObject_IsTrue(val);
            if (b < 0) {
                return -1;
            }
            int32_t v = b;
            memcpy((char *)p + bool_fields[i].offset, &v, sizeof v);
            return 0;
        }
    }
    if (strcmp(key, "precision") == 0 || strcmp(key, "gpu") == 0) {
        const char *s = PyUnicode_AsUTF8(val);
        if (!s) {
            return -1;
        }
        int rc;
        if (key[0] == 'p') {
            rc = tio_model_precision_parse(s);
            if (rc >= 0) {
                p->precision = rc;
            }
        } else {
            rc = tio_gpu_preset(s, &p->gpu);
        }
        if (rc < 0) {
            tio_py_raise(rc, "model");
            return -1;
        }
        return 0;
    }
    if (strcmp(key, "gpu_memory") == 0) {
        uint64_t v;
        if (PyUnicode_Check(val)) {
            int rc = tio_parse_bytes(PyUnicode_AsUTF8(val), &v);
            if (rc < 0) {
                tio_py_raise(rc, "model: gpu_memory");
                return -1;
            }
        } else {
            v = PyLong_AsUnsignedLongLong(val);
            if (PyErr_Occurred()) {
                return -1;
            }
        }
        p->gpu.memory_bytes = v;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "model() got an unexpected keyword argument '%s'", key);
    return -1;
}

/* The keys of `teraio model --json` (ints for counts and bytes, floats for FLOPs and times). */
static PyObject *info_dict(const struct tio_model_params *p, const struct tio_model_info *in) {
    return Py_BuildValue(
        "{s:s,s:s,s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:K,s:K,s:K,s:K,s:d,s:K,s:d,s:d,"
        "s:d}",
        "model", p->model, "gpu", p->gpu.name, "precision", tio_model_precision_name(p->precision),
        "rank", (unsigned long long)p->rank, "stage", (unsigned long long)in->stage, "params",
        (unsigned long long)in->params_total, "params_rank", (unsigned long long)in->params_rank,
        "kernels", (unsigned long long)in->n_kernels, "tensors", (unsigned long long)in->n_tensors,
        "uses", (unsigned long long)in->n_uses, "micro_batches",
        (unsigned long long)in->micro_batches, "tokens_per_iteration",
        (unsigned long long)in->tokens_per_iteration, "flops_per_iteration",
        in->flops_per_iteration, "model_flops_per_iteration", in->model_flops_per_iteration,
        "global_bytes", (unsigned long long)in->global_bytes, "peak_bytes",
        (unsigned long long)in->peak_bytes, "peak_kernel", (unsigned long long)in->peak_kernel,
        "capacity_bytes", (unsigned long long)in->capacity_bytes, "memory_ratio", in->memory_ratio,
        "activation_bytes_per_layer", (unsigned long long)in->activation_bytes_per_layer,
        "ideal_iteration_s", in->ideal_iteration_s, "rank_busy_s", in->rank_busy_s,
        "ideal_tokens_per_s", in->ideal_tokens_per_s);
}

static PyObject *py_model(PyObject *self, PyObject *args, PyObject *kwargs) {
    /* self is the teraio._core module */
    const char *preset = "llama3-8b";
    int as_bytes = 0;
    if (!PyArg_ParseTuple(args, "|s:model", &preset)) {
        return NULL;
    }
    struct tio_model_params p;
    int rc = tio_model_preset(preset, &p);
    if (rc < 0) {
        return tio_py_raise(rc, "model");
    }
    if (kwargs) {
        PyObject *key, *val;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &key, &val)) {
            const char *k = PyUnicode_AsUTF8(key);
            if (k && strcmp(k, "as_bytes") == 0) {
                if ((as_bytes = PyObject_IsTrue(val)) < 0) {
                    return NULL;
                }
                continue;
            }
            if (!k || set_option(&p, k, val) < 0) {
                return NULL;
            }
        }
    }
    struct tio_trace *tr = NULL;
    struct tio_model_info info;
    Py_BEGIN_ALLOW_THREADS rc = tio_model_generate(&p, &tr, &info);
    Py_END_ALLOW_THREADS if (rc < 0) {
        return tio_py_raise(rc, "model");
    }
    void *data = NULL;
    size_t len = 0;
    rc = tio_trace_save_mem(tr, TIO_TRACE_FORMAT_BINARY, &data, &len);
    tio_trace_free(tr);
    if (rc < 0) {
        return tio_py_raise(rc, "model: serialize");
    }
    PyObject *bytes = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    tio_free(data);
    if (bytes && !as_bytes && PyObject_HasAttrString(self, "Trace")) {
        PyObject *type = PyObject_GetAttrString(self, "Trace");
        PyObject *trace = type ? PyObject_CallMethod(type, "from_bytes", "(O)", bytes) : NULL;
        Py_XDECREF(type);
        Py_DECREF(bytes);
        bytes = trace;
    }
    PyObject *d = bytes ? info_dict(&p, &info) : NULL;
    if (!d) {
        Py_XDECREF(bytes);
        return NULL;
    }
    return Py_BuildValue("(NN)", bytes, d);
}

static PyObject *py_model_presets(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *models = PyTuple_New((Py_ssize_t)tio_model_preset_count());
    PyObject *gpus = PyTuple_New((Py_ssize_t)tio_gpu_preset_count());
    if (!models || !gpus) {
        Py_XDECREF(models);
        Py_XDECREF(gpus);
        return NULL;
    }
    for (size_t i = 0; i < tio_model_preset_count(); i++) {
        PyTuple_SET_ITEM(models, (Py_ssize_t)i, PyUnicode_FromString(tio_model_preset_name(i)));
    }
    for (size_t i = 0; i < tio_gpu_preset_count(); i++) {
        PyTuple_SET_ITEM(gpus, (Py_ssize_t)i, PyUnicode_FromString(tio_gpu_preset_name(i)));
    }
    return Py_BuildValue("{sNsN}", "models", models, "gpus", gpus);
}

static PyMethodDef model_methods[] = {
    { "model", (PyCFunction)(void (*)(void))py_model, METH_VARARGS | METH_KEYWORDS,
      "model(preset='llama3-8b', as_bytes=False, **options) -> (Trace, info dict)\n\n"
      "Generate one training iteration of one rank (docs/model.md); with as_bytes=True the\n"
      "trace comes as .tio bytes." },
    { "model_presets", py_model_presets, METH_NOARGS,
      "model_presets() -> {'models': (...), 'gpus': (...)}" },
    { NULL, NULL, 0, NULL },
};

int tio_py_add_model(PyObject *m) {
    return PyModule_AddFunctions(m, model_methods);
}
