/* teraio trace info|validate|convert through the built CLI ($TIO_CLI): outputs and exit codes. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tio_test.h"

static char tmpdir[64];

/* Run `teraio <args>` (stdout and stderr together); returns the exit status. */
static int run(const char *args, char *out, size_t outlen) {
    return tio_test_run_cli(args, out, outlen);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    char *buf = malloc(1 << 20);
    *len = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

static const char *data(const char *name) {
    static char path[4][1024];
    static int i;
    i = (i + 1) % 4;
    snprintf(path[i], sizeof path[i], "%s/%s", getenv("TIO_TEST_DATA"), name);
    return path[i];
}

static char out[1 << 16];

TIO_TEST(validate_ok) {
    char args[2048];
    snprintf(args, sizeof args, "trace validate %s", data("example.json"));
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "valid (12 kernels, 17 tensors, 37 uses)") != NULL);
    snprintf(args, sizeof args, "trace validate %s", data("example.tio"));
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "valid") != NULL);
}

TIO_TEST(validate_corrupt_is_exit_2) {
    size_t n = 0;
    char *buf = slurp(data("example.tio"), &n);
    REQUIRE(buf && n > 300);
    buf[300] ^= 0x01;
    char path[256], args[512];
    snprintf(path, sizeof path, "%s/corrupt.tio", tmpdir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n);
    if (f) {
        fclose(f);
    }
    free(buf);
    snprintf(args, sizeof args, "trace validate %s", path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "checksum mismatch") != NULL);
    /* Truncated JSON: names the parse position. */
    snprintf(path, sizeof path, "%s/bad.json", tmpdir);
    f = fopen(path, "wb");
    CHECK(f && fputs("{\"format\":\"teraio-trace\",\"version\":1,\"tensors\":[{\"bytes\":8,"
                     "\"kind\":\"weights\"}],\"kernels\":[]}",
                     f) >= 0);
    if (f) {
        fclose(f);
    }
    snprintf(args, sizeof args, "trace validate %s", path);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "tensors[0].kind: unknown kind 'weights'") != NULL);
    snprintf(args, sizeof args, "trace info %s/does-not-exist.tio", tmpdir);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "does-not-exist.tio") != NULL);
}

TIO_TEST(info_text_and_json) {
    char args[2048];
    snprintf(args, sizeof args, "trace info %s", data("example.json"));
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    /* Values computed by hand from tests/data/example.json. */
    CHECK(strstr(out, "kernels         12 (comm 1, optim 2, backward 6)") != NULL);
    CHECK(strstr(out, "tensors         17 (8 global)") != NULL);
    CHECK(strstr(out, "uses            37") != NULL);
    CHECK(strstr(out, "iteration time  239.7 us") != NULL);
    CHECK(strstr(out, "(3486468)") != NULL);
    CHECK(strstr(out, "(3252224)") != NULL);
    CHECK(strstr(out, "model = mlp-2layer") != NULL);
    CHECK(strstr(out, "aten::mm") != NULL && strstr(out, "40.7%") != NULL);
    snprintf(args, sizeof args, "trace info %s --json --top 2", data("example.tio"));
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "\"format\": \"binary\"") != NULL);
    CHECK(strstr(out, "\"iteration_ns\": 239700") != NULL);
    CHECK(strstr(out, "\"total_bytes\": 3486468") != NULL);
    CHECK(strstr(out, "\"global_bytes\": 3252224") != NULL);
    CHECK(strstr(out, "\"optim_state\": {\"tensors\": 4, \"bytes\": 1626112}") != NULL);
    CHECK(strstr(out, "{\"name\": \"aten::mm\", \"count\": 5, \"duration_ns\": 97500}") != NULL);
    CHECK(strstr(out, "nccl:all_reduce") != NULL);
    CHECK(strstr(out, "aten::_fused_adam") == NULL); /* --top 2 */
}

TIO_TEST(convert_round_trip) {
    char args[2048], p1[256], p2[256];
    snprintf(p1, sizeof p1, "%s/a.tio", tmpdir);
    snprintf(p2, sizeof p2, "%s/b.out", tmpdir);
    snprintf(args, sizeof args, "trace convert %s %s", data("example.json"), p1);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    /* The converter reproduces the committed binary twin byte for byte. */
    size_t n1 = 0, n2 = 0;
    char *a = slurp(p1, &n1), *b = slurp(data("example.tio"), &n2);
    CHECK(a && b && n1 == n2 && memcmp(a, b, n1) == 0);
    free(a);
    free(b);
    snprintf(args, sizeof args, "trace convert %s %s --format json", p1, p2);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    a = slurp(p2, &n1);
    CHECK(a && n1 > 0 && a[0] == '{');
    free(a);
    snprintf(args, sizeof args, "trace validate %s", p2);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
}

TIO_TEST(usage_errors_are_exit_1) {
    CHECK_EQ_I(run("trace", out, sizeof out), 1);
    CHECK_EQ_I(run("trace frobnicate x", out, sizeof out), 1);
    CHECK(strstr(out, "unknown subcommand 'frobnicate'") != NULL);
    CHECK_EQ_I(run("trace info", out, sizeof out), 1);
    CHECK_EQ_I(run("trace validate a b", out, sizeof out), 1);
    CHECK_EQ_I(run("trace convert only-one", out, sizeof out), 1);
    CHECK_EQ_I(run("trace convert a b --format xml", out, sizeof out), 1);
    CHECK(strstr(out, "'xml'") != NULL);
    CHECK_EQ_I(run("trace info x --bogus", out, sizeof out), 1);
    CHECK_EQ_I(run("trace info x --top", out, sizeof out), 1);
    CHECK_EQ_I(run("trace validate x --json", out, sizeof out), 1);
    CHECK_EQ_I(run("trace --help", out, sizeof out), 0);
    CHECK(strstr(out, "examples:") != NULL && strstr(out, "convert IN OUT") != NULL);
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI") || !getenv("TIO_TEST_DATA")) {
        TIO_SKIP("TIO_CLI or TIO_TEST_DATA not set (CLI not built)");
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tio_cli_trace_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        TIO_SKIP("cannot create a temporary directory");
    }
    RUN(validate_ok);
    RUN(validate_corrupt_is_exit_2);
    RUN(info_text_and_json);
    RUN(convert_round_trip);
    RUN(usage_errors_are_exit_1);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) {
        printf("warning: could not remove %s\n", tmpdir);
    }
    return tio_test_done();
}
