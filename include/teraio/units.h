/*
 * teraio/units.h - human units in and out: "94GiB", "6.5GB/s", "10ms".
 *
 *     uint64_t cap;
 *     if (tio_parse_bytes("94GiB", &cap) < 0) ...          // 100931731456
 *     char buf[32];
 *     tio_format_bytes(cap, buf, sizeof buf);              // "94.0 GiB"
 *
 * Decimal prefixes (k, K, M, G, T, P, E with optional B) are powers of 1000, binary ones (KiB,
 * MiB, GiB, TiB, PiB, EiB) powers of 1024; every unit tio_format_bytes prints parses back. A bare
 * number is bytes (bytes/s for rates, seconds for times).
 *
 * The number is decimal only: digits with an optional fraction and exponent ("1.5", "2e9");
 * hexadecimal, "inf", "nan", a negative value and a leading or trailing space
 * are errors. Spaces may separate the number from its unit ("512 MiB"). A size without a unit
 * must be a whole number of bytes ("1.5" is refused; "1.5KiB" is 1536); with a unit it is
 * rounded to the nearest byte and must be below 2^64 (16 EiB).
 */
#ifndef TERAIO_UNITS_H
#define TERAIO_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tio_parse_bytes: "4096", "1.5GB", "94GiB", "512 MiB". Returns 0, or TIO_EINVAL (detail in
 * tio_last_error) for an empty string, an unknown suffix, a negative value or an overflow. */
TIO_API TIO_MUST_CHECK int tio_parse_bytes(const char *text, uint64_t *out);

/* tio_parse_rate: bytes per second: "6.5GB/s", "16 GiB/s", "1e9" (the "/s" is optional). */
TIO_API TIO_MUST_CHECK int tio_parse_rate(const char *text, double *bytes_per_s);

/* tio_parse_duration: seconds from "10ms", "2.5s", "300us", "15ns", "1min", "1h" or a bare
 * number of seconds. */
TIO_API TIO_MUST_CHECK int tio_parse_duration(const char *text, double *seconds);

/* tio_format_bytes: "512 B", "1.50 MiB", "94.0 GiB" into buf (always NUL-terminated);
 * returns buf. */
TIO_API const char *tio_format_bytes(uint64_t bytes, char *buf, size_t len);

/* tio_format_rate: "6.50 GB/s" (decimal, as disks are sold) into buf; returns buf. */
TIO_API const char *tio_format_rate(double bytes_per_s, char *buf, size_t len);

/* tio_format_duration: "850 ns", "12.3 us", "4.56 ms", "1.23 s", "2 min 3 s"; returns buf. */
TIO_API const char *tio_format_duration(double seconds, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
