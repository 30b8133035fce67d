// teraio._torch_alloc: PyTorch's CPU allocator over teraio's block cache.
//
// The only C++ in teraio: PyTorch's allocator interface (c10::Allocator) is a C++ class, so
// this adapter is what C cannot do. Everything it decides is in the C block cache
// (src/include/teraio/blockcache.h), reached through the function table teraio._core exports as
// the capsule teraio._core._block_cache_api. Requests below min_bytes, and any the cache
// cannot serve, go to the allocator that was installed before (PyTorch's default). Every
// block carries its own deleter, so blocks handed out stay valid after uninstall().
//
// uninstall() does not put the previous allocator back in c10: it stops serving and passes
// every request to it. Memory from the raw interface is freed through whatever allocator c10
// has at that time (an ideep tensor made while the cache served, freed after): the previous
// allocator's raw deleter would free() a block of the cache, this one's tells them apart.
//
// c10's raw interface (raw_allocate / raw_deallocate: oneDNN's scratchpads, exact GELU,
// bfloat16 matmuls, convolutions) frees a pointer through the allocator's raw_deleter() alone,
// with no DataPtr to say who made it: raw_release asks the cache first and hands any pointer
// that is not one of its blocks to the previous allocator's raw deleter.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>

#include "../_core/torch_alloc_api.h"

namespace {

const tio_torch_alloc_api *g_api = nullptr;
c10::Allocator *g_prev = nullptr;
std::atomic<uint64_t> g_min_bytes{1u << 20};
std::atomic<uint64_t> g_fallbacks{0};
std::atomic<bool> g_serving{false};  // install()ed and not uninstall()ed: blocks from the cache
constexpr uint8_t kPriority = 100;

void release_block(void *p) {
    (void)g_api->release(p);
}

c10::DeleterFnPtr g_prev_raw = nullptr;  // g_prev->raw_deleter(), read once at install

void raw_release(void *p) {
    if (!p || g_api->release(p) == 0) {
        return;
    }
    g_prev_raw(p);  // a fallback block: raw_deleter() offers raw_release only when this is set
}

struct BlockCacheAllocator final : c10::Allocator {
    c10::DataPtr allocate(size_t n) override {
        if (n >= g_min_bytes.load(std::memory_order_relaxed) &&
            g_serving.load(std::memory_order_relaxed)) {
            if (void *p = g_api->alloc(n)) {
                return {p, p, &release_block, c10::Device(c10::DeviceType::CPU)};
            }
            g_fallbacks.fetch_add(1, std::memory_order_relaxed);
        }
        return g_prev->allocate(n);
    }
    c10::DeleterFnPtr raw_deleter() const override {
        return g_prev_raw ? &raw_release : nullptr;
    }
    void copy_data(void *dest, const void *src, std::size_t count) const override {
        default_copy_data(dest, src, count);
    }
};

BlockCacheAllocator g_alloc;

PyObject *install(PyObject *, PyObject *args) {
    unsigned long long min_bytes = 0;
    if (!PyArg_ParseTuple(args, "K", &min_bytes)) {
        return nullptr;
    }
    if (min_bytes == 0) {
        PyErr_SetString(PyExc_ValueError, "install: min_bytes must be > 0");
        return nullptr;
    }
    if (!g_api) {
        auto *api = static_cast<const tio_torch_alloc_api *>(
            PyCapsule_Import(TIO_TORCH_ALLOC_CAPSULE, 0));
        if (!api) {
            return nullptr;
        }
        if (api->version != TIO_TORCH_ALLOC_API_VERSION) {
            return PyErr_Format(PyExc_RuntimeError,
                                "teraio._torch_alloc: teraio._core has block-cache API %d, this "
                                "module needs %d (rebuild teraio)",
                                (int)api->version, TIO_TORCH_ALLOC_API_VERSION);
        }
        g_api = api;
    }
    g_min_bytes.store(min_bytes, std::memory_order_relaxed);
    c10::Allocator *cur = c10::GetCPUAllocator();
    if (cur == &g_alloc) {  // installed before (perhaps uninstall()ed since): serve again
        g_serving.store(true, std::memory_order_relaxed);
        Py_RETURN_TRUE;
    }
    g_prev = cur;
    g_prev_raw = cur->raw_deleter();
    c10::SetCPUAllocator(&g_alloc, kPriority);
    if (c10::GetCPUAllocator() != &g_alloc) {  // a higher-priority allocator is in place
        Py_RETURN_FALSE;
    }
    g_serving.store(true, std::memory_order_relaxed);
    Py_RETURN_TRUE;
}

PyObject *uninstall(PyObject *, PyObject *) {
    if (c10::GetCPUAllocator() != &g_alloc || !g_serving.load(std::memory_order_relaxed)) {
        Py_RETURN_FALSE;
    }
    g_serving.store(false, std::memory_order_relaxed);  // see the top of this file
    Py_RETURN_TRUE;
}

PyObject *installed(PyObject *, PyObject *) {
    return PyBool_FromLong(c10::GetCPUAllocator() == &g_alloc &&
                           g_serving.load(std::memory_order_relaxed));
}

PyObject *fallbacks(PyObject *, PyObject *) {
    return PyLong_FromUnsignedLongLong(g_fallbacks.load(std::memory_order_relaxed));
}

PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(min_bytes) -> bool: make PyTorch's CPU allocator take blocks of min_bytes or "
     "more from teraio's block cache (enable it first: teraio._core.block_cache_enable); False "
     "if an allocator of higher priority is in place."},
    {"uninstall", uninstall, METH_NOARGS,
     "uninstall() -> bool: pass every request to the previous CPU allocator again (blocks "
     "handed out stay valid)."},
    {"installed", installed, METH_NOARGS, "installed() -> bool: whether it is PyTorch's now."},
    {"fallbacks", fallbacks, METH_NOARGS,
     "fallbacks() -> int: requests the cache could not serve (given to the previous allocator)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "teraio._torch_alloc",
                      "PyTorch's CPU allocator over teraio's block cache.", -1, methods};

}  // namespace

#ifndef TIO_TORCH_VERSION
#define TIO_TORCH_VERSION "unknown"
#endif

PyMODINIT_FUNC PyInit__torch_alloc(void) {
    PyObject *m = PyModule_Create(&module);
    // the PyTorch whose headers and libc10 this was built against (c10's C++ ABI changes
    // between releases: the Offloader refuses to install it under another version)
    if (m && PyModule_AddStringConstant(m, "torch_version", TIO_TORCH_VERSION) < 0) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
