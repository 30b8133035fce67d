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

/*
 * The one argument parser (cli_args.c). Each command describes its options in a table:
 *
 *     uint64_t cap = 0; int json = 0; const char *pos[1];
 *     const struct cli_opt opts[] = {
 *         { .name = "--capacity", .kind = CLI_BYTES, .dst = &cap, CLI_LIMITS_MEMORY },
 *         { .name = "--json", .kind = CLI_FLAG, .dst = &json, .value = 1 },
 *     };
 *     struct cli_spec s = { "analyze", opts, 2, usage, pos, 1, 0, "one trace per run" };
 *     int rc = cli_parse_args(&s, argc, argv, 1, NULL);  // CLI_HELP_SHOWN, 0 or an exit code
 *
 * Options are "--name VALUE", "--name=VALUE" or the alias ("-o VALUE"); "--help"/"-h" prints the
 * usage; "--" ends the options; an argument starting with '-' that is no option is an error;
 * a repeated option keeps its last value. Values are read by the library's parsers
 * (teraio/units.h: decimal numbers only, no hexadecimal, inf, nan or spaces at either end) and
 * must lie within the option's limits [min, max] (min excluded when min_excl), in bytes, B/s,
 * seconds or plain numbers. An empty value, an empty list element and an empty argument are
 * refused. Every refusal is a usage error (TIO_EXIT_USAGE) whose message names the option.
 */
enum cli_kind {
    CLI_FLAG,     /* no value: *(int *)dst = value */
    CLI_TEXT,     /* non-empty text: *(const char **)dst (a name or a path) */
    CLI_LIST,     /* comma-separated non-empty elements: struct cli_list *dst */
    CLI_BYTES,    /* a size (tio_parse_bytes): *(uint64_t *)dst */
    CLI_COUNT,    /* a whole decimal number: *(uint64_t *)dst */
    CLI_NUMBER,   /* a decimal number without unit: *(double *)dst */
    CLI_RATE,     /* bytes per second (tio_parse_rate): *(double *)dst */
    CLI_DURATION, /* seconds (tio_parse_duration): *(double *)dst */
    CLI_CALL,     /* call(ctx, name, value): 0 or an exit code (it reports its own errors) */
    CLI_KIND_COUNT
};

struct cli_opt {
    const char *name;  /* "--capacity" */
    const char *alias; /* "-o", or NULL */
    int32_t kind;      /* enum cli_kind */
    void *dst;
    double min, max; /* limits of a number, size, rate or time (bytes, B/s, s), inclusive */
    int min_excl;    /* 1: the value must be above min */
    int value;       /* CLI_FLAG: what *dst becomes */
    int (*call)(void *ctx, const char *opt, const char *text);
};

/* A CLI_LIST destination: items point into buf. */
struct cli_list {
    const char **items;
    size_t max, n;
    char *buf;
    size_t buflen;
};

struct cli_spec {
    const char *cmd;            /* "plan": in messages */
    const struct cli_opt *opts; /* the command's options */
    size_t n_opts;
    void (*usage)(FILE *f); /* --help */
    const char **pos;       /* positional arguments, in order */
    size_t max_pos, n_pos;
    const char *pos_hint; /* why another positional argument is wrong */
};

#define CLI_HELP_SHOWN  (-1)
#define TIO_CLI_STR_(x) #x
#define TIO_CLI_STR(x)  TIO_CLI_STR_(x) /* a number macro as a string literal */

/* The documented limits (docs/user-guide.md, "Values and limits"). */
#define CLI_MAX_MEMORY           1125899906842624.0 /* 1 PiB: a GPU, host or disk capacity */
#define CLI_LIMITS_SIZE          .min = 0, .max = 18446744073709551615.0
#define CLI_LIMITS_MEMORY        .min = 1, .max = CLI_MAX_MEMORY
#define CLI_LIMITS_RATE          .min = 1e3, .max = 1e15 /* 1 kB/s to 1 PB/s */
#define CLI_LIMITS_SCALE         .min = 1e-6, .max = 1e6 /* a multiplier of bandwidths */
#define CLI_LIMITS_COUNT(lo, hi) .min = (lo), .max = (hi)

/* Parse argv[first..argc) against s. Returns 0, CLI_HELP_SHOWN (usage printed: exit 0) or an
 * exit code; s->n_pos is the number of positional arguments found. ctx goes to CLI_CALL. */
int cli_parse_args(struct cli_spec *s, int argc, char **argv, int first, void *ctx);

/* One rate (a CLI_RATE option's text with CLI_LIMITS_RATE), for list elements. 0 or
 * TIO_EXIT_USAGE. */
int cli_value_rate(const char *cmd, const char *opt, const char *text, double *out);

#endif
