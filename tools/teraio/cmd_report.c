/* teraio report: the plots are drawn by matplotlib in the Python layer (python -m teraio.report);
 * this command finds the right interpreter and hands it the arguments unchanged. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* The interpreter: $TERAIO_PYTHON, else the python beside this executable (a venv's bin/),
 * else the repository's .venv when this is build/teraio, else python3 from PATH. `exe` is this
 * executable's path (empty if unknown). */
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

int cli_cmd_report(int argc, char **argv) {
    char exe[PATH_MAX], pybuf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    /* the report runs this same CLI (not another one found on PATH or in a venv, which may
     * be stale after a rebuild) unless the caller chose one */
    if (exe[0]) {
        (void)setenv("TERAIO_CLI", exe, 0); /* NOLINT(concurrency-mt-unsafe) */
    }
    char *py = find_python(exe, pybuf, sizeof pybuf);
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args) {
        cli_error("report", "out of memory");
        return TIO_EXIT_RUNTIME;
    }
    args[0] = py;
    char dash_m[] = "-m", module[] = "teraio.report";
    args[1] = dash_m;
    args[2] = module;
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
