/* The one command-line parser of every subcommand: a table of options (struct cli_opt), values
 * read by the library's unit parsers (teraio/units.h) and checked against each option's limits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/status.h>
#include <teraio/units.h>

#include "cli.h"

static const char *const kind_example[] = {
    [CLI_FLAG] = "",
    [CLI_TEXT] = "",
    [CLI_LIST] = "a,b",
    [CLI_BYTES] = "94GiB, 512MB, 4096",
    [CLI_COUNT] = "8",
    [CLI_NUMBER] = "0.5, 2, 1e3",
    [CLI_RATE] = "6.5GB/s, 16GiB/s",
    [CLI_DURATION] = "10ms, 500us, 1s",
    [CLI_CALL] = "",
};
_Static_assert(sizeof kind_example / sizeof kind_example[0] == CLI_KIND_COUNT, "one per kind");

/* A limit as the user would write it, in the option's unit. */
static const char *limit_text(int32_t kind, double v, char *buf, size_t len) {
    if (kind == CLI_BYTES) {
        return tio_format_bytes((uint64_t)v, buf, len);
    }
    if (kind == CLI_RATE) {
        return tio_format_rate(v, buf, len);
    }
    if (kind == CLI_DURATION && v >= 365.25 * 86400) {
        (void)snprintf(buf, len, "%.15g years", v / (365.25 * 86400));
        return buf;
    }
    if (kind == CLI_DURATION) {
        return tio_format_duration(v, buf, len);
    }
    (void)snprintf(buf, len, "%.15g", v);
    return buf;
}

/* v against o's limits [min, max] (exclusive min when o->min_excl). 0 or TIO_EXIT_USAGE. */
static int check_limits(const char *cmd, const struct cli_opt *o, const char *text, double v) {
    int low = o->min_excl ? !(v > o->min) : !(v >= o->min);
    if (!low && !(v > o->max)) {
        return 0;
    }
    char a[48], b[48];
    cli_error(cmd, "%s: '%s' is out of range: %s %s to %s", o->name, text,
              o->min_excl ? "more than" : "from", limit_text(o->kind, o->min, a, sizeof a),
              limit_text(o->kind, o->max, b, sizeof b));
    return TIO_EXIT_USAGE;
}

/* A whole number without sign, spaces or hexadecimal, below 2^64. 0 or TIO_EXIT_USAGE. */
static int parse_count(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    uint64_t v = 0;
    const char *p = text;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) {
            cli_error(cmd, "%s: '%s' is too large", opt, text);
            return TIO_EXIT_USAGE;
        }
        v = v * 10 + d;
    }
    if (p == text || *p) {
        cli_error(cmd, "%s: '%s' is not a whole number (e.g. %s)", opt, text,
                  kind_example[CLI_COUNT]);
        return TIO_EXIT_USAGE;
    }
    *out = v;
    return 0;
}

/* A decimal number without unit: the library's grammar (tio_parse_duration of a bare number),
 * so that "0x10", "inf", "nan" and spaces are refused as in every other value. */
static int parse_number(const char *cmd, const char *opt, const char *text, double *out) {
    if (text[strspn(text, "0123456789.eE+-")] != '\0' || tio_parse_duration(text, out) < 0) {
        cli_error(cmd, "%s: '%s' is not a decimal number (e.g. %s)", opt, text,
                  kind_example[CLI_NUMBER]);
        return TIO_EXIT_USAGE;
    }
    return 0;
}

/* Split text at commas into l's buffer; every element non-empty and without spaces at its
 * ends. 0 or TIO_EXIT_USAGE. */
static int parse_list(const char *cmd, const char *opt, const char *text, struct cli_list *l) {
    size_t len = strlen(text);
    if (len >= l->buflen) {
        cli_error(cmd, "%s: the list is longer than %zu characters", opt, l->buflen - 1);
        return TIO_EXIT_USAGE;
    }
    memcpy(l->buf, text, len + 1);
    l->n = 0;
    for (char *item = l->buf;;) {
        char *comma = strchr(item, ',');
        if (comma) {
            *comma = '\0';
        }
        size_t n = strlen(item);
        if (n == 0 || item[0] == ' ' || item[n - 1] == ' ') {
            cli_error(cmd, "%s: '%s' has an empty element or one with spaces around it", opt, text);
            return TIO_EXIT_USAGE;
        }
        if (l->n == l->max) {
            cli_error(cmd, "%s: at most %zu elements", opt, l->max);
            return TIO_EXIT_USAGE;
        }
        l->items[l->n++] = item;
        if (!comma) {
            return 0;
        }
        item = comma + 1;
    }
}

