/*
 * teraio/status.h - status codes, error strings and the export macros.
 *
 * Every teraio function that can fail returns an int: >= 0 is success (0 or a count), < 0 is
 * either -errno for an operating-system condition (e.g. -ENOSPC) or a TIO_E* code <= -1000.
 * errno is never the channel. When a call fails, a human-readable detail (which field, which
 * file, needed vs available...) is kept per thread and can be read with tio_last_error().
 *
 *     struct tio_trace *tr;
 *     int rc = tio_trace_load("run.tio", &tr);
 *     if (rc < 0)
 *         fprintf(stderr, "teraio: %s: %s\n", tio_strerror(rc), tio_last_error());
 */
#ifndef TERAIO_STATUS_H
#define TERAIO_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TIO_BUILDING_LIBRARY)
#define TIO_API __attribute__((visibility("default")))
#else
#define TIO_API
#endif

#if defined(__cplusplus)
#define TIO_NORETURN [[noreturn]]
#else
#define TIO_NORETURN _Noreturn
#endif

#if defined(__GNUC__)
#define TIO_MUST_CHECK   __attribute__((warn_unused_result))
#define TIO_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TIO_MUST_CHECK
#define TIO_PRINTF(f, a)
#endif

/* teraio's own error codes; all <= -1000 so they never collide with -errno. */
enum tio_status {
    TIO_OK = 0,
    TIO_EINVAL = -1000,      /* an argument or a value in a file is out of range */
    TIO_EFORMAT = -1001,     /* malformed or corrupt file (trace, plan, hardware description) */
    TIO_EVERSION = -1002,    /* file format or struct version (struct_size) not supported */
    TIO_ENOMEM = -1003,      /* allocation failed or a size limit was exceeded */
    TIO_EUNAVAIL = -1004,    /* feature or backend not available on this machine */
    TIO_ECUDA = -1005,       /* CUDA runtime error (detail in tio_last_error) */
    TIO_ECUFILE = -1006,     /* cuFile / GPUDirect Storage error */
    TIO_EPLAN = -1007,       /* plan for another trace, a bad move, or a claim that fails */
    TIO_EINFEASIBLE = -1008, /* a budget cannot be met (e.g. memory below a kernel's working set) */
    TIO_ECORRUPT = -1009,    /* data read back failed its checksum */
    TIO_ECANCELED = -1010,   /* request canceled */
    TIO_ESTATE = -1011,      /* call not valid in the object's current state */
    TIO_ENOTFOUND = -1012,   /* named object (preset, tensor, backend) does not exist */
    TIO_EIO = -1013,         /* I/O failed after retries (detail names the tensor) */
    TIO_STATUS_MIN = -1013
};

/*
 * tio_strerror: a static, never-NULL string for a status code: a TIO_E* code, a negative errno
 * (described with strerror_r), or "success" for values >= 0. Thread-safe.
 */
TIO_API const char *tio_strerror(int status);

/*
 * tio_last_error: detail of the most recent failure on the calling thread (thread-local, owned by
 * the library, valid until the next failing teraio call on this thread). "" if none.
 */
TIO_API const char *tio_last_error(void);

/*
 * tio_set_error: record a failure detail for the calling thread and return `status` unchanged,
 * so that code can write `return tio_set_error(TIO_EFORMAT, "trace: kernel %zu ...", k);`.
 * Exported so that bindings (Python) can report through the same channel.
 */
TIO_API int tio_set_error(int status, const char *fmt, ...) TIO_PRINTF(2, 3);

/*
 * tio_status_is_input_error: 1 when a failure with this status means the input was bad: a value
 * out of range (TIO_EINVAL), a malformed or unsupported file (TIO_EFORMAT, TIO_EVERSION), a plan
 * that is invalid for its trace (TIO_EPLAN), a budget that cannot be met (TIO_EINFEASIBLE), a name
 * that does not exist (TIO_ENOTFOUND), or a path that cannot be used (-ENOENT, -EISDIR, -ENOTDIR,
 * -ELOOP, -EACCES, -EPERM); 0 for anything else (a failure while running, or success). The CLI
 * exits 2 for the former, 3 for the latter, and so does the Python report.
 */
TIO_API int tio_status_is_input_error(int status);

/* tio_clear_error: reset the calling thread's detail to "". */
TIO_API void tio_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
