/* teraio model: exit codes, messages and the --json keys. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <teraio/trace.h>

#include "tio_test.h"

static char out[65536];

static int run(const char *args) {
    char cmd[4096];
    (void)snprintf(cmd, sizeof cmd, "model %s", args);
    return tio_test_run_cli(cmd, out, sizeof out);
}

#define HAS(s)                                                     \
    do {                                                           \
        if (!strstr(out, (s)))                                     \
            TIO_T_FAIL("output lacks \"%s\":\n%.2000s", (s), out); \
    } while (0)

TIO_TEST(help_and_list) {
    CHECK_EQ_I(run("--help"), 0);
    HAS("usage: teraio model");
    HAS("examples:");
    CHECK_EQ_I(run("--list"), 0);
    HAS("llama3-70b");
    HAS("h100-nvl");
}

TIO_TEST(json_has_the_keys) {
    CHECK_EQ_I(run("--preset small --json"), 0);
    const char *keys[] = { "\"params\": 3672320",
                           "\"kernels\": ",
                           "\"tensors\": ",
                           "\"flops_per_iteration\": ",
                           "\"peak_bytes\": ",
                           "\"capacity_bytes\": 100931731456",
                           "\"memory_ratio\": ",
                           "\"ideal_iteration_s\": ",
                           "\"ideal_tokens_per_s\": ",
                           "\"tokens_per_iteration\": 1024",
                           "\"model\": \"small\"" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        HAS(keys[i]);
    }
    CHECK_EQ_I(run("--preset llama3-8b --json --batch 8"), 0);
    HAS("\"params\": 8030261248");
}

TIO_TEST(options_apply) {
    CHECK_EQ_I(run("--preset small --rank 1 --precision bf16 --gpu h200 --checkpointing --json"),
               0);
    HAS("\"rank\": 1");
    HAS("\"stage\": 1");
    HAS("\"precision\": \"bf16\"");
    HAS("\"gpu\": \"h200\"");
    HAS("\"checkpointing\": true");
    CHECK_EQ_I(run("--preset custom --layers 2 --hidden 128 --heads 4 --kv-heads 2 --ffn-hidden "
                   "256 --vocab 512 --batch 4 --micro-batch 2 --seq 64 --pp 1 --json"),
               0);
    HAS("\"model\": \"custom\"");
    CHECK_EQ_I(run("--preset tiny --gpu-memory 1GiB"), 0);
    HAS("of 1.00 GiB");
}

TIO_TEST(bad_input_exit_codes) {
    CHECK_EQ_I(run("--preset nope"), 2);
    HAS("unknown preset 'nope'");
    CHECK_EQ_I(run("--preset small --batch 9"), 2);
    HAS("use a multiple of 2");
    CHECK_EQ_I(run("--preset small --pp 5"), 2);
    HAS("use pp <= 4");
    CHECK_EQ_I(run("--preset small --tp 3"), 2);
    HAS("tp 3");
    CHECK_EQ_I(run("--preset small --seq 0"), 1); /* a count of 0 is refused at parsing */
    HAS("--seq: '0' is out of range: from 1");
    CHECK_EQ_I(run("--preset small --gpu b200"), 2);
    HAS("unknown GPU");
    CHECK_EQ_I(run("--preset small --batch -4"), 1);
    HAS("--batch: '-4' is not a whole number");
    CHECK_EQ_I(run("--preset small --bogus"), 1);
    HAS("unknown option '--bogus'");
    CHECK_EQ_I(run("--preset small --batch"), 1);
    HAS("needs a value");
    CHECK_EQ_I(run("--precision fp8"), 1);
    HAS("use fp32 or bf16");
}

TIO_TEST(writes_the_trace) {
    char path[256];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/tio_cli_model_%d.tio", dir && *dir ? dir : "/tmp",
             (int)getpid());
    char args[512];
    snprintf(args, sizeof args, "--preset tiny -o %s", path);
    CHECK_EQ_I(run(args), 0);
    HAS("wrote");
    struct tio_trace *tr = NULL;
    CHECK_OK(tio_trace_load(path, TIO_TRACE_FORMAT_AUTO, &tr));
    CHECK(tr != NULL);
    if (tr) {
        CHECK_STR(tio_trace_get_meta(tr, "source"), "teraio model");
        CHECK_STR(tio_trace_get_meta(tr, "model"), "tiny");
        CHECK(tio_trace_kernel_count(tr) > 100);
        tio_trace_free(tr);
    }
    unlink(path);
    /* an unwritable path is a runtime/input failure with the path in the message */
    CHECK(run("--preset tiny -o /nonexistent-dir/x.tio") >= 2);
    HAS("/nonexistent-dir/x.tio");
}

int main(void) {
    if (!getenv("TIO_CLI") || !*getenv("TIO_CLI")) {
        TIO_SKIP("TIO_CLI not set (CLI not built)");
    }
    RUN(help_and_list);
    RUN(json_has_the_keys);
    RUN(options_apply);
    RUN(bad_input_exit_codes);
    RUN(writes_the_trace);
    return tio_test_done();
}
