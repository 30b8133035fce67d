/* Human units in and out (teraio/units.h). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <teraio/units.h>

struct unit {
    const char *suffix;
    double scale;
};

/* Longest suffixes first so that "GiB" is not read as "G" + junk. */
static const struct unit byte_units[] = {
    { "KiB", 1024.0 },
    { "MiB", 1048576.0 },
    { "GiB", 1073741824.0 },
    { "TiB", 1099511627776.0 },
    { "PiB", 1125899906842624.0 },
    { "EiB", 1152921504606846976.0 }, /* tio_format_bytes prints it: it must parse */
    { "kB", 1e3 },
    { "KB", 1e3 },
    { "MB", 1e6 },
    { "GB", 1e9 },
    { "TB", 1e12 },
    { "PB", 1e15 },
    { "EB", 1e18 },
    { "k", 1e3 },
    { "K", 1e3 },
    { "M", 1e6 },
    { "G", 1e9 },
    { "T", 1e12 },
    { "P", 1e15 },
    { "E", 1e18 },
    { "B", 1.0 },
    { "", 1.0 },
};

static const struct unit time_units[] = {
    { "min", 60.0 }, { "ms", 1e-3 }, { "us", 1e-6 }, { "ns", 1e-9 },
    { "h", 3600.0 }, { "s", 1.0 },   { "", 1.0 },
};

/* The length of the decimal number at the start of s: [-+]? (digits [. digits?] | . digits)
 * ([eE] [-+]? digits)?, or 0 if s does not start with one. Only this grammar is a number: no
 * hexadecimal, "inf", "nan" or leading space, which strtod would take. */
static size_t decimal_len(const char *s) {
    size_t i = (*s == '-' || *s == '+') ? 1 : 0, digits = 0;
    for (; isdigit((unsigned char)s[i]); i++) {
        digits++;
    }
    if (s[i] == '.') {
        i++;
        for (; isdigit((unsigned char)s[i]); i++) {
            digits++;
        }
    }
    if (digits == 0) {
        return 0;
    }
    if (s[i] == 'e' || s[i] == 'E') {
        size_t j = i + 1 + ((s[i + 1] == '-' || s[i + 1] == '+') ? 1 : 0);
        if (isdigit((unsigned char)s[j])) {
            while (isdigit((unsigned char)s[j])) {
                j++;
            }
            i = j;
        }
    }
    return i;
}

/* Parse "<number>[<spaces><suffix>]" with a suffix from `units` into *out (the number times the
 * unit's scale) and *unit_scale. The number is decimal (decimal_len), finite and not negative;
 * spaces are allowed only between the number and a suffix. */
static int parse_scaled(const char *text,
                        const struct unit *units,
                        size_t n_units,
                        const char *what,
                        double *out,
                        double *unit_scale) {
    if (!text || !*text) {
        return tio_set_error(TIO_EINVAL, "%s: empty value", what);
    }
    size_t len = strlen(text);
    if (isspace((unsigned char)text[0]) || isspace((unsigned char)text[len - 1])) {
        return tio_set_error(TIO_EINVAL, "%s: '%s' starts or ends with a space", what, text);
    }
    size_t n = decimal_len(text);
    char *end = NULL;
    double v = n ? strtod(text, &end) : 0;
    if (n == 0 || end != text + n) {
        return tio_set_error(TIO_EINVAL, "%s: '%s' is not a decimal number with a unit", what,
                             text);
    }
    if (!isfinite(v)) {
        return tio_set_error(TIO_EINVAL, "%s: '%s' is too large", what, text);
    }
    while (*end == ' ') {
        end++;
    }
    for (size_t i = 0; i < n_units; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            if (v < 0) {
                return tio_set_error(TIO_EINVAL, "%s: '%s' is negative", what, text);
            }
            *out = v * units[i].scale;
            *unit_scale = units[i].scale;
            if (!isfinite(*out)) {
                return tio_set_error(TIO_EINVAL, "%s: '%s' is too large", what, text);
            }
            return 0;
        }
    }
    return tio_set_error(TIO_EINVAL, "%s: unknown unit '%s' in '%s'", what, end, text);
}

