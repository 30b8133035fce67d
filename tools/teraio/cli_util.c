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
    /* the characters JSON escapes with a backslash and a letter; other control bytes as \u00XX */
    static const char plain[] = "\"\\\n\t\r", letter[] = "\"\\ntr";
    (void)fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        const char *e = strchr(plain, *p);
        if (e) {
            (void)fputc('\\', f);
            (void)fputc(letter[e - plain], f);
        } else if (*p < 0x20) {
            (void)fprintf(f, "\\u%04x", *p);
        } else {
            (void)fputc(*p, f);
        }
    }
    (void)fputc('"', f);
}

/* opt's text through one of the library's unit parsers: bytes (tio_parse_bytes into *bytes),
 * a rate or a duration (tio_parse_rate / tio_parse_duration into *v, which must be finite and
 * above 0). Errors name the option and give examples. Returns 0 or TIO_EXIT_USAGE. */
enum unit { UNIT_BYTES, UNIT_RATE, UNIT_DURATION };
static int parse_unit(
    const char *cmd, const char *opt, const char *text, int unit, uint64_t *bytes, double *v) {
    static const char *const what[] = {
        [UNIT_BYTES] = "size", [UNIT_RATE] = "rate", [UNIT_DURATION] = "duration"
    };
    static const char *const examples[] = { [UNIT_BYTES] = "94GiB, 512MB, 4096",
                                            [UNIT_RATE] = "6.5GB/s, 16GiB/s",
                                            [UNIT_DURATION] = "10ms, 500us, 1s" };
    int rc = unit == UNIT_BYTES  ? tio_parse_bytes(text, bytes)
             : unit == UNIT_RATE ? tio_parse_rate(text, v)
                                 : tio_parse_duration(text, v);
    if (rc < 0) {
        cli_error(cmd, "%s: %s (e.g. %s)", opt, tio_last_error(), examples[unit]);
        return TIO_EXIT_USAGE;
    }
    if (unit != UNIT_BYTES && (!isfinite(*v) || !(*v > 0))) {
        cli_error(cmd, "%s: '%s' is not a finite %s above 0 (e.g. %s)", opt, text, what[unit],
                  examples[unit]);
        return TIO_EXIT_USAGE;
    }
    return 0;
}

/* The exit code of a _pos parser: rc, the parse's, then `rule` ("must be at least 1") broken
 * unless the value it set (*u, or *d when u is NULL) is above 0. */
static int positive_status(const char *cmd,
                           const char *opt,
                           const char *text,
                           int rc,
                           const uint64_t *u,
                           const double *d,
                           const char *rule) {
    if (rc == 0 && !(u ? *u > 0 : d && *d > 0)) {
        cli_error(cmd, "%s: %s (got '%s')", opt, rule, text);
        return TIO_EXIT_USAGE;
    }
    return rc;
}

int cli_parse_bytes(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    return parse_unit(cmd, opt, text, UNIT_BYTES, out, NULL);
}

int cli_parse_bytes_pos(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    return positive_status(cmd, opt, text, cli_parse_bytes(cmd, opt, text, out), out, NULL,
                           "must be more than 0 bytes");
}

int cli_parse_rate(const char *cmd, const char *opt, const char *text, double *out) {
    return parse_unit(cmd, opt, text, UNIT_RATE, NULL, out);
}

/* opt's text as a whole number without a sign (u, strtoull) or a finite number (d, strtod; the
 * other pointer NULL), set only on success. Returns 0 or TIO_EXIT_USAGE. */
static int
parse_number(const char *cmd, const char *opt, const char *text, uint64_t *u, double *d) {
    char *end = NULL;
    errno = 0;
    unsigned long long uv = text && u ? strtoull(text, &end, 10) : 0;
    double dv = text && d ? strtod(text, &end) : 0;
    if (!text || !*text || !end || *end || (u && (errno || text[0] == '-'))) {
        cli_error(cmd, "%s: '%s' is not %s", opt, text ? text : "",
                  u ? "a non-negative integer" : "a number");
        return TIO_EXIT_USAGE;
    }
    if (d && !isfinite(dv)) { /* strtod takes "nan", "inf" and overflows to inf */
        cli_error(cmd, "%s: '%s' is not a finite number", opt, text);
        return TIO_EXIT_USAGE;
    }
    if (u) {
        *u = uv;
    } else {
        *d = dv;
    }
    return 0;
}

int cli_parse_u64(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    return parse_number(cmd, opt, text, out, NULL);
}

int cli_parse_u64_pos(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    return positive_status(cmd, opt, text, cli_parse_u64(cmd, opt, text, out), out, NULL,
                           "must be at least 1");
}

int cli_parse_double(const char *cmd, const char *opt, const char *text, double *out) {
    return parse_number(cmd, opt, text, NULL, out);
}

int cli_parse_pos(const char *cmd, const char *opt, const char *text, double *out) {
    return positive_status(cmd, opt, text, cli_parse_double(cmd, opt, text, out), NULL, out,
                           "must be above 0");
}

int cli_parse_duration_pos(const char *cmd, const char *opt, const char *text, double *seconds) {
    return parse_unit(cmd, opt, text, UNIT_DURATION, NULL, seconds);
}

int cli_set_flag(const struct cli_flag *flags, size_t n, const char *arg) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(arg, flags[i].opt) == 0) {
            *flags[i].dst = flags[i].value;
            return 1;
        }
    }
    return 0;
}

const struct cli_u64_opt *
cli_find_u64_opt(const struct cli_u64_opt *opts, size_t n, const char *arg) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(arg, opts[i].opt) == 0) {
            return &opts[i];
        }
    }
    return NULL;
}
