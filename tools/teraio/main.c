/* teraio: command-line front end. Thin: parse arguments, call the library, print. */
#include <stdio.h>
#include <string.h>

#include <teraio/version.h>

#include "cli.h"

struct command {
    const char *name; /* as typed: "bench-io" */
    int (*fn)(int, char **);
    const char *help;
};

static int cli_name_eq(const char *typed, const char *ident) {
    /* "bench-io" on the command line is cli_cmd_bench_io in C. */
    for (; *typed && *ident; typed++, ident++) {
        int a = *typed == '-' ? '_' : *typed;
        if (a != *ident) {
            return 0;
        }
    }
    return *typed == '\0' && *ident == '\0';
}

#define TIO_CLI_ENTRY(name, help) { #name, cli_cmd_##name, help },
static const struct command commands[] = { TIO_CLI_COMMANDS(TIO_CLI_ENTRY) };
#undef TIO_CLI_ENTRY

static void print_name(FILE *f, const char *ident) {
    for (const char *p = ident; *p; p++) {
        (void)fputc(*p == '_' ? '-' : *p, f);
    }
}

static void usage(FILE *f) {
    (void)fprintf(
        f, "usage: teraio <command> [options]   (teraio <command> --help for details)\n\n"
           "teraio plans and executes tensor offloading for LLM training: it moves inactive\n"
           "tensors from GPU memory to host memory and NVMe SSDs and back just in time.\n\n"
           "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (!commands[i].fn) {
            continue;
        }
        (void)fprintf(f, "  ");
        print_name(f, commands[i].name);
        int pad = 12 - (int)strlen(commands[i].name);
        (void)fprintf(f, "%*s %s\n", pad > 0 ? pad : 1, "", commands[i].help);
    }
    (void)fprintf(f, "\nexamples:\n"
                     "  teraio model --preset llama3-8b -o llama3-8b.tio\n"
                     "  teraio analyze llama3-8b.tio\n"
                     "  teraio simulate llama3-8b.tio --hw paper-2xh100nvl --policy teraio "
                     "--json\n\n" TIO_CLI_EXIT_HELP);
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? TIO_EXIT_USAGE : TIO_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("teraio %s\n", tio_version());
        return TIO_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (cli_name_eq(argv[1], commands[i].name)) {
            if (!commands[i].fn) {
                (void)fprintf(stderr, "teraio: command '%s' is not part of this build\n", argv[1]);
                return TIO_EXIT_USAGE;
            }
            return commands[i].fn(argc - 1, argv + 1);
        }
    }
    (void)fprintf(stderr, "teraio: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return TIO_EXIT_USAGE;
}
