/* teraio probe and teraio bench-io: output fields, exit codes, clear errors. */
#include <stdlib.h>
#include <sys/wait.h>

#include "../tio_test.h"
#include "io_util.h"

static int run(const char *args, char *out, size_t outlen) {
    return tio_test_run_cli(args, out, outlen);
}

static char g_dir[512];

TIO_TEST(probe_text_and_json) {
    static char out[16384];
    CHECK_EQ_I(run("probe", out, sizeof out), 0);
    CHECK(strstr(out, "posix") && strstr(out, "auto selects"));
    CHECK_EQ_I(run("probe --json", out, sizeof out), 0);
    CHECK(strstr(out, "\"backends\"") && strstr(out, "\"available\": true") &&
          strstr(out, "\"reason\"") && strstr(out, "\"name\": \"uring\""));
    CHECK_EQ_I(run("probe --bogus", out, sizeof out), 1);
    CHECK_EQ_I(run("probe --help", out, sizeof out), 0);
    CHECK(strstr(out, "examples") != NULL);
}

TIO_TEST(bench_io_json) {
    static char out[16384], args[1024];
    snprintf(args, sizeof args,
             "bench-io --dir %s --size 8MiB --block 1MiB --depth 4 --backend posix --json", g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "\"bytes_per_s\"") && strstr(out, "\"cpu_s_per_gib\""));
    CHECK(strstr(out, "\"bytes\": 8388608") != NULL);
    CHECK(strstr(out, "\"buffers\": \"io-alloc\"") != NULL);
    snprintf(args, sizeof args,
             "bench-io --dir %s --size 4MiB --block 1MiB --depth 2 --backend posix --small-pages "
             "--json",
             g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "\"buffers\": \"small-pages\"") && strstr(out, "\"bytes\": 4194304"));
    snprintf(args, sizeof args, "bench-io --dir %s --size 4MiB --block 64KiB --rw read", g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "read 4.00 MiB") != NULL);
    /* the 50/50 point of the mixed curve: 8 tensors, 4 read (written first) and 4 written */
    snprintf(args, sizeof args,
             "bench-io --dir %s --size 8MiB --block 1MiB --depth 4 --backend posix --rw mixed "
             "--verify --json",
             g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "\"rw\": \"mixed\"") && strstr(out, "\"bytes\": 8388608"));
    CHECK(strstr(out, "\"read_bytes\": 4194304") && strstr(out, "\"write_bytes\": 4194304"));
    CHECK_EQ_I(io_dir_entries(g_dir), 0);
}

TIO_TEST(bench_io_errors) {
    static char out[16384], args[1024];
    CHECK_EQ_I(run("bench-io", out, sizeof out), 1);
    CHECK(strstr(out, "--dir is required") != NULL);
    snprintf(args, sizeof args, "bench-io --dir %s --rw sideways", g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 1);
    snprintf(args, sizeof args, "bench-io --dir %s --block 1000", g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 1);
    CHECK_EQ_I(run("bench-io --dir /nonexistent/tio --size 1MiB --block 1MiB", out, sizeof out), 2);
    CHECK(strstr(out, "/nonexistent/tio") != NULL);
    snprintf(args, sizeof args, "bench-io --dir %s --backend nosuch", g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 2);
    CHECK(strstr(out, "nosuch") != NULL);
    CHECK_EQ_I(run("bench-io --help", out, sizeof out), 0);
}

/* --device-mem against the fake libcudart (its "device memory" is host memory): the cuda
 * backend moves the buffers and --verify checks every chunk read back. On a GPU machine,
 * scripts/gpu_validate.sh runs the same with the real library. */
TIO_TEST(bench_io_device_memory) {
    static char out[16384], args[1024];
    const char *fake = getenv("TIO_FAKE_CUDART");
    REQUIRE(fake != NULL);
    snprintf(args, sizeof args,
             "bench-io --dir %s --size 4MiB --block 1MiB --depth 2 --backend cuda --device-mem "
             "--rw read --verify --json",
             g_dir);
    CHECK_EQ_I(setenv("TIO_CUDART_LIB", fake, 1), 0);
    CHECK_EQ_I(run(args, out, sizeof out), 0);
    CHECK(strstr(out, "\"buffers\": \"device\"") && strstr(out, "\"backend\": \"cuda\"") &&
          strstr(out, "\"bytes\": 4194304"));
    snprintf(args, sizeof args, "bench-io --dir %s --device-mem --small-pages", g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 1);
    CHECK(strstr(out, "exclude each other") != NULL);
    /* no CUDA runtime: a clear error, exit 3 */
    CHECK_EQ_I(setenv("TIO_CUDART_LIB", "/nonexistent/libcudart.so", 1), 0);
    snprintf(args, sizeof args, "bench-io --dir %s --size 1MiB --block 1MiB --device-mem", g_dir);
    CHECK_EQ_I(run(args, out, sizeof out), 3);
    CHECK(strstr(out, "--device-mem needs a CUDA device") != NULL);
    CHECK_EQ_I(unsetenv("TIO_CUDART_LIB"), 0);
    CHECK_EQ_I(io_dir_entries(g_dir), 0);
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI"))
        TIO_SKIP("TIO_CLI not set (CLI not built)");
    io_mkdtemp(g_dir, sizeof g_dir, "cli");
    RUN(probe_text_and_json);
    RUN(bench_io_json);
    RUN(bench_io_errors);
    RUN(bench_io_device_memory);
    CHECK(rmdir(g_dir) == 0);
    return tio_test_done();
}
