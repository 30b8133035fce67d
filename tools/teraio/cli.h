/* Shared declarations of the teraio CLI: one cmd_<name>.c file per subcommand. */
#ifndef TIO_CLI_H
#define TIO_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Exit codes (docs/user-guide.md), the same for every command; TIO_CLI_EXIT_HELP ends --help. */
enum {
    TIO_EXIT_OK = 0,
    TIO_EXIT_USAGE = 1,  /* bad command line */
    TIO_EXIT_INPUT = 2,  /* bad input file or value */
    TIO_EXIT_RUNTIME = 3 /* failure while running (I/O error, out of memory...) */
};

#define TIO_CLI_EXIT_HELP                                                                     \
    "exit codes (every command): 0 success; 1 usage error (unknown option, missing or\n"      \
    "malformed value, a value out of range such as 0, nan or inf); 2 bad input or output\n"   \
    "path (missing, unreadable or malformed file, a directory, device or FIFO where a file\n" \
    "is needed, unknown name, symlinked or unsafe directory, infeasible budget); 3 runtime\n" \
    "failure (I/O error while reading or writing, disk full, out of memory, backend\n"        \
    "unavailable).\n"

/*
 * Each subcommand: int cli_cmd_<name>(int argc, char **argv), argv[0] is the subcommand name.
 * They are declared weak so that the dispatcher builds before every command exists; a missing
 * command is reported as not built.
 */
#define TIO_CLI_COMMANDS(X)                                                        \
    X(model, "generate a training trace from a model preset and a GPU (what-if)")  \
    X(trace, "inspect, validate and convert trace files (info|validate|convert)")  \
    X(analyze, "tensor lifetimes, inactive periods and memory curves of a trace")  \
    X(plan, "plan offloads and prefetches for a trace on a hardware description")  \
    X(simulate, "replay a trace and a plan (or policy) on a hardware model")       \
    X(sweep, "normalized throughput against migration bandwidth (paper Figure 3)") \
    X(compare, "teraio against the baselines over the paper's evaluation matrix")  \
    X(hw, "list, show and check hardware descriptions")                            \
    X(bench_io, "measure the migration engine on real directories (bench-io)")     \
    X(probe, "which I/O backends can run on this machine")                         \
    X(report, "plots and an HTML report for a trace, plan and hardware (needs Python)")

#define TIO_CLI_DECLARE(name, help) int cli_cmd_##name(int argc, char **argv) __attribute__((weak));
TIO_CLI_COMMANDS(TIO_CLI_DECLARE)
#undef TIO_CLI_DECLARE

/* Report an error as "teraio <cmd>: <msg>" on stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Report a failed library call: "teraio <cmd>: <what>: <tio_strerror(rc)>: <tio_last_error()>"
 * and return the exit code for rc (TIO_EXIT_INPUT for format/value errors, else RUNTIME). */
int cli_fail(const char *cmd, const char *what, int rc);

/* The exit code for a library status: TIO_EXIT_INPUT where tio_status_is_input_error(rc), else
 * TIO_EXIT_RUNTIME. */
int cli_exit_code(int rc);

/* 1 if stderr is a terminal (progress output goes there only then). */
int cli_stderr_is_tty(void);

/* Write a JSON string literal (with quotes and escapes) to f. */
void cli_json_string(FILE *f, const char *s);

/* Option helpers: parse a human size / rate / duration / number or report a usage error naming
 * the option (returns 0 or TIO_EXIT_USAGE). Numbers are always finite (nan, inf and overflows
 * are refused); rates are always above 0. The _pos variants also refuse 0, for options where 0
 * means nothing (a capacity, a count of layers, a scale): an option that has a default is
 * omitted, not set to 0. */
int cli_parse_bytes(const char *cmd, const char *opt, const char *text, uint64_t *out);
int cli_parse_bytes_pos(const char *cmd, const char *opt, const char *text, uint64_t *out);
int cli_parse_rate(const char *cmd, const char *opt, const char *text, double *out);
int cli_parse_u64(const char *cmd, const char *opt, const char *text, uint64_t *out);
int cli_parse_u64_pos(const char *cmd, const char *opt, const char *text, uint64_t *out);
int cli_parse_double(const char *cmd, const char *opt, const char *text, double *out);
int cli_parse_pos(const char *cmd, const char *opt, const char *text, double *out);
int cli_parse_duration_pos(const char *cmd, const char *opt, const char *text, double *seconds);

/* A flag option of a command's table: when given, *dst = value. */
struct cli_flag {
    const char *opt;
    int32_t *dst;
    int32_t value;
};

/* If arg is one of the n flags, set its dst and return 1; else 0. */
int cli_set_flag(const struct cli_flag *flags, size_t n, const char *arg);

/* An option of a command's table with a uint64_t value, parsed by one of the cli_parse_* functions
 * with that type (cli_parse_bytes, cli_parse_bytes_pos, cli_parse_u64, cli_parse_u64_pos). */
struct cli_u64_opt {
    const char *opt;
    int (*parse)(const char *cmd, const char *opt, const char *text, uint64_t *out);
    uint64_t *dst;
};

/* The entry of the n options named arg, or NULL. */
const struct cli_u64_opt *
cli_find_u64_opt(const struct cli_u64_opt *opts, size_t n, const char *arg);

#endif
