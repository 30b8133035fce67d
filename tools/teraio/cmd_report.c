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
 * else python3 from PATH. */
static char *find_python(char *buf, size_t len) {
    const char *env = getenv("TERAIO_PYTHON"); /* NOLINT(concurrency-mt-unsafe) */
    if (env && *env && strlen(env) < len) {
        strcpy(buf, env); /* NOLINT: length checked */
        return buf;
    }
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n > 0) {
        buf[n] = '\0';
        char *slash = strrchr(buf, '/');
        if (slash && (size_t)(slash - buf) + sizeof "/python" < len) {
            strcpy(slash, "/python"); /* NOLINT: bounds checked above */
            if (access(buf, X_OK) == 0) {
                return buf;
            }
        }
    }
    (void)snprintf(buf, len, "python3");
    return buf;
}

int cli_cmd_report(int argc, char **argv) {
    char pybuf[PATH_MAX];
    char *py = find_python(pybuf, sizeof pybuf);
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
