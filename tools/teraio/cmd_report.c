/* teraio report: the plots are drawn by matplotlib in the Python layer (teraio.report, which
 * gets every number from libteraio through teraio._core and runs no other process); this
 * command finds the interpreter and hands it the arguments unchanged. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* The interpreter (docs/user-guide.md, "teraio report"): $TERAIO_PYTHON, else the python beside
 * this executable (a venv's bin/), else the repository's .venv when this is build/teraio, else
 * python3 from PATH. `exe` is this executable's path (empty if unknown). */
static char *find_python(const char *exe, char *buf, size_t len) {
    const char *env = getenv("TERAIO_PYTHON"); /* NOLINT(concurrency-mt-unsafe) */
    if (env && *env && strlen(env) < len) {
        strcpy(buf, env); /* NOLINT: length checked */
        return buf;
    }
    const char *slash = strrchr(exe, '/');
    if (slash) {
        int dir = (int)(slash - exe);
        const char *rel[] = { "/python", "/../.venv/bin/python" };
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            int n = snprintf(buf, len, "%.*s%s", dir, exe, rel[i]);
            if (n > 0 && (size_t)n < len && access(buf, X_OK) == 0) {
                return buf;
            }
        }
    }
    (void)snprintf(buf, len, "python3");
    return buf;
}

/* Run by the interpreter with the command's arguments: an interpreter without the teraio
 * package says so and exits 3 (a runtime failure) instead of printing a traceback. */
static const char bootstrap[] =
    "import sys\n"
    "try:\n"
    "    from teraio.report import main\n"
    "except ImportError as e:\n"
    "    sys.stderr.write('teraio report: %s cannot import the teraio Python package (%s): '\n"
    "                     'install it (scripts/setup.sh, or pip install .) or set TERAIO_PYTHON '\n"
    "                     'to an interpreter that has it\\n' % (sys.executable, e))\n"
    "    sys.exit(3)\n"
    "sys.exit(main(sys.argv[1:]))\n";

int cli_cmd_report(int argc, char **argv) {
    char exe[PATH_MAX], pybuf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *py = find_python(exe, pybuf, sizeof pybuf);
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args) {
        cli_error("report", "out of memory");
        return TIO_EXIT_RUNTIME;
    }
    args[0] = py;
    char dash_c[] = "-c", code[sizeof bootstrap];
    memcpy(code, bootstrap, sizeof bootstrap);
    args[1] = dash_c;
    args[2] = code;
    for (int i = 1; i < argc; i++) {
        args[i + 2] = argv[i];
    }
    execvp(py, args);
    int err = errno;
    char msg[128];
    const char *text = strerror_r(err, msg, sizeof msg);
    free(args);
    cli_error("report",
              "cannot run %s: %s (the report needs the teraio Python package with "
              "matplotlib: run scripts/setup.sh, or set TERAIO_PYTHON)",
              py, text);
    return TIO_EXIT_RUNTIME;
}
