/* The CLI dispatcher: help, version, unknown commands and their exit codes. */
#include <stdlib.h>
#include <sys/wait.h>

#include "tio_test.h"

static int run(const char *args, char *out, size_t outlen) {
    return tio_test_run_cli(args, out, outlen);
}

TIO_TEST(help_lists_commands) {
    char out[8192];
    CHECK_EQ_I(run("--help", out, sizeof out), 0);
    CHECK(strstr(out, "usage: teraio") != NULL);
    CHECK(strstr(out, "exit codes") != NULL);
}

TIO_TEST(version_prints) {
    char out[256];
    CHECK_EQ_I(run("--version", out, sizeof out), 0);
    CHECK(strncmp(out, "teraio ", 7) == 0);
}

TIO_TEST(unknown_command_is_usage_error) {
    char out[8192];
    CHECK_EQ_I(run("frobnicate", out, sizeof out), 1);
    CHECK(strstr(out, "unknown command 'frobnicate'") != NULL);
    CHECK_EQ_I(run("", out, sizeof out), 1);
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI")) {
        TIO_SKIP("TIO_CLI not set (CLI not built)");
    }
    RUN(help_lists_commands);
    RUN(version_prints);
    RUN(unknown_command_is_usage_error);
    return tio_test_done();
}
