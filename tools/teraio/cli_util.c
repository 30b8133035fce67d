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
