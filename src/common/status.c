/* Status codes, tio_strerror and the per-thread error detail. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <teraio/status.h>

#define TIO_ERRBUF 1024

static _Thread_local char tls_detail[TIO_ERRBUF];
static _Thread_local char tls_errno_text[128];

const char *tio_strerror(int status) {
    if (status >= 0) {
        return "success";
    }
    switch (status) {
    case TIO_EINVAL:
        return "invalid argument or value";
    case TIO_EFORMAT:
        return "malformed or corrupt file";
    case TIO_EVERSION:
        return "file or struct from a newer or older teraio: use a matching teraio, or "
               "regenerate/rebuild with this one";
    case TIO_ENOMEM:
        return "out of memory or size limit exceeded";
    case TIO_EUNAVAIL:
        return "not available on this machine";
    case TIO_ECUDA:
        return "CUDA error";
    case TIO_ECUFILE:
        return "cuFile (GPUDirect Storage) error";
    case TIO_EPLAN:
        return "plan is invalid: made for another trace, a move out of range or inconsistent "
               "with the trace or hardware, or a claim of the plan that does not hold (a move "
               "late, memory over capacity)";
    case TIO_EINFEASIBLE:
        return "budget cannot be met";
    case TIO_ECORRUPT:
        return "data failed its checksum";
    case TIO_ECANCELED:
        return "request canceled";
    case TIO_ESTATE:
        return "call not valid in the current state";
    case TIO_ENOTFOUND:
        return "not found";
    case TIO_EIO:
        return "I/O error after retries";
    default:
        break;
    }
    if (status > -1000) {
        /* GNU strerror_r returns a pointer that may or may not be the buffer. */
        const char *s = strerror_r(-status, tls_errno_text, sizeof tls_errno_text);
        return s ? s : "unknown system error";
    }
    return "unknown teraio status";
}

int tio_status_is_input_error(int status) {
    switch (status) {
    case TIO_EINVAL:
    case TIO_EFORMAT:
    case TIO_EVERSION:
    case TIO_EPLAN:
    case TIO_ENOTFOUND:
    case TIO_EINFEASIBLE:
    case -ENOENT:
    case -EISDIR:
    case -ENOTDIR:
    case -ELOOP:  /* a symlinked directory entry, refused on purpose */
    case -EACCES: /* an unwritable directory or file the user named */
    case -EPERM:
        return 1;
    default:
        return 0;
    }
}

const char *tio_last_error(void) {
    return tls_detail;
}

int tio_set_error(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(tls_detail, sizeof tls_detail, fmt, ap);
    va_end(ap);
    return status;
}

void tio_clear_error(void) {
    tls_detail[0] = '\0';
}