int tio_parse_bytes(const char *text, uint64_t *out) {
    double v = 0, scale = 1.0;
    int rc = parse_scaled(text, byte_units, sizeof byte_units / sizeof byte_units[0], "size", &v,
                          &scale);
    if (rc < 0) {
        return rc;
    }
    if (scale == 1.0 && v != floor(v)) { /* "1.5" or "1.5B": no unit rounds it */
        return tio_set_error(TIO_EINVAL, "size: '%s' is not a whole number of bytes", text);
    }
    if (v >= 18446744073709551616.0) {
        return tio_set_error(TIO_EINVAL, "size: '%s' is too large", text);
    }
    *out = (uint64_t)llround(v);
    return 0;
}

int tio_parse_rate(const char *text, double *bytes_per_s) {
    char buf[128];
    if (!text) {
        return tio_set_error(TIO_EINVAL, "rate: empty value");
    }
    size_t n = strlen(text);
    if (n >= sizeof buf) {
        return tio_set_error(TIO_EINVAL, "rate: value too long");
    }
    memcpy(buf, text, n + 1);
    /* Drop a trailing "/s" ("6.5GB/s") or "ps" after B ("6.5GBps"). */
    int per_s = n >= 2 && strcmp(buf + n - 2, "/s") == 0;
    int b_ps = n >= 3 && strcasecmp(buf + n - 2, "ps") == 0 && buf[n - 3] == 'B';
    if (per_s || b_ps) {
        buf[n - 2] = '\0';
    }
    double v = 0, scale = 1.0;
    int rc =
        parse_scaled(buf, byte_units, sizeof byte_units / sizeof byte_units[0], "rate", &v, &scale);
    if (rc < 0) {
        return rc;
    }
    *bytes_per_s = v;
    return 0;
}

int tio_parse_duration(const char *text, double *seconds) {
    double scale;
    return parse_scaled(text, time_units, sizeof time_units / sizeof time_units[0], "duration",
                        seconds, &scale);
}

const char *tio_format_bytes(uint64_t bytes, char *buf, size_t len) {
    static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    double v = (double)bytes;
    size_t i = 0;
    while (v >= 1024.0 && i + 1 < sizeof names / sizeof names[0]) {
        v /= 1024.0;
        i++;
    }
    if (i == 0) {
        (void)snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    } else {
        (void)snprintf(buf, len,
                       v >= 100  ? "%.0f %s"
                       : v >= 10 ? "%.1f %s"
                                 : "%.2f %s",
                       v, names[i]);
    }
    return buf;
}

const char *tio_format_rate(double bytes_per_s, char *buf, size_t len) {
    static const char *const names[] = { "B/s", "kB/s", "MB/s", "GB/s", "TB/s" };
    double v = bytes_per_s;
    size_t i = 0;
    while (v >= 1000.0 && i + 1 < sizeof names / sizeof names[0]) {
        v /= 1000.0;
        i++;
    }
    (void)snprintf(buf, len, "%.2f %s", v, names[i]);
    return buf;
}

const char *tio_format_duration(double seconds, char *buf, size_t len) {
    if (seconds < 1e-6) {
        (void)snprintf(buf, len, "%.0f ns", seconds * 1e9);
    } else if (seconds < 1e-3) {
        (void)snprintf(buf, len, "%.1f us", seconds * 1e6);
    } else if (seconds < 1.0) {
        (void)snprintf(buf, len, "%.2f ms", seconds * 1e3);
    } else if (seconds < 120.0) {
        (void)snprintf(buf, len, "%.2f s", seconds);
    } else {
        (void)snprintf(buf, len, "%.0f min %.0f s", floor(seconds / 60.0), fmod(seconds, 60.0));
    }
    return buf;
}
