/* Private: the trace file formats (trace_binary.c, trace_json.c), dispatched by trace_io.c. */
#ifndef TIO_TRACE_FORMAT_IMPL_H
#define TIO_TRACE_FORMAT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <teraio/trace.h>

/* Binary format constants (docs/trace-format.md). */
#define TIO_TRACE_MAGIC        "TIOTRACE"
#define TIO_TRACE_MAGIC_LEN    8
#define TIO_TRACE_BIN_VERSION  1u
#define TIO_TRACE_HEADER_BYTES 80u

/* At most this many metadata entries (builder and both readers): keeps the per-key duplicate
 * checks cheap on hostile input. */
#define TIO_TRACE_MAX_META 1024u

/* JSON format: the "format" and "version" members, and the largest document we parse (bytes). */
#define TIO_TRACE_JSON_FORMAT  "teraio-trace"
#define TIO_TRACE_JSON_VERSION 1
#define TIO_TRACE_JSON_MAX     (UINT64_C(1) << 32) /* 4 GiB */

/* tio_trace_load reads whole files up to this size (bytes). */
#define TIO_TRACE_FILE_MAX (UINT64_C(1) << 36) /* 64 GiB */

/* Readers: parse and fully validate `len` bytes; *out is a finished trace. 0 or TIO_E*. */
int tio_trace_read_binary(const void *data, size_t len, struct tio_trace **out);
int tio_trace_read_json(const void *data, size_t len, struct tio_trace **out);

/* tio_trace_binary_precheck: check a binary trace's header (its first TIO_TRACE_HEADER_BYTES
 * bytes) against the length of the whole input, before the rest is read: magic, version,
 * file_bytes == len, counts within the limits and consistent with len. 0 or TIO_E*. */
int tio_trace_binary_precheck(const void *header, uint64_t len);

/* Writers: serialize a finished trace into a tio_malloc'd buffer (*data, *len). 0 or TIO_E*. */
int tio_trace_write_binary(const struct tio_trace *tr, void **data, size_t *len);
int tio_trace_write_json(const struct tio_trace *tr, void **data, size_t *len);

/* tio_trace_utf8_valid: 1 if s[0..len) is well-formed UTF-8 (no overlongs, no surrogates,
 * nothing above U+10FFFF), else 0. JSON strings must be UTF-8, so every name is checked. */
int tio_trace_utf8_valid(const char *s, size_t len);

/* tio_trace_meta_key_valid: 1 if key matches [a-z0-9_.-]{1,64} (see tio_trace_set_meta). */
int tio_trace_meta_key_valid(const char *key, size_t len);

#endif