/* The value `text` of option o into o->dst. 0 or an exit code. */
static int take_value(const char *cmd, const struct cli_opt *o, const char *text, void *ctx) {
    if (!*text) {
        cli_error(cmd, "%s: empty value", o->name);
        return TIO_EXIT_USAGE;
    }
    int rc = 0;
    double v = 0;
    switch (o->kind) {
    case CLI_TEXT:
        *(const char **)o->dst = text;
        return 0;
    case CLI_LIST:
        return parse_list(cmd, o->name, text, o->dst);
    case CLI_CALL:
        return o->call(ctx, o->name, text);
    case CLI_COUNT:
        if ((rc = parse_count(cmd, o->name, text, o->dst)) == 0) {
            v = (double)*(uint64_t *)o->dst;
        }
        break;
    case CLI_BYTES:
        rc = tio_parse_bytes(text, o->dst) < 0 ? TIO_EXIT_USAGE : 0;
        v = rc ? 0 : (double)*(uint64_t *)o->dst;
        break;
    case CLI_NUMBER:
        rc = parse_number(cmd, o->name, text, o->dst);
        v = rc ? 0 : *(double *)o->dst;
        break;
    case CLI_RATE:
        rc = tio_parse_rate(text, o->dst) < 0 ? TIO_EXIT_USAGE : 0;
        v = rc ? 0 : *(double *)o->dst;
        break;
    case CLI_DURATION:
        rc = tio_parse_duration(text, o->dst) < 0 ? TIO_EXIT_USAGE : 0;
        v = rc ? 0 : *(double *)o->dst;
        break;
    default:
        rc = TIO_EXIT_USAGE;
        break;
    }
    if (rc && (o->kind == CLI_BYTES || o->kind == CLI_RATE || o->kind == CLI_DURATION)) {
        cli_error(cmd, "%s: %s (e.g. %s)", o->name, tio_last_error(), kind_example[o->kind]);
    }
    return rc ? rc : check_limits(cmd, o, text, v);
}

/* The option named by arg ("--name", "--name=value" or the alias), or NULL. *inline_value is
 * the text after '=' or NULL. */
static const struct cli_opt *
find_opt(const struct cli_spec *s, const char *arg, const char **inline_value) {
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    for (size_t i = 0; i < s->n_opts; i++) {
        const struct cli_opt *o = &s->opts[i];
        if ((strlen(o->name) == len && strncmp(o->name, arg, len) == 0) ||
            (o->alias && !eq && strcmp(o->alias, arg) == 0)) {
            *inline_value = eq ? eq + 1 : NULL;
            return o;
        }
    }
    return NULL;
}

/* A positional argument into s->pos. 0 or TIO_EXIT_USAGE. */
static int take_positional(struct cli_spec *s, const char *arg) {
    if (s->n_pos == s->max_pos) {
        cli_error(s->cmd, "unexpected argument '%s' (%s; see teraio %s --help)", arg,
                  s->pos_hint ? s->pos_hint : "no more arguments", s->cmd);
        return TIO_EXIT_USAGE;
    }
    if (!*arg) {
        cli_error(s->cmd, "an argument is empty (see teraio %s --help)", s->cmd);
        return TIO_EXIT_USAGE;
    }
    s->pos[s->n_pos++] = arg;
    return 0;
}

int cli_parse_args(struct cli_spec *s, int argc, char **argv, int first, void *ctx) {
    int only_pos = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *inline_value = NULL;
        if (only_pos || a[0] != '-' || a[1] == '\0') {
            int rc = take_positional(s, a);
            if (rc) {
                return rc;
            }
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            s->usage(stdout);
            return CLI_HELP_SHOWN;
        }
        const struct cli_opt *o = find_opt(s, a, &inline_value);
        if (!o) {
            cli_error(s->cmd, "unknown option '%s' (see teraio %s --help)", a, s->cmd);
            return TIO_EXIT_USAGE;
        }
        if (o->kind == CLI_FLAG) {
            if (inline_value) {
                cli_error(s->cmd, "%s takes no value (see teraio %s --help)", o->name, s->cmd);
                return TIO_EXIT_USAGE;
            }
            *(int *)o->dst = o->value;
            continue;
        }
        if (!inline_value && i + 1 >= argc) {
            cli_error(s->cmd, "%s needs a value (see teraio %s --help)", o->name, s->cmd);
            return TIO_EXIT_USAGE;
        }
        int rc = take_value(s->cmd, o, inline_value ? inline_value : argv[++i], ctx);
        if (rc) {
            return rc;
        }
    }
    return 0;
}

int cli_value_rate(const char *cmd, const char *opt, const char *text, double *out) {
    double v = 0;
    struct cli_opt o = { .name = opt, .kind = CLI_RATE, .dst = &v, CLI_LIMITS_RATE };
    int rc = take_value(cmd, &o, text, NULL);
    if (rc == 0) {
        *out = v;
    }
    return rc;
}
