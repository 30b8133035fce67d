/* Helpers shared by the subcommands (errors, exit codes, JSON strings, option values). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <teraio/status.h>
#include <teraio/units.h>

#include "cli.h"

void cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    (void)fprintf(stderr, "teraio %s: ", cmd);
    va_start(ap, fmt);
    (void)vfprintf(stderr, fmt, ap);
    va_end(ap);
    (void)fputc('\n', stderr);
}

int cli_exit_code(int rc) {
    return tio_status_is_input_error(rc) ? TIO_EXIT_INPUT : TIO_EXIT_RUNTIME;
}

int cli_fail(const char *cmd, const char *what, int rc) {
    const char *detail = tio_last_error();
    if (detail && *detail) {
        cli_error(cmd, "%s: %s: %s", what, tio_strerror(rc), detail);
    } else {
        cli_error(cmd, "%s: %s", what, tio_strerror(rc));
    }
    return cli_exit_code(rc);
}

int cli_stderr_is_tty(void) {
    return isatty(STDERR_FILENO);
}

void cli_json_string(FILE *f, const char *s) {
    (void)fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"':
            (void)fputs("\\\"", f);
            break;
        case '\\':
            (void)fputs("\\\\", f);
            break;
        case '\n':
            (void)fputs("\\n", f);
            break;
        case '\t':
            (void)fputs("\\t", f);
            break;
        case '\r':
            (void)fputs("\\r", f);
            break;
        default:
            if (*p < 0x20) {
                (void)fprintf(f, "\\u%04x", *p);
            } else {
                (void)fputc(*p, f);
            }
        }
    }
    (void)fputc('"', f);
}

int cli_parse_bytes(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    if (tio_parse_bytes(text, out) < 0) {
        cli_error(cmd, "%s: %s (e.g. 94GiB, 512MB, 4096)", opt, tio_last_error());
        return TIO_EXIT_USAGE;
    }
    return 0;
}

int cli_parse_bytes_pos(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    int rc = cli_parse_bytes(cmd, opt, text, out);
    if (rc == 0 && *out == 0) {
        cli_error(cmd, "%s: must be more than 0 bytes (got '%s')", opt, text);
        return TIO_EXIT_USAGE;
    }
    return rc;
}

int cli_parse_rate(const char *cmd, const char *opt, const char *text, double *out) {
    if (tio_parse_rate(text, out) < 0) {
        cli_error(cmd, "%s: %s (e.g. 6.5GB/s, 16GiB/s)", opt, tio_last_error());
        return TIO_EXIT_USAGE;
    }
    if (!isfinite(*out) || !(*out > 0)) {
        cli_error(cmd, "%s: '%s' is not a finite rate above 0 (e.g. 6.5GB/s, 16GiB/s)", opt, text);
        return TIO_EXIT_USAGE;
    }
    return 0;
}

int cli_parse_u64(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = text ? strtoull(text, &end, 10) : 0;
    if (!text || !*text || *end || errno || text[0] == '-') {
        cli_error(cmd, "%s: '%s' is not a non-negative integer", opt, text ? text : "");
        return TIO_EXIT_USAGE;
    }
    *out = v;
    return 0;
}

int cli_parse_u64_pos(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    int rc = cli_parse_u64(cmd, opt, text, out);
    if (rc == 0 && *out == 0) {
        cli_error(cmd, "%s: must be at least 1 (got '%s')", opt, text);
        return TIO_EXIT_USAGE;
    }
    return rc;
}

int cli_parse_double(const char *cmd, const char *opt, const char *text, double *out) {
    char *end = NULL;
    double v = text ? strtod(text, &end) : 0;
    if (!text || !*text || *end) {
        cli_error(cmd, "%s: '%s' is not a number", opt, text ? text : "");
        return TIO_EXIT_USAGE;
    }
    if (!isfinite(v)) { /* strtod takes "nan", "inf" and overflows to inf */
        cli_error(cmd, "%s: '%s' is not a finite number", opt, text);
        return TIO_EXIT_USAGE;
    }
    *out = v;
    return 0;
}

int cli_parse_pos(const char *cmd, const char *opt, const char *text, double *out) {
    int rc = cli_parse_double(cmd, opt, text, out);
    if (rc == 0 && !(*out > 0)) {
        cli_error(cmd, "%s: must be above 0 (got '%s')", opt, text);
        return TIO_EXIT_USAGE;
    }
    return rc;
}

int cli_parse_duration_pos(const char *cmd, const char *opt, const char *text, double *seconds) {
    if (tio_parse_duration(text, seconds) < 0) {
        cli_error(cmd, "%s: %s (e.g. 10ms, 500us, 1s)", opt, tio_last_error());
        return TIO_EXIT_USAGE;
    }
    if (!isfinite(*seconds) || !(*seconds > 0)) {
        cli_error(cmd, "%s: '%s' is not a finite duration above 0 (e.g. 10ms, 500us, 1s)", opt,
                  text);
        return TIO_EXIT_USAGE;
    }
    return 0;
}
